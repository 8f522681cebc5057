#!/usr/bin/env bash
# Runs every Stepscope test. On a fresh machine it first installs what is
# missing (scripts/setup.sh). This is the README's test command; CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

echo "== formatting"
cargo fmt --all -- --check

echo "== clippy"
cargo clippy --all-targets -- -D warnings

echo "== stepscope-core builds for the browser (wasm32)"
cargo build -p stepscope-core --target wasm32-unknown-unknown

echo "== unit and integration tests"
cargo test --workspace

echo "== checkpoints open in Python (safetensors.numpy)"
python3 scripts/check_checkpoint.py
