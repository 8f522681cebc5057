// The runs list, comparing runs, and the race, on both engines.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { setup, artifacts, stepCount, trainUntil, setField, patience } from './harness.mjs';

const ctx = setup();

const entries = (page) => page.locator('[data-testid=runs-list] [data-testid=run-entry]');
const laneSteps = (page) => page.locator('[data-testid=race-lane-step]').evaluateAll((els) => els.map((e) => Number(e.dataset.value)));
// Lines a chart drew (a path with at least two points).
const linesDrawn = (page, id) =>
  page.locator(`[data-testid=${id}] path.series`).evaluateAll((els) => els.filter((e) => /L/.test(e.getAttribute('d') ?? '')).length);

async function waitSteps(page, n) {
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) === n, n);
}

async function startRace(page, setting, values, steps) {
  await page.getByTestId('race-setting').selectOption(setting);
  await page.getByTestId('race-values').fill(values);
  await page.getByTestId('race-steps').fill(String(steps));
  await page.getByTestId('race-start').click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=race-lane]').length >= 2);
}

// The comparison overlays what the page recorded, whichever engine trained.
for (const [engine, url, trained] of [['cpu', () => ctx.root + '?engine=cpu', 2000], ['gpu', () => ctx.base, 100]]) {
test(`runs are kept, and two of them compare with their differences listed (${engine})`, async () => {
  const { page, errors } = await ctx.open(url());
  await trainUntil(page, trained);
  // Paused, the live entry catches up with the run's last steps (the frame
  // in flight at Pause lands first); Reset then keeps it as it ended.
  await page.waitForTimeout(500);
  await page.waitForFunction(() => document.querySelector('[data-testid=run-entry].live [data-testid=run-steps]')?.dataset.value
    === document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, ''));
  const first = await stepCount(page);
  await page.getByTestId('reset').click();
  await waitSteps(page, 0);
  await setField(page, 'learning-rate', 0.1);
  await trainUntil(page, trained);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=runs-list] [data-testid=run-entry]').length === 2);
  // The live entry is refreshed a few times a second: it catches up with the paused run.
  await page.waitForFunction(() => document.querySelector('[data-testid=run-entry].live [data-testid=run-steps]')?.dataset.value
    === document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, ''));
  const labels = await entries(page).locator('b').allTextContents();
  assert.deepEqual(labels, ['Run 2 (training now)', 'Run 1']);
  const steps = await entries(page).locator('[data-testid=run-steps]').evaluateAll((els) => els.map((e) => Number(e.dataset.value)));
  assert.ok(steps.every((s) => s >= trained), `both runs trained: ${steps}`);
  assert.equal(steps[1], first, 'the first run is kept with the steps it ended at');
  // Nothing compared yet.
  assert.equal(await linesDrawn(page, 'compare-loss'), 0);
  await entries(page).nth(1).getByTestId('run-select').check();
  await entries(page).nth(0).getByTestId('run-select').check();
  await page.waitForSelector('[data-testid=compare-diff] li');
  const diff = await page.getByTestId('compare-diff').textContent();
  assert.match(diff, /Run 1 → Run 2: lr: 0\.02 → 0\.1/);
  assert.doesNotMatch(diff, /optimizer|batch/);
  for (const chart of ['compare-loss', 'compare-test-loss', 'compare-accuracy', 'compare-grad-norm']) {
    assert.equal(await linesDrawn(page, chart), 2, `${chart} overlays both runs`);
  }
  await page.locator('section.runs').screenshot({ path: path.join(artifacts, `compare-runs-${engine}.png`) });
  // A bad race is refused with a message; nothing starts, the run stays.
  const before = await stepCount(page);
  await page.getByTestId('race-setting').selectOption('lr');
  await page.getByTestId('race-values').fill('0.1');
  await page.getByTestId('race-start').click();
  await page.waitForFunction(() => /A race takes 2 to 4 values, got 1/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  await page.getByTestId('race-values').fill('0.1, fast');
  await page.getByTestId('race-start').click();
  await page.waitForFunction(() => /`fast` is not a number/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  await page.waitForTimeout(300);
  assert.equal(await page.locator('[data-testid=race-lane]').count(), 0);
  assert.equal(await stepCount(page), before);
  assert.deepEqual(errors, []);
  await page.close();
});
}

