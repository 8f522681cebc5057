// Main-thread smoothness while a transformer trains (issue 28, "Smooth and
// truthful"): for the default transformer, a middle one, a large one at
// the longest context, and the largest shape the page's fields allow (the
// memory budget refuses it, and the table says so), the page trains for
// SECONDS each (default 60) with the
// transformer's views in sight (attention maps painted, sample written),
// and the longest main-thread task and the tasks over 50 ms are read from
// a PerformanceObserver. A measurement, not a test:
//   node tests/e2e/bench/gpt_smooth.mjs [SECONDS]
// prints a Markdown table for bench/page-gpt.md.
import { serve, launch, adapterName } from './browser.mjs';
import os from 'node:os';

const seconds = Number(process.argv[2] ?? 60);
const { server, root } = await serve();
const browser = await launch();
const base = {
  seed: 1337, loss: 'cross_entropy',
  optimizer: { kind: 'adamw', lr: 0.003, betas: [0.9, 0.99], eps: 1e-8, weight_decay: 0.1 },
  schedule: { kind: 'warmup_cosine', warmup_steps: 50, total_steps: 100000, min_lr: 0.0003 },
  clip_grad_norm: 1.0, data: { source: 'shakespeare', train_fraction: 0.9 },
};
const model = (blocks, embed, heads, context) => ({ kind: 'gpt', vocab_size: 65, context, embed, heads, blocks });
const cases = [
  ['default (3 × 96, T 64, B 16)', { ...base, model: model(3, 96, 4, 64), batch_size: 16 }],
  ['middle (6 × 256, T 256, B 8)', { ...base, model: model(6, 256, 8, 256), batch_size: 8 }],
  ['large (12 × 384, T 512, B 1)', { ...base, model: model(12, 384, 8, 512), batch_size: 1 }],
  ['largest shape allowed (12 × 512, T 512, B 1)', { ...base, model: model(12, 512, 8, 512), batch_size: 1 }],
];
const rows = [];
let adapter = '';
for (const [name, e] of cases) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(`${root}#e=${encodeURIComponent(JSON.stringify(e))}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true',
    null, { timeout: 120_000 });
  adapter ||= await adapterName(page);
  const refused = await page.evaluate(() => document.querySelector('[data-testid=alert]')?.textContent ?? '');
  if (refused) {
    rows.push({ name, refused });
    console.error(`${name}: refused: ${refused}`);
    await page.close();
    continue;
  }
  await page.evaluate(() => {
    window.__long = [];
    new PerformanceObserver((list) => { for (const entry of list.getEntries()) window.__long.push(entry.duration); })
      .observe({ type: 'longtask' });
  });
  await page.getByTestId('train-toggle').click();
  await page.locator('[data-testid=gpt-panel]').scrollIntoViewIfNeeded().catch(() => {});
  const started = Date.now();
  while ((Date.now() - started) / 1000 < seconds) {
    await page.waitForTimeout(5000);
    const step = await page.evaluate(() => document.querySelector('[data-testid=step-count]').textContent);
    console.error(`${name}: ${((Date.now() - started) / 1000).toFixed(0)} s, step ${step}`);
  }
  const read = await page.evaluate(() => ({
    step: Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')),
    tokens: document.querySelector('[data-testid=tokens-per-second]')?.textContent ?? '',
    maps: document.querySelectorAll('[data-testid=attention-map]').length,
    busy: document.querySelector('[data-testid=frame-busy-max]')?.textContent ?? '',
    long: window.__long,
  }));
  await page.getByTestId('train-toggle').click();
  rows.push({ name, ...read });
  console.error(`${name}: ${JSON.stringify({ ...read, long: read.long.map((x) => Math.round(x)) })}`);
  await page.close();
}
console.log(`Machine: ${os.cpus()[0].model}, ${os.cpus().length} cores; WebGPU adapter: ${adapter}; ${seconds} s of training each, CPU engine`);
console.log('\n| transformer | steps | tokens/s | attention maps drawn | longest main-thread task | tasks over 50 ms | loop\'s own work per frame at worst |\n|---|---|---|---|---|---|---|');
for (const r of rows) {
  if (r.refused) {
    console.log(`| ${r.name} | refused: ${r.refused} | | | | | |`);
    continue;
  }
  const longest = Math.max(0, ...r.long);
  console.log(`| ${r.name} | ${r.step} | ${r.tokens} | ${r.maps} | ${longest.toFixed(0)} ms | ${r.long.length} | ${r.busy} |`);
}
await browser.close();
server.close();
