// Ranks on the page (issue 40): the transformer's steps shared by rank
// workers (each a replica, meeting in a SharedArrayBuffer), the same
// losses as on one worker, the all-reduce and every rank in the anatomy,
// and, where the host sends no isolation headers, one worker and why.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setup, patience, text, number, stepCount, downloadLosses } from './harness.mjs';
import { serve } from './bench/browser.mjs';

const ctx = setup();

// The files of a tar archive (ustar: 512-byte headers, sizes in octal).
function untar(buf) {
  const files = [];
  for (let at = 0; at + 512 <= buf.length && buf[at] !== 0;) {
    const name = buf.subarray(at, at + 100).toString('latin1').replace(/\0.*$/s, '');
    const size = parseInt(buf.subarray(at + 124, at + 136).toString('latin1').replace(/\0.*$/s, '').trim(), 8);
    if (buf[at + 156] === 0x30) files.push({ name, bytes: buf.subarray(at + 512, at + 512 + size) });
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return files;
}

// The default transformer on `ranks` workers (the CPU engine), trained to
// at least `steps` steps: the ranks readout and each step's loss from the
// metrics download. `during(page, workers)`, if given, runs once the run
// has taken 3 steps (`workers`: the page's live workers, in the order they
// started: the training worker, then its rank workers).
async function train(url, steps, during) {
  const { page, errors } = await ctx.open(url);
  const workers = [];
  page.on('worker', (w) => {
    workers.push(w);
    w.on('close', () => workers.splice(workers.indexOf(w), 1));
  });
  await page.getByTestId('model-kind').selectOption('gpt');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.kind === 'gpt');
  // The default transformer in 8 shards of 2 windows, as a link gives it.
  const e = await page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))));
  e.shards = 8;
  await page.goto(`${url}#e=${encodeURIComponent(JSON.stringify(e))}`);
  await page.reload();
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).shards === 8);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true',
    null, { timeout: patience(90_000) });
  await page.getByTestId('train-toggle').click();
  if (during) {
    await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 3,
      null, { timeout: patience(180_000) });
    await during(page, workers);
  }
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= n,
    steps, { timeout: patience(180_000) });
  await page.getByTestId('train-toggle').click();
  const losses = await downloadLosses(page);
  return { page, errors, losses };
}

