// What the page's main thread does in the first seconds after Train on the
// MNIST conv preset (every view live), by function: a Chromium trace with
// V8's sampling profiler, and for every task over 50 ms the functions its
// samples were in (self time, and the page's own wasm functions by the
// time spent inside them). Wasm functions have names only in a build that
// keeps them:
//   sed 's/data-wasm-opt="z"/data-wasm-opt="0" data-keep-debug/' index.html > index.profile.html
//   trunk build --release --dist /tmp/dist-profile index.profile.html
//   STEPSCOPE_DIST=/tmp/dist-profile node bench/first_second.mjs [--seconds S] [--dataset mnist|digits]
// A tool for finding what to fix, not a benchmark (the profiler slows the
// page); bench/conv_page.mjs measures the long tasks without it.
import path from 'node:path';
import { launch, serve } from './browser.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const seconds = Number(opt('--seconds', 3));
const dataset = opt('--dataset', 'mnist');

const { server, root } = await serve();
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on('pageerror', (e) => console.error(`page error: ${e}`));
  await page.goto(`${root}?engine=cpu`);
  const settled = () => page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 120_000 });
  await settled();
  await page.getByTestId('dataset').selectOption(dataset);
  await page.waitForFunction((d) => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.source === d, dataset);
  await page.getByTestId('conv-preset').click();
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.input_shape !== undefined);
  await settled();
  await page.waitForTimeout(1000);
  await browser.startTracing(page, {
    categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'v8.execute', 'disabled-by-default-v8.cpu_profiler'],
  });
  const clicked = await page.evaluate(() => performance.now());
  await page.getByTestId('train-toggle').click();
  await page.waitForTimeout(seconds * 1000);
  const trace = JSON.parse((await browser.stopTracing()).toString());
  await page.getByTestId('train-toggle').click();
  report(trace.traceEvents ?? trace, clicked);
} finally {
  await browser.close();
  server.close();
}

function report(events, clicked) {
  const mainThreads = new Set(events.filter((e) => e.ph === 'M' && e.name === 'thread_name' && e.args?.name === 'CrRendererMain').map((e) => `${e.pid}:${e.tid}`));
  const onMain = (e) => mainThreads.has(`${e.pid}:${e.tid}`);
  const tasks = events.filter((e) => onMain(e) && e.ph === 'X' && e.name === 'RunTask' && e.dur >= 50_000).sort((a, b) => a.ts - b.ts);
  // V8's samples: a Profile (start time) and ProfileChunks (nodes, samples,
  // time deltas) per profiled thread, tied together by the profile's id.
  const profiles = new Map();
  for (const e of events) {
    if (e.name === 'Profile' && onMain(e)) profiles.set(e.id, { start: e.args.data.startTime, nodes: new Map(), samples: [] });
  }
  for (const e of events) {
    if (e.name !== 'ProfileChunk' || !profiles.has(e.id)) continue;
    const p = profiles.get(e.id);
    const data = e.args.data;
    for (const n of data.cpuProfile?.nodes ?? []) p.nodes.set(n.id, { ...n });
    const ids = data.cpuProfile?.samples ?? [];
    const deltas = data.timeDeltas ?? [];
    let t = p.samples.length ? p.samples[p.samples.length - 1][0] : p.start;
    for (let i = 0; i < ids.length; i++) {
      t += deltas[i] ?? 0;
      p.samples.push([t, ids[i]]);
    }
  }
  const stack = (p, id) => {
    const out = [];
    for (let n = p.nodes.get(id); n; n = n.parent !== undefined ? p.nodes.get(n.parent) : undefined) {
      out.push(n.callFrame.functionName || `(${n.callFrame.url ? path.basename(n.callFrame.url) : 'anonymous'})`);
    }
    return out;
  };
  for (const p of profiles.values()) {
    for (const n of p.nodes.values()) for (const c of n.children ?? []) if (p.nodes.has(c)) p.nodes.get(c).parent = n.id;
  }
  const t0 = events.find((e) => e.name === 'TracingStartedInBrowser')?.ts ?? tasks[0]?.ts ?? 0;
  console.log(`${tasks.length} main-thread tasks over 50 ms in the ${seconds} s after Train (clicked at page time ${clicked.toFixed(0)} ms)`);
  for (const task of tasks) {
    const self = new Map();
    const inside = new Map();
    let n = 0;
    for (const p of profiles.values()) {
      for (let i = 0; i < p.samples.length; i++) {
        const [t, id] = p.samples[i];
        if (t < task.ts || t > task.ts + task.dur) continue;
        const dt = ((p.samples[i + 1]?.[0] ?? t) - t) / 1000;
        const s = stack(p, id);
        n += 1;
        self.set(s[0], (self.get(s[0]) ?? 0) + dt);
        for (const f of new Set(s.slice(0, 40))) inside.set(f, (inside.get(f) ?? 0) + dt);
      }
    }
    // The trace's own events inside the task (layout, paint, …), self time.
    const within = events.filter((e) => onMain(e) && e.ph === 'X' && e !== task && e.ts >= task.ts && e.ts + e.dur <= task.ts + task.dur);
    const byEvent = new Map();
    for (const e of within) byEvent.set(e.name, (byEvent.get(e.name) ?? 0) + e.dur / 1000);
    const top = (m, k) => [...m].sort((a, b) => b[1] - a[1]).slice(0, k).map(([f, ms]) => `${f} ${ms.toFixed(1)}`).join('; ');
    console.log(`\ntask at +${((task.ts - t0) / 1000).toFixed(0)} ms: ${(task.dur / 1000).toFixed(1)} ms, ${n} samples`);
    console.log(`  events: ${top(byEvent, 8)}`);
    console.log(`  self:   ${top(self, 12)}`);
    console.log(`  inside: ${top(inside, 12)}`);
    const own = new Map([...inside].filter(([f]) => /stepscope_app|stepscope_core/.test(f)).map(([f, ms]) => [f.replace(/::h[0-9a-f]{16}$/, ''), ms]));
    console.log(`  the page's own: ${top(own, 25)}`);
  }
}
