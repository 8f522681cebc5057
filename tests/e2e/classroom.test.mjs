// Classroom links and exports: `?hide=` hides controls by their
// data-testid, `?lock=1` makes the network read-only (in the model, not only
// the buttons), both survive the page's URL rewrites, copy-link copies the
// whole link, and download-metrics gives the recorded steps as CSV.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { setup, text, stepCount, trainUntil, setField, patience } from './harness.mjs';

const ctx = setup();

const visible = (page, id) => page.getByTestId(id).first().isVisible();
// Whether the field wrapper (label or .field) around a control is visible;
// null where the control has none.
const wrapperVisible = (page, id) => page.evaluate((id) => {
  const wrapper = document.querySelector(`[data-testid="${id}"]`).closest('label, .field');
  return wrapper ? wrapper.checkVisibility() : null;
}, id);
const layers = (page) => page.locator('div.layer[data-testid^=layer-]').count();
const experimentIn = (url) => JSON.parse(decodeURIComponent(new URL(url).hash.slice('#e='.length)));

test('hide= hides the listed controls and their labels, also when they are re-created', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu&hide=optimizer,learning-rate,units-0,nosuch,%3Cscript%3E`);
  for (const id of ['optimizer', 'learning-rate', 'units-0']) {
    assert.equal(await page.getByTestId(id).count(), 1, `${id} is on the page`);
    assert.equal(await visible(page, id), false, `${id} is hidden`);
  }
  assert.equal(await wrapperVisible(page, 'optimizer'), false, "the optimizer's label is hidden with it");
  assert.equal(await wrapperVisible(page, 'learning-rate'), false);
  for (const id of ['batch-size', 'seed', 'add-layer', 'train-toggle', 'units-1']) {
    assert.equal(await visible(page, id), true, `${id} stays visible`);
  }
  assert.equal(await wrapperVisible(page, 'batch-size'), true);
  const notice = await text(page, 'link-notice');
  assert.match(notice, /no control is named `nosuch`; the others are hidden/);
  assert.match(notice, /`<script>` cannot name a control/);

  // Adding a layer re-creates every layer's fields: they stay hidden.
  await page.getByTestId('add-layer').click();
  await page.waitForSelector('[data-testid=layer-2]');
  assert.equal(await visible(page, 'units-0'), false, 'the re-created units-0 is hidden');
  assert.equal(await visible(page, 'units-2'), true);
  assert.equal(await visible(page, 'optimizer'), false);
  assert.equal(await visible(page, 'learning-rate'), false);
  // The edit rewrote the fragment and kept the query.
  await page.waitForFunction(() => location.hash.startsWith('#e='));
  const url = new URL(page.url());
  assert.equal(url.searchParams.get('hide'), 'optimizer,learning-rate,units-0,nosuch,<script>');
  assert.equal(url.searchParams.get('engine'), 'cpu');
  assert.equal(experimentIn(page.url()).model.layers.length, 4);
  assert.deepEqual(errors, []);
  await page.close();
});

test('lock=1 keeps the network as it is, in the model too, while training goes on', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu&lock=1`);
  const locked = ['add-layer', 'remove-layer', 'units-0', 'units-plus-0', 'units-minus-0', 'activation-0', 'activation-1'];
  for (const id of locked) {
    assert.equal(await page.getByTestId(id).isDisabled(), true, `${id} is disabled`);
    assert.match(await page.getByTestId(id).getAttribute('title'), /locked the network/);
  }
  assert.equal(await visible(page, 'network-locked'), true);
  assert.equal(await page.getByTestId('learning-rate').isDisabled(), false, 'hyperparameters stay editable');
  const hash = await page.evaluate(() => location.hash);

  // Past the disabled buttons, the edits themselves are refused.
  await page.evaluate((ids) => ids.forEach((id) => { document.querySelector(`[data-testid=${id}]`).disabled = false; }), locked);
  await page.getByTestId('add-layer').click();
  await page.waitForFunction(() => /locks the network/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  await page.getByTestId('remove-layer').click();
  await page.getByTestId('units-plus-0').click();
  await setField(page, 'units-0', 3);
  await page.getByTestId('activation-1').selectOption('relu');
  assert.match(await text(page, 'alert'), /locks the network/);
  assert.equal(await layers(page), 2);
  assert.equal(await page.getByTestId('units-0').inputValue(), '16');
  assert.equal(await page.evaluate(() => location.hash), hash, 'the experiment did not change');

  // Training, the step button and live hyperparameters still work.
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '1');
  await setField(page, 'learning-rate', 0.01);
  await page.waitForFunction(() => location.hash.startsWith('#e='));
  const e = experimentIn(page.url());
  assert.equal(e.optimizer.lr, 0.01);
  assert.deepEqual(e.model.layers.map((l) => l.units), [16, 16, 1]);
  assert.equal(new URL(page.url()).searchParams.get('lock'), '1', 'the lock is kept in the URL');
  await trainUntil(page, 50);
  assert.ok((await stepCount(page)) >= 50);
  // A new engine pin rewrites the query and keeps the lock.
  await page.getByTestId('engine-pin').selectOption('gpu');
  await page.waitForFunction(() => location.search.includes('engine=gpu'));
  assert.equal(new URL(page.url()).searchParams.get('lock'), '1');
  assert.deepEqual(errors, []);
  await page.close();
});

