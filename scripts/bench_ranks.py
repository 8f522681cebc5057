#!/usr/bin/env python3
"""Data-parallel ranks on the CPU engine against PyTorch eager's threads, side
by side in one run: nanoGPT's 0.8 M "macbook" model (4 blocks × 4 heads ×
embed 128, context 64, batch 12; examples/shakespeare.json's run) trained
by whole steps, Stepscope with `shards` S and R ranks (threads of one
process, `CpuEngine::set_threads`) against PyTorch with
`torch.set_num_threads(R)`, R = 1, 2, 4, … up to the cores (and S). Also
Stepscope unsharded on one thread, the baseline of the scaling efficiency
(tokens/s at R ÷ (R × tokens/s at 1)). Then the MLP workloads W2 and W3
(`core/examples/mlp_step_bench.rs`, Adam at lr 0.01) the same way, steps/s.
Rounds alternate; medians. Writes the top of bench/ranks.md (or --out),
keeping its sections from the first `## ` heading on (the page's figures).
A ratio measured side by side, not an assertion.

Run:  .venv/bin/python scripts/bench_ranks.py [--rounds 3] [--seconds 4] [--shards 4]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpt import torch_tokens_per_second  # noqa: E402  (the same PyTorch model and step)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIG = (4, 4, 128, 64, 12)  # blocks, heads, embed, context, batch
WORKLOADS = {"W2": ((64, 256, 256, 10), 256), "W3": ((784, 512, 512, 10), 1024)}


def torch_mlp_steps_per_second(widths, batch, seconds):
    """PyTorch eager's training step of the MLP: Linear and ReLU layers,
    cross-entropy, Adam at lr 0.01, on four batches of random rows (as
    `workloads::synthetic`); steps/s after a warm-up step."""
    torch.manual_seed(1)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    xs = torch.rand(4, batch, widths[0]) * 2 - 1
    ys = torch.randint(0, widths[-1], (4, batch))

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xs[i % 4]), ys[i % 4])
        loss.backward()
        opt.step()
        return loss

    step(0).item()
    started, steps = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        step(steps)
        steps += 1
    step(steps).item()
    return (steps + 1) / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--shards", type=int, default=4, help="shards of the batch (must divide 12)")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "ranks.md"))
    args = parser.parse_args()
    if CONFIG[4] % args.shards:
        sys.exit(f"--shards {args.shards} must divide the batch {CONFIG[4]}")
    for example in ("gpt_step_bench", "mlp_step_bench"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "stepscope-core", "--example", example],
                       cwd=ROOT, check=True)
    binary = os.path.join(ROOT, "target", "release", "examples", "gpt_step_bench")
    mlp_binary = os.path.join(ROOT, "target", "release", "examples", "mlp_step_bench")
    cores = os.cpu_count() or 1
    counts = sorted({r for r in [1, 2, 4, 8, 16, cores] if r <= min(cores, args.shards)})
    with open(os.path.join(ROOT, "core", "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = f.read()
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(ch) for ch in text[:200_000]], dtype=torch.long)

    def ours(shards, ranks):
        cmd = [binary, *map(str, CONFIG), str(args.seconds), "0", str(shards), str(ranks)]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)

    base, runs, theirs = [], {r: [] for r in counts}, {r: [] for r in counts}
    for _ in range(args.rounds):
        base.append(ours(1, 1)["tokens_per_second"])
        for r in counts:
            runs[r].append(ours(args.shards, r))
            torch.set_num_threads(r)
            theirs[r].append(torch_tokens_per_second(ids, *CONFIG, args.seconds))
        print("round", len(base), base[-1], {r: round(runs[r][-1]["tokens_per_second"]) for r in counts},
              {r: round(theirs[r][-1]) for r in counts}, flush=True)

    # The MLPs: W2 (64-256-256-10, B 256) and W3 (784-512-512-10, B 1024),
    # ReLU, cross-entropy, Adam at lr 0.01, in 8 shards.
    mlp_counts = sorted({r for r in [1, 2, 4, 8, cores] if r <= min(cores, 8)})

    def ours_mlp(w, shards, ranks):
        cmd = [mlp_binary, w, str(shards), str(ranks), str(args.seconds)]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["steps_per_second"]

    mlp = {w: ([], {r: [] for r in mlp_counts}, {r: [] for r in mlp_counts}) for w in WORKLOADS}
    for _ in range(args.rounds):
        for w, (widths, batch) in WORKLOADS.items():
            mlp_base, mine, torch_mlp = mlp[w]
            mlp_base.append(ours_mlp(w, 1, 1))
            for r in mlp_counts:
                mine[r].append(ours_mlp(w, 8, r))
                torch.set_num_threads(r)
                torch_mlp[r].append(torch_mlp_steps_per_second(widths, batch, args.seconds))
            print("round", w, mlp_base[-1], {r: round(mine[r][-1], 1) for r in mlp_counts},
                  {r: round(torch_mlp[r][-1], 1) for r in mlp_counts}, flush=True)

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    med = statistics.median
    one = med(base)
    lines = [
        "# Data-parallel ranks on the CPU engine against PyTorch eager's threads",
        "",
        f"`scripts/bench_ranks.py`, {time.strftime('%Y-%m-%d')}: {cpu}, {cores} cores, {platform.system()}; PyTorch",
        f"{torch.__version__}. nanoGPT's 0.8 M model (4 × 4 × 128, T 64, B 12), whole training steps on Tiny",
        f"Shakespeare (`core/examples/gpt_step_bench.rs` against `scripts/bench_gpt.py`'s PyTorch step); Stepscope",
        f"with `shards` {args.shards} on R ranks (threads), PyTorch with `torch.set_num_threads(R)`. {args.rounds}",
        f"alternating rounds of {args.seconds} s, medians (each round's figure in brackets). Stepscope unsharded on",
        f"one thread: {one:,.0f} tokens/s ({', '.join(f'{v:,.0f}' for v in base)}). Efficiency: tokens/s at R ÷",
        "(R × the unsharded one-thread figure). The losses are the same bits at every R (core/tests/ranks.rs); only",
        "the speed changes.",
        "",
        "| R | Stepscope tokens/s | efficiency | forward / backward / all-reduce and wait / optimizer ms a step | PyTorch tokens/s | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in counts:
        rate = med(x["tokens_per_second"] for x in runs[r])
        parts = "/".join(f"{med(x[k] for x in runs[r]):.1f}" for k in ("forward_ms", "backward_ms", "communication_ms", "optimizer_ms"))
        torch_rate = med(theirs[r])
        each = ", ".join(f"{x['tokens_per_second']:,.0f}" for x in runs[r])
        lines.append(f"| {r} | {rate:,.0f} ({each}) | "
                     f"{rate / (r * one):.0%} | {parts} | {torch_rate:,.0f} ({', '.join(f'{v:,.0f}' for v in theirs[r])}) "
                     f"| {rate / torch_rate:.2f}× |")
    lines += [
        "",
        f"The MLP workloads (`core/examples/mlp_step_bench.rs`: ReLU, cross-entropy, Adam at lr 0.01, random rows) in",
        "8 shards on R ranks against PyTorch eager's same network, optimizer and batch with `torch.set_num_threads(R)`,",
        "steps/s, same rounds. Efficiency against Stepscope unsharded on one thread.",
        "",
        "| workload | R | Stepscope steps/s | efficiency | PyTorch steps/s | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for w, (mlp_base, mine, torch_mlp) in mlp.items():
        one_mlp = med(mlp_base)
        for r in mlp_counts:
            rate, torch_rate = med(mine[r]), med(torch_mlp[r])
            lines.append(f"| {w} | {r} | {rate:,.1f} ({', '.join(f'{v:,.1f}' for v in mine[r])}) | {rate / (r * one_mlp):.0%} "
                         f"| {torch_rate:,.1f} ({', '.join(f'{v:,.1f}' for v in torch_mlp[r])}) | {rate / torch_rate:.2f}× |")
    kept = ""
    if os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as f:
            old = f.read()
        at = old.find("\n## ")
        kept = old[at:] if at >= 0 else ""
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n" + kept)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
