#!/usr/bin/env python3
"""Checks that the crates' modules import each other without circles.

For each crate (core, cli, app) every `crate::…`, `super::…` and
`self::…` path in a module's source (its `#[cfg(test)] mod tests` block
left out) is resolved to the module it names, and the modules are merged
to a depth (1: `engine`, 2: `engine::cpu`, 3: `model::runner::frame`).
A path from a module to one of its own ancestors is not an edge (a child
may use its parent's items). At each depth the strongly connected
components of that graph must be single modules: then the crate reads
from the bottom up, each module needing only those below it.

Known circles are listed in KNOWN with the reason they remain; a circle
not listed fails the check, and so does a listed one that has gone (so
the list is kept true).

Usage: check_imports.py   (every crate, depths 1 to 3; a circle is printed
                           with its edges)
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = {"core": "core/src", "cli": "cli/src", "app": "app/src"}
DEPTHS = (1, 2, 3)
# crate -> set of frozensets of module names that may still form a circle.
KNOWN = {
    # None: the last (the GPU engine's plan, buffers, kernels and readback,
    # grown together) was taken apart with the conv kernels (ARCHITECTURE.md).
}


def modules(src_root):
    """path -> module path (list of names) for every .rs file."""
    found = {}
    for folder, _, files in os.walk(src_root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, src_root)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            if parts and parts[-1] == "tests":
                continue  # a module's tests may use anything above it
            found[path] = parts
    return found


def references(source):
    """(head, path) for each crate/super/self path, brace groups expanded."""
    source = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", source)[0]
    source = re.sub(r"//[^\n]*", "", source)
    refs = []
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)*)::\{([^{}]*)\}", source):
        for item in m.group(3).split(","):
            item = item.strip().split(" as ")[0].strip()
            if item and item != "self":
                refs.append((m.group(1), (m.group(2) + "::" + item).split("::")[1:]))
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", source):
        refs.append((m.group(1), m.group(2).split("::")[1:]))
    return refs


def graph(src_root, depth):
    found = modules(src_root)
    known = {tuple(parts) for parts in found.values()}

    def resolve(path):
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in known:
                return path[:n]
        return None

    def name(parts):
        return "::".join(parts[:depth])

    edges = defaultdict(set)
    for path, parts in found.items():
        with open(path, encoding="utf-8") as f:
            refs = references(f.read())
        for head, rest in refs:
            if head == "crate":
                base = []
            elif head == "self":
                base = list(parts)
            else:
                base = list(parts[:-1])
                while rest and rest[0] == "super":
                    base, rest = base[:-1], rest[1:]
            target = resolve(base + rest)
            if target is None:
                continue
            a, b = name(parts), name(target)
            if a and b and a != b and not a.startswith(b + "::"):
                edges[a].add(b)
    return edges


def circles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(100_000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def main():
    failures, seen_known = [], defaultdict(set)
    for crate, src in CRATES.items():
        for depth in DEPTHS:
            edges = graph(os.path.join(ROOT, src), depth)
            for component in circles(edges):
                if component in KNOWN.get(crate, set()):
                    seen_known[crate].add(component)
                    continue
                lines = [f"{crate} (depth {depth}): a circle through {', '.join(sorted(component))}"]
                for a in sorted(component):
                    lines.append(f"    {a} -> {', '.join(sorted(edges[a] & component))}")
                failures.append("\n".join(lines))
    for crate, listed in KNOWN.items():
        for component in listed - seen_known[crate]:
            failures.append(f"{crate}: the known circle through {', '.join(sorted(component))} is gone; "
                            f"remove it from KNOWN")
    if failures:
        print("\n".join(failures))
        return 1
    known = sum(len(v) for v in KNOWN.values())
    print(f"ok: no import circles in {', '.join(CRATES)} at depths {DEPTHS[0]} to {DEPTHS[-1]} "
          f"({known} known, listed with its reason)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
