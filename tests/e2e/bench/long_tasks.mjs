// What the page's long main-thread tasks are made of while it trains a
// network of N hidden layers of U tanh units on the CPU engine (in the
// worker): a Chrome trace of 4 s of training, and for the six longest tasks
// the time of the events inside them (canvas finalization, layout, paint,
// the page's own script, …). A tool for finding what to fix, not a test:
//   node tests/e2e/bench/long_tasks.mjs N U [canvas-method-to-disable]
// (the third argument turns a CanvasRenderingContext2D method into a no-op,
// to see what one kind of drawing costs). Writes /tmp/stepscope-trace.json,
// which Perfetto opens.
import { serve, launch } from './browser.mjs';
import fs from 'node:fs';
const { server, root } = await serve();
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
const probe = await ctx.newPage();
await probe.goto(`${root}?engine=cpu`);
await probe.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90000 });
const hash = await probe.evaluate(() => location.hash);
await probe.close();
const e = JSON.parse(decodeURIComponent(hash.slice('#e='.length)));
const output = e.model.layers[e.model.layers.length - 1];
const n = Number(process.argv[2] ?? 6), units = Number(process.argv[3] ?? 64);
const x = { ...e, model: { ...e.model, layers: [...Array(n)].map(() => ({ units, activation: 'tanh' })).concat([output]) } };
const page = await ctx.newPage();
await page.goto(`${root}?engine=cpu#e=${encodeURIComponent(JSON.stringify(x))}`);
await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90000 });
const patch = process.argv[4];
if (patch) await page.evaluate((m) => { CanvasRenderingContext2D.prototype[m] = function () {}; }, patch);
const cdp = await ctx.newCDPSession(page);
const events = [];
cdp.on('Tracing.dataCollected', (d) => events.push(...d.value));
const done = new Promise((ok) => cdp.on('Tracing.tracingComplete', ok));
await cdp.send('Tracing.start', { categories: 'devtools.timeline,disabled-by-default-devtools.timeline,blink,v8.execute', transferMode: 'ReportEvents' });
await page.getByTestId('train-toggle').click();
await page.waitForTimeout(4000);
await page.getByTestId('train-toggle').click();
await cdp.send('Tracing.end');
await done;
// Main thread: the renderer's CrRendererMain.
const names = new Map();
for (const ev of events) if (ev.name === 'thread_name') names.set(`${ev.pid}:${ev.tid}`, ev.args.name);
const main = [...names].filter(([, v]) => v === 'CrRendererMain').map(([k]) => k);
const onMain = events.filter((ev) => main.includes(`${ev.pid}:${ev.tid}`) && ev.ph === 'X');
const tasks = onMain.filter((ev) => ev.name === 'RunTask' && ev.dur > 30000).sort((a, b) => b.dur - a.dur).slice(0, 6);
for (const t of tasks) {
  const inside = onMain.filter((ev) => ev.ts >= t.ts && ev.ts + ev.dur <= t.ts + t.dur && ev !== t);
  const by = new Map();
  for (const ev of inside) by.set(ev.name, (by.get(ev.name) ?? 0) + ev.dur);
  console.log(`task ${(t.dur / 1000).toFixed(1)} ms:`, [...by].sort((a, b) => b[1] - a[1]).slice(0, 10).map(([k, v]) => `${k} ${(v / 1000).toFixed(1)}`).join(', '));
}
fs.writeFileSync('/tmp/stepscope-trace.json', JSON.stringify({ traceEvents: events }));
await browser.close(); server.close();
