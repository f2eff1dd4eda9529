//! Wire-compatibility tests against fixtures made by Ray's own Python classes.
//!
//! `scripts/make_proto_fixtures.py` builds messages with the protobuf classes
//! of the installed Ray wheel and writes them to `tests/fixtures/` as binary
//! (`NAME.bin`), proto3 JSON with proto field names (`NAME.json`) and proto3
//! JSON with lowerCamelCase names (`NAME.camel.json`).
//!
//! For every fixture this test
//! * decodes the `.bin` with our prost types and checks every field against
//!   the values the script set (hand-written below: keep them in sync),
//! * re-encodes it and checks `decode(encode(x)) == x`, that the encoding has
//!   the same length as Ray's (nothing was dropped as an unknown field), and
//!   for map-free messages that it is byte-for-byte identical,
//! * decodes both JSON files through the pbjson serde impls and checks they
//!   equal the binary-decoded message, and round-trips through our own JSON.

use prost::Message;
use rayscale_gcs_client::proto::ray::rpc;
use rayscale_gcs_client::proto::ray::rpc::autoscaler as asc;
use rayscale_gcs_client::proto::ray::rpc::autoscaler::im;

use asc::{DrainNodeReason, NodeStatus};
use im::instance::InstanceStatus;
use im::termination_request::Cause;
use im::{NodeKind, StatusCode};
use rpc::{LabelSelectorOperator, PlacementStrategy};

/// 2^53: every 64-bit value in the fixtures lies beyond it, so a detour
/// through f64 anywhere would show.
const BIG: i64 = 1 << 53;
const BIG_U: u64 = 1 << 53;

// ---------------------------------------------------------------------------
// Fixture plumbing
// ---------------------------------------------------------------------------

struct Fixture {
    name: &'static str,
    bin: &'static [u8],
    json: &'static str,
    camel: &'static str,
}

macro_rules! fixture {
    ($name:literal) => {
        Fixture {
            name: $name,
            bin: include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/",
                $name,
                ".bin"
            )),
            json: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/",
                $name,
                ".json"
            )),
            camel: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/",
                $name,
                ".camel.json"
            )),
        }
    };
}

const MANIFEST: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/MANIFEST.tsv"
));

/// Every fixture the script writes; `manifest_is_fully_covered` keeps this
/// list and MANIFEST.tsv in step.
const ALL_FIXTURES: &[&str] = &[
    "cluster_resource_state",
    "get_cluster_resource_state_request",
    "get_cluster_resource_state_reply",
    "autoscaling_state",
    "report_autoscaling_state_request",
    "get_cluster_status_reply",
    "drain_node_request",
    "drain_node_reply",
    "request_cluster_resource_constraint_request",
    "resize_raylet_resource_instances_request",
    "resize_raylet_resource_instances_reply",
    "report_cluster_config_request",
    "placement_constraint_anti_affinity",
    "placement_constraint_affinity",
    "instance",
    "instance_update_event",
    "instance_update_event_presence",
    "update_instance_manager_state_request",
    "update_instance_manager_state_reply",
    "get_instance_manager_state_reply",
    "launch_request",
    "internal_kv_get_request",
    "internal_kv_get_reply",
    "internal_kv_multi_get_request",
    "internal_kv_multi_get_reply",
    "internal_kv_put_request",
    "internal_kv_put_reply",
    "internal_kv_del_request",
    "internal_kv_del_reply",
    "internal_kv_exists_request",
    "internal_kv_exists_reply",
    "internal_kv_keys_request",
    "internal_kv_keys_reply",
    "get_internal_config_reply",
];

/// Whether the message (transitively) holds a map: then prost's encoding may
/// order map entries differently from Ray's, so only the length is compared.
#[derive(Clone, Copy, PartialEq)]
enum Maps {
    None,
    Some,
}

/// Decode, verify, and run the binary and JSON round trips.
fn check<T>(fx: &Fixture, maps: Maps, verify: impl Fn(&T)) -> T
where
    T: Message
        + Default
        + PartialEq
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let name = fx.name;
    let msg = T::decode(fx.bin).unwrap_or_else(|e| panic!("{name}.bin: decode failed: {e}"));
    verify(&msg);

    // Binary round trip.
    let encoded = msg.encode_to_vec();
    assert_eq!(
        encoded.len(),
        fx.bin.len(),
        "{name}: re-encoded length differs from Ray's"
    );
    if maps == Maps::None {
        assert_eq!(
            encoded.as_slice(),
            fx.bin,
            "{name}: re-encoded bytes differ from Ray's"
        );
    }
    let again = T::decode(encoded.as_slice())
        .unwrap_or_else(|e| panic!("{name}: decode(encode(x)) failed: {e}"));
    assert_eq!(again, msg, "{name}: decode(encode(x)) != x");

    // JSON written by Ray's json_format, with proto names and camelCase names.
    let from_json: T = serde_json::from_str(fx.json).unwrap_or_else(|e| panic!("{name}.json: {e}"));
    assert_eq!(from_json, msg, "{name}.json decodes to a different message");
    let from_camel: T =
        serde_json::from_str(fx.camel).unwrap_or_else(|e| panic!("{name}.camel.json: {e}"));
    assert_eq!(
        from_camel, msg,
        "{name}.camel.json decodes to a different message"
    );

    // Our own JSON round trip.
    let ours = serde_json::to_string(&msg).unwrap_or_else(|e| panic!("{name}: to JSON: {e}"));
    let back: T = serde_json::from_str(&ours)
        .unwrap_or_else(|e| panic!("{name}: our JSON back: {e}\n{ours}"));
    assert_eq!(back, msg, "{name}: JSON round trip changed the message");
    msg
}

