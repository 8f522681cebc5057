// The default transformer as a newcomer meets it (issue 28, "A default a
// newcomer sees learn"): the page opened, the model switch set to gpt,
// Train pressed, and every 5 s for SECONDS (default 180) the step, tokens/s,
// the validation loss and the share of the current sample's words found in
// the training text (`gpt_words.mjs`). A measurement, not a test:
//   node tests/e2e/bench/gpt_page.mjs [SECONDS] [EXPERIMENT-JSON]
// prints a Markdown table for bench/page-gpt.md. EXPERIMENT-JSON replaces
// the default (to compare candidates on the same machine).
import { serve, launch, adapterName } from './browser.mjs';
import { wordShare } from './gpt_words.mjs';
import os from 'node:os';

const seconds = Number(process.argv[2] ?? 180);
const candidate = process.argv[3];
const { server, root } = await serve();
const browser = await launch();
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
const settled = () => page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true',
  null, { timeout: 90_000 });
await page.goto(root);
await settled();
if (candidate) {
  await page.goto(`${root}#e=${encodeURIComponent(candidate)}`);
  await page.reload();
} else {
  await page.getByTestId('model-kind').selectOption('gpt');
}
await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.kind === 'gpt');
await settled();
const e = await page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))));
const engine = await page.getByTestId('backend-name').textContent();
await page.getByTestId('train-toggle').click();
const started = Date.now();
const rows = [];
let firstUnder2 = null;
let firstWords = null;
while ((Date.now() - started) / 1000 < seconds) {
  await page.waitForTimeout(5000);
  const read = await page.evaluate(() => ({
    step: Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')),
    tokens: Number(document.querySelector('[data-testid=tokens-per-second]')?.textContent.replace(/,/g, '')),
    val: Number.parseFloat(document.querySelector('[data-testid=val-loss]')?.dataset.value),
    sample: [...document.querySelectorAll('[data-testid=sample-text] .sampled')].map((s) => s.textContent).join(''),
    sampleStep: document.querySelector('[data-testid=sample-caption]')?.textContent.match(/step (\d+)/)?.[1],
  }));
  const t = (Date.now() - started) / 1000;
  const share = wordShare(read.sample);
  rows.push({ t, ...read, share });
  if (firstUnder2 === null && read.val <= 2.0) firstUnder2 = t;
  if (firstWords === null && share.words >= 10 && share.found >= 0.5) firstWords = t;
  console.error(`${t.toFixed(0)} s: step ${read.step}, ${read.tokens} tokens/s, val ${read.val}, words ${(100 * share.found).toFixed(0)} % of ${share.words}`);
}
const last = rows[rows.length - 1];
console.log(`Model: ${JSON.stringify(e.model)}, batch ${e.batch_size}, ${e.optimizer.kind} lr ${e.optimizer.lr}`);
console.log(`Engine: ${engine}; WebGPU adapter: ${await adapterName(page)}; machine: ${os.cpus()[0].model}, ${os.cpus().length} cores`);
console.log(`Validation loss ≤ 2.0 after: ${firstUnder2 === null ? `not within ${seconds} s` : `${firstUnder2.toFixed(0)} s`}; `
  + `half the sample's words are the text's after: ${firstWords === null ? 'never' : `${firstWords.toFixed(0)} s`}`);
console.log('\n| s | step | tokens/s | val-loss | sample words in the text |\n|---|---|---|---|---|');
for (const r of rows.filter((_, i) => i % 2 === 1 || i === rows.length - 1)) {
  console.log(`| ${r.t.toFixed(0)} | ${r.step} | ${r.tokens} | ${r.val.toFixed(3)} | ${(100 * r.share.found).toFixed(0)} % of ${r.share.words} |`);
}
console.log(`\nThe last sample (step ${last.sampleStep}):\n\n\`\`\`\n${last.sample}\n\`\`\``);
await browser.close();
server.close();
