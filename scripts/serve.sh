#!/usr/bin/env bash
# Serves the page for local work: installs what is missing (wasm32 target,
# trunk, the locked wasm-bindgen CLI, wasm-opt), then `trunk serve`.
# Open http://127.0.0.1:8080 in a browser with WebGPU (recent Chrome or
# Edge); without WebGPU the page runs the CPU engine and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh web
export PATH="$HOME/.cargo/bin:$PWD/tests/e2e/node_modules/.bin:$PATH"
export TRUNK_SKIP_VERSION_CHECK=true TRUNK_OFFLINE=true
exec trunk serve "$@"