/// Check a map's exact contents: every listed key with its value, no others.
/// Works for `HashMap<String, _>` and `BTreeMap<String, _>` alike.
macro_rules! assert_map {
    ($map:expr, { $($k:expr => $v:expr),+ $(,)? }) => {{
        let map = &$map;
        let mut expected_len = 0usize;
        $(
            expected_len += 1;
            let key: String = ($k).to_string();
            match map.get(key.as_str()) {
                Some(got) => assert_eq!(*got, $v, "{}[{:?}]", stringify!($map), key),
                None => panic!(
                    "{} has no key {:?}; keys: {:?}",
                    stringify!($map),
                    key,
                    map.keys().collect::<Vec<_>>()
                ),
            }
        )+
        assert_eq!(map.len(), expected_len, "number of entries in {}", stringify!($map));
    }};
}

fn sv(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn bv<B: AsRef<[u8]>>(v: &[B]) -> Vec<&[u8]> {
    v.iter().map(AsRef::as_ref).collect()
}

// ---------------------------------------------------------------------------
// Expected values: mirrors of the builders in make_proto_fixtures.py
// ---------------------------------------------------------------------------

fn node_id(i: u32) -> Vec<u8> {
    let mut v = vec![0x00, 0xff, 0xfe, 0x80, 0xc3, 0x28];
    v.extend_from_slice(format!("node-{i}").as_bytes());
    v
}

fn check_ls_primary(ls: &rpc::LabelSelector, tag: &str) {
    let c = &ls.label_constraints;
    assert_eq!(c.len(), 3, "primary selector {tag}");
    assert_eq!(c[0].label_key, "ray.io/accelerator-type");
    assert_eq!(c[0].operator(), LabelSelectorOperator::LabelOperatorIn);
    assert_eq!(c[0].operator, 1);
    let h100 = format!("H100-{tag}");
    assert_eq!(sv(&c[0].label_values), ["A100", h100.as_str()]);

    assert_eq!(c[1].label_key, "ray.io/availability-zone");
    assert_eq!(c[1].operator(), LabelSelectorOperator::LabelOperatorNotIn);
    assert_eq!(c[1].operator, 2);
    let zone = format!("zone-{tag}");
    assert_eq!(
        sv(&c[1].label_values),
        ["us-east-1a", "us-east-1b", zone.as_str()]
    );

    assert_eq!(c[2].label_key, format!("team/{tag}"));
    assert_eq!(c[2].operator(), LabelSelectorOperator::LabelOperatorIn);
    assert_eq!(sv(&c[2].label_values), ["ml", "infra"]);
}

fn check_ls_secondary(ls: &rpc::LabelSelector, tag: &str) {
    let c = &ls.label_constraints;
    assert_eq!(c.len(), 2, "secondary selector {tag}");
    assert_eq!(c[0].label_key, "ray.io/market-type");
    assert_eq!(c[0].operator(), LabelSelectorOperator::LabelOperatorNotIn);
    let preemptible = format!("preemptible-{tag}");
    assert_eq!(sv(&c[0].label_values), ["spot", preemptible.as_str()]);

    assert_eq!(c[1].label_key, "region");
    assert_eq!(c[1].operator(), LabelSelectorOperator::LabelOperatorIn);
    let eu = format!("eu-{tag}");
    assert_eq!(sv(&c[1].label_values), [eu.as_str(), "ap-south-1"]);
}

fn check_anti_only(pc: &asc::PlacementConstraint, tag: &str) {
    let anti = pc.anti_affinity.as_ref().expect("anti_affinity set");
    assert_eq!(anti.label_name, format!("anti-{tag}"));
    assert_eq!(anti.label_value, format!("anti-val-{tag}"));
    assert!(pc.affinity.is_none(), "affinity must be absent for {tag}");
}

fn check_aff_only(pc: &asc::PlacementConstraint, tag: &str) {
    let aff = pc.affinity.as_ref().expect("affinity set");
    assert_eq!(aff.label_name, format!("aff-{tag}"));
    assert_eq!(aff.label_value, format!("aff-val-{tag}"));
    assert!(
        pc.anti_affinity.is_none(),
        "anti_affinity must be absent for {tag}"
    );
}

fn check_both_constraints(pc: &asc::PlacementConstraint, tag: &str) {
    let anti = pc.anti_affinity.as_ref().expect("anti_affinity set");
    assert_eq!(anti.label_name, "both-anti");
    assert_eq!(anti.label_value, tag);
    let aff = pc.affinity.as_ref().expect("affinity set");
    assert_eq!(aff.label_name, "both-aff");
    assert_eq!(aff.label_value, tag);
}

fn check_rr(r: &asc::ResourceRequest, tag: &str, cpu: f64) {
    assert_map!(r.resources_bundle, {
        "CPU" => cpu,
        "GPU" => 0.5,
        format!("bundle_group_{tag}") => 0.001,
    });
    assert_eq!(
        r.placement_constraints.len(),
        3,
        "placement constraints of {tag}"
    );
    check_anti_only(&r.placement_constraints[0], tag);
    check_aff_only(&r.placement_constraints[1], tag);
    check_both_constraints(&r.placement_constraints[2], tag);
    assert_eq!(r.label_selectors.len(), 2, "label selectors of {tag}");
    check_ls_primary(&r.label_selectors[0], tag);
    check_ls_secondary(&r.label_selectors[1], tag);
}

fn check_rr_by_count(x: &asc::ResourceRequestByCount, tag: &str, cpu: f64, count: i64) {
    check_rr(x.request.as_ref().expect("request set"), tag, cpu);
    assert_eq!(x.count, count, "count of {tag}");
}

fn check_crc(c: &asc::ClusterResourceConstraint, tag: &str, base: i64) {
    assert_eq!(c.resource_requests.len(), 2, "constraint {tag}");
    check_rr_by_count(&c.resource_requests[0], &format!("{tag}-a"), 2.0, base);
    check_rr_by_count(&c.resource_requests[1], &format!("{tag}-b"), 16.0, base + 1);
}

fn check_bundle_selector(b: &asc::BundleSelector, tag: &str, strategy: PlacementStrategy) {
    assert_eq!(b.resource_requests.len(), 2, "bundle selector {tag}");
    check_rr(&b.resource_requests[0], &format!("{tag}-x"), 1.25);
    check_rr(&b.resource_requests[1], &format!("{tag}-y"), 0.75);
    let loc = b
        .locality_requirement
        .as_ref()
        .expect("locality_requirement set");
    let lc = loc
        .locality_constraint
        .as_ref()
        .expect("locality_constraint set");
    assert_eq!(lc.label_name, format!("ray.io/rack-{tag}"));
    assert_eq!(lc.placement_strategy(), strategy);
    assert_eq!(lc.placement_strategy, strategy as i32);
    check_ls_secondary(
        loc.label_selector.as_ref().expect("label_selector set"),
        tag,
    );
}

fn check_gang(
    g: &asc::GangResourceRequest,
    tag: &str,
    s1: PlacementStrategy,
    s2: PlacementStrategy,
) {
    assert_eq!(g.requests.len(), 2, "gang {tag}");
    check_rr(&g.requests[0], &format!("{tag}-a"), 0.5);
    check_rr(&g.requests[1], &format!("{tag}-b"), 4.0);
    assert_eq!(g.details, format!("placement group {tag}: 2 bundles"));
    assert_eq!(
        g.bundle_selectors.len(),
        2,
        "bundle selectors of gang {tag}"
    );
    check_bundle_selector(&g.bundle_selectors[0], &format!("{tag}-s1"), s1);
    check_bundle_selector(&g.bundle_selectors[1], &format!("{tag}-s2"), s2);
}

fn check_node_state(n: &asc::NodeState, i: u32, status: NodeStatus) {
    let fi = f64::from(i);
    let ii = i64::from(i);
    assert_eq!(&n.node_id[..], &node_id(i)[..]);
    assert_eq!(n.instance_id, format!("i-0{i}23456789abcdef"));
    assert_eq!(n.ray_node_type_name, format!("worker-gpu-\u{3b2}{i}"));
    assert_map!(n.available_resources, {
        "CPU" => 3.5 + fi,
        "GPU" => 0.25,
        "memory" => 8_589_934_592.5,
    });
    assert_map!(n.total_resources, {
        "CPU" => 8.0 * fi,
        "GPU" => 1.0,
        format!("node:10.0.0.{i}") => 1.0,
    });
    assert_map!(n.dynamic_labels, {
        "ray.io/placement-group" => format!("pg-{i}"),
        "custom/dyn" => format!("dyn-value-{i}"),
    });
    assert_eq!(n.node_state_version, BIG + 100 + ii);
    assert_eq!(n.status(), status);
    assert_eq!(n.status, status as i32);
    assert_eq!(n.idle_duration_ms, BIG + 200 + ii);
    assert_eq!(n.node_ip_address, format!("10.0.0.{i}"));
    assert_eq!(n.instance_type_name, format!("m5.{i}xlarge"));
    let busy = format!("Busy workers on node {i}.");
    assert_eq!(
        sv(&n.node_activity),
        [
            busy.as_str(),
            "Resource: CPU currently in use.",
            "Pending bundle"
        ]
    );
    assert_map!(n.labels, {
        "ray.io/node-id" => format!("node-{i}"),
        "ray.io/market-type" => "spot",
        "ray.io/accelerator-type" => "A100",
    });
}

fn check_cluster_resource_state(s: &asc::ClusterResourceState) {
    assert_eq!(s.cluster_resource_state_version, BIG + 1);
    assert_eq!(s.last_seen_autoscaler_state_version, BIG + 2);

    assert_eq!(s.node_states.len(), 2);
    check_node_state(&s.node_states[0], 1, NodeStatus::Running);
    check_node_state(&s.node_states[1], 2, NodeStatus::Draining);

    assert_eq!(s.pending_resource_requests.len(), 2);
    check_rr_by_count(&s.pending_resource_requests[0], "p1", 1.0, BIG + 3);
    check_rr_by_count(&s.pending_resource_requests[1], "p2", 2.0, BIG + 4);

    assert_eq!(s.pending_gang_resource_requests.len(), 2);
    check_gang(
        &s.pending_gang_resource_requests[0],
        "g1",
        PlacementStrategy::StrictPack,
        PlacementStrategy::Spread,
    );
    check_gang(
        &s.pending_gang_resource_requests[1],
        "g2",
        PlacementStrategy::StrictSpread,
        PlacementStrategy::StrictPack,
    );

    assert_eq!(s.cluster_resource_constraints.len(), 2);
    check_crc(&s.cluster_resource_constraints[0], "c1", BIG + 5);
    check_crc(&s.cluster_resource_constraints[1], "c2", BIG + 7);

    assert_eq!(
        s.cluster_session_name,
        "session_2025-01-02_03-04-05_678901_4242"
    );
}

fn check_autoscaling_state(a: &asc::AutoscalingState) {
    assert_eq!(a.last_seen_cluster_resource_state_version, BIG + 11);
    assert_eq!(a.autoscaler_state_version, -(BIG + 12));

    let p = &a.pending_instance_requests;
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].instance_type_name, "m5.xlarge");
    assert_eq!(p[0].ray_node_type_name, "cpu-worker");
    assert_eq!(p[0].count, i32::MAX);
    assert_eq!(p[0].request_ts, BIG + 13);
    assert_eq!(p[1].instance_type_name, "g5.xlarge");
    assert_eq!(p[1].ray_node_type_name, "gpu-worker");
    assert_eq!(p[1].count, -7);
    assert_eq!(p[1].request_ts, BIG + 14);

    assert_eq!(a.infeasible_resource_requests.len(), 2);
    check_rr(&a.infeasible_resource_requests[0], "inf1", 1024.0);
    check_rr(&a.infeasible_resource_requests[1], "inf2", 0.125);

    assert_eq!(a.infeasible_gang_resource_requests.len(), 2);
    check_gang(
        &a.infeasible_gang_resource_requests[0],
        "ig1",
        PlacementStrategy::Spread,
        PlacementStrategy::StrictSpread,
    );
    check_gang(
        &a.infeasible_gang_resource_requests[1],
        "ig2",
        PlacementStrategy::StrictPack,
        PlacementStrategy::StrictSpread,
    );

    assert_eq!(a.infeasible_cluster_resource_constraints.len(), 2);
    check_crc(
        &a.infeasible_cluster_resource_constraints[0],
        "ic1",
        BIG + 15,
    );
    check_crc(
        &a.infeasible_cluster_resource_constraints[1],
        "ic2",
        BIG + 17,
    );

    let pi = &a.pending_instances;
    assert_eq!(pi.len(), 2);
    assert_eq!(pi[0].instance_type_name, "p3.2xlarge");
    assert_eq!(pi[0].ray_node_type_name, "gpu-worker");
    assert_eq!(pi[0].instance_id, "im-pending-1");
    assert_eq!(pi[0].ip_address, "10.1.0.1");
    assert_eq!(pi[0].details, "launching: waiting for ssh");
    assert_eq!(pi[1].instance_type_name, "m5.large");
    assert_eq!(pi[1].ray_node_type_name, "cpu-worker");
    assert_eq!(pi[1].instance_id, "im-pending-2");
    assert_eq!(pi[1].ip_address, "10.1.0.2");
    assert_eq!(pi[1].details, "installing ray");

    let f = &a.failed_instance_requests;
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].instance_type_name, "p4d.24xlarge");
    assert_eq!(f[0].ray_node_type_name, "gpu-big");
    assert_eq!(f[0].count, 3);
    assert_eq!(f[0].reason, "InsufficientInstanceCapacity");
    assert_eq!(f[0].start_ts, BIG + 19);
    assert_eq!(f[0].failed_ts, BIG + 20);
    assert_eq!(f[1].instance_type_name, "t3.micro");
    assert_eq!(f[1].ray_node_type_name, "tiny");
    assert_eq!(f[1].count, 1);
    assert_eq!(f[1].reason, "quota exceeded: vCPU limit");
    assert_eq!(f[1].start_ts, BIG + 21);
    assert_eq!(f[1].failed_ts, BIG + 22);
}