test('copy-link copies the whole link, and a page opened from it is the same classroom', async () => {
  const { page } = await ctx.open(`${ctx.root}?engine=cpu&hide=seed&lock=1`);
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(ctx.root).origin });
  await setField(page, 'learning-rate', 0.005);
  await page.waitForFunction(() => decodeURIComponent(location.hash).includes('0.005'));
  await page.getByTestId('copy-link').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=share-status]').textContent === 'Link copied');
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  const url = new URL(copied);
  assert.equal(url.searchParams.get('hide'), 'seed');
  assert.equal(url.searchParams.get('lock'), '1');
  assert.equal(url.searchParams.get('engine'), 'cpu');
  assert.equal(experimentIn(copied).optimizer.lr, 0.005);
  await page.close();

  const { page: shared } = await ctx.open(copied);
  assert.equal(await shared.getByTestId('learning-rate').inputValue(), '0.005');
  assert.equal(await visible(shared, 'seed'), false);
  assert.equal(await shared.getByTestId('add-layer').isDisabled(), true);
  await shared.close();
});

test('copy-link shows the link to copy by hand where the clipboard is refused', async () => {
  const page = await ctx.browser.newPage();
  await page.addInitScript(() => Object.defineProperty(Navigator.prototype, 'clipboard', { get: () => undefined }));
  await page.goto(`${ctx.root}?engine=cpu&hide=seed`);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: patience(90_000) });
  await page.getByTestId('copy-link').click();
  await page.waitForSelector('[data-testid=copy-link-field]');
  const link = await page.getByTestId('copy-link-field').inputValue();
  assert.equal(new URL(link).searchParams.get('hide'), 'seed');
  assert.equal(experimentIn(link).batch_size, 32);
  assert.match(await text(page, 'share-status'), /did not allow copying/);
  await page.close();
});

