//! Autostop (`rayscale.autostop_minutes`; off, nothing here runs and decisions stay
//! Ray's): when the cluster has had no demand and no work for that long, every worker is
//! stopped (an idle drain, which Ray refuses on a node that got work meanwhile), and no
//! node is launched for `min_workers` while it stays quiet. Once no worker is left, the
//! outcome says the head is due: the driver's caller stops it for a cluster that `up`
//! launched (the config refuses autostop on KubeRay, whose operator owns the cluster).
//!
//! Quiet means, from the GCS alone: no pending task, actor or placement group, no
//! `request_resources` bundle, every node idle as Ray counts it (its idle duration), and
//! every row of the reply read (what cannot be read is not taken for idle). The clock
//! is kept with the availability state, so a restarted rayscale keeps it.

use super::*;
use crate::availability::LimitClocks;
use crate::scheduler::{SchedulingRequest, Termination};

/// What autostop sees in one iteration (for the event log, metrics and tests).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AutostopView {
    /// Since when the cluster is quiet (ns), if it is.
    pub quiet_since_ns: Option<i64>,
    /// When the workers stop, if it stays quiet (ns).
    pub stop_at_ns: Option<i64>,
    /// When the workers were stopped (ns), once they were.
    pub stopped_at_ns: Option<i64>,
    /// Worker instances not yet terminated.
    pub workers_left: usize,
    /// Stopped and no worker left: the head is next (for a cluster `up` launched).
    pub head_due: bool,
}

/// Whether the cluster is quiet: no demand of any kind, and every node idle as Ray counts
/// it, with every row read.
fn quiet(ray: &ClusterResourceState, request: &SchedulingRequest, outside: bool) -> bool {
    request.resource_requests.iter().all(|r| r.count == 0)
        && request.gang_requests.is_empty()
        && request
            .cluster_constraints
            .iter()
            .all(|c| c.resource_requests.iter().all(|r| r.count == 0))
        && !outside
        && ray.unreadable_nodes.is_empty()
        && ray
            .node_states
            .iter()
            .filter(|n| n.status != Some(NodeStatus::Dead))
            .all(|n| {
                n.is_idle()
                    // Ray reports a node it drains as DRAINING with no idle time, its
                    // own idle drains (autostop's) included: quiet while nothing runs.
                    || (n.status == Some(NodeStatus::Draining)
                        && super::preempt::in_use(n).is_empty())
            })
}

/// Applies autostop (`minutes`) to `decision`, moving `clocks`; `None` when it is off.
#[allow(clippy::too_many_arguments)]
pub(super) fn apply(
    minutes: Option<f64>,
    ray: &ClusterResourceState,
    request: &SchedulingRequest,
    outside_demand: bool,
    table: &[Arc<Instance>],
    decision: &mut Decision,
    clocks: &mut LimitClocks,
    now_ns: i64,
) -> Option<AutostopView> {
    let Some(minutes) = minutes else {
        clocks.quiet_since_ns = None;
        clocks.autostopped_ns = None;
        return None;
    };
    let workers: Vec<&Instance> = table
        .iter()
        .map(|i| &**i)
        .filter(|i| !i.is_head && !i.is_terminal())
        .collect();
    let mut view = AutostopView {
        workers_left: workers.len(),
        ..Default::default()
    };
    if !quiet(ray, request, outside_demand) {
        clocks.quiet_since_ns = None;
        clocks.autostopped_ns = None;
        return Some(view);
    }
    let since = *clocks.quiet_since_ns.get_or_insert(now_ns);
    let after_ns = (minutes * 60.0 * SEC as f64).min(i64::MAX as f64) as i64;
    let at = since.saturating_add(after_ns);
    view.quiet_since_ns = Some(since);
    view.stop_at_ns = Some(at);
    if now_ns < at {
        return Some(view);
    }
    let stopped = *clocks.autostopped_ns.get_or_insert(now_ns);
    view.stopped_at_ns = Some(stopped);
    // Nothing is launched while it stays quiet (`min_workers` included), and every
    // worker that is not already on its way out is stopped.
    decision.launch.clear();
    for i in &workers {
        if leaving(i.status) {
            continue;
        }
        match decision
            .terminate
            .iter_mut()
            .find(|t| t.instance_id == i.instance_id)
        {
            Some(t) => t.cause = TerminationCause::Autostop,
            None => decision.terminate.push(Termination {
                instance_id: i.instance_id.clone(),
                ray_node_id: i.node_id.clone().unwrap_or_default(),
                node_type: i.node_type.clone(),
                instance_status: i.status,
                cause: TerminationCause::Autostop,
                idle_duration_ms: 0,
            }),
        }
    }
    view.head_due = workers.is_empty();
    Some(view)
}

/// The event log warns this long before autostop stops the workers.
pub const AUTOSTOP_WARNING_S: i64 = 600;

/// What the event log has said of the current quiet period (kept by the caller).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutostopSaid {
    warned: Option<i64>,
    stopped: Option<i64>,
}

impl AutostopView {
    /// The event lines of this iteration, each said once per quiet period: the warning
    /// [`AUTOSTOP_WARNING_S`] before (at once when the wait is shorter), the stop, and
    /// work arriving after a warning.
    pub fn lines(&self, said: &mut AutostopSaid, now_ns: i64) -> Vec<String> {
        let hms = crate::preemption::hms_utc;
        let mut out = Vec::new();
        let (Some(since), Some(at)) = (self.quiet_since_ns, self.stop_at_ns) else {
            if said.warned.take().is_some() && said.stopped.take().is_none() {
                out.push("Autostop: work arrived; the cluster stays up.".to_string());
            }
            said.stopped = None;
            return out;
        };
        let warn_from = at.saturating_sub(AUTOSTOP_WARNING_S.saturating_mul(SEC));
        if said.warned != Some(since) && now_ns >= warn_from {
            said.warned = Some(since);
            out.push(format!(
                "Autostop: no demand and no work since {}; every worker stops at {} \
                 (then the head, for a cluster rayscale up launched) unless work arrives.",
                hms(since),
                hms(at)
            ));
        }
        if self.stopped_at_ns.is_some() && said.stopped != Some(since) {
            said.stopped = Some(since);
            let minutes = at.saturating_sub(since) / (60 * SEC);
            out.push(format!(
                "Autostop: stopping every worker ({} worker(s) left) after {minutes} min \
                 with no demand and no work.",
                self.workers_left
            ));
        }
        out
    }
}
