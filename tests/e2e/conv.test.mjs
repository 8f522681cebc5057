// Conv nets on the page: the builder's conv and pool layers (kind, fields,
// each layer's output shape and parameters, the core's refusals), the conv
// preset on the digits, a conv net trained to 95 % on the CPU engine while
// its feature maps and filters change, and the same net on WebGPU and with
// the engine picked by measurement.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setup, artifacts, text, number, stepCount, patience, setField, continueInPyTorch, imageViewsMade } from './harness.mjs';

const ctx = setup();
const experiment = (page) => page.evaluate(() => JSON.parse(decodeURIComponent(location.hash.slice(3))));
const alert = (page, pattern) => page.waitForFunction((p) => new RegExp(p).test(document.querySelector('[data-testid=alert]')?.textContent ?? ''), pattern.source);
// The pixels of every canvas under `selector`, joined (what a view shows).
const pixels = (page, selector) => page.evaluate((s) => [...document.querySelectorAll(`${s} canvas`)]
  .map((c) => Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data).join(',')).join('|'), selector);
const accuracyAtLeast = (page, goal, timeout) => page.waitForFunction((g) => {
  const m = document.querySelector('[data-testid=accuracy]')?.textContent.match(/test ([\d.]+) %/);
  return m && Number(m[1]) >= g;
}, goal, { timeout: patience(timeout) });

