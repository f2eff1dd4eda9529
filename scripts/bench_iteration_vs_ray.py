"""One steady autoscaler iteration at scale: Ray 2.60's own v2 iteration against
rayscale's, on the same generated cluster, in one run, with the ratios.

rayscale's side is `tests/benches/driver_iteration.rs` (the whole driver iteration over
loopback gRPC against a fake GCS serving Ray's protobufs; CPU time of the driver's
thread), run with `RAYSCALE_BENCH_DUMP` so that it writes the cluster it generated
(Ray's `ClusterResourceState`) and its config.

Ray's side runs in a child process, in process there: what `Autoscaler.
update_autoscaling_state` does (`get_cluster_resource_state` on a stand-in GCS client
that answers the dumped state, then `Reconciler.reconcile` with Ray's own
`InstanceManager`, `ResourceDemandScheduler` and `CloudResourceMonitor`, and a stand-in
cloud that lists one running instance per Ray node). The first iteration adopts every
instance (ALLOCATED), the second sees them run Ray; the next ones are steady: their CPU
time (`time.thread_time`) is the figure. A child that does not finish in `--ray-timeout`
seconds is reported as "> X s", X the time the step it was in (its set-up or an
iteration) had run, a lower bound on one iteration.

usage: bench_iteration_vs_ray.py --bench BIN [--python PY] [--cases 10000-0-alike,...]
       [--ray-steady 3] [--ray-timeout 600]
  BIN: the built bench binary (`cargo bench -p rayscale-tests --bench driver_iteration
  --no-run` prints it). Prints a markdown table.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

# The child: Ray's iteration on a dumped state. Reads argv: state.pb, config.yaml,
# steady count; prints one JSON line per iteration.
RAY_CHILD = r'''
import json, logging, sys, time, uuid
import yaml
logging.disable(logging.CRITICAL)
from ray.core.generated import autoscaler_pb2
from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig
from ray.autoscaler.v2.instance_manager.instance_manager import InstanceManager
from ray.autoscaler.v2.instance_manager.instance_storage import InstanceStorage
from ray.autoscaler.v2.instance_manager.storage import InMemoryStorage
from ray.autoscaler.v2.instance_manager.node_provider import (
    CloudInstance, ICloudInstanceProvider)
from ray.autoscaler.v2.instance_manager.reconciler import Reconciler
from ray.autoscaler.v2.instance_manager.subscribers.cloud_instance_updater import (
    CloudInstanceUpdater)
from ray.autoscaler.v2.instance_manager.subscribers.cloud_resource_monitor import (
    CloudResourceMonitor)
from ray.autoscaler.v2.scheduler import ResourceDemandScheduler
from ray.autoscaler.v2.sdk import get_cluster_resource_state
from ray.core.generated.instance_manager_pb2 import NodeKind

state_path, config_path, steady = sys.argv[1], sys.argv[2], int(sys.argv[3])
state = autoscaler_pb2.ClusterResourceState()
with open(state_path, "rb") as f:
    state.ParseFromString(f.read())
reply = autoscaler_pb2.GetClusterResourceStateReply(cluster_resource_state=state)
wire = reply.SerializeToString()

class Gcs:
    address = "127.0.0.1:6379"
    def get_cluster_resource_state(self):
        return wire
    def drain_node(self, *a, **k):
        return True, ""
    def drain_nodes(self, *a, **k):
        return []

class Cloud(ICloudInstanceProvider):
    def __init__(self):
        self.instances = {}
        head = state.node_states[0]
        for n in state.node_states:
            kind = NodeKind.HEAD if n is head else NodeKind.WORKER
            self.instances[n.instance_id] = CloudInstance(
                n.instance_id, n.ray_node_type_name, kind, True)
    def get_non_terminated(self):
        return dict(self.instances)
    def terminate(self, ids, request_id):
        for i in ids:
            self.instances.pop(i, None)
    def launch(self, shape, request_id):
        for t, n in shape.items():
            for _ in range(n):
                i = "l-" + uuid.uuid4().hex[:12]
                self.instances[i] = CloudInstance(i, t, NodeKind.WORKER, False, request_id)
    def poll_errors(self):
        return []

with open(config_path) as f:
    raw = yaml.safe_load(f)
raw["provider"] = {"type": "readonly", "disable_launch_config_check": True}
config = AutoscalingConfig(raw, skip_content_hash=True)
cloud = Cloud()
monitor = CloudResourceMonitor()
im = InstanceManager(
    InstanceStorage("bench", InMemoryStorage()),
    [CloudInstanceUpdater(cloud), monitor],
)
scheduler = ResourceDemandScheduler(None)
gcs = Gcs()
print(json.dumps({"ready": True}), flush=True)
for it in range(2 + steady):
    c0, w0 = time.thread_time(), time.perf_counter()
    ray_state = get_cluster_resource_state(gcs)
    out = Reconciler.reconcile(
        instance_manager=im,
        scheduler=scheduler,
        cloud_provider=cloud,
        cloud_resource_monitor=monitor,
        ray_cluster_resource_state=ray_state,
        non_terminated_cloud_instances=cloud.get_non_terminated(),
        cloud_provider_errors=[],
        ray_install_errors=[],
        ray_stop_errors=[],
        autoscaling_config=config,
    )
    cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
    print(json.dumps({"iteration": it, "cpu_s": cpu, "wall_s": wall,
                      "pending_requests": len(out.pending_instance_requests)}), flush=True)
# What the steady iterations saw: every instance adopted and running Ray.
from collections import Counter
from ray.core.generated.instance_manager_pb2 import Instance
instances, _ = Reconciler._get_im_instances(im)
print(json.dumps({"statuses": dict(Counter(Instance.InstanceStatus.Name(i.status)
                                           for i in instances))}), flush=True)
'''


def rayscale_rows(bench, nodes, demands, distinct, dump):
    """Runs the Rust bench for one case; returns its steady rows' CPU (ms)."""
    env = dict(os.environ, RAYSCALE_BENCH_DUMP=dump)
    args = [bench, "--bench", str(nodes)]
    if demands == 0:
        args.append("idle")
    elif not distinct:
        args.append("alike")
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        sys.exit(f"bench failed: {out.stderr.strip()[-500:]}")
    kind = "distinct" if distinct else "alike"
    # The bench prints every case of this scale; take the block of ours.
    blocks = out.stdout.split("\n\n")
    header = f"{nodes} instances / {demands} pending demands, {kind} nodes"
    rows = {}
    for i, b in enumerate(blocks):
        if b.strip().startswith(header):
            table = blocks[i + 1]
            for line in table.splitlines():
                m = re.match(r"\| steady \((median|fastest) of \d+\) \| ([\d.]+) ms", line)
                if m:
                    rows[m.group(1)] = float(m.group(2))
    if not rows:
        sys.exit(f"no steady rows for {header} in:\n{out.stdout}")
    return rows


