#!/usr/bin/env python3
"""Checks that rayscale-core's modules depend on each other one way only.

Each top-level module of crates/core/src may use (through `crate::...` paths) only
modules of lower layers, in the order below. Test files and inline test modules are not
counted; `testing` (the fakes for tests) sits on top and is not checked.
Exits non-zero naming every edge that goes up or sideways.
"""
import os
import re
import sys

LAYERS = [
    ["model"],
    ["instance"],
    ["error"],
    ["config"],
    ["preemption"],
    ["provider", "expander"],
    ["scheduler"],
    ["availability", "scenario", "launcher"],
    ["explain"],
    ["reconciler"],
    ["telemetry"],
    ["driver", "simulate"],
]
RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}

def without_test_modules(text):
    """The text with every `#[cfg(test)] mod NAME { ... }` block removed (braces matched;
    good enough for this crate, which has no braces inside strings of test modules that
    would unbalance them)."""
    out = []
    pos = 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < pos:
            continue
        out.append(text[pos:m.start()])
        depth = 1
        i = m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        pos = i
    out.append(text[pos:])
    return "".join(out)


root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "core", "src")
bad = []
for dirpath, _, files in os.walk(root):
    for f in files:
        if not f.endswith(".rs") or f == "lib.rs" or f == "tests.rs" or f.endswith("_tests.rs"):
            continue
        path = os.path.relpath(os.path.join(dirpath, f), root)
        top = path.split(os.sep)[0].removesuffix(".rs")
        if top == "testing":
            continue
        if top not in RANK:
            bad.append(f"{path}: module {top} is not in a layer of {__file__}")
            continue
        text = without_test_modules(open(os.path.join(dirpath, f), encoding="utf-8").read())
        used = set(re.findall(r"crate::([a-z_]+)", text))
        # Grouped imports: `use crate::{config::X, model::{Y, Z}};`.
        for group in re.findall(r"crate::\{([^;]*)\}\s*;", text):
            used.update(re.findall(r"(?:^|[{,]\s*)([a-z_]+)::", group))
            used.update(m for m in re.findall(r"(?:^|[{,]\s*)([a-z_]+)\s*(?=[,}]|$)", group))
        if "crate::CoreError" in text or re.search(r"crate::\{[^;]*\bCoreError\b", text):
            used.add("error")
        for m in sorted(used):
            if m in RANK and m != top and RANK[m] >= RANK[top]:
                bad.append(f"{path}: {top} (layer {RANK[top]}) uses {m} (layer {RANK[m]})")
if bad:
    print("module layering broken in rayscale-core:", file=sys.stderr)
    for b in bad:
        print(f"  {b}", file=sys.stderr)
    sys.exit(1)
print("rayscale-core modules: dependencies run one way")
