#!/usr/bin/env python3
"""Scaling benchmark of the input parsers: the CSV reader by rows and the
header check by columns, through the `stepscope` binary, one fresh process
per size (wall time and peak resident memory from GNU time), with the ratio
to the size before; and an MNIST-sized CSV (60,000 x 785, generated) trained
for a few steps. Writes a Markdown report.

    cargo build --release -p stepscope-cli
    python3 scripts/bench_inputs.py --bin target/release/stepscope --out bench/inputs.md

Linear reading shows as time ratios near the size ratios (10x rows: about
10x time); the quadratic reader it replaced showed about 4x for 2x rows.
Not part of the test command (it writes ~200 MB of files and takes minutes).
"""
import argparse
import json
import os
import platform
import random
import subprocess
import tempfile
import time

CONFIG = {
    "seed": 1,
    "model": {"inputs": 2, "layers": [{"units": 8, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
    "loss": "bce_with_logits",
    "optimizer": {"kind": "adam", "lr": 0.02},
    "batch_size": 32,
    "data": {"source": "csv", "train_fraction": 0.9},
}

MNIST_CONFIG = {
    **CONFIG,
    "model": {"inputs": 784, "layers": [{"units": 64, "activation": "relu"}, {"units": 10, "activation": "linear"}]},
    "loss": "cross_entropy",
    "optimizer": {"kind": "adam", "lr": 0.001},
    "batch_size": 64,
}


def timed(cmd, cwd):
    """Wall seconds, peak RSS in MB and the exit status of one process."""
    out = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + cmd, cwd=cwd, capture_output=True, text=True)
    wall, rss_kb = out.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss_kb) / 1024, out.returncode, out.stdout + out.stderr


def write_rows(path, rows):
    rng = random.Random(rows)
    with open(path, "w") as f:
        f.write("x1,x2,y\n")
        for _ in range(rows):
            a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
            f.write(f"{a:.4f},{b:.4f},{int(a * a + b * b < 0.5)}\n")


def write_columns(path, columns):
    with open(path, "w") as f:
        f.write(",".join(f"x{i}" for i in range(columns)) + ",y\n")
        f.write(",".join("0" for _ in range(columns)) + ",1\n")


def write_mnist(path, rows=60_000, pixels=784):
    rng = random.Random(7)
    with open(path, "w") as f:
        f.write(",".join(f"x{i}" for i in range(pixels)) + ",y\n")
        for _ in range(rows):
            label = rng.randrange(10)
            # Sparse bytes like MNIST's: most pixels 0, a band lit by class.
            row = ["0"] * pixels
            for _ in range(150):
                i = (label * 70 + rng.randrange(250)) % pixels
                row[i] = str(rng.randrange(1, 256))
            f.write(",".join(row) + f",{label}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/stepscope")
    ap.add_argument("--out", default="bench/inputs.md")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    lines = [
        "# Input parsers: time and memory against input size",
        "",
        f"Made by `python3 scripts/bench_inputs.py --bin {args.bin}` on {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} with {os.cpu_count()} cores ({platform.processor() or platform.platform()}); "
        "no GPU (CPU engine). One fresh process per size; wall time and peak resident memory by GNU time; "
        "each ratio is against the row above.",
        "",
    ]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "c.json"), "w") as f:
            json.dump(CONFIG, f)
        lines += ["## Rows: `stepscope train --steps 5` on a 3-column CSV (2-8-1 network)", "",
                  "| rows | file MB | wall s | peak MB | time ratio | rows ratio |", "|---|---|---|---|---|---|"]
        last = None
        for rows in [100_000, 200_000, 500_000, 1_000_000]:
            path = os.path.join(d, f"r{rows}.csv")
            write_rows(path, rows)
            wall, rss, rc, log = timed([binary, "train", "--config", "c.json", "--data", path, "--steps", "5"], d)
            assert rc == 0, log
            ratio = f"{wall / last[1]:.2f}" if last and last[1] > 0 else "–"
            rows_ratio = f"{rows / last[0]:.1f}" if last else "–"
            lines.append(f"| {rows:,} | {os.path.getsize(path) / 1e6:.1f} | {wall:.2f} | {rss:.0f} | {ratio} | {rows_ratio} |")
            last = (rows, wall)
            os.remove(path)
        lines += ["", "## Columns: a header of N names and one row, read and checked, then refused "
                  "(the model takes 2 inputs; exit status 2 after the whole file is read)", "",
                  "| columns | wall s | peak MB | time ratio | columns ratio |", "|---|---|---|---|---|"]
        last = None
        for columns in [1_000, 10_000, 100_000, 1_000_000]:
            path = os.path.join(d, f"c{columns}.csv")
            write_columns(path, columns)
            wall, rss, rc, log = timed([binary, "train", "--config", "c.json", "--data", path, "--steps", "1"], d)
            assert rc == 2 and "input columns" in log, log
            ratio = f"{wall / last[1]:.2f}" if last and last[1] > 0 else "–"
            cols_ratio = f"{columns / last[0]:.0f}" if last else "–"
            lines.append(f"| {columns:,} | {wall:.2f} | {rss:.0f} | {ratio} | {cols_ratio} |")
            last = (columns, wall)
            os.remove(path)
        path = os.path.join(d, "mnist.csv")
        write_mnist(path)
        with open(os.path.join(d, "m.json"), "w") as f:
            json.dump(MNIST_CONFIG, f)
        wall, rss, rc, log = timed([binary, "train", "--config", "m.json", "--data", path, "--steps", "200"], d)
        assert rc == 0, log
        summary = [l for l in log.splitlines() if l.startswith(("training", "read ", "200 steps", "test:"))]
        lines += ["", "## MNIST-sized: 60,000 rows x 785 columns (generated), 784-64-10, 200 steps", "",
                  f"{os.path.getsize(path) / 1e6:.0f} MB file; wall {wall:.1f} s for reading, training and the final "
                  f"evaluations; peak {rss:.0f} MB.", "", "```"] + summary + ["```", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
