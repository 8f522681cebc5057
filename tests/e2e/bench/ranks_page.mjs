// The page's default transformer, in 8 shards, on 1 and on R ranks (rank workers, issue
// 40), alternating in one browser session: steps and tokens/s after
// SECONDS of training each (default 30), the losses compared where both
// runs reached the same step. A measurement, not a test:
//   node tests/e2e/bench/ranks_page.mjs [SECONDS] [R] [ROUNDS]
// prints a Markdown table for bench/ranks.md.
import { serve, launch } from './browser.mjs';
import os from 'node:os';

const seconds = Number(process.argv[2] ?? 30);
const ranks = Number(process.argv[3] ?? 2);
const rounds = Number(process.argv[4] ?? 2);
const { server, root } = await serve();
const browser = await launch();

async function run(r) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(`${root}?engine=cpu&ranks=${r}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90_000 });
  await page.getByTestId('model-kind').selectOption('gpt');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.kind === 'gpt');
  // The default transformer in 8 shards of 2 windows, as a link gives it.
  const e = await page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))));
  e.shards = 8;
  await page.goto(`${root}?engine=cpu&ranks=${r}#e=${encodeURIComponent(JSON.stringify(e))}`);
  await page.reload();
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90_000 });
  await page.getByTestId('train-toggle').click();
  const started = Date.now();
  const step = () => page.evaluate(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')));
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 3, null, { timeout: 90_000 });
  const [s0, t0] = [await step(), Date.now()];
  await page.waitForTimeout(seconds * 1000);
  const [s1, t1] = [await step(), Date.now()];
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
  console.error(`ranks ${r} (in use ${read.ranks}${read.reason ? `: ${read.reason}` : ''}): ${s1 - s0} steps in ${((t1 - t0) / 1000).toFixed(1)} s, ${tokens.toFixed(0)} tokens/s, communication ${read.comm.toFixed(2)} ms a step; ${Date.now() - started} ms in all`);
  return { r, inUse: read.ranks, tokens, comm: read.comm };
}

const results = [];
for (let i = 0; i < rounds; i++) {
  results.push(await run(1));
  results.push(await run(ranks));
}
const med = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const one = med(results.filter((x) => x.r === 1).map((x) => x.tokens));
const many = med(results.filter((x) => x.r === ranks).map((x) => x.tokens));
console.log(`Machine: ${os.cpus()[0].model}, ${os.cpus().length} cores; headless Chromium; ${rounds} alternating rounds of ${seconds} s, medians.\n`);
console.log('| ranks asked | in use | tokens/s (each round) | median | communication ms a step |\n|---|---|---|---|---|');
for (const r of [1, ranks]) {
  const mine = results.filter((x) => x.r === r);
  console.log(`| ${r} | ${mine[0].inUse} | ${mine.map((x) => x.tokens.toFixed(0)).join(', ')} | ${med(mine.map((x) => x.tokens)).toFixed(0)} | ${mine.map((x) => x.comm.toFixed(2)).join(', ')} |`);
}
console.log(`\n${ranks} ranks against 1: ${(many / one).toFixed(2)}×`);
await browser.close();
server.close();
