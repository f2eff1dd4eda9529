#!/usr/bin/env python3
"""Oracle for `rayscale plan`: run Ray 2.60's own v2 scheduler on a scenario.

Builds a `ray.autoscaler.v2.scheduler.SchedulingRequest` from a scenario file
(format: docs in /work/shared/spec/plan-scenario.md), calls
`ResourceDemandScheduler(event_logger=None).schedule(request)` and prints the
reply as the spec's canonical decision JSON. Ray's code is imported and
called, never copied.

Usage (with the Ray venv's interpreter, $(scripts/setup-python.sh)):
    ray_plan.py [--both] SCENARIO [SCENARIO...]
        One file: its decision JSON. Several: one line of JSON per file
        (a scenario that is an error prints {"error": ..., "exit": N}).
    ray_plan.py [--both] --dir IN_DIR --out OUT_DIR
        Every *.yaml / *.yml / *.json of IN_DIR (sorted by name), in this
        one process; writes OUT_DIR/<stem>.json.

--both writes {"ray": D, "intended": D', "rules": [...]} where D' is the
decision of "Ray as intended" (see MIN_WORKERS_ALIASING below) and rules is
["MIN_WORKERS_ALIASING"] when D != D', else [].
--expected writes the decision rayscale must print: D' when a rule applies,
else D (used for examples/scenarios/*.expected.json).

Errors: a scenario the spec calls malformed (wrong type, key rejected by
Ray's cluster schema, unknown node type of a running/pending node or
instance, more than one cluster resource constraint, ...) is reported as
{"error": "<path>: <message>", "exit": 2}; for a single file without --dir,
the message goes to stderr as one line and the exit status is 2. An
exception inside Ray's scheduler is {"error": ..., "exit": 1, "internal":
true} (exit status 1) - the generator must never produce such inputs.

Contract details that both sides (this oracle and rayscale) follow:

* launch_config_hash of a node type = Ray's hash_launch_conf(node_config, auth)
  (sha256 of json.dumps([node_config, auth], sort_keys=True), base32hex), auth
  being the config's own or its cloud's default ({ssh_user: ubuntu} on aws, gcp,
  azure), as Ray's prepare_config fills it.
* NodeState maps (total_resources, available_resources) are handed to Ray
  in FILE ORDER. Ray reads them from a upb protobuf map whose iteration
  order is randomised per process; Ray's utilisation scores sum floats in
  that order, so real Ray is not deterministic at the last ulp. We pin the
  order to the scenario's order (what rayscale uses) via a read-only view
  object in AutoscalerInstance.ray_node (all other fields are the proto's).
* Choices the spec leaves open, made here (rayscale should match):
  - min_workers > the type's max_workers (Ray's NodeTypeConfig asserts):
    error, exit 2, path config.available_node_types.<type>.min_workers.
  - "unknown node type" errors apply to node states / instances whose
    (advanced) status is QUEUED..RAY_STOP_REQUESTED, RAY_RUNNING included
    (also a RAY_RUNNING instance without a node state).
  - an instance joins at most one node state: the first one naming it;
    later node states naming it are treated as node states without an
    instance. Duplicate instance ids are an error.
  - a node state with an empty instance_id never joins an instance.
* MIN_WORKERS_ALIASING: Ray's _enforce_min_workers_per_type creates the new
  min_workers nodes of a type as `[node] * n` (one object n times);
  copy.deepcopy of the node list keeps that aliasing, so when the global
  max_workers cuts one of them, all of them are cut. "Ray as intended" wraps
  that (unchanged) function and then replaces the context's node list by
  independent deep copies.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from canonical_json import canonical, dumps  # noqa: E402,F401

# Quiet Ray's autoscaler loggers (warnings about outdated heads etc.).
logging.getLogger("ray").setLevel(logging.ERROR)

from google.protobuf import json_format  # noqa: E402

import ray.autoscaler  # noqa: E402
from ray.autoscaler.v2.instance_manager.config import NodeTypeConfig  # noqa: E402
from ray.autoscaler.v2.scheduler import (  # noqa: E402
    NodeStateCache,
    ResourceDemandScheduler,
    SchedulingNode,
    SchedulingNodeStatus,
    SchedulingRequest,
)
from ray.autoscaler.v2.schema import AutoscalerInstance  # noqa: E402
from ray.core.generated.autoscaler_pb2 import (  # noqa: E402
    ClusterResourceState,
    NodeStatus,
)
from ray.core.generated.instance_manager_pb2 import (  # noqa: E402
    Instance,
    NodeKind,
    TerminationRequest,
)

for _name in ("ray", "ray.autoscaler", "ray.autoscaler.v2", "ray.autoscaler.v2.scheduler"):
    logging.getLogger(_name).setLevel(logging.ERROR)

HEAD_RESOURCE = "node:__internal_head__"
NO_CAP = 1 << 62  # "very large": no per-type cap
RULE_ALIASING = "MIN_WORKERS_ALIASING"

STATUS_CHAIN = [
    "QUEUED",
    "REQUESTED",
    "ALLOCATED",
    "RAY_INSTALLING",
    "RAY_RUNNING",
    "RAY_STOP_REQUESTED",
    "RAY_STOPPING",
    "RAY_STOPPED",
]
VALID_INSTANCE_STATUSES = STATUS_CHAIN + [
    "TERMINATING",
    "TERMINATED",
    "ALLOCATION_FAILED",
    "RAY_INSTALL_FAILED",
    "TERMINATION_FAILED",
    "ALLOCATION_TIMEOUT",
]
# Statuses in which an instance is, or may become, a Ray node (Ray's
# InstanceUtil.is_ray_running_reachable): an unknown type is an error there.
LIVE_STATUSES = set(STATUS_CHAIN[:6])
INSTANCE_KEYS = {"instance_id", "cloud_instance_id", "node_type", "status", "launch_config_hash"}
TOP_KEYS = {
    "config",
    "cluster_resource_state",
    "instances",
    "cloud_resource_availabilities",
    "recoverable_resource_availabilities",
}


def _availability_map(scn: dict, key: str) -> dict:
    """Ray's availability map (node type -> score in [0, 1]) of the scenario."""
    m = scn.get(key)
    if m is None:
        return {}
    if not isinstance(m, dict):
        raise ScenarioError(f"{key}: expected a mapping, got {type(m).__name__}")
    out = {}
    for k, v in m.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ScenarioError(f"{key}.{k}: expected a number, got {type(v).__name__}")
        if not 0.0 <= float(v) <= 1.0:
            raise ScenarioError(f"{key}.{k}: expected a number in [0, 1], got {v}")
        out[str(k)] = float(v)
    return out