fn check_instance(x: &im::Instance, i: u32, status: InstanceStatus, kind: NodeKind) {
    let ii = i64::from(i);
    assert_eq!(x.instance_id, format!("im-inst-{i}"));
    assert_eq!(
        x.cloud_instance_id.as_deref(),
        Some(format!("i-cloud-{i}").as_str())
    );
    assert_eq!(
        x.node_id.as_deref(),
        Some(format!("ray-node-hex-{i}").as_str())
    );
    assert_eq!(x.status(), status);
    assert_eq!(x.status, status as i32);
    assert_eq!(x.instance_type, format!("g5.{}xlarge", 4 * i));
    assert_map!(x.total_resources, {
        "CPU" => 48.0 * f64::from(i),
        "GPU" => 4.0,
        "memory" => 1.5e11,
    });
    assert_eq!(x.internal_ip, format!("172.31.0.{i}"));
    assert_eq!(x.external_ip, format!("54.0.0.{i}"));
    assert_eq!(x.version, BIG + 300 + ii);

    let h = &x.status_history;
    assert_eq!(h.len(), 4);
    assert_eq!(h[0].instance_status(), InstanceStatus::Queued);
    assert_eq!(h[0].timestamp_ns, BIG + 310 + ii);
    assert_eq!(h[0].details, "queued");
    assert_eq!(h[1].instance_status(), InstanceStatus::Requested);
    assert_eq!(h[1].timestamp_ns, BIG + 320 + ii);
    assert_eq!(h[1].details, "requested from cloud");
    assert_eq!(h[2].instance_status(), InstanceStatus::Allocated);
    assert_eq!(h[2].timestamp_ns, BIG + 330 + ii);
    assert_eq!(h[2].details, "allocated");
    assert_eq!(h[3].instance_status(), status);
    assert_eq!(h[3].timestamp_ns, BIG + 340 + ii);
    assert_eq!(h[3].details, format!("entered status {}", status as i32));

    assert_eq!(x.launch_request_id, format!("lr-{i}"));
    assert_eq!(x.exit_details, format!("exit details {i}"));
    assert_eq!(x.launch_config_hash, format!("sha256:{i}abcdef"));
    assert_eq!(x.node_kind(), kind);
    assert_eq!(x.node_kind, kind as i32);
}

