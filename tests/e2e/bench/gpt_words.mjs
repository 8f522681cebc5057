// How much of a sample is words of the training text: the share of its
// words (runs of two or more letters) that Tiny Shakespeare contains. Noise
// from an untrained model scores near 0; a character model that has
// learnt spelling scores well over half.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
let known = null;

export function wordShare(sample) {
  if (!known) {
    const textPath = path.resolve(here, '../../../core/data/tinyshakespeare.txt');
    known = new Set(fs.readFileSync(textPath, 'utf8').toLowerCase().match(/[a-z]{2,}/g));
  }
  const words = sample.toLowerCase().match(/[a-z]{2,}/g) ?? [];
  const found = words.filter((w) => known.has(w)).length;
  return { words: words.length, found: words.length ? found / words.length : 0 };
}
