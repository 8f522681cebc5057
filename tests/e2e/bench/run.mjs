// The browser benchmark: Stepscope against TensorFlow.js 4.22 in one
// headless Chromium session, side by side and interleaved, reported as
// ratios (the machine is shared and noisy; runs taken together are what
// compare). Stepscope runs in the trunk-built page (dist/) in `?bench`
// mode: the CPU engine compiled to WebAssembly, and the GPU engine at
// K = 1, at the largest K and fused (the fused kernel with 64 invocations
// and with 4; the phased ones on the matmul variants measured faster
// on the adapter, as the page runs), and at the largest K on the tiled
// matmuls alone (the kernels before per-layer variants). TensorFlow.js runs its webgpu and
// (single-threaded) wasm backends, bundled here with esbuild from the
// pinned dev-dependencies. Both train the same rows (stepscope_core's
// workloads) with Adam at lr 0.01. A transformer (the page's default; a
// small one in --quick) trains on both of Stepscope's engines, reported in
// tokens/s. It also measures the adapter's FMA peak
// and the forward kernel's GFLOP/s at each workload's layer shapes.
//
//   node bench/run.mjs [--out ../../bench/browser-swiftshader.md]
//   node bench/run.mjs --quick      one short round of W1 (the test command's
//                                   smoke run: it checks that every side runs,
//                                   and asserts no speed)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { adapterName, launch, serve } from './browser.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const wasmDir = path.resolve(here, '../node_modules/@tensorflow/tfjs-backend-wasm/dist');
const bundle = path.join(here, 'dist/tfjs-bench.js');
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const out = args.includes('--out') ? args[args.indexOf('--out') + 1] : null;

