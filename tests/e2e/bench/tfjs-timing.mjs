// The timed loop both TF.js benchmarks share (tfjs-bench.mjs, tfjs-conv-bench.mjs):
// `step(i, read)` runs training step i (and, where `read`, returns a promise of its
// loss). One warm-up step, then steps for at least `seconds`, the loss read back once
// every 10 steps (TF.js queues the rest), and a last step read back so that the time
// covers all of them. Returns { steps, elapsed } (seconds).
export async function timeSteps(step, seconds) {
  await step(0, true);
  const started = performance.now();
  let steps = 0;
  while (steps === 0 || performance.now() - started < 1000 * seconds) {
    const read = steps % 10 === 9;
    const r = step(steps, read);
    if (read) await r;
    steps += 1;
  }
  await step(steps, true);
  steps += 1;
  return { steps, elapsed: (performance.now() - started) / 1000 };
}
