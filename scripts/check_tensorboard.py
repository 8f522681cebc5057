#!/usr/bin/env python3
"""Trains a short run with the native CLI and `--tensorboard`, then opens the
event file with TensorBoard's own reader (EventAccumulator, as
`tensorboard --logdir` loads it): every scalar must equal the metrics log's
figure for its step (as float32), the test loss must be there at the
report cadence, and every histogram's count must equal its tensor's size.

`--page DIR CSV`: the page's download instead (the e2e test): the event
file in DIR against the page's metrics CSV of the same run."""
import csv
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing import event_accumulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The CLI: `STEPSCOPE_BIN` where the caller built it (scripts/test.sh passes the
# binary its `cargo test` built), else through cargo.
STEPSCOPE = ([os.environ["STEPSCOPE_BIN"]] if os.environ.get("STEPSCOPE_BIN")
             else ["cargo", "run", "--quiet", "-p", "stepscope-cli", "--"])
CONFIG = os.path.join(ROOT, "examples", "spiral.json")
STEPS, EVERY = 40, 15


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tb, log = os.path.join(tmp, "tb"), os.path.join(tmp, "metrics.jsonl")
        subprocess.run(
            [*STEPSCOPE, "train", "--config", CONFIG,
             "--steps", str(STEPS), "--metrics", log, "--tensorboard", tb, "--histogram-every", str(EVERY)],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        files = os.listdir(tb)
        assert len(files) == 1 and "tfevents" in files[0], files
        acc = event_accumulator.EventAccumulator(
            tb, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0})
        acc.Reload()
        metrics = [json.loads(line) for line in open(log)]

    tags = acc.Tags()
    assert len(metrics) == STEPS
    by_step = {m["step"]: m for m in metrics}
    for tag, key in [("loss/train", "loss"), ("grad_norm/norm", "grad_norm"), ("learning_rate", "lr"),
                     ("phase/data_ms", "data_ms"), ("phase/forward_ms", "forward_ms"),
                     ("phase/backward_ms", "backward_ms"), ("phase/optimizer_ms", "optimizer_ms"),
                     ("phase/logging_ms", "logging_ms")]:
        events = acc.Scalars(tag)
        assert [e.step for e in events] == sorted(by_step), (tag, [e.step for e in events])
        for e in events:
            want = np.float32(by_step[e.step][key])
            assert np.float32(e.value) == want, (tag, e.step, e.value, want)
    test = acc.Scalars("loss/test")
    assert [e.step for e in test] == [s for s in sorted(by_step) if (s + 1) % (STEPS // 10) == 0], [e.step for e in test]
    assert all(np.isfinite(e.value) and e.value > 0 for e in test)
    assert "accuracy/test" in tags["scalars"]
    # Histograms: every tensor's weights and gradients at steps 14, 29 and
    # the last (39); each counts the tensor's values.
    experiment = json.load(open(CONFIG))
    widths = [experiment["model"]["inputs"]] + [l["units"] for l in experiment["model"]["layers"]]
    sizes = {}
    for i, (fan_in, units) in enumerate(zip(widths, widths[1:])):
        sizes[f"layers.{i}.weight"], sizes[f"layers.{i}.bias"] = units * fan_in, units
    want_tags = {f"{kind}/{name}" for kind in ("weights", "gradients") for name in sizes}
    assert set(tags["histograms"]) == want_tags, (tags["histograms"], want_tags)
    for tag in want_tags:
        events = acc.Histograms(tag)
        assert [e.step for e in events] == [EVERY - 1, 2 * EVERY - 1, STEPS - 1], (tag, [e.step for e in events])
        for e in events:
            h = e.histogram_value
            assert h.num == sizes[tag.split("/", 1)[1]] and sum(h.bucket) == h.num, (tag, h.num)
            assert h.min <= h.max
    print(f"TensorBoard's reader: {len(tags['scalars'])} scalar tags over {STEPS} steps equal the metrics log; "
          f"{len(want_tags)} histogram tags at 3 steps, each counting its tensor")


def page(folder, metrics_csv):
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0,
                                                                     event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    rows = list(csv.DictReader(line for line in open(metrics_csv) if not line.startswith("#")))
    about = open(metrics_csv).readline()
    # The CSV numbers a row by the steps taken once it is done; the event
    # file by the step's 0-based index, as the CLI does.
    steps = {int(r["step"]) - 1: r for r in rows if r["batch_loss"]}
    checked = 0
    for tag, column in [("loss/train", "batch_loss"), ("grad_norm/norm", "grad_norm"), ("learning_rate", "lr"),
                        ("phase/forward_ms", "forward_ms"), ("phase/backward_ms", "backward_ms")]:
        events = acc.Scalars(tag)
        assert sorted(e.step for e in events) == sorted(steps), tag
        for e in events:
            want = np.float32(float(steps[e.step][column]))
            assert np.float32(e.value) == want, (tag, e.step, e.value, want)
            checked += 1
    # An evaluation after n steps at n - 1; the one before any step at 0.
    evaluated = sorted((max(int(r["step"]) - 1, 0), np.float32(float(r["test_loss"]))) for r in rows if r["test_loss"])
    test = sorted((e.step, np.float32(e.value)) for e in acc.Scalars("loss/test"))
    assert test == evaluated and len(test) > 0, (test, evaluated)
    # Histograms from the per-layer statistics the page kept: per layer its
    # weights and bias together, their gradients and updates (each counts
    # the layer's parameters), and its activations (batch rows × units).
    experiment = json.loads(about.split("of the experiment ", 1)[1])
    widths = [experiment["model"]["inputs"]] + [layer["units"] for layer in experiment["model"]["layers"]]
    tags = acc.Tags()["histograms"]
    kinds = ("activations", "gradients", "weights", "updates")
    assert set(tags) == {f"{k}/layer{l}" for k in kinds for l in range(len(widths) - 1)}, (tags, widths)
    histograms = 0
    for l, (fan_in, units) in enumerate(zip(widths, widths[1:])):
        for kind in kinds:
            events = acc.Histograms(f"{kind}/layer{l}")
            assert events and [e.step for e in events] == sorted(e.step for e in events), kind
            for e in events:
                h = e.histogram_value
                assert sum(h.bucket) == h.num and h.min <= h.max, (kind, l, e.step)
                if kind == "activations":
                    assert h.num > 0 and h.num % units == 0, (kind, l, h.num)
                else:
                    assert h.num == units * (fan_in + 1), (kind, l, h.num, units * (fan_in + 1))
                histograms += 1
    print(f"TensorBoard's reader: the page's file holds {len(steps)} steps and {len(test)} evaluations, "
          f"{checked} scalars equal to its metrics CSV, {histograms} histograms each counting its layer")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--page":
        page(sys.argv[2], sys.argv[3])
    else:
        main()
