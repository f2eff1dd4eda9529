#!/opt/rayscale-venv/bin/python
"""Preemption side by side: Ray 2.60's own v2 autoscaler and rayscale on the same provider
(Ray's FakeMultiNodeProvider: inside Ray's monitor, and behind rayscale's node-provider
adapter), the same workload, the same preemption schedule, in one run.

    /opt/rayscale-venv/bin/python scripts/bench_preempt.py [--runs N]
        [--rayscale BIN] [--deadline S] [--task-secs S] [--json FILE]

The clusters are bench_live.py's D) pair (see its docstring for how each is started and
torn down); rayscale's YAML adds `rayscale: {preemption: {enabled: true}}`. Both loops run
every 5 s (Ray's default period; `rayscale run --interval 5`).

Workload: 2 tasks of {CPU: 2} sleeping --task-secs (default 40 s; Ray retries a task
whose node dies). Once both run (two workers busy), one of the two nodes gets the notice
as a cloud's would reach Ray through rayscale's watcher: a DrainNode with reason
PREEMPTION and a --deadline (default 30 s), sent with Ray's own GcsClient.drain_node;
at the deadline the node's raylet is killed (SIGKILL), as the cloud takes the machine.

Measured (seconds from the notice, GCS polled every 0.1 s):
  replacement launched   first poll where more worker instances are on their way
                         (pending launches and instances of the autoscaler's report,
                         and workers registered since the notice) than at the notice
  replacement registered first poll with a live worker node not among those at the notice
  all tasks done         the driver's ray.get returning
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_live as bl  # noqa: E402

N_TASKS = 2


def kill_node(node_hex: str) -> int:
    """SIGKILLs every process of node `node_hex`: those whose command line or environment
    names it (a fake node's raylet, agents and workers carry
    RAY_OVERRIDE_NODE_ID_FOR_TESTING=<hex>): the machine is gone."""
    n = 0
    needle = node_hex.encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in cmd or b"RAY_OVERRIDE_NODE_ID_FOR_TESTING=" + needle in env:
            try:
                os.kill(int(pid), signal.SIGKILL)
                n += 1
            except OSError:
                pass
    return n


class PreemptRun(bl.Run):
    def workload(self):
        from ray._raylet import GcsClient
        from ray.core.generated import autoscaler_pb2

        a = self.args
        time.sleep(a.settle)
        p = self.popen(
            [sys.executable, str(Path(__file__).resolve()), "--driver", self.gcs, str(a.task_secs)],
            self.env({}), stdout=subprocess.PIPE, stderr=open(self.work / "driver.err", "wb"),
        )
        bl.say(f"{self.kind} #{self.idx}: {N_TASKS} x {{CPU: 2}} tasks of {a.task_secs:g} s")
        deadline = time.time() + 180
        while True:
            s = self.poller.latest()
            busy = [n for n, (st, _, _) in self.workers(s).items() if st == "RUNNING"] if s else []
            if len(busy) >= N_TASKS:
                break
            if time.time() > deadline:
                raise RuntimeError("the tasks did not start on two workers within 180 s")
            time.sleep(0.1)
        time.sleep(2.0)  # both tasks well under way
        s = self.poller.latest()
        before = set(self.workers(s))
        launching = s["q"] + s["a"]
        victim = sorted(n for n, (st, _, _) in self.workers(s).items() if st == "RUNNING")[0]
        t_notice = time.time()
        ok, why = GcsClient(address=self.gcs).drain_node(
            victim,
            autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
            "bench: spot interruption",
            int((t_notice + a.deadline) * 1000),
        )
        if not ok:
            raise RuntimeError(f"the drain was refused: {why}")
        bl.say(f"{self.kind} #{self.idx}: notice to {victim[:8]}, deadline {a.deadline:g} s")
        time.sleep(max(0.0, t_notice + a.deadline - time.time()))
        killed = kill_node(victim)
        bl.say(f"{self.kind} #{self.idx}: node {victim[:8]} taken ({killed} processes killed)")
        out, _ = p.communicate(timeout=a.timeout)
        if p.returncode != 0:
            raise RuntimeError("the driver failed: " + (self.work / "driver.err").read_text(errors="replace")[-2000:])
        line = [l for l in out.decode(errors="replace").splitlines() if l.startswith("RSB_RESULT ")][-1]
        d = json.loads(line[len("RSB_RESULT "):])
        S = list(self.poller.samples)
        after = [x for x in S if x["t"] >= t_notice]
        first = lambda pred: next((x["t"] - t_notice for x in after if pred(x)), None)  # noqa: E731
        r = self.result
        r["replacement_launched"] = first(
            lambda x: x["q"] + x["a"] + len(set(self.workers(x)) - before) > launching
        )
        r["replacement_registered"] = first(lambda x: len(set(self.workers(x)) - before) >= 1)
        r["victim_dead"] = first(lambda x: victim not in self.workers(x))
        r["done"] = d["t_done"] - t_notice
        r["total"] = d["t_done"] - d["t_submit"]

    def analyse(self):
        pass


def driver(address: str, secs: float) -> int:
    bl.N_TASKS, bl.TASK_SECS = N_TASKS, secs
    return bl.driver_main(address)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", nargs=2, metavar=("GCS", "SECS"), help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--rayscale", default=str(bl.REPO / "target" / "release" / "rayscale"))
    ap.add_argument("--deadline", type=float, default=30.0)
    ap.add_argument("--task-secs", type=float, default=40.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.driver:
        return driver(a.driver[0], float(a.driver[1]))
    # bench_live's knobs the Run reads.
    a.interval, a.poll, a.settle, a.timeout, a.idle_wait, a.keep = 5, 0.1, 2.0, 400, 60, False
    a.ray_update_interval = None
    bl.RAYSCALE_FMN_YAML = bl.RAYSCALE_FMN_YAML.replace(
        "rayscale:\n  bridge:", "rayscale:\n  preemption: {{enabled: true}}\n  bridge:"
    )
    results: List[Dict[str, Any]] = []
    for i in range(a.runs):
        for kind in ("ray", "rayscale-fmn"):
            run = PreemptRun(kind, i + 1, a, Path(a.rayscale))
            results.append(run.execute())
    print("| run | replacement launched | replacement registered | node gone | all tasks done | job total |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        f = lambda k: "-" if r.get(k) is None else f"{r[k]:.1f}"  # noqa: E731
        name = "Ray" if r["kind"] == "ray" else "rayscale"
        err = f" ({r['error']})" if r.get("error") else ""
        print(f"| {name} #{r['run']}{err} | {f('replacement_launched')} | {f('replacement_registered')} "
              f"| {f('victim_dead')} | {f('done')} | {f('total')} |")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