test('the builder makes a conv net on the digits, shows each layer\'s shape, refuses what the core refuses, and trains it to 95 % while its maps and filters change', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  await page.getByTestId('conv-preset').click();
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.input_shape !== undefined);
  let e = await experiment(page);
  assert.equal(e.data.source, 'digits', 'the spiral\'s points are not images: the preset takes the digits');
  assert.deepEqual(e.model.input_shape, [1, 8, 8]);
  assert.deepEqual(e.model.layers.map((l) => l.kind ?? 'dense'), ['conv2d', 'max_pool2d', 'conv2d', 'max_pool2d', 'dense']);
  assert.equal(await page.getByTestId('layer-kind-0').inputValue(), 'conv2d');
  assert.equal(await page.getByTestId('layer-kind-1').inputValue(), 'max_pool2d');
  assert.equal(await text(page, 'layer-shape-0'), '→ 8×8×8 · 80 params');
  assert.equal(await text(page, 'layer-shape-1'), '→ 8×4×4');
  assert.equal(await text(page, 'layer-shape-3'), '→ 16×2×2');
  assert.match(await text(page, 'architecture'), /^1×8×8 → conv2d 8×3×3 pad 1 → 8×8×8 → .* → dense → 10$/);
  assert.equal(await page.locator('[data-testid=network-diagram]').count(), 0, 'a conv net is drawn by its maps');

  // Edits: a field, then a kernel whose window no longer fits (the core's
  // message; nothing changes), then a layer's kind.
  await setField(page, 'filters-0', 12);
  await page.waitForFunction(() => document.querySelector('[data-testid=layer-shape-0]').textContent === '→ 12×8×8 · 120 params');
  await setField(page, 'kernel-2', 7);
  await alert(page, /model\.layers\[2\] \(conv2d, kernel 7 with padding 1\) needs an input of at least 7 × 7, got 6 × 6/);
  e = await experiment(page);
  assert.equal(e.model.layers[2].kernel, 3, 'the refused edit changed nothing');
  assert.equal(await page.getByTestId('kernel-2').inputValue(), '3', 'the field shows the layer again');
  await page.getByTestId('layer-kind-3').selectOption('avg_pool2d');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.layers[3].kind === 'avg_pool2d');
  await page.getByTestId('layer-kind-3').selectOption('max_pool2d');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.layers[3].kind === 'max_pool2d');

  // Train: the maps and filters of the first views, then at 95 %.
  await page.getByTestId('train-toggle').click();
  await imageViewsMade(page);
  const maps = await page.locator('[data-testid=feature-maps] figure').evaluateAll((f) => f.map((x) => `${x.dataset.layer}:${x.dataset.channel}`));
  assert.equal(maps.length, 12 + 12 + 16 + 16, 'a map per channel of every conv and pool layer');
  assert.ok(maps.includes('0:11') && maps.includes('3:15') && !maps.includes('4:0'));
  const filters = await page.locator('[data-testid=filters] figure').evaluateAll((f) => f.map((x) => `${x.dataset.layer}:${x.dataset.filter}`));
  assert.equal(filters.length, 12 + 16, 'a filter per conv filter');
  assert.ok(filters.includes('0:11') && filters.includes('2:15'));
  assert.match(await page.locator('[data-testid=filters]').textContent(), /Layer 2: 16 filters of 3×3 over 12 input channels \(the first 8 shown\)/);
  assert.equal(await page.locator('[data-testid=filters] figure canvas.gradient').count(), 12 + 16, 'each filter with its gradient');
  const early = [await pixels(page, '[data-testid=feature-maps]'), await pixels(page, '[data-testid=filters]')];
  const started = Date.now();
  await accuracyAtLeast(page, 95, 180_000);
  const seconds = (Date.now() - started) / 1000;
  await page.getByTestId('train-toggle').click();
  console.log(`conv net on the digits (CPU engine): ${await text(page, 'accuracy')} after ${await stepCount(page)} steps, ${seconds.toFixed(1)} s after Train`);
  await page.waitForTimeout(500);
  const late = [await pixels(page, '[data-testid=feature-maps]'), await pixels(page, '[data-testid=filters]')];
  assert.notEqual(late[0], early[0], 'the feature maps changed as it trained');
  assert.notEqual(late[1], early[1], 'the filters changed as it trained');
  assert.equal(await page.locator('[data-testid=first-layer-weights]').count(), 0, 'the conv layer\'s filters replace the dense view');
  // The receptive field of a clicked point: layer 2 (a 3 × 3 conv, pad 1,
  // after a 2 × 2 pool after a 3 × 3 conv, pad 1) at row 0, column 2.
  assert.match(await text(page, 'receptive-field'), /Click a point of a feature map/);
  await page.locator('[data-testid=feature-maps] figure[data-layer="2"][data-channel="0"] canvas').click({ position: { x: 30, y: 6 } });
  await page.waitForFunction(() => /Layer 2 at row 0, column 2 sees input rows 0–4, columns 1–7: 5 × 7 of the 8 × 8 pixels/
    .test(document.querySelector('[data-testid=receptive-field]').textContent));
  assert.equal(await page.locator('.conv-input .field-box').count(), 1, 'the box on the image');
  await page.locator('[data-testid=feature-maps]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, 'conv-digits.png'), fullPage: true });
  // Another test image's maps, by its row.
  const image0 = await pixels(page, '[data-testid=feature-maps]');
  await setField(page, 'maps-image', 7);
  await page.waitForFunction(() => /^test image 7 /.test(document.querySelector('.conv-input figcaption')?.textContent ?? ''),
    null, { timeout: patience(20_000) });
  assert.notEqual(await pixels(page, '[data-testid=feature-maps]'), image0, 'the maps of another image');

  // Data whose rows are not images: the conv and pool layers go, the
  // output layer stays.
  await page.getByTestId('dataset').selectOption('spiral');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.source === 'spiral');
  e = await experiment(page);
  assert.equal(e.model.input_shape, undefined);
  assert.deepEqual(e.model.layers.map((l) => l.kind ?? 'dense'), ['dense']);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a conv net from a link trains on WebGPU with falling loss, and the engine race measures it (dark)', async () => {
  const e = {
    seed: 1,
    model: { input_shape: [1, 8, 8], layers: [
      { kind: 'conv2d', filters: 8, kernel: 3, padding: 1, activation: 'relu' },
      { kind: 'max_pool2d', kernel: 2 },
      { kind: 'conv2d', filters: 16, kernel: 3, padding: 1, activation: 'relu' },
      { kind: 'max_pool2d', kernel: 2 },
      { units: 10, activation: 'linear' }] },
    loss: 'cross_entropy',
    optimizer: { kind: 'adamw', lr: 0.02, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0 },
    batch_size: 32,
    data: { source: 'digits', train_fraction: 0.5, shuffle: true },
  };
  const fragment = `#e=${encodeURIComponent(JSON.stringify(e))}`;
  const { page, errors } = await ctx.open(`${ctx.base}${fragment}`, { colorScheme: 'dark' });
  assert.match(await text(page, 'backend-name'), /^WebGPU/);
  await page.waitForFunction(() => document.querySelector('[data-testid=train-loss]').textContent !== '–');
  const before = await number(page, 'train-loss');
  await page.getByTestId('train-toggle').click();
  await accuracyAtLeast(page, 90, 240_000);
  await page.getByTestId('train-toggle').click();
  const after = await number(page, 'train-loss');
  assert.ok(after < before / 2, `the loss fell on WebGPU: ${before} → ${after}`);
  console.log(`conv net on the digits (WebGPU): ${await text(page, 'accuracy')} after ${await stepCount(page)} steps`);
  await page.waitForSelector('[data-testid=feature-maps] figure');
  await page.locator('[data-testid=feature-maps]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, 'conv-digits-dark.png'), fullPage: true });
  await page.close();

  // Auto: both engines stepped this net before one was picked.
  const auto = await ctx.open(`${ctx.root}${fragment}`);
  const reason = await text(auto.page, 'backend-reason');
  console.log(`conv net, engine race: ${await text(auto.page, 'backend-name')} — ${reason}`);
  assert.match(reason, /CPU \(WebAssembly[^)]*\) [\d,.]+ steps\/s; WebGPU \(.*\) [\d,.]+ steps\/s for this network/);
  assert.deepEqual([...errors, ...auto.errors], []);
  await auto.page.close();
});

