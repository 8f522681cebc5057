#!/usr/bin/env python3
"""Regenerates core/data/digits.u8, the 8x8 handwritten digits Stepscope
embeds, from the copy scikit-learn ships (sklearn/datasets/data/digits.csv.gz).

Not run by the tests: the file is committed, and core/src/data/digits.rs
checks its size, class counts and SHA-256.

    python3 scripts/fetch_digits.py                  # from an installed scikit-learn
    python3 scripts/fetch_digits.py --wheel W.whl    # from a wheel, without installing it
    python3 scripts/fetch_digits.py --csv digits.csv.gz

A wheel: pip download --no-deps -d /tmp/skl scikit-learn

Layout of the output (core/data/README.md): 1,797 rows of 65 bytes, the 64
pixel values 0..16 of one image in row-major order (top row first), then its
label 0..9; rows in the order of scikit-learn's file.
"""

import argparse
import csv
import gzip
import hashlib
import importlib.util
import io
import os
import sys
import zipfile

MEMBER = "sklearn/datasets/data/digits.csv.gz"
ROWS, PIXELS = 1797, 64
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "core", "data", "digits.u8")


def gzipped_csv(args):
    if args.csv:
        with open(args.csv, "rb") as f:
            return f.read()
    if args.wheel:
        with zipfile.ZipFile(args.wheel) as wheel:
            return wheel.read(MEMBER)
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("scikit-learn is not installed: give --wheel or --csv (see --help)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
    with open(path, "rb") as f:
        return f.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", help="a scikit-learn wheel (.whl)")
    parser.add_argument("--csv", help="digits.csv.gz itself")
    parser.add_argument("--out", default=OUT, help="where to write (default: core/data/digits.u8)")
    args = parser.parse_args()
    text = gzip.decompress(gzipped_csv(args)).decode("ascii")
    rows = [line for line in csv.reader(io.StringIO(text)) if line]
    if len(rows) != ROWS:
        sys.exit(f"expected {ROWS} rows, found {len(rows)}")
    out = bytearray()
    for n, row in enumerate(rows, start=1):
        # The CSV writes integers as floats ("0.0") in some releases.
        values = [int(float(v)) for v in row]
        if len(values) != PIXELS + 1:
            sys.exit(f"row {n}: {len(values)} values, expected {PIXELS} pixels and a label")
        pixels, label = values[:PIXELS], values[PIXELS]
        if not all(0 <= p <= 16 for p in pixels) or not 0 <= label <= 9:
            sys.exit(f"row {n}: a pixel outside 0..16 or a label outside 0..9")
        out += bytes(pixels) + bytes([label])
    with open(args.out, "wb") as f:
        f.write(out)
    print(f"wrote {args.out}: {len(out)} bytes, sha256 {hashlib.sha256(out).hexdigest()}")


if __name__ == "__main__":
    main()
