//! Multi-host node types (`NodeTypeConfig::hosts`: a multi-host Cloud TPU slice): one
//! cloud instance is several hosts, each running its own Ray node under the instance's
//! cloud id. The instance is one unit, as Ray's launcher treats a TPU pod as one node:
//!
//! - its record's Ray node is its first host's (the one with the type's first-host-only
//!   resources, Ray's `TPU-<type>-head`): the record reaches RAY_RUNNING when that host's
//!   node runs (`sync`);
//! - the scheduler sees one node for it, the first host's, idle only as long as every
//!   host has been ([`folded`]): a slice whose first host waits while the others work is
//!   busy, and `max_workers` counts the instance once, as Ray counts a pod;
//! - stopping it drains every host, the others before the first ([`siblings`]);
//! - a Ray node of another host is never taken for a raylet restarted on the instance,
//!   and any host's node dead while the instance runs stops it whole (`sync`: its hosts
//!   run one program; a broken slice is not kept).
//!
//! With no multi-host type in the config, nothing here changes anything (the difftest
//! against Ray's scheduler stays exact).

use std::sync::Arc;

use foldhash::HashMap;

use crate::config::ClusterConfig;
use crate::instance::Instance;
use crate::model::{ClusterResourceState, InstanceStatus, NodeState, NodeStatus};

/// The live Ray nodes (hex) of each cloud instance of a multi-host type, by cloud id, in
/// the GCS reply's order.
#[derive(Debug, Default)]
pub(super) struct Hosts {
    by_cloud: HashMap<String, Vec<String>>,
}

/// The multi-host type a node state belongs to, by its own type name.
fn multi_host<'c>(
    config: &'c ClusterConfig,
    ns: &NodeState,
) -> Option<&'c crate::config::MultiHost> {
    config
        .node_type(&ns.ray_node_type_name)
        .and_then(|t| t.hosts.as_ref())
}

fn live(ns: &NodeState) -> bool {
    !matches!(ns.status, Some(NodeStatus::Dead))
}

impl Hosts {
    /// The live nodes of `ray` (whose hex ids are `hexes`, one per node) that are hosts
    /// of a multi-host type's instance.
    pub(super) fn of(config: &ClusterConfig, ray: &ClusterResourceState, hexes: &[String]) -> Self {
        let mut by_cloud: HashMap<String, Vec<String>> = HashMap::default();
        if !config.node_types.iter().any(|t| t.hosts.is_some()) {
            return Hosts { by_cloud };
        }
        for (ns, hex) in ray.node_states.iter().zip(hexes) {
            if live(ns) && !ns.instance_id.is_empty() && multi_host(config, ns).is_some() {
                by_cloud
                    .entry(ns.instance_id.clone())
                    .or_default()
                    .push(hex.clone());
            }
        }
        Hosts { by_cloud }
    }
}

/// The live Ray nodes of `i`'s other hosts (not its own node): what a stop of `i` drains
/// first. Empty for a one-host instance.
pub(super) fn siblings(hosts: &Hosts, i: &Instance) -> Vec<String> {
    let Some(cloud) = i.cloud_instance_id.as_deref() else {
        return Vec::new();
    };
    hosts
        .by_cloud
        .get(cloud)
        .map(|all| {
            all.iter()
                .filter(|h| Some(h.as_str()) != i.node_id.as_deref())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `ns` may be the Ray node of a record of a multi-host type `i` that has none
/// yet: only the first host (the one with every first-host-only resource). Always for a
/// one-host type.
pub(super) fn may_claim(config: &ClusterConfig, i: &Instance, ns: &NodeState) -> bool {
    match config
        .node_type(&i.node_type)
        .and_then(|t| t.hosts.as_ref())
    {
        None => true,
        Some(m) => m
            .first_host_only
            .iter()
            .all(|r| ns.total_resources.get(r).is_some()),
    }
}

/// Whether `i` is of a multi-host type (its instance's other Ray nodes are its hosts, not
/// raylets restarted on it).
pub(super) fn is_multi_host(config: &ClusterConfig, i: &Instance) -> bool {
    config
        .node_type(&i.node_type)
        .is_some_and(|t| t.hosts.is_some())
}

/// The GCS state with each multi-host instance's live Ray nodes folded into one: the
/// record's own node (else the first host's, else the first listed), idle for as long as
/// every host has been (the shortest idle time; 0 when one works), and not idle when one
/// host is not. `None` when no instance has more than one live node (nothing to fold).
pub(super) fn folded(
    config: &ClusterConfig,
    ray: &ClusterResourceState,
    table: &[Arc<Instance>],
) -> Option<ClusterResourceState> {
    if !config.node_types.iter().any(|t| t.hosts.is_some()) {
        return None;
    }
    // Live nodes of multi-host types by cloud id (indexes into `ray.node_states`).
    let mut groups: HashMap<&str, Vec<usize>> = HashMap::default();
    for (n, ns) in ray.node_states.iter().enumerate() {
        if live(ns) && !ns.instance_id.is_empty() && multi_host(config, ns).is_some() {
            groups.entry(ns.instance_id.as_str()).or_default().push(n);
        }
    }
    groups.retain(|_, g| g.len() > 1);
    if groups.is_empty() {
        return None;
    }
    let mut out = ray.clone();
    let mut drop = vec![false; ray.node_states.len()];
    for (cloud, group) in &groups {
        let record_node = table
            .iter()
            .filter(|i| i.cloud_instance_id.as_deref() == Some(*cloud))
            .filter(|i| !matches!(i.status, InstanceStatus::Terminated))
            .find_map(|i| i.node_id.as_deref());
        let first_host = |n: &usize| {
            let ns = &ray.node_states[*n];
            multi_host(config, ns).is_some_and(|m| {
                m.first_host_only
                    .iter()
                    .all(|r| ns.total_resources.get(r).is_some())
            })
        };
        let rep = group
            .iter()
            .copied()
            .find(|n| Some(ray.node_states[*n].node_id_hex().as_str()) == record_node)
            .or_else(|| group.iter().copied().find(first_host))
            .unwrap_or(group[0]);
        let idle_ms = group
            .iter()
            .map(|n| ray.node_states[*n].idle_duration_ms)
            .min()
            .unwrap_or(0);
        let busy = group.iter().any(|n| !ray.node_states[*n].is_idle());
        let r = &mut out.node_states[rep];
        r.idle_duration_ms = if busy { 0 } else { idle_ms };
        if busy && r.status == Some(NodeStatus::Idle) {
            r.status = Some(NodeStatus::Running);
        }
        for n in group {
            drop[*n] = *n != rep;
        }
    }
    let mut n = 0;
    out.node_states.retain(|_| {
        let keep = !drop[n];
        n += 1;
        keep
    });
    Some(out)
}