# libyaml's loader when present (same YAML 1.1 rules as SafeLoader, ~10x faster).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ScenarioError(Exception):
    """A malformed scenario (exit 2)."""


# --------------------------------------------------------------------------
# Canonical JSON
# --------------------------------------------------------------------------


def launch_config_hash(node_config: Any, auth: Any) -> str:
    """Ray's own hash_launch_conf, from the wheel."""
    from ray.autoscaler._private.util import hash_launch_conf

    return hash_launch_conf(node_config, auth)


def effective_auth(config: Dict[str, Any]) -> Any:
    """The `auth` Ray hashes with after prepare_config: the config's own, else the
    cloud's defaults.yaml's (aws, gcp, azure: {ssh_user: ubuntu}), else {}."""
    if "auth" in config:
        return config["auth"]
    provider = config.get("provider")
    if isinstance(provider, dict) and provider.get("type") in ("aws", "gcp", "azure"):
        from ray.autoscaler._private.providers import _get_default_config

        return _get_default_config(provider).get("auth", {})
    return {}


# --------------------------------------------------------------------------
# Config validation with Ray's own cluster schema (ray-schema.json)
# --------------------------------------------------------------------------

_SCHEMA_VALIDATOR = None


def _schema_validator():
    global _SCHEMA_VALIDATOR
    if _SCHEMA_VALIDATOR is None:
        import jsonschema

        path = os.path.join(os.path.dirname(ray.autoscaler.__file__), "ray-schema.json")
        with open(path) as f:
            schema = json.load(f)
        cls = jsonschema.validators.validator_for(schema)
        _SCHEMA_VALIDATOR = cls(schema)
    return _SCHEMA_VALIDATOR


def _path(prefix: str, parts) -> str:
    out = prefix
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}"
    return out


