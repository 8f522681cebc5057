// ConvNetJS side of the conv benchmark (npm convnetjs 0.3.0, Karpathy's
// library behind the MNIST demo a learner meets first; bundled by conv.mjs
// with esbuild, nothing from a CDN). window.convnetjsConvBench trains the
// same conv net as Stepscope's conv workload on the same images, with
// ConvNetJS's own SGD trainer (momentum 0.9, lr 0.01, batches of the
// workload's size, no decay), and returns images per second. ConvNetJS
// trains an image at a time (`Trainer.train(vol, label)`; it steps the
// parameters after each batch_size images), in plain JavaScript on one
// thread. Images arrive as rows in (C, H, W) order and become ConvNetJS's
// Vols ((y·W + x)·C + c) once, before timing. ConvNetJS has no average
// pooling: a net with one is refused (the benchmark leaves its cell empty).
import convnetjs from 'convnetjs';

window.convnetjsConvBench = ({ workload, seconds }) => {
  const { input_shape: [c, h, w], layers, batch, rows, inputs, targets } = workload;
  const act = (a) => (a === 'relu' || a === 'tanh' || a === 'sigmoid' ? { activation: a } : {});
  const defs = [{ type: 'input', out_sx: w, out_sy: h, out_depth: c }];
  layers.forEach((l, n) => {
    if (l.kind === 'conv2d') {
      defs.push({ type: 'conv', sx: l.kernel, filters: l.filters, stride: l.stride ?? 1, pad: l.padding ?? 0, ...act(l.activation) });
    } else if (l.kind === 'max_pool2d') {
      defs.push({ type: 'pool', sx: l.kernel, stride: l.stride ?? l.kernel });
    } else if (l.kind === 'avg_pool2d') {
      throw new Error('ConvNetJS has no average pooling');
    } else if (n === layers.length - 1) {
      defs.push({ type: 'softmax', num_classes: l.units });
    } else {
      defs.push({ type: 'fc', num_neurons: l.units, ...act(l.activation) });
    }
  });
  const net = new convnetjs.Net();
  net.makeLayers(defs);
  const trainer = new convnetjs.Trainer(net, { method: 'sgd', learning_rate: 0.01, momentum: 0.9, batch_size: batch, l2_decay: 0 });
  const vols = [];
  for (let r = 0; r < rows; r++) {
    const v = new convnetjs.Vol(w, h, c, 0.0);
    const row = inputs.subarray(r * c * h * w, (r + 1) * c * h * w);
    for (let d = 0; d < c; d++) {
      for (let y = 0; y < h; y++) {
        for (let x = 0; x < w; x++) v.w[(y * w + x) * c + d] = row[(d * h + y) * w + x];
      }
    }
    vols.push(v);
  }
  const step = (i) => {
    for (let k = 0; k < batch; k++) {
      const r = (i * batch + k) % rows;
      trainer.train(vols[r], targets[r]);
    }
  };
  step(0);
  const started = performance.now();
  let steps = 0;
  while (steps === 0 || performance.now() - started < 1000 * seconds) {
    step(steps + 1);
    steps += 1;
  }
  const elapsed = (performance.now() - started) / 1000;
  return { images_per_second: (steps * batch) / elapsed, steps };
};
