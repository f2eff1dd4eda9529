#!/opt/rayscale-venv/bin/python
"""Live latency benchmark: rayscale against Ray 2.60's own v2 autoscaler, same machine,
same run.

    /opt/rayscale-venv/bin/python scripts/bench_live.py [--runs N] [--first ray|rayscale]
        [--only ray|rayscale] [--rayscale BIN] [--interval S] [--poll S] [--json FILE]
        [--keep]

Workload (identical under both autoscalers): a head with no CPUs, one worker node type
{CPU: 2} with max 4 workers, idle_timeout_minutes 0.25 (15 s), upscaling_speed 100; a
driver (a child process) submits 8 tasks of {CPU: 2} that each sleep 5 s.

A) Ray: a head started with `ray start --head --autoscaling-config=...` and the
   environment of `ray.cluster_utils.AutoscalingCluster(autoscaler_v2=True)`
   (RAY_FAKE_CLUSTER=1, RAY_enable_autoscaler_v2=1, RAY_CLOUD_INSTANCE_ID and
   RAY_OVERRIDE_NODE_ID_FOR_TESTING = the fake head id), so the head runs Ray's own v2
   monitor (ray/autoscaler/v2/monitor.py) with the fake multi-node provider, whose workers
   are raylets the monitor starts itself. The wheel lacks fake_multi_node/example.yaml
   (the defaults file of provider type `fake_multinode`, so that type cannot load: a
   FileNotFoundError in prepare_config), so the provider is given as
   `type: external, module: ray.autoscaler._private.fake_multi_node.node_provider.
   FakeMultiNodeProvider`: the same class behind the same NodeProviderAdapter (both types
   are Provider.UNKNOWN to v2), with the example.yaml keys written out in full.
   Ray's loop period is its default AUTOSCALER_UPDATE_INTERVAL_S = 5 s
   (AutoscalingCluster sets 1 s for tests; --ray-update-interval changes it).
B) rayscale: a plain head (`ray start --head ... --num-cpus=0`), a cluster YAML with
   `provider: {type: local_processes}` and `rayscale run --config Y --gcs 127.0.0.1:P
   --ray <venv>/bin/ray --interval 5` (a snapshot copy of the binary, so a concurrent
   cargo build cannot swap it mid-run); its workers are `ray start --block` processes.
   Known problem this exposes: the 4 workers start at the same moment and share the
   head's session dir, where Ray 2.60 names each node's plasma-store socket by taking
   the first free `sockets/plasma_store.N` (check-then-bind, not atomic across
   processes); two `ray start`s can pick the same name and the loser's raylet dies
   ("bind: Address already in use" in PlasmaStore::PlasmaStore), which `ray start`
   only reports when its 30 s registration wait runs out.
D) --fake-multinode runs Ray (A) against "rayscale-fmn": rayscale driving the same
   FakeMultiNodeProvider class through its node-provider adapter and Python bridge
   (`provider: {type: fake_multinode}`), with a head started as A's (the fake head id,
   RAY_FAKE_CLUSTER=1) but with --no-monitor: the same provider and the same in-process
   raylet boots on both sides, so the autoscalers' latencies compare fairly.
C) --also-own-temp-dirs adds a variant "rayscale-ut" (a benchmark-side workaround, NOT
   rayscale as shipped): rayscale is given a `ray` wrapper that adds a per-worker
   `--temp-dir` to `ray start`, so every worker has its own session dir and sockets.

Measurement (identical for both): a thread polls the GCS every --poll s (default 0.1)
with the raw GetClusterStatus RPC (ray._raylet.GcsClient.get_cluster_status), which
returns the GCS's live node table (cluster_resource_state) and the last state the
autoscaler reported with ReportAutoscalingState (autoscaling_state). Times are seconds
from the driver's task submission (time.time() just before the .remote() calls).

  demand      first poll showing pending_resource_requests after submission
  launch k    first poll at which k distinct worker instances exist: pending launches
              (pending_instance_requests, QUEUED/REQUESTED) + pending nodes
              (pending_instances, ALLOCATED) of the last report + the worker nodes the
              autoscaler had seen registered when it made that report (the GCS node
              count at the report's last_seen_cluster_resource_state_version, as the
              poller recorded it), and never less than the workers registered now.
              This counts an instance once even while the report lags the node table.
  first reg   first poll with a live worker node in the GCS
  done        the driver's ray.get returning (driver clock = same host clock)
  zero        first poll after `done` with no live worker node in the GCS
  floor       first reg - launch 1 (how long the provider takes to bring a worker up)
  idle excess per worker: (poll at which it left the GCS) - (idle since, from the node's
              idle_duration_ms at its last live poll) - 15 s; the max over workers
  log launch k  the same launch figures from the autoscalers' own logs: rayscale's
              "HH:MM:SS.mmm rayscale: launching N x worker" lines (UTC), Ray's
              monitor.log "Launching N nodes of type worker." lines (NodeProviderAdapter,
              the moment the v1 provider is called)

Teardown (also on Ctrl-C, SIGTERM and errors): every process started for a cluster
carries RSB_BENCH_TAG=<unique tag> in its environment (the head, its raylets and workers,
Ray's monitor and the raylets it starts, rayscale and the `ray start --block` workers
it starts, the driver); they are found through /proc/*/environ (and, belt and braces,
by the temp dir in their command line and RAYSCALE_CLUSTER=<cluster> in their
environment) and get SIGTERM, then SIGKILL. `ray stop` is never run. Nothing else on the
machine is touched.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TAG_ENV = "RSB_BENCH_TAG"
FAKE_HEAD_NODE_ID = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000"
WORKER_TYPE = "worker"
IDLE_TIMEOUT_S = 15.0
N_TASKS, TASK_CPUS, TASK_SECS = 8, 2, 5.0
N_WORKERS = 4


def die(msg: str, code: int = 2) -> None:
    print(f"bench_live: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- driver mode


def driver_main(address: str) -> int:
    """The workload, run in a child process: prints one JSON line."""
    import ray

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")

    @ray.remote(num_cpus=TASK_CPUS)
    def work(i):
        t0 = time.time()
        time.sleep(TASK_SECS)
        return (i, ray.get_runtime_context().get_node_id(), t0, time.time())

    t_submit = time.time()
    refs = [work.remote(i) for i in range(N_TASKS)]
    res = ray.get(refs)
    t_done = time.time()
    print(
        "RSB_RESULT " + json.dumps(
            {
                "t_submit": t_submit,
                "t_done": t_done,
                "tasks": [
                    {"i": i, "node": n, "start": s, "end": e} for (i, n, s, e) in res
                ],
            }
        ),
        flush=True,
    )
    ray.shutdown()
    return 0


# --------------------------------------------------------------------------- processes


def free_ports(n: int) -> List[int]:
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
            socks.append(s)
            if p not in ports:
                ports.append(p)
    finally:
        for s in socks:
            s.close()
    return ports


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def scan_procs(tag: str, temp_dir: Optional[str], cluster: Optional[str]) -> Dict[int, str]:
    """pid -> short command line of the live processes that belong to a cluster."""
    me = os.getpid()
    tag_b = f"{TAG_ENV}={tag}".encode()
    cl_b = f"RAYSCALE_CLUSTER={cluster}".encode() if cluster else None
    tmp_b = temp_dir.encode() if temp_dir else None
    found: Dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        if pid == me:
            continue
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            continue
        try:
            state = stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3]
        except ValueError:
            state = b"?"
        if state == b"Z":
            continue
        env = _read(f"/proc/{pid}/environ").split(b"\0")
        cmd = _read(f"/proc/{pid}/cmdline")
        hit = tag_b in env or (cl_b is not None and cl_b in env)
        if not hit and tmp_b is not None and tmp_b in cmd:
            hit = True
        if hit:
            found[pid] = cmd.replace(b"\0", b" ").decode(errors="replace")[:120]
    return found


def kill_procs(tag: str, temp_dir: Optional[str], cluster: Optional[str], first: List[int] = ()) -> List[str]:
    """SIGTERM then SIGKILL every process of the cluster; returns what survived (if any)."""
    for pid in first:  # the autoscaler first, so it launches nothing more
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    if first:
        deadline = time.time() + 5
        while time.time() < deadline and any(_alive(p) for p in first):
            time.sleep(0.1)
    for sig, wait in ((signal.SIGTERM, 8.0), (signal.SIGKILL, 5.0)):
        procs = scan_procs(tag, temp_dir, cluster)
        if not procs:
            return []
        for pid in procs:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + wait
        while time.time() < deadline and scan_procs(tag, temp_dir, cluster):
            time.sleep(0.2)
    left = scan_procs(tag, temp_dir, cluster)
    return [f"{p} {c}" for p, c in left.items()]


def _alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


def foreign_ray_procs() -> int:
    """Raylets/GCS servers on the machine not started by this script (load caveat)."""
    n = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        cmd = _read(f"/proc/{d}/cmdline")
        if b"/raylet" in cmd.split(b"\0")[0] or b"gcs_server" in cmd.split(b"\0")[0]:
            if f"{TAG_ENV}=".encode() not in _read(f"/proc/{d}/environ"):
                n += 1
    return n


# --------------------------------------------------------------------------- poller


class Poller(threading.Thread):
    """Polls GetClusterStatus and records one sample per poll."""

    def __init__(self, gcs: str, period: float):
        super().__init__(daemon=True)
        self.gcs, self.period = gcs, period
        self.samples: List[Dict[str, Any]] = []
        self.errors = 0
        self.head_ids: set = set()
        self._stop_ev = threading.Event()
        self.lock = threading.Lock()

    def stop(self):
        self._stop_ev.set()

    def latest(self) -> Optional[Dict[str, Any]]:
        with self.lock:
            return self.samples[-1] if self.samples else None

    def run(self):
        from ray._raylet import GcsClient
        from ray.core.generated.autoscaler_pb2 import GetClusterStatusReply, NodeStatus

        client = GcsClient(address=self.gcs)
        dead = NodeStatus.Value("DEAD")
        while not self._stop_ev.is_set():
            t0 = time.time()
            try:
                raw = client.get_cluster_status(timeout_s=2)
                t1 = time.time()
                rep = GetClusterStatusReply()
                rep.ParseFromString(raw)
                crs, ast = rep.cluster_resource_state, rep.autoscaling_state
                alive = {}
                for ns in crs.node_states:
                    if ns.status == dead:
                        continue
                    alive[ns.node_id.hex()] = (
                        NodeStatus.Name(ns.status),
                        int(ns.idle_duration_ms),
                        ns.instance_id,
                    )
                demand = sum(
                    int(r.count) for r in crs.pending_resource_requests
                )
                q = sum(int(p.count) for p in ast.pending_instance_requests)
                a = len(ast.pending_instances)
                s = {
                    "t": (t0 + t1) / 2,
                    "ver": int(crs.cluster_resource_state_version),
                    "alive": alive,
                    "demand": demand,
                    "asv": int(ast.autoscaler_state_version),
                    "seen": int(ast.last_seen_cluster_resource_state_version),
                    "q": q,
                    "a": a,
                    "failed": len(ast.failed_instance_requests),
                }
                with self.lock:
                    self.samples.append(s)
            except Exception:
                self.errors += 1
            rest = self.period - (time.time() - t0)
            if rest > 0:
                self._stop_ev.wait(rest)


# --------------------------------------------------------------------------- clusters


def ray_cluster_config(gcs: str) -> Dict[str, Any]:
    """AutoscalingCluster(autoscaler_v2=True)'s config, with the benchmark's node types."""
    return {
        "cluster_name": "fake_multinode",
        "max_workers": N_WORKERS,
        "provider": {
            "type": "external",
            "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "launch_multiple": True,
            "head_node_id": FAKE_HEAD_NODE_ID,
            "gcs_address": gcs,
        },
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            WORKER_TYPE: {
                "resources": {"CPU": TASK_CPUS},
                "node_config": {},
                "min_workers": 0,
                "max_workers": N_WORKERS,
            },
        },
        "head_node_type": "ray.head.default",
        "auth": {},
        "upscaling_speed": 100,
        "idle_timeout_minutes": IDLE_TIMEOUT_S / 60,
        "docker": {},
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
    }


RAYSCALE_FMN_YAML = """\
# written by scripts/bench_live.py: Ray's fake_multinode provider through rayscale's bridge
cluster_name: {name}
max_workers: {n}
upscaling_speed: 100
idle_timeout_minutes: 0.25
head_node_type: ray.head.default
provider:
  type: fake_multinode
  head_node_id: {head}
