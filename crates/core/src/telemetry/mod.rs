//! What the loop shows its operators, derived purely from what an iteration saw: the
//! values of Ray's autoscaler metrics (Ray 2.60's `autoscaler/v2/metrics_reporter.py`:
//! nodes per type pending, running and terminating, resources running and pending) and
//! Ray's autoscaler event lines (`autoscaler/v2/event_logger.py`: "Adding 3 node(s) of
//! type cpu4.", ...), see [`events`].
//!
//! No I/O: the Prometheus exporter and the event file live in `bin/`; the driver hands
//! each step to them through the driver's `Observer`.

pub mod events;

use std::collections::BTreeMap;

use crate::config::ClusterConfig;
use crate::instance::Instance;
use crate::model::{ClusterResourceState, InstanceStatus, NodeStatus};
use crate::scheduler::request::HEAD_MARKER;

/// Instances of one node type, as Ray's metrics reporter counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounts {
    /// Ray not yet running (QUEUED, REQUESTED, ALLOCATED, RAY_INSTALLING):
    /// `autoscaler_pending_nodes`.
    pub pending: u64,
    /// Ray running (RAY_RUNNING, RAY_STOP_REQUESTED, RAY_STOPPING):
    /// `autoscaler_active_nodes`.
    pub running: u64,
    /// TERMINATING: `autoscaler_recently_failed_nodes` (Ray's name for it).
    pub terminating: u64,
}

/// Ray's `is_ray_pending`: statuses from which RAY_RUNNING is still ahead.
pub fn is_ray_pending(s: InstanceStatus) -> bool {
    matches!(
        s,
        InstanceStatus::Queued
            | InstanceStatus::Requested
            | InstanceStatus::Allocated
            | InstanceStatus::RayInstalling
    )
}

/// Ray's `is_ray_running`: Ray runs on the instance (and is not being stopped for good).
pub fn is_ray_running(s: InstanceStatus) -> bool {
    matches!(
        s,
        InstanceStatus::RayRunning | InstanceStatus::RayStopRequested | InstanceStatus::RayStopping
    )
}

/// Whether the head runs Ray without a record in the table (rayscale keeps no record of a
/// head it did not launch); Ray's instance manager has one, so its metrics count the head.
fn untracked_head<'a>(
    instances: impl Iterator<Item = &'a Instance>,
    ray: &ClusterResourceState,
) -> bool {
    let mut instances = instances;
    !instances.any(|i| i.is_head)
        && ray.node_states.iter().any(|n| {
            n.total_resources.get(HEAD_MARKER).is_some() && n.status != Some(NodeStatus::Dead)
        })
}

/// Instances per node type: every type of the config (zero counts included, as Ray
/// reports them) and any type a record still has. The head counts as running.
pub fn node_counts(
    config: &ClusterConfig,
    instances: &[&Instance],
    ray: &ClusterResourceState,
) -> BTreeMap<String, NodeCounts> {
    let mut out: BTreeMap<String, NodeCounts> = config
        .node_types
        .iter()
        .map(|t| (t.name.clone(), NodeCounts::default()))
        .collect();
    for i in instances {
        let c = out.entry(i.node_type.clone()).or_default();
        if is_ray_pending(i.status) {
            c.pending += 1;
        } else if is_ray_running(i.status) {
            c.running += 1;
        } else if i.status == InstanceStatus::Terminating {
            c.terminating += 1;
        }
    }
    if let Some(head) = &config.head_node_type
        && untracked_head(instances.iter().copied(), ray)
    {
        out.entry(head.clone()).or_default().running += 1;
    }
    out
}

/// Resources of the cluster as Ray's metrics reporter sums them: the node type's
/// configured resources, per instance, for instances running Ray (`cluster`) and on their
/// way (`pending`). Types the config no longer has are left out, as Ray does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceTotals {
    /// `autoscaler_cluster_resources`.
    pub cluster: BTreeMap<String, f64>,
    /// `autoscaler_pending_resources`.
    pub pending: BTreeMap<String, f64>,
}

/// See [`ResourceTotals`].
pub fn resource_totals(
    config: &ClusterConfig,
    instances: &[&Instance],
    ray: &ClusterResourceState,
) -> ResourceTotals {
    let mut out = ResourceTotals::default();
    let add = |to: &mut BTreeMap<String, f64>, node_type: &str| {
        if let Some(t) = config.node_types.iter().find(|t| t.name == node_type) {
            for (k, v) in &t.resources.0 {
                *to.entry(k.to_string()).or_default() += crate::model::resources::to_f64(*v);
            }
        }
    };
    for i in instances {
        if is_ray_pending(i.status) {
            add(&mut out.pending, &i.node_type);
        } else if is_ray_running(i.status) {
            add(&mut out.cluster, &i.node_type);
        }
    }
    if let Some(head) = &config.head_node_type
        && untracked_head(instances.iter().copied(), ray)
    {
        add(&mut out.cluster, head);
    }
    out
}

#[cfg(test)]
mod tests;
