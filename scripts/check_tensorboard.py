#!/usr/bin/env python3
"""Trains a short run with the native CLI and `--tensorboard`, then opens the
event file with TensorBoard's own reader (EventAccumulator, as
`tensorboard --logdir` loads it): every scalar must equal the metrics log's
figure for its step (as float32), the test loss must be there at the
report cadence, and every histogram's count must equal its tensor's size."""
import json
import os
import subprocess
import tempfile

import numpy as np
from tensorboard.backend.event_processing import event_accumulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "examples", "spiral.json")
STEPS, EVERY = 40, 15


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tb, log = os.path.join(tmp, "tb"), os.path.join(tmp, "metrics.jsonl")
        subprocess.run(
            ["cargo", "run", "--quiet", "-p", "stepscope-cli", "--", "train", "--config", CONFIG,
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


if __name__ == "__main__":
    main()
