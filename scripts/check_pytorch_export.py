#!/usr/bin/env python3
"""Checks `stepscope export-pytorch` against real PyTorch (CPU).

For each experiment below: train a few steps with the native CLI and save a
checkpoint; export the PyTorch script and the training rows (a built-in's, or
those the run split from its CSV); import the script and load the checkpoint with it; then check
  (a) the script's model gives Stepscope's outputs (`stepscope predict`) on
      the training rows,
  (b) the optimizer state torch holds is the checkpoint's, bit for bit, and
      the scheduler's lr is the one Stepscope uses for the next step,
  (c) K more steps in PyTorch give Stepscope's losses, gradient norms and
      learning rates step by step, and its parameters and optimizer state
      after the K steps (`stepscope train --init` from the same checkpoint).
One script is also run as a program, end to end.

Tolerances (see docs/export.md). Stepscope's f32 loops and PyTorch's kernels
compute the same operations but sum in different orders (matmul blocking,
vectorised reductions), and torch fuses some multiply-adds; each output is
therefore off by a few float32 ulps of the values summed, not of the result.
  (a) |torch - stepscope| <= 1e-5 + 1e-5 |stepscope|: the outputs here are
      O(1-10) sums of a few dozen products, so ulp-level error is ~1e-6.
  (c) the same bound per step for loss, gradient norm, every parameter and
      every optimizer moment after K steps: rounding differences feed back
      through the updates, but over 25 steps they stay near 1e-6 (the
      largest relative error seen is printed). The lr is compared exactly:
      both sides compute it in float64 with the same formula.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The transformer cases' text: the start of Tiny Shakespeare.
with open(os.path.join(ROOT, "core", "data", "tinyshakespeare.txt"), encoding="utf-8") as _f:
    TEXT = _f.read(3000)
# The CLI: `STEPSCOPE_BIN` where the caller built it (scripts/test.sh passes the
# binary its `cargo test` built), else built here.
BIN = os.environ.get("STEPSCOPE_BIN") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "stepscope")
BEFORE, AFTER = 12, 25  # steps before the checkpoint, steps continued from it
ATOL = RTOL = 1e-5


def layers(*spec):
    return [{"units": units, "activation": act} for units, act in spec]


CASES = {
    # The page's default run, with the warmup ending during the continuation.
    "adamw_spiral_shuffled": {
        "seed": 7, "model": {"inputs": 2, "layers": layers((16, "tanh"), (16, "tanh"), (1, "linear"))},
        "loss": "bce_with_logits",
        "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 20, "total_steps": 60, "min_lr": 0.0},
        "batch_size": 32, "clip_grad_norm": 0.25,
        "data": {"source": "spiral", "samples": 300, "noise": 0.1, "train_fraction": 0.8, "shuffle": True}},
    "adam_l2_regression_csv_accumulation": {
        "seed": 3, "model": {"inputs": 3, "layers": layers((12, "gelu_tanh"), (10, "silu"), (2, "linear"))},
        "loss": "mse",
        "optimizer": {"kind": "adam", "lr": 0.005, "betas": [0.85, 0.99], "eps": 1e-7, "weight_decay": 0.001},
        "schedule": {"kind": "warmup_linear", "warmup_steps": 15, "total_steps": 40, "min_lr": 0.0005},
        "batch_size": 10, "grad_accumulation": 3, "clip_grad_norm": 0.28,
        "regularization": {"kind": "l2", "rate": 0.01},
        "data": {"source": "csv", "shuffle": False}},
    "sgd_nesterov_l1_cross_entropy_csv": {
        "seed": 5, "model": {"inputs": 2, "layers": layers((12, "leaky_relu"), (8, "sigmoid"), (3, "linear"))},
        "loss": "cross_entropy",
        "optimizer": {"kind": "sgd", "lr": 0.2, "momentum": 0.9, "nesterov": True, "weight_decay": 0.001},
        "batch_size": 16, "clip_grad_norm": 0.35, "regularization": {"kind": "l1", "rate": 0.001},
        "data": {"source": "csv", "shuffle": True}},
    "sgd_dampened_regression_builtin": {
        "seed": 9, "model": {"inputs": 2, "layers": layers((10, "relu"), (1, "linear"))},
        "loss": "mse",
        "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.8, "dampening": 0.3},
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 5, "total_steps": 30, "min_lr": 0.001},
        "batch_size": 20,
        "data": {"source": "reg_plane", "samples": 120, "noise": 0.2, "train_fraction": 0.5}},
    "sgd_plain_single_layer": {
        "seed": 2, "model": {"inputs": 3, "layers": layers((1, "linear"))},
        "loss": "bce_with_logits", "optimizer": {"kind": "sgd", "lr": 0.3},
        "batch_size": 8,
        "data": {"source": "xor", "samples": 100, "train_fraction": 0.7, "features": ["x1", "x2", "x1_x2"],
                 "shuffle": False}},
    "adamw_spiral3_three_classes": {
        "seed": 12, "model": {"inputs": 2, "layers": layers((16, "relu"), (3, "linear"))},
        "loss": "cross_entropy", "optimizer": {"kind": "adamw", "lr": 0.01},
        "batch_size": 24, "clip_grad_norm": 0.5,
        "data": {"source": "spiral3", "samples": 150, "noise": 0.1, "train_fraction": 0.8}},
    "adam_digits": {
        "seed": 1, "model": {"inputs": 64, "layers": layers((16, "relu"), (10, "linear"))},
        "loss": "cross_entropy", "optimizer": {"kind": "adam", "lr": 0.01},
        "batch_size": 32, "clip_grad_norm": 0.6,
        "data": {"source": "digits", "train_fraction": 0.8}},
    # A conv net (issue 41) on the 8x8 digits: both pools, padding, a stride,
    # L2 counting the conv kernels as weights, clipping.
    "adam_conv_digits_l2": {
        "seed": 14, "model": {"input_shape": [1, 8, 8], "layers": [
            {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"kind": "conv2d", "filters": 6, "kernel": 2, "stride": 2, "activation": "tanh"},
            {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
            {"units": 10, "activation": "linear"}]},
        "loss": "cross_entropy", "optimizer": {"kind": "adam", "lr": 0.01},
        "batch_size": 16, "clip_grad_norm": 0.3, "regularization": {"kind": "l2", "rate": 0.001},
        "data": {"source": "digits", "train_fraction": 0.8}},
    # Augmented images (shifts and Simard's elastic distortion, issue 43) made
    # by two DataLoader workers in the program run: the same images as
    # Stepscope's, bit for bit (core/src/data/augment.rs).
    "sgd_conv_digits_augmented": {
        "seed": 21, "model": {"input_shape": [1, 8, 8], "layers": [
            {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"units": 10, "activation": "linear"}]},
        "loss": "cross_entropy", "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9},
        "batch_size": 16,
        "data": {"source": "digits", "train_fraction": 0.8, "num_workers": 2, "prefetch_factor": 3,
                 "augment": {"shift": 1, "elastic": {"alpha": 3.0, "sigma": 1.5}}}},
    # A CSV with a test split: the script trains on the split's training rows.
    "adam_csv_split_shuffled": {
        "seed": 13, "model": {"inputs": 2, "layers": layers((8, "tanh"), (1, "linear"))},
        "loss": "bce_with_logits", "optimizer": {"kind": "adam", "lr": 0.02},
        "batch_size": 8,
        "data": {"source": "csv", "train_fraction": 0.6, "shuffle": True}},
    "lamb_csv_accumulation": {
        "seed": 4, "model": {"inputs": 2, "layers": layers((16, "tanh"), (8, "relu"), (1, "linear"))},
        "loss": "bce_with_logits",
        "optimizer": {"kind": "lamb", "lr": 0.02, "weight_decay": 0.01},
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 10, "total_steps": 50},
        "batch_size": 12, "grad_accumulation": 2, "clip_grad_norm": 0.2,
        "data": {"source": "csv"}},
    # The transformer: untied with q/k LayerNorm and z-loss, L1 and
    # accumulation; tied with nanoGPT's AdamW (decay groups) on the text.
    "gpt_untied_qk_layernorm_z_loss_sgd": {
        "seed": 21, "model": {"kind": "gpt", "vocab_size": len(set(TEXT)), "context": 8, "embed": 12, "heads": 3,
                              "blocks": 2, "tie_embeddings": False, "qk_layernorm": True, "mlp_ratio": 2},
        "loss": "cross_entropy", "z_loss": 0.001,
        "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
        "batch_size": 4, "grad_accumulation": 2, "clip_grad_norm": 0.5, "regularization": {"kind": "l1", "rate": 0.0001},
        "data": {"source": "text", "train_fraction": 0.8}},
    "gpt_nanogpt_adamw": {
        "seed": 22, "model": {"kind": "gpt", "vocab_size": len(set(TEXT)), "context": 16, "embed": 16, "heads": 4,
                              "blocks": 2},
        "loss": "cross_entropy",
        "optimizer": {"kind": "adamw", "lr": 0.003, "betas": [0.9, 0.99], "weight_decay": 0.1},
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 5, "total_steps": 60, "min_lr": 0.0003},
        "batch_size": 6, "clip_grad_norm": 1.0,
        "data": {"source": "text"}},
    "adamw_defaults_cross_entropy_builtin": {
        "seed": 8, "model": {"inputs": 4, "layers": layers((8, "silu"), (2, "linear"))},
        "loss": "cross_entropy", "optimizer": {"kind": "adamw"},
        "batch_size": 25,
        "data": {"source": "gauss", "samples": 200, "noise": 0.3, "features": ["x1", "x2", "sin_x1", "x2_sq"]}},
}

# Continued from a step-0 checkpoint (unshuffled: Stepscope's fresh run and
# the hand-made checkpoint then serve the same rows).
FROM_STEP_ZERO = {
    "from_step_0_sgd_dampened": {
        "seed": 6, "model": {"inputs": 2, "layers": layers((8, "tanh"), (1, "linear"))},
        "loss": "mse", "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9, "dampening": 0.5},
        "batch_size": 16, "data": {"source": "csv", "shuffle": False}},
    "from_step_0_adam": {
        "seed": 6, "model": {"inputs": 2, "layers": layers((8, "relu"), (1, "linear"))},
        "loss": "bce_with_logits", "optimizer": {"kind": "adam", "lr": 0.01},
        "schedule": {"kind": "warmup_linear", "warmup_steps": 5, "total_steps": 30},
        "batch_size": 16, "data": {"source": "csv", "shuffle": False}},
}


def f32_text(values):
    """Decimals that are exactly float32 values, so both parsers agree."""
    return [repr(float(v)) for v in np.asarray(values, dtype=np.float32)]


def csv_for(experiment, rows, rng):
    """Random training rows for a "source": "csv" experiment."""
    inputs = rng.uniform(-2, 2, size=(rows, experiment["model"]["inputs"])).astype(np.float32)
    outputs = experiment["model"]["layers"][-1]["units"]
    if experiment["loss"] == "cross_entropy":
        targets = (np.argmax(inputs[:, :1] * np.arange(outputs) - np.arange(outputs) ** 2 / 4, axis=1))[:, None]
    elif experiment["loss"] == "bce_with_logits":
        targets = (inputs[:, :1] * inputs[:, 1:2] > 0).astype(np.float32)
    else:
        targets = np.sin(inputs[:, :outputs]) + 0.1 * rng.standard_normal((rows, outputs))
    names = [f"x{i + 1}" for i in range(inputs.shape[1])]
    names += ["y"] if targets.shape[1] == 1 else [f"y{j}" for j in range(targets.shape[1])]
    lines = [",".join(names)] + [",".join(f32_text(x) + f32_text(y)) for x, y in zip(inputs, targets)]
    return "\n".join(lines) + "\n"


def stepscope(*args, cwd):
    result = subprocess.run([BIN, *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"stepscope {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def import_script(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worst(actual, expected):
    """Largest |a - e| / (ATOL + RTOL |e|), the share of the tolerance used
    (<= 1 passes), and the largest |a - e|, for the report."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    diff = np.abs(actual - expected)
    return float(np.max(diff / (ATOL + RTOL * np.abs(expected)), initial=0.0)), float(np.max(diff, initial=0.0))


