//! Pure conversions between Ray's wire types and `rayscale-core`'s model.

use rayscale_core::model::resources::to_fixed;
use rayscale_core::model::{
    ClusterConstraint, ClusterResourceState, GangRequest, LabelConstraint, LabelOperator,
    LabelSelector, Name, NodeState, NodeStatus, PlacementConstraint, ResourceMap, ResourceRequest,
    ResourceRequestByCount, UnreadableNode,
};

use crate::GcsError;
use crate::proto::ray::rpc as pb_common;
use crate::proto::ray::rpc::autoscaler as pb;
use crate::wire::{NodeRow, ReplyError, borrowed_amounts, count_nodes, read_reply, wire_error};

/// The largest amount rayscale reads (10^24 units, far past any real cluster: a node's
/// memory in bytes is ~10^12): past it the fixed-point sums of a large cluster could
/// overflow, so such an amount means nothing.
const MAX_AMOUNT: f64 = 1e24;

/// One [`Name`] per distinct resource name of a reply: the maps of its 10,000 nodes share
/// the few names they hold (and every copy of those maps then copies no text).
///
/// The frame reader hands out a reply's repeated key as one slice of the frame, so the
/// first few names are found by that slice's address before any hashing of text.
#[derive(Default)]
struct Names<'a> {
    all: foldhash::HashSet<Name>,
    /// The first texts met, by address and length, with their names.
    first: Vec<(&'a str, Name)>,
}

/// How many names [`Names`] finds by address.
const FIRST_NAMES: usize = 8;

impl<'a> Names<'a> {
    fn get(&mut self, k: &'a str) -> Name {
        if let Some((_, n)) = self
            .first
            .iter()
            .find(|(t, _)| std::ptr::eq(t.as_ptr(), k.as_ptr()) && t.len() == k.len())
        {
            return n.clone();
        }
        let n = match self.all.get(k) {
            Some(n) => n.clone(),
            None => {
                let n = Name::from(k);
                self.all.insert(n.clone());
                n
            }
        };
        if self.first.len() < FIRST_NAMES {
            self.first.push((k, n.clone()));
        }
        n
    }
}

