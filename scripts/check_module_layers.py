#!/usr/bin/env python3
"""Checks that rayscale-core's modules depend on each other one way only.

Each top-level module of crates/core/src may use (through `crate::...` paths) only
modules of lower layers, in the order below. Test files and inline test modules are not
counted; `testing` (the fakes, behind `test-util`) sits on top and is not checked.
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
    ["provider", "expander"],
    ["scheduler"],
    ["availability", "scenario"],
    ["reconciler"],
    ["driver"],
]
RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "core", "src")
bad = []
for dirpath, _, files in os.walk(root):
    for f in files:
        if not f.endswith(".rs") or f in ("tests.rs", "cloud_tests.rs", "lib.rs"):
            continue
        path = os.path.relpath(os.path.join(dirpath, f), root)
        top = path.split(os.sep)[0].removesuffix(".rs")
        if top == "testing":
            continue
        if top not in RANK:
            bad.append(f"{path}: module {top} is not in a layer of {__file__}")
            continue
        text = open(os.path.join(dirpath, f), encoding="utf-8").read()
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests \{", text)[0]
        used = set(re.findall(r"crate::([a-z_]+)", text))
        if "crate::CoreError" in text:
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