def validate_config(config: Any) -> None:
    if not isinstance(config, dict):
        raise ScenarioError(f"config: expected a mapping, got {type(config).__name__}")
    errors = sorted(
        _schema_validator().iter_errors(config), key=lambda e: list(map(str, e.absolute_path))
    )
    if errors:
        e = errors[0]
        raise ScenarioError(f"{_path('config', e.absolute_path)}: {e.message}")


# --------------------------------------------------------------------------
# Scenario -> SchedulingRequest
# --------------------------------------------------------------------------


class NodeStateView:
    """Read-only stand-in for a NodeState proto handed to Ray's scheduler:
    the map fields are plain dicts in scenario (file) order; everything else
    is forwarded to the parsed proto."""

    def __init__(self, proto, raw: dict):
        self._proto = proto
        self.total_resources = _ordered_map(proto.total_resources, raw, "total_resources", "totalResources")
        self.available_resources = _ordered_map(
            proto.available_resources, raw, "available_resources", "availableResources"
        )
        self.labels = _ordered_map(proto.labels, raw, "labels", "labels")
        self.dynamic_labels = _ordered_map(proto.dynamic_labels, raw, "dynamic_labels", "dynamicLabels")

    def __getattr__(self, name):
        if name.startswith("__") or name == "_proto":
            raise AttributeError(name)
        return getattr(self._proto, name)


def _ordered_map(proto_map, raw: dict, snake: str, camel: str) -> dict:
    keys: List[str] = []
    for k in (snake, camel):
        src = raw.get(k) if isinstance(raw, dict) else None
        if isinstance(src, dict):
            for key in src:
                if key not in keys:
                    keys.append(key)
    out = {k: proto_map[k] for k in keys if k in proto_map}
    for k in proto_map:  # defensive: anything the raw dict did not show
        if k not in out:
            out[k] = proto_map[k]
    return out


def _raw_list(raw: dict, snake: str, camel: str) -> list:
    v = raw.get(snake, raw.get(camel)) if isinstance(raw, dict) else None
    return v if isinstance(v, list) else []


def load_scenario(path: str) -> dict:
    with open(path) as f:
        text = f.read()
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.load(text, Loader=_YAML_LOADER)
    except Exception as e:  # noqa: BLE001
        raise ScenarioError(f"<file>: cannot parse: {str(e).splitlines()[0]}")
    return data


def ray_default_max_workers(provider: Dict[str, Any]) -> Optional[int]:
    """The max_workers of Ray's defaults.yaml for this provider (None without one)."""
    from ray.autoscaler._private.providers import _get_default_config

    if not isinstance(provider, dict) or not isinstance(provider.get("type"), str):
        return None
    try:
        return _get_default_config(provider).get("max_workers")
    except (NotImplementedError, OSError):
        return None


