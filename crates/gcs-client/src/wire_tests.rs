//! `wire` against prost: a reply read off its frame converts to exactly what prost's
//! decoding of the same bytes converts to, and a frame prost refuses is refused.

use proptest::prelude::*;
use prost::Message;

use crate::convert::{cluster_resource_state_frame, cluster_resource_state_lenient};
use crate::proto::ray::rpc::autoscaler as pb;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(tag << 3 | 2), out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Unknown fields of every wire type prost skips (a varint, 64 and 32 bits, bytes, a
/// group with a field inside).
fn unknown(kind: u8, out: &mut Vec<u8>) {
    match kind % 5 {
        0 => out.extend_from_slice(&[0xa0, 0x06, 0x96, 0x01]), // 100: varint 150
        1 => {
            out.extend_from_slice(&[0xa9, 0x06]); // 101: fixed64
            out.extend_from_slice(&7u64.to_le_bytes());
        }
        2 => out.extend_from_slice(&[0xb5, 0x06, 1, 2, 3, 4]), // 102: fixed32
        3 => out.extend_from_slice(&[0xba, 0x06, 2, b'h', b'i']), // 103: bytes
        _ => out.extend_from_slice(&[0xc3, 0x06, 0x08, 0x01, 0xc4, 0x06]), // 104: a group
    }
}

/// A node's bytes: one or two encodings of a `NodeState` one after the other (protobuf's
/// merge: maps united with the second's values winning, its set scalars replacing), with
/// unknown fields between them.
fn node_bytes(parts: &[pb::NodeState], unknowns: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if let Some(&k) = unknowns.get(i) {
            unknown(k, &mut out);
        }
        out.extend_from_slice(&p.encode_to_vec());
    }
    out
}

/// A reply's frame: the state's own fields by prost, its nodes by `node_bytes`; the state
/// split over two occurrences of the reply's field when `split` (merged by protobuf).
fn frame(state: &pb::ClusterResourceState, nodes: &[Vec<u8>], split: bool) -> Vec<u8> {
    let mut body = state.encode_to_vec();
    let mut second = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let target = if split && i % 2 == 1 {
            &mut second
        } else {
            &mut body
        };
        field(3, n, target);
    }
    let mut out = Vec::new();
    unknown(3, &mut out);
    field(1, &body, &mut out);
    if split {
        field(1, &second, &mut out);
    }
    out
}

/// What prost's decoding of `bytes` converts to (the driver's path before `wire`).
fn by_prost(bytes: &[u8]) -> Result<(i64, String, Vec<String>), String> {
    let reply = pb::GetClusterResourceStateReply::decode(bytes).map_err(|e| e.to_string())?;
    let s = reply.cluster_resource_state.ok_or("missing")?;
    let version = s.cluster_resource_state_version;
    let (state, skipped) = cluster_resource_state_lenient(s, "crs");
    Ok((
        version,
        format!("{state:?}"),
        skipped.iter().map(ToString::to_string).collect(),
    ))
}

fn by_wire(bytes: &[u8]) -> Result<(i64, String, Vec<String>), String> {
    let (version, state, skipped) =
        cluster_resource_state_frame(bytes, "crs").map_err(|e| e.to_string())?;
    Ok((
        version,
        format!("{state:?}"),
        skipped.iter().map(ToString::to_string).collect(),
    ))
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("CPU".to_string()),
        Just("GPU".to_string()),
        Just("memory".to_string()),
        Just("node:__internal_head__".to_string()),
        Just(String::new()),
        "[a-z]{1,3}",
    ]
}

fn amount() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => (0u32..64).prop_map(f64::from),
        1 => Just(-1.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(0.25),
    ]
}

