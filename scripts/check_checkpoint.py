#!/usr/bin/env python3
"""Trains a few steps with the native CLI, then opens the checkpoint as a
PyTorch user would, with safetensors.numpy.load_file: checks tensor names,
shapes and dtypes, the metadata, and that the weights run as a model in
numpy (y = x W^T + b per layer)."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The CLI: `STEPSCOPE_BIN` where the caller built it (scripts/test.sh passes the
# binary its `cargo test` built), else through cargo.
STEPSCOPE = ([os.environ["STEPSCOPE_BIN"]] if os.environ.get("STEPSCOPE_BIN")
             else ["cargo", "run", "--quiet", "-p", "stepscope-cli", "--"])
CONFIG = os.path.join(ROOT, "examples", "spiral.json")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.safetensors")
        subprocess.run(
            [*STEPSCOPE, "train",
             "--config", CONFIG, "--steps", "50", "--out", out],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        tensors = load_file(out)
        with safe_open(out, framework="numpy") as f:
            meta = f.metadata()

    experiment = json.loads(meta["experiment"])
    assert meta["format"] == "stepscope-checkpoint/2", meta["format"]
    assert meta["step"] == "50", meta["step"]
    assert meta["digest"].startswith("sha256:")
    widths = [experiment["model"]["inputs"]] + [l["units"] for l in experiment["model"]["layers"]]
    expected = {}
    for i, (fan_in, units) in enumerate(zip(widths, widths[1:])):
        for name, shape in ((f"layers.{i}.weight", (units, fan_in)), (f"layers.{i}.bias", (units,))):
            expected[name] = shape
            for suffix in ("exp_avg", "exp_avg_sq"):  # AdamW keeps both moments
                expected[f"optimizer.{name}.{suffix}"] = shape
    assert set(tensors) == set(expected), sorted(set(tensors) ^ set(expected))
    for name, shape in expected.items():
        t = tensors[name]
        assert t.shape == shape and t.dtype == np.float32, (name, t.shape, t.dtype)
        assert np.isfinite(t).all(), name

    # The weights form a working model in numpy: outputs are finite and vary.
    x = np.random.default_rng(0).uniform(-6, 6, size=(64, 2)).astype(np.float32)
    h = x
    for i, layer in enumerate(experiment["model"]["layers"]):
        h = h @ tensors[f"layers.{i}.weight"].T + tensors[f"layers.{i}.bias"]
        if layer["activation"] == "tanh":
            h = np.tanh(h)
    assert np.isfinite(h).all() and h.std() > 0
    print(f"ok: {len(tensors)} tensors with PyTorch names and shapes, step {meta['step']}")


if __name__ == "__main__":
    sys.exit(main())