# A transformer's key bias (the middle third of c_attn.bias) and, with
# q/k LayerNorm, k_ln.bias have an exact gradient of zero: a constant added
# to every key of a query shifts all its scores alike. Their float gradients
# are rounding noise, different in every implementation, which Adam's
# normalisation turns into steps of the learning rate's size. They are held
# to an absolute tolerance instead (with their optimizer moments), as big as
# a few such steps; every other element keeps the tolerance above.
KEY_BIAS_ATOL = 1e-3


def key_bias(name, value):
    """The elements of tensor `name` whose exact gradient is zero, as a
    boolean mask of `value`'s shape (all False for any other tensor)."""
    mask = np.zeros(np.shape(value), dtype=bool)
    if ".attn.k_ln.bias" in name:
        mask[:] = True
    elif ".attn.c_attn.bias" in name:
        third = mask.shape[0] // 3
        mask[third:2 * third] = True
    return mask


def worst_tensor(name, actual, expected):
    """`worst`, with the key bias's elements held to KEY_BIAS_ATOL."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    mask = key_bias(name, expected)
    ratio, diff = worst(actual[~mask], expected[~mask])
    if mask.any():
        noise = float(np.max(np.abs(actual[mask] - expected[mask])))
        assert noise <= KEY_BIAS_ATOL, f"{name}: the key bias moved {noise} apart (at most {KEY_BIAS_ATOL})"
    return ratio, diff


def write_inputs(experiment, tmp, name):
    """The config, and for "source": "csv" the data; returns train's --data args."""
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(experiment, f)
    if experiment["data"]["source"] == "text":
        with open(os.path.join(tmp, "text.txt"), "w", encoding="utf-8") as f:
            f.write(TEXT)
        return ["--data", "text.txt"]
    if experiment["data"]["source"] != "csv":
        return []
    with open(os.path.join(tmp, "data.csv"), "w") as f:
        f.write(csv_for(experiment, 47, np.random.default_rng(len(name))))
    return ["--data", "data.csv"]