def ray_side(python, state, config, steady, timeout):
    """Ray's iterations on the dumped state: (the steady ones' CPU in s, None), or, when
    the child did not finish within `timeout` s, (None, a lower bound in s on the
    iteration it was in: the time since the last line it printed, its set-up or an
    iteration)."""
    child = subprocess.Popen(
        [python, "-c", RAY_CHILD, state, config, str(steady)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # One line per step (set-up done, each iteration), read as they come, with their time.
    lines, last = [], [time.monotonic()]

    def read():
        for line in child.stdout:
            if line.startswith("{"):
                lines.append(json.loads(line))
                last[0] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return None, time.monotonic() - last[0]
    reader.join()
    if child.returncode != 0:
        sys.exit(f"Ray's side failed: {child.stderr.read().strip()[-2000:]}")
    its = [i for i in lines if "iteration" in i]
    statuses = next((i["statuses"] for i in lines if "statuses" in i), {})
    nodes = sum(statuses.values())
    if statuses.get("RAY_RUNNING", 0) != nodes or nodes == 0:
        sys.exit(f"Ray's instances are not all running Ray after its iterations: {statuses}")
    return [i["cpu_s"] for i in its[2:]], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--cases", default="10000-0-alike,1000-10000-alike")
    ap.add_argument("--ray-steady", type=int, default=3, help="at least 1")
    ap.add_argument("--ray-timeout", type=float, default=600)
    a = ap.parse_args()
    if a.ray_steady < 1:
        sys.exit("--ray-steady must be at least 1")
    print("| cluster | Ray 2.60 steady iteration (CPU, median) | rayscale steady (CPU, median / fastest) | ratio (median) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as dump:
        for case in a.cases.split(","):
            nodes, demands, kind = case.split("-")
            nodes, demands, distinct = int(nodes), int(demands), kind == "distinct"
            rs = rayscale_rows(a.bench, nodes, demands, distinct, dump)
            state = os.path.join(dump, f"state-{nodes}-{demands}-{kind}.pb")
            ray, stuck = ray_side(a.python, state, os.path.join(dump, "config.yaml"),
                                  a.ray_steady, a.ray_timeout)
            label = f"{nodes:,} nodes, {demands:,} demands ({kind})"
            if ray is None:
                # One step (set-up or an iteration) ran this long without finishing.
                ray_text = f"> {stuck:.0f} s (one step did not finish)"
                ratio = f"> {stuck * 1e3 / rs['median']:,.0f}x"
            else:
                med = sorted(ray)[len(ray) // 2]
                ray_text, ratio = f"{med:.2f} s", f"{med * 1e3 / rs['median']:,.0f}x"
            print(f"| {label} | {ray_text} | {rs['median']:.1f} / {rs.get('fastest', 0):.1f} ms | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
