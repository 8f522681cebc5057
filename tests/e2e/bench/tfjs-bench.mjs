// TensorFlow.js side of the browser benchmark (bundled by run.mjs with
// esbuild; nothing is loaded from a CDN). window.tfBench trains the same
// MLP as Stepscope's workload, on the same rows, with Adam at lr 0.01, and
// returns steps per second. Each step is optimizer.minimize over one batch;
// the loss is read back once every 10 steps (Stepscope's K = 1 reads every
// step, its larger K once per submit).
import * as tf from '@tensorflow/tfjs-core';
import { timeSteps } from './tfjs-timing.mjs';
// The gradients of every op (tfjs-core alone registers none).
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import '@tensorflow/tfjs-backend-webgpu';
import { getThreadsCount, setThreadsCount, setWasmPaths } from '@tensorflow/tfjs-backend-wasm';

setWasmPaths('/tfjs-wasm/');

// `threads`: the wasm backend's thread pool (set before it first starts;
// its threaded build loads only where the page is cross-origin isolated).
window.tfBench = async ({ backend, workload, seconds, threads }) => {
  if (backend === 'wasm' && threads) setThreadsCount(threads);
  if (!(await tf.setBackend(backend))) throw new Error(`no TF.js backend ${backend}`);
  await tf.ready();
  const { widths, batch, activation, loss, rows, inputs, targets } = workload;
  const classes = widths[widths.length - 1];
  const batches = [];
  for (let i = 0; i * batch < rows; i++) {
    const x = tf.tensor2d(inputs.subarray(i * batch * widths[0], (i + 1) * batch * widths[0]), [batch, widths[0]]);
    const t = targets.subarray(i * batch, (i + 1) * batch);
    const y = loss === 'cross_entropy'
      ? tf.cast(tf.oneHot(tf.tensor1d(Array.from(t), 'int32'), classes), 'float32')
      : tf.tensor2d(t, [batch, 1]);
    batches.push([x, y]);
  }
  const layers = widths.slice(1).map((units, l) => ({
    w: tf.variable(tf.randomUniform([widths[l], units], -1 / Math.sqrt(widths[l]), 1 / Math.sqrt(widths[l]), 'float32', 1)),
    b: tf.variable(tf.zeros([units])),
  }));
  const act = activation === 'tanh' ? tf.tanh : tf.relu;
  const optimizer = tf.train.adam(0.01);
  const step = (i, read) => {
    const [x, y] = batches[i % batches.length];
    const cost = optimizer.minimize(() => {
      let h = x;
      layers.forEach(({ w, b }, l) => {
        h = tf.add(tf.matMul(h, w), b);
        if (l < layers.length - 1) h = act(h);
      });
      return loss === 'cross_entropy' ? tf.losses.softmaxCrossEntropy(y, h) : tf.losses.sigmoidCrossEntropy(y, h);
    }, true);
    return read ? cost.data().then((v) => { cost.dispose(); return v[0]; }) : (cost.dispose(), null);
  };
  const { steps, elapsed } = await timeSteps(step, seconds);
  tf.disposeVariables();
  batches.flat().forEach((t) => t.dispose());
  // The threads XNNPACK's pool has (1 on the single-threaded build).
  const threadsUsed = backend === 'wasm' ? getThreadsCount() : undefined;
  const multithread = backend === 'wasm' ? await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT') : undefined;
  return { steps_per_second: steps / elapsed, steps, threads: threadsUsed, multithread };
};
