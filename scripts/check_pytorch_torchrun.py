#!/usr/bin/env python3
"""Checks that an exported PyTorch script runs under torchrun and comes back.

For each experiment below, from a Stepscope checkpoint at step BEFORE:
  (a) the script continues AFTER steps in one process and in two processes
      under `torchrun` (DistributedDataParallel, gloo, CPU). Per step the lr
      is equal, and loss and gradient norm agree within the export check's
      tolerance (1e-5 + 1e-5 |x|); the checkpoints they write agree in every
      parameter and optimizer moment within it, and in step, data position
      and RNG exactly;
  (b) the two-process checkpoint is what Stepscope itself has after those
      steps (`stepscope train --init`), within the same tolerance, and
      `stepscope verify` (the page's "verify restore") accepts it;
  (c) round trip: Stepscope continues BACK steps from the two-process
      checkpoint and gets the losses, gradient norms and final state of a
      Stepscope run that never left, within the same tolerance.
The experiments make the split uneven (odd batch sizes, more rows on one
process), accumulate micro-batches (no_sync), clip (global norm), use LAMB
(per-tensor norms) and L1, shuffle across epochs, and train a transformer
and a conv net as well as MLPs.

Then Ctrl-C: a one-process run gets SIGINT, stops at a step boundary, exits
130 and leaves a checkpoint Stepscope loads, at the data position of the
steps it took.

Why the tolerance holds: one and two processes compute the same operations
on the same rows; two processes add each micro-batch's gradient in two
partial sums, so results differ by float32 rounding only.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_pytorch_export import ROOT, TEXT, layers, stepscope, worst, worst_tensor, write_inputs  # noqa: E402

BEFORE, AFTER, BACK = 12, 25, 12
PROCESSES = 2

CASES = {
    # The page's default shape; 25 rows split 12/13, two micro-batches.
    "adamw_spiral_uneven_accumulation": {
        "seed": 7, "model": {"inputs": 2, "layers": layers((16, "tanh"), (16, "tanh"), (1, "linear"))},
        "loss": "bce_with_logits",
        "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 20, "total_steps": 60, "min_lr": 0.0},
        "batch_size": 25, "grad_accumulation": 2, "clip_grad_norm": 0.25,
        "data": {"source": "spiral", "samples": 300, "noise": 0.1, "train_fraction": 0.8, "shuffle": True}},
    # LAMB's trust ratios need the whole gradient; 3 rows split 1/2.
    "lamb_l1_cross_entropy_csv": {
        "seed": 5, "model": {"inputs": 2, "layers": layers((12, "relu"), (3, "linear"))},
        "loss": "cross_entropy",
        "optimizer": {"kind": "lamb", "lr": 0.02, "weight_decay": 0.01},
        "batch_size": 3, "grad_accumulation": 3, "clip_grad_norm": 0.3,
        "regularization": {"kind": "l1", "rate": 0.001},
        "data": {"source": "csv", "shuffle": True}},
    # SGD with Nesterov momentum and MSE; 17 rows split 8/9.
    "sgd_nesterov_mse_builtin": {
        "seed": 9, "model": {"inputs": 2, "layers": layers((10, "silu"), (1, "linear"))},
        "loss": "mse",
        "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
        "batch_size": 17,
        "data": {"source": "reg_plane", "samples": 120, "noise": 0.2, "train_fraction": 0.5}},
    # The transformer: AdamW with nanoGPT's decay groups, q/k LayerNorm,
    # z-loss, an untied head; 5 windows split 2/3, two micro-batches.
    "gpt_adamw_qk_layernorm_uneven": {
        "seed": 23, "model": {"kind": "gpt", "vocab_size": len(set(TEXT)), "context": 8, "embed": 12, "heads": 2,
                              "blocks": 2, "tie_embeddings": False, "qk_layernorm": True},
        "loss": "cross_entropy", "z_loss": 0.0001,
        "optimizer": {"kind": "adamw", "lr": 0.003, "betas": [0.9, 0.99], "weight_decay": 0.1},
        "batch_size": 5, "grad_accumulation": 2, "clip_grad_norm": 1.0,
        "data": {"source": "text", "train_fraction": 0.9}},
    # A conv net on the digits as images (the MNIST net's kinds and
    # optimizer): conv, max pool, strided conv, average pool, dense;
    # 9 rows split 4/5, two micro-batches, clipped.
    "sgd_momentum_conv_digits_uneven": {
        "seed": 31, "model": {"input_shape": [1, 8, 8], "layers": [
            {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"kind": "conv2d", "filters": 6, "kernel": 2, "stride": 2, "activation": "tanh"},
            {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
            {"units": 10, "activation": "linear"}]},
        "loss": "cross_entropy",
        "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.001},
        "batch_size": 9, "grad_accumulation": 2, "clip_grad_norm": 1.0,
        "data": {"source": "digits", "train_fraction": 0.8, "shuffle": True}},
}

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def python(*args, cwd):
    result = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, env=ENV)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args[:6])}... failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


def torchrun(*args, cwd):
    # --standalone: a local rendezvous on a free port.
    return python("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(PROCESSES), *args, cwd=cwd)


def metadata(path):
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    return {key: meta[key] for key in ("step", "data_position", "rng_state", "experiment")}


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def same_steps(what, actual, expected):
    """Per step: the lr exactly, loss and gradient norm within tolerance."""
    assert len(actual) == len(expected), f"{what}: {len(actual)} steps against {len(expected)}"
    used = 0.0
    for a, e in zip(actual, expected):
        assert a["step"] == e["step"] and a["lr"] == e["lr"], f"{what}: step {e['step']}: {a} against {e}"
        for key in ("loss", "grad_norm"):
            ratio, _ = worst(a[key], e[key])
            assert ratio <= 1, f"{what}: step {e['step']}: {key} {a[key]} against {e[key]}"
            used = max(used, ratio)
    return used


def same_state(what, actual_path, expected_path):
    """Every tensor within tolerance; step, data position, RNG exactly."""
    assert metadata(actual_path) == metadata(expected_path), \
        f"{what}: metadata {metadata(actual_path)} against {metadata(expected_path)}"
    actual, expected = load_file(actual_path), load_file(expected_path)
    assert sorted(actual) == sorted(expected), f"{what}: tensors {sorted(actual)} against {sorted(expected)}"
    used = 0.0
    for key, value in expected.items():
        ratio, _ = worst_tensor(key, actual[key], value)
        assert ratio <= 1, f"{what}: {key} differs by {ratio} x the tolerance"
        used = max(used, ratio)
    return used


def check(name, experiment, tmp):
    data = write_inputs(experiment, tmp, name)
    stepscope("train", "--config", "config.json", *data, "--steps", str(BEFORE), "--out", "ck.safetensors", cwd=tmp)
    # The script reads a CSV as it is; a built-in's rows and a text's
    # windows are written out for it.
    text = experiment["data"]["source"] == "text"
    rows = ["--data-out", "data.csv", *data] if text else ([] if data else ["--data-out", "data.csv"])
    stepscope("export-pytorch", "ck.safetensors", "--out", "script.py", *rows, cwd=tmp)
    # Stepscope's own continuation, and a run that never leaves.
    stepscope("train", "--init", "ck.safetensors", *data, "--steps", str(AFTER), "--out", "stepscope.safetensors",
              "--metrics", "stepscope.jsonl", cwd=tmp)
    stepscope("train", "--init", "ck.safetensors", *data, "--steps", str(AFTER + BACK), "--out", "never.safetensors",
              "--metrics", "never.jsonl", cwd=tmp)

    continued = ["script.py", "ck.safetensors", "--data", "data.csv", "--steps", str(AFTER)]
    python(*continued, "--out", "one.safetensors", "--metrics", "one.jsonl", cwd=tmp)
    out = torchrun(*continued, "--out", "two.safetensors", "--metrics", "two.jsonl", "--save-every", "10",
                   "--profile", "prof", cwd=tmp)
    assert f"on {PROCESSES} processes (gloo)" in out, out
    for saved in (20, 30, BEFORE + AFTER):  # every 10th step (as Stepscope counts them), then the last
        assert f"checkpoint of step {saved} written to two.safetensors" in out, out
    assert out.count("written to two.safetensors") == 3, out

    # Each rank logs its own steps (two.jsonl, two.rank1.jsonl), the
    # gradients' all-reduce timed on both; they open as one run.
    two = records(os.path.join(tmp, "two.jsonl"))
    for r in range(PROCESSES):
        mine = records(os.path.join(tmp, "two.jsonl" if r == 0 else f"two.rank{r}.jsonl"))
        assert [m["step"] for m in mine] == [m["step"] for m in two] and all(m["rank"] == r for m in mine), mine[0]
        assert all(m["communication_ms"] > 0 and m["forward_ms"] > 0 and m["backward_ms"] > 0 for m in mine), mine[0]
    opened = stepscope("open", "two.jsonl", *[f"two.rank{r}.jsonl" for r in range(1, PROCESSES)], cwd=tmp)
    assert opened.startswith(f"metrics: {PROCESSES} ranks") and "communication:" in opened, opened
    assert all(m["communication_ms"] == 0 for m in records(os.path.join(tmp, "one.jsonl")))
    # One torch.profiler trace per rank, with its phases and communication.
    from check_pytorch_export import check_profile
    check_profile(os.path.join(tmp, "prof"), ranks=PROCESSES)
    # (a) one process against two.
    used = {"a": same_steps(f"{name} (a)", records(os.path.join(tmp, "two.jsonl")),
                            records(os.path.join(tmp, "one.jsonl")))}
    used["a"] = max(used["a"], same_state(f"{name} (a)", os.path.join(tmp, "two.safetensors"),
                                          os.path.join(tmp, "one.safetensors")))
    # (b) against Stepscope, and verified as the page verifies a restore.
    used["b"] = max(same_steps(f"{name} (b)", records(os.path.join(tmp, "two.jsonl")),
                               records(os.path.join(tmp, "stepscope.jsonl"))),
                    same_state(f"{name} (b)", os.path.join(tmp, "two.safetensors"),
                               os.path.join(tmp, "stepscope.safetensors")))
    verified = stepscope("verify", "two.safetensors", *data, cwd=tmp)
    assert verified.startswith("Restore verified"), verified
    # (c) back into Stepscope.
    stepscope("train", "--init", "two.safetensors", *data, "--steps", str(BACK), "--out", "back.safetensors",
              "--metrics", "back.jsonl", cwd=tmp)
    used["c"] = max(same_steps(f"{name} (c)", records(os.path.join(tmp, "back.jsonl")),
                               records(os.path.join(tmp, "never.jsonl"))[AFTER:]),
                    same_state(f"{name} (c)", os.path.join(tmp, "back.safetensors"),
                               os.path.join(tmp, "never.safetensors")))
    return used


def check_interrupt(tmp):
    """Ctrl-C in the middle of a long run: a checkpoint at a step boundary."""
    experiment = CASES["adamw_spiral_uneven_accumulation"]
    rows_per_step = experiment["batch_size"] * experiment["grad_accumulation"]
    run = subprocess.Popen([sys.executable, "script.py", "ck.safetensors", "--data", "data.csv", "--steps", "1000000",
                            "--log-every", "20", "--out", "stopped.safetensors"],
                           cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    for line in run.stdout:
        if line.startswith("step "):
            run.send_signal(signal.SIGINT)
            break
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, (run.returncode, out, err)
    assert "stopped by a signal" in out, out
    meta = metadata(os.path.join(tmp, "stopped.safetensors"))
    step = int(meta["step"])
    assert step >= BEFORE + 20, meta  # the signal came after the progress line of step BEFORE + 20
    assert json.loads(meta["data_position"])["rows_consumed"] == step * rows_per_step, meta
    stepscope("inspect", "stopped.safetensors", cwd=tmp)
    stepscope("train", "--init", "stopped.safetensors", "--steps", "2", cwd=tmp)
    return step


def main():
    if not os.environ.get("STEPSCOPE_BIN"):
        subprocess.run(["cargo", "build", "--quiet", "-p", "stepscope-cli"], cwd=ROOT, check=True)
    print(f"share of the tolerance used: (a) 1 process against {PROCESSES} under torchrun, (b) {PROCESSES} processes "
          f"against Stepscope, (c) back in Stepscope against a run that never left")
    for name, experiment in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            used = check(name, experiment, tmp)
            print(f"  {name:<36} {used['a']:5.2f} {used['b']:5.2f} {used['c']:5.2f}", flush=True)
            if name == list(CASES)[0]:
                step = check_interrupt(tmp)
                print(f"  Ctrl-C: stopped at step {step} with exit status 130; Stepscope continues its checkpoint")
    print(f"ok: exported scripts continue runs under torchrun ({PROCESSES} processes, gloo) as in one process and "
          f"as in Stepscope, and come back")


if __name__ == "__main__":
    sys.exit(main())
