// The step's anatomy on the page: every phase timed on every path, the
// timeline adding up beside the memory figures, step by phase, and
// activation checkpointing's memory against its recompute.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { setup, text, number, trainUntil, settle, patience } from './harness.mjs';

const ctx = setup();
const open = (url, options) => ctx.open(url, options);

const PARTS = ['data', 'forward', 'backward', 'optimizer', 'unsplit', 'checkpoint', 'logging', 'profiling', 'engine',
  'messaging', 'page', 'other'];
// The timeline's means and the mean step, read in one evaluation: a frame
// still finishing after a pause may update the timeline between two reads.
const readParts = (page) => page.evaluate((names) => [names
  .map((p) => Number.parseFloat(document.querySelector(`[data-testid=phase-ms-${p}]`).textContent)),
Number.parseFloat(document.querySelector('[data-testid=step-wall-ms]').textContent)], PARTS);

test('the anatomy times every phase on every path: profiled steps with their bounds, every part named', async (t) => {
  for (const [url, path] of [[`${ctx.root}?engine=cpu`, /CPU engine, each phase repeated in a burst/],
    [`${ctx.root}?engine=gpu`, /GPU engine, the phased kernels/], [ctx.base, /GPU engine, the phased kernels/]]) {
    const { page } = await open(url);
    await page.getByTestId('train-toggle').click();
    await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 150
      && document.querySelector('[data-testid=profile]'), null, { timeout: patience(60_000) });
    await page.getByTestId('train-toggle').click();
    await settle(page);
    assert.match(await text(page, 'clock-resolution'), /resolve[s]? [\d.]+ [µn]s here.*the page is cross-origin isolated/, url);
    await page.waitForSelector('[data-testid=profile]');
    for (const phase of ['forward', 'backward', 'optimizer']) {
      const cell = page.getByTestId(`profile-${phase}-ms`);
      const [ms, bound] = [Number(await cell.getAttribute('data-value')), Number(await cell.getAttribute('data-uncertainty'))];
      assert.ok(ms > 0 && Number.isFinite(bound) && bound > 0, `${url}: ${phase} ${ms} ± ${bound} ms`);
    }
    const steps = await text(page, 'profile-steps');
    // The GPU profiles by step number (2, 102, …, 1-based 3, 103, …); the
    // CPU by time, the first a second after training began.
    assert.match(steps, path.source.startsWith('GPU') ? /^Profiled steps 3, 103\b/ : /^Profiled steps [\d,]+\b/, `${url}: ${steps}`);
    assert.match(steps, path, url);
    const [parts, wall] = await readParts(page);
    const sum = parts.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - wall) <= 0.001 * PARTS.length, `${url}: parts ${parts} sum to ${sum}, wall ${wall}`);
    assert.ok(parts[PARTS.indexOf('other')] <= 0.1 * wall + 0.001, `${url}: unnamed ${parts.at(-1)} of ${wall} ms: ${PARTS.map((p, i) => `${p} ${parts[i]}`).join(", ")}`);
    if (path.source.startsWith('CPU')) {
      // The default network's phases last microseconds, below what one
      // reading resolves: the timeline shows the profiled split, and its
      // forward : backward is the profile's within the profile's bounds.
      assert.match(await text(page, 'timeline-split'), /split as the profiled steps/, url);
      const [[f, uf], [b, ub], [tf, tb]] = await page.evaluate(() => {
        const cell = (p) => document.querySelector(`[data-testid=profile-${p}-ms]`);
        const value = (p) => [Number(cell(p).dataset.value), Number(cell(p).dataset.uncertainty)];
        const shown = (p) => Number(document.querySelector(`[data-testid=phase-ms-${p}]`).dataset.value);
        return [value('forward'), value('backward'), [shown('forward'), shown('backward')]];
      });
      const [low, high] = [(b - ub) / (f + uf), (b + ub) / Math.max(f - uf, 1e-12)];
      assert.ok(tb / tf >= low * (1 - 1e-9) && tb / tf <= high * (1 + 1e-9),
        `${url}: the timeline's backward : forward ${tb / tf} outside the profile's [${low}, ${high}]`);
    }
    t.diagnostic(`${url}: ${await text(page, 'flops')}; mean step ${wall} ms: ${PARTS.map((p, i) => `${p} ${parts[i]}`).join(', ')}; ${steps}; ${await text(page, 'timeline-split')}`);
    await page.close();
  }
});

test('the step timeline adds up and memory matches the model', async () => {
  const { page } = await open(ctx.base);
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent) >= 40, null, { timeout: patience(60_000) });
  await page.getByTestId('train-toggle').click();
  // Read in one evaluation: a frame still finishing after the pause may
  // update the timeline between two reads.
  const [parts, wall] = await readParts(page);
  const sum = parts.reduce((a, b) => a + b, 0);
  // Each shown mean is rounded to 0.001 ms.
  assert.ok(Math.abs(sum - wall) <= 0.001 * PARTS.length, `phases ${parts} sum to ${sum}, wall ${wall}`);
  assert.ok(parts[1] > 0 && parts[2] > 0, 'forward and backward were measured');
  assert.ok(await page.locator('[data-testid=phase-timeline] rect').count() > 0);
  // The default 2-16-16-1 network: P = (2·16 + 16) + (16·16 + 16) + (16 + 1) = 337.
  const p = 337;
  assert.equal(await number(page, 'memory-params-bytes'), 4 * p);
  assert.equal(await number(page, 'memory-grads-bytes'), 4 * p);
  assert.equal(await number(page, 'memory-optimizer-bytes'), 2 * 4 * p, 'AdamW keeps two copies');
  assert.equal(await number(page, 'memory-activations-bytes'), 2 * 4 * 32 * (16 + 16 + 1), 'z and a, batch 32');
  // SGD without momentum keeps none; a bigger batch stores more activations.
  await page.getByTestId('optimizer').selectOption('sgd');
  await page.getByTestId('momentum').fill('0');
  await page.getByTestId('momentum').press('Enter');
  await page.getByTestId('batch-size').fill('64');
  await page.getByTestId('batch-size').press('Enter');
  await page.waitForFunction(() => document.querySelector('[data-testid=memory-activations-bytes]').textContent === String(2 * 4 * 64 * 33));
  assert.equal(await number(page, 'memory-optimizer-bytes'), 0);
  assert.match(await text(page, 'grad-norm'), /^\d/);
  await page.close();
});

