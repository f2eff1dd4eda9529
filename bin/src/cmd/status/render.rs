//! The status view of a `GetClusterStatus` reply: nodes by type and state, pending
//! launches, demand, infeasible demand and the autoscaler's view.

use std::collections::BTreeMap;

use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;

fn fmt_resources(m: &BTreeMap<String, f64>) -> String {
    m.iter()
        .filter(|(k, _)| !k.starts_with("node:"))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_request(r: &pb::ResourceRequest) -> String {
    format!("{{{}}}", fmt_resources(&r.resources_bundle))
}

/// The status view of a `GetClusterStatus` reply.
pub fn render(reply: &pb::GetClusterStatusReply) -> String {
    let mut out = String::new();
    let state = reply.cluster_resource_state.clone().unwrap_or_default();
    let auto = reply.autoscaling_state.clone().unwrap_or_default();
    out.push_str(&format!(
        "cluster {} (state version {})\n",
        if state.cluster_session_name.is_empty() {
            "?"
        } else {
            &state.cluster_session_name
        },
        state.cluster_resource_state_version
    ));
    out.push_str("Nodes:\n");
    let mut by_type: BTreeMap<(String, String), u32> = BTreeMap::new();
    for n in &state.node_states {
        let status = pb::NodeStatus::try_from(n.status)
            .map(|s| s.as_str_name().to_string())
            .unwrap_or_else(|_| n.status.to_string());
        *by_type
            .entry((n.ray_node_type_name.clone(), status))
            .or_default() += 1;
    }
    if by_type.is_empty() {
        out.push_str("  (none)\n");
    }
    for ((t, s), k) in &by_type {
        out.push_str(&format!(
            "  {k} {} {s}\n",
            if t.is_empty() { "?" } else { t }
        ));
    }
    out.push_str("Pending launches:\n");
    if auto.pending_instance_requests.is_empty() && auto.pending_instances.is_empty() {
        out.push_str("  (none)\n");
    }
    for p in &auto.pending_instance_requests {
        out.push_str(&format!("  {} {} queued\n", p.count, p.ray_node_type_name));
    }
    for p in &auto.pending_instances {
        out.push_str(&format!(
            "  {} {} {}\n",
            p.instance_id, p.ray_node_type_name, p.details
        ));
    }
    // Unavailable node types travel as failed requests of count 0 (so `ray status -v`
    // shows them too).
    let (unavailable, failed): (Vec<_>, Vec<_>) = auto
        .failed_instance_requests
        .iter()
        .partition(|f| f.count == 0);
    out.push_str("Unavailable node types:\n");
    if unavailable.is_empty() {
        out.push_str("  (none)\n");
    }
    for f in &unavailable {
        out.push_str(&format!("  {}: {}\n", f.ray_node_type_name, f.reason));
    }
    out.push_str("Recent failures:\n");
    if failed.is_empty() {
        out.push_str("  (none)\n");
    }
    for f in &failed {
        out.push_str(&format!(
            "  {} {}: {}\n",
            f.count, f.ray_node_type_name, f.reason
        ));
    }
    out.push_str("Demands:\n");
    for d in &state.pending_resource_requests {
        if let Some(r) = &d.request {
            out.push_str(&format!("  {} x {}\n", d.count, fmt_request(r)));
        }
    }
    for g in &state.pending_gang_resource_requests {
        let bundles: Vec<String> = g.requests.iter().map(fmt_request).collect();
        out.push_str(&format!("  placement group [{}]\n", bundles.join(", ")));
    }
    for c in &state.cluster_resource_constraints {
        for r in &c.resource_requests {
            if let Some(q) = &r.request {
                out.push_str(&format!(
                    "  request_resources: {} x {}\n",
                    r.count,
                    fmt_request(q)
                ));
            }
        }
    }
    out.push_str("Infeasible:\n");
    let infeasible = auto.infeasible_resource_requests.len()
        + auto.infeasible_gang_resource_requests.len()
        + auto.infeasible_cluster_resource_constraints.len();
    if infeasible == 0 {
        out.push_str("  (none)\n");
    }
    for r in &auto.infeasible_resource_requests {
        out.push_str(&format!("  {}\n", fmt_request(r)));
    }
    for g in &auto.infeasible_gang_resource_requests {
        let bundles: Vec<String> = g.requests.iter().map(fmt_request).collect();
        out.push_str(&format!("  placement group [{}]\n", bundles.join(", ")));
    }
    for c in &auto.infeasible_cluster_resource_constraints {
        out.push_str(&format!(
            "  request_resources with {} bundle kinds\n",
            c.resource_requests.len()
        ));
    }
    out
}