test('kept runs survive a reload, until forgotten', async () => {
  const { page, errors } = await ctx.open(ctx.root + '?engine=cpu');
  await trainUntil(page, 300);
  await page.getByTestId('reset').click();
  await waitSteps(page, 0);
  // The run kept by the reset, not the live entry still shown until the
  // loop has taken the reset (waiting on the count alone, a busy machine
  // reloaded before the kept run was in the list, let alone stored).
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=runs-list] [data-testid=run-entry]').length === 1
    && document.querySelectorAll('[data-testid=runs-list] [data-testid=run-entry].live').length === 0);
  const kept = await entries(page).first().getByTestId('run-steps').getAttribute('data-value');
  // The list is written to IndexedDB after it changes; a reload before
  // the write is done would lose it (the page says when it is stored).
  const stored = () => page.waitForFunction(() => document.querySelector('[data-testid=runs-list]')?.dataset.stored === 'true');
  await stored();
  await page.reload();
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: patience(90_000) });
  // The reset run must not come back from the autosave as a live one.
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=runs-list] [data-testid=run-entry]').length === 1)
    .catch(async (e) => {
      throw new Error(`${e.message}; entries: ${await entries(page).locator('b').allTextContents()}; steps ${await stepCount(page)}`);
    });
  assert.equal(await entries(page).first().locator('b').textContent(), 'Run 1 (earlier visit)');
  assert.equal(await entries(page).first().getByTestId('run-steps').getAttribute('data-value'), kept);
  await page.getByTestId('runs-clear').click();
  assert.equal(await entries(page).count(), 0);
  // The forgetting is stored too.
  await stored();
  await page.reload();
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: patience(90_000) });
  await page.waitForTimeout(1000);
  assert.equal(await entries(page).count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

for (const [engine, url] of [['cpu', () => ctx.root + '?engine=cpu'], ['gpu', () => ctx.base]]) {
  test(`a race of sgd and adamw trains both side by side (${engine})`, async () => {
    const { page, errors } = await ctx.open(url());
    await startRace(page, 'optimizer', 'sgd, adamw', 0);
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=race-lane-step]')].every((e) => Number(e.dataset.value) > 0),
      null, { timeout: patience(60_000) });
    const first = await laneSteps(page);
    await page.waitForFunction((first) => [...document.querySelectorAll('[data-testid=race-lane-step]')].every((e, i) => Number(e.dataset.value) > first[i] + 20),
      first, { timeout: patience(60_000) });
    assert.equal(await linesDrawn(page, 'race-loss'), 2, 'two series drawn');
    assert.equal(await stepCount(page), 0, 'the single run waits during the race');
    const status = await page.getByTestId('race-status').textContent();
    assert.match(status, engine === 'gpu' ? /on WebGPU/ : /on the CPU/);
    // Pause stops the race; Train goes on.
    await page.getByTestId('train-toggle').click();
    await page.waitForTimeout(500);
    const paused = await laneSteps(page);
    await page.waitForTimeout(500);
    assert.deepEqual(await laneSteps(page), paused, 'paused');
    assert.ok(Math.abs(paused[0] - paused[1]) <= 1, `the lanes stay level: ${paused}`);
    // Reset starts the race's lanes over; Train goes on with them.
    await page.getByTestId('reset').click();
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=race-lane-step]')].every((e) => e.dataset.value === '0'));
    await page.getByTestId('train-toggle').click();
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=race-lane-step]')].every((e) => Number(e.dataset.value) > 0),
      null, { timeout: patience(60_000) });
    await page.getByTestId('train-toggle').click();
    await page.getByTestId('race-end').click();
    await page.waitForFunction(() => /finished/.test(document.querySelector('[data-testid=race-status]').textContent));
    await page.waitForFunction(() => document.querySelectorAll('[data-testid=runs-list] [data-testid=run-entry]').length === 2);
    const labels = await entries(page).locator('b').allTextContents();
    assert.deepEqual(labels, ['Race: optimizer adamw', 'Race: optimizer sgd']);
    await page.locator('section.runs').screenshot({ path: path.join(artifacts, `race-${engine}.png`) });

    // The adamw lane of a 30-step race against a lone adamw run (the page's
    // default experiment) stepped 30 times.
    await startRace(page, 'optimizer', 'sgd, adamw', 30);
    await page.waitForFunction(() => /finished/.test(document.querySelector('[data-testid=race-status]').textContent), null, { timeout: patience(60_000) });
    assert.deepEqual(await laneSteps(page), [30, 30]);
    const raced = Number(await page.locator('[data-testid=race-lane-loss]').nth(1).getAttribute('data-value'));
    for (let i = 1; i <= 30; i++) {
      await page.getByTestId('step-once').click();
      await waitSteps(page, i);
    }
    const live = entries(page).first();
    await page.waitForFunction(() => {
      const live = document.querySelector('[data-testid=runs-list] [data-testid=run-entry].live');
      return live?.querySelector('[data-testid=run-steps]').dataset.value === '30' && live.querySelector('[data-testid=run-last-loss]').dataset.value !== '';
    });
    const alone = Number(await live.getByTestId('run-last-loss').getAttribute('data-value'));
    assert.ok(Number.isFinite(raced) && raced > 0, `race loss ${raced}`);
    const relative = Math.abs(raced - alone) / Math.abs(alone);
    console.log(`${engine}: adamw at step 30, raced ${raced}, alone ${alone} (relative difference ${relative.toExponential(2)})`);
    assert.ok(relative <= 1e-5, `raced ${raced} vs alone ${alone}`);
    assert.deepEqual(errors, []);
    await page.close();
  });
}