await esbuild.build({ entryPoints: [path.join(here, 'tfjs-bench.mjs')], bundle: true, format: 'iife', outfile: bundle, logLevel: 'warning' });
const { server, root } = await serve((p) => {
  if (p === '/tfjs/tfjs-bench.js') return bundle;
  if (p.startsWith('/tfjs-wasm/')) return path.join(wasmDir, path.basename(p));
  return null;
});
const browser = await launch();
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error(`page error: ${e}`));
  await page.goto(`${root}?bench`);
  await page.waitForFunction(() => window.wasmBindings?.stepscope_bench, null, { timeout: 60_000 });
  await page.addScriptTag({ url: '/tfjs/tfjs-bench.js' });
  const adapter = await adapterName(page);

  const seconds = quick ? 0.3 : 3;
  const reps = quick ? 1 : 3;
  const workloads = quick ? ['W1'] : ['W1', 'W2', 'W3'];
  const sides = ['cpu', 'gpu-k1', 'gpu-kmax', 'gpu-fused', 'gpu-fused-narrow', 'gpu-tiled', 'tfjs-webgpu', 'tfjs-wasm'];
  const results = {};
  for (const w of workloads) {
    results[w] = Object.fromEntries(sides.map((s) => [s, []]));
    for (let rep = 0; rep < reps; rep++) {
      for (const side of sides) {
        const r = await page.evaluate(async ({ w, side, seconds }) => {
          if (side.startsWith('tfjs-')) {
            return window.tfBench({ backend: side.slice(5), workload: window.wasmBindings.stepscope_bench_workload(w), seconds });
          }
          return window.wasmBindings.stepscope_bench(w, side, seconds);
        }, { w, side, seconds });
        results[w][side].push(r);
        console.log(`${w} ${side} run ${rep + 1}: ${r ? `${r.steps_per_second.toFixed(2)} steps/s (${r.steps} steps${r.k ? `, K = ${r.k}` : ''})` : 'n/a'}`);
      }
    }
  }

  // A transformer on both engines (Stepscope alone: TF.js has no such
  // model here), interleaved: tokens per second.
  const gptWorkload = quick ? 'gpt-small' : 'gpt';
  const gptSides = ['cpu', 'gpu-k1', 'gpu-kmax'];
  const gptResults = Object.fromEntries(gptSides.map((s) => [s, []]));
  for (let rep = 0; rep < reps; rep++) {
    for (const side of gptSides) {
      const r = await page.evaluate(({ w, side, seconds }) => window.wasmBindings.stepscope_bench_gpt(w, side, seconds),
        { w: gptWorkload, side, seconds });
      gptResults[side].push(r);
      console.log(`${gptWorkload} ${side} run ${rep + 1}: ${r.tokens_per_second.toFixed(0)} tokens/s (${r.steps} steps, K = ${r.k})`);
    }
  }

  // The adapter's FMA peak and the forward kernel at each workload's layer
  // shapes (not interleaved: a property of the adapter, not a race).
  const probes = {};
  for (const w of workloads) {
    probes[w] = await page.evaluate(({ w, seconds }) => window.wasmBindings.stepscope_bench_probe(w, seconds),
      { w, seconds: quick ? 0.05 : 1 });
    console.log(`${w} probe: FMA ${probes[w].fma_gflops.toFixed(1)} GFLOP/s; forward (tiled, blocked) ${probes[w].layers.map((l) => `${l.batch}×${l.inputs}→${l.units} ${l.gflops_tiled.toFixed(2)}, ${l.gflops_blocked.toFixed(2)}`).join('; ')} GFLOP/s`);
  }

  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };
  const rate = (w, side) => {
    const runs = results[w][side].filter(Boolean);
    return runs.length ? median(runs.map((r) => r.steps_per_second)) : null;
  };
  const fmt = (x) => (x === null ? '—' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
  const ratio = (a, b) => (a === null || b === null ? '—' : `${(a / b).toFixed(2)}×`);
  const lines = [
    '# Browser benchmark: Stepscope against TensorFlow.js 4.22, one headless Chromium session',
    '',
    `- machine: ${os.cpus()[0]?.model ?? 'unknown'}, ${os.cpus().length} cores`,
    `- browser: Chromium ${browser.version()} (headless); WebGPU adapter: ${adapter}`,
    `- set-up: ${workloads.join(', ')} (stepscope_core::workloads), Adam at lr 0.01 on the same seeded rows; interleaved; median of ${reps} timed run(s) of ≥ ${seconds} s after a warm-up step`,
    '- Stepscope GPU K = max: as many steps per submit as fit in about 2 s (at most 64); TF.js reads the loss back every 10 steps',
    '- matmuls: the variant the calibration picked for each layer\'s forward, input gradient and weight gradient (T tiled, B blocked; the first layer has no input gradient); "tiled only" runs K = max on the tiled kernels alone, as before per-layer variants',
    '',
    '| workload | matmuls (picked) | dispatches/step (phased: picked, tiled only) | Stepscope CPU (wasm) | GPU K = 1 | GPU K = max | GPU fused, 64 invocations | GPU fused, 4 invocations | GPU tiled only, K = max | TF.js webgpu | TF.js wasm | best GPU / TF.js webgpu | CPU / TF.js wasm | best GPU / CPU | picked / tiled only (K = max) |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const w of workloads) {
    const gpuRuns = ['gpu-k1', 'gpu-kmax', 'gpu-fused', 'gpu-fused-narrow'].map((s) => rate(w, s)).filter((x) => x !== null);
    const bestGpu = Math.max(...gpuRuns);
    const k = results[w]['gpu-kmax'][0]?.k;
    const kTiled = results[w]['gpu-tiled'][0]?.k;
    const dispatches = results[w]['gpu-k1'][0]?.dispatches_per_step;
    const dispatchesTiled = results[w]['gpu-tiled'][0]?.dispatches_per_step;
    const matmuls = results[w]['gpu-k1'][0]?.matmuls;
    lines.push(`| ${w} | ${matmuls} | ${dispatches}, ${dispatchesTiled} | ${fmt(rate(w, 'cpu'))} | ${fmt(rate(w, 'gpu-k1'))} | ${fmt(rate(w, 'gpu-kmax'))} (K = ${k}) | ${fmt(rate(w, 'gpu-fused'))} | ${fmt(rate(w, 'gpu-fused-narrow'))} | ${fmt(rate(w, 'gpu-tiled'))} (K = ${kTiled}) | ${fmt(rate(w, 'tfjs-webgpu'))} | ${fmt(rate(w, 'tfjs-wasm'))} | ${ratio(bestGpu, rate(w, 'tfjs-webgpu'))} | ${ratio(rate(w, 'cpu'), rate(w, 'tfjs-wasm'))} | ${ratio(bestGpu, rate(w, 'cpu'))} | ${ratio(rate(w, 'gpu-kmax'), rate(w, 'gpu-tiled'))} |`);
  }
  lines.push('', 'Steps per second; the fused step runs every step of a submit in one dispatch (— where it does not apply). "Best GPU" is the fastest of K = 1, K = max and the two fused widths (the calibration of the page times both and keeps the faster).', '');
  const gptRate = (side) => median(gptResults[side].map((r) => r.tokens_per_second));
  const gpu1 = gptResults['gpu-k1'][0];
  lines.push(`## A transformer on both engines: ${gptWorkload === 'gpt' ? "the page's default, 3 blocks × 4 heads × 96, T 64, B 16" : '2 blocks × 2 heads × 32, T 32, B 8'} (tokens/s)`, '',
    '| Stepscope CPU (wasm) | GPU K = 1 | GPU K = max | best GPU / CPU | dispatches per step | attention (picked by timing) |', '|---|---|---|---|---|---|',
    `| ${fmt(gptRate('cpu'))} | ${fmt(gptRate('gpu-k1'))} | ${fmt(gptRate('gpu-kmax'))} (K = ${gptResults['gpu-kmax'][0].k}) | ${ratio(Math.max(gptRate('gpu-k1'), gptRate('gpu-kmax')), gptRate('cpu'))} | ${gpu1.dispatches_per_step} | ${gpu1.attention} |`, '');
  lines.push('## Forward matmul against the FMA probe, same adapter', '',
    `FMA probe (shaders/fma_peak.wgsl): ${probes[workloads[0]].fma_gflops.toFixed(1)} GFLOP/s (${workloads.map((w) => probes[w].fma_gflops.toFixed(1)).join(', ')} when measured before each workload's layers).`, '',
    '| workload | layer (B × I → O) | tiled GFLOP/s (dense_forward) | share of the FMA probe | blocked GFLOP/s (dense_forward_blocked) | share of the FMA probe |', '|---|---|---|---|---|---|');
  for (const w of workloads) {
    for (const l of probes[w].layers) {
      const share = (g) => `${(100 * g / probes[w].fma_gflops).toPrecision(3)} %`;
      lines.push(`| ${w} | ${l.batch} × ${l.inputs} → ${l.units} | ${l.gflops_tiled.toPrecision(3)} | ${share(l.gflops_tiled)} | ${l.gflops_blocked.toPrecision(3)} | ${share(l.gflops_blocked)} |`);
    }
  }
  lines.push('');
  const report = lines.join('\n');
  console.log(`\n${report}`);
  for (const w of workloads) {
    for (const side of sides) {
      const runs = results[w][side];
      const ok = side.startsWith('gpu-fused') ? runs.every((r) => r === null || r.steps > 0) : runs.every((r) => r && r.steps > 0);
      if (!ok) throw new Error(`${w} ${side} did not run`);
    }
    if (!(probes[w].fma_gflops > 0 && probes[w].layers.every((l) => l.gflops_tiled > 0 && l.gflops_blocked > 0))) throw new Error(`${w} probe did not run`);
  }
  for (const side of gptSides) {
    if (!gptResults[side].every((r) => r && r.steps > 0 && r.tokens_per_second > 0)) throw new Error(`${gptWorkload} ${side} did not run`);
  }
  if (out) fs.writeFileSync(out, report);
} finally {
  await browser.close();
  server.close();
}
