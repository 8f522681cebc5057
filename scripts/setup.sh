#!/usr/bin/env bash
# Installs what Stepscope's build, page and tests need, skipping what is
# present. Safe to run again and again.
#   bash scripts/setup.sh        what the tests need (the test command runs this)
#   bash scripts/setup.sh web    only what serving the page needs
#   bash scripts/setup.sh torch  PyTorch in .venv, for the export checks (the
#                                test command runs this just before them)
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"

have() { command -v "$1" >/dev/null 2>&1; }
export PATH="$HOME/.cargo/bin:$PATH"

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# --- the page: wasm32 target, trunk, wasm-bindgen CLI, wasm-opt ----------
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
# trunk 0.22 declares a newer Rust than the machine's; it builds and works
# with --ignore-rust-version (../shared/TOOLCHAIN.md).
if ! trunk --version 2>/dev/null | grep -q '0\.22\.1'; then
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install trunk --version 0.22.1 --locked --ignore-rust-version
fi
# The CLI must equal the wasm-bindgen crate in Cargo.lock (read from there,
# the one place the version is written); trunk finds it on PATH and, like
# the scripts run it (offline), never downloads its own.
wasm_bindgen_version=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $wasm_bindgen_version"; then
  cargo install wasm-bindgen-cli --version "$wasm_bindgen_version"
fi
# wasm-opt from npm's binaryen (Debian's is too old), and playwright-core
# for the end-to-end test; both pinned by tests/e2e/package-lock.json.
if [ ! -x tests/e2e/node_modules/.bin/wasm-opt ] || [ ! -d tests/e2e/node_modules/playwright-core ] \
  || [ ! -d tests/e2e/node_modules/@tensorflow/tfjs-core ] || [ ! -d tests/e2e/node_modules/esbuild ]; then
  (cd tests/e2e && npm ci --no-audit --no-fund --silent)
fi
cargo fetch --quiet

if [ "$what" = web ]; then exit 0; fi

# Python with numpy and safetensors: the checkpoint interoperability check
# opens our files as PyTorch users would (safetensors.numpy.load_file).
# They go into a virtual environment in the repo (.venv): Debian 12 and
# Ubuntu 24.04 refuse pip installs into the system interpreter (PEP 668).
# It sees the system's packages, so a machine that has them installs nothing.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv --system-site-packages .venv 2>/dev/null || {
    rm -rf .venv
    apt_install python3-venv
    python3 -m venv --system-site-packages .venv
  }
fi

# PyTorch (a wheel of about 3 GB with its CUDA libraries) only for the
# checks that run exported scripts.
if [ "$what" = torch ]; then
  if ! .venv/bin/python -c 'import numpy, safetensors, torch' >/dev/null 2>&1; then
    .venv/bin/python -m pip install --no-cache-dir --quiet numpy safetensors torch==2.15.0
  fi
  exit 0
fi

# --- tests ---------------------------------------------------------------
# Chromium and its driver for the browser tests; Mesa's lavapipe (Vulkan on
# the CPU) for the native GPU tests, since CI machines have no GPU.
apt_install chromium chromium-driver mesa-vulkan-drivers libvulkan1

# TensorBoard's own event reader checks the event files the CLI writes;
# Holistic Trace Analysis the traces.
if ! .venv/bin/python -c 'import numpy, safetensors, tensorboard' >/dev/null 2>&1; then
  .venv/bin/python -m pip install --no-cache-dir --quiet numpy safetensors tensorboard==2.21.0
fi
# HTA with only what it imports (its declared requirements pull in
# JupyterLab and pytest; it imports psutil without declaring it). HTA 0.5.0
# fails inside its own code under pandas 3 on a trace of a few dozen steps
# (pandas 2 reads it), so pandas is pinned, and a machine that has another
# pandas gets this one.
hta_pandas=2.3.3
if ! .venv/bin/python -c 'import hta.trace_analysis' >/dev/null 2>&1 \
  || [ "$(.venv/bin/python -c 'import pandas; print(pandas.__version__)' 2>/dev/null)" != "$hta_pandas" ]; then
  .venv/bin/python -m pip install --no-cache-dir --quiet --no-deps HolisticTraceAnalysis==0.5.0
  .venv/bin/python -m pip install --no-cache-dir --quiet "pandas==$hta_pandas" plotly networkx psutil pyyaml
fi