def build_request(scn: Any) -> Tuple[SchedulingRequest, Dict[str, str]]:
    """Returns the SchedulingRequest and the set of real instance ids
    (id -> node type) of the scenario."""
    if not isinstance(scn, dict):
        raise ScenarioError("<root>: expected a mapping")
    for k in scn:
        if k not in TOP_KEYS:
            raise ScenarioError(f"{k}: unknown top-level key")
    if "config" not in scn:
        raise ScenarioError("config: missing")
    config = scn["config"]
    validate_config(config)

    types = config.get("available_node_types")
    if not types:
        raise ScenarioError("config.available_node_types: missing or empty")
    if len(types) == 1:
        head_type = next(iter(types))
    else:
        head_type = config.get("head_node_type")
        if head_type is None:
            raise ScenarioError("config.head_node_type: required with several node types")
    if head_type not in types:
        raise ScenarioError(f"config.head_node_type: {head_type!r} is not one of available_node_types")

    global_max = config.get("max_workers")
    provider = config.get("provider") or {}
    if global_max is None:
        # Ray's prepare_config (run by the v2 autoscaler's AutoscalingConfig) lays the
        # config over its cloud's defaults.yaml, whose max_workers a config without one
        # takes; a provider with no defaults file keeps none.
        global_max = ray_default_max_workers(provider)
        # ... and then Ray's validate_config holds it to the sum of min_workers.
        sum_min = sum(t.get("min_workers", 0) for t in types.values() if isinstance(t, dict))
        if global_max is not None and sum_min > global_max:
            raise ScenarioError(
                f"config.max_workers: not set, so Ray's default {global_max}, smaller than "
                f"the sum of min_workers ({sum_min})"
            )
    disable_check = provider.get("disable_launch_config_check", True)
    if not isinstance(disable_check, bool):
        raise ScenarioError(
            f"config.provider.disable_launch_config_check: expected a boolean, got {disable_check!r}"
        )

    node_type_configs: Dict[str, NodeTypeConfig] = {}
    hashes: Dict[str, str] = {}
    for name, t in types.items():
        is_head = name == head_type
        if "max_workers" in t:
            max_w = t["max_workers"]
        elif is_head:
            max_w = 0
        elif global_max is not None:
            max_w = global_max
        else:
            max_w = NO_CAP
        if is_head:
            max_w += 1
        min_w = t.get("min_workers", 0)
        if min_w < 0 or min_w > max_w:
            # Ray's NodeTypeConfig asserts min_worker_nodes <= max_worker_nodes.
            raise ScenarioError(
                f"config.available_node_types.{name}.min_workers: {min_w} exceeds the "
                f"type's max_workers ({max_w - (1 if is_head else 0)})"
            )
        hashes[name] = launch_config_hash(t.get("node_config", {}), effective_auth(config))
        node_type_configs[name] = NodeTypeConfig(
            name=name,
            min_worker_nodes=min_w,
            max_worker_nodes=max_w,
            idle_timeout_s=(float(t["idle_timeout_s"]) if t.get("idle_timeout_s") is not None else None),
            priority=t.get("priority", 0),
            resources={k: float(v) for k, v in (t.get("resources") or {}).items()},
            labels=dict(t.get("labels") or {}),
            launch_config_hash=hashes[name],
        )

    idle_minutes = config.get("idle_timeout_minutes", 5)
    idle_timeout_s = float(idle_minutes) * 60

    # ---- cluster_resource_state
    raw_state = scn.get("cluster_resource_state")
    if raw_state is None:
        raw_state = {}
    if not isinstance(raw_state, dict):
        raise ScenarioError("cluster_resource_state: expected a mapping")
    try:
        state = json_format.ParseDict(raw_state, ClusterResourceState())
    except json_format.ParseError as e:
        raise ScenarioError(f"cluster_resource_state: {str(e).splitlines()[0]}")
    if len(state.cluster_resource_constraints) > 1:
        raise ScenarioError(
            "cluster_resource_state.cluster_resource_constraints: at most one entry is supported"
        )
    raw_nodes = _raw_list(raw_state, "node_states", "nodeStates")

    # ---- instances
    raw_instances = scn.get("instances") or []
    if not isinstance(raw_instances, list):
        raise ScenarioError("instances: expected a list")
    insts = []
    seen_ids = set()
    for i, ri in enumerate(raw_instances):
        p = f"instances[{i}]"
        if not isinstance(ri, dict):
            raise ScenarioError(f"{p}: expected a mapping")
        for k in ri:
            if k not in INSTANCE_KEYS:
                raise ScenarioError(f"{p}.{k}: unknown key")
        for k in ("instance_id", "node_type", "status"):
            if k not in ri:
                raise ScenarioError(f"{p}.{k}: missing")
        for k in INSTANCE_KEYS:
            if k in ri and not isinstance(ri[k], str):
                raise ScenarioError(f"{p}.{k}: expected a string, got {ri[k]!r}")
        if not ri["instance_id"]:
            raise ScenarioError(f"{p}.instance_id: must not be empty")
        if ri["instance_id"] in seen_ids:
            raise ScenarioError(f"{p}.instance_id: duplicate {ri['instance_id']!r}")
        seen_ids.add(ri["instance_id"])
        if ri["status"] not in VALID_INSTANCE_STATUSES:
            raise ScenarioError(f"{p}.status: unknown instance status {ri['status']!r}")
        insts.append(
            {
                "path": p,
                "instance_id": ri["instance_id"],
                "cloud_instance_id": ri.get("cloud_instance_id") or "",
                "node_type": ri["node_type"],
                "status": ri["status"],
                "launch_config_hash": ri.get("launch_config_hash", ""),
                "joined": False,
            }
        )
    by_join_key: Dict[str, dict] = {}
    for inst in insts:
        key = inst["cloud_instance_id"] or inst["instance_id"]
        by_join_key.setdefault(key, inst)

    # ---- head detection
    head_idx: Optional[int] = None
    for i, ns in enumerate(state.node_states):
        if HEAD_RESOURCE in ns.total_resources:
            head_idx = i
            break
    if head_idx is None:
        for i, ns in enumerate(state.node_states):
            if ns.ray_node_type_name == head_type:
                head_idx = i
                break

    current: List[AutoscalerInstance] = []
    real_ids: Dict[str, str] = {}

    def check_type(t: str, status: str, path: str):
        if status in LIVE_STATUSES and t not in node_type_configs:
            raise ScenarioError(f"{path}: unknown node type {t!r}")

    for i, ns in enumerate(state.node_states):
        raw_ns = raw_nodes[i] if i < len(raw_nodes) else {}
        node_hex = ns.node_id.hex()
        nstatus = ns.status
        inst = by_join_key.get(ns.instance_id) if ns.instance_id else None
        if inst is not None and inst["joined"]:
            inst = None  # an instance joins at most one node state (the first)
        if inst is not None:
            inst["joined"] = True
            status = inst["status"]
            idx = STATUS_CHAIN.index(status) if status in STATUS_CHAIN else None
            if idx is not None:
                if nstatus in (NodeStatus.RUNNING, NodeStatus.IDLE, NodeStatus.UNSPECIFIED):
                    if idx < STATUS_CHAIN.index("RAY_RUNNING"):
                        status = "RAY_RUNNING"
                elif nstatus == NodeStatus.DRAINING:
                    if idx < STATUS_CHAIN.index("RAY_STOPPING"):
                        status = "RAY_STOPPING"
                elif nstatus == NodeStatus.DEAD:
                    if idx < STATUS_CHAIN.index("RAY_STOPPED"):
                        status = "RAY_STOPPED"
            itype = inst["node_type"]
            check_type(itype, status, f"{inst['path']}.node_type")
            instance_id = inst["instance_id"]
            cloud_id = inst["cloud_instance_id"] or None
            lch = inst["launch_config_hash"]
        else:
            if nstatus == NodeStatus.DRAINING:
                status = "RAY_STOPPING"
            elif nstatus == NodeStatus.DEAD:
                status = "RAY_STOPPED"
            else:
                status = "RAY_RUNNING"
            itype = ns.ray_node_type_name
            check_type(
                itype, status, f"cluster_resource_state.node_states[{i}].ray_node_type_name"
            )
            instance_id = ns.instance_id or node_hex
            cloud_id = ns.instance_id or None
            lch = hashes.get(itype, "")
        im = Instance(
            instance_id=instance_id,
            cloud_instance_id=cloud_id or "",
            node_id=node_hex,
            status=getattr(Instance, status),
            instance_type=itype,
            launch_config_hash=lch,
            node_kind=NodeKind.HEAD if i == head_idx else NodeKind.WORKER,
        )
        real_ids[instance_id] = itype
        current.append(
            AutoscalerInstance(
                cloud_instance_id=cloud_id,
                ray_node=NodeStateView(ns, raw_ns),
                im_instance=im,
            )
        )

    for inst in insts:
        if inst["joined"]:
            continue
        check_type(inst["node_type"], inst["status"], f"{inst['path']}.node_type")
        im = Instance(
            instance_id=inst["instance_id"],
            cloud_instance_id=inst["cloud_instance_id"],
            status=getattr(Instance, inst["status"]),
            instance_type=inst["node_type"],
            launch_config_hash=inst["launch_config_hash"],
            node_kind=NodeKind.WORKER,
        )
        real_ids[inst["instance_id"]] = inst["node_type"]
        current.append(
            AutoscalerInstance(
                cloud_instance_id=inst["cloud_instance_id"] or None,
                ray_node=None,
                im_instance=im,
            )
        )

    req = SchedulingRequest(
        disable_launch_config_check=disable_check,
        node_type_configs=node_type_configs,
        max_num_nodes=(global_max + 1) if global_max is not None else None,
        idle_timeout_s=idle_timeout_s,
        pending_idle_timeout_s=None,
        resource_requests=list(state.pending_resource_requests),
        gang_resource_requests=list(state.pending_gang_resource_requests),
        cluster_resource_constraints=list(state.cluster_resource_constraints),
        current_instances=current,
        cloud_resource_availabilities=_availability_map(scn, "cloud_resource_availabilities"),
        recoverable_resource_availabilities=_availability_map(
            scn, "recoverable_resource_availabilities"
        ),
    )
    return req, real_ids


