// The charts (app/src/panels/chart.rs): a "Press Train" message before
// any data, numeric ticks on both axes, a readout that follows the pointer
// and agrees with the page's own figures, decades on a log axis, clipped
// steps marked, and no line back across the chart after a reset. On the
// CPU engine: quick and the same on every machine.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { setup, artifacts, text, stepCount, trainUntil, setField, patience } from './harness.mjs';

const ctx = setup();
const CHARTS = ['loss-curves', 'grad-norm-chart', 'lr-chart', 'grad-norm-per-layer-chart'];
// The plot area's margins in SVG units (model/chart_plot.rs); the SVG's
// width is its measured box, read from its viewBox.
const [LEFT, RIGHT] = [46, 10];

const ticks = (page, chart, axis) => page.locator(`[data-testid=${chart}] text.${axis}-tick`).allTextContents();
const parse = (label) => Number(label.replace(/,/g, ''));
const SUPERSCRIPTS = '⁰¹²³⁴⁵⁶⁷⁸⁹';
// "0.01", "1", "10,000" or "10⁻⁶" → its power of ten, or null.
function decade(label) {
  const power = label.match(/^10(⁻?)([⁰¹²³⁴⁵⁶⁷⁸⁹]+)$/);
  if (power) return (power[1] ? -1 : 1) * Number([...power[2]].map((c) => SUPERSCRIPTS.indexOf(c)).join(''));
  const k = Math.log10(parse(label));
  return Number.isFinite(k) && Math.abs(k - Math.round(k)) < 1e-9 ? Math.round(k) : null;
}

// Moves the pointer to `fraction` of the way across a chart's plot and
// returns the readout: its step and its text.
async function hover(page, chart, fraction) {
  const svg = page.locator(`[data-testid=${chart}] svg`);
  await svg.scrollIntoViewIfNeeded();
  const box = await svg.boundingBox();
  const W = Number((await svg.getAttribute('viewBox')).split(' ')[2]);
  const x = box.x + box.width * (LEFT + fraction * (W - LEFT - RIGHT)) / W;
  await page.mouse.move(x, box.y + box.height / 2);
  // (The readout is redrawn in a microtask after the event.)
  await page.waitForTimeout(100);
  const readout = page.locator(`[data-testid=${chart}] [data-testid=chart-readout]`);
  await page.waitForFunction((id) => /^step /.test(document.querySelector(`[data-testid=${id}] [data-testid=chart-readout]`).textContent), chart);
  return { step: Number(await readout.getAttribute('data-step')), text: await readout.textContent() };
}

// A readout's value for `name` ("0.0932", "12,346", "2.40 × 10⁻⁶") as text and as a number.
function valueOf(readout, name) {
  const shown = readout.match(new RegExp(`${name} ([^·]+?)(?: \\(smoothed [^)]*\\))?(?: ·|$)`))?.[1].trim();
  if (!shown) return { shown, value: NaN };
  const power = shown.match(/^(-?[\d.]+) × 10(⁻?)([⁰¹²³⁴⁵⁶⁷⁸⁹]+)$/);
  const value = power
    ? Number(power[1]) * 10 ** ((power[2] ? -1 : 1) * Number([...power[3]].map((c) => SUPERSCRIPTS.indexOf(c)).join('')))
    : parse(shown);
  return { shown, value };
}

// x coordinates of every point of a path's "M x,y L x,y …".
const xsOf = (d) => [...d.matchAll(/[ML](-?[\d.]+),/g)].map((m) => Number(m[1]));

test('before training, every chart says Press Train instead of an empty frame', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  for (const id of CHARTS) {
    const figure = page.getByTestId(id);
    assert.match(await figure.locator('[data-testid=chart-empty]').textContent(), /^Press Train to see /, id);
    assert.equal(await figure.locator('path.series').count(), 0, `${id}: no line yet`);
    assert.equal(await figure.locator('text.tick').count(), 0, `${id}: no ranges made up from nothing`);
    assert.doesNotMatch(await figure.textContent(), /inf|NaN|e-30|e0\b/, id);
  }
  assert.deepEqual(errors, []);
  await page.close();
});

