import { launch, serve } from './bench/browser.mjs';
const every = process.argv[2] ?? '100';
const { server, root } = await serve();
const browser = await launch(['--enable-precise-memory-info', '--js-flags=--expose-gc']);
const page = await browser.newPage();
const e = { seed: 1, model: { inputs: 2, layers: [{ units: 16, activation: 'tanh' }, { units: 16, activation: 'tanh' }, { units: 1, activation: 'linear' }] },
  loss: 'bce_with_logits', optimizer: { kind: 'sgd', lr: 0.05, momentum: 0.9 }, batch_size: 32,
  data: { source: 'spiral', samples: 500, noise: 0.1, train_fraction: 0.5, features: ['x1', 'x2'], shuffle: true } };
await page.goto(`${root}?engine=cpu#e=${encodeURIComponent(JSON.stringify(e))}`);
await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true');
await page.getByTestId('checkpoint-every').fill(every);
await page.getByTestId('checkpoint-every').press('Enter');
await page.getByTestId('train-toggle').click();
for (let i = 0; i < 4; i++) {
  await page.waitForTimeout(8000);
  console.log(every, await page.evaluate(() => { globalThis.gc?.(); return [document.querySelector('[data-testid=step-count]').textContent, (performance.memory.usedJSHeapSize / 1048576).toFixed(2), (window.wasmBindings.stepscope_wasm_memory_bytes() / 1048576).toFixed(2)]; }));
}
await browser.close(); server.close();
