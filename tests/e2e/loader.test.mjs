// A data loader that does real work (issue 43): the slow-loader lesson on
// real augmentation (shifts and elastic distortion of every MNIST image) —
// made by the training loop it is the step's data time, made by loader
// workers beside the step it goes; the losses are the loop's own with any
// number of workers; the run with its loader continues in PyTorch, whose
// DataLoader makes the same images.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { setup, artifacts, text, stepCount, patience, setField, continueInPyTorch, downloadLosses } from './harness.mjs';

const ctx = setup();
const experiment = (page) => page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))));
const stepsAtLeast = (page, n, timeout = 60_000) => page.waitForFunction(
  (s) => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= s, n,
  { timeout: patience(timeout) });
// The lesson's readout: data ms and step ms per step (means of the last 60).
const dataShare = async (page) => {
  const m = (await text(page, 'gpu-busy-share')).match(/^data ([\d.]+) ms of ([\d.]+) ms per step \((\d+) %\)/);
  assert.ok(m, await text(page, 'gpu-busy-share'));
  return { data: Number(m[1]), step: Number(m[2]), share: Number(m[3]) };
};

test('heavy augmentation made by the loop is data time; loader workers make it beside the step', async (t) => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  await page.getByTestId('lesson-augmentation').click();
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.augment !== undefined);
  const e = await experiment(page);
  assert.equal(e.data.source, 'mnist', 'the spiral\'s points are not images: the lesson takes MNIST');
  assert.deepEqual([e.model.layers.length, e.model.layers[0].units, e.batch_size], [2, 64, 20], 'the lesson\'s small MLP');
  assert.deepEqual(e.data.augment, { shift: 2, elastic: { alpha: 34, sigma: 4 } });
  assert.equal(e.data.num_workers, undefined);
  assert.equal(await page.getByTestId('augmentation').inputValue(), 'elastic');
  assert.equal(await page.getByTestId('num-workers').inputValue(), '0');
  assert.match(await text(page, 'loader-status'), /The training loop makes each batch itself/);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true',
    null, { timeout: patience(90_000) });

  await page.getByTestId('train-toggle').click();
  await stepsAtLeast(page, 70, 120_000);
  const inLoop = await dataShare(page);
  // Figures are reported, not asserted (a shared machine's timings vary):
  // the behaviour asserted is that the data phase is measured at all.
  assert.ok(inLoop.data > 0, `the loop's augmentation is data time: ${JSON.stringify(inLoop)}`);
  // The arithmetic of hiding it, from the measured times and the cores
  // the browser reports.
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  const arithmetic = await text(page, 'loader-cores');
  const m = arithmetic.match(/^Making a step's batches takes ([\d.]+) ms of a core; the rest of the step takes ([\d.]+) ms\. To hide it, loaders need about ([\d.]+) cores of their own beside \d+ training workers? and the page's thread; this browser reports (\d+) cores, (\d+) to spare: (enough|too few)/);
  assert.ok(m, arithmetic);
  assert.equal(Number(m[4]), cores);
  assert.ok(Math.abs(Number(m[3]) - Number(m[1]) / Number(m[2])) <= 0.06 + 0.01 * Number(m[3]), arithmetic);
  assert.equal(m[6] === 'enough', Number(m[5]) >= Number(m[3]), arithmetic);

  // Two loader workers, prefetching 2 each: a live change of the run.
  await setField(page, 'num-workers', 2);
  await page.waitForFunction(() => /^2 loader workers in use; each makes a batch in [\d.]+ ms/
    .test(document.querySelector('[data-testid=loader-status]')?.textContent ?? ''), null, { timeout: patience(60_000) });
  const from = await stepCount(page);
  await stepsAtLeast(page, from + 80, 120_000);
  const beside = await dataShare(page);
  await page.getByTestId('train-toggle').click();
  const status = await text(page, 'loader-status');
  assert.ok((await experiment(page)).data.num_workers === 2);
  t.diagnostic(`MNIST, the lesson's MLP, elastic augmentation: in the loop data ${inLoop.data} of ${inLoop.step} ms per step (${inLoop.share} %); `
    + `2 loader workers: ${beside.data} of ${beside.step} ms (${beside.share} %); ${status}; ${await text(page, 'loader-cores')}`);
  fs.writeFileSync(path.join(artifacts, 'loader-lesson.txt'), `${JSON.stringify({ inLoop, beside, status, arithmetic, cores })}\n`);
  await page.locator('.lessons').screenshot({ path: path.join(artifacts, 'loader-lesson.png') });

  // Augmentation names what it needs.
  await page.getByTestId('dataset').selectOption('spiral');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.source === 'spiral');
  assert.equal((await experiment(page)).data.augment, undefined, 'points are not images: the augmentation goes');
  await page.getByTestId('augmentation').selectOption('shift');
  await page.waitForFunction(() => /pick the digits or MNIST/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  assert.deepEqual(errors, []);
  await page.close();
});