# --------------------------------------------------------------------------
# Reply -> decision
# --------------------------------------------------------------------------


def _res(m) -> dict:
    return {k: float(v) for k, v in m.items()}


def to_decision(reply, real_ids: Dict[str, str]) -> dict:
    launch: Dict[str, int] = {}
    for lr in reply.to_launch:
        launch[lr.instance_type] = launch.get(lr.instance_type, 0) + lr.count
    launch = {k: v for k, v in launch.items() if v}

    terminate = []
    for tr in reply.to_terminate:
        if not tr.instance_id or tr.instance_id not in real_ids:
            continue
        terminate.append(
            {
                "instance_id": tr.instance_id,
                "ray_node_id": tr.ray_node_id or "",
                "node_type": tr.instance_type,
                "cause": TerminationRequest.Cause.Name(tr.cause),
            }
        )
    terminate.sort(key=lambda t: t["instance_id"])

    groups: Dict[str, Tuple[dict, int]] = {}
    for r in reply.infeasible_resource_requests:
        res = _res(r.resources_bundle)
        key = dumps(res)
        prev = groups.get(key)
        groups[key] = (res, (prev[1] if prev else 0) + 1)
    infeasible_requests = [{"resources": r, "count": c} for r, c in groups.values()]

    infeasible_gangs = [
        {"details": g.details, "bundles": [_res(r.resources_bundle) for r in g.requests]}
        for g in reply.infeasible_gang_resource_requests
    ]
    infeasible_constraints = [
        {"resources": _res(rbc.request.resources_bundle), "count": rbc.count}
        for c in reply.infeasible_cluster_resource_constraints
        for rbc in c.resource_requests
    ]

    def sort_items(items):
        return sorted(items, key=dumps)

    return canonical(
        {
            "launch": launch,
            "terminate": terminate,
            "infeasible_requests": sort_items(infeasible_requests),
            "infeasible_gang_requests": sort_items(infeasible_gangs),
            "infeasible_constraints": sort_items(infeasible_constraints),
        }
    )


