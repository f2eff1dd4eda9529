//! Preemption (`rayscale.preemption.enabled`; off, nothing here runs and decisions stay
//! Ray's): a node Ray reports DRAINING that rayscale did not drain — a preemption notice
//! its watcher acted on, or an operator's `ray drain-node` — is leaving. Ray's scheduler
//! already takes it for no capacity (RAY_STOPPING); rayscale also treats what runs on it
//! as demand in the same iteration, so its replacement is launched before the node dies
//! and its work comes back as new demand a boot time later. A notice's (type, zone) is
//! marked unavailable for the TTL, so the replacement goes elsewhere; a node still
//! listed past its notice's deadline is terminated.

use foldhash::HashMapExt;

use super::*;
use crate::model::{ResourceMap, ResourceRequestByCount};

/// How long past its notice's deadline a preempted instance may still be there before
/// rayscale terminates it (the cloud normally has by then).
pub const DEADLINE_GRACE_S: i64 = 10;

/// When `i` started draining without rayscale having asked: its last status is
/// RAY_STOPPING, entered straight from RAY_RUNNING, or from ALLOCATED when the node joined
/// and was drained (on a notice) between two looks (a launch call that held the
/// loop while the node booted, took work and got its notice); rayscale's own drains pass
/// through RAY_STOP_REQUESTED.
pub(crate) fn drained_outside_since(i: &Instance) -> Option<i64> {
    let h = &i.status_history;
    let last = h.last()?;
    let prev = h.get(h.len().checked_sub(2)?)?;
    (i.status == InstanceStatus::RayStopping
        && last.status == InstanceStatus::RayStopping
        && entered_drain_from_outside(prev.status))
    .then_some(last.timestamp_ns)
}

/// Whether RAY_STOPPING entered from `prev` is a drain rayscale did not ask for.
pub(crate) fn entered_drain_from_outside(prev: InstanceStatus) -> bool {
    matches!(prev, InstanceStatus::RayRunning | InstanceStatus::Allocated)
}

/// What is in use on a node: its total less what is available, per resource (the
/// `node:` markers left out).
pub(crate) fn in_use(n: &crate::model::NodeState) -> ResourceMap {
    ResourceMap(
        n.total_resources
            .0
            .iter()
            .filter(|(k, _)| !k.starts_with("node:"))
            .filter_map(|(k, total)| {
                let free = n.available_resources.get(k).unwrap_or(0).max(0);
                let used = total.saturating_sub(free);
                (used > 0).then(|| (k.clone(), used))
            })
            .collect(),
    )
}

impl<S: InstanceStorage> Run<'_, S> {
    /// The nodes drained from outside: marks the offerings of new notices, terminates
    /// those past their deadline, lists the rest in the outcome, and returns the demand
    /// their work makes.
    pub(super) fn drained_outside(
        &mut self,
        obs: Observed<'_>,
        unreadable: &Unreadable,
    ) -> Result<Vec<ResourceRequestByCount>, CoreError> {
        let now = self.now_ns;
        let table = self.table()?;
        let draining: Vec<&Arc<Instance>> = table
            .iter()
            .filter(|i| i.status == InstanceStatus::RayStopping && !i.is_head)
            .filter(|i| !unreadable.holds(i))
            .collect();
        if draining.is_empty() {
            return Ok(Vec::new());
        }
        let mut nodes: HashMap<String, &crate::model::NodeState> = HashMap::new();
        for n in &obs.ray.node_states {
            if n.status == Some(NodeStatus::Draining) {
                nodes.insert(n.node_id_hex(), n);
            }
        }
        let mut events = Vec::new();
        let mut demand = Vec::new();
        for i in draining {
            let Some(since) = drained_outside_since(i) else {
                continue;
            };
            let cid = i.cloud_instance_id.clone().unwrap_or_default();
            let notice = obs
                .notices
                .iter()
                .find(|n| !cid.is_empty() && n.cloud_instance_id == cid)
                .cloned();
            let zone = obs
                .cloud
                .iter()
                .find(|c| c.cloud_instance_id == cid)
                .and_then(|c| c.zone.clone());
            let new = since == now;
            if new && let Some(n) = &notice {
                // The cloud takes instances back where it is short: the next launch of
                // the type goes to another zone, or (no zone known) another type.
                self.avail.unavailable.mark(
                    &i.node_type,
                    zone.as_deref(),
                    &format!("preempted ({})", n.describe()),
                    now,
                );
            }
            if let Some(d) = notice.as_ref().and_then(|n| n.deadline_ns)
                && now >= d.saturating_add(DEADLINE_GRACE_S.saturating_mul(SEC))
            {
                events.push(Self::ev(
                    i,
                    InstanceStatus::Terminating,
                    format!("still there {DEADLINE_GRACE_S}s past its preemption deadline"),
                ));
                continue;
            }
            let used = i
                .node_id
                .as_deref()
                .and_then(|n| nodes.get(n))
                .map(|n| in_use(n))
                .unwrap_or_default();
            if !used.is_empty() {
                demand.push(ResourceRequestByCount {
                    request: crate::model::ResourceRequest {
                        resources: used.clone(),
                        ..Default::default()
                    },
                    count: 1,
                });
            }
            self.out.drained_outside.push(DrainedOutside {
                instance_id: i.instance_id.clone(),
                cloud_instance_id: cid,
                node_type: i.node_type.clone(),
                zone,
                node_id_hex: i.node_id.clone().unwrap_or_default(),
                notice,
                in_use: used,
                new,
                since_ns: since,
            });
        }
        self.apply(events)?;
        Ok(demand)
    }
}
