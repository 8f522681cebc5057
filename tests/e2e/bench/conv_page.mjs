// The page as a learner uses it on MNIST, against ConvNetJS in the same
// browser session: the conv preset (ConvNetJS's MNIST net, batch 20) trained
// from Train with every view live (feature maps, filters, the confusion
// matrix, the layer table), images per second from the step counter over
// `seconds` (from the third step), and the page's main thread from the
// click on Train (every task over 50 ms, through the Long Tasks API); then ConvNetJS 0.3.0
// training the same net at batch 20 in a page of the same browser,
// interleaved, reported as ratios. Optionally with the slow-loader lesson's
// augmentation and loader workers (`--augment elastic --workers N`).
// `--trace` also records a Chromium trace of the page's first run and
// prints what the main thread's tasks over 50 ms spent their time on
// (self time by trace event: script, style, layout, paint, GC).
//
//   node bench/conv_page.mjs [--seconds S] [--reps N] [--augment none|shift|elastic] [--workers N] [--trace]
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { launch, serve } from './browser.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const convnetjsBundle = path.join(here, 'dist/convnetjs-conv-bench.js');
const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const seconds = Number(opt('--seconds', 10));
const reps = Number(opt('--reps', 3));
const augment = opt('--augment', 'none');
const workers = Number(opt('--workers', 0));
const tracing = args.includes('--trace');

await esbuild.build({ entryPoints: [path.join(here, 'convnetjs-conv-bench.mjs')], bundle: true, format: 'iife', outfile: convnetjsBundle, logLevel: 'warning' });
const { server, root } = await serve((p) => (p === '/tfjs/convnetjs-conv-bench.js' ? convnetjsBundle : null));
const browser = await launch();
const steps = (page) => page.evaluate(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')));
const settled = (page) => page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 120_000 });

// Self time (ms) by event name inside the main thread's tasks over 50 ms
// of a Chromium trace (`devtools.timeline` events), and how many there were.
function longTaskBreakdown(trace) {
  const events = (trace.traceEvents ?? trace).filter((e) => e.ph === 'X' && typeof e.dur === 'number');
  const main = new Set((trace.traceEvents ?? trace).filter((e) => e.ph === 'M' && e.name === 'thread_name' && e.args?.name === 'CrRendererMain').map((e) => `${e.pid}:${e.tid}`));
  const byThread = new Map();
  for (const e of events) {
    const key = `${e.pid}:${e.tid}`;
    if (!main.has(key)) continue;
    if (!byThread.has(key)) byThread.set(key, []);
    byThread.get(key).push(e);
  }
  const self = new Map();
  let tasks = 0;
  for (const list of byThread.values()) {
    list.sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    for (let i = 0; i < list.length; i++) {
      const task = list[i];
      if (task.name !== 'RunTask' || task.dur < 50_000) continue;
      tasks += 1;
      // The task's events as a tree by containment: each one's self time
      // is its duration less its direct children's.
      const inside = [];
      for (let j = i + 1; j < list.length && list[j].ts < task.ts + task.dur; j++) inside.push(list[j]);
      const stack = [{ e: task, child: 0 }];
      const close = (frame) => self.set(frame.e.name, (self.get(frame.e.name) ?? 0) + (frame.e.dur - frame.child) / 1000);
      for (const e of inside) {
        while (stack.length > 1 && e.ts >= stack[stack.length - 1].e.ts + stack[stack.length - 1].e.dur) close(stack.pop());
        stack[stack.length - 1].child += e.dur;
        stack.push({ e, child: 0 });
      }
      while (stack.length) close(stack.pop());
    }
  }
  return { tasks, self: [...self.entries()].sort((a, b) => b[1] - a[1]) };
}