fn check_termination_request(t: &im::TerminationRequest) {
    assert_eq!(t.id, "term-1");
    assert_eq!(t.ray_node_id, "ray-node-hex-9");
    assert_eq!(t.instance_id, "im-inst-9");
    assert_eq!(t.cause(), Cause::MaxNumNodePerType);
    assert_eq!(t.cause, 2);
    assert_eq!(t.instance_type, "m5.large");
    assert_eq!(t.idle_duration_ms, Some(u64::MAX - 1));
    assert_eq!(t.max_num_nodes_per_type, Some(4_000_000_000));
    assert_eq!(t.max_num_nodes, Some(u32::MAX));
    assert_eq!(t.details, "over the per-type limit");
    assert_eq!(t.instance_status(), InstanceStatus::RayStopping);
    assert_eq!(t.instance_status, 7);
}

fn check_instance_update_event(e: &im::InstanceUpdateEvent) {
    assert_eq!(e.instance_id, "im-inst-9");
    assert_eq!(e.new_instance_status(), InstanceStatus::Terminating);
    assert_eq!(e.new_instance_status, 9);
    assert_eq!(e.details, "idle for too long");
    assert!(e.upsert);
    assert_eq!(e.instance_type.as_deref(), Some("m5.large"));
    assert_eq!(e.cloud_instance_id.as_deref(), Some("i-cloud-9"));
    assert_eq!(e.node_kind, Some(NodeKind::Head as i32));
    assert_eq!(e.node_kind(), NodeKind::Head);
    assert_eq!(e.ray_node_id.as_deref(), Some("ray-node-hex-9"));
    assert_eq!(e.launch_request_id.as_deref(), Some("lr-9"));
    check_termination_request(
        e.termination_request
            .as_ref()
            .expect("termination_request set"),
    );
}

