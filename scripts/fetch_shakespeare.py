#!/usr/bin/env python3
"""Writes core/data/tinyshakespeare.txt: karpathy/char-rnn's
data/tinyshakespeare/input.txt at commit 6f9487a6 (core/data/README.md),
downloaded, or copied from --from FILE, and checked against its SHA-256."""
import argparse
import hashlib
import os
import urllib.request

URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/"
       "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt")
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "data", "tinyshakespeare.txt")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--from", dest="source", help="a local copy of input.txt instead of the download")
    args = parser.parse_args()
    if args.source:
        with open(args.source, "rb") as f:
            data = f.read()
    else:
        with urllib.request.urlopen(URL, timeout=60) as response:
            data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"SHA-256 {digest} is not {SHA256}: not the Tiny Shakespeare the core embeds")
    with open(OUT, "wb") as f:
        f.write(data)
    print(f"wrote {os.path.normpath(OUT)}: {len(data)} bytes, SHA-256 {digest}")


if __name__ == "__main__":
    main()
