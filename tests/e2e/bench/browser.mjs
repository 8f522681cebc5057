// What the benchmark scripts share: the trunk-built page (dist/) served on
// 127.0.0.1 with extra routes, and headless Chromium with WebGPU on its
// software adapter (flags as in ../../shared/TOOLCHAIN.md).
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
// STEPSCOPE_DIST names another build (e.g. `trunk build --release --dist /tmp/d`).
export const dist = process.env.STEPSCOPE_DIST ? path.resolve(process.env.STEPSCOPE_DIST) : path.resolve(here, '../../../dist');
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css', '.svg': 'image/svg+xml', '.png': 'image/png' };

const serveFile = (file, res, isolated) => {
  if (!fs.existsSync(file) || !fs.statSync(file).isFile()) return res.writeHead(404).end();
  // Cross-origin isolated, as Trunk.toml serves it: the page's and the
  // worker's clocks resolve 5 µs instead of 100 µs, and its workers may
  // share memory (docs/page.md). `isolated: false`: a plain static host.
  const isolation = isolated
    ? { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' }
    : {};
  res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream', ...isolation });
  fs.createReadStream(file).pipe(res);
};

// Serves dist/; `routes(pathname)` may name another file for a path.
export async function serve(routes = () => null, { isolated = true } = {}) {
  if (!fs.existsSync(path.join(dist, 'index.html'))) throw new Error('dist/index.html missing: run `trunk build --release` first');
  const server = http.createServer((req, res) => {
    const p = path.normalize(new URL(req.url, 'http://localhost').pathname);
    serveFile(routes(p) ?? path.join(dist, p === '/' ? 'index.html' : p), res, isolated);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { server, root: `http://127.0.0.1:${server.address().port}/` };
}

export async function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--enable-webgpu-developer-features', ...extraArgs],
  });
}

// The WebGPU adapter the browser offers, in words.
export async function adapterName(page) {
  return page.evaluate(async () => {
    const a = await navigator.gpu?.requestAdapter();
    return a ? [a.info.description, a.info.architecture, a.info.vendor].filter(Boolean).join(', ') : 'none';
  });
}
