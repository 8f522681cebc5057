// The page's default transformer on 1 and R rank workers (issue 40) against
// GenAI NanoGPT (npm `@genai-fi/nanogpt`, TF.js) training the same shape on
// each of its backends, in one headless Chromium session, alternating;
// tokens/s. NanoGPT is not a dependency of the tests; install it first:
//   (cd tests/e2e && npm install --no-save @genai-fi/nanogpt@1.3.0)
//   node tests/e2e/bench/ranks_nanogpt.mjs [SECONDS] [R] [ROUNDS] [BACKENDS]
// (BACKENDS: a comma-separated list of webgpu, webgl, cpu; the package has
// no wasm kernels for its own ops.) Prints a Markdown table for
// bench/ranks.md. A measurement, not a test.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { launch, serve } from './browser.mjs';
import { pageTokensPerSecond } from './page_rate.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const seconds = Number(process.argv[2] ?? 20);
const ranks = Number(process.argv[3] ?? 2);
const rounds = Number(process.argv[4] ?? 2);
const backends = (process.argv[5] ?? 'webgpu,webgl,cpu').split(',');
const bundle = path.join(here, 'dist/nanogpt-bench.js');
try {
  await esbuild.build({
    entryPoints: [path.join(here, 'nanogpt-bench.mjs')], bundle: true, format: 'iife', platform: 'browser',
    outfile: bundle, logLevel: 'error', define: { 'process.env.NODE_ENV': '"production"' },
    external: ['fs', 'path', 'crypto', 'worker_threads', 'perf_hooks', 'os', 'util', 'string_decoder', 'url', 'module'],
  });
} catch (e) {
  console.error(`GenAI NanoGPT is not installed: (cd tests/e2e && npm install --no-save @genai-fi/nanogpt@1.3.0)\n${e.message}`);
  process.exit(2);
}
const page = path.join(here, 'dist/nanogpt.html');
fs.writeFileSync(page, '<!doctype html><meta charset="utf-8"><title>GenAI NanoGPT</title><script src="/nanogpt/bench.js"></script>');
const text = path.resolve(here, '../../../core/data/tinyshakespeare.txt');
const { server, root } = await serve((p) => ({ '/nanogpt/': page, '/nanogpt/bench.js': bundle, '/nanogpt/text.txt': text })[p] ?? null);
const browser = await launch();

async function nanogpt(backend) {
  const tab = await browser.newPage();
  await tab.goto(`${root}nanogpt/`);
  await tab.waitForFunction(() => window.nanogptBench);
  try {
    const r = await tab.evaluate(async ({ backend, seconds }) => {
      const text = await (await fetch('/nanogpt/text.txt')).text();
      return window.nanogptBench({ backend, text, seconds });
    }, { backend, seconds });
    console.error(`GenAI NanoGPT on ${r.backend}: ${r.steps} steps, ${r.tokens_per_second.toFixed(0)} tokens/s, loss ${r.loss.toFixed(3)}`);
    return { side: `nanogpt-${backend}`, tokens: r.tokens_per_second };
  } catch (e) {
    console.error(`GenAI NanoGPT on ${backend}: ${e.message}`);
    return { side: `nanogpt-${backend}`, tokens: NaN };
  } finally {
    await tab.close();
  }
}

const results = [];
for (let i = 0; i < rounds; i++) {
  for (const r of [1, ranks]) {
    const x = await pageTokensPerSecond(browser, root, { ranks: r, seconds });
    results.push({ side: `stepscope-${r}`, tokens: x.tokens });
  }
  for (const b of backends) results.push(await nanogpt(b));
}
const med = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rate = (side) => med(results.filter((x) => x.side === side && Number.isFinite(x.tokens)).map((x) => x.tokens));
const sides = [['stepscope-1', 'Stepscope, 1 worker'], [`stepscope-${ranks}`, `Stepscope, ${ranks} workers`], ...backends.map((b) => [`nanogpt-${b}`, `GenAI NanoGPT 1.3.0, ${b}`])];
console.log(`Machine: ${os.cpus()[0].model}, ${os.cpus().length} cores; headless Chromium (WebGPU and WebGL on its software adapters); ${rounds} alternating rounds of ${seconds} s, medians.\n`);
console.log('| the default transformer on | tokens/s (each round) | median |\n|---|---|---|');
for (const [side, name] of sides) {
  const mine = results.filter((x) => x.side === side);
  console.log(`| ${name} | ${mine.map((x) => (Number.isFinite(x.tokens) ? x.tokens.toFixed(0) : 'failed')).join(', ')} | ${rate(side)?.toFixed(0) ?? '—'} |`);
}
const best = backends.map((b) => [b, rate(`nanogpt-${b}`)]).filter(([, x]) => x > 0).sort((a, b) => b[1] - a[1])[0];
if (best) {
  console.log(`\nStepscope on ${ranks} workers against GenAI NanoGPT at its best backend here (${best[0]}): ${(rate(`stepscope-${ranks}`) / best[1]).toFixed(1)}×; on 1 worker: ${(rate('stepscope-1') / best[1]).toFixed(1)}×`);
}
await browser.close();
server.close();