def check(name, experiment, tmp, report):
    """Stepscope trains BEFORE steps and saves; the script loads that
    checkpoint; both continue AFTER steps."""
    data = write_inputs(experiment, tmp, name)
    stepscope("train", "--config", "config.json", *data, "--steps", str(BEFORE), "--out", "ck.safetensors", cwd=tmp)
    # The training rows as Stepscope writes them: a built-in's generated
    # rows, or those the run split from its CSV (all of it without a split).
    stepscope("export-pytorch", "ck.safetensors", "--out", "script.py", "--data-out", "rows.csv", *data, cwd=tmp)
    stepscope("train", "--init", "ck.safetensors", *data, "--steps", str(AFTER), "--out", "after.safetensors",
              "--metrics", "after.jsonl", cwd=tmp)
    if experiment["model"].get("kind") != "gpt":  # predict is the MLP's
        stepscope("predict", "ck.safetensors", "--inputs", "rows.csv", "--out", "predicted.csv", cwd=tmp)
    compare(name, experiment, tmp, BEFORE, report)


def check_from_step_zero(name, experiment, tmp, report):
    """A run that has not stepped yet (the page downloads it as
    stepscope-step0.safetensors) stores zero optimizer state. The script must
    start as torch starts, which for SGD with dampening is not the same as
    loading the zeros: its first momentum buffer is the gradient itself.
    Stepscope's side is a fresh run from the same weights."""
    data = write_inputs(experiment, tmp, name)
    stepscope("train", "--config", "config.json", *data, "--steps", "1", "--out", "one.safetensors", cwd=tmp)
    stepscope("export-pytorch", "one.safetensors", "--out", "script.py", "--data-out", "rows.csv", *data, cwd=tmp)
    tensors = load_file(os.path.join(tmp, "one.safetensors"))
    with safe_open(os.path.join(tmp, "one.safetensors"), framework="numpy") as f:
        meta = f.metadata()
    weights = {k: v for k, v in tensors.items() if k.startswith("layers.")}
    save_file(weights, os.path.join(tmp, "weights.safetensors"))
    # The step-0 checkpoint as the page writes it (its digest is left stale:
    # only Stepscope checks it, and Stepscope does not read this file).
    zero = {k: v if k.startswith("layers.") else np.zeros_like(v) for k, v in tensors.items()}
    meta.update(step="0", data_position=json.dumps({"rows_consumed": 0, "epoch": 0}))
    save_file(zero, os.path.join(tmp, "ck.safetensors"), metadata=meta)
    stepscope("train", "--config", "config.json", *data, "--init", "weights.safetensors", "--steps", str(AFTER),
              "--out", "after.safetensors", "--metrics", "after.jsonl", cwd=tmp)
    compare(name, experiment, tmp, 0, report)


