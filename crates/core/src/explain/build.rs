//! [`explain`]: the reasons of one iteration, from what the scheduler was asked and
//! answered, the table after pacing and the availability.

use std::borrow::Cow;
use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};

use crate::availability::Unavailable;
use crate::config::ClusterConfig;
use crate::instance::Instance;
use crate::model::resources::to_f64;
use crate::model::{InstanceStatus, ResourceMap, ResourceRequest};
use crate::scheduler::{Decision, NodeFate, NodeView, SchedulingRequest};

use super::{
    BUSY_KEY, DemandGroup, DemandKind, DemandReason, Explanation, Hold, MAX_EXAMPLES, MAX_GROUPS,
    NodeGroup, NodeReason, Shape, StopHold,
};

/// The launch holds of this iteration's pacing, by node type.
pub type Holds = BTreeMap<String, Hold>;

/// Launches the cost cap refused, by node type: (launches kept, hourly cost, cap).
pub type CostCapped = BTreeMap<String, (u64, f64, f64)>;

/// What one iteration's reasons are read from.
pub struct Inputs<'a> {
    /// The config.
    pub config: &'a ClusterConfig,
    /// What the scheduler was asked.
    pub request: &'a SchedulingRequest,
    /// Its decision.
    pub decision: &'a Decision,
    /// Every node of the resulting cluster, with the demand placed on it.
    pub nodes: &'a [NodeView],
    /// The instance table after pacing.
    pub table: &'a [&'a Instance],
    /// Pacing's holds.
    pub holds: &'a Holds,
    /// The unavailable (type, zone) entries in force.
    pub unavailable: &'a [&'a Unavailable],
    /// Drains the GCS refused since the last iteration: (instance id, reason).
    pub drain_rejections: &'a [(String, String)],
    /// Voluntary stops the operator's limits held: (instance id, cause, hold).
    pub held_stops: &'a [(String, String, StopHold)],
    /// Launches the cost cap refused.
    pub cost_capped: &'a CostCapped,
    /// Now (ns since the epoch).
    pub now_ns: i64,
}

fn shape_of(r: &ResourceMap) -> BTreeMap<String, f64> {
    r.iter()
        .filter(|(k, _)| !k.starts_with("node:"))
        .map(|(k, v)| (k.to_string(), to_f64(v)))
        .collect()
}

/// Demand grouped by (kind, reason): counts and shapes.
#[derive(Default)]
struct DemandAcc {
    groups: BTreeMap<String, (DemandGroup, BTreeMap<String, Shape>)>,
}

impl DemandAcc {
    fn add(&mut self, kind: DemandKind, reason: DemandReason, shape: &ResourceMap, n: u64) {
        self.add_many(kind, reason, std::iter::once((shape, n)), n);
    }

    fn add_many<'r>(
        &mut self,
        kind: DemandKind,
        reason: DemandReason,
        shapes: impl Iterator<Item = (&'r ResourceMap, u64)>,
        count: u64,
    ) {
        let key = format!(
            "{kind:?}/{}",
            serde_json::to_string(&reason).unwrap_or_default()
        );
        let (g, by_shape) = self.groups.entry(key).or_insert_with(|| {
            (
                DemandGroup {
                    kind,
                    reason,
                    count: 0,
                    shapes: Vec::new(),
                },
                BTreeMap::new(),
            )
        });
        g.count = g.count.saturating_add(count);
        for (shape, n) in shapes {
            let resources = shape_of(shape);
            let s = by_shape
                .entry(format!("{resources:?}"))
                .or_insert_with(|| Shape {
                    resources,
                    count: 0,
                });
            s.count = s.count.saturating_add(n);
        }
    }

    fn finish(self) -> Vec<DemandGroup> {
        self.groups
            .into_values()
            .map(|(mut g, by_shape)| {
                let mut shapes: Vec<Shape> = by_shape.into_values().collect();
                shapes.sort_by_key(|s| std::cmp::Reverse(s.count));
                shapes.truncate(MAX_EXAMPLES);
                g.shapes = shapes;
                g
            })
            .collect()
    }
}

/// Whether a node type of `total` holds `shape`.
fn holds(total: &ResourceMap, shape: &ResourceMap) -> bool {
    shape
        .iter()
        .all(|(k, v)| v <= 0 || total.get(k).is_some_and(|t| t >= v))
}

/// What `total` lacks of `shape`: (resource, asked, has).
fn lacks(total: &ResourceMap, shape: &ResourceMap) -> Vec<(String, f64, f64)> {
    shape
        .iter()
        .filter(|(k, v)| *v > 0 && total.get(k).is_none_or(|t| t < *v))
        .map(|(k, v)| (k.to_string(), to_f64(v), to_f64(total.get(k).unwrap_or(0))))
        .collect()
}

/// The reasons of one iteration (see the module docs).
pub fn explain<'a>(x: &Inputs<'a>) -> Explanation {
    let head = x.request.head_node_type.as_deref();
    let workers: Vec<_> = x
        .request
        .node_types
        .iter()
        .filter(|t| Some(t.name.as_str()) != head)
        .collect();
    // Worker nodes of the resulting cluster per type (the scheduler's own count).
    let mut count: HashMap<&str, u64> = HashMap::new();
    let mut total_workers = 0u64;
    for n in x.nodes {
        let is_head = n
            .instance
            .and_then(|i| x.request.instances.get(i))
            .is_some_and(|i| i.is_head);
        if n.fate != NodeFate::Terminate && !is_head {
            *count.entry(n.node_type.as_str()).or_default() += 1;
            total_workers += 1;
        }
    }
    let unavailable = |t: &str| {
        x.unavailable
            .iter()
            .find(|u| u.node_type == t && u.zone.is_none())
    };
    // Why a shape nothing placed is pending.
    let classify = |r: &ResourceRequest| -> DemandReason {
        let fitting: Vec<_> = workers
            .iter()
            .filter(|t| holds(&t.resources, &r.resources))
            .collect();
        if fitting.is_empty() {
            let closest = workers
                .iter()
                .map(|t| (lacks(&t.resources, &r.resources), t.name.clone()))
                .min_by_key(|(l, _)| l.len());
            return match closest {
                Some((missing, t)) => DemandReason::NoTypeFits {
                    closest: Some(t),
                    missing,
                },
                None => DemandReason::NoTypeFits {
                    closest: None,
                    missing: Vec::new(),
                },
            };
        }
        // The cluster's limit binds whatever the types' are.
        if let Some(max) = x.config.max_workers
            && total_workers >= max
        {
            return DemandReason::ClusterAtMax { max_workers: max };
        }
        let open = fitting.iter().any(|t| {
            unavailable(&t.name).is_none()
                && !x.request.unavailable_node_types.contains(&t.name)
                && t.max_workers
                    .is_none_or(|m| count.get(t.name.as_str()).copied().unwrap_or(0) < m)
        });
        if open {
            return DemandReason::ConstraintsUnmet;
        }
        let first = fitting[0];
        match unavailable(&first.name) {
            Some(u) => DemandReason::Unavailable {
                node_type: first.name.clone(),
                until_ns: u.until_ns,
                error: u.reason.clone(),
            },
            // Known only by name (a scenario's `unavailable_node_types`).
            None if x.request.unavailable_node_types.contains(&first.name) => {
                DemandReason::Unavailable {
                    node_type: first.name.clone(),
                    until_ns: 0,
                    error: String::new(),
                }
            }
            None => DemandReason::TypeAtMax {
                node_type: first.name.clone(),
                max_workers: first.max_workers.unwrap_or(0),
            },
        }
    };
    let mut demand = DemandAcc::default();
    for (r, n) in &x.decision.infeasible_requests {
        demand.add(DemandKind::Task, classify(r), &r.resources, *n);
    }
    for &g in &x.decision.infeasible_gang_requests {
        let Some(gang) = x.request.gang_requests.get(g) else {
            continue;
        };
        let bundles = gang.effective_requests();
        // The bundle that fits no type says most; else the largest one.
        let worst = bundles
            .iter()
            .find(|b| matches!(classify(b), DemandReason::NoTypeFits { .. }))
            .or_else(|| {
                bundles
                    .iter()
                    .max_by_key(|b| b.resources.iter().map(|(_, v)| v).sum::<i128>())
            });
        let Some(worst) = worst else { continue };
        demand.add_many(
            DemandKind::PlacementGroup,
            classify(worst),
            bundles.iter().map(|b| (&b.resources, 1)),
            1,
        );
    }
    for &c in &x.decision.infeasible_constraints {
        let Some(c) = x.request.cluster_constraints.get(c) else {
            continue;
        };
        for r in &c.resource_requests {
            demand.add(
                DemandKind::Request,
                classify(&r.request),
                &r.request.resources,
                r.count,
            );
        }
    }
    // Demand placed on nodes not running yet waits for them; on queued ones held back
    // by pacing, for pacing.
    let queued: HashMap<&str, u64> = x
        .table
        .iter()
        .filter(|i| i.status == InstanceStatus::Queued)
        .fold(HashMap::new(), |mut m, i| {
            *m.entry(i.node_type.as_str()).or_default() += 1;
            m
        });
    let mut waiting: BTreeMap<&str, Vec<&NodeView>> = BTreeMap::new();
    // Demand placed on running nodes, summed by shape first (a busy cluster places the
    // same few shapes on thousands of nodes). Exact: groups and shapes are keyed maps
    // whose counts are saturating sums, so neither the order nor the summing shows.
    let mut on_running: HashMap<&ResourceMap, u64> = HashMap::new();
    for n in x.nodes.iter().filter(|n| !n.placed.is_empty()) {
        let status = n
            .instance
            .and_then(|i| x.request.instances.get(i))
            .map(|i| i.status);
        match (n.fate, status) {
            (NodeFate::Terminate, _) => {}
            (_, Some(InstanceStatus::RayRunning)) => {
                for (r, k) in &n.placed {
                    let e = on_running.entry(&r.resources).or_default();
                    *e = e.saturating_add(*k);
                }
            }
            _ => waiting.entry(n.node_type.as_str()).or_default().push(n),
        }
    }
    for (r, k) in on_running {
        demand.add(DemandKind::Task, DemandReason::FitsRunningNodes, r, k);
    }
    for (t, mut list) in waiting {
        // New nodes past those the cost cap let through were not launched.
        if let Some(&(kept, cost, cap)) = x.cost_capped.get(t) {
            let mut new_seen = 0u64;
            let mut refused = Vec::new();
            list.retain(|n| {
                if n.fate != NodeFate::Launch {
                    return true;
                }
                new_seen += 1;
                if new_seen <= kept {
                    return true;
                }
                refused.push(*n);
                false
            });
            let reason = DemandReason::CostCap {
                node_type: t.to_string(),
                hourly_cost: cost,
                max_hourly_cost: cap,
            };
            for n in refused {
                for (r, k) in &n.placed {
                    demand.add(DemandKind::Task, reason.clone(), &r.resources, *k);
                }
            }
            if list.is_empty() {
                continue;
            }
        }
        let reason = match x.holds.get(t) {
            Some(hold) => DemandReason::Paced {
                node_type: t.to_string(),
                queued: queued.get(t).copied().unwrap_or(0),
                hold: hold.clone(),
            },
            None => DemandReason::WaitingForLaunch {
                node_type: t.to_string(),
                nodes: list.len() as u64,
            },
        };
        for n in list {
            for (r, k) in &n.placed {
                demand.add(DemandKind::Task, reason.clone(), &r.resources, *k);
            }
        }
    }
    let mut demand = demand.finish();
    demand.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));

    // Nodes, grouped by (type, reason key); nothing is allocated for a node that joins
    // a group but its example id.
    let mut nodes: BTreeMap<(&str, Cow<'static, str>), NodeGroup> = BTreeMap::new();
    fn group<'m, 't>(
        nodes: &'m mut BTreeMap<(&'t str, Cow<'static, str>), NodeGroup>,
        node_type: &'t str,
        key: Cow<'static, str>,
        reason: impl FnOnce() -> NodeReason,
        id: &str,
    ) -> (&'m mut NodeGroup, bool) {
        let g = nodes.entry((node_type, key)).or_insert_with(|| NodeGroup {
            node_type: node_type.to_string(),
            reason: reason(),
            count: 0,
            examples: Vec::new(),
        });
        let first = g.count == 0;
        g.count += 1;
        if g.examples.len() < MAX_EXAMPLES {
            g.examples.push(id.to_string());
        }
        (g, first)
    }
    let add = |nodes: &mut BTreeMap<(&'a str, Cow<'static, str>), NodeGroup>,
               node_type: &'a str,
               reason: NodeReason,
               id: &str| {
        let key = reason.key();
        let (g, first) = group(nodes, node_type, key, || reason.clone(), id);
        if !first {
            g.reason.absorb(&reason);
        }
    };
    // A busy node's resources in use (its total less what is available, `node:` ones
    // left out), summed into its group.
    let mut in_use: Vec<(&str, f64)> = Vec::new();
    let held: HashMap<&str, (&str, &StopHold)> = x
        .held_stops
        .iter()
        .map(|(i, c, h)| (i.as_str(), (c.as_str(), h)))
        .collect();
    let rejected: HashMap<&str, &str> = x
        .drain_rejections
        .iter()
        .map(|(i, r)| (i.as_str(), r.as_str()))
        .collect();
    let stopping: HashMap<&str, &str> = x
        .decision
        .terminate
        .iter()
        .map(|t| (t.instance_id.as_str(), t.cause.name()))
        .collect();
    // The pass's node of each instance, made only when an idle node's reason needs it.
    let mut views: Option<HashMap<&str, &NodeView>> = None;
    let views_of =
        |views: &mut Option<HashMap<&'a str, &'a NodeView>>| -> HashMap<&'a str, &'a NodeView> {
            views.take().unwrap_or_else(|| {
                x.nodes
                    .iter()
                    .filter_map(|n| {
                        let i = x.request.instances.get(n.instance?)?;
                        Some((i.instance_id.as_str(), n))
                    })
                    .collect()
            })
        };
    let inputs: HashMap<&str, &crate::scheduler::InstanceInput> = x
        .request
        .instances
        .iter()
        .map(|i| (i.instance_id.as_str(), i))
        .collect();
    // Busy nodes, per type in the order met: their count, first ids and resources in use
    // (summed in node order), made into groups at the end.
    let mut busy: Vec<BusyNodes<'a>> = Vec::new();
    for i in x.table.iter() {
        let id = i.instance_id.as_str();
        let input = inputs.get(id);
        if i.is_head || input.is_some_and(|n| n.is_head) {
            continue;
        }
        let t = i.node_type.as_str();
        if let Some(reason) = rejected.get(id) {
            add(
                &mut nodes,
                t,
                NodeReason::DrainRejected {
                    why: reason.to_string(),
                },
                id,
            );
            continue;
        }
        if let Some((cause, hold)) = held.get(id) {
            add(
                &mut nodes,
                t,
                NodeReason::StopHeld {
                    cause: cause.to_string(),
                    hold: (*hold).clone(),
                },
                id,
            );
            continue;
        }
        if let Some(cause) = stopping.get(id) {
            add(
                &mut nodes,
                t,
                NodeReason::Stopping {
                    cause: cause.to_string(),
                },
                id,
            );
            continue;
        }
        match i.status {
            InstanceStatus::Queued
            | InstanceStatus::Requested
            | InstanceStatus::Allocated
            | InstanceStatus::RayInstalling => {
                add(
                    &mut nodes,
                    t,
                    NodeReason::Launching {
                        status: i.status.name().to_string(),
                    },
                    id,
                );
            }
            InstanceStatus::RayStopRequested
            | InstanceStatus::RayStopping
            | InstanceStatus::RayStopped
            | InstanceStatus::Terminating => {
                let cause = i
                    .stop_cause
                    .clone()
                    .unwrap_or_else(|| i.status.name().to_string());
                add(&mut nodes, t, NodeReason::Stopping { cause }, id);
            }
            InstanceStatus::RayRunning => {
                let Some(node) = input.and_then(|n| n.ray_node.as_ref()) else {
                    continue;
                };
                in_use.clear();
                in_use.extend(
                    node.total
                        .iter()
                        .filter(|(k, _)| !k.starts_with("node:"))
                        .map(|(k, v)| {
                            let free = node.available.get(k).map_or(0.0, to_f64);
                            (k, to_f64(v) - free)
                        })
                        .filter(|(_, v)| *v > 0.0),
                );
                if !in_use.is_empty() || node.idle_duration_ms <= 0 {
                    let b = match busy.iter().position(|b| b.node_type == t) {
                        Some(b) => &mut busy[b],
                        None => {
                            busy.push(BusyNodes {
                                node_type: t,
                                count: 0,
                                examples: Vec::new(),
                                in_use: Vec::new(),
                            });
                            let last = busy.len() - 1;
                            &mut busy[last]
                        }
                    };
                    b.count += 1;
                    if b.examples.len() < MAX_EXAMPLES {
                        b.examples.push(id.to_string());
                    }
                    for &(k, v) in &in_use {
                        match b.in_use.iter_mut().find(|(n, _)| *n == k) {
                            Some((_, s)) => *s += v,
                            None => b.in_use.push((k, v)),
                        }
                    }
                    continue;
                }
                let timeout = x
                    .config
                    .node_type(t)
                    .and_then(|c| c.idle_timeout_s)
                    .or(x.request.idle_timeout_s);
                let idle_s = (node.idle_duration_ms / 1000).max(0) as u64;
                let reason = match timeout {
                    None => NodeReason::IdleNoTimeout,
                    Some(s) if (idle_s as f64) < s => NodeReason::Idle {
                        longest_s: idle_s,
                        timeout_s: s.max(0.0) as u64,
                    },
                    Some(_) => {
                        let v = views_of(&mut views);
                        let view = v.get(id).copied();
                        views = Some(v);
                        if view.is_some_and(|v| !v.placed.is_empty()) {
                            NodeReason::KeptForDemand
                        } else if view.is_some_and(|v| !v.placed_constraint.is_empty()) {
                            NodeReason::KeptForRequest
                        } else {
                            NodeReason::KeptForMinWorkers {
                                min_workers: x.config.node_type(t).map_or(0, |c| c.min_workers),
                            }
                        }
                    }
                };
                add(&mut nodes, t, reason, id);
            }
            _ => {}
        }
    }
    for b in busy {
        let reason = NodeReason::Busy {
            in_use: b.in_use.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        };
        nodes.insert(
            (b.node_type, BUSY_KEY.into()),
            NodeGroup {
                node_type: b.node_type.to_string(),
                reason,
                count: b.count,
                examples: b.examples,
            },
        );
    }
    let mut nodes: Vec<NodeGroup> = nodes.into_values().collect();
    nodes.sort_by_key(|g| std::cmp::Reverse(g.count));
    let left = demand.len().saturating_sub(MAX_GROUPS) + nodes.len().saturating_sub(MAX_GROUPS);
    demand.truncate(MAX_GROUPS);
    nodes.truncate(MAX_GROUPS);
    Explanation {
        at_ns: x.now_ns,
        demand,
        nodes,
        groups_left_out: left as u64,
    }
}

