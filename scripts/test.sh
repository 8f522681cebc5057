#!/usr/bin/env bash
# Runs every Stepscope test. On a fresh machine it first installs what is
# missing (scripts/setup.sh). This is the README's test command; CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step names the time since the start, so a slow CI run says where
# its minutes went.
step() { echo "== $* ($((SECONDS / 60)) min $((SECONDS % 60)) s)"; }

step "set-up (installs what this machine lacks)"
bash scripts/setup.sh

# GPU tests use Vulkan (lavapipe on machines without a GPU); naming the
# backend skips wgpu's GL probing. A GPU test without an adapter fails.
export WGPU_BACKEND="${WGPU_BACKEND:-vulkan}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

step "formatting"
cargo fmt --all -- --check

step "clippy"
cargo clippy --all-targets -- -D warnings

step "the crates' modules import each other without circles"
python3 scripts/check_imports.py

step "stepscope-core builds for the browser (wasm32)"
cargo build -p stepscope-core --target wasm32-unknown-unknown

step "unit and integration tests"
cargo test --workspace

# Python from the repo's virtual environment (scripts/setup.sh); the e2e
# runs exported scripts with it too.
export STEPSCOPE_PYTHON="$PWD/.venv/bin/python"
# The checks run the CLI that `cargo test` just built (a `cargo build -p
# stepscope-cli` of its own would compile it again: the workspace's
# features differ from the CLI's alone).
export STEPSCOPE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/stepscope"
test -x "$STEPSCOPE_BIN"

step "checkpoints open in Python (safetensors.numpy)"
"$STEPSCOPE_PYTHON" scripts/check_checkpoint.py

step "TensorBoard event files open in TensorBoard's reader, equal to the metrics log"
"$STEPSCOPE_PYTHON" scripts/check_tensorboard.py

step "traces nest and add up, and Holistic Trace Analysis reads the GPU engine's (lavapipe)"
"$STEPSCOPE_PYTHON" scripts/check_trace.py

step "PyTorch for the export checks (installed into .venv if missing)"
bash scripts/setup.sh torch

step "exported PyTorch scripts continue runs as Stepscope does (torch, CPU)"
"$STEPSCOPE_PYTHON" scripts/check_pytorch_export.py

step "exported scripts under torchrun: 2 processes (gloo) equal 1, checkpoints come back into Stepscope"
"$STEPSCOPE_PYTHON" scripts/check_pytorch_torchrun.py

step "browser tests: kernels, the GPU engine and the page's components in headless Chromium (WebGPU)"
WASM_BINDGEN_TEST_TIMEOUT=180 cargo test --target wasm32-unknown-unknown -p stepscope-browser-tests

step "the page: release build with trunk (offline; the installed wasm-bindgen and wasm-opt)"
export PATH="$HOME/.cargo/bin:$PWD/tests/e2e/node_modules/.bin:$PATH"
export TRUNK_SKIP_VERSION_CHECK=true TRUNK_OFFLINE=true
trunk build --release
# Two modules: the page and its training worker (model/host), each held to
# the 2 MB-gzipped budget.
for wasm in dist/*.wasm; do
  echo "$wasm: $(wc -c < "$wasm") bytes, $(gzip -9 -c "$wasm" | wc -c) bytes gzipped (limit 2 MB gzipped)"
  test "$(gzip -9 -c "$wasm" | wc -c)" -lt 2000000
done
test "$(ls dist/*.wasm | wc -l)" -eq 2

step "end-to-end: the built page in headless Chromium (WebGPU on its software adapter)"
# One file per feature (harness.mjs is what they share), one after another.
(cd tests/e2e && node --test --test-concurrency=1 *.test.mjs)

step "browser benchmark smoke run: Stepscope and TensorFlow.js each train W1 briefly (no speed asserted; bench/run.mjs)"
(cd tests/e2e && node bench/run.mjs --quick)

step "conv benchmark smoke run: both engines and TensorFlow.js each train the MNIST conv net briefly (bench/conv.mjs)"
(cd tests/e2e && node bench/conv.mjs --quick)
step "done"
