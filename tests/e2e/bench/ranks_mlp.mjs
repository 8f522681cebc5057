// The MLP on ranks in the page (issue 40) against TensorFlow.js's wasm
// backend with its threads, in one headless Chromium session: workload W2
// (64-256-256-10 ReLU, batch 256, Adam at lr 0.01; stepscope_core::workloads)
// trained by the page on the 8×8 digits (64 inputs, 10 classes; its speed
// does not depend on the rows' values) in 8 shards on 1 and on R rank
// workers, and TF.js wasm on the workload's own rows with 1 and R threads.
// Alternating rounds of SECONDS each; steps/s. A measurement, not a test:
//   node tests/e2e/bench/ranks_mlp.mjs [SECONDS] [R] [ROUNDS]
// prints a Markdown table for bench/ranks.md.
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { launch, serve } from './browser.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const seconds = Number(process.argv[2] ?? 15);
const ranks = Number(process.argv[3] ?? 2);
const rounds = Number(process.argv[4] ?? 2);
const wasmDir = path.resolve(here, '../node_modules/@tensorflow/tfjs-backend-wasm/dist');
const bundle = path.join(here, 'dist/tfjs-bench.js');
await esbuild.build({ entryPoints: [path.join(here, 'tfjs-bench.mjs')], bundle: true, format: 'iife', outfile: bundle, logLevel: 'warning' });
const { server, root } = await serve((p) => {
  if (p === '/tfjs/tfjs-bench.js') return bundle;
  if (p.startsWith('/tfjs-wasm/')) return path.join(wasmDir, path.basename(p));
  return null;
});
const browser = await launch();

const W2 = {
  seed: 1,
  model: { inputs: 64, layers: [{ units: 256, activation: 'relu' }, { units: 256, activation: 'relu' }, { units: 10, activation: 'linear' }] },
  loss: 'cross_entropy',
  optimizer: { kind: 'adam', lr: 0.01 },
  batch_size: 256,
  shards: 8,
  data: { source: 'digits', train_fraction: 0.8 },
};

async function page(r) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(`${root}?engine=cpu&ranks=${r}#e=${encodeURIComponent(JSON.stringify(W2))}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90_000 });
  const step = () => page.evaluate(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')));
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 5, null, { timeout: 90_000 });
  const [s0, t0] = [await step(), Date.now()];
  await page.waitForTimeout(seconds * 1000);
  const [s1, t1] = [await step(), Date.now()];
  const inUse = await page.evaluate(() => document.querySelector('[data-testid=ranks]')?.dataset.value);
  const reason = await page.evaluate(() => document.querySelector('[data-testid=ranks-reason]')?.textContent ?? '');
  await page.getByTestId('train-toggle').click();
  await page.close();
  const rate = (s1 - s0) / ((t1 - t0) / 1000);
  console.error(`Stepscope W2, ${r} rank(s) asked, ${inUse} in use${reason ? ` (${reason})` : ''}: ${rate.toFixed(1)} steps/s`);
  return { side: `stepscope-${r}`, rate, inUse };
}

async function tfjs(threads) {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error(`page error: ${e}`));
  await page.goto(`${root}?bench`);
  await page.waitForFunction(() => window.wasmBindings?.stepscope_bench_workload, null, { timeout: 60_000 });
  await page.addScriptTag({ url: '/tfjs/tfjs-bench.js' });
  const r = await page.evaluate(({ seconds, threads }) => window.tfBench({
    backend: 'wasm', workload: window.wasmBindings.stepscope_bench_workload('W2'), seconds, threads,
  }), { seconds, threads });
  console.error(`TF.js wasm W2, ${threads} thread(s) asked, ${r.threads} in use (threaded build: ${r.multithread}; isolated: ${await page.evaluate(() => window.crossOriginIsolated).catch(() => '?')}): ${r.steps_per_second.toFixed(1)} steps/s`);
  await page.close();
  return { side: `tfjs-${threads}`, rate: r.steps_per_second, inUse: r.threads };
}

const results = [];
for (let i = 0; i < rounds; i++) {
  results.push(await page(1), await page(ranks), await tfjs(1), await tfjs(ranks));
}
const med = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rate = (side) => med(results.filter((x) => x.side === side).map((x) => x.rate));
console.log(`Machine: ${os.cpus()[0].model}, ${os.cpus().length} cores; headless Chromium, the page cross-origin isolated; ${rounds} alternating rounds of ${seconds} s, medians.\n`);
console.log('| W2 on | ranks in use, or the threads TF.js reports in its pool | steps/s (each round) | median |\n|---|---|---|---|');
for (const [side, name] of [['stepscope-1', 'Stepscope, 1 rank'], [`stepscope-${ranks}`, `Stepscope, ${ranks} ranks`], ['tfjs-1', 'TF.js wasm, 1 thread'], [`tfjs-${ranks}`, `TF.js wasm, ${ranks} threads`]]) {
  const mine = results.filter((x) => x.side === side);
  if (mine.length === 0) continue;
  console.log(`| ${name} | ${mine[0].inUse} | ${mine.map((x) => x.rate.toFixed(1)).join(', ')} | ${rate(side).toFixed(1)} |`);
}
console.log(`\nStepscope on ${ranks} ranks against TF.js wasm on ${ranks} threads: ${(rate(`stepscope-${ranks}`) / rate(`tfjs-${ranks}`)).toFixed(2)}×; Stepscope ${ranks} ranks against 1: ${(rate(`stepscope-${ranks}`) / rate('stepscope-1')).toFixed(2)}×; TF.js ${ranks} threads against 1: ${(rate(`tfjs-${ranks}`) / rate('tfjs-1')).toFixed(2)}×`);
await browser.close();
server.close();
