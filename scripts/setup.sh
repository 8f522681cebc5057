#!/usr/bin/env bash
# Installs what Stepscope's build and tests need, skipping what is present.
# Safe to run again and again; run by scripts/test.sh and .ci/run.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

# Rust's wasm32 target: stepscope-core must build for the browser.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi

# Python with numpy and safetensors: the checkpoint interoperability check
# opens our files as PyTorch users would (safetensors.numpy.load_file).
if ! python3 -c 'import numpy, safetensors' >/dev/null 2>&1; then
  python3 -m pip install --quiet numpy safetensors
fi

# A Vulkan driver for the GPU tests. CI machines have no GPU: Mesa's
# lavapipe runs Vulkan on the CPU, and the GPU tests run there.
if ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi
