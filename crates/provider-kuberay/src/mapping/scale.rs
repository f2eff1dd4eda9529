//! Scale changes as JSON patches of the RayCluster (pure): launches recorded in the launch
//! ledger, deletions through `workersToDelete`, each guarded by the `resourceVersion`.

use std::collections::{BTreeMap, BTreeSet};

use rayscale_core::provider::NodeKind;
use serde_json::{Value, json};

use super::{Group, LEDGER_ANNOTATION, LEDGER_KEEP, PodView, groups};

/// The launch ledger of a RayCluster: the requests applied (request id -> replicas it
/// added), oldest first, and the time (s) of the newest request dropped from it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ledger {
    /// Requests applied, oldest first.
    pub entries: Vec<(String, u64)>,
    /// The time (s since the epoch, from its id) of the newest request dropped; a request
    /// of that time or older may have been applied and is not applied again.
    #[serde(default)]
    pub floor: u64,
}

/// The launch ledger of a RayCluster (the former form, a bare list, is read too; what
/// does not parse is an empty ledger).
pub fn ledger(rc: &Value) -> Ledger {
    let Some(text) = rc
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LEDGER_ANNOTATION))
        .and_then(Value::as_str)
    else {
        return Ledger::default();
    };
    serde_json::from_str::<Ledger>(text)
        .or_else(|_| {
            serde_json::from_str::<Vec<(String, u64)>>(text)
                .map(|entries| Ledger { entries, floor: 0 })
        })
        .unwrap_or_default()
}

/// The time (s since the epoch) a launch request was made, from its id: the reconciler's
/// ids are `lr-` and 16 hex digits, the first 8 the time. `None` for other ids.
pub fn request_time_s(request_id: &str) -> Option<u64> {
    let hex = request_id.strip_prefix("lr-")?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex.get(..8)?, 16).ok()
}

/// What the pods say about deletions, per group.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Every pod name listed, those being deleted included.
    pub existing: BTreeSet<String>,
    /// Live (not being deleted) worker pods per group.
    pub workers: BTreeMap<String, BTreeSet<String>>,
    /// Head pod names.
    pub heads: BTreeSet<String>,
}

impl Observed {
    /// From a pod list.
    pub fn from_views(views: &[PodView]) -> Self {
        let mut o = Observed::default();
        for v in views {
            o.existing.insert(v.name.clone());
            match v.kind {
                Some(NodeKind::Head) => {
                    o.heads.insert(v.name.clone());
                }
                Some(NodeKind::Worker) if !v.deleting => {
                    o.workers
                        .entry(v.group.clone())
                        .or_default()
                        .insert(v.name.clone());
                }
                _ => {}
            }
        }
        o
    }

    /// Names of `group`'s `workersToDelete` that still exist (its deletes pending).
    pub fn pending_deletes<'a>(&self, group: &'a Group) -> Vec<&'a str> {
        group
            .to_delete
            .iter()
            .filter(|n| self.existing.contains(*n))
            .map(String::as_str)
            .collect()
    }
}

/// JSON-pointer escaping of one path segment (RFC 6901).
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The guard every patch starts with: the RayCluster is still the version read. The
/// patch sets `metadata.resourceVersion` to the version read, which the API server checks
/// as an optimistic-concurrency precondition after applying the patch: a concurrent edit
/// answers 409 Conflict ("Patch operations" and "Concurrency control" in the API
/// concepts). A JSON-patch `test` of the version would be refused too, but as a 422 whose
/// message does not say why, indistinguishable from a wrong patch.
pub fn guard(rc: &Value) -> Value {
    json!({
        "op": "replace",
        "path": "/metadata/resourceVersion",
        "value": rc.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
    })
}

/// The result of planning a launch.
#[derive(Debug, Clone, PartialEq)]
pub enum LaunchPlan {
    /// The request was applied before (it is in the ledger): nothing to do.
    Replayed,
    /// The request is older than what the ledger remembers: it may have been applied,
    /// so it is not applied again (its records fail, and the demand is launched anew).
    Expired,
    /// Patch the RayCluster with `patch`; `rejected` nodes are over `maxReplicas`.
    Patch {
        /// The JSON patch (guard first).
        patch: Vec<Value>,
        /// Nodes of the request that `maxReplicas` leaves out.
        rejected: u64,
        /// The group's replicas after the patch.
        replicas: u64,
    },
    /// Nothing can be added: every node is over `maxReplicas`.
    Capped,
}

/// Plans a launch of `count` nodes of `group_name` for `request_id`: replicas become
/// max(replicas, minReplicas, live workers) + the request (in replicas of `numOfHosts`
/// pods), capped at `maxReplicas`; the ledger records the request in the same patch.
pub fn plan_launch(
    rc: &Value,
    obs: &Observed,
    group: &Group,
    request_id: &str,
    count: u64,
) -> LaunchPlan {
    let mut ledger = ledger(rc);
    if ledger.entries.iter().any(|(r, _)| r == request_id) {
        return LaunchPlan::Replayed;
    }
    if ledger.floor > 0 && request_time_s(request_id).is_some_and(|t| t <= ledger.floor) {
        return LaunchPlan::Expired;
    }
    let live = obs.workers.get(&group.name).map_or(0, |w| {
        w.iter()
            .filter(|n| !group.to_delete.iter().any(|d| d == *n))
            .count() as u64
    });
    // In nodes, as Ray: max(replicas, minReplicas) x numOfHosts, or the live workers when
    // more, plus the request; back to replicas rounding down (Ray's `//`), so a request
    // never makes more than its count.
    let nodes = (group.replicas.max(group.min_replicas) * group.hosts).max(live) + count;
    let want = nodes / group.hosts;
    let target = group.max_replicas.map_or(want, |m| want.min(m));
    let rejected = ((want - target) * group.hosts).min(count);
    if count > 0 && target <= group.replicas && rejected >= count {
        return LaunchPlan::Capped;
    }
    ledger.entries.push((
        request_id.to_string(),
        target.saturating_sub(group.replicas),
    ));
    let drop = ledger.entries.len().saturating_sub(LEDGER_KEEP);
    for (r, _) in ledger.entries.drain(..drop) {
        // A dropped id without a time (not the reconciler's) cannot raise the floor.
        if let Some(t) = request_time_s(&r) {
            ledger.floor = ledger.floor.max(t);
        }
    }
    let mut patch = vec![guard(rc)];
    if target != group.replicas {
        patch.push(json!({
            "op": if has_field(rc, group.index, "replicas") { "replace" } else { "add" },
            "path": format!("/spec/workerGroupSpecs/{}/replicas", group.index),
            "value": target,
        }));
    }
    patch.extend(ledger_ops(rc, &ledger));
    LaunchPlan::Patch {
        patch,
        rejected,
        replicas: target,
    }
}

fn has_field(rc: &Value, index: usize, field: &str) -> bool {
    rc.pointer(&format!("/spec/workerGroupSpecs/{index}/{field}"))
        .is_some()
}

fn ledger_ops(rc: &Value, ledger: &Ledger) -> Vec<Value> {
    let text = serde_json::to_string(ledger).unwrap_or_else(|_| "{}".into());
    let mut ops = Vec::new();
    if rc
        .pointer("/metadata/annotations")
        .is_none_or(Value::is_null)
    {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    ops.push(json!({
        "op": "add",
        "path": format!("/metadata/annotations/{}", escape(LEDGER_ANNOTATION)),
        "value": text,
    }));
    ops
}

/// Plans the deletion of `names` (worker pods of `group` that exist and are not yet
/// listed): each is added to `workersToDelete` and takes one from the node count, as
/// Ray's `_initialize_scale_request` does; names already listed or gone change nothing.
pub fn plan_delete(
    rc: &Value,
    obs: &Observed,
    group: &Group,
    names: &[String],
) -> Option<Vec<Value>> {
    let new: Vec<&String> = names
        .iter()
        .filter(|n| !group.to_delete.contains(n))
        .filter(|n| obs.workers.get(&group.name).is_some_and(|w| w.contains(*n)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if new.is_empty() {
        return None;
    }
    let live = obs.workers.get(&group.name).map_or(0, |w| {
        w.iter()
            .filter(|n| !group.to_delete.iter().any(|d| d == *n))
            .count() as u64
    });
    let nodes = (group.replicas.max(group.min_replicas) * group.hosts).max(live);
    let target = nodes.saturating_sub(new.len() as u64) / group.hosts;
    // Keep the names still pending; drop those already gone (cleared as we go).
    let mut list: Vec<String> = group
        .to_delete
        .iter()
        .filter(|n| obs.existing.contains(*n))
        .cloned()
        .collect();
    list.extend(new.into_iter().cloned());
    let mut patch = vec![guard(rc)];
    patch.push(json!({
        "op": if has_field(rc, group.index, "replicas") { "replace" } else { "add" },
        "path": format!("/spec/workerGroupSpecs/{}/replicas", group.index),
        "value": target,
    }));
    patch.push(strategy_op(rc, group.index, &list));
    Some(patch)
}

fn strategy_op(rc: &Value, index: usize, list: &[String]) -> Value {
    if has_field(rc, index, "scaleStrategy") {
        json!({
            "op": "add",
            "path": format!("/spec/workerGroupSpecs/{index}/scaleStrategy/workersToDelete"),
            "value": list,
        })
    } else {
        json!({
            "op": "add",
            "path": format!("/spec/workerGroupSpecs/{index}/scaleStrategy"),
            "value": {"workersToDelete": list},
        })
    }
}

/// The patch clearing each group's `workersToDelete` whose pods are all gone (`None`
/// when no group needs it).
pub fn plan_clear(rc: &Value, obs: &Observed) -> Option<Vec<Value>> {
    let mut patch = vec![guard(rc)];
    for g in groups(rc) {
        if !g.to_delete.is_empty() && obs.pending_deletes(&g).is_empty() {
            patch.push(strategy_op(rc, g.index, &[]));
        }
    }
    (patch.len() > 1).then_some(patch)
}
