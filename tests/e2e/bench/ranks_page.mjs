// The page's default transformer (8 shards) on 1 and on R ranks (rank
// workers, issue 40), and in one shard on one worker (the default before),
// alternating in one browser session: steps and tokens/s after SECONDS of
// training each (default 30), and the page's main thread meanwhile (its
// tasks over 50 ms). A measurement, not a test:
//   node tests/e2e/bench/ranks_page.mjs [SECONDS] [R] [ROUNDS]
// prints a Markdown table for bench/ranks.md.
import { serve, launch } from './browser.mjs';
import { pageTokensPerSecond } from './page_rate.mjs';
import os from 'node:os';

const seconds = Number(process.argv[2] ?? 30);
const ranks = Number(process.argv[3] ?? 2);
const rounds = Number(process.argv[4] ?? 2);
const { server, root } = await serve();
const browser = await launch();

const run = (r, shards) => pageTokensPerSecond(browser, root, { ranks: r, shards, seconds });

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