/// Every `optional` field present, holding its default value.
fn check_instance_update_event_presence(e: &im::InstanceUpdateEvent) {
    assert_eq!(e.instance_id, "");
    assert_eq!(e.new_instance_status, 0);
    assert_eq!(e.details, "");
    assert!(!e.upsert);
    assert_eq!(e.instance_type.as_deref(), Some(""));
    assert_eq!(e.cloud_instance_id.as_deref(), Some(""));
    assert_eq!(e.node_kind, Some(NodeKind::Unmanaged as i32));
    assert_eq!(e.ray_node_id.as_deref(), Some(""));
    assert_eq!(e.launch_request_id.as_deref(), Some(""));
    let t = e
        .termination_request
        .as_ref()
        .expect("empty termination_request still present");
    assert_eq!(t.idle_duration_ms, Some(0));
    assert_eq!(t.max_num_nodes_per_type, Some(0));
    assert_eq!(t.max_num_nodes, Some(0));
    assert_eq!(t.id, "");
    assert_eq!(t.cause, 0);
    assert_eq!(t.instance_status, 0);
}

// KV bytes: not valid UTF-8 on purpose.
const NS: &[u8] = b"ns\x00\xff/session";
const K1: &[u8] = b"key/\x80\x81\xfe\xff/1";
const K2: &[u8] = b"key/\x00\xc3\x28/2";
const K3: &[u8] = b"\xff\xfe\xfd";
const V1: &[u8] = b"\x00\x01\x02\xff\xfe\xc3\x28 value-1";
const V2: &[u8] = b"value-2\x80";

