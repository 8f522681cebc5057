// The exported PyTorch script continues the page's run, also under
// torchrun, and the run comes back to the page.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { setup, artifacts, text, continueInPyTorch } from './harness.mjs';

const ctx = setup();
const open = (url, options) => ctx.open(url, options);

test('the exported PyTorch script continues the page\'s run, also under torchrun, and comes back', async (t) => {
  const { page } = await open(ctx.base);
  for (let i = 1; i <= 3; i++) {
    await page.getByTestId('step-once').click();
    await page.waitForFunction((n) => document.querySelector('[data-testid=step-count]').textContent === String(n), i);
  }
  const { dir, checkpoint, script, data, out, torchNorm } = await continueInPyTorch(page, 'export');
  assert.equal(path.basename(checkpoint), 'stepscope-step3.safetensors');
  // The page's next step from the same state (WebGPU): the same gradient
  // norm, to the 4 decimals both print (float32 sums in another order).
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '4');
  const pageNorm = Number.parseFloat(await text(page, 'grad-norm'));
  assert.ok(Math.abs(torchNorm - pageNorm) <= 2e-4, `PyTorch ${torchNorm} vs page ${pageNorm}\n${out}`);
  t.diagnostic(`next step's gradient norm: PyTorch ${torchNorm}, page ${pageNorm}`);

  // The same checkpoint continues on two processes under torchrun and the
  // checkpoint they write comes back into the page, which verifies it.
  const next = path.join(dir, 'next.safetensors');
  const run = execFileSync(process.env.STEPSCOPE_PYTHON ?? 'python3', ['-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2',
    script, checkpoint, '--data', data, '--steps', '5', '--out', next, '--metrics', 'two.jsonl', '--profile', 'prof'],
  { cwd: dir, encoding: 'utf8', env: { ...process.env, OMP_NUM_THREADS: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  assert.match(run, /on 2 processes \(gloo\)/, run);
  await page.getByTestId('restore-checkpoint').setInputFiles(next);
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '8');
  await page.getByTestId('verify-restore').click();
  await page.waitForFunction(() => /step 8 /.test(document.querySelector('[data-testid=verify-result]').textContent));
  assert.match(await text(page, 'verify-result'), /^Restore verified: checkpoint of step 8 /);
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '9');

  // The torchrun run opens in the page (in the worker): each rank's metrics
  // log together, then each rank's torch.profiler trace, then the page's
  // own trace. Each shows its steps by phase, the data share and the ranks.
  const opened = async (files, kind) => {
    // Each opening here is of another kind than the one shown before it.
    await page.getByTestId('open-run').setInputFiles(files);
    await page.waitForFunction((k) => document.querySelector('[data-testid=opened-run]')?.dataset.kind === k
      || document.querySelector('[data-testid=alert]'), kind);
    assert.equal(await page.locator('[data-testid=alert]').count(), 0, await page.locator('[data-testid=alert]').textContent().catch(() => ''));
    const view = await page.getByTestId('opened-run').evaluate((el) => {
      const steps = [...el.querySelectorAll('[data-testid=opened-run-timeline] > *')].map((s) => ({
        ms: Number(s.dataset.ms),
        phases: [...s.children].map((p) => [p.dataset.phase, Number(p.dataset.ms)]),
      }));
      const ranks = [...el.querySelectorAll('[data-testid=opened-run-ranks] tr[data-rank]')].map((r) => [Number(r.dataset.rank), Number(r.dataset.stepMs)]);
      const value = (id) => el.querySelector(`[data-testid=${id}]`)?.dataset.value;
      return { steps: Number(el.dataset.steps), timeline: steps, ranks, data: Number(value('opened-run-data-share')), gpuIdle: value('opened-run-gpu-idle') };
    });
    for (const s of view.timeline) {
      const sum = s.phases.reduce((a, [, ms]) => a + ms, 0);
      assert.ok(Math.abs(sum - s.ms) <= 1e-6 * Math.max(1, s.ms), `a step's phases add up to it: ${JSON.stringify(s)}`);
    }
    assert.ok(view.data >= 0 && view.data < 1, `data share ${view.data}`);
    t.diagnostic(`opened ${kind}: ${view.steps} steps, ${view.ranks.length} ranks ${JSON.stringify(view.ranks)}, data share ${view.data.toFixed(3)}`);
    return view;
  };
  const metrics = await opened([path.join(dir, 'two.jsonl'), path.join(dir, 'two.rank1.jsonl')], 'metrics');
  assert.equal(metrics.steps, 10);
  assert.deepEqual(metrics.ranks.map(([r]) => r), [0, 1]);
  assert.ok(metrics.ranks.every(([, ms]) => ms > 0));
  assert.equal(metrics.timeline.length, 5);
  for (const phase of ['data', 'forward', 'backward', 'optimizer', 'communication']) {
    assert.ok(metrics.timeline.every((s) => s.phases.some(([p, ms]) => p === phase && ms > 0)), `every step has its ${phase}`);
  }
  const traces = fs.readdirSync(path.join(dir, 'prof')).map((f) => path.join(dir, 'prof', f));
  assert.equal(traces.length, 2, traces.join(', '));
  const torch = await opened(traces, 'torch-trace');
  assert.deepEqual(torch.ranks.map(([r]) => r), [0, 1]);
  assert.equal(torch.steps, 6, 'three active steps on each rank');
  for (const phase of ['data', 'forward', 'backward', 'optimizer']) {
    assert.ok(torch.timeline.every((s) => s.phases.some(([p]) => p === phase)), `every traced step has its ${phase}`);
  }
  const [traced] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-trace').click()]);
  const own = path.join(dir, traced.suggestedFilename());
  await traced.saveAs(own);
  const mine = await opened([own], 'stepscope-trace');
  assert.ok(mine.steps >= 1 && mine.timeline.every((s) => s.ms > 0));
  // The page's GPU steps carry their timed passes on the GPU's track, and
  // the opened trace splits the GPU's time.
  const kernels = JSON.parse(fs.readFileSync(own, 'utf8')).traceEvents.filter((e) => e.cat === 'kernel');
  assert.ok(kernels.length >= 3 && kernels.every((k) => k.args.stream === 7 && k.dur >= 0), JSON.stringify(kernels.slice(0, 3)));
  assert.ok(mine.gpuIdle !== undefined && Number(mine.gpuIdle) >= 0 && Number(mine.gpuIdle) < 1, `GPU idle ${mine.gpuIdle}`);
  // Opened runs join the runs list, read-only, and compare by their curves.
  const openedEntries = page.locator('[data-testid=run-entry]', { hasText: 'Opened: two.jsonl + 1 more (metrics, 2 ranks)' });
  assert.equal(await openedEntries.count(), 1);
  assert.match(await openedEntries.textContent(), /read-only/);
  await openedEntries.getByTestId('run-select').check();
  await page.locator('[data-testid=run-entry].live').getByTestId('run-select').check();
  await page.waitForSelector('[data-testid=compare-diff] li');
  assert.match(await text(page, 'compare-diff'), /an opened run/);
  await page.locator('[data-testid=opened-run]').screenshot({ path: path.join(artifacts, 'opened-run.png') });
  // Hostile files are refused by name; the opened view and the live run stay.
  const bad = path.join(dir, 'cut.json');
  fs.writeFileSync(bad, fs.readFileSync(traces[0], 'utf8').slice(0, 4000));
  await page.getByTestId('open-run').setInputFiles(bad);
  await page.waitForFunction(() => /The run was not opened: cut\.json: not a trace/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  const backwards = path.join(dir, 'backwards.jsonl');
  fs.writeFileSync(backwards, '{"step": 2, "forward_ms": 1}\n{"step": 1, "forward_ms": 1}\n');
  await page.getByTestId('open-run').setInputFiles(backwards);
  await page.waitForFunction(() => /backwards\.jsonl line 2: step 1 after step 2/.test(document.querySelector('[data-testid=alert]')?.textContent ?? ''));
  assert.equal(await page.getByTestId('opened-run').getAttribute('data-kind'), 'stepscope-trace');
  await page.getByTestId('step-once').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').textContent === '10');
  await page.close();
});