test('the transformer trains on two workers with the losses of one (and on three and four), and the anatomy shows the all-reduce and each rank', async (t) => {
  const two = await train(`${ctx.root}?engine=cpu&ranks=2`, 12);
  assert.equal(await two.page.getByTestId('ranks').getAttribute('data-value'), '2', await text(two.page, 'ranks'));
  assert.equal(await two.page.getByTestId('ranks-reason').count(), 0,
    await two.page.getByTestId('ranks-reason').allTextContents().then((t) => t.join()));
  // Each rank's part of the last step, the slowest named.
  const rows = two.page.locator('[data-testid=rank-row]');
  assert.equal(await rows.count(), 2);
  for (let r = 0; r < 2; r++) {
    const row = rows.nth(r);
    assert.equal(await row.getAttribute('data-rank'), String(r));
    assert.ok(Number(await row.getAttribute('data-compute-ms')) > 0);
    assert.ok(Number(await row.getAttribute('data-wait-ms')) >= 0);
  }
  assert.match(await text(two.page, 'slowest-rank'), /^Slowest: rank [01], [\d.]+ ms of forward and backward/);
  assert.ok(await number(two.page, 'phase-ms-communication') > 0, 'the all-reduce is a phase of its own');
  assert.match(await text(two.page, 'rank-memory'), /Every rank holds a replica/);
  assert.match(await text(two.page, 'scaling-readout'), /^2 ranks busy \d+ % of the step's parallel part/);
  t.diagnostic(`scaling: ${await text(two.page, 'scaling-readout')}`);

  // The straggler lesson: the last rank does its shards twice, for real,
  // and the other waits for it.
  await two.page.getByTestId('train-toggle').click();
  await two.page.getByTestId('lesson-slow-rank').click();
  await two.page.waitForFunction(() => {
    const m = document.querySelector('[data-testid=lesson-slow-rank-readout]').textContent
      .match(/The other ranks wait ([\d.]+) ms a step for it \(they waited ([\d.]+) ms before\)/);
    return m !== null;
  }, null, { timeout: patience(60_000) });
  // The figures are reported, not asserted (a shared machine's timings).
  t.diagnostic(await text(two.page, 'slowest-rank'));
  console.log(await text(two.page, 'lesson-slow-rank-readout'));
  await two.page.getByTestId('train-toggle').click();

  // The trace: one per rank, as torchrun's, in one folder (a tar); the
  // page opens them as a run on two ranks, the slowest named.
  const [tarball] = await Promise.all([two.page.waitForEvent('download'), two.page.getByTestId('download-trace').click()]);
  assert.match(tarball.suggestedFilename(), /^stepscope-page-step\d+\.tar$/);
  const files = untar(fs.readFileSync(await tarball.path()));
  assert.deepEqual(files.map((f) => f.name.replace(/^[^/]+\//, '')), ['rank0.pt.trace.json', 'rank1.pt.trace.json']);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stepscope-ranks-'));
  const paths = files.map((f, r) => {
    const info = JSON.parse(f.bytes.toString('utf8')).distributedInfo;
    assert.deepEqual([info.rank, info.world_size], [r, 2]);
    const p = path.join(dir, `rank${r}.pt.trace.json`);
    fs.writeFileSync(p, f.bytes);
    return p;
  });
  await two.page.getByTestId('open-run').setInputFiles(paths);
  await two.page.waitForFunction(() => document.querySelectorAll('[data-testid=opened-run-ranks] tr[data-rank]').length === 2
    || document.querySelector('[data-testid=alert]'), null, { timeout: patience(60_000) });
  assert.equal(await two.page.locator('[data-testid=alert]').count(), 0);
  const opened = await two.page.locator('[data-testid=opened-run-ranks] tr[data-rank]').evaluateAll((rows) =>
    rows.map((r) => [r.dataset.rank, Number(r.dataset.stepMs), Number(r.dataset.computeMs), r.classList.contains('straggler')]));
  t.diagnostic(`opened ranks: ${JSON.stringify(opened)}`);
  assert.ok(opened.every(([, step, compute]) => step > 0 && compute > 0 && compute <= step * 1.000001), JSON.stringify(opened));

  const one = await train(`${ctx.root}?engine=cpu&ranks=1`, 12);
  assert.equal(await one.page.getByTestId('ranks').getAttribute('data-value'), '1');
  const common = [...one.losses.keys()].filter((s) => two.losses.has(s));
  assert.ok(common.length >= 12, `${common.length} steps in common`);
  for (const s of common) assert.equal(two.losses.get(s), one.losses.get(s), `step ${s}`);
  console.log(`steps ${common[0]}..${common.at(-1)}: the same losses on 1 and 2 workers (${one.losses.get(common.at(-1))} at the last)`);
  assert.deepEqual([...one.errors, ...two.errors], []);
  await one.page.close();
  await two.page.close();

  // Three and four workers (more than this machine's cores: the bits do
  // not depend on them either).
  for (const r of [3, 4]) {
    const more = await train(`${ctx.root}?engine=cpu&ranks=${r}`, 8);
    assert.equal(await more.page.getByTestId('ranks').getAttribute('data-value'), String(r), await text(more.page, 'ranks'));
    const shared = [...more.losses.keys()].filter((s) => one.losses.has(s));
    assert.ok(shared.length >= 8, `${shared.length} steps in common on ${r} workers`);
    for (const s of shared) assert.equal(more.losses.get(s), one.losses.get(s), `${r} workers, step ${s}`);
    assert.deepEqual(more.errors, []);
    await more.page.close();
  }

  // A rank worker that stops answering (its script terminated through the
  // DevTools protocol, as a crashed or hung worker would stop): named, its
  // shards run on the others, the run goes on with the same losses.
  const stalled = await train(`${ctx.root}?engine=cpu&ranks=2`, 14, async (page, workers) => {
    assert.equal(workers.length, 2, workers.map((w) => w.url()).join());
    const cdp = await ctx.browser.newBrowserCDPSession();
    const { targetInfos } = await cdp.send('Target.getTargets');
    const target = targetInfos.find((i) => i.type === 'worker' && i.url === workers[1].url());
    assert.ok(target, 'the rank worker is a DevTools target');
    const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: target.targetId, flatten: false });
    await cdp.send('Target.sendMessageToTarget', { sessionId, message: JSON.stringify({ id: 1, method: 'Runtime.terminateExecution' }) });
    await page.waitForFunction(() => /rank 1 stopped \(rank worker 1 did not answer within 20 s\); its shards ran on the other ranks/
      .test(document.querySelector('[data-testid=notice]')?.textContent ?? ''), null, { timeout: patience(60_000) });
    await page.waitForFunction(() => document.querySelector('[data-testid=ranks]').dataset.value === '1');
    await cdp.detach();
  });
  const after = [...stalled.losses.keys()].filter((s) => one.losses.has(s));
  assert.ok(after.length >= 12, `${after.length} steps in common after the stall`);
  for (const s of after) assert.equal(stalled.losses.get(s), one.losses.get(s), `a rank stalled, step ${s}`);
  console.log(`a rank worker stalled: steps ${after[0]}..${after.at(-1)} the same losses as on one worker`);
  assert.deepEqual(stalled.errors, []);
  await stalled.page.close();
});

// A plain static host (no COOP/COEP headers): the page isolates itself
// with its service worker (app/isolate-sw.js, one reload) and trains on
// two workers; where service workers are blocked, it trains on one and
// says why.
test('a host without isolation headers: the page isolates itself, or trains on one worker and says why', async (t) => {
  const plain = await serve(() => null, { isolated: false });
  const open = async (options) => {
    const { page, errors } = await ctx.open(`${plain.root}?engine=cpu&ranks=2`, options);
    if (options.serviceWorkers !== 'block') {
      // The service worker's one reload, then the page settled again.
      await page.waitForFunction(() => window.crossOriginIsolated, null, { timeout: patience(60_000) });
      await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true',
        null, { timeout: patience(90_000) });
    }
    await page.getByTestId('model-kind').selectOption('gpt');
    await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.kind === 'gpt');
    await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true',
      null, { timeout: patience(90_000) });
    await page.getByTestId('train-toggle').click();
    await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 3,
      null, { timeout: patience(120_000) });
    return { page, errors };
  };
  try {
    const isolated = await open({});
    assert.equal(await isolated.page.evaluate(() => [window.crossOriginIsolated, !!navigator.serviceWorker.controller].join()), 'true,true');
    await isolated.page.waitForFunction(() => document.querySelector('[data-testid=ranks]')?.dataset.value === '2',
      null, { timeout: patience(60_000) });
    assert.equal(await isolated.page.getByTestId('ranks-reason').count(), 0);
    t.diagnostic(`plain host, service worker: ${await text(isolated.page, 'ranks')}`);
    assert.deepEqual(isolated.errors, []);
    await isolated.page.close();

    const blocked = await open({ serviceWorkers: 'block' });
    await blocked.page.waitForFunction(() => /not cross-origin isolated/.test(document.querySelector('[data-testid=ranks-reason]')?.textContent ?? ''),
      null, { timeout: patience(60_000) });
    assert.equal(await blocked.page.getByTestId('ranks').getAttribute('data-value'), '1');
    assert.ok(await stepCount(blocked.page) >= 3, 'it trains on one');
    assert.deepEqual(blocked.errors, []);
    await blocked.page.close();
  } finally {
    plain.server.close();
  }
});
