#!/usr/bin/env python3
"""Differential test: `rayscale plan` against Ray 2.60's own scheduler.

    difftest.py --rayscale PATH_TO_BINARY [--seed S] [--count N] [--keep DIR]
                [--in SCENARIO_DIR] [--jobs 2] [--python PY] [--valid-min-workers]

1. Generates N scenarios (default 500; scripts/gen_scenarios.py, seeded) into
   a temporary directory, or takes every scenario of --in DIR.
2. Runs the oracle (scripts/ray_plan.py --both --dir) over all of them in ONE
   Python process (Ray is imported once).
3. Runs `PATH_TO_BINARY plan --scenario FILE` for each scenario (a thread
   pool of --jobs workers, default 2) and compares its stdout, parsed as
   JSON, with the oracle's decision: with "intended" when the scenario is
   under a named rule (MIN_WORKERS_ALIASING), else with "ray". The
   comparison is plain JSON equality of the re-serialised values (so 8 and
   8.0 differ, and list order matters - both sides print canonical JSON).
   When the oracle says the scenario is malformed (exit 2), rayscale must
   exit 2 with nothing on stdout.

Prints a summary, then every mismatch (scenario path and a compact diff),
and ends with `N passed, M failed`. Exit status 1 on any mismatch or any
oracle/rayscale error, else 0. --keep DIR keeps the scenarios
(DIR/scenarios), the oracle's outputs (DIR/oracle) and rayscale's stdout and
stderr (DIR/rayscale) for inspection.

Needs only the standard library; the generator and the oracle run under
--python (default $(scripts/setup-python.sh), which has Ray and PyYAML).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_PY = os.environ.get("RAYSCALE_PYTHON") or (
    "/opt/rayscale-venv/bin/python" if os.path.exists("/opt/rayscale-venv/bin/python") else sys.executable
)
RULE_DESCRIPTIONS = {"MIN_WORKERS_ALIASING": "compared with Ray-as-intended"}
TIMEOUT_S = 60


def canon_str(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def scenario_files(d: Path):
    return sorted(
        p for p in d.iterdir()
        if p.suffix in (".yaml", ".yml", ".json") and not p.name.endswith(".expected.json")
    )


def compact_diff(expected, actual, limit: int = 12) -> list:
    """A short, line-per-difference diff of two decisions."""
    lines = []
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return [f"expected: {canon_str(expected)}", f"actual:   {canon_str(actual)}"]
    for key in sorted(set(expected) | set(actual)):
        e, a = expected.get(key, "<missing>"), actual.get(key, "<missing>")
        if canon_str(e) == canon_str(a):
            continue
        if isinstance(e, dict) and isinstance(a, dict):
            for k in sorted(set(e) | set(a)):
                if canon_str(e.get(k)) != canon_str(a.get(k)):
                    lines.append(f"{key}.{k}: expected={canon_str(e.get(k))} rayscale={canon_str(a.get(k))}")
        elif isinstance(e, list) and isinstance(a, list):
            es = [canon_str(x) for x in e]
            as_ = [canon_str(x) for x in a]
            only_e = list(es)
            only_a = []
            for x in as_:
                if x in only_e:
                    only_e.remove(x)
                else:
                    only_a.append(x)
            for x in only_e:
                lines.append(f"{key}: - {x}   (expected only)")
            for x in only_a:
                lines.append(f"{key}: + {x}   (rayscale only)")
            if not only_e and not only_a:
                lines.append(f"{key}: same items, different order")
        else:
            lines.append(f"{key}: expected={canon_str(e)} rayscale={canon_str(a)}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... {len(lines) - limit} more differences"]
    return lines


def run_rayscale(binary: str, scenario: Path):
    try:
        p = subprocess.run(
            [binary, "plan", "--scenario", str(scenario)],
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {TIMEOUT_S}s"
    except OSError as e:
        return None, "", f"cannot run {binary}: {e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rayscale", required=True, help="path to the rayscale binary")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--keep", help="keep scenarios and outputs in this directory")
    ap.add_argument("--in", dest="in_dir", help="use the scenarios of this directory instead of generating")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--valid-min-workers", action="store_true",
                    help="generate only configs with sum(min_workers) <= max_workers (Ray's validate_config rule)")
    ap.add_argument("--python", default=DEFAULT_PY, help="interpreter with Ray 2.60 and PyYAML")
    args = ap.parse_args(argv)

    binary = os.path.abspath(args.rayscale)
    if not os.access(binary, os.X_OK):
        print(f"difftest: {binary} is not an executable", file=sys.stderr)
        print("0 passed, 0 failed")
        return 1

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rayscale-difftest-"))
    if args.keep:
        for sub in ("scenarios", "oracle", "rayscale"):
            shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    oracle_dir = work / "oracle"
    out_dir = work / "rayscale"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        if args.in_dir:
            scen_dir = Path(args.in_dir)
        else:
            scen_dir = work / "scenarios"
            subprocess.run(
                [args.python, str(HERE / "gen_scenarios.py"), "--seed", str(args.seed),
                 "--count", str(args.count), "--out", str(scen_dir)]
                + (["--valid-min-workers"] if args.valid_min_workers else []),
                check=True,
            )
        files = scenario_files(scen_dir)

        # The oracle, once, over the whole directory.
        op = subprocess.run(
            [args.python, str(HERE / "ray_plan.py"), "--both", "--dir", str(scen_dir), "--out", str(oracle_dir)],
            capture_output=True, text=True,
        )
        if op.returncode not in (0, 1):
            print(f"difftest: the oracle failed (exit {op.returncode}):\n{op.stderr}", file=sys.stderr)
            print(f"0 passed, {len(files)} failed")
            return 1

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda f: run_rayscale(binary, f), files))

        n_exact = n_rule = n_error_agree = 0
        rule_counts = {}
        mismatches = []  # (path, lines)
        errors = []  # (path, message)
        noncanonical = 0
        for f, (rc, stdout, stderr) in zip(files, results):
            (out_dir / (f.stem + ".json")).write_text(stdout)
            if stderr:
                (out_dir / (f.stem + ".stderr")).write_text(stderr)
            of = oracle_dir / (f.stem + ".json")
            if not of.exists():
                errors.append((f, "oracle wrote no output"))
                continue
            oracle = json.loads(of.read_text())
            if "error" in oracle:
                if oracle.get("exit") == 2:
                    if rc == 2 and not stdout.strip():
                        n_error_agree += 1
                    else:
                        mismatches.append((f, [f"oracle: malformed scenario ({oracle['error']})",
                                               f"rayscale: exit {rc}, stdout {stdout.strip()[:200]!r}"]))
                else:
                    errors.append((f, f"oracle error: {oracle['error']}"))
                continue
            if rc is None or rc != 0:
                first = (stderr.strip().splitlines() or [""])[0]
                errors.append((f, f"rayscale exit {rc}: {first[:300]}"))
                continue
            try:
                actual = json.loads(stdout)
            except ValueError as e:
                errors.append((f, f"rayscale printed invalid JSON ({e}): {stdout[:200]!r}"))
                continue
            rules = oracle["rules"]
            expected = oracle["intended"] if rules else oracle["ray"]
            if canon_str(actual) == canon_str(expected):
                if rules:
                    n_rule += 1
                    for r in rules:
                        rule_counts[r] = rule_counts.get(r, 0) + 1
                else:
                    n_exact += 1
                if stdout.strip() != canon_str(expected):
                    noncanonical += 1
            else:
                label = f" (rule {', '.join(rules)}: compared with Ray-as-intended)" if rules else ""
                lines = [f"expected{label} vs rayscale:"] + compact_diff(expected, actual)
                if rules and canon_str(actual) == canon_str(oracle["ray"]):
                    lines.append("(rayscale reproduces Ray's buggy decision)")
                mismatches.append((f, lines))

        total = len(files)
        rule_txt = ", ".join(
            f"{n} under rule {r} ({RULE_DESCRIPTIONS.get(r, 'see ray_plan.py')})" for r, n in sorted(rule_counts.items())
        ) or f"0 under rule MIN_WORKERS_ALIASING ({RULE_DESCRIPTIONS['MIN_WORKERS_ALIASING']})"
        summary = f"difftest: {total} scenarios, {n_exact} exact with Ray, {rule_txt}"
        if n_error_agree:
            summary += f", {n_error_agree} rejected as malformed by both"
        summary += f", {len(mismatches)} mismatches"
        if errors:
            summary += f", {len(errors)} errors"
        print(summary)
        if noncanonical:
            print(f"note: {noncanonical} agreeing outputs were not byte-identical to the canonical JSON")
        for f, lines in mismatches:
            print(f"MISMATCH {f}")
            for line in lines:
                print(f"    {line}")
        for f, msg in errors:
            print(f"ERROR {f}: {msg}")
        if args.keep:
            print(f"kept: {work}")
        passed = n_exact + n_rule + n_error_agree
        failed = len(mismatches) + len(errors)
        print(f"{passed} passed, {failed} failed")
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
