#!/usr/bin/env python3
"""Deterministic generator of the five `rayscale plan` benchmark scenarios.

    gen_bench_scenarios.py --out DIR [--only a,b,c]

Writes (same bytes on every run; each scenario has its own seeded RNG):
  a_4000_cpu1.yaml              4,000 x {CPU: 1} on a head-only cluster (head CPU 0),
                                one worker type (Ray PR #61374's case)
  b_1337_nodes_13315_cpu2.yaml  1,337 busy workers (all CPUs used), 13,315 x {CPU: 2}
                                (the shape of Ray PR #64175's report)
  bj_1337_nodes_13315_cpu2.json (b) written as JSON
  c_20k_mixed_100_nodes.yaml    20,000 mixed demands (~30 shapes incl. GPU, custom
                                resources, label selectors), 100 nodes of 5 types
  d_100k_pg_1000_nodes.json     100,000 task demands + ~300 placement groups (all four
                                strategies), 1,000 nodes of 10 types
  e_1m_10k_nodes.json           1,000,000 demands, 10,000 nodes of 10 types

Shapes follow what Ray 2.60's GCS reports (format: /work/shared/spec/plan-scenario.md):
  * node_states: 28-byte node ids (base64), cloud instance ids, node_ip_address,
    instance_type_name, total resources = the type's resources + object_store_memory
    + `node:<ip>` (+ `node:__internal_head__` on the head), available < total on busy
    nodes with fully used resources left out of the map (the GCS drops zero
    amounts), status RUNNING or IDLE (+ idle_duration_ms), labels = the type's labels
    + `ray.io/node-id`.
  * pending_resource_requests: one ResourceRequestByCount per distinct
    (resources, label selectors), as the GCS aggregates them.
  * pending_gang_resource_requests: one per placement group, details
    "<pg id hex>:<STRATEGY>|<PENDING|RESCHEDULING>", one request per bundle; STRICT_PACK
    bundles carry an affinity and STRICT_SPREAD bundles an anti-affinity on label
    `_PG_<pg id hex>` (value ""), PACK/SPREAD none; plus the Ray >= 2.49 bundle
    selector (same requests, optionally with per-bundle label selectors). Nodes
    holding bundles of a rescheduling group carry `_PG_<hex>` as a dynamic label.
Amounts are multiples of 0.25 (memory: whole bytes), node type resources are integers.
Needs only the standard library and PyYAML.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import sys
from pathlib import Path

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ray_encoding import pg_label, pg_placement_constraint  # noqa: E402

_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
GiB = 1 << 30
HEAD_RES = "node:__internal_head__"
IDLE_TIMEOUT_MIN = 5

# name -> (resources, labels, EC2 instance type)
NODE_TYPES = {
    "cpu-8": ({"CPU": 8, "memory": 24 * GiB},
              {"ray.io/market-type": "ON_DEMAND", "ray.io/availability-zone": "us-west-2a"}, "m6i.2xlarge"),
    "cpu-16": ({"CPU": 16, "memory": 48 * GiB},
               {"ray.io/market-type": "ON_DEMAND", "ray.io/availability-zone": "us-west-2b"}, "m6i.4xlarge"),
    "cpu-32-spot": ({"CPU": 32, "memory": 96 * GiB},
                    {"ray.io/market-type": "SPOT", "ray.io/availability-zone": "us-west-2c"}, "m6i.8xlarge"),
    "cpu-64-highmem": ({"CPU": 64, "memory": 384 * GiB},
                       {"ray.io/market-type": "ON_DEMAND", "ray.io/availability-zone": "us-west-2a"}, "r6i.16xlarge"),
    "gpu-a10g-1": ({"CPU": 8, "GPU": 1, "memory": 24 * GiB},
                   {"ray.io/accelerator-type": "A10G", "ray.io/market-type": "SPOT",
                    "ray.io/availability-zone": "us-west-2b"}, "g5.2xlarge"),
    "gpu-a10g-4": ({"CPU": 48, "GPU": 4, "memory": 144 * GiB},
                   {"ray.io/accelerator-type": "A10G", "ray.io/market-type": "ON_DEMAND",
                    "ray.io/availability-zone": "us-west-2a"}, "g5.12xlarge"),
    "gpu-a100-8": ({"CPU": 96, "GPU": 8, "memory": 800 * GiB},
                   {"ray.io/accelerator-type": "A100", "ray.io/market-type": "ON_DEMAND",
                    "ray.io/availability-zone": "us-west-2a"}, "p4d.24xlarge"),
    "gpu-h100-8": ({"CPU": 192, "GPU": 8, "memory": 1600 * GiB},
                   {"ray.io/accelerator-type": "H100", "ray.io/market-type": "ON_DEMAND",
                    "ray.io/availability-zone": "us-west-2c"}, "p5.48xlarge"),
    "inf2-8": ({"CPU": 32, "neuron_cores": 2, "memory": 96 * GiB},
               {"ray.io/accelerator-type": "Inferentia2", "ray.io/availability-zone": "us-west-2b"}, "inf2.8xlarge"),
    "trn1-32": ({"CPU": 128, "neuron_cores": 32, "memory": 384 * GiB},
                {"ray.io/accelerator-type": "Trainium", "ray.io/availability-zone": "us-west-2c"}, "trn1.32xlarge"),
}
ALL_TYPES = list(NODE_TYPES)
ACCEL_RES = ("CPU", "GPU", "neuron_cores")


def sel(*constraints):
    """A LabelSelector: constraints are (key, 'in'|'not_in', [values])."""
    return {"label_constraints": [
        {"label_key": k, "operator": "LABEL_OPERATOR_IN" if op == "in" else "LABEL_OPERATOR_NOT_IN",
         "label_values": list(v)} for k, op, v in constraints]}


# ~30 demand shapes: (resources, label_selectors or None, relative weight).
# The last ones are infeasible on every type (a real cluster always has a few).
TASK_SHAPES = [
    ({"CPU": 1}, None, 30),
    ({"CPU": 0.5}, None, 8),
    ({"CPU": 0.25}, None, 4),
    ({"CPU": 2}, None, 12),
    ({"CPU": 4}, None, 8),
    ({"CPU": 8}, None, 4),
    ({"CPU": 16}, None, 2),
    ({"CPU": 1, "memory": 4 * GiB}, None, 6),
    ({"CPU": 2, "memory": 8 * GiB}, None, 4),
    ({"CPU": 4, "memory": 64 * GiB}, None, 1),
    ({"CPU": 0.25, "memory": GiB // 2}, None, 3),
    ({"CPU": 1}, [sel(("ray.io/market-type", "in", ["SPOT"]))], 6),
    ({"CPU": 2}, [sel(("ray.io/availability-zone", "not_in", ["us-west-2c"]))], 3),
    ({"CPU": 4}, [sel(("ray.io/market-type", "in", ["ON_DEMAND"]),
                      ("ray.io/availability-zone", "in", ["us-west-2a"])),
                  sel(("ray.io/market-type", "in", ["ON_DEMAND"]))], 2),
    ({"GPU": 1}, None, 4),
    ({"CPU": 1, "GPU": 1}, None, 5),
    ({"CPU": 4, "GPU": 1}, None, 3),
    ({"CPU": 1, "GPU": 0.5}, None, 2),
    ({"GPU": 0.25}, None, 2),
    ({"CPU": 8, "GPU": 1}, [sel(("ray.io/accelerator-type", "in", ["A100", "H100"]))], 2),
    ({"CPU": 1, "GPU": 1}, [sel(("ray.io/accelerator-type", "in", ["A10G"]))], 3),
    ({"CPU": 24, "GPU": 4}, None, 1),
    ({"CPU": 32, "GPU": 8}, [sel(("ray.io/accelerator-type", "in", ["H100"])),
                              sel(("ray.io/accelerator-type", "in", ["A100"]))], 0.5),
    ({"CPU": 1, "neuron_cores": 1}, None, 2),
    ({"CPU": 4, "neuron_cores": 2}, None, 1),
    ({"CPU": 32, "neuron_cores": 16}, None, 0.5),
    ({"CPU": 64, "memory": 256 * GiB}, None, 0.5),
    ({"CPU": 2, "GPU": 1}, [sel(("ray.io/market-type", "not_in", ["SPOT"]))], 1),
    ({"GPU": 16}, None, 0.05),                      # infeasible: no type has 16 GPUs
    ({"CPU": 1, "TPU": 4}, None, 0.05),             # infeasible: no TPU type
    ({"CPU": 1}, [sel(("ray.io/accelerator-type", "in", ["TPU-V5"]))], 0.05),  # infeasible label
]

# Placement group bundle shapes: (bundle resources, bundle label selector or None).
PG_BUNDLES = [
    ({"CPU": 1}, None),
    ({"CPU": 2}, None),
    ({"CPU": 4}, None),
    ({"CPU": 8, "memory": 16 * GiB}, None),
    ({"CPU": 1, "GPU": 1}, None),
    ({"CPU": 8, "GPU": 1}, None),
    ({"CPU": 12, "GPU": 1}, [sel(("ray.io/accelerator-type", "in", ["A100", "H100"]))]),
    ({"CPU": 2, "neuron_cores": 1}, None),
    ({"CPU": 4}, [sel(("ray.io/market-type", "in", ["ON_DEMAND"]))]),
]


def num(x):
    return int(x) if float(x) == int(x) else float(x)


def q(x: float) -> float:
    """Round down to a multiple of 0.25."""
    return int(x * 4) / 4.0


def launch_hash(node_config) -> str:
    return hashlib.sha1(json.dumps(node_config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Builder:
    def __init__(self, name: str):
        self.rng = random.Random(f"rayscale-bench-{name}")
        self.name = name
        self.ip = 0
        self.node_ids = set()
        self.inst_seq = 0

    # ------------------------------------------------------------- ids
    def node_id(self) -> bytes:
        while True:
            b = self.rng.getrandbits(224).to_bytes(28, "big")
            if b not in self.node_ids:
                self.node_ids.add(b)
                return b

    def next_ip(self) -> str:
        self.ip += 1
        i = self.ip
        return f"10.{i // 62500}.{(i // 250) % 250}.{i % 250 + 1}"

    def cloud_id(self) -> str:
        return f"i-0{self.rng.getrandbits(64):016x}"

    def pg_id(self) -> str:
        return self.rng.getrandbits(144).to_bytes(18, "big").hex()

    # ------------------------------------------------------------- config
    def config(self, types, head_res, global_max, per_type):
        """types: list of worker type names; per_type: name -> dict(min_workers, max_workers)."""
        ant = {"head": {"resources": head_res,
                        "node_config": {"InstanceType": "m6i.2xlarge", "ImageId": "ami-0a1b2c3d4e5f60718"}}}
        for t in types:
            res, labels, itype = NODE_TYPES[t]
            d = {"resources": dict(res),
                 "node_config": {"InstanceType": itype, "ImageId": "ami-0a1b2c3d4e5f60718",
                                 "BlockDeviceMappings": [{"DeviceName": "/dev/sda1",
                                                          "Ebs": {"VolumeSize": 200, "VolumeType": "gp3"}}]},
                 "labels": dict(labels)}
            d.update(per_type.get(t, {}))
            ant[t] = d
        self.types = ant
        self.hashes = {n: launch_hash(d["node_config"]) for n, d in ant.items()}
        cfg = {"cluster_name": f"bench-{self.name}", "max_workers": global_max,
               "upscaling_speed": 1.0, "idle_timeout_minutes": IDLE_TIMEOUT_MIN,
               "provider": {"type": "aws", "region": "us-west-2", "availability_zone": "us-west-2a,us-west-2b,us-west-2c",
                            "cache_stopped_nodes": False},
               "auth": {"ssh_user": "ubuntu"},
               "head_node_type": "head",
               "available_node_types": ant}
        return cfg

    # ------------------------------------------------------------- nodes
    def node(self, tname, kind, head=False, used=None):
        """kind: 'idle' | 'partial' | 'full'. used: resource -> amount already used
        (e.g. by placement group bundles), taken before the random usage."""
        rng = self.rng
        res = self.types[tname]["resources"]
        ip = self.next_ip()
        nid = self.node_id()
        total = {k: float(v) for k, v in res.items() if v}
        total["object_store_memory"] = float(int(total.get("memory", 8 * GiB) * 0.3) // 4 * 4)
        total[f"node:{ip}"] = 1.0
        if head:
            total[HEAD_RES] = 1.0
        avail = {}
        for k, v in total.items():
            if k.startswith("node:"):
                a = v
            elif kind == "idle":
                a = v
            elif kind == "full" and k in ACCEL_RES:
                a = 0.0
            elif k in ("memory", "object_store_memory"):
                a = float(int(v * rng.uniform(0.1, 0.9)) // 1024 * 1024)
            else:
                a = q(v * rng.uniform(0.0, 0.8))
            if used and k in used:
                a = max(0.0, a - used[k])
            avail[k] = a
        if kind != "idle" and "CPU" in total and all(avail[k] == total[k] for k in ACCEL_RES if k in total):
            # partial must really be partial: take a quarter CPU at least
            avail["CPU"] = max(0.0, avail["CPU"] - 0.25)
        avail = {k: num(v) for k, v in avail.items() if v != 0}  # GCS drops zeros
        n = {
            "node_id": base64.b64encode(nid).decode(),
            "instance_id": self.cloud_id(),
            "ray_node_type_name": tname,
            "available_resources": avail,
            "total_resources": {k: num(v) for k, v in total.items()},
            "node_state_version": rng.randint(2, 5000),
        }
        if kind == "idle":
            n["status"] = "IDLE"
            n["idle_duration_ms"] = rng.choice([
                rng.randint(1_000, 120_000), rng.randint(1_000, 250_000),
                rng.randint(310_000, 3_600_000)])
        else:
            n["status"] = "RUNNING"
        n["node_ip_address"] = ip
        n["instance_type_name"] = self.types[tname]["node_config"]["InstanceType"]
        labels = dict(self.types[tname].get("labels") or {})
        labels["ray.io/node-id"] = nid.hex()
        n["labels"] = labels
        return n

    def instances_for(self, nodes, pending):
        """Instance manager view: RAY_RUNNING instances joined to the workers by cloud id,
        plus `pending` (type, status) launches in flight."""
        out = []
        for n in nodes:
            if HEAD_RES in n["total_resources"]:
                continue
            self.inst_seq += 1
            out.append({"instance_id": f"im-{self.inst_seq:07d}", "cloud_instance_id": n["instance_id"],
                        "node_type": n["ray_node_type_name"], "status": "RAY_RUNNING",
                        "launch_config_hash": self.hashes[n["ray_node_type_name"]]})
        for tname, status in pending:
            self.inst_seq += 1
            inst = {"instance_id": f"im-{self.inst_seq:07d}", "node_type": tname, "status": status,
                    "launch_config_hash": self.hashes[tname]}
            if status in ("ALLOCATED", "RAY_INSTALLING"):
                inst["cloud_instance_id"] = self.cloud_id()
            out.append(inst)
        return out

    # ------------------------------------------------------------- demands
    def split(self, total, shapes):
        """Distribute `total` demands over shapes by weight (randomised, each >= 1)."""
        w = [s[2] * self.rng.uniform(0.5, 1.5) for s in shapes]
        sw = sum(w)
        counts = [max(1, int(total * x / sw)) for x in w]
        counts[0] += total - sum(counts)
        assert counts[0] > 0 and sum(counts) == total
        return counts

    def requests(self, total, shapes):
        out = []
        for (res, sels, _w), c in zip(shapes, self.split(total, shapes)):
            r = {"resources_bundle": {k: num(v) for k, v in res.items()}}
            if sels:
                r["label_selectors"] = json.loads(json.dumps(sels))
            out.append({"request": r, "count": c})
        return out

    def gangs(self, n_groups, nodes):
        rng = self.rng
        live = [n for n in nodes if HEAD_RES not in n["total_resources"]]
        out = []
        strategies = ["PACK"] * 30 + ["SPREAD"] * 25 + ["STRICT_PACK"] * 25 + ["STRICT_SPREAD"] * 20
        for _ in range(n_groups):
            strat = rng.choice(strategies)
            pg = self.pg_id()
            state = "RESCHEDULING" if rng.random() < 0.1 else "PENDING"
            nb = rng.choice([1, 2, 2, 4, 4, 4, 8, 8, 16])
            r = rng.random()
            if r < 0.04:
                # a group that cannot fit: 12 GPUs strictly packed / 64 CPUs x 8 packed
                base, bsel = ({"CPU": 4, "GPU": 1}, None) if strat != "STRICT_SPREAD" else ({"CPU": 400}, None)
                nb = 12 if strat != "STRICT_SPREAD" else 2
            else:
                base, bsel = rng.choice(PG_BUNDLES)
            bundles = [base] * nb if rng.random() < 0.8 else [rng.choice(PG_BUNDLES)[0] for _ in range(nb)]
            label = pg_label(pg)
            cons = pg_placement_constraint(strat, pg)
            if state == "RESCHEDULING" and live:
                # some bundles survived on nodes that now carry the PG's label
                keep = rng.randint(1, 2)
                for hn in rng.sample(live, keep):
                    hn.setdefault("dynamic_labels", {})[label] = ""
                bundles = bundles[: max(1, len(bundles) - keep)]
            legacy = []
            for b in bundles:
                rq = {"resources_bundle": {k: num(v) for k, v in b.items()}}
                if cons:
                    rq["placement_constraints"] = [json.loads(json.dumps(cons))]
                legacy.append(rq)
            selected = []
            for rq in legacy:
                s = json.loads(json.dumps(rq))
                if bsel:
                    s["label_selectors"] = json.loads(json.dumps(bsel))
                selected.append(s)
            out.append({"requests": legacy, "details": f"{pg}:{strat}|{state}",
                        "bundle_selectors": [{"resource_requests": selected}]})
        return out

    def cluster(self, worker_types, counts, mix):
        """Head + workers: counts[type] nodes, mix = (p_full, p_partial, p_idle)."""
        nodes = [self.node("head", "partial", head=True)]
        for t in worker_types:
            for _ in range(counts[t]):
                kind = self.rng.choices(["full", "partial", "idle"], weights=mix)[0]
                nodes.append(self.node(t, kind))
        # GCS lists nodes in its own (hash) order, head not necessarily first
        head = nodes.pop(0)
        self.rng.shuffle(nodes)
        nodes.insert(self.rng.randint(0, min(3, len(nodes))), head)
        return nodes


def state(nodes, reqs, gangs=None, version=1):
    s = {"cluster_resource_state_version": version, "last_seen_autoscaler_state_version": version - 1,
         "node_states": nodes, "pending_resource_requests": reqs}
    if gangs:
        s["pending_gang_resource_requests"] = gangs
    s["cluster_session_name"] = "session_2025-11-29_12-00-00_000000_1"
    return s


# --------------------------------------------------------------------- scenarios

def scen_a():
    b = Builder("a")
    cfg = b.config(["cpu-8"], {"CPU": 0}, 1000, {"cpu-8": {"min_workers": 0, "max_workers": 1000}})
    head = b.node("head", "idle", head=True)
    head["status"] = "RUNNING"
    head.pop("idle_duration_ms", None)
    reqs = [{"request": {"resources_bundle": {"CPU": 1}}, "count": 4000}]
    return {"config": cfg, "cluster_resource_state": state([head], reqs, version=4)}


def scen_b():
    b = Builder("b")
    cfg = b.config(["cpu-8"], {"CPU": 0}, 6000, {"cpu-8": {"min_workers": 1, "max_workers": 6000}})
    nodes = b.cluster(["cpu-8"], {"cpu-8": 1337}, (1, 0, 0))
    reqs = [{"request": {"resources_bundle": {"CPU": 2}}, "count": 13315}]
    return {"config": cfg, "cluster_resource_state": state(nodes, reqs, version=9812)}


def scen_c():
    b = Builder("c")
    types = ["cpu-8", "cpu-32-spot", "gpu-a10g-1", "gpu-a100-8", "inf2-8"]
    per = {"cpu-8": {"min_workers": 2, "max_workers": 400}, "cpu-32-spot": {"max_workers": 300},
           "gpu-a10g-1": {"max_workers": 200}, "gpu-a100-8": {"max_workers": 40},
           "inf2-8": {"max_workers": 100}}
    cfg = b.config(types, {"CPU": 0}, 900, per)
    nodes = b.cluster(types, {"cpu-8": 40, "cpu-32-spot": 25, "gpu-a10g-1": 20, "gpu-a100-8": 5,
                              "inf2-8": 10}, (3, 4, 3))
    reqs = b.requests(20_000, TASK_SHAPES)
    insts = b.instances_for(nodes, [("cpu-32-spot", "REQUESTED"), ("gpu-a10g-1", "ALLOCATED"),
                                    ("cpu-8", "RAY_INSTALLING")])
    return {"config": cfg, "cluster_resource_state": state(nodes, reqs, version=771), "instances": insts}


def ten_type_config(b, global_max, scale):
    per = {}
    for i, t in enumerate(ALL_TYPES):
        gpu = "GPU" in NODE_TYPES[t][0] or "neuron_cores" in NODE_TYPES[t][0]
        per[t] = {"max_workers": (scale // 4 if gpu else scale)}
        if i % 3 == 0:
            per[t]["min_workers"] = 1
        if t == "cpu-32-spot":
            per[t]["idle_timeout_s"] = 120
    return b.config(ALL_TYPES, {"CPU": 0}, global_max, per)


def ten_type_counts(b, total):
    w = {"cpu-8": 20, "cpu-16": 20, "cpu-32-spot": 15, "cpu-64-highmem": 5, "gpu-a10g-1": 12,
         "gpu-a10g-4": 8, "gpu-a100-8": 5, "gpu-h100-8": 3, "inf2-8": 7, "trn1-32": 5}
    sw = sum(w.values())
    counts = {t: total * x // sw for t, x in w.items()}
    counts["cpu-8"] += total - sum(counts.values())
    return counts


def scen_d():
    b = Builder("d")
    cfg = ten_type_config(b, 8000, 2000)
    nodes = b.cluster(ALL_TYPES, ten_type_counts(b, 999), (3, 5, 2))
    reqs = b.requests(100_000, TASK_SHAPES)
    gangs = b.gangs(300, nodes)
    pend = [(b.rng.choice(ALL_TYPES), b.rng.choice(["REQUESTED", "ALLOCATED", "RAY_INSTALLING", "QUEUED"]))
            for _ in range(20)]
    insts = b.instances_for(nodes, pend)
    return {"config": cfg, "cluster_resource_state": state(nodes, reqs, gangs, version=123456),
            "instances": insts}


def scen_e():
    b = Builder("e")
    cfg = ten_type_config(b, 60000, 20000)
    nodes = b.cluster(ALL_TYPES, ten_type_counts(b, 9999), (3, 5, 2))
    reqs = b.requests(1_000_000, TASK_SHAPES)
    pend = [(b.rng.choice(ALL_TYPES), b.rng.choice(["REQUESTED", "ALLOCATED", "RAY_INSTALLING", "QUEUED"]))
            for _ in range(100)]
    insts = b.instances_for(nodes, pend)
    return {"config": cfg, "cluster_resource_state": state(nodes, reqs, version=7654321), "instances": insts}


SCENARIOS = {
    "a": ("a_4000_cpu1.yaml", scen_a),
    "b": ("b_1337_nodes_13315_cpu2.yaml", scen_b),
    # The same snapshot as JSON (what a machine-written snapshot would be): shows how
    # much of (b) is spent reading YAML.
    "bj": ("bj_1337_nodes_13315_cpu2.json", scen_b),
    "c": ("c_20k_mixed_100_nodes.yaml", scen_c),
    "d": ("d_100k_pg_1000_nodes.json", scen_d),
    "e": ("e_1m_10k_nodes.json", scen_e),
}


def write(path: Path, scn: dict, comment: str):
    if path.suffix == ".json":
        path.write_text(json.dumps(scn, separators=(",", ":")) + "\n")
    else:
        text = yaml.dump(scn, Dumper=_YAML_DUMPER, sort_keys=False, default_flow_style=None, width=200)
        path.write_text(f"# {comment}\n" + text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", help="comma-separated subset of a,b,bj,c,d,e")
    args = ap.parse_args(argv)
    keys = args.only.split(",") if args.only else list(SCENARIOS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for k in keys:
        fname, fn = SCENARIOS[k]
        scn = fn()
        write(out / fname, scn, f"benchmark scenario {k} (gen_bench_scenarios.py, deterministic)")
        st = scn["cluster_resource_state"]
        n_dem = sum(r["count"] for r in st["pending_resource_requests"])
        print(f"{out / fname}: {len(st['node_states'])} nodes, {n_dem} demands in "
              f"{len(st['pending_resource_requests'])} groups, "
              f"{len(st.get('pending_gang_resource_requests', []))} gangs, "
              f"{(out / fname).stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