/// Busy nodes of one type, as `explain` sums them.
struct BusyNodes<'a> {
    node_type: &'a str,
    count: u64,
    examples: Vec<String>,
    in_use: Vec<(&'a str, f64)>,
}

/// The reasons of one scheduling pass on a snapshot (`plan --why`, `rayscale explain`):
/// `request` as built from it, `records` its instances. A snapshot has no pacing and
/// knows unavailable types only by name, so no launch shows as paced and an unavailable
/// type has no window.
pub fn of_snapshot(
    config: &ClusterConfig,
    request: &SchedulingRequest,
    records: &[crate::scheduler::request::InstanceRecord],
    chain: &mut crate::expander::ExpanderChain,
    now_ns: i64,
) -> (Decision, Explanation) {
    let (decision, views) = crate::scheduler::schedule_with_explained(request, chain);
    let table: Vec<Instance> = records
        .iter()
        .map(|r| {
            let mut i = Instance::new(&r.instance_id, &r.node_type, r.status, now_ns, "");
            i.cloud_instance_id = r.cloud_instance_id.clone();
            i
        })
        .collect();
    let refs: Vec<&Instance> = table.iter().collect();
    let e = explain(&Inputs {
        config,
        request,
        decision: &decision,
        nodes: &views,
        table: &refs,
        holds: &Holds::new(),
        unavailable: &[],
        drain_rejections: &[],
        held_stops: &[],
        cost_capped: &CostCapped::new(),
        now_ns,
    });
    (decision, e)
}
