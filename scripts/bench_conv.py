#!/usr/bin/env python3
"""ConvNetJS's MNIST net (examples/mnist_convnet.json) trained by whole steps
on random 28 x 28 rows: Stepscope's CPU engine (`core/examples/conv_step_bench.rs`)
against PyTorch eager with the same net, optimizer (SGD, momentum 0.9, weight
decay 0.001) and batch, one thread each, side by side in alternating rounds;
medians. With --together each round runs both at once, one core each, so that
both see the same machine (on a shared, noisy host the alternating rounds'
ratios spread from 0.7 to 1.5); the ratio is then the median of the rounds'
ratios. Writes the top of bench/conv.md (or --out), keeping its sections from the
first `## ` heading on. A ratio measured side by side, not an assertion.

Run:  .venv/bin/python scripts/bench_conv.py [--rounds 3] [--seconds 4] [--batch 32] [--together]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def torch_images_per_second(batch, seconds):
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3),
                        nn.Flatten(), nn.Linear(256, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=0.001)
    xs, ys = torch.rand(4, batch, 1, 28, 28), torch.randint(0, 10, (4, batch))

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(xs[i % 4]), ys[i % 4])
        loss.backward()
        opt.step()
        return loss

    step(0).item()
    started, steps = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        step(steps)
        steps += 1
    return steps * batch / (time.perf_counter() - started)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--together", action="store_true",
                        help="run both at once in each round, one core each (needs 2 cores)")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "conv.md"))
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "stepscope-core", "--example", "conv_step_bench"],
                   cwd=ROOT, check=True)
    binary = os.path.join(ROOT, "target", "release", "examples", "conv_step_bench")
    torch.set_num_threads(1)
    ours, theirs = [], []
    for r in range(args.rounds):
        run = subprocess.Popen([binary, str(args.batch), str(args.seconds)], stdout=subprocess.PIPE, text=True)
        if not args.together:
            run.wait()
        theirs.append(torch_images_per_second(args.batch, args.seconds))
        out, _ = run.communicate()
        assert run.returncode == 0, out
        ours.append(json.loads(out))
        print("round", r + 1, round(ours[-1]["images_per_second"]), round(theirs[-1]), flush=True)
    mine = statistics.median(o["images_per_second"] for o in ours)
    torch_ips = statistics.median(theirs)
    ratios = [o["images_per_second"] / t for o, t in zip(ours, theirs)]
    ratio = statistics.median(ratios) if args.together else mine / torch_ips
    how = ("rounds of {s} s with both running at once, one core each; the ratio is the median of the rounds' ratios"
           if args.together else "alternating rounds of {s} s; the ratio is of the medians").format(s=args.seconds)
    fwd = statistics.median(o["forward_ms"] for o in ours)
    bwd = statistics.median(o["backward_ms"] for o in ours)
    rounds = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
    text = f"""# ConvNetJS's MNIST net on the CPU engine against PyTorch eager

`scripts/bench_conv.py`, {time.strftime('%Y-%m-%d')}: {cpu_name()}, {os.cpu_count()} cores, Linux; PyTorch
{torch.__version__}, one thread each (`torch.set_num_threads(1)`; the CPU engine unsharded). The net of
examples/mnist_convnet.json (conv 5×5×8 pad 2 relu, max pool 2, conv 5×5×16 pad 2 relu, max pool 3, dense 10;
5,994 parameters), SGD with momentum 0.9 and weight decay 0.001, batch {args.batch} of random 28 × 28 rows;
whole training steps, {args.rounds} {how}; medians (each round in brackets).

| | images/s | forward : backward ms a step |
|---|---|---|
| Stepscope CPU engine | {mine:,.0f} ({rounds(o["images_per_second"] for o in ours)}) | {fwd:.2f} : {bwd:.2f} |
| PyTorch eager | {torch_ips:,.0f} ({rounds(theirs)}) | |
| ratio | {ratio:.2f}× ({", ".join(f"{x:.2f}" for x in ratios)}) | |

FLOPs of the step (the anatomy's count, `Experiment::step_flops`): forward : backward 1 : 1.80 (the first conv's
∂x left out).
"""
    kept = ""
    if os.path.exists(args.out):
        with open(args.out) as f:
            old = f.read()
        if "\n## " in old:
            kept = "\n" + old[old.index("\n## ") + 1:]
    with open(args.out, "w") as f:
        f.write(text + kept)
    print(text)


if __name__ == "__main__":
    main()
