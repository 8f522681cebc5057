#!/usr/bin/env python3
"""Does the page's default MLP stay calm once it has learned?

Trains the page's default experiment (app/src/model/edit.rs,
`default_experiment`) and candidate variants with `stepscope train` for many
steps, reads every step's loss and gradient norm from the metrics log, and
judges them as the page does (app/src/model/spikes.rs, the same constants
and rules): a loss spike is the loss averaged over 5 steps above 3x the
median of the last 50 averages, 0.1 above it and 1.5x above the largest of
them. Reports, per variant and seed: spikes, the first spike's step, the
largest averaged loss after step 1,000, and the test accuracy at the end.

    .venv/bin/python scripts/bench_default_mlp.py [--steps 20000] [--backend cpu|gpu] [--out bench/default-mlp.md]

Long (minutes): a script of its own, not part of the test command.
"""
import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "stepscope")

# The page's default before it was made calm (app/src/model/edit.rs).
DEFAULT = {
    "seed": 1,
    "model": {"inputs": 2, "layers": [{"units": 16, "activation": "tanh"}, {"units": 16, "activation": "tanh"},
                                      {"units": 1, "activation": "linear"}]},
    "loss": "bce_with_logits",
    "optimizer": {"kind": "adamw", "lr": 0.02, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
    "batch_size": 32,
    "data": {"source": "spiral", "samples": 500, "noise": 0.1, "train_fraction": 0.5, "features": ["x1", "x2"],
             "shuffle": True},
}

CHOSEN_ONLY = False

# spikes.rs
WINDOW, SMOOTH, MIN_HISTORY = 50, 5, 20
LOSS_FACTOR, LOSS_FLOOR, MAX_FACTOR = 3.0, 0.1, 1.5


def spikes(losses):
    """The page's Detector over a run's losses: the steps judged spikes,
    and the largest averaged loss after step 1,000."""
    recent, window, found, worst = [], [], [], 0.0
    for step, loss in enumerate(losses, 1):
        recent = (recent + [loss])[-SMOOTH:]
        avg = sum(recent) / len(recent)
        if step > 1000:
            worst = max(worst, avg)
        spike = False
        if len(window) >= MIN_HISTORY:
            m = statistics.median(window)
            spike = avg > LOSS_FACTOR * m and avg > m + LOSS_FLOOR and avg > MAX_FACTOR * max(window)
        if spike:
            found.append(step)
        else:
            window = (window + [avg])[-WINDOW:]
    return found, worst


def run(experiment, steps, backend, tmp):
    config = os.path.join(tmp, "config.json")
    with open(config, "w") as f:
        json.dump(experiment, f)
    metrics = os.path.join(tmp, "m.jsonl")
    out = subprocess.run([BIN, "train", "--config", config, "--steps", str(steps), "--backend", backend, "--metrics",
                          metrics], capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in open(metrics)]
    # The CLI's last lines: "test: loss 0.12345  accuracy 96.4%".
    accuracy = next((line.split(":", 1)[1].strip() for line in out.splitlines()[::-1]
                     if line.startswith("test:")), "?")
    return [r["loss"] for r in rows], accuracy


def variants():
    calm = copy.deepcopy(DEFAULT)
    calm["optimizer"]["weight_decay"] = 0.01
    cosine = copy.deepcopy(DEFAULT)
    cosine["schedule"] = {"kind": "warmup_cosine", "warmup_steps": 20, "total_steps": 3000, "min_lr": 0.002}
    both = copy.deepcopy(cosine)
    both["optimizer"]["weight_decay"] = 0.01
    chosen = copy.deepcopy(DEFAULT)
    chosen["schedule"] = {"kind": "warmup_cosine", "warmup_steps": 0, "total_steps": 3000, "min_lr": 0.002}
    if CHOSEN_ONLY:
        return [("the page's default: cosine 0.02 -> 0.002 over 3,000 steps, no warmup", chosen)]
    return [("previous default: AdamW lr 0.02, constant", DEFAULT),
            ("the page's default: cosine 0.02 -> 0.002 over 3,000 steps, no warmup", chosen),
            ("weight decay 0.01", calm),
            ("cosine 0.02 -> 0.002 over 3,000 steps", cosine),
            ("cosine to 0.002 over 3,000 steps, weight decay 0.01", both)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--out")
    parser.add_argument("--chosen-only", action="store_true", help="only the page's current default")
    parser.add_argument("--bin", help="a stepscope binary to use instead of building the release one")
    args = parser.parse_args()
    global BIN, CHOSEN_ONLY
    CHOSEN_ONLY = args.chosen_only
    if args.bin:
        BIN = args.bin
    else:
        subprocess.run(["cargo", "build", "--quiet", "--release", "-p", "stepscope-cli"], cwd=ROOT, check=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    lines = [f"| variant | seed | spikes | first spike | worst 5-step loss after step 1,000 | final |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, experiment in variants():
            for seed in range(1, args.seeds + 1):
                e = copy.deepcopy(experiment)
                e["seed"] = seed
                losses, accuracy = run(e, args.steps, args.backend, tmp)
                found, worst = spikes(losses)
                lines.append(f"| {name} | {seed} | {len(found)} | {found[0] if found else '-'} | {worst:.3f} "
                             f"| {accuracy} |")
                print(lines[-1], flush=True)
    report = (f"{args.steps:,} steps on the {args.backend.upper()} engine ({cpu}, {os.cpu_count()} cores), judged "
              f"by the page's spike "
              f"detector (app/src/model/spikes.rs).\n\n" + "\n".join(lines) + "\n")
    if args.out:
        with open(args.out, "a") as f:
            f.write(report)
    print(report)


if __name__ == "__main__":
    sys.exit(main())
