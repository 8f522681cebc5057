// The conv benchmark in the browser: Stepscope's conv nets (ConvNetJS's
// MNIST net and a CIFAR-sized net, stepscope_core::workloads) against
// TensorFlow.js 4.22 training the same nets on the same images, in one
// headless Chromium session, interleaved, reported as ratios. Stepscope
// runs in the trunk-built page (dist/) in `?bench` mode: the CPU engine
// compiled to WebAssembly and the GPU engine at K = 1 and at the largest K;
// TF.js its webgpu and cpu backends (its wasm backend cannot train a conv
// net: it has no Conv2DBackpropFilter kernel); and ConvNetJS 0.3.0, the
// library of the MNIST demo a learner meets first (plain JavaScript, an
// image at a time).
//
//   node bench/conv.mjs [--out ../../bench/conv-browser.md] [--seconds S] [--reps N]
//   node bench/conv.mjs --sides cpu,convnetjs --cases mnist:20,mnist:64
//                                   some sides and cases only (the others' cells
//                                   are left empty)
//   node bench/conv.mjs --quick     the MNIST net at batch 64, one short round
//                                   (the test command's smoke run: every side
//                                   runs; no speed asserted)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { adapterName, launch, serve } from './browser.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const bundle = path.join(here, 'dist/tfjs-conv-bench.js');
const convnetjsBundle = path.join(here, 'dist/convnetjs-conv-bench.js');
const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const out = opt('--out', null);
const quick = args.includes('--quick');
const seconds = Number(opt('--seconds', quick ? 0.3 : 3));
const reps = Number(opt('--reps', quick ? 1 : 3));

await esbuild.build({ entryPoints: [path.join(here, 'tfjs-conv-bench.mjs')], bundle: true, format: 'iife', outfile: bundle, logLevel: 'warning' });
await esbuild.build({ entryPoints: [path.join(here, 'convnetjs-conv-bench.mjs')], bundle: true, format: 'iife', outfile: convnetjsBundle, logLevel: 'warning' });
const bundles = { '/tfjs/tfjs-conv-bench.js': bundle, '/tfjs/convnetjs-conv-bench.js': convnetjsBundle };
const { server, root } = await serve((p) => bundles[p] ?? null);
const browser = await launch();
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error(`page error: ${e}`));
  await page.goto(`${root}?bench`);
  await page.waitForFunction(() => window.wasmBindings?.stepscope_bench_conv, null, { timeout: 120_000 });
  await page.addScriptTag({ url: '/tfjs/tfjs-conv-bench.js' });
  await page.addScriptTag({ url: '/tfjs/convnetjs-conv-bench.js' });
  const adapter = await adapterName(page);
  const cases = opt('--cases', null)?.split(',').map((c) => [c.split(':')[0], Number(c.split(':')[1])])
    ?? (quick ? [['mnist', 64]] : [['mnist', 64], ['mnist', 256], ['cifar', 64], ['cifar', 256]]);
  const sides = opt('--sides', 'cpu,gpu-k1,gpu-kmax,tfjs-webgpu,tfjs-cpu,convnetjs').split(',');
  const results = {};
  for (const [key, batch] of cases) {
    const id = `${key} ${batch}`;
    results[id] = Object.fromEntries(sides.map((s) => [s, []]));
    for (let rep = 0; rep < reps; rep++) {
      for (const side of sides) {
        const r = await page.evaluate(async ({ key, batch, side, seconds }) => {
          if (side === 'convnetjs') {
            return window.convnetjsConvBench({ workload: window.wasmBindings.stepscope_bench_conv_workload(key, batch), seconds });
          }
          if (side.startsWith('tfjs-')) {
            return window.tfConvBench({ backend: side.slice(5), workload: window.wasmBindings.stepscope_bench_conv_workload(key, batch), seconds });
          }
          return window.wasmBindings.stepscope_bench_conv(key, batch, side, seconds);
        }, { key, batch, side, seconds });
        results[id][side].push(r);
        console.log(`${id} ${side} run ${rep + 1}: ${r.images_per_second.toFixed(1)} images/s (${r.steps} steps${r.k ? `, K = ${r.k}` : ''})`);
      }
    }
  }
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };
  const rate = (id, side) => (results[id][side] ? median(results[id][side].map((r) => r.images_per_second)) : NaN);
  const fmt = (x) => (Number.isNaN(x) ? '–' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
  const ratio = (a, b) => (Number.isNaN(a / b) ? '–' : `${(a / b).toFixed(2)}×`);
  const lines = [
    '# Conv nets in the browser: Stepscope against TensorFlow.js 4.22 and ConvNetJS 0.3.0, one headless Chromium session',
    '',
    `- machine: ${os.cpus()[0]?.model ?? 'unknown'}, ${os.cpus().length} cores`,
    `- browser: Chromium ${browser.version()} (headless); WebGPU adapter: ${adapter}`,
    `- set-up: ConvNetJS's MNIST net and a CIFAR-sized net (stepscope_core::workloads::CONV_WORKLOADS), SGD with momentum 0.9 at lr 0.01, cross-entropy, on the same seeded images; interleaved; median of ${reps} timed run(s) of ≥ ${seconds} s after a warm-up step`,
    '- Stepscope GPU K = max: as many steps per submit as fit in about 2 s; TF.js reads the loss back every 10 steps',
    '',
    '| net | batch | Stepscope CPU (wasm) | GPU K = 1 | GPU K = max | TF.js webgpu | TF.js cpu | ConvNetJS | best GPU / TF.js webgpu | CPU / TF.js cpu | CPU / ConvNetJS | best GPU / CPU |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const [key, batch] of cases) {
    const id = `${key} ${batch}`;
    const best = Math.max(rate(id, 'gpu-k1'), rate(id, 'gpu-kmax'));
    const k = results[id]['gpu-kmax'] ? ` (K = ${results[id]['gpu-kmax'][0].k})` : '';
    lines.push(`| ${key} | ${batch} | ${fmt(rate(id, 'cpu'))} | ${fmt(rate(id, 'gpu-k1'))} | ${fmt(rate(id, 'gpu-kmax'))}${k} | ${fmt(rate(id, 'tfjs-webgpu'))} | ${fmt(rate(id, 'tfjs-cpu'))} | ${fmt(rate(id, 'convnetjs'))} | ${ratio(best, rate(id, 'tfjs-webgpu'))} | ${ratio(rate(id, 'cpu'), rate(id, 'tfjs-cpu'))} | ${ratio(rate(id, 'cpu'), rate(id, 'convnetjs'))} | ${ratio(best, rate(id, 'cpu'))} |`);
  }
  lines.push('', 'Images per second (steps/s × batch).', '');
  const report = lines.join('\n');
  console.log(`\n${report}`);
  for (const id of Object.keys(results)) {
    for (const side of sides) {
      if (!results[id][side].every((r) => r && r.steps > 0)) throw new Error(`${id} ${side} did not run`);
    }
  }
  if (out) fs.writeFileSync(out, report);
} finally {
  await browser.close();
  server.close();
}