fn check_gcs_status(s: Option<&rpc::GcsStatus>, code: i32, what: &str) {
    let s = s.expect("status set");
    assert_eq!(s.code, code);
    assert_eq!(s.message, format!("status of {what}"));
}

// ---------------------------------------------------------------------------
// Tests: autoscaler.proto
// ---------------------------------------------------------------------------

#[test]
fn cluster_resource_state() {
    check::<asc::ClusterResourceState>(
        &fixture!("cluster_resource_state"),
        Maps::Some,
        check_cluster_resource_state,
    );
}

#[test]
fn get_cluster_resource_state_request() {
    check::<asc::GetClusterResourceStateRequest>(
        &fixture!("get_cluster_resource_state_request"),
        Maps::None,
        |m| {
            assert_eq!(m.last_seen_cluster_resource_state_version, BIG + 99);
        },
    );
}

#[test]
fn get_cluster_resource_state_reply() {
    check::<asc::GetClusterResourceStateReply>(
        &fixture!("get_cluster_resource_state_reply"),
        Maps::Some,
        |m| {
            check_cluster_resource_state(
                m.cluster_resource_state
                    .as_ref()
                    .expect("cluster_resource_state set"),
            );
        },
    );
}

#[test]
fn autoscaling_state() {
    check::<asc::AutoscalingState>(
        &fixture!("autoscaling_state"),
        Maps::Some,
        check_autoscaling_state,
    );
}

#[test]
fn report_autoscaling_state_request() {
    check::<asc::ReportAutoscalingStateRequest>(
        &fixture!("report_autoscaling_state_request"),
        Maps::Some,
        |m| {
            check_autoscaling_state(m.autoscaling_state.as_ref().expect("autoscaling_state set"));
        },
    );
}

#[test]
fn get_cluster_status_reply() {
    check::<asc::GetClusterStatusReply>(&fixture!("get_cluster_status_reply"), Maps::Some, |m| {
        check_autoscaling_state(m.autoscaling_state.as_ref().expect("autoscaling_state set"));
        check_cluster_resource_state(
            m.cluster_resource_state
                .as_ref()
                .expect("cluster_resource_state set"),
        );
    });
}

#[test]
fn drain_node_request() {
    check::<asc::DrainNodeRequest>(&fixture!("drain_node_request"), Maps::None, |m| {
        assert_eq!(&m.node_id[..], &node_id(1)[..]);
        assert_eq!(m.reason(), DrainNodeReason::Preemption);
        assert_eq!(m.reason, 2);
        assert_eq!(m.reason_message, "preempted by spot reclaim \u{2602}");
        assert_eq!(m.deadline_timestamp_ms, BIG + 31);
    });
}

#[test]
fn drain_node_reply() {
    check::<asc::DrainNodeReply>(&fixture!("drain_node_reply"), Maps::None, |m| {
        assert!(m.is_accepted);
        assert_eq!(
            m.rejection_reason_message,
            "accepted; message kept for the test"
        );
    });
}

#[test]
fn request_cluster_resource_constraint_request() {
    check::<asc::RequestClusterResourceConstraintRequest>(
        &fixture!("request_cluster_resource_constraint_request"),
        Maps::Some,
        |m| {
            check_crc(
                m.cluster_resource_constraint
                    .as_ref()
                    .expect("constraint set"),
                "rc",
                BIG + 33,
            )
        },
    );
}

#[test]
fn resize_raylet_resource_instances_request() {
    check::<asc::ResizeRayletResourceInstancesRequest>(
        &fixture!("resize_raylet_resource_instances_request"),
        Maps::Some,
        |m| {
            assert_eq!(&m.node_id[..], &node_id(2)[..]);
            assert_map!(m.resources, { "CPU" => 6.0, "GPU" => 2.0 });
        },
    );
}

#[test]
fn resize_raylet_resource_instances_reply() {
    check::<asc::ResizeRayletResourceInstancesReply>(
        &fixture!("resize_raylet_resource_instances_reply"),
        Maps::Some,
        |m| assert_map!(m.total_resources, { "CPU" => 6.0, "memory" => 2.5e10 }),
    );
}