// Losses of an augmented conv net on the digits, per step, from the page's
// metrics download, with `workers` loader workers.
async function losses(workers, steps) {
  const e = {
    seed: 11,
    model: { input_shape: [1, 8, 8], layers: [
      { kind: 'conv2d', filters: 4, kernel: 3, padding: 1, activation: 'relu' },
      { kind: 'max_pool2d', kernel: 2 },
      { units: 10, activation: 'linear' }] },
    loss: 'cross_entropy', optimizer: { kind: 'adam', lr: 0.01 }, batch_size: 16,
    data: { source: 'digits', augment: { shift: 1, elastic: { alpha: 9.7, sigma: 1.1 } },
      ...(workers > 0 ? { num_workers: workers } : {}) },
  };
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu#e=${encodeURIComponent(JSON.stringify(e))}`);
  assert.equal(await page.getByTestId('num-workers').inputValue(), String(workers));
  await page.getByTestId('train-toggle').click();
  await stepsAtLeast(page, steps);
  await page.getByTestId('train-toggle').click();
  const status = await text(page, 'loader-status');
  const byStep = await downloadLosses(page);
  assert.deepEqual(errors, []);
  return { page, byStep, status };
}

test('an augmented run has the same losses made by the loop or by three loader workers, and continues in PyTorch', async (t) => {
  const loop = await losses(0, 40);
  await loop.page.close();
  const three = await losses(3, 40);
  assert.match(three.status, /^3 loader workers in use/, three.status);
  let compared = 0;
  for (const [step, loss] of loop.byStep) {
    if (three.byStep.has(step)) {
      assert.equal(three.byStep.get(step), loss, `step ${step}`);
      compared += 1;
    }
  }
  assert.ok(compared >= 30, `steps compared: ${compared}`);
  t.diagnostic(`${compared} steps: the same losses with 0 and 3 loader workers`);
  const { page } = three;

  // The conv net's step, layer by layer (conv, pool, dense): every layer timed, the conv
  // layers' patch matrices, the FLOPs' ratio against the measured one.
  const rows = page.locator('[data-testid=layer-anatomy-row]');
  assert.equal(await rows.count(), 3);
  for (const l of [0, 2]) {
    const row = rows.nth(l);
    assert.ok(Number(await row.getAttribute('data-forward-ms')) > 0 && Number(await row.getAttribute('data-backward-ms')) > 0);
  }
  assert.ok(Number(await rows.nth(0).getAttribute('data-workspace-bytes')) > 0, 'a conv layer\'s patch matrix');
  assert.equal(await rows.nth(1).getAttribute('data-workspace-bytes'), '0');
  assert.match(await text(page, 'layer-anatomy-ratio'), /^forward : backward = 1 : [\d.]+ measured, 1 : [\d.]+ in FLOPs/);
  assert.match(await text(page, 'layer-anatomy-memory'), /^Forward keeps [\d.]+ [KM]?i?B for backward/);
  t.diagnostic(`layer by layer: ${await text(page, 'layer-anatomy-ratio')}`);

  // The script's DataLoader (3 workers) makes the same images: the next
  // step's gradient norm is the page's.
  const { script, out, torchNorm } = await continueInPyTorch(page, 'loader-export');
  const source = fs.readFileSync(script, 'utf8');
  assert.match(source, /NUM_WORKERS = 3/);
  assert.match(source, /class Augmenter/);
  const before = await stepCount(page);
  await page.getByTestId('step-once').click();
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) === n, before + 1);
  const pageNorm = Number.parseFloat(await text(page, 'grad-norm'));
  assert.ok(Math.abs(torchNorm - pageNorm) <= 2e-4 * Math.max(1, pageNorm), `PyTorch ${torchNorm} vs page ${pageNorm}\n${out}`);
  t.diagnostic(`augmented run with 3 loader workers, next step's gradient norm: PyTorch ${torchNorm}, page ${pageNorm}`);
  await page.close();
});
