// Checkpoints on the page: download, restore and verify; bad uploads change
// nothing; device loss and GPU errors resume from the newest checkpoint;
// automatic checkpoints survive a reload; a large network restores while
// training and the page stays responsive.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { setup, text, number, stepCount, trainUntil, setField, settle, lastCheckpointStep, patience } from './harness.mjs';

const ctx = setup();
const open = (url, options) => ctx.open(url, options);

test('checkpoints download, restore, verify, and bad uploads change nothing', async () => {
  const { page } = await open(ctx.base);
  for (let i = 0; i < 3; i++) {
    await page.getByTestId('step-once').click();
    await page.waitForFunction((n) => document.querySelector('[data-testid=step-count]').textContent === String(n), i + 1);
  }
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-checkpoint').click()]);
  const saved = path.join(os.tmpdir(), `stepscope-${process.pid}.safetensors`);
  await download.saveAs(saved);
  const bytes = fs.readFileSync(saved);
  const headerLength = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString());
  assert.equal(header.__metadata__.format, 'stepscope-checkpoint/2');
  assert.equal(header.__metadata__.step, '3');
  assert.deepEqual(header['layers.0.weight'].shape, [16, 2]);

  await page.getByTestId('verify-restore').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=verify-result]').textContent !== '');
  assert.match(await text(page, 'verify-result'), /^Restore verified: checkpoint of step 3 .*parameters identical, optimizer state identical, data position identical, next 5 losses identical/);

  // Bad uploads: each named, and the run stays at step 5.
  await page.getByTestId('step-once').click();
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '5');
  const bad = (name, content) => { const f = path.join(os.tmpdir(), `${process.pid}-${name}`); fs.writeFileSync(f, content); return f; };
  const huge = Buffer.alloc(16); huge.writeBigUInt64LE(1n << 40n, 0);
  // The stored experiment (a JSON string inside the header) asks for 17
  // units where the tensors have 16: same length, so only the shapes disagree.
  const wrongModel = Buffer.from(bytes.toString('latin1').replace('\\"units\\":16', '\\"units\\":17'), 'latin1');
  assert.notDeepEqual(wrongModel, bytes);
  for (const [file, message] of [
    [bad('truncated.safetensors', bytes.subarray(0, bytes.length - 10)), /truncated/],
    [bad('image.png', Buffer.from('\x89PNG\r\n\x1a\n not a checkpoint at all')), /not a checkpoint|limit|not a safetensors/],
    [bad('huge.safetensors', huge), /more than the \d+-byte limit/],
    [bad('other-model.safetensors', wrongModel), /checkpoint was not loaded/],
  ]) {
    await page.getByTestId('restore-checkpoint').setInputFiles(file);
    await page.waitForFunction((src) => new RegExp(src).test(document.querySelector('[data-testid=alert]')?.textContent ?? ''), message.source)
      .catch(async (e) => { throw new Error(`${path.basename(file)}: expected ${message}, alert says: ${await page.evaluate(() => document.querySelector('[data-testid=alert]')?.textContent)} (${e.message})`); });
    assert.equal(await text(page, 'step-count'), '5');
    await page.getByRole('button', { name: 'Dismiss message' }).click();
  }
  // A refused file does not even pause a running run.
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent) > 5);
  await page.getByTestId('restore-checkpoint').setInputFiles(bad('truncated-again.safetensors', bytes.subarray(0, bytes.length - 10)));
  await page.waitForFunction(() => /truncated/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  assert.match(await page.getByTestId('train-toggle').textContent(), /Pause/);
  const running = await stepCount(page);
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent) > n, running);
  await page.getByTestId('train-toggle').click();
  await page.getByRole('button', { name: 'Dismiss message' }).click();
  // The good one restores step 3, and continues from there.
  await page.getByTestId('restore-checkpoint').setInputFiles(saved);
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '3');
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '4');
  await page.close();
});