/// Checks and converts a resource map (entries in key order, one per key); `path` builds
/// the map's path only on error. Refused: what cannot mean anything (NaN, infinite,
/// absurdly large, or negative).
fn resources<'a>(
    m: &[(&'a str, f64)],
    names: &mut Names<'a>,
    path: impl Fn() -> String,
) -> Result<ResourceMap, GcsError> {
    amounts(m, names, path, |v| v)
}

/// A node's available resources as Ray means them: a negative amount (a node whose tasks
/// oversubscribe it) is read as none available, as Ray's scheduler reads it ("full"); an
/// absent key already means 0. NaN, infinite or absurd amounts are refused.
fn available<'a>(
    m: &[(&'a str, f64)],
    names: &mut Names<'a>,
    path: impl Fn() -> String,
) -> Result<ResourceMap, GcsError> {
    amounts(m, names, path, |v| {
        if v < 0.0 && v.is_finite() { 0.0 } else { v }
    })
}

/// The amounts of `m` as read by `read`, each checked: finite, non-negative, not absurd.
fn amounts<'a>(
    m: &[(&'a str, f64)],
    names: &mut Names<'a>,
    path: impl Fn() -> String,
    read: impl Fn(f64) -> f64,
) -> Result<ResourceMap, GcsError> {
    let mut out = Vec::with_capacity(m.len());
    for &(k, v) in m {
        let v = read(v);
        if !v.is_finite() || !(0.0..=MAX_AMOUNT).contains(&v) {
            return Err(GcsError::Invalid {
                path: format!("{}.{k}", path()),
                message: format!("resource amounts must be finite and non-negative, got {v}"),
            });
        }
        // One entry per key already (a map's), so no merging.
        out.push((names.get(k), to_fixed(v)));
    }
    Ok(ResourceMap(out))
}

fn labels(m: &[(&str, &str)]) -> Vec<(String, String)> {
    m.iter()
        .map(|&(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn selector(s: &pb_common::LabelSelector) -> LabelSelector {
    LabelSelector {
        constraints: s
            .label_constraints
            .iter()
            .map(|c| LabelConstraint {
                key: c.label_key.clone(),
                operator: match pb_common::LabelSelectorOperator::try_from(c.operator) {
                    Ok(pb_common::LabelSelectorOperator::LabelOperatorIn) => LabelOperator::In,
                    Ok(pb_common::LabelSelectorOperator::LabelOperatorNotIn) => {
                        LabelOperator::NotIn
                    }
                    _ => LabelOperator::Unspecified,
                },
                values: c.label_values.clone(),
            })
            .collect(),
    }
}

/// Converts one `ResourceRequest`.
pub fn resource_request(r: &pb::ResourceRequest, path: &str) -> Result<ResourceRequest, GcsError> {
    Ok(ResourceRequest {
        resources: resources(
            &borrowed_amounts(&r.resources_bundle),
            &mut Names::default(),
            || format!("{path}.resources_bundle"),
        )?,
        placement_constraints: r
            .placement_constraints
            .iter()
            .map(|c| match (&c.anti_affinity, &c.affinity) {
                (Some(a), _) => PlacementConstraint::AntiAffinity {
                    label_name: a.label_name.clone(),
                    label_value: a.label_value.clone(),
                },
                (None, Some(a)) => PlacementConstraint::Affinity {
                    label_name: a.label_name.clone(),
                    label_value: a.label_value.clone(),
                },
                (None, None) => PlacementConstraint::Empty,
            })
            .collect(),
        label_selectors: r.label_selectors.iter().map(selector).collect(),
    })
}

/// Converts one core `ResourceRequest` back to Ray's wire type (for the gRPC expander).
pub fn resource_request_to_proto(r: &ResourceRequest) -> pb::ResourceRequest {
    pb::ResourceRequest {
        resources_bundle: r
            .resources
            .iter()
            .map(|(k, v)| (k.to_string(), rayscale_core::model::resources::to_f64(v)))
            .collect(),
        placement_constraints: r
            .placement_constraints
            .iter()
            .map(|c| match c {
                PlacementConstraint::AntiAffinity {
                    label_name,
                    label_value,
                } => pb::PlacementConstraint {
                    anti_affinity: Some(pb::AntiAffinityConstraint {
                        label_name: label_name.clone(),
                        label_value: label_value.clone(),
                    }),
                    affinity: None,
                },
                PlacementConstraint::Affinity {
                    label_name,
                    label_value,
                } => pb::PlacementConstraint {
                    anti_affinity: None,
                    affinity: Some(pb::AffinityConstraint {
                        label_name: label_name.clone(),
                        label_value: label_value.clone(),
                    }),
                },
                PlacementConstraint::Empty => pb::PlacementConstraint::default(),
            })
            .collect(),
        label_selectors: r
            .label_selectors
            .iter()
            .map(|s| pb_common::LabelSelector {
                label_constraints: s
                    .constraints
                    .iter()
                    .map(|c| pb_common::LabelSelectorConstraint {
                        label_key: c.key.clone(),
                        operator: match c.operator {
                            LabelOperator::In => {
                                pb_common::LabelSelectorOperator::LabelOperatorIn as i32
                            }
                            LabelOperator::NotIn => {
                                pb_common::LabelSelectorOperator::LabelOperatorNotIn as i32
                            }
                            LabelOperator::Unspecified => 0,
                        },
                        label_values: c.values.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn by_count_one(
    rc: &pb::ResourceRequestByCount,
    p: &str,
) -> Result<ResourceRequestByCount, GcsError> {
    if rc.count < 0 {
        return Err(GcsError::Invalid {
            path: format!("{p}.count"),
            message: format!("must not be negative, got {}", rc.count),
        });
    }
    Ok(ResourceRequestByCount {
        request: resource_request(
            rc.request
                .as_ref()
                .unwrap_or(&pb::ResourceRequest::default()),
            &format!("{p}.request"),
        )?,
        count: rc.count as u64,
    })
}

fn by_count(
    list: &[pb::ResourceRequestByCount],
    path: &str,
) -> Result<Vec<ResourceRequestByCount>, GcsError> {
    list.iter()
        .enumerate()
        .map(|(i, rc)| by_count_one(rc, &format!("{path}[{i}]")))
        .collect()
}

fn node_status(s: i32) -> Option<NodeStatus> {
    match pb::NodeStatus::try_from(s) {
        Ok(pb::NodeStatus::Unspecified) => None,
        Ok(pb::NodeStatus::Running) => Some(NodeStatus::Running),
        Ok(pb::NodeStatus::Dead) => Some(NodeStatus::Dead),
        Ok(pb::NodeStatus::Idle) => Some(NodeStatus::Idle),
        Ok(pb::NodeStatus::Draining) => Some(NodeStatus::Draining),
        Err(_) => None,
    }
}

/// Converts a `ClusterResourceState` (taken by value: its strings move, not copy). `path`
/// prefixes error paths.
pub fn cluster_resource_state(
    s: pb::ClusterResourceState,
    path: &str,
) -> Result<ClusterResourceState, GcsError> {
    convert_state(s, path, &mut |e| Err(e))
}

/// Like [`cluster_resource_state`], but a row that does not convert does not fail the whole
/// state: a pending request, a placement group or a constraint with a NaN or negative
/// amount is left out, as Ray's scheduler skips it; a live node's row is kept in
/// [`ClusterResourceState::unreadable_nodes`] (its instance is then kept as it was, never
/// taken for gone); a dead node's is read as dead. The errors of those rows come back,
/// each naming its path.
pub fn cluster_resource_state_lenient(
    s: pb::ClusterResourceState,
    path: &str,
) -> (ClusterResourceState, Vec<GcsError>) {
    let mut skipped = Vec::new();
    let state = convert_state(s, path, &mut |e| {
        skipped.push(e);
        Ok(())
    });
    match state {
        Ok(state) => (state, skipped),
        // The callback never fails, so neither does the conversion.
        Err(e) => (ClusterResourceState::default(), vec![e]),
    }
}

/// A row's error goes to `bad`, which fails the whole (strict) or leaves the row out
/// (lenient).
type Bad<'b> = &'b mut dyn FnMut(GcsError) -> Result<(), GcsError>;

/// The node rows converted so far.
struct Nodes<'a> {
    node_states: Vec<NodeState>,
    unreadable_nodes: Vec<UnreadableNode>,
    names: Names<'a>,
}

/// Converts the rows of a prost-decoded state, then the rest of it.
fn convert_state(
    s: pb::ClusterResourceState,
    path: &str,
    bad: Bad<'_>,
) -> Result<ClusterResourceState, GcsError> {
    let mut nodes = Nodes {
        node_states: Vec::with_capacity(s.node_states.len()),
        unreadable_nodes: Vec::new(),
        names: Names::default(),
    };
    for (i, n) in s.node_states.iter().enumerate() {
        convert_node(&NodeRow::from_pb(n), i, path, &mut nodes, bad)?;
    }
    convert_rest(&s, nodes, path, bad)
}

/// Converts node `i`'s row into `nodes`.
fn convert_node<'a>(
    row: &NodeRow<'a>,
    i: usize,
    path: &str,
    nodes: &mut Nodes<'a>,
    bad: Bad<'_>,
) -> Result<(), GcsError> {
    let status = node_status(row.status);
    let node_id = row.node_id.to_vec();
    let instance_id = row.instance_id.to_string();
    let ray_node_type_name = row.ray_node_type_name.to_string();
    // The row's path is spelled out only for an error.
    let p = || format!("{path}.node_states[{i}]");
    let names = &mut nodes.names;
    let amounts = available(&row.available_resources, names, || {
        format!("{}.available_resources", p())
    })
    .and_then(|a| {
        resources(&row.total_resources, names, || {
            format!("{}.total_resources", p())
        })
        .map(|t| (a, t))
    });
    match amounts {
        Ok((available_resources, total_resources)) => nodes.node_states.push(NodeState {
            node_id,
            instance_id,
            ray_node_type_name,
            available_resources,
            total_resources,
            dynamic_labels: labels(&row.dynamic_labels),
            labels: labels(&row.labels),
            idle_duration_ms: row.idle_duration_ms,
            status,
        }),
        Err(e) if status == Some(NodeStatus::Dead) => {
            // A dead node's amounts do not matter: its death is read.
            bad(e)?;
            nodes.node_states.push(NodeState {
                node_id,
                instance_id,
                ray_node_type_name,
                status,
                ..Default::default()
            });
        }
        Err(e) => {
            // A row that cannot be read still names its node and instance
            // (protobuf bytes and strings always decode): it is kept as unreadable,
            // never dropped, so that its node is not taken for gone. The reason is
            // given without the row's index (rows move between replies).
            let full = e.to_string();
            let reason = full
                .split_once("].")
                .map_or(full.as_str(), |(_, r)| r)
                .to_string();
            bad(e)?;
            nodes.unreadable_nodes.push(UnreadableNode {
                node_id,
                instance_id,
                ray_node_type_name,
                status,
                reason,
            });
        }
    }
    Ok(())
}

/// Converts what is not a node's row (demand, gangs, constraints), row by row.
fn convert_rest(
    s: &pb::ClusterResourceState,
    nodes: Nodes,
    path: &str,
    bad: Bad<'_>,
) -> Result<ClusterResourceState, GcsError> {
    let mut pending = Vec::with_capacity(s.pending_resource_requests.len());
    for (i, rc) in s.pending_resource_requests.iter().enumerate() {
        match by_count_one(rc, &format!("{path}.pending_resource_requests[{i}]")) {
            Ok(r) => pending.push(r),
            Err(e) => bad(e)?,
        }
    }
    let mut gangs = Vec::with_capacity(s.pending_gang_resource_requests.len());
    for (i, g) in s.pending_gang_resource_requests.iter().enumerate() {
        match gang(g, &format!("{path}.pending_gang_resource_requests[{i}]")) {
            Ok(g) => gangs.push(g),
            Err(e) => bad(e)?,
        }
    }
    let mut constraints = Vec::new();
    for (i, c) in s.cluster_resource_constraints.iter().enumerate() {
        match by_count(
            &c.resource_requests,
            &format!("{path}.cluster_resource_constraints[{i}].resource_requests"),
        ) {
            Ok(resource_requests) => constraints.push(ClusterConstraint { resource_requests }),
            Err(e) => bad(e)?,
        }
    }
    Ok(ClusterResourceState {
        node_states: nodes.node_states,
        unreadable_nodes: nodes.unreadable_nodes,
        pending_resource_requests: pending,
        pending_gang_resource_requests: gangs,
        cluster_resource_constraints: constraints,
    })
}

/// [`cluster_resource_state_lenient`] of a `GetClusterResourceStateReply` frame, read
/// straight off its bytes (`crate::wire`: each node's row converted as it is read), with
/// the state's version. A frame that does not decode, or a reply without a state, is an
/// error naming the field (nothing of it is acted on).
pub fn cluster_resource_state_frame(
    frame: &[u8],
    path: &str,
) -> Result<(i64, ClusterResourceState, Vec<GcsError>), GcsError> {
    let mut skipped = Vec::new();
    let mut bad = |e: GcsError| -> Result<(), GcsError> {
        skipped.push(e);
        Ok(())
    };
    let mut nodes = Nodes {
        node_states: Vec::with_capacity(count_nodes(frame)),
        unreadable_nodes: Vec::new(),
        names: Names::default(),
    };
    let rest = read_reply(frame, |i, row| {
        convert_node(row, i, path, &mut nodes, &mut bad)
    });
    let rest = match rest {
        Ok(Some(rest)) => rest,
        Ok(None) => {
            return Err(GcsError::Invalid {
                path: "GetClusterResourceStateReply.cluster_resource_state".into(),
                message: "missing in the reply of the GCS".into(),
            });
        }
        Err(ReplyError::Wire { node, error }) => return Err(wire_error(node, &error)),
        // The lenient handler keeps every row's error and goes on.
        Err(ReplyError::Row(e)) => return Err(e),
    };
    let state = convert_rest(&rest, nodes, path, &mut bad)?;
    Ok((rest.cluster_resource_state_version, state, skipped))
}

fn gang(g: &pb::GangResourceRequest, p: &str) -> Result<GangRequest, GcsError> {
    let requests = g
        .requests
        .iter()
        .enumerate()
        .map(|(j, r)| resource_request(r, &format!("{p}.requests[{j}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let first_bundle_selector = match g.bundle_selectors.first() {
        Some(b) => Some(
            b.resource_requests
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    resource_request(
                        r,
                        &format!("{p}.bundle_selectors[0].resource_requests[{j}]"),
                    )
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    Ok(GangRequest {
        requests,
        details: g.details.clone(),
        first_bundle_selector,
    })
}

/// Decodes a proto3 JSON `ClusterResourceState` (snake_case or lowerCamelCase names,
/// base64 bytes, int64 as number or string) and converts it. `path` prefixes error paths.
pub fn cluster_resource_state_from_json(
    v: &serde_json::Value,
    path: &str,
) -> Result<ClusterResourceState, GcsError> {
    let state: pb::ClusterResourceState = serde_path_to_error::deserialize(v).map_err(|e| {
        let inner = e.path().to_string();
        GcsError::Json {
            path: if inner == "." || inner.is_empty() {
                path.to_string()
            } else {
                format!("{path}.{inner}")
            },
            message: e.into_inner().to_string(),
        }
    })?;
    cluster_resource_state(state, path)
}

/// Converts the reconciler's report into Ray's `AutoscalingState` (what `ray status`
/// shows). `seen_version` is the cluster resource state version the report was computed
/// from; `autoscaler_version` increases with every report.
pub fn autoscaling_state_to_proto(
    report: &rayscale_core::reconciler::AutoscalingReport,
    seen_version: i64,
    autoscaler_version: i64,
) -> pb::AutoscalingState {
    let count = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
    pb::AutoscalingState {
        last_seen_cluster_resource_state_version: seen_version,
        autoscaler_state_version: autoscaler_version,
        pending_instance_requests: report
            .pending_requests
            .iter()
            .map(|p| pb::PendingInstanceRequest {
                instance_type_name: p.node_type.clone(),
                ray_node_type_name: p.node_type.clone(),
                count: count(p.count),
                request_ts: p.request_ts_s,
            })
            .collect(),
        infeasible_resource_requests: report
            .infeasible_requests
            .iter()
            .map(resource_request_to_proto)
            .collect(),
        infeasible_gang_resource_requests: report
            .infeasible_gangs
            .iter()
            .map(|g| pb::GangResourceRequest {
                requests: g.requests.iter().map(resource_request_to_proto).collect(),
                details: g.details.clone(),
                bundle_selectors: Vec::new(),
            })
            .collect(),
        infeasible_cluster_resource_constraints: report
            .infeasible_constraints
            .iter()
            .map(constraint_to_proto)
            .collect(),
        pending_instances: report
            .pending_instances
            .iter()
            .map(|p| pb::PendingInstance {
                instance_type_name: p.node_type.clone(),
                ray_node_type_name: p.node_type.clone(),
                instance_id: p.instance_id.clone(),
                ip_address: String::new(),
                details: p.details.clone(),
            })
            .collect(),
        failed_instance_requests: report
            .failed_requests
            .iter()
            .map(|f| pb::FailedInstanceRequest {
                instance_type_name: f.node_type.clone(),
                ray_node_type_name: f.node_type.clone(),
                count: count(f.count),
                reason: f.reason.clone(),
                start_ts: f.start_ts_s,
                failed_ts: f.failed_ts_s,
            })
            .collect(),
    }
}

/// Converts a `request_resources` constraint to Ray's wire type.
pub fn constraint_to_proto(c: &ClusterConstraint) -> pb::ClusterResourceConstraint {
    pb::ClusterResourceConstraint {
        resource_requests: c
            .resource_requests
            .iter()
            .map(|r| pb::ResourceRequestByCount {
                request: Some(resource_request_to_proto(&r.request)),
                count: i64::try_from(r.count).unwrap_or(i64::MAX),
            })
            .collect(),
    }
}

/// Parses a hex Ray node id into its bytes.
pub fn node_id_from_hex(hex: &str) -> Result<Vec<u8>, GcsError> {
    let bad = || GcsError::Invalid {
        path: "node_id".into(),
        message: format!("{hex:?} is not a hex node id"),
    };
    if !hex.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_accepts_both_casings_and_string_int64() {
        let v = serde_json::json!({
            "nodeStates": [{"node_id": "AAEC", "totalResources": {"CPU": 4.0},
                            "idleDurationMs": "1500", "status": "IDLE"}],
            "pending_resource_requests": [{"request": {"resources_bundle": {"CPU": 1}}, "count": "3"}]
        });
        let s = cluster_resource_state_from_json(&v, "crs").expect("decodes");
        assert_eq!(s.node_states[0].node_id, vec![0, 1, 2]);
        assert_eq!(s.node_states[0].idle_duration_ms, 1500);
        assert_eq!(s.node_states[0].status, Some(NodeStatus::Idle));
        assert_eq!(s.pending_resource_requests[0].count, 3);
    }

    #[test]
    fn json_errors_name_the_path() {
        let v = serde_json::json!({"node_states": [{"total_resources": {"CPU": "four"}}]});
        let e = cluster_resource_state_from_json(&v, "cluster_resource_state")
            .expect_err("must fail")
            .to_string();
        assert!(
            e.starts_with("cluster_resource_state.node_states[0].total_resources.CPU"),
            "{e}"
        );
    }

    #[test]
    fn negative_resources_are_rejected() {
        let v = serde_json::json!({"node_states": [{"total_resources": {"CPU": -1}}]});
        let e = cluster_resource_state_from_json(&v, "crs")
            .expect_err("fails")
            .to_string();
        assert_eq!(
            e,
            "crs.node_states[0].total_resources.CPU: resource amounts must be finite and non-negative, got -1"
        );
    }
}

#[cfg(test)]
mod lenient_tests {
    use super::*;

    fn node(id: u8, cpu: f64) -> pb::NodeState {
        pb::NodeState {
            node_id: vec![id; 4],
            instance_id: format!("i-{id}"),
            total_resources: [("CPU".to_string(), cpu)].into_iter().collect(),
            available_resources: [("CPU".to_string(), cpu)].into_iter().collect(),
            ..Default::default()
        }
    }

    fn request(cpu: f64, count: i64) -> pb::ResourceRequestByCount {
        pb::ResourceRequestByCount {
            request: Some(pb::ResourceRequest {
                resources_bundle: [("CPU".to_string(), cpu)].into_iter().collect(),
                ..Default::default()
            }),
            count,
        }
    }

    #[test]
    fn a_bad_row_is_left_out_and_named_never_the_whole_state() {
        let s = pb::ClusterResourceState {
            node_states: vec![node(1, 4.0), node(2, f64::NAN), node(3, 2.0)],
            pending_resource_requests: vec![request(1.0, 3), request(1.0, -1), request(-2.0, 1)],
            ..Default::default()
        };
        let strict = cluster_resource_state(s.clone(), "state").expect_err("strict fails");
        assert!(
            strict.to_string().contains("state.node_states[1]"),
            "{strict}"
        );
        let (state, skipped) = cluster_resource_state_lenient(s, "state");
        assert_eq!(
            state
                .node_states
                .iter()
                .map(|n| n.instance_id.as_str())
                .collect::<Vec<_>>(),
            ["i-1", "i-3"]
        );
        assert_eq!(state.pending_resource_requests.len(), 1);
        assert_eq!(state.pending_resource_requests[0].count, 3);
        let paths: Vec<String> = skipped.iter().map(|e| e.to_string()).collect();
        assert_eq!(paths.len(), 3, "{paths:?}");
        assert!(paths[0].contains("state.node_states[1].available_resources.CPU"));
        assert!(paths[1].contains("state.pending_resource_requests[1].count"));
        assert!(paths[2].contains("state.pending_resource_requests[2].request"));
        assert!(paths.iter().all(|p| !p.contains('\n')));
        // The node whose row was not read is not dropped: it is kept as unreadable, so
        // that its instance is never taken for gone.
        assert_eq!(state.unreadable_nodes.len(), 1);
        assert_eq!(state.unreadable_nodes[0].instance_id, "i-2");
        assert_eq!(state.unreadable_nodes[0].node_id, vec![2; 4]);
        assert!(
            state.unreadable_nodes[0]
                .reason
                .starts_with("available_resources.CPU:"),
            "{}",
            state.unreadable_nodes[0].reason
        );
    }

    #[test]
    fn what_ray_can_send_is_read_and_only_what_means_nothing_is_refused() {
        let mut over = node(1, 4.0);
        // A node whose tasks oversubscribe it: Ray's scheduler reads it as full.
        over.available_resources.insert("CPU".into(), -2.0);
        // An absent key means none available.
        over.total_resources.insert("GPU".into(), 1.0);
        let mut bad_total = node(2, 4.0);
        bad_total.total_resources.insert("CPU".into(), -4.0);
        let mut huge = node(3, 4.0);
        huge.available_resources.insert("CPU".into(), f64::INFINITY);
        let mut dead = node(4, f64::NAN);
        dead.status = pb::NodeStatus::Dead as i32;
        let s = pb::ClusterResourceState {
            node_states: vec![over, bad_total, huge, dead],
            ..Default::default()
        };
        let (state, _) = cluster_resource_state_lenient(s, "state");
        let read: Vec<(&str, Option<NodeStatus>)> = state
            .node_states
            .iter()
            .map(|n| (n.instance_id.as_str(), n.status))
            .collect();
        assert_eq!(read, [("i-1", None), ("i-4", Some(NodeStatus::Dead))]);
        assert_eq!(state.node_states[0].available_resources.get("CPU"), Some(0));
        assert_eq!(state.node_states[0].available_resources.get("GPU"), None);
        let unreadable: Vec<&str> = state
            .unreadable_nodes
            .iter()
            .map(|n| n.instance_id.as_str())
            .collect();
        assert_eq!(unreadable, ["i-2", "i-3"]);
    }
}