def compare(name, experiment, tmp, start, report):
    """(a), (b) and (c) of the module's docstring for the checkpoint
    tmp/ck.safetensors at step `start`."""
    script = import_script(os.path.join(tmp, "script.py"), f"export_{name}")
    model = script.Net()
    optimizer = script.make_optimizer(model)
    step, position, rng_state = script.load_checkpoint(os.path.join(tmp, "ck.safetensors"), model, optimizer)
    scheduler = script.make_scheduler(optimizer, step)
    inputs, targets = script.read_csv(os.path.join(tmp, "rows.csv"))
    assert step == start, step
    used, outputs_abs = {"outputs": float("nan"), "steps": 0.0, "state": 0.0}, float("nan")

    # (a) outputs on the training rows (the MLP's: `stepscope predict`).
    if start > 0 and experiment["model"].get("kind") != "gpt":
        predicted = np.loadtxt(os.path.join(tmp, "predicted.csv"), delimiter=",", skiprows=1, ndmin=2)
        with torch.no_grad():
            outputs = model(inputs).numpy()
        used["outputs"], outputs_abs = worst(outputs, predicted)
        assert used["outputs"] <= 1, f"{name}: outputs differ from Stepscope's by {used['outputs']} x the tolerance"

    # (b) parameters and optimizer state as stored, and the next step's lr.
    stored = load_file(os.path.join(tmp, "ck.safetensors"))
    named = dict(model.named_parameters())
    for key, value in stored.items():
        if not key.startswith("optimizer."):
            assert np.array_equal(named[key].detach().numpy(), value), f"{name}: {key} loaded wrong"
        elif start == 0:
            assert not optimizer.state, f"{name}: a step-0 checkpoint's zeros were loaded"
        else:
            param, buffer = key[len("optimizer."):].rsplit(".", 1)
            state = optimizer.state[named[param]]
            assert np.array_equal(state[buffer].numpy(), value), f"{name}: {key} loaded wrong"
            assert "step" not in state or state["step"].item() == start, f"{name}: {key} step"
    metrics = [json.loads(line) for line in open(os.path.join(tmp, "after.jsonl"))]
    assert optimizer.param_groups[0]["lr"] == metrics[0]["lr"], (name, optimizer.param_groups[0]["lr"], metrics[0])

    # (c) AFTER more steps, step by step.
    order = script.RowOrder(len(inputs), position, rng_state)
    clipped = sum(m["clipped"] for m in metrics)
    assert clipped > 0 or "clip_grad_norm" not in experiment, f"{name}: clipping never acted"
    for m in metrics:
        stats = script.train_step(model, optimizer, scheduler, script.next_batches(order, inputs, targets))
        assert stats["lr"] == m["lr"], f"{name} step {m['step']}: lr {stats['lr']} vs {m['lr']}"
        for key in ("loss", "grad_norm"):
            ratio, _ = worst(stats[key], m[key])
            used["steps"] = max(used["steps"], ratio)
            assert ratio <= 1, f"{name} step {m['step']}: {key} {stats[key]} vs Stepscope's {m[key]}"
    after = load_file(os.path.join(tmp, "after.safetensors"))
    state_abs = 0.0
    for key, value in after.items():
        if key.startswith("optimizer."):
            param, buffer = key[len("optimizer."):].rsplit(".", 1)
            held = optimizer.state[named[param]][buffer]
        else:
            held = named[key]
        ratio, diff = worst_tensor(key, held.detach().numpy(), value)
        used["state"], state_abs = max(used["state"], ratio), max(state_abs, diff)
        assert ratio <= 1, f"{name}: {key} after {AFTER} steps differs by {ratio} x the tolerance"
    if experiment["model"].get("kind") == "gpt":
        # nanoGPT's way of saving, whose tied head is `lm_head.weight` alone,
        # gives Stepscope its initial weights.
        from safetensors.torch import save_model
        save_model(model, os.path.join(tmp, "saved.safetensors"))
        stepscope("train", "--config", "config.json", "--data", "text.txt", "--init", "saved.safetensors",
                  "--steps", "1", cwd=tmp)
    report.append((name, used, outputs_abs, state_abs, clipped))


