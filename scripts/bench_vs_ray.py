#!/usr/bin/env python3
"""Benchmark `rayscale plan` against Ray 2.60's ResourceDemandScheduler.schedule.

    bench_vs_ray.py --rayscale BIN --scenarios DIR [--ray-timeout SECONDS]
                    [--only a,b,c] [--repeat N] [--markdown FILE]
                    [--skip-ray d,e] [--ray-python PY] [--cpu N]

For every scenario file of DIR (*.yaml, *.yml, *.json, sorted by name; --only
picks the files whose name starts with "<letter>_"):

1. rayscale: the whole process `BIN plan --scenario FILE` (parse + plan + print),
   wall clock measured around the child process with time.perf_counter, best of
   --repeat runs. Peak RSS: one extra run under `/usr/bin/time -f %M` (GNU time's
   maximum resident set size of the child, which is the rayscale process itself:
   started directly, without taskset). RUSAGE_CHILDREN is not used: its ru_maxrss is the
   maximum over all children ever waited for, not a per-child value, so deltas of it
   are meaningless. Without /usr/bin/time the RSS column is "n/a".
2. Ray: in a separate process of the Ray venv's interpreter, the scenario is loaded
   and Ray's SchedulingRequest is built by scripts/ray_plan.py (NOT timed); then ONLY
   `ResourceDemandScheduler(event_logger=None).schedule(request)` is timed with
   time.perf_counter, best of --repeat runs (a single run when one takes more than
   30 s). Logging is disabled below ERROR (logging.disable) so Ray's debug/info
   logging costs nothing. The timeout (--ray-timeout, default 600 s) counts from the
   moment the request is built; a run that does not finish is reported "> T s".
3. Both decisions are compared as canonical JSON. rayscale is compared with the
   "Ray as intended" decision of ray_plan.py (Ray with the known bugs the oracle
   names, e.g. MIN_WORKERS_ALIASING, fixed; computed in the worker after the timed
   runs, untimed, with its own --ray-timeout budget), which equals Ray's own
   decision unless such a bug hits; the table says when it does. A mismatch is
   reported loudly with a short diff.
4. A table: scenario, rayscale s, rayscale peak RSS MiB, Ray schedule() s,
   Ray/rayscale, decisions equal. --markdown FILE writes it as Markdown too.

Both processes are pinned to one core (default 0) through this script's own CPU affinity,
which children inherit.
Run it with any Python 3 (the Ray worker uses --ray-python, default
$(scripts/setup-python.sh)).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from canonical_json import canonical, dumps  # noqa: E402,F401
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
SINGLE_RUN_ABOVE_S = 30.0
DEFAULT_RAY_PY = os.environ.get("RAYSCALE_PYTHON", "/opt/rayscale-venv/bin/python")


# --------------------------------------------------------------------------
# Canonical comparison (no Ray import needed in the parent)
# --------------------------------------------------------------------------


def normalise(dec: dict) -> dict:
    """Canonical decision: lists sorted as the spec says (terminate by instance_id,
    infeasible items by their canonical JSON)."""
    d = canonical(dec)
    out = dict(d)
    if isinstance(d.get("terminate"), list):
        out["terminate"] = sorted(d["terminate"], key=lambda t: (str(t.get("instance_id")), dumps(t)))
    for k in ("infeasible_requests", "infeasible_gang_requests", "infeasible_constraints"):
        if isinstance(d.get(k), list):
            out[k] = sorted(d[k], key=dumps)
    return out


def short_diff(mine: dict, ref: dict, limit: int = 6) -> List[str]:
    """A few human-readable lines describing how `mine` (rayscale) differs from `ref` (Ray)."""
    lines: List[str] = []
    keys = sorted(set(mine) | set(ref))
    for k in keys:
        a, b = mine.get(k), ref.get(k)
        if dumps(a) == dumps(b):
            continue
        if k == "launch" and isinstance(a, dict) and isinstance(b, dict):
            for t in sorted(set(a) | set(b)):
                if a.get(t, 0) != b.get(t, 0):
                    lines.append(f"  launch[{t}]: rayscale {a.get(t, 0)} vs Ray {b.get(t, 0)}")
        elif isinstance(a, list) and isinstance(b, list):
            sa = {dumps(x) for x in a}
            sb = {dumps(x) for x in b}
            only_a = sorted(sa - sb)
            only_b = sorted(sb - sa)
            lines.append(f"  {k}: {len(a)} items (rayscale) vs {len(b)} (Ray); "
                         f"{len(only_a)} only in rayscale, {len(only_b)} only in Ray")
            for x in only_a[:limit]:
                lines.append(f"    + rayscale: {x[:300]}")
            for x in only_b[:limit]:
                lines.append(f"    - Ray:      {x[:300]}")
        else:
            lines.append(f"  {k}: rayscale {dumps(a)[:300]} vs Ray {dumps(b)[:300]}")
    return lines


# --------------------------------------------------------------------------
# Ray worker (runs inside the Ray venv; talks to the parent over stdout lines)
# --------------------------------------------------------------------------


def ray_worker(path: str, repeat: int) -> int:
    logging.disable(logging.WARNING)  # nothing below ERROR is even formatted
    sys.path.insert(0, str(HERE))
    import ray_plan  # noqa: E402  (imports Ray)
    from ray.autoscaler.v2.scheduler import ResourceDemandScheduler  # noqa: E402

    logging.disable(logging.WARNING)  # Ray's import may reconfigure logging

    def emit(tag: str, payload: Any) -> None:
        sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
        sys.stdout.flush()

    t0 = time.perf_counter()
    try:
        scn = ray_plan.load_scenario(path)
        req, real_ids = ray_plan.build_request(scn)
    except ray_plan.ScenarioError as e:
        emit("error", f"scenario error: {e}")
        return 2
    emit("ready", {"build_s": time.perf_counter() - t0})

    decision = None
    for i in range(repeat):
        t = time.perf_counter()
        reply = ResourceDemandScheduler(event_logger=None).schedule(req)
        dt = time.perf_counter() - t
        dec = ray_plan.to_decision(reply, real_ids)
        del reply
        if decision is None:
            decision = dec
        elif ray_plan.dumps(dec) != ray_plan.dumps(decision):
            emit("warn", f"Ray's decision differs between run 1 and run {i + 1}")
        emit("run", dt)
        if dt > SINGLE_RUN_ABOVE_S:
            break
    emit("decision", decision)

    # "Ray as intended" (ray_plan.py's rules, e.g. MIN_WORKERS_ALIASING, fixed),
    # untimed: the decision rayscale must print. Older oracles had a cheap test
    # telling when no rule can matter; otherwise run it.
    possible = getattr(ray_plan, "_aliasing_possible", None)
    if possible is None or possible(req):
        r = ray_plan.run_ray(req, intended=True)
        if isinstance(r, tuple):  # some oracle versions return (reply, aliased)
            r = r[0]
        emit("intended", ray_plan.to_decision(r, real_ids))
    emit("done", None)
    return 0


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------


def pin_self(cpu: Optional[int]) -> bool:
    """Pins this process, and so every child it starts, to `cpu`.

    Children inherit the affinity, so they start without a `taskset` exec in front and
    without a preexec function (which would make Python fork instead of spawn): the timed
    process is rayscale itself. Returns whether pinning happened.
    """
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return False
    os.sched_setaffinity(0, {cpu})
    return True


def run_rayscale(bin_path: str, scen: Path, repeat: int, cpu: Optional[int], timeout: float) -> dict:
    cmd = [bin_path, "plan", "--scenario", str(scen)]
    best = None
    stdout = None
    # Best of `repeat` runs, and of more for fast cases (up to 50 runs within about 1 s),
    # as hyperfine does: start-up noise on a shared machine dwarfs millisecond runs.
    runs = 0
    spent = 0.0
    while runs < repeat or (spent < 1.0 and runs < 50):
        runs += 1
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            t = time.perf_counter()
            p = subprocess.run(cmd, stdout=out, stderr=err, timeout=timeout)
            dt = time.perf_counter() - t
            spent += dt
            if p.returncode != 0:
                err.seek(0)
                return {"error": f"exit {p.returncode}: {err.read().decode(errors='replace').strip()[:500]}"}
            out.seek(0)
            this = out.read().decode()
        if stdout is None:
            stdout = this
        elif this != stdout:
            print(f"  WARNING: rayscale's output differs between runs on {scen.name}", flush=True)
        best = dt if best is None else min(best, dt)
    rss_mib = None
    gnu_time = "/usr/bin/time"
    if os.access(gnu_time, os.X_OK):
        with tempfile.NamedTemporaryFile(suffix=".time") as tf:
            p = subprocess.run([gnu_time, "-f", "%M", "-o", tf.name] + cmd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=timeout)
            if p.returncode == 0:
                try:
                    rss_mib = int(Path(tf.name).read_text().strip().splitlines()[-1]) / 1024.0
                except (ValueError, IndexError):
                    rss_mib = None
    try:
        dec = json.loads(stdout)
    except json.JSONDecodeError as e:
        return {"error": f"rayscale printed no JSON: {e}", "seconds": best, "rss_mib": rss_mib}
    res = {"seconds": best, "rss_mib": rss_mib, "decision": dec}
    if stdout.strip() != dumps(normalise(dec)):
        res["noncanonical"] = True
    return res


def run_ray(ray_python: str, scen: Path, repeat: int, cpu: Optional[int], timeout: float) -> dict:
    cmd = [ray_python, str(Path(__file__).resolve()), "--_ray-worker", str(scen),
                             "--repeat", str(repeat)]
    env = dict(os.environ)
    env.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tempfile.gettempdir(), env=env)
    q: "queue.Queue[Optional[str]]" = queue.Queue()

    def reader():
        for line in p.stdout:
            q.put(line)
        q.put(None)

    err_lines: List[str] = []

    def err_reader():
        for line in p.stderr:
            err_lines.append(line)
            del err_lines[:-20]

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=err_reader, daemon=True).start()

    res: Dict[str, Any] = {"runs": [], "warnings": []}
    deadline = None
    load_deadline = time.monotonic() + max(timeout, 600)  # building the request is not timed
    while True:
        limit = deadline if deadline is not None else load_deadline
        remaining = limit - time.monotonic()
        try:
            line = q.get(timeout=max(0.0, remaining))
        except queue.Empty:
            p.kill()
            p.wait()
            if "decision" in res:
                res["intended_timeout"] = True
            else:
                res["timeout"] = True
            break
        if line is None:
            break
        tag, _, payload = line.rstrip("\n").partition(" ")
        try:
            val = json.loads(payload) if payload else None
        except json.JSONDecodeError:
            continue
        if tag == "ready":
            res["build_s"] = val["build_s"]
            deadline = time.monotonic() + timeout
        elif tag == "run":
            res["runs"].append(val)
        elif tag == "decision":
            res["decision"] = val
            deadline = time.monotonic() + timeout  # the untimed intended run gets its own budget
        elif tag == "intended":
            res["intended"] = val
        elif tag == "warn":
            res["warnings"].append(val)
        elif tag == "error":
            res["error"] = val
        elif tag == "done":
            pass
    if not res.get("timeout"):
        p.wait()
        if p.returncode != 0 and "error" not in res:
            res["error"] = f"Ray worker exit {p.returncode}: {''.join(err_lines)[-800:]}"
    if res["runs"]:
        res["seconds"] = min(res["runs"])
    return res


def fmt_s(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    if x < 0.01:
        return f"{x * 1000:.2f} ms"
    if x < 10:
        return f"{x:.3f} s"
    return f"{x:.1f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--_ray-worker", dest="ray_worker", help=argparse.SUPPRESS)
    ap.add_argument("--rayscale", help="the rayscale binary (copy it: it may be rebuilt under you)")
    ap.add_argument("--scenarios", help="directory of scenario files")
    ap.add_argument("--ray-timeout", type=float, default=600.0, help="seconds for Ray's schedule() (default 600)")
    ap.add_argument("--rayscale-timeout", type=float, default=600.0)
    ap.add_argument("--only", help="comma-separated scenario letters (file name prefix before '_')")
    ap.add_argument("--skip-ray", default="", help="letters for which Ray is not run")
    ap.add_argument("--skip-ray-note", default="not run",
                    help="text for the Ray column of --skip-ray scenarios")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--ray-python", default=DEFAULT_RAY_PY if os.path.exists(DEFAULT_RAY_PY) else sys.executable)
    ap.add_argument("--cpu", type=int, default=0, help="core to pin to (-1: no pinning)")
    args = ap.parse_args(argv)

    if args.ray_worker:
        return ray_worker(args.ray_worker, max(1, args.repeat))
    if not args.rayscale or not args.scenarios:
        ap.error("--rayscale and --scenarios are required")
    cpu = None if args.cpu < 0 else args.cpu

    files = sorted(p for p in Path(args.scenarios).iterdir()
                   if p.suffix in (".yaml", ".yml", ".json") and not p.name.endswith(".expected.json"))
    if args.only:
        want = {x.strip() for x in args.only.split(",") if x.strip()}
        files = [p for p in files if p.name.split("_", 1)[0] in want]
    skip_ray = {x.strip() for x in args.skip_ray.split(",") if x.strip()}

    pin_note = f"pinned to core {cpu}" if pin_self(cpu) else "not pinned"
    print(f"# rayscale: {args.rayscale}; Ray worker: {args.ray_python}; {pin_note}; "
          f"best of {args.repeat}; Ray timeout {args.ray_timeout:g} s; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)

    rows = []
    mismatches = 0
    for scen in files:
        letter = scen.name.split("_", 1)[0]
        print(f"== {scen.name}", flush=True)
        rs = run_rayscale(args.rayscale, scen, max(1, args.repeat), cpu, args.rayscale_timeout)
        if "error" in rs:
            print(f"  rayscale ERROR: {rs['error']}", flush=True)
        else:
            rss = "n/a" if rs["rss_mib"] is None else f"{rs['rss_mib']:.1f} MiB"
            print(f"  rayscale: {fmt_s(rs['seconds'])}, peak RSS {rss}", flush=True)
            if rs.get("noncanonical"):
                print("  NOTE: rayscale's stdout is not byte-identical to the canonical JSON "
                      "(compared after normalising)", flush=True)
        if letter in skip_ray:
            ray = {"skipped": True, "runs": [], "warnings": []}
            print(f"  Ray: {args.skip_ray_note}", flush=True)
        else:
            ray = run_ray(args.ray_python, scen, max(1, args.repeat), cpu, args.ray_timeout)
            if ray.get("timeout"):
                print(f"  Ray: did not finish within {args.ray_timeout:g} s"
                      + (f" (request built in {ray['build_s']:.1f} s)" if "build_s" in ray else ""), flush=True)
            elif "error" in ray:
                print(f"  Ray ERROR: {ray['error']}", flush=True)
            else:
                print(f"  Ray schedule(): runs {[round(x, 3) for x in ray['runs']]} "
                      f"(request built in {ray.get('build_s', 0):.2f} s, untimed)", flush=True)
            if ray.get("intended_timeout"):
                print("  WARNING: the untimed 'Ray as intended' run timed out; comparing with Ray as is",
                      flush=True)
            for w in ray["warnings"]:
                print(f"  Ray WARNING: {w}", flush=True)

        equal = "n/a"
        if "decision" in rs and "decision" in ray:
            ref = ray.get("intended", ray["decision"])
            ref_name = "Ray as intended (ray_plan.py's rules fixed)" if "intended" in ray else "Ray"
            mine = normalise(rs["decision"])
            refn = normalise(ref)
            if dumps(mine) == dumps(refn):
                as_is_differs = "intended" in ray and dumps(normalise(ray["decision"])) != dumps(refn)
                equal = "yes (= intended; Ray as is differs)" if as_is_differs else "yes"
            else:
                equal = "NO"
                mismatches += 1
                print("  " + "!" * 70, flush=True)
                print(f"  !!! DECISIONS DIFFER on {scen.name}: rayscale vs {ref_name}", flush=True)
                for line in short_diff(mine, refn):
                    print(line, flush=True)
                print("  " + "!" * 70, flush=True)
            if "intended" in ray and dumps(normalise(ray["decision"])) != dumps(refn):
                print("  note: Ray's own decision differs from the intended one (a ray_plan.py rule applies):",
                      flush=True)
                for line in short_diff(normalise(ray["decision"]), refn):
                    print("   " + line.replace("rayscale", "Ray as is").replace("vs Ray", "vs intended"),
                          flush=True)

        rs_s = rs.get("seconds")
        if ray.get("skipped"):
            ray_cell, ratio = args.skip_ray_note, "n/a"
        elif ray.get("timeout"):
            ray_cell, ratio = f"> {args.ray_timeout:g} s (timeout)", "n/a"
        elif "seconds" in ray:
            ray_cell = fmt_s(ray["seconds"]) + (" (1 run)" if len(ray["runs"]) == 1 and args.repeat > 1 else "")
            ratio = f"{ray['seconds'] / rs_s:,.0f}x" if rs_s else "n/a"
            if rs_s and ray["seconds"] / rs_s < 10:
                ratio = f"{ray['seconds'] / rs_s:.2f}x"
        else:
            ray_cell, ratio = "error", "n/a"
        rows.append([scen.name, fmt_s(rs_s) if "error" not in rs else "error",
                     "n/a" if rs.get("rss_mib") is None else f"{rs['rss_mib']:.1f}",
                     ray_cell, ratio, equal])

    header = ["scenario", "rayscale (whole process)", "rayscale peak RSS MiB", "Ray schedule()",
              "Ray / rayscale", "decisions equal"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    if args.markdown:
        md = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        md += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
        notes = (f"\nrayscale: wall clock of the whole `plan` process, best of {args.repeat}, {pin_note}; "
                 f"peak RSS by `/usr/bin/time -f %M`. Ray: only `ResourceDemandScheduler.schedule()`, "
                 f"best of {args.repeat} (one run above {SINGLE_RUN_ABOVE_S:g} s), request built untimed.\n")
        Path(args.markdown).write_text("\n".join(md) + "\n" + notes)
    if mismatches:
        print(f"\n!!! {mismatches} scenario(s) where rayscale's decision differs from Ray's", flush=True)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