rayscale:
  bridge: {{python: {python}}}
available_node_types:
  ray.head.default:
    resources: {{CPU: 0}}
    node_config: {{}}
    max_workers: 0
  {worker}:
    resources: {{CPU: {cpus}}}
    min_workers: 0
    max_workers: {n}
    node_config: {{}}
"""

RAYSCALE_YAML = """\
# written by scripts/bench_live.py (the shape of examples/local-cluster.yaml)
cluster_name: {name}
max_workers: {n}
upscaling_speed: 100
idle_timeout_minutes: 0.25
head_node_type: head
provider:
  type: local_processes
available_node_types:
  head:
    resources: {{CPU: 0}}
    node_config: {{}}
  worker:
    resources: {{CPU: {cpus}}}
    min_workers: 0
    max_workers: {n}
    node_config: {{}}
"""


class Run:
    """One benchmark run of one autoscaler: start, workload, measure, tear down."""

    def __init__(self, kind: str, idx: int, args, rayscale_bin: Optional[Path]):
        self.kind, self.idx, self.args = kind, idx, args
        self.rayscale_bin = rayscale_bin
        self.ray_bin = str(Path(sys.executable).parent / "ray")
        self.is_rs = kind.startswith("rayscale")
        self.tag = f"rsb{os.getpid()}-{kind}-{idx}"
        letter = {"ray": "r", "rayscale": "s", "rayscale-fmn": "f"}.get(kind, "u")
        self.temp_dir = f"/tmp/rsb-{os.getpid()}-{letter}{idx}"
        self.cluster = f"rsb-{os.getpid()}-{letter}{idx}" if self.is_rs else None
        self.work = Path(tempfile.mkdtemp(prefix=f"rsb-{os.getpid()}-{kind}{idx}-work-"))
        self.autoscaler: Optional[subprocess.Popen] = None
        self.children: List[subprocess.Popen] = []
        self.poller: Optional[Poller] = None
        self.result: Dict[str, Any] = {"kind": kind, "run": idx}
        self.log_lines: List[str] = []

    # ---- helpers
    def env(self, extra: Dict[str, str]) -> Dict[str, str]:
        e = dict(os.environ)
        for k in ("RAY_ADDRESS", "RAY_enable_autoscaler_v2", "RAY_FAKE_CLUSTER"):
            e.pop(k, None)
        e.update({TAG_ENV: self.tag, "RAY_USAGE_STATS_ENABLED": "0"})
        e.update(extra)
        return e

    def popen(self, cmd, env, **kw) -> subprocess.Popen:
        p = subprocess.Popen(cmd, env=env, start_new_session=True, **kw)
        self.children.append(p)
        return p

    # ---- phases
    def start_head(self):
        port, client_port, agent_port, metric_port = free_ports(4)
        self.gcs = f"127.0.0.1:{port}"
        cmd = [
            self.ray_bin, "start", "--head", "--node-ip-address=127.0.0.1",
            f"--port={port}", "--num-cpus=0", "--include-dashboard=false",
            "--disable-usage-stats", f"--temp-dir={self.temp_dir}",
            f"--ray-client-server-port={client_port}",
            f"--dashboard-agent-listen-port={agent_port}",
        ]
        extra: Dict[str, str] = {}
        if self.kind == "rayscale-fmn":
            cmd.append("--no-monitor")
            extra = {
                "RAY_FAKE_CLUSTER": "1",
                "RAY_enable_autoscaler_v2": "1",
                "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
                "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID,
                "RAY_NODE_TYPE_NAME": "ray.head.default",
            }
        if self.kind == "ray":
            cfg = self.work / "ray-autoscaling.json"
            cfg.write_text(json.dumps(ray_cluster_config(self.gcs), indent=1))
            cmd.append(f"--autoscaling-config={cfg}")
            extra = {
                "RAY_FAKE_CLUSTER": "1",
                "RAY_enable_autoscaler_v2": "1",
                "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
                "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID,
                "AUTOSCALER_METRIC_PORT": str(metric_port),
            }
            if self.args.ray_update_interval is not None:
                extra["AUTOSCALER_UPDATE_INTERVAL_S"] = str(self.args.ray_update_interval)
        say(f"{self.kind} #{self.idx}: ray start --head on {self.gcs} (temp dir {self.temp_dir})")
        t0 = time.time()
        with open(self.work / "ray-start-head.log", "wb") as out:
            p = self.popen(cmd, self.env(extra), stdout=out, stderr=subprocess.STDOUT)
            try:
                rc = p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise RuntimeError("ray start --head did not return within 120 s")
        if rc != 0:
            tail = (self.work / "ray-start-head.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"ray start --head failed (exit {rc}):\n{tail}")
        self.result["head_start_s"] = time.time() - t0

    def start_autoscaler(self):
        if self.is_rs:
            yaml_path = self.work / "cluster.yaml"
            if self.kind == "rayscale-fmn":
                yaml_path.write_text(RAYSCALE_FMN_YAML.format(
                    name=self.cluster, n=N_WORKERS, cpus=TASK_CPUS, head=FAKE_HEAD_NODE_ID,
                    python=sys.executable, worker=WORKER_TYPE))
            else:
                yaml_path.write_text(RAYSCALE_YAML.format(name=self.cluster, n=N_WORKERS, cpus=TASK_CPUS))
            self.rayscale_log = self.work / "rayscale.log"
            ray_for_workers = self.ray_bin
            if self.kind == "rayscale-ut":
                # Benchmark-side workaround, not rayscale's behaviour: give every worker
                # its own --temp-dir (so its own session dir and socket files), so that
                # concurrent `ray start`s do not race for the same plasma_store.N socket
                # name in the head's session dir (see the docstring). `$$` is the pid
                # that `exec` hands to `ray start`.
                ray_for_workers = str(self.work / "ray-own-temp-dir")
                Path(ray_for_workers).write_text(
                    "#!/bin/sh\n"
                    'if [ "$1" = start ]; then\n'
                    f'  exec {self.ray_bin} "$@" --temp-dir={self.temp_dir}/w$$\n'
                    "fi\n"
                    f'exec {self.ray_bin} "$@"\n'
                )
                os.chmod(ray_for_workers, 0o755)
            cmd = [
                str(self.rayscale_bin), "run", "--config", str(yaml_path), "--gcs", self.gcs,
                "--ray", ray_for_workers, "--interval", str(self.args.interval),
            ]
            say(f"{self.kind} #{self.idx}: {' '.join(cmd)}")
            self._as_log = open(self.rayscale_log, "wb")
            # The bridge and the raylets it starts inherit the cluster marker.
            self.autoscaler = self.popen(
                cmd, self.env({"RAYSCALE_CLUSTER": self.cluster}),
                stdout=subprocess.DEVNULL, stderr=self._as_log,
            )
        # Both: wait for the autoscaler's first ReportAutoscalingState.
        deadline = time.time() + 90
        while time.time() < deadline:
            s = self.poller.latest()
            if s is not None and s["asv"] > 0:
                self.result["autoscaler_ready_s"] = time.time() - self.t_head_up
                return
            if self.autoscaler is not None and self.autoscaler.poll() is not None:
                raise RuntimeError(
                    f"rayscale exited with {self.autoscaler.returncode}: "
                    + self.rayscale_log.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.2)
        raise RuntimeError("the autoscaler made no report to the GCS within 90 s")

    def start_poller(self):
        self.poller = Poller(self.gcs, self.args.poll)
        self.poller.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            s = self.poller.latest()
            if s is not None and s["alive"]:
                self.poller.head_ids = set(s["alive"])
                self.t_head_up = time.time()
                return
            time.sleep(0.1)
        raise RuntimeError("the GCS did not answer GetClusterStatus within 30 s")

    def workload(self):
        time.sleep(self.args.settle)
        self.result["load_before"] = os.getloadavg()
        self.result["foreign_ray_procs"] = foreign_ray_procs()
        say(f"{self.kind} #{self.idx}: driver submits {N_TASKS} x {{CPU: {TASK_CPUS}}} tasks of {TASK_SECS:g} s")
        p = self.popen(
            [sys.executable, str(Path(__file__).resolve()), "--driver", self.gcs],
            self.env({}), stdout=subprocess.PIPE, stderr=open(self.work / "driver.err", "wb"),
        )
        try:
            out, _ = p.communicate(timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the driver did not finish within {self.args.timeout} s")
        if p.returncode != 0:
            raise RuntimeError(
                f"the driver failed (exit {p.returncode}): "
                + (self.work / "driver.err").read_text(errors="replace")[-2000:]
            )
        lines = [l for l in out.decode(errors="replace").splitlines() if l.startswith("RSB_RESULT ")]
        if not lines:
            raise RuntimeError(f"the driver printed no result: {out[-2000:]!r}")
        d = json.loads(lines[-1][len("RSB_RESULT "):])
        self.drv = d
        say(f"{self.kind} #{self.idx}: tasks done after {d['t_done'] - d['t_submit']:.1f} s; waiting for zero workers")
        # Wait until no worker is live AND the autoscaler reports nothing pending, stably
        # for `quiet` s (longer than either loop period), so that a worker still starting
        # after the tasks (a relaunch) is seen registering and leaving too.
        quiet = max(6.0, self.args.interval + 1.0)
        deadline = time.time() + self.args.idle_wait
        calm_since = None
        while time.time() < deadline:
            s = self.poller.latest()
            calm = s is not None and s["t"] > d["t_done"] and not self.workers(s) and s["q"] + s["a"] == 0
            if not calm:
                calm_since = None
            elif calm_since is None:
                calm_since = time.time()
            elif time.time() - calm_since >= quiet:
                break
            time.sleep(0.2)
        else:
            say(f"{self.kind} #{self.idx}: workers still up {self.args.idle_wait:g} s after the tasks")
        time.sleep(0.5)
        self.result["load_after"] = os.getloadavg()

    def workers(self, s) -> Dict[str, Any]:
        return {k: v for k, v in s["alive"].items() if k not in self.poller.head_ids}

    # ---- analysis
    def analyse(self):
        d, S = self.drv, list(self.poller.samples)
        t0 = d["t_submit"]
        r = self.result
        r["t_submit"] = t0
        r["done"] = d["t_done"] - t0
        r["poll_samples"] = len(S)
        r["poll_errors"] = self.poller.errors
        r["poll_period_median_ms"] = (
            statistics.median([b["t"] - a["t"] for a, b in zip(S, S[1:])]) * 1000 if len(S) > 1 else None
        )
        r["tasks_nodes"] = len({t["node"] for t in d["tasks"]})
        # registered workers per cluster-state version, as the poller saw them
        vers = [(s["ver"], len(self.workers(s))) for s in S]

        def reg_at(version: int) -> int:
            best = None
            for v, n in vers:
                if v <= version and (best is None or v >= best[0]):
                    best = (v, n)
            return best[1] if best else 0

        rel = lambda t: None if t is None else t - t0  # noqa: E731
        first = lambda pred: next((s["t"] for s in S if s["t"] >= t0 and pred(s)), None)  # noqa: E731
        r["demand"] = rel(first(lambda s: s["demand"] > 0))
        counts = []
        for s in S:
            n_now = len(self.workers(s))
            counts.append(max(n_now, s["q"] + s["a"] + (reg_at(s["seen"]) if s["asv"] > 0 else 0)))
        for k in range(1, N_WORKERS + 1):
            r[f"launch{k}"] = rel(next((s["t"] for s, c in zip(S, counts) if s["t"] >= t0 and c >= k), None))
        r["max_instances"] = max(counts) if counts else 0
        r["first_reg"] = rel(first(lambda s: len(self.workers(s)) >= 1))
        r["all_reg"] = rel(first(lambda s: len(self.workers(s)) >= N_WORKERS))
        # the last transition to zero live workers after the tasks (a worker registering
        # after a first "zero" moves it)
        zero = None
        for s in S:
            if s["t"] <= d["t_done"]:
                continue
            if self.workers(s):
                zero = None
            elif zero is None:
                zero = s["t"]
        r["zero"] = rel(zero)
        r["floor"] = None if r["first_reg"] is None or r["launch1"] is None else r["first_reg"] - r["launch1"]
        r["zero_after_done"] = None if r["zero"] is None else r["zero"] - r["done"]
        r["failed_requests"] = max((s["failed"] for s in S), default=0)
        # per worker: registration, idle since, gone
        per: Dict[str, Dict[str, Any]] = {}
        for s in S:
            w = self.workers(s)
            for nid, (status, idle_ms, inst) in w.items():
                e = per.setdefault(nid, {"reg": s["t"], "gone": None, "instance": inst})
                e["last"] = s["t"]
                e["status"] = status
                e["idle_since"] = s["t"] - idle_ms / 1000.0 if status == "IDLE" else None
            for nid, e in per.items():
                if e["gone"] is None and nid not in w:
                    e["gone"] = s["t"]
        excess = []
        for nid, e in per.items():
            if e["gone"] is not None and e.get("idle_since") is not None:
                e["idle_excess"] = e["gone"] - e["idle_since"] - IDLE_TIMEOUT_S
                excess.append(e["idle_excess"])
        r["idle_excess_max"] = max(excess) if excess else None
        r["workers_seen"] = len(per)
        r["workers"] = {
            f"{nid[:4]}..{nid[-4:]}": {
                "reg": rel(e["reg"]),
                "idle_since": rel(e.get("idle_since")),
                "gone": rel(e["gone"]),
                "idle_excess": e.get("idle_excess"),
            }
            for nid, e in per.items()
        }
        # log-based launch times
        r.update(self.log_launches(t0))

    def log_launches(self, t0: float) -> Dict[str, Any]:
        events: List[tuple] = []  # (time, count)
        out: Dict[str, Any] = {}
        if self.is_rs:
            text = self.rayscale_log.read_text(errors="replace") if self.rayscale_log.exists() else ""
            self.log_lines = [l for l in text.splitlines() if re.search(r"launching|draining|terminat|error|failed", l)]
            out["provider_errors"] = len(re.findall(r"rayscale: provider error", text))
            day = _dt.datetime.fromtimestamp(t0, _dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
            for m in re.finditer(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) rayscale: launching (\d+) x (\S+)", text, re.M):
                h, mi, se, ms, n, typ = m.groups()
                t = day.timestamp() + int(h) * 3600 + int(mi) * 60 + int(se) + int(ms) / 1000
                if t - t0 > 43200:
                    t -= 86400
                elif t0 - t > 43200:
                    t += 86400
                events.append((t, int(n)))
        else:
            path = Path(self.temp_dir) / "session_latest" / "logs" / "monitor.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            self.log_lines = [
                l for l in text.splitlines()
                if re.search(r"Launching \d+ nodes|Launched \d+ nodes|Failed to launch|->(REQUESTED|RAY_RUNNING|TERMINATING|TERMINATED|RAY_STOP_REQUESTED|ALLOCATION_FAILED)", l)
            ]
            out["provider_errors"] = len(re.findall(r"Failed to launch|->ALLOCATION_FAILED", text))
            for m in re.finditer(
                r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\s+INFO \S+ -- Launching (\d+) nodes of type (\S+)\.", text, re.M
            ):
                ts, ms, n, typ = m.groups()
                t = time.mktime(time.strptime(ts, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000
                events.append((t, int(n)))
        events.sort()
        total = 0
        for t, n in events:
            if t < t0 - 30:
                continue
            for k in range(total + 1, min(total + n, N_WORKERS) + 1):
                out[f"log_launch{k}"] = t - t0
            total += n
        out["log_launch_batches"] = [(round(t - t0, 3), n) for t, n in events]
        return out

    # ---- teardown
    def teardown(self):
        if self.poller is not None:
            self.poller.stop()
        first = [self.autoscaler.pid] if self.autoscaler is not None and self.autoscaler.poll() is None else []
        left = kill_procs(self.tag, self.temp_dir, self.cluster, first)
        for p in self.children:
            try:
                p.wait(timeout=5)
            except Exception:
                try:
                    p.kill()
                    p.wait(timeout=5)
                except Exception:
                    pass
        if getattr(self, "_as_log", None):
            self._as_log.close()
        if self.poller is not None:
            self.poller.join(timeout=5)
        if left:
            say(f"WARNING: processes of {self.tag} survived SIGKILL: {left}")
        self.result["leftover_procs"] = left
        if not self.args.keep:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            shutil.rmtree(self.work, ignore_errors=True)
            if self.cluster:
                shutil.rmtree(Path(tempfile.gettempdir()) / f"rayscale-{self.cluster}", ignore_errors=True)
        else:
            say(f"kept {self.temp_dir} and {self.work}")

    def execute(self) -> Dict[str, Any]:
        try:
            self.start_head()
            self.start_poller()
            self.start_autoscaler()
            self.workload()
            self.analyse()
        except Exception as e:  # a failed run is reported, the others go on
            self.result["error"] = f"{type(e).__name__}: {e}"
            say(f"{self.kind} #{self.idx}: FAILED: {self.result['error']}")
        finally:
            self.teardown()
        return self.result


# --------------------------------------------------------------------------- report

METRICS = [
    ("demand", "demand visible in GCS", "GCS poll"),
    ("launch1", "launch request 1", "GCS poll (autoscaler report)"),
    ("launch2", "launch request 2", "GCS poll (autoscaler report)"),
    ("launch3", "launch request 3", "GCS poll (autoscaler report)"),
    ("launch4", "launch request 4", "GCS poll (autoscaler report)"),
    ("log_launch1", "launch 1 (log)", "autoscaler log"),
    ("log_launch2", "launch 2 (log)", "autoscaler log"),
    ("log_launch3", "launch 3 (log)", "autoscaler log"),
    ("log_launch4", "launch 4 (log)", "autoscaler log"),
    ("first_reg", "first worker registered", "GCS poll (node table)"),
    ("all_reg", "4th worker registered", "GCS poll (node table)"),
    ("done", "all tasks done", "driver clock"),
    ("zero", "back to zero workers", "GCS poll (node table)"),
    ("floor", "provider floor (reg1 - launch1)", "GCS poll"),
    ("zero_after_done", "zero workers - done", "GCS poll + driver"),
    ("idle_excess_max", "idle excess over 15 s (max)", "GCS poll (idle_duration_ms)"),
]


def fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def report(results: List[Dict[str, Any]]) -> None:
    ok = [r for r in results if "error" not in r]
    ray = [r for r in ok if r["kind"] == "ray"]
    rs = [r for r in ok if r["kind"] in ("rayscale", "rayscale-fmn")]
    us = [r for r in ok if r["kind"] == "rayscale-ut"]
    print()
    print(f"Medians over {len(ray)} Ray run(s) and {len(rs)} rayscale run(s); seconds from task submission")
    print(f"{'metric':34} {'Ray':>8} {'rayscale':>9} {'Ray/rayscale':>13}  method")
    for key, label, method in METRICS:
        a, b = median([r.get(key) for r in ray]), median([r.get(key) for r in rs])
        ratio = "-" if a is None or b is None or b <= 0 else f"{a / b:.2f}"
        print(f"{label:34} {fmt(a):>8} {fmt(b):>9} {ratio:>13}  {method}")
    if us:
        print()
        print(f"Variant (benchmark-side workaround, not rayscale as shipped): rayscale whose `ray start` "
              f"workers each get their own --temp-dir; medians over {len(us)} run(s)")
        print(f"{'metric':34} {'Ray':>8} {'rs-tmp':>9} {'Ray/rs-tmp':>13}")
        for key, label, method in METRICS:
            a, b = median([r.get(key) for r in ray]), median([r.get(key) for r in us])
            ratio = "-" if a is None or b is None or b <= 0 else f"{a / b:.2f}"
            print(f"{label:34} {fmt(a):>8} {fmt(b):>9} {ratio:>13}")
    print()
    print("Per run (seconds from task submission):")
    cols = ["demand", "launch1", "launch2", "launch3", "launch4", "log_launch1", "log_launch4",
            "first_reg", "all_reg", "done", "zero", "floor", "idle_excess_max"]
    short = ["demand", "L1", "L2", "L3", "L4", "logL1", "logL4", "reg1", "reg4", "done", "zero", "floor", "idleX"]
    print(f"{'run':16} " + " ".join(f"{c:>6}" for c in short) + "  load1 before/after  other-raylets  launch-errors")
    for r in results:
        name = f"{r['kind']} #{r['run']}"
        if "error" in r:
            print(f"{name:16} FAILED: {r['error'][:200]}")
            continue
        lb, la = r.get("load_before"), r.get("load_after")
        print(
            f"{name:16} " + " ".join(f"{fmt(r.get(c)):>6}" for c in cols)
            + f"  {lb[0]:5.2f}/{la[0]:5.2f}      " + f"  {r.get('foreign_ray_procs', '?'):>13}"
            + f"  {r.get('provider_errors', '?'):>13}"
        )
    print()
    print("Launch batches from the logs (s from submission, count):")
    for r in ok:
        print(f"  {r['kind']} #{r['run']}: {r.get('log_launch_batches')}")
    print("Per worker (s from submission: registered / idle since / gone / idle excess):")
    for r in ok:
        ws = "; ".join(
            f"{k} {fmt(v['reg'])}/{fmt(v['idle_since'])}/{fmt(v['gone'])}/{fmt(v['idle_excess'])}"
            for k, v in sorted(r["workers"].items(), key=lambda kv: kv[1]["reg"] or 0)
        )
        print(f"  {r['kind']} #{r['run']}: {ws}")
        extra = []
        if r.get("failed_requests"):
            extra.append(f"failed launch requests reported: {r['failed_requests']}")
        if r.get("workers_seen") != N_WORKERS:
            extra.append(f"workers seen: {r.get('workers_seen')}")
        extra.append(f"tasks ran on {r.get('tasks_nodes')} node(s)")
        extra.append(f"poll: {r['poll_samples']} samples, median period {fmt(r['poll_period_median_ms'])} ms, {r['poll_errors']} errors")
        extra.append(f"head start {fmt(r.get('head_start_s'))} s, autoscaler first report {fmt(r.get('autoscaler_ready_s'))} s after head up")
        print("      " + "; ".join(extra))


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", metavar="GCS", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=3, help="runs per autoscaler (default 3)")
    ap.add_argument("--first", choices=["ray", "rayscale"], default="ray")
    ap.add_argument("--only", choices=["ray", "rayscale", "rayscale-ut", "rayscale-fmn"])
    ap.add_argument("--fake-multinode", action="store_true",
                    help="Ray against rayscale + its bridge + Ray's FakeMultiNodeProvider (D)")
    ap.add_argument("--also-own-temp-dirs", action="store_true",
                    help="also run rayscale with a `ray` wrapper giving each worker its own --temp-dir")
    ap.add_argument("--rayscale", default=str(REPO / "target" / "release" / "rayscale"))
    ap.add_argument("--interval", type=float, default=5, help="rayscale run --interval (default 5)")
    ap.add_argument("--ray-update-interval", type=float, default=None,
                    help="AUTOSCALER_UPDATE_INTERVAL_S for Ray's monitor (default: unset = Ray's 5 s)")
    ap.add_argument("--poll", type=float, default=0.1, help="GCS poll period, s (default 0.1)")
    ap.add_argument("--settle", type=float, default=2.0, help="wait after the autoscaler's first report, s")
    ap.add_argument("--timeout", type=float, default=300, help="driver timeout, s")
    ap.add_argument("--idle-wait", type=float, default=120, help="max wait for zero workers after the tasks, s")
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--keep", action="store_true", help="keep temp dirs and logs")
    args = ap.parse_args()

    if args.driver:
        return driver_main(args.driver)

    try:
        import ray  # noqa: F401
        from ray._raylet import GcsClient  # noqa: F401
        from ray.core.generated.autoscaler_pb2 import GetClusterStatusReply  # noqa: F401
    except Exception as e:
        die(f"Ray is not importable from {sys.executable} ({e}); run this with /opt/rayscale-venv/bin/python")
    if not ray.__version__.startswith("2.60"):
        say(f"warning: Ray {ray.__version__}, not 2.60")
    if not (Path(sys.executable).parent / "ray").exists():
        die(f"no `ray` executable next to {sys.executable}")
    rayscale_bin = None
    second = "rayscale-fmn" if args.fake_multinode else "rayscale"
    kinds = [args.only] if args.only else (["ray", second] if args.first == "ray" else [second, "ray"])
    if args.also_own_temp_dirs and args.only is None:
        kinds.append("rayscale-ut")
    snap_dir = Path(tempfile.mkdtemp(prefix=f"rsb-{os.getpid()}-bin-"))
    results: List[Dict[str, Any]] = []
    runs: List[Run] = []

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # Explicit, so that Ctrl-C also works when started with SIGINT ignored (e.g. `cmd &`
    # from a non-interactive shell).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    interrupted = False
    try:
        if any(k.startswith("rayscale") for k in kinds):
            src = Path(args.rayscale)
            if not (src.is_file() and os.access(src, os.X_OK)):
                die(f"the rayscale binary is missing or not executable: {src} (build it with "
                    "`cargo build --release -p rayscale`)")
            rayscale_bin = snap_dir / "rayscale"
            shutil.copy2(src, rayscale_bin)
            st = src.stat()
            say(f"rayscale binary: {src} (mtime {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(st.st_mtime))}, "
                f"{st.st_size} bytes), run from a snapshot copy")
        say(f"Ray {ray.__version__} from {Path(ray.__file__).parent}; load average {os.getloadavg()}; "
            f"{os.cpu_count()} CPUs; other raylets/GCS servers on the machine: {foreign_ray_procs()}")
        for i in range(1, args.runs + 1):
            for kind in kinds:
                run = Run(kind, i, args, rayscale_bin)
                runs.append(run)
                results.append(run.execute())
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: tearing down")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the teardown
        for run in runs:
            if "leftover_procs" not in run.result:
                run.teardown()
        shutil.rmtree(snap_dir, ignore_errors=True)
        leftovers = [p for run in runs for p in scan_procs(run.tag, run.temp_dir, run.cluster)]
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if results:
        report(results)
    for run in runs:
        if run.log_lines and args.keep:
            print(f"\n{run.kind} #{run.idx} log lines:")
            for l in run.log_lines:
                print("  " + l[:200])
    if leftovers:
        print(f"\nERROR: processes left behind: {leftovers}", file=sys.stderr)
        return 1
    print(f"\nNo process of this benchmark is left (checked /proc for {TAG_ENV}, temp dirs, RAYSCALE_CLUSTER).")
    if interrupted:
        return 130
    if any("error" in r for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
