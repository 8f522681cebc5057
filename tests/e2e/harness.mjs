// What the end-to-end test files share: the trunk-built page (dist/) served
// on 127.0.0.1, one headless Chromium with WebGPU on its software adapter
// (flags as in ../../shared/TOOLCHAIN.md), and small helpers that read the
// page by its data-testids. Each *.test.mjs file calls `setup()` once at
// its top; scripts/test.sh runs the files one after another.
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve, launch, dist } from './bench/browser.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
export { dist };
export const artifacts = path.join(here, 'artifacts');

// `ctx.root`: the page as a newcomer opens it (the engine picked by
// measurement); `ctx.base`: pinned to WebGPU with the phased kernels (most
// tests check the GPU engine's per-phase behaviour, which the fused step
// does not split). Both are set once `before` has run.
export function setup() {
  const ctx = { root: null, base: null, browser: null, server: null };
  before(async () => {
    assert.ok(fs.existsSync(path.join(dist, 'index.html')), 'dist/index.html missing: run `trunk build --release` first');
    const served = await serve();
    ctx.server = served.server;
    ctx.root = served.root;
    ctx.base = `${ctx.root}?engine=gpu&fused=off`;
    ctx.browser = await launch();
    fs.mkdirSync(artifacts, { recursive: true });
  });
  after(async () => {
    await ctx.browser?.close();
    ctx.server?.close();
  });
  // Opens `url` and waits until the engine is chosen (the GPU device
  // created and, on auto, both engines measured).
  ctx.open = async (url, { viewport = { width: 1400, height: 1000 }, colorScheme, ...context } = {}) => {
    const page = await ctx.browser.newPage({ viewport, colorScheme, ...context });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(url);
    await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true',
      null, { timeout: patience(90_000) });
    return { page, errors };
  };
  return ctx;
}

// Waits are limits on behaviour, not on speed: each names how long the
// page takes on a quiet two-core machine, and `patience` stretches it for a
// loaded one (CI on a fresh machine shared with other work ran the suite at
// half speed and more). STEPSCOPE_E2E_PATIENCE sets the factor (default 3);
// a test that fails only waits longer before it says so.
const PATIENCE = Number(process.env.STEPSCOPE_E2E_PATIENCE ?? 3);
export const patience = (ms) => ms * (Number.isFinite(PATIENCE) && PATIENCE >= 1 ? PATIENCE : 3);

export const text = (page, id) => page.locator(`[data-testid=${id}]`).textContent();
// A number shown on the page: its data-value where the text is rounded
// for people (losses), else the text without thousands separators.
export const number = async (page, id) => {
  const el = page.locator(`[data-testid=${id}]`);
  const raw = await el.getAttribute('data-value');
  return Number.parseFloat(raw ? raw : (await el.textContent()).replace(/,/g, ''));
};
export const stepCount = (page) => number(page, 'step-count');

export async function trainUntil(page, steps, timeout = 60_000) {
  await page.getByTestId('train-toggle').click();
  await page.waitForFunction((n) => Number(document.querySelector('[data-testid=step-count]').textContent.replace(/,/g, '')) >= n,
    steps, { timeout: patience(timeout) });
  await page.getByTestId('train-toggle').click();
}

// After a pause, steps already in flight still land (the GPU engine takes
// several steps per submit, a frame of sharded steps may take seconds on a
// loaded machine): waits until the page says the run is at rest (paused,
// and its last frame took no step, ran no command and wrote no background
// checkpoint), and returns the step count.
export async function settle(page, timeout = 60_000) {
  await page.waitForFunction(() => document.querySelector('[data-testid=step-count]').dataset.atRest === 'true',
    null, { timeout: patience(timeout) });
  return stepCount(page);
}

// The step of the newest automatic checkpoint, from its status line, once
// the run is at rest (a checkpoint begun on the last step of a submit
// reports when it is stored).
export async function lastCheckpointStep(page) {
  await settle(page);
  const m = (await text(page, 'checkpoint-status')).match(/^Step ([\d,]+)/);
  return m ? Number(m[1].replace(/,/g, '')) : null;
}

// The image panel is made in parts, a task apiece; it marks itself made
// when the last is (data-made), so counts of its maps and filters are final.
export async function imageViewsMade(page, timeout = 30_000) {
  await page.waitForSelector('[data-testid=image-views][data-made=true]', { timeout: patience(timeout) });
}

export async function setField(page, id, value) {
  await page.getByTestId(id).fill(String(value));
  await page.getByTestId(id).press('Enter');
}

// Downloads the page's checkpoint, its PyTorch script and its training rows
// into a new folder and runs the script one step on them (STEPSCOPE_PYTHON,
// else python3): the files, the script's output and the gradient norm of
// the step it took, for the page's next step to be compared with.
export async function continueInPyTorch(page, name) {
  const { execFileSync } = await import('node:child_process');
  const os = await import('node:os');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `stepscope-${name}-`));
  const save = async (id) => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId(id).click()]);
    const file = path.join(dir, download.suggestedFilename());
    await download.saveAs(file);
    return file;
  };
  const checkpoint = await save('download-checkpoint');
  const script = await save('export-pytorch');
  const data = await save('export-data');
  const out = execFileSync(process.env.STEPSCOPE_PYTHON ?? 'python3', [script, checkpoint, '--data', data, '--steps', '1'], { cwd: dir, encoding: 'utf8' });
  const line = out.split('\n').find((l) => /grad_norm/.test(l));
  assert.ok(line, out);
  return { dir, checkpoint, script, data, out, torchNorm: Number(line.match(/grad_norm ([\d.eE+-]+)/)[1]) };
}

// The page's metrics download: each recorded step's batch loss (as written,
// full precision), by step.
export async function downloadLosses(page) {
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-metrics').click()]);
  const lines = fs.readFileSync(await download.path(), 'utf8').split('\n').filter((l) => l && !l.startsWith('#'));
  const header = lines[0].split(',');
  return new Map(lines.slice(1).map((l) => l.split(','))
    .filter((r) => r[header.indexOf('batch_loss')] !== '')
    .map((r) => [Number(r[header.indexOf('step')]), r[header.indexOf('batch_loss')]]));
}