test('after training: numeric ticks on both axes, and a readout that follows the pointer and matches the data', async (t) => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  await trainUntil(page, 300);
  // The last views of the paused run have arrived when the loss stops changing.
  await page.waitForTimeout(500);
  const steps = await stepCount(page);
  await page.waitForFunction(() => document.querySelector('[data-testid=loss-curves] path.series.train')?.getAttribute('d')?.includes('L'));

  // Drawn at its own width: one SVG unit is one pixel, so text keeps its size.
  for (const id of CHARTS) {
    const svg = page.locator(`[data-testid=${id}] svg`);
    const width = Number((await svg.getAttribute('viewBox')).split(' ')[2]);
    const box = await svg.boundingBox();
    assert.ok(Math.abs(width - box.width) <= 1, `${id}: viewBox ${width} wide, drawn ${box.width}`);
  }
  const x = await ticks(page, 'loss-curves', 'x');
  const y = await ticks(page, 'loss-curves', 'y');
  t.diagnostic(`loss chart ticks: x ${x.join(' | ')}; y ${y.join(' | ')}`);
  assert.ok(x.length >= 2 && y.length >= 2, `ticks x ${x}, y ${y}`);
  for (const label of [...x, ...y]) assert.ok(Number.isFinite(parse(label)), `tick "${label}" is a number`);
  assert.ok(x.map(parse).every((s) => Number.isInteger(s) && s >= 0 && s <= steps), `x ticks are steps in 0…${steps}: ${x}`);
  const ys = y.map(parse);
  assert.ok(ys.every((v, i) => i === 0 || v > ys[i - 1]), `y ticks ascend: ${y}`);
  const gap = ys[1] - ys[0];
  assert.ok(ys.every((v, i) => i === 0 || Math.abs(v - ys[i - 1] - gap) < gap * 1e-6), `y ticks evenly spaced: ${y}`);
  assert.ok([1, 2, 5].includes(Math.round(gap / 10 ** Math.floor(Math.log10(gap)))), `a 1-2-5 step: ${gap}`);

  const left = await hover(page, 'loss-curves', 0.1);
  const right = await hover(page, 'loss-curves', 1.0);
  t.diagnostic(`readout at 10 %: ${left.text}; at the right end: ${right.text}`);
  assert.ok(left.step >= 0 && left.step < right.step && right.step <= steps, `steps ${left.step} < ${right.step} ≤ ${steps}`);
  for (const r of [left, right]) {
    for (const name of ['train', 'test']) {
      const { value } = valueOf(r.text, name);
      assert.ok(Number.isFinite(value) && value > 0, `${name}: ${r.text}`);
    }
  }
  // At the right end: the newest evaluation, the one the page shows as the train loss.
  assert.equal(valueOf(right.text, 'train').shown, await text(page, 'train-loss'), right.text);
  assert.equal(valueOf(right.text, 'test').shown, await text(page, 'test-loss'), right.text);
  // A cursor and a dot per line follow the pointer; they leave with it.
  assert.equal(await page.locator('[data-testid=loss-curves] line.cursor').count(), 1);
  await page.mouse.move(0, 0);
  await page.waitForFunction(() => /^latest: step/.test(document.querySelector('[data-testid=loss-curves] [data-testid=chart-readout]').textContent));

  // The gradient norm is on decades by default; the loss switches to them.
  const norm = await ticks(page, 'grad-norm-chart', 'y');
  assert.ok(norm.length >= 2 && norm.every((l) => decade(l) !== null), `gradient norm ticks are decades: ${norm}`);
  await page.getByTestId('loss-curves-log').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=loss-curves-log]').getAttribute('aria-pressed') === 'true');
  const logY = await ticks(page, 'loss-curves', 'y');
  t.diagnostic(`loss on a log axis: ${logY.join(' | ')}`);
  assert.ok(logY.length >= 2 && logY.every((l) => decade(l) !== null), `log ticks are decades: ${logY}`);
  const powers = logY.map(decade);
  assert.ok(powers.every((k, i) => i === 0 || k > powers[i - 1]), `decades ascend: ${logY}`);
  assert.match(await page.locator('[data-testid=loss-curves] text.axis-label').first().textContent(), /loss \(log\)/);
  await page.getByTestId('loss-curves-log').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=loss-curves-log]').getAttribute('aria-pressed') === 'false');

  // Smoothing draws the raw line faintly under the smoothed one.
  assert.equal(await page.locator('[data-testid=grad-norm-chart] path.raw-series').count(), 1);
  await page.getByTestId('grad-norm-chart-smoothing').fill('0');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=grad-norm-chart] path.raw-series').length === 0);
  assert.ok(await page.locator('[data-testid=grad-norm-chart] path.norm').getAttribute('d'));

  // The learning rate: the default's cosine from 0.02, on an axis from 0, plainly labelled.
  const lr = await ticks(page, 'lr-chart', 'y');
  assert.ok(lr.includes('0') && lr.some((t) => Number(t) === 0.02), `learning-rate ticks ${lr}`);
  assert.deepEqual(errors, []);
  await page.close();
});