test('download-metrics gives every recorded step as CSV, from the engine', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  await trainUntil(page, 100);
  // One evaluation after the pause, for the whole-set columns.
  await page.waitForTimeout(300);
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-metrics').click()]);
  assert.match(download.suggestedFilename(), /^stepscope-metrics-step\d+\.csv$/);
  const csv = fs.readFileSync(await download.path(), 'utf8');
  assert.match(csv, /^# Stepscope metrics of the experiment \{/);
  const lines = csv.split('\n').filter((l) => l && !l.startsWith('#'));
  const header = lines[0].split(',');
  const columns = ['step', 'batch_loss', 'train_loss', 'test_loss', 'train_accuracy', 'test_accuracy', 'grad_norm', 'lr',
    'data_ms', 'forward_ms', 'backward_ms', 'optimizer_ms', 'checkpoint_ms', 'logging_ms'];
  for (const c of columns) assert.ok(header.includes(c), `column ${c} in ${header}`);
  const col = (row, name) => row[header.indexOf(name)];
  const rows = lines.slice(1).map((l) => l.split(','));
  assert.ok(rows.every((r) => r.length === header.length));
  const steps = rows.map((r) => Number(col(r, 'step')));
  assert.ok(steps.every((s, i) => i === 0 || s > steps[i - 1]), 'steps increase');
  const stepped = rows.filter((r) => col(r, 'batch_loss') !== '');
  assert.ok(stepped.length >= 100, `${stepped.length} steps`);
  for (const r of stepped) {
    for (const name of ['batch_loss', 'grad_norm', 'lr', 'data_ms', 'forward_ms', 'backward_ms', 'optimizer_ms']) {
      assert.ok(Number.isFinite(Number(col(r, name))), `${name} at step ${col(r, 'step')}: ${col(r, name)}`);
    }
    assert.equal(col(r, 'timing'), 'cpu');
  }
  // The default's cosine at its first step: 0.002 + (0.02 − 0.002)·1 in f64.
  assert.ok(Math.abs(Number(col(stepped[0], 'lr')) - 0.02) < 1e-12, `the engine's learning rate ${col(stepped[0], 'lr')}`);
  const evaluated = rows.filter((r) => col(r, 'test_loss') !== '');
  assert.ok(evaluated.length >= 1, 'some steps carry the whole-set evaluation');
  for (const r of evaluated) {
    assert.ok(Number.isFinite(Number(col(r, 'train_loss'))) && Number.isFinite(Number(col(r, 'test_loss'))));
    const accuracy = Number(col(r, 'test_accuracy'));
    assert.ok(accuracy >= 0 && accuracy <= 1, `accuracy ${accuracy}`);
  }
  assert.ok(Math.max(...steps) <= (await stepCount(page)));
  console.log(`metrics CSV: ${rows.length} rows, ${stepped.length} steps, ${evaluated.length} evaluated, ${csv.length} bytes`);
  // The same run as a TensorBoard event file, read by TensorBoard's own
  // reader and held to the CSV (scripts/check_tensorboard.py --page).
  const [events] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-tensorboard').click()]);
  assert.match(events.suggestedFilename(), /^events\.out\.tfevents\.\d+\.stepscope-page\.step\d+$/);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensorboard-'));
  await events.saveAs(path.join(dir, events.suggestedFilename()));
  const csvFile = path.join(dir, '..', `${path.basename(dir)}-metrics.csv`);
  fs.writeFileSync(csvFile, csv);
  const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
  const out = execFileSync(process.env.STEPSCOPE_PYTHON ?? 'python3', [path.join(root, 'scripts', 'check_tensorboard.py'), '--page', dir, csvFile],
    { encoding: 'utf8' });
  console.log(out.trim());
  fs.rmSync(dir, { recursive: true });
  fs.rmSync(csvFile);
  // And as a trace: a ProfilerStep#N per recorded step, its phases tiling it.
  const [traced] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-trace').click()]);
  assert.match(traced.suggestedFilename(), /^stepscope-page-step\d+\.pt\.trace\.json$/);
  const tracePath = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'trace-')), traced.suggestedFilename());
  await traced.saveAs(tracePath);
  const trace = JSON.parse(fs.readFileSync(tracePath, 'utf8'));
  assert.match(JSON.stringify(trace.distributedInfo, null, 1), /"rank": 0/);
  const spans = trace.traceEvents.filter((e) => e.ph === 'X');
  const profiled = spans.filter((e) => e.name.startsWith('ProfilerStep#'));
  // A trace step per recorded step that has its frame's wall time.
  assert.ok(profiled.length >= 1 && profiled.length <= stepped.length, `${profiled.length} of ${stepped.length}`);
  for (const s of profiled) {
    const inside = spans.filter((e) => e.cat === 'cpu_op' && e.ts >= s.ts - 5e-3 && e.ts + e.dur <= s.ts + s.dur + 5e-3);
    // In the order a step runs them; a phase the clock measured as 0 ms
    // (data, often, at its resolution) has no event.
    const order = ['enumerate(DataLoader)#Stepscope.__next__', 'forward', 'backward', 'optimizer', 'checkpoint', 'logging', 'page'];
    const at = inside.map((e) => order.indexOf(e.name));
    assert.ok(at.every((i, k) => i >= 0 && (k === 0 || i > at[k - 1])), `${s.name}: ${inside.map((e) => e.name)}`);
    const total = inside.reduce((sum, e) => sum + e.dur, 0);
    assert.ok(Math.abs(total - s.dur) < 0.01, `${s.name}: phases ${total} of ${s.dur} us`);
  }
  console.log(`trace: ${profiled.length} steps`);
  fs.rmSync(path.dirname(tracePath), { recursive: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test('lock=1 refuses a checkpoint of another network, and restores one of its own', async () => {
  const { page: open } = await ctx.open(`${ctx.root}?engine=cpu`);
  await open.getByTestId('add-layer').click();
  await open.waitForSelector('[data-testid=layer-2]');
  await open.getByTestId('step-once').click();
  await open.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '1');
  const [download] = await Promise.all([open.waitForEvent('download'), open.getByTestId('download-checkpoint').click()]);
  // A download is deleted with its page: keep a copy.
  const deeper = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'classroom-')), 'deeper.safetensors');
  await download.saveAs(deeper);
  await open.close();

  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu&lock=1`);
  await page.getByTestId('restore-checkpoint').setInputFiles(deeper);
  await page.waitForFunction(() => /another network/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  assert.equal(await layers(page), 2, 'the locked network stays');
  assert.equal(await stepCount(page), 0);
  // A checkpoint of the locked network itself restores.
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '1');
  const [own] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-checkpoint').click()]);
  await page.getByTestId('reset').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '0');
  await page.getByTestId('restore-checkpoint').setInputFiles(await own.path());
  await page.waitForFunction(() => /Restored the uploaded checkpoint: step 1/.test(document.querySelector('[data-testid=notice]')?.textContent ?? ''));
  assert.equal(await layers(page), 2);
  assert.deepEqual(errors, []);
  await page.close();
});