#[test]
fn report_cluster_config_request() {
    check::<asc::ReportClusterConfigRequest>(
        &fixture!("report_cluster_config_request"),
        Maps::Some,
        |m| {
            let c = m.cluster_config.as_ref().expect("cluster_config set");
            assert_map!(c.min_resources, { "CPU" => u64::MAX, "GPU" => BIG_U + 41 });
            assert_map!(c.max_resources, { "CPU" => (1u64 << 63) + 5, "GPU" => BIG_U + 43 });
            let g = &c.node_group_configs;
            assert_eq!(g.len(), 2);
            assert_map!(g[0].resources, { "CPU" => BIG_U + 44, "memory" => (1u64 << 63) + 1 });
            assert_eq!(g[0].min_count, 3_000_000_000u32);
            assert_eq!(g[0].max_count, -1);
            assert_eq!(g[0].name, "gpu-group");
            assert_map!(g[1].resources, { "CPU" => BIG_U + 45, "GPU" => BIG_U + 46 });
            assert_eq!(g[1].min_count, 1);
            assert_eq!(g[1].max_count, i32::MAX);
            assert_eq!(g[1].name, "cpu-group-\u{fc}");
        },
    );
}

#[test]
fn placement_constraint_anti_affinity_branch() {
    check::<asc::PlacementConstraint>(
        &fixture!("placement_constraint_anti_affinity"),
        Maps::None,
        |m| {
            check_anti_only(m, "solo");
        },
    );
}

#[test]
fn placement_constraint_affinity_branch() {
    check::<asc::PlacementConstraint>(
        &fixture!("placement_constraint_affinity"),
        Maps::None,
        |m| {
            check_aff_only(m, "solo");
        },
    );
}

// ---------------------------------------------------------------------------
// Tests: instance_manager.proto (package ray.rpc.autoscaler.im)
// ---------------------------------------------------------------------------

#[test]
fn instance() {
    check::<im::Instance>(&fixture!("instance"), Maps::Some, |m| {
        check_instance(m, 1, InstanceStatus::RayRunning, NodeKind::Worker);
    });
}

#[test]
fn instance_update_event() {
    check::<im::InstanceUpdateEvent>(
        &fixture!("instance_update_event"),
        Maps::None,
        check_instance_update_event,
    );
}

#[test]
fn instance_update_event_presence() {
    check::<im::InstanceUpdateEvent>(
        &fixture!("instance_update_event_presence"),
        Maps::None,
        check_instance_update_event_presence,
    );
}

#[test]
fn update_instance_manager_state_request() {
    check::<im::UpdateInstanceManagerStateRequest>(
        &fixture!("update_instance_manager_state_request"),
        Maps::None,
        |m| {
            assert_eq!(m.expected_version, BIG + 400);
            assert_eq!(m.updates.len(), 2);
            check_instance_update_event(&m.updates[0]);
            check_instance_update_event_presence(&m.updates[1]);
        },
    );
}

#[test]
fn update_instance_manager_state_reply() {
    check::<im::UpdateInstanceManagerStateReply>(
        &fixture!("update_instance_manager_state_reply"),
        Maps::None,
        |m| {
            let s = m.status.as_ref().expect("status set");
            assert_eq!(s.code(), StatusCode::VersionMismatch);
            assert_eq!(s.code, 2);
            assert_eq!(s.message, "expected version 5, got 4");
            assert_eq!(m.version, BIG + 401);
        },
    );
}

#[test]
fn get_instance_manager_state_reply() {
    check::<im::GetInstanceManagerStateReply>(
        &fixture!("get_instance_manager_state_reply"),
        Maps::Some,
        |m| {
            let s = m.status.as_ref().expect("status set");
            assert_eq!(s.code(), StatusCode::Ok);
            assert_eq!(s.message, "ok");
            let st = m.state.as_ref().expect("state set");
            assert_eq!(st.version, BIG + 402);
            assert_eq!(st.instances.len(), 2);
            check_instance(
                &st.instances[0],
                1,
                InstanceStatus::RayRunning,
                NodeKind::Worker,
            );
            check_instance(
                &st.instances[1],
                2,
                InstanceStatus::AllocationTimeout,
                NodeKind::Head,
            );
        },
    );
}

#[test]
fn launch_request() {
    check::<im::LaunchRequest>(&fixture!("launch_request"), Maps::None, |m| {
        assert_eq!(m.instance_type, "m5.large");
        assert_eq!(m.count, 5);
        assert_eq!(m.id, "lr-launch-1");
        assert_eq!(m.request_ts_ms, BIG + 403);
    });
}

// ---------------------------------------------------------------------------
// Tests: InternalKVGcsService messages (package ray.rpc)
// ---------------------------------------------------------------------------

#[test]
fn internal_kv_get() {
    check::<rpc::InternalKvGetRequest>(&fixture!("internal_kv_get_request"), Maps::None, |m| {
        assert_eq!(&m.key[..], K1);
        assert_eq!(&m.namespace[..], NS);
    });
    check::<rpc::InternalKvGetReply>(&fixture!("internal_kv_get_reply"), Maps::None, |m| {
        check_gcs_status(m.status.as_ref(), 5, "get");
        assert_eq!(&m.value[..], V1);
    });
}