# --------------------------------------------------------------------------
# Running Ray (as is, and as intended)
# --------------------------------------------------------------------------

_ORIG_MIN_WORKERS = ResourceDemandScheduler._enforce_min_workers_per_type
_ORIG_NODE_NEW = SchedulingNode.new
_ORIG_TRY_SCHEDULE = SchedulingNode.try_schedule
_ORIG_SEEN_OR_MARK = NodeStateCache.was_seen_or_mark

RULE_PENDING_HASH = "PENDING_LAUNCH_HASH"
RULE_TERMINATING = "TERMINATING_CAPACITY"
ALL_RULES = (RULE_ALIASING, RULE_PENDING_HASH, RULE_TERMINATING)


def _min_workers_unaliased(ctx) -> None:
    """Ray's own _enforce_min_workers_per_type, then break the aliasing of
    the `[node] * n` list it built."""
    _ORIG_MIN_WORKERS(ctx)
    ctx.update([copy.deepcopy(n) for n in ctx.get_nodes()])


def _node_new_keeping_hash(instance, node_type_configs, disable_launch_config_check):
    """Ray's own SchedulingNode.new; a pending node keeps its instance's launch
    config hash (Ray leaves it empty, so every pending node looks outdated)."""
    node = _ORIG_NODE_NEW(instance, node_type_configs, disable_launch_config_check)
    if (
        node is not None
        and node.status == SchedulingNodeStatus.SCHEDULABLE
        and instance.im_instance.status != Instance.RAY_RUNNING
    ):
        node.launch_config_hash = instance.im_instance.launch_config_hash
    return node


def _try_schedule_not_terminating(self, requests, resource_request_source, shape_keys=None):
    """Ray's own try_schedule, except that a node being terminated takes nothing."""
    if self.status == SchedulingNodeStatus.TO_TERMINATE:
        return list(requests), (0, False, 0, 0, 0)
    return _ORIG_TRY_SCHEDULE(self, requests, resource_request_source, shape_keys)


def _seen_or_mark_not_terminating(self, node):
    """Ray's own NodeStateCache check, except that a node being terminated is skipped
    without marking its state, so it never hides an identical live node."""
    if node.status == SchedulingNodeStatus.TO_TERMINATE:
        return True
    return _ORIG_SEEN_OR_MARK(self, node)


