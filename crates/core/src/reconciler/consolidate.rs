//! Consolidation (`rayscale.consolidation`; off, nothing here chooses and decisions stay
//! Ray's): a running worker of an opted-in type whose most used resource has stayed below
//! `utilization_below` for `after_s`, and whose load fits on the other nodes as they are
//! (the scheduler, asked to place that load with this node gone and no node launched),
//! is drained with a deadline (`DRAIN_NODE_REASON_PREEMPTION`, which Ray does not
//! refuse): it takes no new work, what runs there runs on until it ends or the deadline
//! passes, and then the instance is terminated (Ray retries retriable tasks elsewhere).
//!
//! At most one new drain per iteration, never while demand is pending or a launch is
//! under way, never below a type's `min_workers`; the least used candidate first. The
//! load of every node already draining for consolidation is placed in the same trial
//! (it comes back as demand when its node goes), so drains under way never count the same
//! free room twice. The drain is a voluntary stop, held by the disruption budget
//! (`max_draining` bounds how many drain at once) and its windows like an idle one.
//!
//! A multi-host instance (a TPU slice) is never consolidated: its hosts run one program,
//! which does not move as retried tasks do.
//!
//! What runs on a node is known only as a sum (the GCS reports totals, not tasks), so
//! the load is placed whole, as one bundle: a node whose tasks would fit only spread over
//! several others is kept (conservative).

use super::*;
use crate::availability::LimitClocks;
use crate::config::limits::Consolidation;
use crate::model::{ResourceRequestByCount, resources::to_f64};
use crate::scheduler::{NodeFate, SchedulingRequest, Termination, schedule_explained};

use super::preempt::in_use;

/// The share of its most used resource in use on `n` (the `node:` markers left out), and
/// what is in use.
fn utilization(n: &crate::model::NodeState) -> (f64, crate::model::ResourceMap) {
    let used = in_use(n);
    let share = used
        .iter()
        .filter_map(|(k, u)| {
            let total = n.total_resources.get(k).filter(|t| *t > 0)?;
            Some(to_f64(u) / to_f64(total))
        })
        .fold(0.0, f64::max);
    (share, used)
}

/// Whether the loads `used` fit on the cluster of `request` without instance `gone`,
/// with no node launched and the nodes `leaving` (stopped in this decision) left out.
fn fits_without(
    request: &SchedulingRequest,
    gone: &str,
    leaving: &BTreeSet<&str>,
    used: &[&crate::model::ResourceMap],
) -> bool {
    let trial = SchedulingRequest {
        node_types: request.node_types.clone(),
        head_node_type: request.head_node_type.clone(),
        max_num_nodes: request.max_num_nodes,
        disable_launch_config_check: request.disable_launch_config_check,
        cluster_constraints: request.cluster_constraints.clone(),
        cloud_resource_availabilities: request.cloud_resource_availabilities.clone(),
        recoverable_resource_availabilities: request.recoverable_resource_availabilities.clone(),
        instances: request
            .instances
            .iter()
            .filter(|i| i.instance_id != gone && !leaving.contains(i.instance_id.as_str()))
            // A node on its way out holds nothing (RAY_STOP_REQUESTED still counts as
            // capacity for Ray's scheduler).
            .filter(|i| !super::leaving(i.status))
            // Nor does an idle node: Ray's idle timeout may take it before the deadline.
            .filter(|i| i.ray_node.as_ref().is_none_or(|n| n.idle_duration_ms == 0))
            .cloned()
            .collect(),
        resource_requests: used
            .iter()
            .map(|u| ResourceRequestByCount {
                request: ResourceRequest {
                    resources: (*u).clone(),
                    ..Default::default()
                },
                count: 1,
            })
            .collect(),
        gang_requests: Vec::new(),
        unavailable_node_types: request.node_types.iter().map(|t| t.name.clone()).collect(),
        idle_timeout_s: None,
    };
    // With every type unavailable, what finds no room stays pending (not infeasible):
    // count what the existing nodes took.
    let (d, views) = schedule_explained(&trial);
    let kept = || views.iter().filter(|v| v.fate == NodeFate::Keep);
    let placed: u64 = kept().flat_map(|v| &v.placed).map(|(_, c)| *c).sum();
    let constraint: u64 = trial
        .cluster_constraints
        .first()
        .map_or(0, |c| c.resource_requests.iter().map(|r| r.count).sum());
    let constraint_placed: u64 = kept()
        .flat_map(|v| &v.placed_constraint)
        .map(|(_, c)| *c)
        .sum();
    d.launch.is_empty()
        && d.infeasible_requests.is_empty()
        && d.infeasible_constraints.is_empty()
        && placed == used.len() as u64
        && constraint_placed >= constraint
}