#[test]
fn internal_kv_multi_get() {
    check::<rpc::InternalKvMultiGetRequest>(
        &fixture!("internal_kv_multi_get_request"),
        Maps::None,
        |m| {
            assert_eq!(bv(&m.keys), [K1, K2, K3]);
            assert_eq!(&m.namespace[..], NS);
        },
    );
    check::<rpc::InternalKvMultiGetReply>(
        &fixture!("internal_kv_multi_get_reply"),
        Maps::None,
        |m| {
            check_gcs_status(m.status.as_ref(), 6, "multi_get");
            assert_eq!(m.results.len(), 2);
            assert_eq!(&m.results[0].key[..], K1);
            assert_eq!(&m.results[0].value[..], V1);
            assert_eq!(&m.results[1].key[..], K2);
            assert_eq!(&m.results[1].value[..], V2);
        },
    );
}

#[test]
fn internal_kv_put() {
    check::<rpc::InternalKvPutRequest>(&fixture!("internal_kv_put_request"), Maps::None, |m| {
        assert_eq!(&m.key[..], K2);
        assert_eq!(&m.value[..], V2);
        assert!(m.overwrite);
        assert_eq!(&m.namespace[..], NS);
    });
    check::<rpc::InternalKvPutReply>(&fixture!("internal_kv_put_reply"), Maps::None, |m| {
        check_gcs_status(m.status.as_ref(), 7, "put");
        assert!(m.added);
    });
}

#[test]
fn internal_kv_del() {
    check::<rpc::InternalKvDelRequest>(&fixture!("internal_kv_del_request"), Maps::None, |m| {
        assert_eq!(&m.key[..], K3);
        assert_eq!(&m.namespace[..], NS);
        assert!(m.del_by_prefix);
    });
    check::<rpc::InternalKvDelReply>(&fixture!("internal_kv_del_reply"), Maps::None, |m| {
        check_gcs_status(m.status.as_ref(), 8, "del");
        assert_eq!(m.deleted_num, 42);
    });
}

#[test]
fn internal_kv_exists() {
    check::<rpc::InternalKvExistsRequest>(
        &fixture!("internal_kv_exists_request"),
        Maps::None,
        |m| {
            assert_eq!(&m.key[..], K1);
            assert_eq!(&m.namespace[..], NS);
        },
    );
    check::<rpc::InternalKvExistsReply>(&fixture!("internal_kv_exists_reply"), Maps::None, |m| {
        check_gcs_status(m.status.as_ref(), 9, "exists");
        assert!(m.exists);
    });
}

#[test]
fn internal_kv_keys() {
    check::<rpc::InternalKvKeysRequest>(&fixture!("internal_kv_keys_request"), Maps::None, |m| {
        assert_eq!(&m.prefix[..], b"key/\x80");
        assert_eq!(&m.namespace[..], NS);
    });
    check::<rpc::InternalKvKeysReply>(&fixture!("internal_kv_keys_reply"), Maps::None, |m| {
        check_gcs_status(m.status.as_ref(), 10, "keys");
        assert_eq!(bv(&m.results), [K1, K2]);
    });
}

#[test]
fn get_internal_config_reply() {
    check::<rpc::GetInternalConfigReply>(&fixture!("get_internal_config_reply"), Maps::None, |m| {
        check_gcs_status(m.status.as_ref(), 11, "config");
        assert_eq!(
            m.config,
            "{\"object_spilling_threshold\": 0.8, \"name\": \"\u{fc}\"}"
        );
    });
}

// ---------------------------------------------------------------------------
// Bookkeeping
// ---------------------------------------------------------------------------

/// MANIFEST.tsv (written by the script) and ALL_FIXTURES must list the same
/// fixtures, so a fixture added to the script cannot go untested silently.
#[test]
fn manifest_is_fully_covered() {
    let mut in_manifest: Vec<&str> = MANIFEST
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').next().unwrap_or_default())
        .collect();
    let mut listed: Vec<&str> = ALL_FIXTURES.to_vec();
    in_manifest.sort_unstable();
    listed.sort_unstable();
    assert_eq!(
        in_manifest, listed,
        "MANIFEST.tsv and ALL_FIXTURES disagree"
    );
}

/// Sanity check on the fixtures themselves: the JSON files really use the two
/// naming styles (so both code paths of the pbjson deserializer are covered).
#[test]
fn json_fixtures_use_both_field_name_styles() {
    let f = fixture!("cluster_resource_state");
    assert!(f.json.contains("\"node_states\""));
    assert!(!f.json.contains("\"nodeStates\""));
    assert!(f.camel.contains("\"nodeStates\""));
    assert!(!f.camel.contains("\"node_states\""));
    assert!(!f.bin.is_empty());
}