test('step by phase shows what each phase produced, and layers fill in over time', async () => {
  for (const url of [ctx.base, `${ctx.root}?engine=cpu`]) {
    const { page } = await open(url);
    const phases = [
      ['forward (micro-batch 1) of step 1', 'activation', '0'],
      ['backward (micro-batch 1) of step 1', 'weight grad', '0'],
      ['optimizer of step 1', 'exp_avg_sq', '1'],
      ['forward (micro-batch 1) of step 2', 'pre-activation', '1'],
    ];
    for (const [label, column, steps] of phases) {
      await page.getByTestId('step-phase').click();
      await page.waitForFunction((l) => document.querySelector('[data-testid=current-phase]').textContent === l, label)
        .catch(async (e) => { throw new Error(`${url}: expected "${label}", shows "${await text(page, 'current-phase')}" (${e.message})`); });
      const headers = await page.locator('[data-testid=phase-tensors] tr').first().locator('th').allTextContents();
      assert.ok(headers.includes(column), `${label}: columns ${headers}`);
      // The default 2-16-16-1 network: a row per layer.
      assert.equal(await page.locator('[data-testid=phase-tensors] tr').count(), 1 + 3);
      assert.equal(await text(page, 'step-count'), steps, `${label}: steps taken`);
    }
    // After the optimizer phase: the update-to-weight ratio of every layer.
    await page.getByTestId('step-phase').click();
    await page.getByTestId('step-phase').click();
    await page.waitForFunction(() => document.querySelector('[data-testid=current-phase]').textContent === 'optimizer of step 2');
    for (const l of [0, 1, 2]) {
      const ratio = await number(page, `update-ratio-${l}`);
      assert.ok(ratio > 0 && ratio < 1, `layer ${l}: ‖Δθ‖/‖θ‖ = ${ratio}`);
    }
    assert.match(await text(page, 'phase-summary'), /^step loss \d/);

    // Whole steps, a sample each (samples are at least 250 ms apart): the
    // per-layer distributions gain columns, and every layer's gradient
    // norm is shown.
    for (let i = 1; i <= 6; i++) {
      await page.getByTestId('step-once').click();
      await page.waitForFunction((n) => document.querySelector('[data-testid=step-count]').textContent === String(n), 2 + i);
      await page.waitForTimeout(300);
    }
    await page.waitForFunction(() => document.querySelector('[data-testid=distribution-2-updates]').width >= 5, null, { timeout: patience(30_000) });
    for (const l of [0, 1, 2]) {
      const norm = await number(page, `grad-norm-layer-${l}`);
      assert.ok(norm > 0 && Number.isFinite(norm), `layer ${l} gradient norm ${norm}`);
    }
    assert.ok(await page.locator('[data-testid=grad-norm-per-layer-chart] path').count() === 3);
    await page.close();
  }
});

test('activation checkpointing stores less, recomputes in backward, and changes no result', async (t) => {
  for (const url of [ctx.base, `${ctx.root}?engine=cpu`]) {
    const { page } = await open(url);
    const run = async () => {
      for (let i = 1; i <= 8; i++) {
        await page.getByTestId('step-once').click();
        await page.waitForFunction((n) => document.querySelector('[data-testid=step-count]').textContent === String(n), i);
      }
      await page.waitForTimeout(300);
      return [await text(page, 'grad-norm'), await text(page, 'train-loss')];
    };
    const off = await run();
    // 2-16-16-1 at batch 32: z and a stored, 2·4·32·33 bytes; with
    // checkpointing a and one z scratch of the widest layer, 4·32·(33 + 16).
    assert.equal(await number(page, 'memory-activations-bytes'), 2 * 4 * 32 * 33);
    await page.getByTestId('activation-checkpointing').check();
    await page.waitForFunction(() => document.querySelector('[data-testid=memory-activations-bytes]').textContent === String(4 * 32 * 49));
    assert.match(await text(page, 'checkpointing-trade'), /saves 2176 B/);
    await page.getByTestId('reset').click();
    await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '0');
    const on = await run();
    assert.deepEqual(on, off, `${url}: the same run, bit for bit`);
    // Step by phase: with checkpointing, forward keeps no pre-activations.
    await page.getByTestId('step-phase').click();
    await page.waitForFunction(() => /^forward/.test(document.querySelector('[data-testid=current-phase]').textContent));
    const headers = await page.locator('[data-testid=phase-tensors] tr').first().locator('th').allTextContents();
    assert.ok(!headers.includes('pre-activation') && headers.includes('activation'), `${headers}`);
    // Time added: both modes measured.
    await trainUntil(page, 60);
    await page.getByTestId('activation-checkpointing').uncheck();
    await trainUntil(page, 120);
    assert.match(await text(page, 'checkpointing-trade'), /backward measured [\d.]+ ms without, [\d.]+ ms with/);
    t.diagnostic(`${url}: ${await text(page, 'checkpointing-trade')}`);
    await page.close();
  }
});