def run_ray(req: SchedulingRequest, intended=False):
    """Runs Ray's scheduler; `intended` is False (Ray as is), True (every rule's
    fix) or a collection of rule names whose fixes apply."""
    if intended is True:
        rules = set(ALL_RULES)
    elif not intended:
        rules = set()
    else:
        rules = set(intended)
    if RULE_ALIASING in rules:
        ResourceDemandScheduler._enforce_min_workers_per_type = staticmethod(_min_workers_unaliased)
    if RULE_PENDING_HASH in rules:
        SchedulingNode.new = staticmethod(_node_new_keeping_hash)
    if RULE_TERMINATING in rules:
        SchedulingNode.try_schedule = _try_schedule_not_terminating
        NodeStateCache.was_seen_or_mark = _seen_or_mark_not_terminating
    try:
        return ResourceDemandScheduler(event_logger=None).schedule(req)
    finally:
        ResourceDemandScheduler._enforce_min_workers_per_type = staticmethod(_ORIG_MIN_WORKERS)
        SchedulingNode.new = staticmethod(_ORIG_NODE_NEW)
        SchedulingNode.try_schedule = _ORIG_TRY_SCHEDULE
        NodeStateCache.was_seen_or_mark = _ORIG_SEEN_OR_MARK


def _rules_that_matter(req, ray_dec, int_dec, real_ids):
    """Names the rules whose fix alone changes Ray's decision (all of them when
    only their combination does)."""
    if dumps(ray_dec) == dumps(int_dec):
        return []
    hits = [
        r for r in ALL_RULES
        if dumps(to_decision(run_ray(req, intended=[r]), real_ids)) != dumps(ray_dec)
    ]
    return hits or list(ALL_RULES)


def plan(path: str, both: bool, expected: bool = False) -> Tuple[dict, int]:
    """Returns (output object, exit code)."""
    if expected:
        obj, rc = plan(path, True)
        return (obj["intended"] if rc == 0 else obj), rc
    try:
        scn = load_scenario(path)
        req, real_ids = build_request(scn)
    except ScenarioError as e:
        return {"error": str(e), "exit": 2}, 2
    try:
        ray_dec = to_decision(run_ray(req, intended=False), real_ids)
        if not both:
            return ray_dec, 0
        int_dec = to_decision(run_ray(req, intended=True), real_ids)
        rules = _rules_that_matter(req, ray_dec, int_dec, real_ids)
        return {"ray": ray_dec, "intended": int_dec, "rules": rules}, 0
    except Exception as e:  # noqa: BLE001 - Ray assertion or bug
        tb = traceback.format_exc().strip().splitlines()
        return {"error": f"{type(e).__name__}: {e} [{tb[-3].strip() if len(tb) >= 3 else ''}]",
                "exit": 1, "internal": True}, 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--both", action="store_true", help="also compute Ray-as-intended")
    ap.add_argument("--expected", action="store_true",
                    help="print the decision rayscale must print (intended if a rule applies)")
    ap.add_argument("--dir", help="input directory (all *.yaml, *.yml, *.json)")
    ap.add_argument("--out", help="output directory for --dir")
    args = ap.parse_args(argv)

    if args.dir:
        if not args.out or args.scenarios:
            ap.error("--dir needs --out and no positional scenarios")
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        files = sorted(
            p for p in Path(args.dir).iterdir()
            if p.suffix in (".yaml", ".yml", ".json") and not p.name.endswith(".expected.json")
        )
        worst = 0
        for p in files:
            obj, rc = plan(str(p), args.both, args.expected)
            (out / (p.stem + ".json")).write_text(dumps(obj) + "\n")
            if rc == 1:
                worst = 1
                print(f"{p}: {obj['error']}", file=sys.stderr)
        return worst

    if not args.scenarios:
        ap.error("give SCENARIO files or --dir IN --out OUT")
    if len(args.scenarios) == 1:
        obj, rc = plan(args.scenarios[0], args.both, args.expected)
        if rc:
            print(obj["error"], file=sys.stderr)
            return rc
        print(dumps(obj))
        return 0
    worst = 0
    for s in args.scenarios:
        obj, rc = plan(s, args.both, args.expected)
        worst = max(worst, rc)
        print(dumps(obj))
    return worst


if __name__ == "__main__":
    sys.exit(main())