async function pageRun(trace = false) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on('pageerror', (e) => console.error(`page error: ${e}`));
  await page.goto(`${root}?engine=cpu`);
  await settled(page);
  await page.getByTestId('dataset').selectOption('mnist');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.source === 'mnist');
  await page.getByTestId('conv-preset').click();
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.input_shape !== undefined);
  if (augment !== 'none') {
    await page.getByTestId('augmentation').selectOption(augment);
    await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.augment !== undefined);
  }
  if (workers > 0) {
    await page.getByTestId('num-workers').fill(String(workers));
    await page.getByTestId('num-workers').press('Enter');
  }
  await settled(page);
  // The main thread's tasks over 50 ms from the click on Train (times
  // from the click).
  await page.evaluate(() => {
    window.stepscopeLongTasks = [];
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) window.stepscopeLongTasks.push([entry.startTime - window.stepscopeTrain, entry.duration]);
    }).observe({ type: 'longtask' });
    document.querySelector('[data-testid=train-toggle]').addEventListener('click', () => { window.stepscopeTrain = performance.now(); }, { once: true, capture: true });
  });
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 3, null, { timeout: 120_000 });
  if (workers > 0) {
    await page.waitForFunction((n) => new RegExp(`^${n} loader workers? in use`).test(document.querySelector('[data-testid=loader-status]')?.textContent ?? ''), workers, { timeout: 120_000 });
  }
  const [s0, t0] = [await steps(page), Date.now()];
  if (trace) await browser.startTracing(page, { categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline'] });
  await page.waitForTimeout(seconds * 1000);
  const [s1, t1] = [await steps(page), Date.now()];
  const breakdown = trace ? longTaskBreakdown(JSON.parse((await browser.stopTracing()).toString())) : null;
  const longTasks = await page.evaluate(() => window.stepscopeLongTasks);
  const share = await page.locator('[data-testid=gpu-busy-share]').textContent();
  const batch = await page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).batch_size);
  await page.getByTestId('train-toggle').click();
  await page.close();
  // The views' elements are made with the first snapshot, in the first
  // second or two of training: the steady state is what follows.
  const steady = longTasks.filter(([at]) => at >= 3000).map(([, d]) => d);
  const first = longTasks.filter(([at]) => at < 3000).map(([, d]) => d);
  return {
    imagesPerSecond: ((s1 - s0) * batch * 1000) / (t1 - t0),
    longest: Math.max(0, ...longTasks.map(([, d]) => d)),
    longTasks: longTasks.length,
    firstLongTasks: first,
    steadyLongest: Math.max(0, ...steady),
    steadyLongTasks: steady.length,
    share,
    breakdown,
  };
}

async function convnetjsRun() {
  const page = await browser.newPage();
  await page.goto(`${root}?bench`);
  await page.waitForFunction(() => window.wasmBindings?.stepscope_bench_conv_workload, null, { timeout: 120_000 });
  await page.addScriptTag({ url: '/tfjs/convnetjs-conv-bench.js' });
  const r = await page.evaluate((s) => window.convnetjsConvBench({ workload: window.wasmBindings.stepscope_bench_conv_workload('mnist', 20), seconds: s }), Math.min(seconds, 5));
  await page.close();
  return r.images_per_second;
}

try {
  const runs = [];
  for (let rep = 0; rep < reps; rep++) {
    const p = await pageRun(tracing && rep === 0);
    const c = await convnetjsRun();
    runs.push({ ...p, convnetjs: c });
    console.log(`run ${rep + 1}: page ${p.imagesPerSecond.toFixed(0)} images/s, ConvNetJS ${c.toFixed(1)} images/s (${(p.imagesPerSecond / c).toFixed(1)}×); `
      + `main thread from Train: ${p.longTasks} tasks over 50 ms, longest ${p.longest.toFixed(0)} ms (in the first 3 s: ${p.firstLongTasks.map((d) => d.toFixed(0)).join(', ') || 'none'} ms; after them: ${p.steadyLongTasks}, longest ${p.steadyLongest.toFixed(0)} ms); ${p.share}`);
    if (p.breakdown) {
      console.log(`  traced: ${p.breakdown.tasks} tasks over 50 ms; their self time by event (ms):`);
      for (const [name, ms] of p.breakdown.self.slice(0, 12)) console.log(`    ${name.padEnd(28)} ${ms.toFixed(1)}`);
    }
  }
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };
  console.log(`\nmachine: ${os.cpus()[0]?.model ?? 'unknown'}, ${os.cpus().length} cores; Chromium ${browser.version()}; augmentation ${augment}, ${workers} loader workers`);
  console.log(`median: page ${median(runs.map((r) => r.imagesPerSecond)).toFixed(0)} images/s, ConvNetJS ${median(runs.map((r) => r.convnetjs)).toFixed(1)} images/s, `
    + `ratio ${median(runs.map((r) => r.imagesPerSecond / r.convnetjs)).toFixed(1)}×; longest main-thread task ${Math.max(...runs.map((r) => r.longest)).toFixed(0)} ms, `
    + `after the first 3 s ${Math.max(...runs.map((r) => r.steadyLongest)).toFixed(0)} ms`);
} finally {
  await browser.close();
  server.close();
}
