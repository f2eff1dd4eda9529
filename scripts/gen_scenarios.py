#!/usr/bin/env python3
"""Seeded generator of `rayscale plan` scenarios for the differential test.

    gen_scenarios.py --seed S --count N --out DIR [--stats] [--valid-min-workers]

Writes N scenario files (YAML, some JSON) to DIR; the same seed always gives
the same files. Every scenario is valid per /work/shared/spec/plan-scenario.md
and runs through Ray 2.60's scheduler without an exception (see ray_plan.py).
Needs only the standard library and PyYAML (no Ray).

Numbers are chosen so that Python's binary floats stay exact: request and
availability amounts are multiples of 0.25, memory amounts are whole numbers,
node type resources are integers (Ray's cluster schema demands integers).

Inputs deliberately NOT generated (Ray asserts or the spec leaves them open):
  * min_workers greater than the type's max_workers (NodeTypeConfig asserts)
  * available > total, or negative amounts, on a node state (the utilisation
    score asserts 0 <= util <= 1)
  * a static node label named like a placement-group label `_PG_<id>` with a
    non-empty value (SchedulingNode._add_label asserts on a conflicting value)
  * more than one placement constraint per bundle (combine_requests_with_
    affinity asserts), more than one cluster resource constraint
  * unknown node types on live nodes/instances (an error per the spec)
  * two node states naming the same instance; duplicate node or instance ids
  * floats or non-ASCII text inside node_config (launch_config_hash is Ray's
    hash_launch_conf of Python's json.dumps; keeping to ints/strings keeps it trivial)
"""

from __future__ import annotations

import argparse
import base64
import base64
import hashlib
import json
import os
import random
import sys
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ray_encoding import pg_label, pg_placement_constraint  # noqa: E402

_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
GB = 1_000_000_000
HEAD_RES = "node:__internal_head__"
IMPLICIT_PREFIX = "node:__internal_implicit_resource_"

TEMPLATES = [
    ("cpu2", {"CPU": 2, "memory": 8 * GB}),
    ("cpu4", {"CPU": 4, "memory": 16 * GB}),
    ("cpu8", {"CPU": 8, "memory": 32 * GB}),
    ("cpu16", {"CPU": 16, "memory": 64 * GB}),
    ("cpu64", {"CPU": 64, "memory": 256 * GB}),
    ("gpu1", {"CPU": 8, "GPU": 1, "memory": 32 * GB}),
    ("gpu4", {"CPU": 32, "GPU": 4, "memory": 128 * GB, "accel_x": 4}),
    ("gpu8", {"CPU": 96, "GPU": 8, "memory": 768 * GB}),
    ("tpu", {"CPU": 8, "TPU": 4, "memory": 16 * GB}),
    ("accel", {"CPU": 4, "accel_x": 2}),
    ("tiny", {"CPU": 1}),
    ("bigmem", {"CPU": 8, "memory": 512 * GB}),
    ("gpucheap", {"CPU": 4, "GPU": 1}),
]
LABEL_UNIVERSE = {
    "zone": ["a", "b", "c"],
    "tier": ["spot", "ondemand"],
    "ray.io/accelerator-type": ["A100", "H100", "TPU-V5"],
    "team": ["ml", "data"],
}
NON_LIVE_STATUSES = [
    "TERMINATING", "TERMINATED", "ALLOCATION_FAILED", "RAY_INSTALL_FAILED",
    "TERMINATION_FAILED", "ALLOCATION_TIMEOUT", "RAY_STOPPED",
]
MAP_FIELDS = {"resources_bundle", "total_resources", "available_resources", "labels", "dynamic_labels"}
INT64_FIELDS = {"idle_duration_ms", "count", "node_state_version",
                "cluster_resource_state_version", "last_seen_autoscaler_state_version"}
NODE_STATUS_NUM = {"UNSPECIFIED": 0, "RUNNING": 1, "DEAD": 2, "IDLE": 3, "DRAINING": 4}
OPERATOR_NUM = {"LABEL_OPERATOR_IN": 1, "LABEL_OPERATOR_NOT_IN": 2}


def num(x):
    """int when integral (so YAML/JSON shows 4, not 4.0)."""
    return int(x) if float(x) == int(x) else float(x)


def q(x: float) -> float:
    """Round down to a multiple of 0.25."""
    return int(x * 4) / 4.0


# Ray's defaults.yaml of these clouds give a config without `auth` {ssh_user: ubuntu}
# (Ray's prepare_config, rayscale's config::ray_defaults).
CLOUDS_WITH_DEFAULT_AUTH = ("aws", "gcp", "azure")


def launch_hash(node_config, auth) -> str:
    """Ray's hash_launch_conf (no key files here): sha256 of
    json.dumps([node_config, auth], sort_keys=True), lower-case base32hex, no padding."""
    digest = hashlib.sha256(json.dumps([node_config, auth], sort_keys=True).encode()).digest()
    return base64.b32hexencode(digest).decode("ascii").lower().rstrip("=")