def check_profile(folder, ranks):
    """A --profile folder: one torch.profiler (Kineto) trace per rank, each
    with its three active steps as ProfilerStep#N and, nested in each, the
    data, forward, backward and optimizer annotations (and, under torchrun,
    the losses' communication)."""
    files = sorted(os.listdir(folder))
    assert [f.split(".")[0] for f in files] == [f"rank{r}" for r in range(ranks)], files
    for name in files:
        assert name.endswith(".pt.trace.json"), name
        events = json.load(open(os.path.join(folder, name)))["traceEvents"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        assert len(steps) == 3, [e["name"] for e in steps]
        for s in steps:
            inside = {e["name"] for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"
                      and s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]}
            want = {"enumerate(DataLoader)#Stepscope.__next__", "forward", "backward", "optimizer"}
            if ranks > 1:
                want.add("communication")
            assert want <= inside, (name, s["name"], inside)


def run_as_program(tmp):
    """The last case's script as a user runs it: checkpoint found by the
    page's download name, training rows from the CSV, weights written."""
    os.rename(os.path.join(tmp, "ck.safetensors"), os.path.join(tmp, f"stepscope-step{BEFORE}.safetensors"))
    out = subprocess.run([sys.executable, "script.py", "--data", "rows.csv", "--steps", str(AFTER),
                          "--out", "continued.safetensors", "--metrics", "program.jsonl", "--tensorboard", "tb",
                          "--histogram-every", "2", "--profile", "prof"], cwd=tmp, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"step {BEFORE}," in out.stdout, out.stdout
    # Its TensorBoard events, through TensorBoard's reader: the CLI's tags,
    # the metrics log's steps and losses, every parameter's histograms.
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(os.path.join(tmp, "tb"), size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
    acc.Reload()
    logged = [json.loads(line) for line in open(os.path.join(tmp, "program.jsonl"))]
    # The phases, in the CLI's metrics format (one process: no communication).
    phases = ("data_ms", "forward_ms", "backward_ms", "optimizer_ms", "communication_ms", "checkpoint_ms", "logging_ms")
    for m in logged:
        assert all(np.isfinite(m[k]) and m[k] >= 0 for k in phases), m
        assert m["forward_ms"] > 0 and m["backward_ms"] > 0 and m["optimizer_ms"] > 0, m
        assert m["communication_ms"] == 0 and m["timing"] == "cpu", m
    assert {f"phase/{k}" for k in phases if k != "logging_ms"} <= set(acc.Tags()["scalars"])
    check_profile(os.path.join(tmp, "prof"), ranks=1)
    scalars = acc.Scalars("loss/train")
    assert [(e.step, np.float32(e.value)) for e in scalars] == [(m["step"], np.float32(m["loss"])) for m in logged]
    assert {"grad_norm/norm", "learning_rate", "speed/steps_per_second"} <= set(acc.Tags()["scalars"])
    names = [name for name in load_file(os.path.join(tmp, "after.safetensors")) if name.startswith("layers.")
             and name.count(".") == 2]
    assert {f"weights/{n}" for n in names} <= set(acc.Tags()["histograms"]), acc.Tags()["histograms"]
    weights = load_file(os.path.join(tmp, "continued.safetensors"))
    after = load_file(os.path.join(tmp, "after.safetensors"))
    for key, value in weights.items():
        ratio, _ = worst(value, after[key])
        assert ratio <= 1, f"program run: {key} differs by {ratio} x the tolerance"
    # Stepscope takes the weights back.
    data = ["--data", "data.csv"] if os.path.exists(os.path.join(tmp, "data.csv")) else []
    stepscope("train", "--config", "config.json", *data, "--init", "continued.safetensors", "--steps", "1", cwd=tmp)


def check_plain_loop_profile(tmp):
    """A torch.profiler trace of a plain training loop that nobody
    annotated (a DataLoader, a model, loss.backward(), AdamW), as a user's
    own script writes one: `stepscope open` finds its steps and splits each
    into data, forward, backward and optimizer from PyTorch's op names."""
    data = torch.utils.data.TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    folder = os.path.join(tmp, "plain")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(folder)) as prof:
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            prof.step()
    traces = [os.path.join(folder, f) for f in os.listdir(folder)]
    assert len(traces) == 1, traces
    out = stepscope("open", traces[0], cwd=tmp)
    assert out.startswith("torch-trace: 1 rank, 4 steps"), out
    for phase in ("data", "forward", "backward", "optimizer"):
        assert re.search(rf"^  {phase} +[\d.]+ ms", out, re.M), f"no {phase} in\n{out}"
    print("a plain loop's torch.profiler trace opens with its phases:")
    print("\n".join("  " + line for line in out.splitlines()[1:7]))


def main():
    if not os.environ.get("STEPSCOPE_BIN"):
        subprocess.run(["cargo", "build", "--quiet", "-p", "stepscope-cli"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        check_plain_loop_profile(tmp)
    torch.set_num_threads(1)
    report = []
    for name, experiment in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            check(name, experiment, tmp, report)
            if name == list(CASES)[-1] or "num_workers" in experiment["data"]:
                run_as_program(tmp)
    for name, experiment in FROM_STEP_ZERO.items():
        with tempfile.TemporaryDirectory() as tmp:
            check_from_step_zero(name, experiment, tmp, report)
    print(f"share of the tolerance used by (a) outputs, (c) per-step loss and grad_norm, (c) parameters and "
          f"optimizer state after {AFTER} steps; largest |difference| of (a) and of the state; steps clipped")
    for name, used, outputs_abs, state_abs, clipped in report:
        print(f"  {name:<38} {used['outputs']:5.2f} {used['steps']:5.2f} {used['state']:5.2f}"
              f"  {outputs_abs:8.1e} {state_abs:8.1e}  {clipped:2d}/{AFTER}")
    print("  (from_step_0: no outputs compared; `stepscope predict` refuses the hand-made file's stale digest)")
    print(f"ok: {len(report)} exported scripts reproduce Stepscope in PyTorch {torch.__version__} "
          f"within {ATOL:g} + {RTOL:g}|x|")


if __name__ == "__main__":
    sys.exit(main())