fn node() -> impl Strategy<Value = pb::NodeState> {
    (
        prop::collection::vec(any::<u8>(), 0..4),
        "[a-z0-9-]{0,6}",
        prop_oneof![
            Just(String::new()),
            Just("cpu".to_string()),
            Just("gpu".to_string())
        ],
        prop::collection::btree_map(name(), amount(), 0..4),
        prop::collection::btree_map(name(), amount(), 0..4),
        prop::collection::btree_map(name(), "[a-z]{0,2}", 0..3),
        prop::collection::btree_map(name(), "[a-z]{0,2}", 0..3),
        (-1i32..6, -5i64..5_000, 0i64..3),
        prop::collection::vec("[a-z]{0,3}", 0..2),
    )
        .prop_map(
            |(
                node_id,
                instance_id,
                ray_node_type_name,
                available,
                total,
                dynamic,
                labels,
                (status, idle, version),
                activity,
            )| {
                pb::NodeState {
                    node_id,
                    instance_id,
                    ray_node_type_name,
                    available_resources: available,
                    total_resources: total,
                    dynamic_labels: dynamic,
                    node_state_version: version,
                    status,
                    idle_duration_ms: idle,
                    node_ip_address: "127.0.0.1".into(),
                    instance_type_name: String::new(),
                    node_activity: activity,
                    labels,
                }
            },
        )
}

fn demand() -> impl Strategy<Value = pb::ResourceRequestByCount> {
    (
        prop::collection::btree_map(name(), amount(), 0..3),
        -1i64..4,
    )
        .prop_map(|(r, count)| pb::ResourceRequestByCount {
            request: Some(pb::ResourceRequest {
                resources_bundle: r,
                ..Default::default()
            }),
            count,
        })
}