def effective_auth(cfg) -> dict:
    """The `auth` a config is hashed with: its own, else its cloud's default."""
    if "auth" in cfg:
        return cfg["auth"]
    if cfg.get("provider", {}).get("type") in CLOUDS_WITH_DEFAULT_AUTH:
        return {"ssh_user": "ubuntu"}
    return {}


def camel(s: str) -> str:
    parts = s.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


class Gen:
    def __init__(self, seed: int, idx: int, valid_min_workers: bool = False):
        self.rng = random.Random(f"rayscale-{seed}-{idx}")
        self.valid_min_workers = valid_min_workers
        self.idx = idx
        self.seed = seed
        self.features: Counter = Counter()
        self.node_ids = set()
        self.ip_counter = 10

    # ----------------------------------------------------------------- utils
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def node_id(self) -> bytes:
        while True:
            b = bytes(self.rng.getrandbits(8) for _ in range(28))
            if b not in self.node_ids:
                self.node_ids.add(b)
                return b

    def pg_id(self) -> str:
        return bytes(self.rng.getrandbits(8) for _ in range(18)).hex()

    def next_ip(self) -> str:
        self.ip_counter += 1
        return f"10.0.{self.ip_counter // 250}.{self.ip_counter % 250 + 1}"

    # ---------------------------------------------------------------- config
    def make_types(self):
        rng = self.rng
        n_workers = rng.randint(1, 6)
        picks = rng.sample(TEMPLATES, n_workers)
        workers = []
        used = set()
        for base, res in picks:
            res = dict(res)
            if self.chance(0.25):  # perturb the CPU count
                res["CPU"] = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 48])
                self.features["perturbed_type"] += 1
            if self.chance(0.1) and "memory" in res:
                del res["memory"]
            name = base
            while name in used:
                name += "x"
            used.add(name)
            workers.append({"name": name, "resources": res})
        # Identical twins: exact score ties, broken by priority or type order.
        if len(workers) < 6 and self.chance(0.3):
            src = rng.choice(workers)
            twin = {"name": src["name"] + "-b", "resources": dict(src["resources"]), "twin_of": src["name"]}
            used.add(twin["name"])
            workers.insert(rng.randint(0, len(workers)), twin)
            self.features["twin_types"] += 1
        return workers

    def make_config(self):
        rng = self.rng
        f = self.features
        head_name = rng.choice(["head", "ray.head.default", "headgroup"])
        workers = self.make_types()
        self.disable_check = rng.choice([None, None, True, False, False])
        if self.disable_check is False:
            f["launch_config_check_enabled"] += 1

        # Aliasing mode: min_workers nodes that the global max_workers must cut.
        # Flavour "over": sum(min_workers) > max_workers (Ray's validate_config
        # would reject that config, the spec does not); flavour "fill":
        # sum(min_workers) <= max_workers, running nodes of other types fill
        # the cap (a config Ray accepts).
        mode_aliasing = self.chance(0.16)
        self.mode_aliasing = mode_aliasing
        self.alias_flavor = None
        if mode_aliasing:
            self.alias_flavor = "fill" if (self.valid_min_workers or self.chance(0.5)) else "over"
            f["aliasing_mode_" + self.alias_flavor] += 1
        r = rng.random()
        if mode_aliasing:
            global_max = rng.randint(2, 5) if self.alias_flavor == "fill" else rng.randint(1, 5)
        elif r < 0.35:
            global_max = None
        elif r < 0.6:
            global_max = rng.choice([0, 1, 2, 3, 4, 5, 6, 6])
        else:
            global_max = rng.randint(15, 100)
        self.global_max = global_max
        if global_max is None:
            f["global_max_absent"] += 1
        elif global_max <= 6:
            f["global_max_small"] += 1
        else:
            f["global_max_large"] += 1

        # Labels (twins copy their source's labels & priority for exact ties).
        for w in workers:
            if "twin_of" in w:
                continue
            if self.chance(0.5):
                keys = rng.sample(sorted(LABEL_UNIVERSE), rng.randint(1, 3))
                w["labels"] = {k: rng.choice(LABEL_UNIVERSE[k]) for k in keys}
                f["type_labels"] += 1
            if self.chance(0.4):
                w["priority"] = rng.choice([-1, 0, 1, 1, 2, 3])
                f["type_priority"] += 1
        for w in workers:
            if "twin_of" in w:
                src = next(x for x in workers if x["name"] == w["twin_of"])
                if "labels" in src:
                    w["labels"] = dict(src["labels"])
                if "priority" in src:
                    w["priority"] = src["priority"]
                if self.chance(0.3):  # twin with a different priority
                    w["priority"] = w.get("priority", 0) + 1

        for w in workers:
            # per-type max_workers
            r = rng.random()
            if r < 0.4:
                tmax = None
            elif r < 0.45:
                tmax = 0
            elif r < 0.8:
                tmax = rng.randint(1, 8)
            else:
                tmax = rng.randint(10, 60)
            w["max_workers"] = tmax
            eff_max = tmax if tmax is not None else (global_max if global_max is not None else 1 << 30)
            if mode_aliasing and self.chance(0.7):
                lo = 2
                hi = min(4, eff_max)
                if hi >= lo:
                    w["min_workers"] = rng.randint(lo, hi)
                elif eff_max >= 1:
                    w["min_workers"] = 1
            elif self.chance(0.25) and eff_max >= 1:
                w["min_workers"] = rng.randint(1, min(3, eff_max))
            elif self.chance(0.2):
                w["min_workers"] = 0
            if self.chance(0.25):
                w["idle_timeout_s"] = rng.choice([0, 10, 30, 120, 900, 7.5])
                f["type_idle_timeout_s"] += 1
            w["node_config"] = self.node_config(w["name"])
        if mode_aliasing and len([w for w in workers if w.get("min_workers", 0) >= 2]) == 0:
            # make sure at least one type asks for >= 2 min workers
            for w in workers:
                eff = w["max_workers"] if w["max_workers"] is not None else global_max
                if eff is None or eff >= 2:
                    w["min_workers"] = 2
                    break
        if global_max is not None and (self.valid_min_workers or self.alias_flavor == "fill"):
            # keep sum(min_workers) <= max_workers (what Ray's validate_config demands)
            left = global_max
            for w in workers:
                if w.get("min_workers", 0) > left:
                    w["min_workers"] = left
                left -= w.get("min_workers", 0)
        sum_min = sum(w.get("min_workers", 0) for w in workers)
        if global_max is not None and sum_min > global_max:
            f["sum_min_workers_exceeds_max"] += 1
        if any(w.get("min_workers", 0) > 0 for w in workers):
            f["min_workers_gt0"] += 1

        # Head type
        head_res = rng.choice([{"CPU": 0}, {"CPU": 2, "memory": 8 * GB}, {"CPU": 4}, {}])
        head = {"name": head_name, "resources": head_res, "node_config": self.node_config(head_name)}
        if self.chance(0.1):
            head["max_workers"] = rng.randint(1, 3)  # head type also usable for workers
            head["resources"] = {"CPU": 4, "memory": 16 * GB}
            f["head_type_as_worker"] += 1
            if self.chance(0.5):
                head["min_workers"] = 1
        elif self.chance(0.05):
            head["max_workers"] = 0
        if self.chance(0.1):
            head["labels"] = {"zone": "a"}

        all_types = list(workers)
        all_types.insert(rng.randint(0, len(all_types)), head)
        if all_types[0] is not head:
            f["head_not_first_type"] += 1
        self.head = head
        self.workers = workers
        self.types = all_types
        self.type_by_name = {t["name"]: t for t in all_types}
        self.hashes = {}  # set once the config's `auth` is known

        ant = {}
        for t in all_types:
            d = {"resources": {k: num(v) for k, v in t["resources"].items()}, "node_config": t["node_config"]}
            for k in ("min_workers", "max_workers", "idle_timeout_s", "priority", "labels"):
                if t.get(k) is not None:
                    d[k] = t[k]
            # shuffle key order a bit (order inside a type does not matter)
            if self.chance(0.3):
                items = list(d.items())
                rng.shuffle(items)
                d = dict(items)
            ant[t["name"]] = d

        cfg = {"cluster_name": f"gen-{self.seed}-{self.idx}"}
        if global_max is not None:
            sum_min = sum(d.get("min_workers", 0) for d in ant.values())
            if self.valid_min_workers and sum_min > global_max:
                # Ray's validate_config rejects sum(min_workers) > max_workers.
                global_max = sum_min
                self.global_max = global_max
            cfg["max_workers"] = global_max
        it = rng.choice([None, None, 0, 0.5, 1, 5, 10])
        self.idle_timeout_s = 300.0 if it is None else it * 60.0
        if it is not None:
            cfg["idle_timeout_minutes"] = it
            f["idle_timeout_minutes_set"] += 1
        if self.chance(0.5):
            cfg["upscaling_speed"] = rng.choice([1.0, 2, 0.5])
        if len(all_types) > 1 or self.chance(0.5):
            cfg["head_node_type"] = head_name
        prov = {"type": rng.choice(["local_processes", "aws", "gcp", "kuberay", "fake_multinode"])}
        if prov["type"] == "aws":
            prov["region"] = "us-west-2"
        if self.disable_check is not None:
            prov["disable_launch_config_check"] = self.disable_check
        cfg["provider"] = prov
        if self.chance(0.3):
            cfg["auth"] = {"ssh_user": "ubuntu"}
        if self.chance(0.2):
            cfg["setup_commands"] = ["pip install -U ray"]
        if self.chance(0.1):
            cfg["file_mounts"] = {"/tmp/data": "/data"}
        cfg["available_node_types"] = ant
        auth = effective_auth(cfg)
        self.hashes = {t["name"]: launch_hash(t["node_config"], auth) for t in all_types}
        return cfg

    def node_config(self, name: str) -> dict:
        rng = self.rng
        r = rng.random()
        if r < 0.15:
            return {}
        nc = {"InstanceType": rng.choice(["m5.large", "m5.4xlarge", "p3.2xlarge", "g5.12xlarge", "c6i.8xlarge"])}
        if self.chance(0.5):
            nc["ImageId"] = f"ami-{rng.getrandbits(32):08x}"
        if self.chance(0.3):
            nc["BlockDeviceMappings"] = [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": rng.choice([100, 200]), "Encrypted": True}}]
        if self.chance(0.2):
            nc["TagSpecifications"] = [{"ResourceType": "instance", "Tags": [{"Key": "pool", "Value": name}]}]
        return nc

    # ----------------------------------------------------------- node states
    def type_total(self, t, head=False):
        total = {k: float(v) for k, v in t["resources"].items()}
        if head:
            total[HEAD_RES] = 1.0
        if self.chance(0.7):
            total[f"node:{self.next_ip()}"] = 1.0
        if self.chance(0.5):
            total["object_store_memory"] = float(self.rng.choice([2, 4, 8]) * GB)
        items = list(total.items())
        if self.chance(0.3):
            self.rng.shuffle(items)
        return dict(items)

    def usage(self, total: dict, kind: str) -> dict:
        """Available resources for a total; kind: idle | partial | full."""
        rng = self.rng
        avail = {}
        for k, v in total.items():
            if kind == "idle" or k.startswith("node:"):
                a = v
            elif kind == "full" and k in ("CPU", "GPU", "TPU", "accel_x"):
                a = 0.0
            else:
                if k in ("memory", "object_store_memory"):
                    a = float(rng.randint(0, int(v // GB)) * GB) if v >= GB else v
                else:
                    a = q(rng.uniform(0, v))
            avail[k] = a
        if kind != "idle" and self.chance(0.25):
            # GCS-style: a fully used resource may be missing from the map
            zeros = [k for k, a in avail.items() if a == 0]
            if zeros:
                del avail[rng.choice(zeros)]
                self.features["available_key_omitted"] += 1
        return avail

    def make_nodes_and_instances(self):
        rng = self.rng
        f = self.features
        nodes = []  # (order key, node dict)
        instances = []
        inst_ids = set()

        def new_inst_id(prefix="im"):
            while True:
                i = f"{prefix}-{rng.getrandbits(24):06x}"
                if i not in inst_ids:
                    inst_ids.add(i)
                    return i

        def hash_for(type_name):
            r = rng.random()
            if r < 0.65:
                return self.hashes.get(type_name, "0" * 40)
            if r < 0.9:
                f["outdated_hash"] += 1
                return hashlib.sha1(f"old-{rng.random()}".encode()).hexdigest()
            return None  # absent

        def add_instance(type_name, status, cloud_id=None, lch="auto"):
            inst = {"instance_id": new_inst_id()}
            if cloud_id:
                inst["cloud_instance_id"] = cloud_id
            inst["node_type"] = type_name
            inst["status"] = status
            if lch == "auto":
                lch = hash_for(type_name)
            if lch is not None:
                inst["launch_config_hash"] = lch
            instances.append(inst)
            f[f"instance_{status}"] += 1
            return inst

        def cloud_id():
            while True:
                c = f"i-{rng.getrandbits(40):010x}"
                if c not in inst_ids:
                    inst_ids.add(c)
                    return c

        # --- head node state
        if self.chance(0.92):
            ht = self.head
            total = self.type_total(ht, head=not self.chance(0.05))
            if HEAD_RES not in total:
                f["head_by_type_fallback"] += 1
            kind = rng.choice(["idle", "partial", "partial"])
            avail = self.usage(total, kind)
            n = {
                "node_id": self.node_id(),
                "instance_id": cloud_id() if self.chance(0.8) else "",
                "ray_node_type_name": ht["name"],
                "status": "RUNNING" if kind != "idle" else rng.choice(["RUNNING", "IDLE"]),
                "total_resources": total,
                "available_resources": avail,
            }
            if n["status"] == "IDLE":
                n["idle_duration_ms"] = rng.choice([1000, 10 ** 6, 10 ** 7])
            if ht.get("labels"):
                n["labels"] = dict(ht["labels"])
            if n["instance_id"] and self.chance(0.3):
                add_instance(ht["name"], "RAY_RUNNING", cloud_id=n["instance_id"], lch=self.hashes[ht["name"]])
                f["head_with_instance"] += 1
            nodes.append(n)
            f["has_head_node"] += 1

        # --- running workers
        n_workers = rng.choice([0, 1, 2, 3, 5, 8, 12, 20, 28])
        worker_types = [t for t in self.types if t is not self.head]
        if self.head.get("max_workers", 0) > 0:
            worker_types.append(self.head)
        # Most scenarios respect the caps (the usual state of a cluster); the
        # others have too many nodes (caps lowered since the nodes started).
        consistent = self.chance(0.7)
        node_types_pool = worker_types
        sum_min = sum(w.get("min_workers", 0) for w in self.workers)
        if self.alias_flavor == "fill" and sum_min >= 2:
            # k running nodes of types without min_workers, so that the global
            # cap cuts between 1 and sum_min - 1 of the new min_workers nodes
            g = self.global_max
            n_workers = rng.randint(max(0, g - sum_min + 1), g - 1)
            consistent = True
            no_min = [t for t in worker_types if not t.get("min_workers")]
            if no_min:
                node_types_pool = no_min
        if not consistent:
            f["nodes_over_caps_possible"] += 1
        caps = {}
        for t in worker_types:
            m = t.get("max_workers")
            if m is None:
                m = 0 if t is self.head else self.global_max
            caps[t["name"]] = (1 << 30) if m is None else m
        global_left = (1 << 30) if self.global_max is None else self.global_max
        for _ in range(n_workers):
            choices = node_types_pool
            if consistent:
                choices = [t for t in node_types_pool if caps[t["name"]] > 0]
                if not choices or global_left <= 0:
                    break
            t = rng.choice(choices)
            caps[t["name"]] -= 1
            global_left -= 1
            total = self.type_total(t)
            kind = rng.choice(["idle", "idle", "partial", "full"])
            avail = self.usage(total, kind)
            n = {"node_id": self.node_id(), "ray_node_type_name": t["name"]}
            if kind == "idle":
                if self.chance(0.75):
                    n["status"] = "IDLE"
                    tmo = t.get("idle_timeout_s", self.idle_timeout_s)
                    tmo_ms = int(tmo * 1000)
                    n["idle_duration_ms"] = rng.choice(
                        [1, 5000, max(tmo_ms - 1, 1), tmo_ms, tmo_ms + 1, tmo_ms * 3 + 17, 3_600_000]
                    )
                    f["idle_node"] += 1
                else:
                    n["status"] = rng.choice(["RUNNING", None])
            else:
                n["status"] = rng.choice(["RUNNING", "RUNNING", None])
                if self.chance(0.05):
                    n["status"] = "IDLE"
                    n["idle_duration_ms"] = 400_000
                f["busy_node"] += 1
            n["total_resources"] = total
            n["available_resources"] = avail
            labels = dict(t.get("labels") or {})
            if self.chance(0.15):
                labels["team"] = rng.choice(LABEL_UNIVERSE["team"])
            if labels:
                n["labels"] = labels
            # link to an instance?
            r = rng.random()
            if r < 0.55:
                cid = cloud_id()
                n["instance_id"] = cid
                st = rng.choice(["RAY_RUNNING"] * 6 + ["ALLOCATED", "RAY_INSTALLING", "REQUESTED", "RAY_STOP_REQUESTED"])
                if self.chance(0.15):
                    # join through instance_id (no cloud_instance_id)
                    inst = add_instance(t["name"], st)
                    n["instance_id"] = inst["instance_id"]
                    f["join_by_instance_id"] += 1
                else:
                    add_instance(t["name"], st, cloud_id=cid)
                if st != "RAY_RUNNING":
                    f["joined_status_advanced_or_kept"] += 1
                if st == "RAY_STOP_REQUESTED":
                    f["stop_requested_with_node"] += 1
            elif r < 0.9:
                n["instance_id"] = cloud_id()
                f["node_without_instance"] += 1
            else:
                n["instance_id"] = ""
                f["node_without_instance_id"] += 1
            nodes.append(n)

        # --- draining / dead nodes
        removed_type = rng.choice(["old-gpu", "legacy-cpu", "retired"])
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            dead = self.chance(0.6)
            use_removed = self.chance(0.35)
            if use_removed:
                tname = removed_type
                f["removed_type_node"] += 1
            else:
                tname = rng.choice(worker_types)["name"]
            n = {"node_id": self.node_id(), "ray_node_type_name": tname}
            if dead:
                n["status"] = "DEAD"
                f["dead_node"] += 1
            else:
                n["status"] = "DRAINING"
                t = self.type_by_name.get(tname) or {"resources": {"CPU": 8}}
                total = self.type_total(t)
                n["total_resources"] = total
                n["available_resources"] = self.usage(total, rng.choice(["idle", "partial"]))
                f["draining_node"] += 1
            r = rng.random()
            if r < 0.5:
                cid = cloud_id()
                n["instance_id"] = cid
                st = rng.choice(["RAY_RUNNING", "RAY_STOPPING", "RAY_STOP_REQUESTED", "TERMINATING",
                                 "RAY_INSTALLING", "RAY_STOPPED", "TERMINATION_FAILED"])
                if n["status"] == "DRAINING" and st == "RAY_STOPPED":
                    st = "RAY_STOPPING"
                add_instance(tname, st, cloud_id=cid)
            elif r < 0.9:
                n["instance_id"] = cloud_id()
            else:
                n["instance_id"] = ""
            nodes.append(n)

        # --- instances without a node state
        for _ in range(rng.choice([0, 0, 1, 2, 3, 5])):
            t = rng.choice(worker_types)
            st = rng.choice(["QUEUED", "REQUESTED", "ALLOCATED", "RAY_INSTALLING", "RAY_STOP_REQUESTED",
                             "RAY_RUNNING"] + NON_LIVE_STATUSES)
            cid = cloud_id() if st not in ("QUEUED", "REQUESTED") else None
            add_instance(t["name"], st, cloud_id=cid)
            f["pending_or_orphan_instance"] += 1
        if self.chance(0.2):
            add_instance(removed_type, rng.choice(NON_LIVE_STATUSES), cloud_id=cloud_id())
            f["removed_type_instance"] += 1

        # order: shuffle workers a bit, head not always first
        if len(nodes) > 1 and self.chance(0.3):
            h = nodes.pop(0)
            nodes.insert(rng.randint(0, len(nodes)), h)
        rng.shuffle(instances)
        # instance dict key order: vary
        self.nodes = nodes
        self.instances = instances

    # --------------------------------------------------------------- demands
    def shape(self, infeasible_ok=True):
        rng = self.rng
        r = rng.random()
        if infeasible_ok and r < 0.04:
            self.features["infeasible_shape"] += 1
            return rng.choice([{"CPU": 10000}, {"GPU": 100}, {"FPGA": 1}, {"CPU": 1, "GPU": 1, "TPU": 1},
                               {"memory": 10 ** 15}])
        if r < 0.45:
            generic = [{"CPU": 1}, {"CPU": 0.5}, {"CPU": 0.25}, {"CPU": 2}, {"CPU": 4},
                       {"CPU": 1, "memory": 2 * GB}, {"GPU": 1}, {"GPU": 1, "CPU": 1},
                       {"GPU": 0.5, "CPU": 1}, {"TPU": 4, "CPU": 1}, {"accel_x": 1},
                       {"accel_x": 0.25, "CPU": 0.5}, {"CPU": 8}, {"CPU": 1.5}]
            if self.chance(0.85):  # mostly shapes some node type can hold
                fitting = [g for g in generic
                           if any(all(v <= t["resources"].get(k, 0) for k, v in g.items()) for t in self.types)]
                generic = fitting or generic
            return dict(rng.choice(generic))
        t = rng.choice(self.types)
        res = t["resources"]
        if not res:
            return {"CPU": 1}
        out = {}
        for k, v in res.items():
            if v <= 0 or self.chance(0.3):
                continue
            if k == "memory":
                out[k] = rng.randint(1, max(1, int(v // GB))) * GB
            else:
                frac = rng.choice([0.25, 0.5, 0.75, 1.0])
                x = q(v * frac)
                if x <= 0:
                    x = 0.25
                out[k] = num(x)
        if not out:
            out = {"CPU": 1}
        if self.chance(0.03):
            out["GPU"] = 0  # explicit zero: present key, no amount
            self.features["zero_valued_resource"] += 1
        if self.chance(0.03):
            out[IMPLICIT_PREFIX + rng.choice(["a1", "zz"])] = 0.5
            self.features["implicit_resource"] += 1
        return out

    def label_selectors(self):
        """1-3 selectors (the 2nd and 3rd are fallbacks), each 1-2 constraints.
        Mostly built from labels some node type has, so that they can match."""
        rng = self.rng
        present = sorted({(k, v) for t in self.types for k, v in (t.get("labels") or {}).items()})
        sels = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            cons = []
            if present and self.chance(0.75):
                for key, val in rng.sample(present, min(len(present), rng.choice([1, 1, 2]))):
                    if any(c["label_key"] == key for c in cons):
                        continue
                    if self.chance(0.75):
                        op, vals = "LABEL_OPERATOR_IN", [val] + ([rng.choice(LABEL_UNIVERSE[key])] if self.chance(0.3) else [])
                    else:
                        others = [v for v in LABEL_UNIVERSE[key] if v != val]
                        op, vals = "LABEL_OPERATOR_NOT_IN", [rng.choice(others or [val])]
                    cons.append({"label_key": key, "operator": op, "label_values": sorted(set(vals))})
                    self.features["selector_not_in" if op.endswith("NOT_IN") else "selector_in"] += 1
            else:
                for key in rng.sample(sorted(LABEL_UNIVERSE) + ["nolabel"], rng.choice([1, 1, 2])):
                    vals = LABEL_UNIVERSE.get(key, ["x"]) + ["zz-none"]
                    op = rng.choice(["LABEL_OPERATOR_IN", "LABEL_OPERATOR_IN", "LABEL_OPERATOR_NOT_IN"])
                    self.features["selector_not_in" if op.endswith("NOT_IN") else "selector_in"] += 1
                    cons.append({"label_key": key, "operator": op,
                                 "label_values": rng.sample(vals, rng.choice([1, 1, 2]))})
            sels.append({"label_constraints": cons})
        if len(sels) > 1:
            self.features["selector_fallbacks"] += 1
        return sels

    def make_demands(self):
        rng = self.rng
        f = self.features
        reqs = []
        budget = rng.choices([0, 4, 10, 25, 50, 100, 200, 280], weights=[8, 12, 18, 20, 18, 12, 7, 5])[0]
        while budget > 0:
            c = min(budget, rng.choice([1, 1, 2, 3, 5, 10, 20, 50]))
            budget -= c
            r = {"resources_bundle": self.shape()}
            if self.chance(0.25):
                r["label_selectors"] = self.label_selectors()
                f["request_label_selectors"] += 1
            if "GPU" in r["resources_bundle"]:
                f["gpu_request"] += 1
            reqs.append({"request": r, "count": c})
        self.requests = reqs
        self.demand_units = sum(r["count"] for r in reqs)

        gangs = []
        self.pgs = []
        for _ in range(rng.choice([0, 0, 1, 2, 3, 4])):
            strat = rng.choice(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"])
            pg = self.pg_id()
            state = "RESCHEDULING" if self.chance(0.15) else "PENDING"
            nb = min(rng.randint(1, 6), 300 - self.demand_units)
            if nb < 1:
                break
            self.demand_units += nb
            f["gang_" + strat] += 1
            base = self.shape(infeasible_ok=self.chance(0.3))
            bundles = [base if self.chance(0.6) else self.shape(infeasible_ok=False) for _ in range(nb)]
            label = pg_label(pg)
            constraint = pg_placement_constraint(strat, pg)
            legacy = []
            for b in bundles:
                rq = {"resources_bundle": dict(b)}
                if constraint:
                    rq["placement_constraints"] = [json.loads(json.dumps(constraint))]
                legacy.append(rq)
            g = {"details": f"{pg}:{strat}|{state}"}
            mode = rng.random()
            if mode < 0.55:
                g["requests"] = legacy  # pre-bundle_selectors GCS
            else:
                # current GCS: legacy requests AND one bundle selector, whose
                # requests may carry per-bundle label selectors
                sel_reqs = []
                per_bundle_sel = self.chance(0.4)
                common = None
                if per_bundle_sel and self.chance(0.5):
                    common = [{"label_constraints": [{"label_key": "zone", "operator": "LABEL_OPERATOR_IN",
                                                      "label_values": [rng.choice(["a", "b", "c"])]}]}]
                for rq in legacy:
                    s = json.loads(json.dumps(rq))
                    if per_bundle_sel:
                        s["label_selectors"] = common or [self.label_selectors()[0]]
                        f["gang_bundle_label_selectors"] += 1
                    sel_reqs.append(s)
                if mode < 0.97:
                    g["requests"] = legacy
                else:
                    f["gang_bundle_selectors_only"] += 1
                g["bundle_selectors"] = [{"resource_requests": sel_reqs}]
                f["gang_bundle_selectors"] += 1
            gangs.append(g)
            self.pgs.append((pg, strat))
        self.gangs = gangs

        # dynamic labels: nodes already holding bundles of a (STRICT_SPREAD) PG
        live = [n for n in self.nodes if n.get("status") not in ("DEAD",)]
        for pg, strat in self.pgs:
            if live and (strat == "STRICT_SPREAD" or self.chance(0.2)) and self.chance(0.5):
                for n in rng.sample(live, min(len(live), rng.randint(1, 2))):
                    n.setdefault("dynamic_labels", {})[f"_PG_{pg}"] = ""
                    f["dynamic_labels"] += 1
        if live and self.chance(0.1):
            n = rng.choice(live)
            n.setdefault("dynamic_labels", {})[f"_PG_{self.pg_id()}"] = ""
            f["dynamic_labels"] += 1

        self.constraints = []
        if self.chance(0.25):
            rr = []
            for _ in range(rng.randint(1, 3)):
                if self.chance(0.15):
                    sh = rng.choice([{"CPU": 1000}, {"GPU": 64}, {"FOO": 1}])
                    f["constraint_infeasible_shape"] += 1
                else:
                    sh = self.shape(infeasible_ok=False)
                # keep tasks + bundles + constraint units <= 300
                room = 300 - self.demand_units
                if room < 1:
                    break
                cnt = min(room, rng.choice([1, 2, 4, 8, 16, 32]))
                self.demand_units += cnt
                e = {"request": {"resources_bundle": sh}, "count": cnt}
                if self.chance(0.1):
                    e["request"]["label_selectors"] = self.label_selectors()
                    f["constraint_label_selectors"] += 1
                rr.append(e)
            if rr:
                self.constraints = [{"resource_requests": rr}]
                f["cluster_constraint"] += 1

    # ----------------------------------------------------------- serialising
    def encode_state(self):
        rng = self.rng
        f = self.features
        style = rng.random()
        camel_mode = "camel" if style < 0.2 else ("mixed" if style < 0.27 else "snake")
        int64_str = self.chance(0.3)
        enum_num = self.chance(0.15)
        b64 = rng.choice(["std"] * 8 + ["url", "nopad"])
        f["style_" + camel_mode] += 1
        if int64_str:
            f["int64_as_string"] += 1
        if enum_num:
            f["enum_as_number"] += 1
        f["base64_" + b64] += 1

        def b64enc(b: bytes) -> str:
            if b64 == "url":
                return base64.urlsafe_b64encode(b).decode()
            s = base64.b64encode(b).decode()
            return s.rstrip("=") if b64 == "nopad" else s

        def conv(obj, do_camel):
            if isinstance(obj, dict):
                out = {}
                for k, v in obj.items():
                    nk = camel(k) if do_camel else k
                    if k in MAP_FIELDS:
                        out[nk] = {mk: num(mv) if isinstance(mv, (int, float)) and not isinstance(mv, bool) else mv
                                   for mk, mv in v.items()}
                    elif k in INT64_FIELDS and int64_str:
                        out[nk] = str(v)
                    elif k == "status" and enum_num:
                        out[nk] = NODE_STATUS_NUM[v]
                    elif k == "operator" and enum_num:
                        out[nk] = OPERATOR_NUM[v]
                    else:
                        out[nk] = conv(v, do_camel)
                return out
            if isinstance(obj, list):
                return [conv(v, do_camel) for v in obj]
            return obj

        def pick_camel():
            if camel_mode == "camel":
                return True
            if camel_mode == "mixed":
                return self.chance(0.5)
            return False

        nodes_out = []
        for n in self.nodes:
            d = {}
            for k in ("node_id", "instance_id", "ray_node_type_name", "status", "idle_duration_ms",
                      "total_resources", "available_resources", "labels", "dynamic_labels"):
                if k not in n or n[k] is None:
                    continue
                v = n[k]
                if k == "node_id":
                    v = b64enc(v)
                d[k] = v
            if self.chance(0.2):
                d["node_ip_address"] = "10.1.2.3"
                d["instance_type_name"] = "m5.large"
                d["node_state_version"] = rng.randint(1, 99)
            nodes_out.append(conv(d, pick_camel()))

        state = {}
        if self.chance(0.2):
            state["cluster_resource_state_version"] = rng.randint(1, 1000)
            state["cluster_session_name"] = f"session_{self.idx}"
        state["node_states"] = nodes_out
        if self.requests or self.chance(0.5):
            state["pending_resource_requests"] = [conv(r, pick_camel()) for r in self.requests]
        if self.gangs:
            state["pending_gang_resource_requests"] = [conv(g, pick_camel()) for g in self.gangs]
        if self.constraints or self.chance(0.2):
            state["cluster_resource_constraints"] = [conv(c, pick_camel()) for c in self.constraints]
        top_camel = camel_mode == "camel"
        return {(camel(k) if top_camel else k): v for k, v in state.items()}

    def scenario(self):
        cfg = self.make_config()
        self.make_nodes_and_instances()
        self.make_demands()
        scn = {"config": cfg, "cluster_resource_state": self.encode_state()}
        if self.instances or self.chance(0.3):
            scn["instances"] = self.instances
        # Ray's CloudResourceMonitor inputs, in about a third of the scenarios: scores for
        # some worker types, often ties and extremes (so they decide between types).
        names = [n for n in cfg["available_node_types"] if n != cfg.get("head_node_type")]
        twins = any(n + "-b" in names for n in names)
        if self.chance(0.7 if twins else 0.3):
            for key in ("cloud_resource_availabilities", "recoverable_resource_availabilities"):
                if not names or not self.chance(0.7):
                    continue
                picked = [n for n in names if self.chance(0.6)]
                # Twin types tie exactly on the score: there the maps decide.
                for n in names:
                    if n + "-b" in names and self.chance(0.8):
                        picked += [x for x in (n, n + "-b") if x not in picked]
                scn[key] = {
                    n: self.rng.choice([0.0, 0.0, 0.25, 0.5, 1.0, round(self.rng.random(), 3)])
                    for n in picked
                }
                self.features[f"has_{key}"] += 1
        if self.mode_aliasing:
            self.features["aliasing_mode"] += 1
        return scn


def generate(seed: int, count: int, out: Path, stats: bool = False, valid_min_workers: bool = False) -> Counter:
    out.mkdir(parents=True, exist_ok=True)
    total = Counter()
    for i in range(count):
        g = Gen(seed, i, valid_min_workers)
        scn = g.scenario()
        as_json = g.rng.random() < 0.2
        name = f"s{seed}-{i:04d}"
        if as_json:
            (out / f"{name}.json").write_text(json.dumps(scn, indent=1) + "\n")
            g.features["format_json"] += 1
        else:
            text = yaml.dump(scn, Dumper=_YAML_DUMPER, sort_keys=False, default_flow_style=None, width=160)
            (out / f"{name}.yaml").write_text(f"# generated: seed={seed} index={i}\n" + text)
            g.features["format_yaml"] += 1
        for k in g.features:
            total[k] += 1  # scenarios having the feature
    if stats:
        for k, v in sorted(total.items()):
            print(f"{k:40s} {v}")
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stats", action="store_true", help="print how many scenarios have each feature")
    ap.add_argument("--valid-min-workers", action="store_true",
                    help="keep sum(min_workers) <= max_workers, as Ray's validate_config demands")
    args = ap.parse_args(argv)
    generate(args.seed, args.count, Path(args.out), args.stats, args.valid_min_workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