test('a lost GPU device: the page says so, resumes from the newest checkpoint, and the run continues with the same numbers', async (t) => {
  const { page } = await open(ctx.base);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true');
  assert.match(await text(page, 'backend-name'), /WebGPU/);
  await setField(page, 'checkpoint-every', 10);
  await trainUntil(page, 35);
  // Steps in flight when Pause was pressed still land.
  let paused = await settle(page);
  // Automatic checkpoints fall on the last step of the submit that passes
  // a multiple of 10 (several steps per submit on a fast adapter), so the
  // newest may be the step of the pause: three single steps past it leave
  // steps to redo after the loss.
  const stepOnce = async () => {
    await page.getByTestId('step-once').click();
    await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent) === n, paused + 1);
    paused += 1;
  };
  for (let i = 0; i < 3; i++) await stepOnce();
  let newest = await lastCheckpointStep(page);
  // One of those steps may itself have passed a multiple of 10.
  while (newest === paused) {
    await stepOnce();
    newest = await lastCheckpointStep(page);
  }
  const digest = async () => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-checkpoint').click()]);
    const bytes = fs.readFileSync(await download.path());
    const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString());
    return [header.__metadata__.step, header.__metadata__.digest, bytes];
  };
  const before = await digest();
  const savedAtPause = before.pop();
  assert.equal(before[0], String(paused));

  // The device goes; the next step finds out, and the page resumes from
  // its newest automatic checkpoint on a new device.
  assert.ok(await page.evaluate(() => window.wasmBindings.stepscope_test_lose_device()));
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => /GPU device was lost; training resumed on a new device from step \d+/.test(document.querySelector('[data-testid=notice]')?.textContent ?? ''));
  const resumed = Number((await text(page, 'notice')).match(/from step (\d+)/)[1]);
  assert.ok(resumed === newest && resumed < paused && resumed > paused - 20, `resumed from ${resumed}, paused at ${paused}, newest automatic checkpoint ${newest}`);
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent) === n, resumed);

  // Redone on the new device, the steps up to the pause give the same
  // checkpoint bit for bit (its digest covers every tensor and the metadata).
  for (let s = resumed; s < paused; s++) {
    await page.getByTestId('step-once').click();
    await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent) === n, s + 1);
  }
  assert.deepEqual((await digest()).slice(0, 2), before);
  await trainUntil(page, paused + 12);

  // A restore starts the automatic checkpoints afresh: a device lost after
  // it resumes the restored run, not the newest checkpoint of the run before
  // (which is past `paused`: one falls due every 10 steps).
  await page.getByTestId('restore-checkpoint').setInputFiles({ name: 'paused.safetensors', mimeType: 'application/octet-stream', buffer: savedAtPause });
  await page.waitForFunction((n) => document.querySelector('[data-testid=notice]')?.textContent.includes(`Restored the uploaded checkpoint: step ${n}.`), paused);
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent) === n, paused);
  assert.ok(await page.evaluate(() => window.wasmBindings.stepscope_test_lose_device()));
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => /GPU device was lost; training resumed on a new device from step \d+/.test(document.querySelector('[data-testid=notice]')?.textContent ?? ''));
  assert.equal(Number((await text(page, 'notice')).match(/from step (\d+)/)[1]), paused, 'resumed the restored run');
  await page.getByTestId('step-once').click();
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent) === n, paused + 1);
  t.diagnostic(`device lost at step ${paused}; resumed from ${resumed}; redone steps gave the same checkpoint; lost again after a restore, resumed the restored step`);
  await page.close();
});

test('a GPU error that is not a device loss pauses the run, and the CPU engine goes on from the newest checkpoint', async (t) => {
  const { page } = await open(`${ctx.base}?engine=gpu`);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true');
  assert.match(await text(page, 'backend-name'), /WebGPU/);
  await setField(page, 'checkpoint-every', 10);
  await trainUntil(page, 25);
  // The device refuses a buffer past its limit: a validation error. The
  // page pauses and says so; it does not re-create the device (that is for
  // a lost one), so it does not loop on an error that would come back.
  assert.ok(await page.evaluate(() => window.wasmBindings.stepscope_test_refuse_gpu_work()));
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => /Training paused \(the GPU refused the work\)/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  assert.match(await page.getByTestId('train-toggle').textContent(), /Train/);
  assert.doesNotMatch((await page.locator('[data-testid=notice]').count()) ? await text(page, 'notice') : '', /resumed on a new device/);
  const paused = await stepCount(page);
  // As the message says, the CPU engine goes on. The GPU's buffers are not
  // trusted after an error, so it starts from the newest automatic checkpoint.
  await page.getByTestId('engine-pin').selectOption('cpu');
  await page.waitForFunction(() => /newest automatic checkpoint, step \d+/.test(document.querySelector('[data-testid=notice]')?.textContent ?? ''));
  const from = Number((await text(page, 'notice')).match(/checkpoint, step (\d+)/)[1]);
  assert.ok(from >= 10 && from <= paused, `went on from ${from}, paused at ${paused}`);
  await page.waitForFunction(() => /^CPU/.test(document.querySelector('[data-testid=backend-name]')?.textContent ?? ''));
  assert.equal(await stepCount(page), from);
  await page.getByTestId('step-once').click();
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent) === n, from + 1);
  t.diagnostic(`GPU error at step ${paused}: paused, device not re-created; the CPU engine went on from checkpoint ${from}`);
  await page.close();
});

