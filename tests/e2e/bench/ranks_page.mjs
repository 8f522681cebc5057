// The page's default transformer (8 shards) on 1 and on R ranks (rank
// workers, issue 40), and in one shard on one worker (the default before),
// alternating in one browser session: steps and tokens/s after SECONDS of
// training each (default 30), and the page's main thread meanwhile (its
// tasks over 50 ms). A measurement, not a test:
//   node tests/e2e/bench/ranks_page.mjs [SECONDS] [R] [ROUNDS]
// prints a Markdown table for bench/ranks.md.
import { serve, launch } from './browser.mjs';
import os from 'node:os';

const seconds = Number(process.argv[2] ?? 30);
const ranks = Number(process.argv[3] ?? 2);
const rounds = Number(process.argv[4] ?? 2);
const { server, root } = await serve();
const browser = await launch();

async function run(r, shards = 8) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(`${root}?engine=cpu&ranks=${r}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90_000 });
  await page.getByTestId('model-kind').selectOption('gpt');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.kind === 'gpt');
  // The default transformer (8 shards of 2 windows), or in `shards`.
  const e = await page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))));
  e.shards = shards;
  await page.goto(`${root}?engine=cpu&ranks=${r}#e=${encodeURIComponent(JSON.stringify(e))}`);
  await page.reload();
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90_000 });
  await page.getByTestId('train-toggle').click();
  const started = Date.now();
  const step = () => page.evaluate(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')));
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 3, null, { timeout: 90_000 });
  // The page's main thread while it trains: every task over 50 ms (the
  // Long Tasks API's threshold) in the measured window.
  await page.evaluate(() => {
    window.stepscopeLongTasks = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.stepscopeLongTasks.push(e.duration);
    }).observe({ type: 'longtask' });
  });
  const [s0, t0] = [await step(), Date.now()];
  await page.waitForTimeout(seconds * 1000);
  const [s1, t1] = [await step(), Date.now()];
  const long = await page.evaluate(() => window.stepscopeLongTasks);
  const read = await page.evaluate(() => ({
    ranks: document.querySelector('[data-testid=ranks]')?.dataset.value,
    reason: document.querySelector('[data-testid=ranks-reason]')?.textContent ?? '',
    loss: document.querySelector('[data-testid=train-loss]')?.textContent,
    comm: Number(document.querySelector('[data-testid=phase-ms-communication]')?.dataset.value),
  }));
  await page.getByTestId('train-toggle').click();
  await page.close();
  const shape = { context: 64, batch: 16 };
  const tokens = ((s1 - s0) * shape.context * shape.batch) / ((t1 - t0) / 1000);
  const longest = long.length ? Math.max(...long) : 0;
  console.error(`shards ${shards}, ranks ${r} (in use ${read.ranks}${read.reason ? `: ${read.reason}` : ''}): ${s1 - s0} steps in ${((t1 - t0) / 1000).toFixed(1)} s, ${tokens.toFixed(0)} tokens/s, communication ${read.comm.toFixed(2)} ms a step; main thread: ${long.length} tasks over 50 ms, longest ${longest.toFixed(0)} ms; ${Date.now() - started} ms in all`);
  return { r, shards, inUse: read.ranks, tokens, comm: read.comm, long: long.length, longest };
}

const results = [];
const configs = [[1, 1], [1, 8], [ranks, 8]];
for (let i = 0; i < rounds; i++) {
  for (const [r, shards] of configs) results.push(await run(r, shards));
}
const med = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const tokensOf = (r, shards) => med(results.filter((x) => x.r === r && x.shards === shards).map((x) => x.tokens));
console.log(`Machine: ${os.cpus()[0].model}, ${os.cpus().length} cores; headless Chromium; ${rounds} alternating rounds of ${seconds} s, medians.\n`);
console.log('| shards | ranks asked | in use | tokens/s (each round) | median | communication ms a step | main-thread tasks > 50 ms (longest ms) |\n|---|---|---|---|---|---|---|');
for (const [r, shards] of configs) {
  const mine = results.filter((x) => x.r === r && x.shards === shards);
  console.log(`| ${shards} | ${r} | ${mine[0].inUse} | ${mine.map((x) => x.tokens.toFixed(0)).join(', ')} | ${med(mine.map((x) => x.tokens)).toFixed(0)} | ${mine.map((x) => x.comm.toFixed(2)).join(', ')} | ${mine.map((x) => `${x.long} (${x.longest.toFixed(0)})`).join(', ')} |`);
}
console.log(`\n${ranks} ranks against 1 (8 shards): ${(tokensOf(ranks, 8) / tokensOf(1, 8)).toFixed(2)}×; against one shard on one worker: ${(tokensOf(ranks, 8) / tokensOf(1, 1)).toFixed(2)}×`);
await browser.close();
server.close();