test('with a very low clipping threshold, the clipped steps are marked and the threshold drawn', async () => {
  const { page } = await ctx.open(`${ctx.root}?engine=cpu`);
  await setField(page, 'clip-grad-norm', 0.001);
  await trainUntil(page, 40);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=grad-norm-chart] line.clipped').length > 0);
  const caption = await page.locator('[data-testid=grad-norm-chart] figcaption').textContent();
  const clipped = Number(caption.match(/([\d,]+) clipped steps/)[1].replace(/,/g, ''));
  assert.ok(clipped >= 40, caption);
  assert.equal(await page.locator('[data-testid=grad-norm-chart] line.threshold').count(), 1);
  // The threshold sits inside the plot, below the norms it clipped.
  const threshold = Number(await page.locator('[data-testid=grad-norm-chart] line.threshold').getAttribute('y1'));
  assert.ok(threshold > 16 && threshold < 150 - 30, `threshold at y ${threshold}`);
  await page.close();
});

test('after a reset while training, no curve runs back across the chart', async (t) => {
  const { page } = await ctx.open(`${ctx.root}?engine=cpu`);
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 600, null, { timeout: patience(60_000) });
  const before = await stepCount(page);
  // Reset while a frame of the old run is in flight, and train on.
  await page.getByTestId('reset').click();
  await page.waitForFunction((n) => {
    const steps = Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, ''));
    return steps >= 150 && steps < n;
  }, before, { timeout: patience(60_000) });
  await page.getByTestId('train-toggle').click();
  await page.waitForTimeout(500);
  const steps = await stepCount(page);
  t.diagnostic(`reset at step ${before}, paused at step ${steps}`);
  for (const [chart, line] of [['loss-curves', 'train'], ['loss-curves', 'test'], ['grad-norm-chart', 'norm'], ['lr-chart', 'lr']]) {
    const xs = xsOf(await page.locator(`[data-testid=${chart}] path.series.${line}`).getAttribute('d'));
    assert.ok(xs.length > 2, `${chart} ${line}: ${xs.length} points`);
    assert.ok(xs.every((x, i) => i === 0 || x >= xs[i - 1]), `${chart} ${line}: x goes back: ${xs}`);
    const axis = (await ticks(page, chart, 'x')).map(parse);
    assert.ok(Math.max(...axis) <= steps, `${chart}: the step axis ends at the new run (${axis}, ${steps} steps)`);
  }
  const end = await hover(page, 'loss-curves', 1.0);
  assert.ok(end.step <= steps, `the newest point is of the new run: ${end.step} ≤ ${steps}`);
  await page.close();
});

test('screenshots of the charts in both themes', async () => {
  for (const colorScheme of ['light', 'dark']) {
    const { page } = await ctx.open(`${ctx.root}?engine=cpu`, { colorScheme });
    await setField(page, 'clip-grad-norm', 0.5);
    await trainUntil(page, 400);
    await page.waitForTimeout(400);
    await hover(page, 'loss-curves', 0.6);
    await page.getByTestId('loss-curves').screenshot({ path: path.join(artifacts, `charts-loss-${colorScheme}.png`) });
    await hover(page, 'grad-norm-chart', 0.3);
    await page.locator('.step-charts').screenshot({ path: path.join(artifacts, `charts-steps-${colorScheme}.png`) });
    await hover(page, 'grad-norm-per-layer-chart', 0.8);
    await page.getByTestId('grad-norm-per-layer-chart').screenshot({ path: path.join(artifacts, `charts-layers-${colorScheme}.png`) });
    await page.close();
  }
});