test('MNIST: fetched on first use, the conv preset is ConvNetJS\'s demo, and it passes 95 % test accuracy with its maps in view (light and dark)', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  const fetched = [];
  page.on('requestfinished', (r) => { if (r.url().endsWith('mnist_5k.csv.gz')) fetched.push(r.url()); });
  await page.getByTestId('dataset').selectOption('mnist');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.source === 'mnist');
  let e = await experiment(page);
  assert.equal(e.model.inputs, 784);
  await page.getByTestId('conv-preset').click();
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.input_shape !== undefined);
  e = await experiment(page);
  assert.deepEqual(e.model.input_shape, [1, 28, 28]);
  assert.equal(await text(page, 'architecture'),
    '1×28×28 → conv2d 8×5×5 pad 2 → 8×28×28 → max_pool2d 2 → 8×14×14 → conv2d 16×5×5 pad 2 → 16×14×14 → max_pool2d 3 → 16×4×4 → dense → 10');
  assert.deepEqual([e.optimizer.kind, e.optimizer.lr, e.optimizer.momentum, e.batch_size], ['sgd', 0.01, 0.9, 20], 'ConvNetJS\'s trainer, as SGD has it');
  const started = Date.now();
  await page.getByTestId('train-toggle').click();
  await accuracyAtLeast(page, 95, 120_000);
  const seconds = (Date.now() - started) / 1000;
  // The views (whole-set evaluations) come every few seconds on MNIST; the
  // maps and filters of the shown image are made again between them.
  const states = { maps: new Set(), accuracy: new Set() };
  for (let i = 0; i < 15; i++) {
    states.maps.add(await pixels(page, '[data-testid=feature-maps]'));
    states.accuracy.add(await text(page, 'accuracy'));
    await page.waitForTimeout(200);
  }
  console.log(`MNIST, 15 looks over about 3 s of training: ${states.maps.size} different maps, ${states.accuracy.size} different accuracies`);
  assert.ok(states.maps.size > states.accuracy.size, 'the maps change between the views');
  await page.getByTestId('train-toggle').click();
  const steps = await stepCount(page);
  // The accuracies are the views' whole-set evaluations, at a step of the run.
  const evaluated = Number((await text(page, 'evaluated-step')).match(/^evaluated at step ([\d,]+)$/)[1].replace(/,/g, ''));
  assert.ok(evaluated > 0 && evaluated <= steps, `evaluated at step ${evaluated} of ${steps}`);
  console.log(`MNIST, ConvNetJS's net (CPU engine): ${await text(page, 'accuracy')} after ${steps} steps (${steps * 20} images), ${seconds.toFixed(1)} s after Train`);
  assert.ok(fetched.length >= 1, 'the worker fetched mnist_5k.csv.gz');
  await imageViewsMade(page);
  assert.equal(await page.locator('[data-testid=feature-maps] figure').count(), 8 + 8 + 16 + 16);
  assert.deepEqual(await page.locator('.conv-input canvas').evaluate((c) => [c.width, c.height]), [28, 28]);
  assert.deepEqual(await page.locator('[data-testid=misclassified] canvas').first().evaluate((c) => [c.width, c.height]), [28, 28]);
  await page.locator('[data-testid=feature-maps]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, 'mnist-conv.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.screenshot({ path: path.join(artifacts, 'mnist-conv-dark.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test('a CSV of images: its shape is read from its columns and can be changed, the conv preset and augmentation apply, and it trains with its maps', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  // 8 × 8 images of three classes: a vertical bar, a horizontal bar, a
  // diagonal, each at a random place, with faint noise.
  let seed = 11;
  const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  const rows = [Array.from({ length: 64 }, (_, i) => `x${i + 1}`).join(',') + ',y'];
  for (let r = 0; r < 300; r++) {
    const label = r % 3;
    const at = 1 + Math.floor(rand() * 6);
    const pixels = Array.from({ length: 64 }, (_, i) => {
      const [y, x] = [Math.floor(i / 8), i % 8];
      const on = label === 0 ? x === at : label === 1 ? y === at : x === y;
      return (on ? 0.8 + 0.2 * rand() : 0.1 * rand()).toFixed(3);
    });
    rows.push(`${pixels.join(',')},${label}`);
  }
  const file = path.join(os.tmpdir(), `stepscope-bars-${process.pid}.csv`);
  fs.writeFileSync(file, rows.join('\n'));
  await page.getByTestId('csv-upload').setInputFiles(file);
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.source === 'csv');
  let e = await experiment(page);
  assert.deepEqual(e.model.input_shape, [1, 8, 8], '64 columns are taken as an 8 × 8 image');
  assert.equal(await page.getByTestId('csv-image-shape').inputValue(), '1×8×8');
  await page.getByTestId('conv-preset').click();
  await page.waitForFunction(() => (JSON.parse(decodeURIComponent(location.hash.slice(3))).model.layers[0].kind ?? 'dense') === 'conv2d');
  e = await experiment(page);
  assert.equal(e.data.source, 'csv', 'the preset builds on the CSV\'s images');
  assert.match(await text(page, 'architecture'), /^1×8×8 → conv2d 8×3×3 pad 1 → 8×8×8 → .* → dense → 3$/);
  await page.getByTestId('augmentation').selectOption('shift');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.augment?.shift > 0);
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 30, null, { timeout: patience(60_000) });
  await imageViewsMade(page);
  await page.getByTestId('train-toggle').click();
  assert.equal(await page.locator('[data-testid=feature-maps] figure[data-layer="0"]').count(), 8);
  assert.deepEqual(await page.locator('.conv-input canvas').evaluate((c) => [c.width, c.height]), [8, 8]);
  assert.ok(Number.isFinite(await number(page, 'train-loss')), 'a finite loss');

  // A shape that does not hold the columns is refused with the core's
  // words; nothing changes.
  await setField(page, 'csv-image-shape', '1×8×9');
  await alert(page, /Image shape: an image of 1 × 8 × 9 holds 72 values, and the CSV's rows have 64 inputs/);
  assert.deepEqual((await experiment(page)).model.input_shape, [1, 8, 8]);
  // Rows that are not images: the conv and pool layers and the
  // augmentation go, the dense output stays.
  await setField(page, 'csv-image-shape', '');
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.input_shape === undefined);
  e = await experiment(page);
  assert.deepEqual(e.model.layers.map((l) => l.kind ?? 'dense'), ['dense']);
  assert.equal(e.data.augment, undefined);
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 1);
  assert.deepEqual(errors, []);
  await page.close();
});