fn reply() -> impl Strategy<Value = (Vec<u8>, bool)> {
    (
        prop::collection::vec(
            (
                prop::collection::vec(node(), 1..3),
                prop::collection::vec(any::<u8>(), 0..3),
            ),
            0..6,
        ),
        prop::collection::vec(demand(), 0..3),
        prop::collection::vec(demand(), 0..2),
        0i64..100,
        any::<bool>(),
    )
        .prop_map(|(nodes, pending, constraint, version, split)| {
            let state = pb::ClusterResourceState {
                cluster_resource_state_version: version,
                pending_resource_requests: pending,
                cluster_resource_constraints: vec![pb::ClusterResourceConstraint {
                    resource_requests: constraint,
                }],
                cluster_session_name: "session".into(),
                ..Default::default()
            };
            let nodes: Vec<Vec<u8>> = nodes
                .iter()
                .map(|(parts, u)| node_bytes(parts, u))
                .collect();
            (frame(&state, &nodes, split), split)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A valid frame (repeated map keys, merged rows, unknown fields, a state in two
    /// parts included) converts as prost's decoding of it does.
    #[test]
    fn a_frame_reads_as_prost_reads_it((bytes, _split) in reply()) {
        let expected = by_prost(&bytes);
        prop_assert!(expected.is_ok(), "{expected:?}");
        prop_assert_eq!(by_wire(&bytes), expected);
        // The sizing hint counts every row (rows a split state spreads over two parts too).
        let rows = pb::GetClusterResourceStateReply::decode(bytes.as_slice())
            .map(|r| r.cluster_resource_state.map_or(0, |s| s.node_states.len()));
        prop_assert_eq!(Ok(crate::wire::count_nodes(&bytes)), rows.map_err(|e| e.to_string()));
    }

    /// A damaged frame (a byte changed, cut short, or bytes inserted) is refused exactly
    /// when prost refuses it, and otherwise converts as prost's decoding does.
    #[test]
    fn a_damaged_frame_is_refused_when_prost_refuses_it(
        (bytes, _split) in reply(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        how in 0u8..3,
    ) {
        let mut bytes = bytes;
        if bytes.is_empty() {
            return Ok(());
        }
        let i = at.index(bytes.len());
        match how {
            0 => bytes[i] = byte,
            1 => bytes.truncate(i),
            _ => bytes.insert(i, byte),
        }
        let expected = by_prost(&bytes);
        let got = by_wire(&bytes);
        match (&expected, &got) {
            (Ok(e), Ok(g)) => prop_assert_eq!(g, e),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "prost: {:?}\nwire: {:?}", expected, got),
        }
    }
}

#[test]
fn a_malformed_frame_is_one_error_naming_the_node_and_field() {
    let node = pb::NodeState {
        instance_id: "i-1".into(),
        ..Default::default()
    };
    let mut bad = node.encode_to_vec();
    // available_resources (4) with a varint wire type.
    bad.extend_from_slice(&[0x20, 0x01]);
    let bytes = frame(
        &pb::ClusterResourceState::default(),
        &[node.encode_to_vec(), bad],
        false,
    );
    assert!(by_prost(&bytes).is_err());
    let e = by_wire(&bytes).expect_err("refused");
    assert_eq!(
        e,
        "GetClusterResourceStateReply.cluster_resource_state.node_states[1].available_resources: \
         malformed reply from the GCS: invalid wire type: 0 (expected 2)"
    );
    let e = by_wire(&[]).expect_err("no state");
    assert!(e.contains("missing"), "{e}");
}

#[test]
fn the_nodes_of_a_reply_share_each_resource_name() {
    let node = |id: u8| pb::NodeState {
        node_id: vec![id],
        total_resources: [("CPU".to_string(), 4.0), (format!("node:10.0.0.{id}"), 1.0)]
            .into_iter()
            .collect(),
        available_resources: [("CPU".to_string(), 2.0)].into_iter().collect(),
        ..Default::default()
    };
    let bytes = frame(
        &pb::ClusterResourceState::default(),
        &[node(1).encode_to_vec(), node(2).encode_to_vec()],
        false,
    );
    let (_, state, _) = cluster_resource_state_frame(&bytes, "crs").expect("reads");
    let cpu = |m: &rayscale_core::model::ResourceMap| {
        m.0.iter()
            .find(|(k, _)| k == "CPU")
            .map(|(k, _)| k.clone())
            .expect("CPU")
    };
    let [a, b] = &state.node_states[..] else {
        panic!("two nodes")
    };
    let first = cpu(&a.total_resources);
    for m in [
        &a.available_resources,
        &b.total_resources,
        &b.available_resources,
    ] {
        assert!(
            first.shares_text_with(&cpu(m)),
            "one CPU name for the reply"
        );
    }
    assert_eq!(a.total_resources.get("node:10.0.0.1"), Some(10_000));
}

/// A field of every number a message has (and one past) with every wire type.
fn every_key(tags: std::ops::RangeInclusive<u32>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for tag in tags {
        for wt in 0u8..6 {
            let mut b = Vec::new();
            varint(u64::from(tag << 3 | u32::from(wt)), &mut b);
            match wt {
                0 => b.push(0x01),
                1 => b.extend_from_slice(&[0; 8]),
                2 => b.extend_from_slice(&[1, b'a']),
                3 => varint(u64::from(tag << 3 | 4), &mut b),
                4 => {}
                _ => b.extend_from_slice(&[0; 4]),
            }
            out.push(b);
        }
    }
    out
}

fn same_outcome(bytes: &[u8], what: &str) {
    let (p, w) = (by_prost(bytes), by_wire(bytes));
    match (&p, &w) {
        (Ok(p), Ok(w)) => assert_eq!(w, p, "{what}"),
        (Err(_), Err(_)) => {}
        _ => panic!("{what}: prost {p:?}, wire {w:?}"),
    }
}

#[test]
fn every_field_with_every_wire_type_is_taken_or_refused_as_prost_does() {
    let base = pb::NodeState {
        instance_id: "i-1".into(),
        total_resources: [("CPU".to_string(), 1.0)].into_iter().collect(),
        ..Default::default()
    }
    .encode_to_vec();
    for f in every_key(1..=14) {
        // In a node's row.
        let mut node = base.clone();
        node.extend_from_slice(&f);
        same_outcome(
            &frame(&Default::default(), &[node], false),
            &format!("node {f:?}"),
        );
        // In a map entry of its resources (4) and of its labels (13).
        for map in [4, 13] {
            let mut node = base.clone();
            field(map, &f, &mut node);
            same_outcome(
                &frame(&Default::default(), &[node], false),
                &format!("entry of {map}: {f:?}"),
            );
        }
    }
    for f in every_key(1..=8) {
        // In the state, and in the reply.
        let mut body = Vec::new();
        field(3, &base, &mut body);
        body.extend_from_slice(&f);
        let mut bytes = Vec::new();
        field(1, &body, &mut bytes);
        same_outcome(&bytes, &format!("state {f:?}"));
        let mut bytes = f.clone();
        field(1, &body, &mut bytes);
        same_outcome(&bytes, &format!("reply {f:?}"));
    }
}

#[test]
fn varints_of_ten_bytes_and_more_are_read_as_prost_reads_them() {
    for last in [0u8, 1, 2, 0x7f] {
        for len in [9usize, 10, 11] {
            // idle_duration_ms (9) as a varint of `len` bytes ending in `last`.
            let mut node = vec![0x48];
            node.extend(std::iter::repeat_n(0xff, len - 1));
            node.push(last);
            same_outcome(
                &frame(&Default::default(), &[node], false),
                &format!("{len} bytes ending {last}"),
            );
        }
    }
}

/// A map key or type name repeated over a reply's nodes is handed out as the text first
/// read (one slice of the frame, which the converter's names find by address), beyond
/// the few texts remembered the rest read as before, and a repeat whose bytes are not
/// UTF-8 is refused as prost refuses it.
#[test]
fn repeated_texts_are_the_first_read_and_bad_ones_still_refused() {
    let node = |id: u8, extra: usize| pb::NodeState {
        node_id: vec![id],
        ray_node_type_name: "cpu16".into(),
        total_resources: std::iter::once(("CPU".to_string(), 4.0))
            .chain((0..extra).map(|k| (format!("r{k:02}"), 1.0)))
            .collect(),
        available_resources: [("CPU".to_string(), 2.0)].into_iter().collect(),
        ..Default::default()
    };
    // 3 nodes, the second with more distinct keys than are remembered.
    let nodes = [node(1, 0), node(2, 40), node(3, 0)];
    let bytes = frame(
        &pb::ClusterResourceState::default(),
        &nodes.iter().map(Message::encode_to_vec).collect::<Vec<_>>(),
        false,
    );
    let mut seen: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    crate::wire::read_reply(&bytes, |_, row| {
        let keys = row.total_resources.iter().map(|(k, _)| *k);
        seen.push((
            row.ray_node_type_name,
            row.available_resources[0].0,
            keys.collect(),
        ));
        Ok::<(), ()>(())
    })
    .expect("reads");
    let (type1, cpu1, _) = &seen[0];
    for (t, cpu, keys) in &seen {
        assert!(
            std::ptr::eq(*t, *type1),
            "the type's name is its first text"
        );
        assert!(std::ptr::eq(*cpu, *cpu1), "CPU is its first text");
        assert!(std::ptr::eq(keys[0], *cpu1));
    }
    assert_eq!(seen[1].2.len(), 41);
    assert_eq!(seen[1].2[40], "r39");
    assert_eq!(by_wire(&bytes), by_prost(&bytes));

    // A later node's key that differs from `CPU` only by a byte that is not UTF-8.
    let mut bad = node(4, 0).encode_to_vec();
    let at = bad
        .windows(3)
        .rposition(|w| w == b"CPU")
        .expect("a CPU key");
    bad[at + 2] = 0xff;
    let bytes = frame(
        &pb::ClusterResourceState::default(),
        &[node(1, 0).encode_to_vec(), bad],
        false,
    );
    let refused = by_wire(&bytes).expect_err("a key that is not UTF-8");
    assert!(by_prost(&bytes).is_err());
    assert!(
        refused.contains("not UTF-8"),
        "refused for its text: {refused}"
    );
}
