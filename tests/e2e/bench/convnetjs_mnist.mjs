// ConvNetJS's MNIST net trained by ConvNetJS itself (npm `convnetjs`, in
// node, one thread), the peer of scripts/bench_conv.py's Stepscope figure:
// the net of its MNIST demo (conv 5×5×8 pad 2 relu, pool 2, conv 5×5×16
// pad 2 relu, pool 3, softmax 10), its trainer with SGD, momentum 0.9,
// l2_decay 0.001, batch 32, on random 28 × 28 images. Prints images/s per
// round and the median.
//
//   (cd tests/e2e && npm install --no-save convnetjs@0.3.0)
//   node tests/e2e/bench/convnetjs_mnist.mjs [seconds rounds]
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const convnetjs = require('convnetjs');
const [seconds, rounds] = [Number(process.argv[2] ?? 4), Number(process.argv[3] ?? 3)];

const layers = [
  { type: 'input', out_sx: 28, out_sy: 28, out_depth: 1 },
  { type: 'conv', sx: 5, filters: 8, stride: 1, pad: 2, activation: 'relu' },
  { type: 'pool', sx: 2, stride: 2 },
  { type: 'conv', sx: 5, filters: 16, stride: 1, pad: 2, activation: 'relu' },
  { type: 'pool', sx: 3, stride: 3 },
  { type: 'softmax', num_classes: 10 },
];
const net = new convnetjs.Net();
net.makeLayers(layers);
const trainer = new convnetjs.Trainer(net, { method: 'sgd', learning_rate: 0.01, momentum: 0.9, batch_size: 32, l2_decay: 0.001 });
const images = Array.from({ length: 128 }, () => {
  const v = new convnetjs.Vol(28, 28, 1, 0.0);
  for (let i = 0; i < v.w.length; i++) v.w[i] = Math.random();
  return v;
});
const labels = images.map(() => Math.floor(Math.random() * 10));
for (let i = 0; i < 64; i++) trainer.train(images[i % 128], labels[i % 128]); // warm-up
const figures = [];
for (let r = 0; r < rounds; r++) {
  const start = performance.now();
  let n = 0;
  while (performance.now() - start < seconds * 1000) {
    for (let i = 0; i < 32; i++, n++) trainer.train(images[n % 128], labels[n % 128]);
  }
  figures.push(n / ((performance.now() - start) / 1000));
  console.log(`round ${r + 1}: ${figures.at(-1).toFixed(0)} images/s`);
}
figures.sort((a, b) => a - b);
console.log(`ConvNetJS ${require('convnetjs/package.json').version}, node ${process.version}: median ${figures[Math.floor(figures.length / 2)].toFixed(0)} images/s`);