test('MNIST not served: the reset is refused with why, and the page shows the run that goes on', async () => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  await page.route('**/mnist_5k.csv.gz', (route) => route.fulfill({ status: 404, body: 'not here' }));
  await page.getByTestId('dataset').selectOption('mnist');
  await alert(page, /MNIST is not here yet.*the run goes on as it was.*The file did not arrive: .*status 404/);
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).data.source === 'spiral');
  assert.equal(await page.getByTestId('dataset').inputValue(), 'spiral', 'the control shows the run\'s data again');
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 50, null, { timeout: patience(60_000) });
  await page.getByTestId('train-toggle').click();
  assert.deepEqual(errors, []);
  await page.close();
});

test('the page\'s conv net continues in PyTorch: the exported script\'s next step has the page\'s gradient norm', async (t) => {
  const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`);
  await page.getByTestId('conv-preset').click();
  await page.waitForFunction(() => JSON.parse(decodeURIComponent(location.hash.slice(3))).model.input_shape !== undefined);
  for (let i = 1; i <= 3; i++) {
    await page.getByTestId('step-once').click();
    await page.waitForFunction((n) => document.querySelector('[data-testid=step-count]').textContent === String(n), i);
  }
  const { script, out, torchNorm } = await continueInPyTorch(page, 'conv-export');
  assert.match(fs.readFileSync(script, 'utf8'), /nn\.Conv2d\(1, 8, 3, stride=1, padding=1\)/);
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '4');
  const pageNorm = Number.parseFloat(await text(page, 'grad-norm'));
  assert.ok(Math.abs(torchNorm - pageNorm) <= 2e-4 * Math.max(1, pageNorm), `PyTorch ${torchNorm} vs page ${pageNorm}\n${out}`);
  t.diagnostic(`conv net, next step's gradient norm: PyTorch ${torchNorm}, page ${pageNorm}`);
  assert.deepEqual(errors, []);
  await page.close();
});
