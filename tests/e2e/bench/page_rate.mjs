// The page's default transformer trained for a while on R rank workers:
// what the ranks benchmarks share (ranks_page.mjs, ranks_nanogpt.mjs).
// Tokens/s from the step counter over `seconds`, counted from the third
// step; the page's main thread meanwhile (every task over 50 ms, through
// the Long Tasks API, and the share of the time it was busy, from the
// DevTools protocol's TaskDuration: on two cores the ranks share them
// with it).

export async function pageTokensPerSecond(browser, root, { ranks, shards = 8, seconds }) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const settled = () => page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: 90_000 });
  await page.goto(`${root}?engine=cpu&ranks=${ranks}`);
  await settled();
  await page.getByTestId('model-kind').selectOption('gpt');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.kind === 'gpt');
  // The default transformer (8 shards of 2 windows), or in `shards`.
  const e = await page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))));
  e.shards = shards;
  await page.goto(`${root}?engine=cpu&ranks=${ranks}#e=${encodeURIComponent(JSON.stringify(e))}`);
  await page.reload();
  await settled();
  await page.getByTestId('train-toggle').click();
  const started = Date.now();
  const step = () => page.evaluate(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')));
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 3, null, { timeout: 90_000 });
  await page.evaluate(() => {
    window.stepscopeLongTasks = [];
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) window.stepscopeLongTasks.push(entry.duration);
    }).observe({ type: 'longtask' });
  });
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const busy = async () => (await cdp.send('Performance.getMetrics')).metrics.find((m) => m.name === 'TaskDuration').value;
  const [s0, t0, b0] = [await step(), Date.now(), await busy()];
  await page.waitForTimeout(seconds * 1000);
  const [s1, t1, b1] = [await step(), Date.now(), await busy()];
  const mainBusy = (b1 - b0) / ((t1 - t0) / 1000);
  const long = await page.evaluate(() => window.stepscopeLongTasks);
  const read = await page.evaluate(() => ({
    ranks: document.querySelector('[data-testid=ranks]')?.dataset.value,
    reason: document.querySelector('[data-testid=ranks-reason]')?.textContent ?? '',
    comm: Number(document.querySelector('[data-testid=phase-ms-communication]')?.dataset.value),
  }));
  await page.getByTestId('train-toggle').click();
  await page.close();
  const tokens = ((s1 - s0) * e.model.context * e.batch_size) / ((t1 - t0) / 1000);
  const longest = long.length ? Math.max(...long) : 0;
  console.error(`shards ${shards}, ranks ${ranks} (in use ${read.ranks}${read.reason ? `: ${read.reason}` : ''}): ${s1 - s0} steps in ${((t1 - t0) / 1000).toFixed(1)} s, ${tokens.toFixed(0)} tokens/s, communication ${read.comm.toFixed(2)} ms a step; main thread: busy ${(100 * mainBusy).toFixed(0)} %, ${long.length} tasks over 50 ms, longest ${longest.toFixed(0)} ms; ${Date.now() - started} ms in all`);
  return { r: ranks, shards, inUse: read.ranks, tokens, comm: read.comm, long: long.length, longest, mainBusy };
}
