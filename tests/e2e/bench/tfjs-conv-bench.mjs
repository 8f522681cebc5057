// TensorFlow.js side of the conv benchmark (bundled by conv.mjs with
// esbuild; nothing is loaded from a CDN). window.tfConvBench trains the
// same conv net as Stepscope's conv workload (the format's layers: conv2d
// with zero padding, max and average pooling, dense), on the same images,
// with SGD and momentum 0.9 at lr 0.01, and returns images per second.
// Images arrive as rows in (C, H, W) order and are laid out NHWC once,
// before timing (TF.js's layout). Each step is optimizer.minimize over one
// batch; the loss is read back once every 10 steps.
import * as tf from '@tensorflow/tfjs-core';
import { timeSteps } from './tfjs-timing.mjs';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import '@tensorflow/tfjs-backend-webgpu';
// TF.js's wasm backend has no Conv2DBackpropFilter kernel (it cannot train
// a conv net): its plain-JavaScript CPU backend is the CPU peer here.
import '@tensorflow/tfjs-backend-cpu';

window.tfConvBench = async ({ backend, workload, seconds }) => {
  if (!(await tf.setBackend(backend))) throw new Error(`no TF.js backend ${backend}`);
  await tf.ready();
  const { input_shape: [c, h, w], layers, batch, rows, inputs, targets } = workload;
  const batches = [];
  for (let i = 0; (i + 1) * batch <= rows; i++) {
    const x = tf.tidy(() => tf.transpose(tf.tensor4d(inputs.subarray(i * batch * c * h * w, (i + 1) * batch * c * h * w), [batch, c, h, w]), [0, 2, 3, 1]));
    const y = tf.tidy(() => tf.cast(tf.oneHot(tf.tensor1d(Array.from(targets.subarray(i * batch, (i + 1) * batch)), 'int32'), 10), 'float32'));
    batches.push([x, y]);
  }
  // Parameters as nn.Conv2d / nn.Linear draw them (uniform ±1/√fan_in).
  let [ch, side] = [c, [h, w]];
  let flat = null;
  const params = layers.map((l) => {
    if (l.kind === 'conv2d') {
      const [k, s, p] = [l.kernel, l.stride ?? 1, l.padding ?? 0];
      const bound = 1 / Math.sqrt(ch * k * k);
      const v = { w: tf.variable(tf.randomUniform([k, k, ch, l.filters], -bound, bound, 'float32', 1)), b: tf.variable(tf.zeros([l.filters])) };
      side = side.map((d) => Math.floor((d + 2 * p - k) / s) + 1);
      ch = l.filters;
      return v;
    }
    if (l.kind === 'max_pool2d' || l.kind === 'avg_pool2d') {
      const [k, s] = [l.kernel, l.stride ?? l.kernel];
      side = side.map((d) => Math.floor((d - k) / s) + 1);
      return null;
    }
    const fanIn = flat ?? ch * side[0] * side[1];
    flat = l.units;
    const bound = 1 / Math.sqrt(fanIn);
    return { w: tf.variable(tf.randomUniform([fanIn, l.units], -bound, bound, 'float32', 1)), b: tf.variable(tf.zeros([l.units])) };
  });
  const act = (a, v) => (a === 'relu' ? tf.relu(v) : a === 'tanh' ? tf.tanh(v) : a === 'sigmoid' ? tf.sigmoid(v) : v);
  const optimizer = tf.train.momentum(0.01, 0.9);
  const step = (i, read) => {
    const [x, y] = batches[i % batches.length];
    const cost = optimizer.minimize(() => {
      let v = x;
      layers.forEach((l, n) => {
        const p = params[n];
        if (l.kind === 'conv2d') {
          const pad = l.padding ?? 0;
          v = act(l.activation, tf.add(tf.conv2d(v, p.w, l.stride ?? 1, pad === 0 ? 'valid' : [[0, 0], [pad, pad], [pad, pad], [0, 0]]), p.b));
        } else if (l.kind === 'max_pool2d') {
          v = tf.maxPool(v, l.kernel, l.stride ?? l.kernel, 'valid');
        } else if (l.kind === 'avg_pool2d') {
          v = tf.avgPool(v, l.kernel, l.stride ?? l.kernel, 'valid');
        } else {
          if (v.rank > 2) v = tf.reshape(v, [batch, -1]);
          v = act(l.activation, tf.add(tf.matMul(v, p.w), p.b));
        }
      });
      return tf.losses.softmaxCrossEntropy(y, v);
    }, true);
    return read ? cost.data().then((d) => { cost.dispose(); return d[0]; }) : (cost.dispose(), null);
  };
  const { steps, elapsed } = await timeSteps(step, seconds);
  tf.disposeVariables();
  batches.flat().forEach((t) => t.dispose());
  return { images_per_second: (steps * batch) / elapsed, steps };
};
