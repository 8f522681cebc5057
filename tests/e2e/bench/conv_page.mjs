// The page as a learner uses it on MNIST, against ConvNetJS in the same
// browser session: the conv preset (ConvNetJS's MNIST net, batch 20) trained
// from Train with every view live (feature maps, filters, the confusion
// matrix, the layer table), images per second from the step counter over
// `seconds` (from the third step), and the page's main thread meanwhile
// (every task over 50 ms, through the Long Tasks API); then ConvNetJS 0.3.0
// training the same net at batch 20 in a page of the same browser,
// interleaved, reported as ratios. Optionally with the slow-loader lesson's
// augmentation and loader workers (`--augment elastic --workers N`).
//
//   node bench/conv_page.mjs [--seconds S] [--reps N] [--augment none|shift|elastic] [--workers N]
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

await esbuild.build({ entryPoints: [path.join(here, 'convnetjs-conv-bench.mjs')], bundle: true, format: 'iife', outfile: convnetjsBundle, logLevel: 'warning' });
const { server, root } = await serve((p) => (p === '/tfjs/convnetjs-conv-bench.js' ? convnetjsBundle : null));
const browser = await launch();
const steps = (page) => page.evaluate(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')));
const settled = (page) => page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 120_000 });

async function pageRun() {
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
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 3, null, { timeout: 120_000 });
  if (workers > 0) {
    await page.waitForFunction((n) => new RegExp(`^${n} loader workers? in use`).test(document.querySelector('[data-testid=loader-status]')?.textContent ?? ''), workers, { timeout: 120_000 });
  }
  await page.evaluate(() => {
    window.stepscopeLongTasks = [];
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) window.stepscopeLongTasks.push(entry.duration);
    }).observe({ type: 'longtask' });
  });
  const [s0, t0] = [await steps(page), Date.now()];
  await page.waitForTimeout(seconds * 1000);
  const [s1, t1] = [await steps(page), Date.now()];
  const longTasks = await page.evaluate(() => window.stepscopeLongTasks);
  const share = await page.locator('[data-testid=gpu-busy-share]').textContent();
  const batch = await page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).batch_size);
  await page.getByTestId('train-toggle').click();
  await page.close();
  return { imagesPerSecond: ((s1 - s0) * batch * 1000) / (t1 - t0), longest: Math.max(0, ...longTasks), longTasks: longTasks.length, share };
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
    const p = await pageRun();
    const c = await convnetjsRun();
    runs.push({ ...p, convnetjs: c });
    console.log(`run ${rep + 1}: page ${p.imagesPerSecond.toFixed(0)} images/s, ConvNetJS ${c.toFixed(1)} images/s (${(p.imagesPerSecond / c).toFixed(1)}×); `
      + `main thread: ${p.longTasks} tasks over 50 ms, longest ${p.longest.toFixed(0)} ms; ${p.share}`);
  }
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };
  console.log(`\nmachine: ${os.cpus()[0]?.model ?? 'unknown'}, ${os.cpus().length} cores; Chromium ${browser.version()}; augmentation ${augment}, ${workers} loader workers`);
  console.log(`median: page ${median(runs.map((r) => r.imagesPerSecond)).toFixed(0)} images/s, ConvNetJS ${median(runs.map((r) => r.convnetjs)).toFixed(1)} images/s, `
    + `ratio ${median(runs.map((r) => r.imagesPerSecond / r.convnetjs)).toFixed(1)}×; longest main-thread task ${Math.max(...runs.map((r) => r.longest)).toFixed(0)} ms`);
} finally {
  await browser.close();
  server.close();
}