/// Moves the low-use clocks and, when a node can go, adds its stop to `decision`.
#[allow(clippy::too_many_arguments)]
pub(super) fn choose(
    c: Option<&Consolidation>,
    config: &ClusterConfig,
    ray: &ClusterResourceState,
    unreadable: &Unreadable,
    request: &SchedulingRequest,
    table: &[Arc<Instance>],
    decision: &mut Decision,
    clocks: &mut LimitClocks,
    now_ns: i64,
) {
    let Some(c) = c else {
        clocks.low_since_ns.clear();
        return;
    };
    let nodes: HashMap<String, &crate::model::NodeState> = ray
        .node_states
        .iter()
        .filter(|n| n.status != Some(NodeStatus::Dead))
        .map(|n| (n.node_id_hex(), n))
        .collect();
    // The clocks: opted-in running workers below the threshold (an unreadable one keeps
    // its clock as it was).
    let mut low: Vec<(f64, i64, &Instance, crate::model::ResourceMap)> = Vec::new();
    let mut kept = BTreeMap::new();
    for i in table.iter().map(|i| &**i) {
        // A multi-host instance's hosts run one program: its work is not moved.
        if i.is_head
            || i.status != InstanceStatus::RayRunning
            || !c.node_types.contains(&i.node_type)
            || hosts::is_multi_host(config, i)
        {
            continue;
        }
        if unreadable.holds(i) {
            if let Some(&t) = clocks.low_since_ns.get(&i.instance_id) {
                kept.insert(i.instance_id.clone(), t);
            }
            continue;
        }
        let Some(n) = i
            .node_id
            .as_deref()
            .and_then(|id| nodes.get(id))
            .filter(|n| n.status == Some(NodeStatus::Running))
        else {
            continue;
        };
        let (share, used) = utilization(n);
        if used.is_empty() || share >= c.utilization_below {
            continue;
        }
        let since = clocks
            .low_since_ns
            .get(&i.instance_id)
            .copied()
            .unwrap_or(now_ns);
        kept.insert(i.instance_id.clone(), since);
        low.push((share, since, i, used));
    }
    clocks.low_since_ns = kept;
    // Not now: demand pending, a launch under way, or autostop has the cluster.
    let busy = request.resource_requests.iter().any(|r| r.count > 0)
        || !request.gang_requests.is_empty()
        || !decision.launch.is_empty()
        || clocks.autostopped_ns.is_some()
        || table.iter().any(|i| {
            matches!(
                i.status,
                InstanceStatus::Queued
                    | InstanceStatus::Requested
                    | InstanceStatus::Allocated
                    | InstanceStatus::RayInstalling
            )
        });
    if busy {
        return;
    }
    // The loads of the nodes drained for consolidation whose Ray node still runs (its
    // instance may be terminating already): placed in every trial. One that cannot be
    // read stops consolidation for this iteration, and so does a node that went within
    // the last `SETTLE_S` (its work comes back as demand only once Ray retries it).
    const SETTLE_S: i64 = 30;
    let consolidated = |i: &&Arc<Instance>| {
        i.stop_cause.as_deref() == Some(TerminationCause::Consolidation.name())
    };
    if table.iter().filter(consolidated).any(|i| {
        i.status == InstanceStatus::Terminated
            && i.status_since(InstanceStatus::Terminated)
                .is_some_and(|t| now_ns.saturating_sub(t) < SETTLE_S.saturating_mul(SEC))
    }) {
        return;
    }
    let mut draining_loads = Vec::new();
    for i in table
        .iter()
        .filter(consolidated)
        .filter(|i| !i.is_terminal())
    {
        if unreadable.holds(i) {
            return;
        }
        if let Some(n) = i.node_id.as_deref().and_then(|id| nodes.get(id)) {
            let used = in_use(n);
            if !used.is_empty() {
                draining_loads.push(used);
            }
        }
    }
    let after_ns = i64::try_from(c.after_s)
        .unwrap_or(i64::MAX)
        .saturating_mul(SEC);
    let leaving: BTreeSet<&str> = decision
        .terminate
        .iter()
        .map(|t| t.instance_id.as_str())
        .collect();
    let mut live_by_type: HashMap<&str, u64> = HashMap::default();
    for i in table.iter().filter(|i| {
        !i.is_head
            && i.status == InstanceStatus::RayRunning
            && !leaving.contains(i.instance_id.as_str())
    }) {
        *live_by_type.entry(i.node_type.as_str()).or_default() += 1;
    }
    low.retain(|(_, since, i, _)| {
        now_ns.saturating_sub(*since) >= after_ns && !leaving.contains(i.instance_id.as_str())
    });
    low.sort_by(|a, b| {
        crate::scheduler::fcmp(a.0, b.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.instance_id.cmp(&b.2.instance_id))
    });
    // At most a few trials per iteration (each is one scheduling pass).
    const TRIALS: usize = 8;
    for (_, _, i, used) in low.iter().take(TRIALS) {
        let min = config.node_type(&i.node_type).map_or(0, |t| t.min_workers);
        if live_by_type.get(i.node_type.as_str()).copied().unwrap_or(0) <= min {
            continue;
        }
        let mut loads: Vec<&crate::model::ResourceMap> = draining_loads.iter().collect();
        loads.push(used);
        if fits_without(request, &i.instance_id, &leaving, &loads) {
            decision.terminate.push(Termination {
                instance_id: i.instance_id.clone(),
                ray_node_id: i.node_id.clone().unwrap_or_default(),
                node_type: i.node_type.clone(),
                instance_status: i.status,
                cause: TerminationCause::Consolidation,
                idle_duration_ms: 0,
            });
            return;
        }
    }
}

