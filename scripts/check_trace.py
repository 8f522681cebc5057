#!/usr/bin/env python3
"""Checks `stepscope train --trace` against the tools that read PyTorch
profiler traces.

1. A CPU-engine run with gradient accumulation (its steps taken in parts)
   and checkpoints: every step's phases nest inside its ProfilerStep#N on one
   track, follow one another without overlap, and add up to the step; the
   data phase is `enumerate(DataLoader)#Stepscope.__next__`; the counters
   hold the metrics log's losses.
2. A GPU-engine run of 40 steps (lavapipe here, where no GPU is at hand),
   gzip-compressed:
   Holistic Trace Analysis (`hta.trace_analysis.TraceAnalysis`, from PyPI)
   loads it, finds rank 0, and gives its temporal breakdown (idle, compute
   and non-compute time of the GPU's passes) and their kernel breakdown.
"""
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The CLI: `STEPSCOPE_BIN` where the caller built it (scripts/test.sh passes the
# binary its `cargo test` built), else built here.
BIN = os.environ.get("STEPSCOPE_BIN") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "stepscope")
DATA = "enumerate(DataLoader)#Stepscope.__next__"


def stepscope(*args, cwd):
    env = {**os.environ, "WGPU_BACKEND": os.environ.get("WGPU_BACKEND", "vulkan"),
           "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    result = subprocess.run([BIN, *args], cwd=cwd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"stepscope {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def check_nesting(trace, metrics, phases):
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == len(metrics), (len(steps), len(metrics))
    cpu = [e for e in events if e["cat"] == "cpu_op"]
    for s, m in zip(steps, metrics):
        assert s["name"] == f"ProfilerStep#{m['step']}", (s["name"], m["step"])
        inside = [e for e in cpu if s["ts"] - 5e-3 <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 5e-3]
        inside.sort(key=lambda e: e["ts"])
        assert inside and inside[0]["name"] == DATA, [e["name"] for e in inside]
        assert abs(inside[0]["ts"] - s["ts"]) < 5e-3, "the first phase starts the step"
        for a, b in zip(inside, inside[1:]):
            assert abs(a["ts"] + a["dur"] - b["ts"]) < 2e-3, f"{s['name']}: {a['name']} and {b['name']} overlap or leave a gap"
        total = sum(e["dur"] for e in inside)
        assert abs(total - s["dur"]) < 1e-2, f"{s['name']}: phases add up to {total} of {s['dur']} us"
        names = {e["name"] for e in inside}
        assert phases <= names, names
    losses = [e["args"]["loss"] for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "loss"]
    assert losses == [m["loss"] for m in metrics], "loss counters"
    assert '"rank": 0' in json.dumps(trace["distributedInfo"], separators=(", ", ": "))


def same_breakdown(what, temporal, opened):
    """HTA's temporal breakdown of one rank against `stepscope open`'s
    line, in percent of the span (HTA rounds events to whole microseconds:
    half a point allowed)."""
    line = next(l for l in opened.splitlines() if l.startswith("GPU over the span"))
    ours = {k: float(v) for k, v in re.findall(r"(compute|communication|memory|idle) ([\d.]+) %", line)}
    row = temporal.iloc[0]
    for name, theirs, mine in [("idle", row["idle_time_pctg"], ours["idle"]),
                               ("compute", row["compute_time_pctg"], ours["compute"]),
                               ("non-compute", row["non_compute_time_pctg"], ours["communication"] + ours["memory"])]:
        assert abs(theirs - mine) <= 0.5, f"{what}: {name} {mine} % against HTA's {theirs} %\n{line}"
    print(f"{what}: HTA idle {row['idle_time_pctg']} %, compute {row['compute_time_pctg']} %; {line}")


def main():
    if not os.environ.get("STEPSCOPE_BIN"):
        subprocess.run(["cargo", "build", "--quiet", "-p", "stepscope-cli"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        config = json.load(open(os.path.join(ROOT, "examples", "spiral.json")))
        config["grad_accumulation"] = 2
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f)
        stepscope("train", "--config", "config.json", "--steps", "6", "--trace", "cpu.json", "--metrics", "m.jsonl",
                  "--out", "run.safetensors", "--checkpoint-every", "3", cwd=tmp)
        metrics = [json.loads(line) for line in open(os.path.join(tmp, "m.jsonl"))]
        check_nesting(load(os.path.join(tmp, "cpu.json")), metrics, {"forward", "backward", "optimizer", "logging"})
        print("CPU trace: phases nest in their steps and add up to them")

        gpu_dir = os.path.join(tmp, "gpu")
        os.mkdir(gpu_dir)
        # A trace of realistic length (HTA under pandas 3 failed on 30 steps
        # while reading 6).
        out = stepscope("train", "--config", "config.json", "--steps", "40", "--backend", "gpu", "--trace",
                        os.path.join(gpu_dir, "rank0.pt.trace.json.gz"), "--metrics", "g.jsonl", cwd=tmp)
        if "no timestamp queries" in out:
            sys.exit("the GPU adapter has no timestamp queries: no GPU passes to analyse")
        trace = load(os.path.join(gpu_dir, "rank0.pt.trace.json.gz"))
        check_nesting(trace, [json.loads(line) for line in open(os.path.join(tmp, "g.jsonl"))],
                      {"submit and wait for the GPU", "logging"})
        kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
        assert kernels and all(e["args"]["stream"] == 7 for e in kernels), "GPU passes as kernels on a stream"

        from hta.trace_analysis import TraceAnalysis
        analysis = TraceAnalysis(trace_dir=gpu_dir)
        assert list(analysis.t.traces) == [0], list(analysis.t.traces)
        temporal = analysis.get_temporal_breakdown(visualize=False)
        row = temporal.iloc[0]
        assert row["kernel_time(us)"] > 0, temporal
        assert 0 <= row["idle_time_pctg"] < 100 and 0 < row["compute_time_pctg"] <= 100, temporal
        # HTA leaves out the last step (it may be cut short) and rounds to
        # whole microseconds: its compute time is the other steps' passes.
        last = max(e["ts"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
        kept = [e for e in kernels if e["ts"] < last]
        total = sum(e["dur"] for e in kept)
        assert abs(row["compute_time(us)"] - total) <= 2 * len(kept) + 1, (row["compute_time(us)"], total)
        same_breakdown("the GPU-engine trace", temporal, stepscope("open", os.path.join(gpu_dir, "rank0.pt.trace.json.gz"),
                                                                    cwd=tmp))
        kernel_types, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
        print("HTA temporal breakdown of the GPU-engine trace:")
        print(temporal[["rank", "idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg",
                        "kernel_time(us)"]].to_string(index=False))
        print(kernel_types.to_string(index=False))
    print("ok: Stepscope's traces nest and add up, and HTA analyses the GPU engine's")


if __name__ == "__main__":
    main()
