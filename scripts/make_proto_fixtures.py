#!/usr/bin/env python3
"""Write binary + JSON protobuf fixtures made with Ray's own Python classes.

Every fixture is built from the classes shipped in the installed Ray wheel
(ray.core.generated.*_pb2), with every field set to a distinctive non-default
value: nested messages, repeated fields with >= 2 entries, maps with >= 2
entries, non-UTF-8 bytes, non-zero enums, both branches of the optional
(oneof-style) placement constraints, int64/uint64 values above 2^53, uint64
values above 2^63, uint32 values above 2^31 and negative int32/int64 values.
The script checks that itself (see `check_populated`) before writing.

For each fixture NAME it writes, into crates/gcs-client/tests/fixtures/:
  NAME.bin         SerializeToString(deterministic=True)
  NAME.json        MessageToJson(preserving_proto_field_name=True)
  NAME.camel.json  MessageToJson() (lowerCamelCase field names)
plus MANIFEST.tsv (name, full message name, size, sha256 of the .bin).
JSON is written with sorted keys so that map order cannot vary between runs.

The values are mirrored by hand in crates/gcs-client/tests/wire_compat.rs:
change both together.

Usage (from the repo root):
    $(scripts/setup-python.sh) scripts/make_proto_fixtures.py          # (re)write
    $(scripts/setup-python.sh) scripts/make_proto_fixtures.py --check  # verify tree
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor as FD

from ray.core.generated import autoscaler_pb2 as A
from ray.core.generated import common_pb2 as C
from ray.core.generated import gcs_service_pb2 as G
from ray.core.generated import instance_manager_pb2 as IM

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "crates" / "gcs-client" / "tests" / "fixtures"

BIG = 2**53  # 9007199254740992: first integer a double cannot tell from its neighbour
U64_MAX = 2**64 - 1

# ---------------------------------------------------------------------------
# Building blocks (mirrored in wire_compat.rs)
# ---------------------------------------------------------------------------


def node_id(i: int) -> bytes:
    """Non-UTF-8 bytes (0xff, 0xfe, 0x80, and the invalid pair 0xc3 0x28)."""
    return b"\x00\xff\xfe\x80\xc3\x28node-" + str(i).encode()


def ls_primary(tag: str) -> C.LabelSelector:
    return C.LabelSelector(
        label_constraints=[
            C.LabelSelectorConstraint(
                label_key="ray.io/accelerator-type",
                operator=C.LABEL_OPERATOR_IN,
                label_values=["A100", f"H100-{tag}"],
            ),
            C.LabelSelectorConstraint(
                label_key="ray.io/availability-zone",
                operator=C.LABEL_OPERATOR_NOT_IN,
                label_values=["us-east-1a", "us-east-1b", f"zone-{tag}"],
            ),
            C.LabelSelectorConstraint(
                label_key=f"team/{tag}",
                operator=C.LABEL_OPERATOR_IN,
                label_values=["ml", "infra"],
            ),
        ]
    )


def ls_secondary(tag: str) -> C.LabelSelector:
    return C.LabelSelector(
        label_constraints=[
            C.LabelSelectorConstraint(
                label_key="ray.io/market-type",
                operator=C.LABEL_OPERATOR_NOT_IN,
                label_values=["spot", f"preemptible-{tag}"],
            ),
            C.LabelSelectorConstraint(
                label_key="region",
                operator=C.LABEL_OPERATOR_IN,
                label_values=[f"eu-{tag}", "ap-south-1"],
            ),
        ]
    )


def anti_only(tag: str) -> A.PlacementConstraint:
    return A.PlacementConstraint(
        anti_affinity=A.AntiAffinityConstraint(label_name=f"anti-{tag}", label_value=f"anti-val-{tag}")
    )


def aff_only(tag: str) -> A.PlacementConstraint:
    return A.PlacementConstraint(
        affinity=A.AffinityConstraint(label_name=f"aff-{tag}", label_value=f"aff-val-{tag}")
    )


def both_constraints(tag: str) -> A.PlacementConstraint:
    return A.PlacementConstraint(
        anti_affinity=A.AntiAffinityConstraint(label_name="both-anti", label_value=tag),
        affinity=A.AffinityConstraint(label_name="both-aff", label_value=tag),
    )


def rr(tag: str, cpu: float) -> A.ResourceRequest:
    return A.ResourceRequest(
        resources_bundle={"CPU": cpu, "GPU": 0.5, f"bundle_group_{tag}": 0.001},
        placement_constraints=[anti_only(tag), aff_only(tag), both_constraints(tag)],
        label_selectors=[ls_primary(tag), ls_secondary(tag)],
    )


def rr_by_count(tag: str, cpu: float, count: int) -> A.ResourceRequestByCount:
    return A.ResourceRequestByCount(request=rr(tag, cpu), count=count)


def crc(tag: str, base: int) -> A.ClusterResourceConstraint:
    return A.ClusterResourceConstraint(
        resource_requests=[rr_by_count(f"{tag}-a", 2.0, base), rr_by_count(f"{tag}-b", 16.0, base + 1)]
    )


def bundle_selector(tag: str, strategy: int) -> A.BundleSelector:
    return A.BundleSelector(
        resource_requests=[rr(f"{tag}-x", 1.25), rr(f"{tag}-y", 0.75)],
        locality_requirement=A.LocalityRequirement(
            locality_constraint=A.LocalityConstraint(label_name=f"ray.io/rack-{tag}", placement_strategy=strategy),
            label_selector=ls_secondary(tag),
        ),
    )


def gang(tag: str, s1: int, s2: int) -> A.GangResourceRequest:
    return A.GangResourceRequest(
        requests=[rr(f"{tag}-a", 0.5), rr(f"{tag}-b", 4.0)],
        details=f"placement group {tag}: 2 bundles",
        bundle_selectors=[bundle_selector(f"{tag}-s1", s1), bundle_selector(f"{tag}-s2", s2)],
    )


def node_state(i: int, status: int) -> A.NodeState:
    return A.NodeState(
        node_id=node_id(i),
        instance_id=f"i-0{i}23456789abcdef",
        ray_node_type_name=f"worker-gpu-\u03b2{i}",  # non-ASCII: beta
        available_resources={"CPU": 3.5 + i, "GPU": 0.25, "memory": 8589934592.5},
        total_resources={"CPU": 8.0 * i, "GPU": 1.0, f"node:10.0.0.{i}": 1.0},
        dynamic_labels={"ray.io/placement-group": f"pg-{i}", "custom/dyn": f"dyn-value-{i}"},
        node_state_version=BIG + 100 + i,
        status=status,
        idle_duration_ms=BIG + 200 + i,
        node_ip_address=f"10.0.0.{i}",
        instance_type_name=f"m5.{i}xlarge",
        node_activity=[f"Busy workers on node {i}.", "Resource: CPU currently in use.", "Pending bundle"],
        labels={"ray.io/node-id": f"node-{i}", "ray.io/market-type": "spot", "ray.io/accelerator-type": "A100"},
    )


def cluster_resource_state() -> A.ClusterResourceState:
    return A.ClusterResourceState(
        cluster_resource_state_version=BIG + 1,
        last_seen_autoscaler_state_version=BIG + 2,
        node_states=[node_state(1, A.RUNNING), node_state(2, A.DRAINING)],
        pending_resource_requests=[rr_by_count("p1", 1.0, BIG + 3), rr_by_count("p2", 2.0, BIG + 4)],
        pending_gang_resource_requests=[
            gang("g1", C.STRICT_PACK, C.SPREAD),
            gang("g2", C.STRICT_SPREAD, C.STRICT_PACK),
        ],
        cluster_resource_constraints=[crc("c1", BIG + 5), crc("c2", BIG + 7)],
        cluster_session_name="session_2025-01-02_03-04-05_678901_4242",
    )


def autoscaling_state() -> A.AutoscalingState:
    return A.AutoscalingState(
        last_seen_cluster_resource_state_version=BIG + 11,
        autoscaler_state_version=-(BIG + 12),  # negative int64 on purpose
        pending_instance_requests=[
            A.PendingInstanceRequest(
                instance_type_name="m5.xlarge", ray_node_type_name="cpu-worker", count=2147483647, request_ts=BIG + 13
            ),
            A.PendingInstanceRequest(
                instance_type_name="g5.xlarge", ray_node_type_name="gpu-worker", count=-7, request_ts=BIG + 14
            ),
        ],
        infeasible_resource_requests=[rr("inf1", 1024.0), rr("inf2", 0.125)],
        infeasible_gang_resource_requests=[
            gang("ig1", C.SPREAD, C.STRICT_SPREAD),
            gang("ig2", C.STRICT_PACK, C.STRICT_SPREAD),
        ],
        infeasible_cluster_resource_constraints=[crc("ic1", BIG + 15), crc("ic2", BIG + 17)],
        pending_instances=[
            A.PendingInstance(
                instance_type_name="p3.2xlarge",
                ray_node_type_name="gpu-worker",
                instance_id="im-pending-1",
                ip_address="10.1.0.1",
                details="launching: waiting for ssh",
            ),
            A.PendingInstance(
                instance_type_name="m5.large",
                ray_node_type_name="cpu-worker",
                instance_id="im-pending-2",
                ip_address="10.1.0.2",
                details="installing ray",
            ),
        ],
        failed_instance_requests=[
            A.FailedInstanceRequest(
                instance_type_name="p4d.24xlarge",
                ray_node_type_name="gpu-big",
                count=3,
                reason="InsufficientInstanceCapacity",
                start_ts=BIG + 19,
                failed_ts=BIG + 20,
            ),
            A.FailedInstanceRequest(
                instance_type_name="t3.micro",
                ray_node_type_name="tiny",
                count=1,
                reason="quota exceeded: vCPU limit",
                start_ts=BIG + 21,
                failed_ts=BIG + 22,
            ),
        ],
    )


def cluster_config() -> A.ClusterConfig:
    return A.ClusterConfig(
        min_resources={"CPU": U64_MAX, "GPU": BIG + 41},
        max_resources={"CPU": 2**63 + 5, "GPU": BIG + 43},
        node_group_configs=[
            A.NodeGroupConfig(
                resources={"CPU": BIG + 44, "memory": 2**63 + 1},
                min_count=3000000000,  # above i32::MAX: catches u32/i32 mix-ups
                max_count=-1,
                name="gpu-group",
            ),
            A.NodeGroupConfig(
                resources={"CPU": BIG + 45, "GPU": BIG + 46},
                min_count=1,
                max_count=2147483647,
                name="cpu-group-\u00fc",
            ),
        ],
    )


def instance(i: int, status: int, kind: int) -> IM.Instance:
    I = IM.Instance
    return I(
        instance_id=f"im-inst-{i}",
        cloud_instance_id=f"i-cloud-{i}",
        node_id=f"ray-node-hex-{i}",
        status=status,
        instance_type=f"g5.{4 * i}xlarge",
        total_resources={"CPU": 48.0 * i, "GPU": 4.0, "memory": 1.5e11},
        internal_ip=f"172.31.0.{i}",
        external_ip=f"54.0.0.{i}",
        version=BIG + 300 + i,
        status_history=[
            I.StatusHistory(instance_status=I.QUEUED, timestamp_ns=BIG + 310 + i, details="queued"),
            I.StatusHistory(instance_status=I.REQUESTED, timestamp_ns=BIG + 320 + i, details="requested from cloud"),
            I.StatusHistory(instance_status=I.ALLOCATED, timestamp_ns=BIG + 330 + i, details="allocated"),
            I.StatusHistory(instance_status=status, timestamp_ns=BIG + 340 + i, details=f"entered status {status}"),
        ],
        launch_request_id=f"lr-{i}",
        exit_details=f"exit details {i}",
        launch_config_hash=f"sha256:{i}abcdef",
        node_kind=kind,
    )


def termination_request() -> IM.TerminationRequest:
    return IM.TerminationRequest(
        id="term-1",
        ray_node_id="ray-node-hex-9",
        instance_id="im-inst-9",
        cause=IM.TerminationRequest.MAX_NUM_NODE_PER_TYPE,
        instance_type="m5.large",
        idle_duration_ms=U64_MAX - 1,
        max_num_nodes_per_type=4000000000,
        max_num_nodes=4294967295,
        details="over the per-type limit",
        instance_status=IM.Instance.RAY_STOPPING,
    )


def instance_update_event() -> IM.InstanceUpdateEvent:
    return IM.InstanceUpdateEvent(
        instance_id="im-inst-9",
        new_instance_status=IM.Instance.TERMINATING,
        details="idle for too long",
        upsert=True,
        instance_type="m5.large",
        cloud_instance_id="i-cloud-9",
        node_kind=IM.HEAD,
        ray_node_id="ray-node-hex-9",
        launch_request_id="lr-9",
        termination_request=termination_request(),
    )


def instance_update_event_presence() -> IM.InstanceUpdateEvent:
    """Every proto3 `optional` field present but holding its default value."""
    return IM.InstanceUpdateEvent(
        instance_type="",
        cloud_instance_id="",
        node_kind=IM.UNMANAGED,
        ray_node_id="",
        launch_request_id="",
        termination_request=IM.TerminationRequest(idle_duration_ms=0, max_num_nodes_per_type=0, max_num_nodes=0),
    )


# KV values: namespace/keys/values all contain bytes that are not UTF-8.
NS = b"ns\x00\xff/session"
K1 = b"key/\x80\x81\xfe\xff/1"
K2 = b"key/\x00\xc3\x28/2"
K3 = b"\xff\xfe\xfd"
V1 = b"\x00\x01\x02\xff\xfe\xc3\x28 value-1"
V2 = b"value-2\x80"


def gcs_status(code: int, what: str) -> G.GcsStatus:
    return G.GcsStatus(code=code, message=f"status of {what}")


# ---------------------------------------------------------------------------
# Fixture table: name -> (message, fully_populated)
# ---------------------------------------------------------------------------


def fixtures() -> dict[str, tuple[object, bool]]:
    crs = cluster_resource_state()
    ast = autoscaling_state()
    return {
        # autoscaler.proto
        "cluster_resource_state": (crs, True),
        "get_cluster_resource_state_request": (
            A.GetClusterResourceStateRequest(last_seen_cluster_resource_state_version=BIG + 99),
            True,
        ),
        "get_cluster_resource_state_reply": (A.GetClusterResourceStateReply(cluster_resource_state=crs), True),
        "autoscaling_state": (ast, True),
        "report_autoscaling_state_request": (A.ReportAutoscalingStateRequest(autoscaling_state=ast), True),
        "get_cluster_status_reply": (
            A.GetClusterStatusReply(autoscaling_state=ast, cluster_resource_state=crs),
            True,
        ),
        "drain_node_request": (
            A.DrainNodeRequest(
                node_id=node_id(1),
                reason=A.DRAIN_NODE_REASON_PREEMPTION,
                reason_message="preempted by spot reclaim \u2602",
                deadline_timestamp_ms=BIG + 31,
            ),
            True,
        ),
        "drain_node_reply": (
            A.DrainNodeReply(is_accepted=True, rejection_reason_message="accepted; message kept for the test"),
            True,
        ),
        "request_cluster_resource_constraint_request": (
            A.RequestClusterResourceConstraintRequest(cluster_resource_constraint=crc("rc", BIG + 33)),
            True,
        ),
        "resize_raylet_resource_instances_request": (
            A.ResizeRayletResourceInstancesRequest(node_id=node_id(2), resources={"CPU": 6.0, "GPU": 2.0}),
            True,
        ),
        "resize_raylet_resource_instances_reply": (
            A.ResizeRayletResourceInstancesReply(total_resources={"CPU": 6.0, "memory": 2.5e10}),
            True,
        ),
        "report_cluster_config_request": (A.ReportClusterConfigRequest(cluster_config=cluster_config()), True),
        # One fixture per branch of PlacementConstraint's optional pair.
        "placement_constraint_anti_affinity": (anti_only("solo"), False),
        "placement_constraint_affinity": (aff_only("solo"), False),
        # instance_manager.proto (package ray.rpc.autoscaler.im)
        "instance": (instance(1, IM.Instance.RAY_RUNNING, IM.WORKER), True),
        "instance_update_event": (instance_update_event(), True),
        "instance_update_event_presence": (instance_update_event_presence(), False),
        "update_instance_manager_state_request": (
            IM.UpdateInstanceManagerStateRequest(
                expected_version=BIG + 400, updates=[instance_update_event(), instance_update_event_presence()]
            ),
            False,
        ),
        "update_instance_manager_state_reply": (
            IM.UpdateInstanceManagerStateReply(
                status=IM.Status(code=IM.VERSION_MISMATCH, message="expected version 5, got 4"),
                version=BIG + 401,
            ),
            True,
        ),
        "get_instance_manager_state_reply": (
            IM.GetInstanceManagerStateReply(
                status=IM.Status(code=IM.OK, message="ok"),
                state=IM.InstanceManagerState(
                    version=BIG + 402,
                    instances=[
                        instance(1, IM.Instance.RAY_RUNNING, IM.WORKER),
                        instance(2, IM.Instance.ALLOCATION_TIMEOUT, IM.HEAD),
                    ],
                ),
            ),
            True,
        ),
        "launch_request": (
            IM.LaunchRequest(instance_type="m5.large", count=5, id="lr-launch-1", request_ts_ms=BIG + 403),
            True,
        ),
        # gcs_service.proto: InternalKVGcsService
        "internal_kv_get_request": (G.InternalKVGetRequest(key=K1, namespace=NS), True),
        "internal_kv_get_reply": (G.InternalKVGetReply(status=gcs_status(5, "get"), value=V1), True),
        "internal_kv_multi_get_request": (G.InternalKVMultiGetRequest(keys=[K1, K2, K3], namespace=NS), True),
        "internal_kv_multi_get_reply": (
            G.InternalKVMultiGetReply(
                status=gcs_status(6, "multi_get"),
                results=[G.MapFieldEntry(key=K1, value=V1), G.MapFieldEntry(key=K2, value=V2)],
            ),
            True,
        ),
        "internal_kv_put_request": (
            G.InternalKVPutRequest(key=K2, value=V2, overwrite=True, namespace=NS),
            True,
        ),
        "internal_kv_put_reply": (G.InternalKVPutReply(status=gcs_status(7, "put"), added=True), True),
        "internal_kv_del_request": (G.InternalKVDelRequest(key=K3, namespace=NS, del_by_prefix=True), True),
        "internal_kv_del_reply": (G.InternalKVDelReply(status=gcs_status(8, "del"), deleted_num=42), True),
        "internal_kv_exists_request": (G.InternalKVExistsRequest(key=K1, namespace=NS), True),
        "internal_kv_exists_reply": (G.InternalKVExistsReply(status=gcs_status(9, "exists"), exists=True), True),
        "internal_kv_keys_request": (G.InternalKVKeysRequest(prefix=b"key/\x80", namespace=NS), True),
        "internal_kv_keys_reply": (
            G.InternalKVKeysReply(status=gcs_status(10, "keys"), results=[K1, K2]),
            True,
        ),
        "get_internal_config_reply": (
            G.GetInternalConfigReply(
                status=gcs_status(11, "config"),
                config='{"object_spilling_threshold": 0.8, "name": "\u00fc"}',
            ),
            True,
        ),
    }


# ---------------------------------------------------------------------------
# Self-check: is every field really populated with a non-default value?
# ---------------------------------------------------------------------------

INT64_TYPES = {FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_SINT64, FD.TYPE_FIXED64, FD.TYPE_SFIXED64}
# Messages made only of `optional` alternatives: an instance may leave some
# unset, but every list of them must cover every field between its elements.
ALTERNATIVE_TYPES = {"ray.rpc.autoscaler.PlacementConstraint"}


def _is_map(f) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _is_repeated(f) -> bool:
    return f.is_repeated if hasattr(f, "is_repeated") else f.label == FD.LABEL_REPEATED


def check_value(f, v, path: str, out: list[str]) -> None:
    if f.type == FD.TYPE_MESSAGE:
        check_populated(v, path, out)
    elif f.type == FD.TYPE_ENUM:
        if v == 0:
            out.append(f"{path}: enum is 0")
    elif f.type in INT64_TYPES:
        if abs(v) <= BIG:
            out.append(f"{path}: 64-bit value {v} is not beyond 2^53")
    elif not v:
        out.append(f"{path}: default value {v!r}")


def check_populated(msg, path: str, out: list[str]) -> None:
    d = msg.DESCRIPTOR
    alternatives = d.full_name in ALTERNATIVE_TYPES
    set_count = 0
    for f in d.fields:
        p = f"{path}.{f.name}"
        value = getattr(msg, f.name)
        if _is_map(f):
            if len(value) < 2:
                out.append(f"{p}: map has {len(value)} entries")
            vf = f.message_type.fields_by_name["value"]
            for k in sorted(value):
                check_value(vf, value[k], f"{p}[{k!r}]", out)
        elif _is_repeated(f):
            if len(value) < 2:
                out.append(f"{p}: repeated field has {len(value)} entries")
            for idx, v in enumerate(value):
                check_value(f, v, f"{p}[{idx}]", out)
            if f.message_type is not None and f.message_type.full_name in ALTERNATIVE_TYPES:
                for sub in f.message_type.fields:
                    if not any(v.HasField(sub.name) for v in value):
                        out.append(f"{p}: no element sets {sub.name}")
        else:
            if f.has_presence and not msg.HasField(f.name):
                if not alternatives:
                    out.append(f"{p}: not set")
                continue
            set_count += 1
            check_value(f, value, p, out)
    if alternatives and set_count == 0:
        out.append(f"{path}: no alternative set")


def check_bytes_not_utf8(msg, path: str, out: list[str]) -> None:
    """At least one bytes value in a message that has bytes must be non-UTF-8."""
    found_bytes, found_non_utf8 = False, False

    def walk(m):
        nonlocal found_bytes, found_non_utf8
        for f, v in m.ListFields():
            vals = v if _is_repeated(f) and not _is_map(f) else [v]
            for x in vals:
                if f.type == FD.TYPE_BYTES:
                    found_bytes = True
                    try:
                        x.decode("utf-8")
                    except UnicodeDecodeError:
                        found_non_utf8 = True
                elif f.type == FD.TYPE_MESSAGE and not _is_map(f):
                    walk(x)

    walk(msg)
    if found_bytes and not found_non_utf8:
        out.append(f"{path}: bytes fields present but all are valid UTF-8")


def check_presence_fixture(msg, path: str, out: list[str]) -> None:
    """Every proto3 optional (non-message) field must be present."""
    for f in msg.DESCRIPTOR.fields:
        if f.has_presence and not _is_repeated(f):
            if not msg.HasField(f.name):
                out.append(f"{path}.{f.name}: optional field not present")
            elif f.type == FD.TYPE_MESSAGE:
                check_presence_fixture(getattr(msg, f.name), f"{path}.{f.name}", out)


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def render() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    problems: list[str] = []
    manifest = ["# name\tmessage\tbin_bytes\tbin_sha256"]
    for name, (msg, full) in fixtures().items():
        if full:
            check_populated(msg, name, problems)
        elif name == "update_instance_manager_state_request":
            check_populated(msg.updates[0], f"{name}.updates[0]", problems)
            check_presence_fixture(msg.updates[1], f"{name}.updates[1]", problems)
        elif "presence" in name:
            check_presence_fixture(msg, name, problems)
        else:
            check_populated(msg, name, problems)  # alternatives: partial allowed
        check_bytes_not_utf8(msg, name, problems)

        cls = type(msg)
        data = msg.SerializeToString(deterministic=True)
        if cls.FromString(data) != msg:
            problems.append(f"{name}: binary round trip differs")
        snake = json_format.MessageToJson(msg, preserving_proto_field_name=True, sort_keys=True, indent=2) + "\n"
        camel = json_format.MessageToJson(msg, sort_keys=True, indent=2) + "\n"
        for label, text in (("json", snake), ("camel.json", camel)):
            if json_format.Parse(text, cls()) != msg:
                problems.append(f"{name}.{label}: JSON round trip differs")
        files[f"{name}.bin"] = data
        files[f"{name}.json"] = snake.encode()
        files[f"{name}.camel.json"] = camel.encode()
        manifest.append(f"{name}\t{msg.DESCRIPTOR.full_name}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}")
    if problems:
        print("fixture self-check failed:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        raise SystemExit(1)
    files["MANIFEST.tsv"] = ("\n".join(manifest) + "\n").encode()
    return files


def is_ours(p: Path) -> bool:
    return p.is_file() and (p.name == "MANIFEST.tsv" or p.suffix in (".bin", ".json"))


def main() -> int:
    ap = argparse.ArgumentParser(description="write protobuf fixtures with Ray's own classes")
    ap.add_argument("--check", action="store_true", help="do not write; fail if the tree differs")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = ap.parse_args()
    out_dir: Path = args.out_dir

    files = render()
    existing = {p.name for p in out_dir.glob("*") if is_ours(p)} if out_dir.is_dir() else set()
    if args.check:
        bad = [n for n, b in files.items() if not (out_dir / n).is_file() or (out_dir / n).read_bytes() != b]
        stale = sorted(existing - set(files))
        for n in bad:
            print(f"differs or missing: {n}")
        for n in stale:
            print(f"stale: {n}")
        if bad or stale:
            print("fixtures are out of date: run scripts/make_proto_fixtures.py")
            return 1
        print(f"fixtures up to date: {len(files) // 3} fixtures, {len(files)} files")
        return 0

    out_dir.mkdir(parents=True, exist_ok=True)
    for n in sorted(existing - set(files)):
        (out_dir / n).unlink()
        print(f"removed stale {n}")
    for n, b in sorted(files.items()):
        (out_dir / n).write_bytes(b)
    total = sum(len(b) for n, b in files.items() if n.endswith(".bin"))
    print(f"wrote {len(files) // 3} fixtures ({len(files)} files, {total} bytes of .bin) to "
          f"{out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