impl<S: InstanceStorage> Run<'_, S> {
    /// Instances drained with a deadline (consolidation) are terminated once no work is
    /// left on their node, or when the deadline passes.
    pub(super) fn finish_deadline_drains(
        &mut self,
        obs: Observed<'_>,
        unreadable: &Unreadable,
    ) -> Result<(), CoreError> {
        let now = self.now_ns;
        let table = self.table()?;
        if !table.iter().any(|i| i.drain_deadline_ns.is_some()) {
            return Ok(());
        }
        let nodes: HashMap<String, &crate::model::NodeState> = obs
            .ray
            .node_states
            .iter()
            .filter(|n| n.status != Some(NodeStatus::Dead))
            .map(|n| (n.node_id_hex(), n))
            .collect();
        let mut events = Vec::new();
        for i in table.iter().filter(|i| !unreadable.holds(i)) {
            let Some(deadline) = i.drain_deadline_ns else {
                continue;
            };
            if !matches!(
                i.status,
                InstanceStatus::RayStopRequested | InstanceStatus::RayStopping
            ) {
                continue;
            }
            let why = if now >= deadline {
                "its drain's deadline passed"
            } else if i.status == InstanceStatus::RayStopping
                && i.node_id
                    .as_deref()
                    .and_then(|n| nodes.get(n))
                    .is_some_and(|n| in_use(n).is_empty())
            {
                "drained: no work left on it"
            } else {
                continue;
            };
            // Ray's table has no RAY_STOP_REQUESTED -> TERMINATING: through RAY_STOPPED,
            // which is terminated below in the same iteration.
            let to = if i.status == InstanceStatus::RayStopping {
                InstanceStatus::Terminating
            } else {
                InstanceStatus::RayStopped
            };
            events.push(Self::ev(i, to, why));
        }
        self.apply(events)
    }
}
