// The soak benchmark: the page trains the default network for at least
// 100,000 steps (and at least a minute) on each engine, pinned, while the
// JS heap and the WebAssembly memory are sampled every 10 s. The network and
// data are the default experiment's, trained with SGD and momentum (a link,
// `#e=`). The default AdamW run fits the spiral to a loss near 0 and then
// spikes, as Adam does after convergence, and the page's spike detector
// pauses it again and again, which would stop a soak. It reports each series with its least-squares slope, so
// memory that grows with the steps shows as a slope above zero. Not part of
// the test command: it takes minutes, and its figures are a report.
//
//   node bench/soak.mjs [--steps 100000] [--every 10] [--out ../../bench/soak-swiftshader.md]
import fs from 'node:fs';
import os from 'node:os';
import { adapterName, launch, serve } from './browser.mjs';

const args = process.argv.slice(2);
const flag = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const target = Number(flag('--steps', 100_000));
const every = Number(flag('--every', 10));
const minSeconds = Number(flag('--min-seconds', 60));
const out = flag('--out', null);
const MB = 1024 * 1024;
// The default experiment (app/src/model/edit.rs) with SGD and momentum.
const EXPERIMENT = {
  seed: 1,
  model: { inputs: 2, layers: [{ units: 16, activation: 'tanh' }, { units: 16, activation: 'tanh' }, { units: 1, activation: 'linear' }] },
  loss: 'bce_with_logits', optimizer: { kind: 'sgd', lr: 0.05, momentum: 0.9 }, batch_size: 32,
  data: { source: 'spiral', samples: 500, noise: 0.1, train_fraction: 0.5, features: ['x1', 'x2'], shuffle: true },
};

// Least-squares slope of y over x.
const slope = (xs, ys) => {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  const sxx = xs.reduce((a, x) => a + (x - mx) ** 2, 0);
  return sxx === 0 ? 0 : xs.reduce((a, x, i) => a + (x - mx) * (ys[i] - my), 0) / sxx;
};

const { server, root } = await serve();
const browser = await launch(['--enable-precise-memory-info', '--js-flags=--expose-gc']);
const lines = [];
try {
  let adapter = '';
  const results = [];
  for (const engine of ['cpu', 'gpu']) {
    const page = await browser.newPage();
    page.on('pageerror', (e) => console.error(`page error: ${e}`));
    await page.goto(`${root}?engine=${engine}#e=${encodeURIComponent(JSON.stringify(EXPERIMENT))}`);
    await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 120_000 });
    adapter ||= await adapterName(page);
    const backend = (await page.getByTestId('backend-name').textContent()).trim();
    await page.getByTestId('train-toggle').click();
    const started = Date.now();
    const samples = [];
    const pauses = [];
    for (;;) {
      await page.waitForTimeout(every * 1000);
      const s = await page.evaluate(() => {
        globalThis.gc?.(); // the heap after a collection: what is kept, not what awaits collection
        return {
          steps: Number(document.querySelector('[data-testid=step-count]').textContent),
          heap: performance.memory.usedJSHeapSize,
          wasm: window.wasmBindings.stepscope_wasm_memory_bytes(),
          alert: document.querySelector('[data-testid=alert]')?.textContent ?? '',
        };
      });
      s.t = (Date.now() - started) / 1000;
      samples.push(s);
      console.log(`${engine} ${s.t.toFixed(0)} s: step ${s.steps}, JS heap ${(s.heap / MB).toFixed(1)} MB, wasm ${(s.wasm / MB).toFixed(1)} MB${s.alert ? `, alert: ${s.alert}` : ''}`);
      if (s.steps >= target && s.t >= minSeconds) break;
      if (s.t > 1800) throw new Error(`${engine}: ${s.steps} steps after 30 min`);
      // The page pauses itself on a loss spike (a converged AdamW run does
      // spike): note it, and train on, as a user pressing Train would.
      if (/Train/.test(await page.getByTestId('train-toggle').textContent())) {
        pauses.push(`step ${s.steps}: ${s.alert.replace(/Back to the last good checkpoint.*$/, '').trim()}`);
        console.log(`${engine}: paused at step ${s.steps}; training on`);
        await page.getByRole('button', { name: 'Dismiss message' }).click().catch(() => {});
        await page.getByTestId('train-toggle').click();
      }
    }
    await page.getByTestId('train-toggle').click();
    await page.close();
    // Slopes over the second half (warm-up, first allocations and the
    // engine race are over), in MB per 100,000 steps.
    const tail = samples.slice(Math.floor(samples.length / 2));
    const per = (key) => 100_000 * slope(tail.map((s) => s.steps), tail.map((s) => s[key] / MB));
    results.push({ engine, backend, samples, pauses, heapSlope: per('heap'), wasmSlope: per('wasm') });
  }
  lines.push('# Soak: memory over a long run in the browser', '',
    `- machine: ${os.cpus()[0]?.model ?? 'unknown'}, ${os.cpus().length} cores`,
    `- browser: Chromium ${browser.version()} (headless); WebGPU adapter: ${adapter}`,
    `- run: the default network and data with SGD (lr 0.05, momentum 0.9), pinned to each engine (\`?engine=cpu|gpu\`), trained for at least ${target.toLocaleString('en')} steps and ${minSeconds} s; JS heap (\`performance.memory.usedJSHeapSize\` after a collection) and WebAssembly memory sampled every ${every} s`,
    '- slope: least squares over the second half of the samples, in MB per 100,000 steps (0 is flat; the WebAssembly memory can only grow)', '');
  for (const r of results) {
    const last = r.samples[r.samples.length - 1];
    lines.push(`## ${r.engine}: ${r.backend}`, '',
      `${last.steps.toLocaleString('en')} steps in ${last.t.toFixed(0)} s. Slope: JS heap ${r.heapSlope.toFixed(3)} MB, WebAssembly memory ${r.wasmSlope.toFixed(3)} MB per 100,000 steps.`, '',
      ...(r.pauses.length ? [`The page paused itself ${r.pauses.length} time(s), each resumed by the script:`, '', ...r.pauses.map((p) => `- ${p}`), ''] : []),
      '| time (s) | steps | JS heap (MB) | WebAssembly memory (MB) |', '|---|---|---|---|',
      ...r.samples.map((s) => `| ${s.t.toFixed(0)} | ${s.steps} | ${(s.heap / MB).toFixed(2)} | ${(s.wasm / MB).toFixed(2)} |`), '');
  }
  const report = lines.join('\n');
  console.log(`\n${report}`);
  if (out) fs.writeFileSync(out, report);
} finally {
  await browser.close();
  server.close();
}