test('automatic checkpoints survive a reload; synchronous ones stall the loop', async (t) => {
  const { page } = await open(ctx.base);
  await setField(page, 'checkpoint-every', 10);
  // Synchronous: the loop waits for readback, serialization and IndexedDB.
  await page.getByTestId('checkpoint-background').uncheck();
  await trainUntil(page, 40);
  await page.waitForFunction(() => /synchronously: the loop stalled/.test(document.querySelector('[data-testid=checkpoint-status]').textContent));
  const syncStatus = await text(page, 'checkpoint-status');
  assert.match(syncStatus, /IndexedDB/, syncStatus);
  // Durations are written for people (µs, ms or s by size): read them back in ms.
  const duration = (status, before) => {
    const m = status.match(new RegExp(`${before} ([\\d.,]+) (µs|ms|s)\\b`));
    assert.ok(m, `${before}: ${status}`);
    return Number(m[1].replace(/,/g, '')) * { 'µs': 1e-3, ms: 1, s: 1e3 }[m[2]];
  };
  const stalled = duration(syncStatus, 'stalled');
  assert.ok(await number(page, 'phase-ms-checkpoint') > 0, 'the stall is in the timeline');
  // In the background the loop only queues the copies.
  await page.getByTestId('checkpoint-background').check();
  await trainUntil(page, (await stepCount(page)) + 40);
  // Steps in flight when Pause was pressed still land, and may take one
  // more checkpoint: read the status once they have.
  await settle(page);
  await page.waitForFunction(() => /in the background/.test(document.querySelector('[data-testid=checkpoint-status]').textContent));
  await lastCheckpointStep(page); // until the status holds still
  const bgStatus = await text(page, 'checkpoint-status');
  const waited = duration(bgStatus, 'the loop waited');
  const total = duration(bgStatus, 'took');
  assert.ok(waited < stalled, `background wait ${waited} ms vs synchronous stall ${stalled} ms`);
  assert.ok(waited <= total, bgStatus);
  t.diagnostic(`checkpoint: synchronous stall ${stalled} ms; background loop wait ${waited} ms (readback, serialization and storage ${total} ms beside training)`);

  // A reload continues from the newest automatic checkpoint.
  const saved = Number(bgStatus.match(/^Step ([\d,]+)/)[1].replace(/,/g, ''));
  await page.reload();
  await page.waitForFunction(() => /Restored the run autosaved in this browser/.test(document.querySelector('[data-testid=notice]')?.textContent ?? ''), null, { timeout: patience(60_000) });
  assert.match(await text(page, 'notice'), new RegExp(`at step ${saved}\\.`));
  assert.equal(await stepCount(page), saved);
  await page.getByTestId('step-once').click();
  await page.waitForFunction((n) => document.querySelector('[data-testid=step-count]').textContent === String(n), saved + 1);
  // Reset forgets it: the next reload starts at 0.
  await page.getByTestId('reset').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '0');
  await page.waitForTimeout(500);
  await page.reload();
  // Right after a reload the element may not be there yet.
  await page.waitForFunction(() => !(document.querySelector('[data-testid=backend-name]')?.textContent ?? 'starting').startsWith('starting'));
  await page.waitForTimeout(500);
  assert.equal(await stepCount(page), 0);
  assert.doesNotMatch((await page.locator('[data-testid=notice]').count()) ? await text(page, 'notice') : '', /Restored/);
  await page.close();
});

test('a large network restores a checkpoint while training, and the page stays responsive', async (t) => {
  const { page: probe } = await open(`${ctx.root}?engine=cpu`);
  const e = JSON.parse(decodeURIComponent((await probe.evaluate(() => location.hash)).slice('#e='.length)));
  await probe.close();
  const output = e.model.layers[e.model.layers.length - 1];
  e.model.layers = [...Array(16)].map(() => ({ units: 256, activation: 'tanh' })).concat([output]);
  const { page, errors } = await open(`${ctx.root}?engine=cpu#e=${encodeURIComponent(JSON.stringify(e))}`);
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= 5, null, { timeout: patience(60_000) });
  // Downloaded while training: a checkpoint of 16 × 256 with AdamW.
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-checkpoint').click()]);
  const saved = path.join(os.tmpdir(), `stepscope-large-${process.pid}.safetensors`);
  await download.saveAs(saved);
  const bytes = fs.readFileSync(saved);
  const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString());
  const savedStep = Number(header.__metadata__.step);
  assert.deepEqual(header['layers.5.weight'].shape, [256, 256]);
  // Training goes on past it; then the file is restored while training.
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) > n + 3, savedStep, { timeout: patience(60_000) });
  await page.evaluate(() => {
    window.__long = [];
    new PerformanceObserver((list) => { for (const entry of list.getEntries()) window.__long.push(entry.duration); })
      .observe({ type: 'longtask' });
  });
  const started = Date.now();
  await page.getByTestId('restore-checkpoint').setInputFiles(saved);
  await page.waitForFunction((n) => document.querySelector('[data-testid=notice]')?.textContent.includes(`step ${n}`), savedStep, { timeout: patience(60_000) })
    .catch(async (e) => { throw new Error(`no restore notice; notice: ${await page.evaluate(() => document.querySelector('[data-testid=notice]')?.textContent)}, alert: ${await page.evaluate(() => document.querySelector('[data-testid=alert]')?.textContent)} (${e.message})`); });
  const restoreMs = Date.now() - started;
  const longest = await page.evaluate(() => Math.max(0, ...window.__long));
  t.diagnostic(`16 × 256: a ${(bytes.length / 2 ** 20).toFixed(1)} MiB checkpoint of step ${savedStep} restored while training in ${restoreMs} ms; longest main-thread task meanwhile ${longest.toFixed(0)} ms (0: none over 50 ms)`);
  // The restored run waits at its step, and trains on from there.
  assert.match(await page.getByTestId('train-toggle').textContent(), /Train/, 'a restored run is paused');
  assert.equal(await stepCount(page), savedStep);
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) > n, savedStep, { timeout: patience(60_000) });
  assert.deepEqual(errors, []);
  await page.close();
});
