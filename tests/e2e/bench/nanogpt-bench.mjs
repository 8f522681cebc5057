// GenAI NanoGPT (npm `@genai-fi/nanogpt`, a TF.js nanoGPT that trains in
// the browser) training the page's default transformer's shape, for
// ranks_nanogpt.mjs; bundled with esbuild, nothing from a CDN. Only the
// package's public API: TeachableLLM.selectBackend and create,
// tokenise.CharTokeniser, data.MemoryConversationStream, training.job and
// its progress events.
//
// window.nanogptBench({ backend, text, seconds }) → { tokens_per_second,
// steps, backend, loss }: the same sizes as Stepscope's default (3 blocks ×
// 4 heads × 96, context 64, batch 16, AdamW at 6e-3, betas 0.9/0.99, weight
// decay 0.1, no dropout). What differs is the package's own model (its v1:
// RMSNorm, no biases, tied head, learned positions) and its data order
// (consecutive 64-token chunks); the vocabulary is the text's characters
// and the `<eos>` the package wraps texts in. The trainer reads the loss
// back every 200 ms; the steps between two such readings are timed, so
// queued GPU work is counted.
import { TeachableLLM, tokenise, data } from '@genai-fi/nanogpt';

window.nanogptBench = async ({ backend, text, seconds }) => {
  await TeachableLLM.selectBackend(backend);
  const used = globalThis._tfengine?.backendName;
  if (used !== backend) throw new Error(`TF.js runs on ${used}, not ${backend}`);
  const vocab = ['<eos>', ...Array.from(new Set(text)).sort()];
  const config = { modelType: 'GenAI_NanoGPT_v1', useRope: false, vocabSize: vocab.length, blockSize: 64, nLayer: 3, nHead: 4, nEmbed: 96, mlpFactor: 4 };
  const model = TeachableLLM.create(new tokenise.CharTokeniser(vocab), config);
  await new Promise((ok, fail) => {
    model.on('loaded', ok);
    model.on('error', (e) => fail(e instanceof Error ? e : new Error(String(e))));
  });
  const options = {
    method: { type: 'pretraining' }, batchSize: 16, learningRate: 6e-3, beta1: 0.9, beta2: 0.99,
    weightDecay: 0.1, warmupSteps: 0, dropout: 0, logInterval: 200,
  };
  const timed = await new Promise((ok, fail) => {
    let first = null;
    let last = null;
    const end = (err) => (err ? fail(err) : ok({ first, last }));
    model.training.on('progress', (job) => {
      const entry = job.history?.[job.history.length - 1];
      if (!entry) return;
      const reading = { t: performance.now(), step: entry.step, loss: entry.trainingMetrics.loss };
      // The first reading ends the warm-up (the package's first pass and
      // the steps before it).
      if (!first) first = reading;
      else last = reading;
      if (last && last.t - first.t >= seconds * 1000) model.training.cancel(job.id);
    });
    model.training.on('cancelled', () => end());
    model.training.on('completed', () => end());
    model.training.on('error', (_, e) => end(e instanceof Error ? e : new Error(String(e))));
    model.training.job(options, [new data.MemoryConversationStream([[{ role: 'text', content: text }]])],
      [{ id: 'shakespeare', name: 'shakespeare', conversational: false }]).catch(end);
  });
  model.dispose();
  const { first, last } = timed;
  if (!first || !last) throw new Error('fewer than two readings of the loss: train longer');
  const steps = last.step - first.step;
  return { tokens_per_second: (steps * 16 * 64) / ((last.t - first.t) / 1000), steps, backend: used, loss: last.loss };
};
