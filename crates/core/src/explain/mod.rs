//! Why: the reasons behind one iteration's decision, as data. For each pending demand
//! shape that is not placed, or waits, and for each worker node that is kept or goes, a
//! reason (an enum with its details: which resource is missing, which limit, until when),
//! grouped and counted into a bounded [`Explanation`] that the driver stores in the GCS
//! KV, `rayscale status --why` prints, metrics and the event log count.
//!
//! Explaining never changes a decision: [`explain`] is a pure function of what the
//! scheduler was asked and answered, the instance table after pacing and the
//! availability, called after the decision is made.

mod build;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::preemption::hms_utc as clock;

pub use build::{CostCapped, Holds, Inputs, explain, of_snapshot};

/// The KV key (in rayscale's namespace, the driver's `NAMESPACE`) of the explanation the
/// active rayscale of `cluster` stored last.
pub fn why_key(cluster: &str) -> String {
    format!("why/{cluster}")
}

/// At most this many demand groups and node groups each are kept (largest first).
pub const MAX_GROUPS: usize = 50;

/// At most this many example shapes or instances per group.
pub const MAX_EXAMPLES: usize = 5;

/// Why a launch of a node type waits in the queue this iteration (pacing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hold", rename_all = "snake_case")]
pub enum Hold {
    /// The type failed to launch and waits before it is tried again.
    Backoff {
        /// Launch failures within the window.
        failures: u32,
        /// When it is tried again (ns since the epoch).
        until_ns: i64,
    },
    /// `max_concurrent_launches` requests are in flight.
    Concurrency {
        /// Launch requests in flight.
        in_flight: u64,
        /// The limit.
        max: u64,
    },
    /// `upscaling_speed` allows this many per iteration for the type.
    Speed {
        /// Launches allowed this iteration.
        per_iteration: u64,
        /// The setting.
        upscaling_speed: f64,
    },
}

/// Why a voluntary stop (idle, outdated) waits: the operator's limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum StopHold {
    /// `max_draining` nodes (of the cluster, or of `node_type`) are draining.
    Draining {
        /// Whose budget: a node type, or none for the cluster's.
        node_type: Option<String>,
        /// Draining now.
        draining: u64,
        /// The budget.
        max: u64,
    },
    /// `max_stops` voluntary stops started within the window.
    Stops {
        /// Whose budget: a node type, or none for the cluster's.
        node_type: Option<String>,
        /// The budget.
        max: u64,
        /// The window (s).
        window_s: u64,
    },
    /// Inside a window in which no voluntary stop starts.
    Blocked {
        /// The window as configured.
        window: String,
    },
    /// `scale_down_delay_after_launch_s` after the last launch.
    DelayAfterLaunch {
        /// When it ends (ns since the epoch).
        until_ns: i64,
    },
    /// `min_node_lifetime_s` after the node came up.
    MinLifetime {
        /// When it ends (ns since the epoch).
        until_ns: i64,
    },
}

impl StopHold {
    fn line(&self) -> String {
        let whose = |t: &Option<String>| match t {
            Some(t) => format!("node type {t}'s"),
            None => "the cluster's".to_string(),
        };
        match self {
            StopHold::Draining {
                node_type,
                draining,
                max,
            } => format!(
                "{draining} draining, {} max_draining is {max}",
                whose(node_type)
            ),
            StopHold::Stops {
                node_type,
                max,
                window_s,
            } => format!(
                "{} max_stops of {max} per {window_s} s is used up",
                whose(node_type)
            ),
            StopHold::Blocked { window } => format!("no voluntary stops in {window}"),
            StopHold::DelayAfterLaunch { until_ns } => format!(
                "scale_down_delay_after_launch_s, until {}",
                clock(*until_ns)
            ),
            StopHold::MinLifetime { until_ns } => {
                format!("min_node_lifetime_s, until {}", clock(*until_ns))
            }
        }
    }
}

/// Why demand is pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum DemandReason {
    /// No node type has these resources, even empty. `missing`: (resource, asked, what
    /// the closest type has) for each resource the closest type lacks.
    NoTypeFits {
        /// The type that lacks the fewest resources (none when no worker type exists).
        closest: Option<String>,
        /// What it lacks.
        missing: Vec<(String, f64, f64)>,
    },
    /// The types it fits are at their `max_workers`.
    TypeAtMax {
        /// The first such type (config order).
        node_type: String,
        /// Its `max_workers`.
        max_workers: u64,
    },
    /// The cluster is at its `max_workers`.
    ClusterAtMax {
        /// The global `max_workers`.
        max_workers: u64,
    },
    /// The types it fits had capacity errors (or every zone of them did).
    Unavailable {
        /// The first such type (config order).
        node_type: String,
        /// When it is tried again (ns since the epoch).
        until_ns: i64,
        /// The cloud's error.
        error: String,
    },
    /// Placed on nodes of a type being launched; it waits for them to come up.
    WaitingForLaunch {
        /// The type.
        node_type: String,
        /// The nodes it waits for.
        nodes: u64,
    },
    /// Placed on new nodes of a type whose launch is held back this iteration.
    Paced {
        /// The type.
        node_type: String,
        /// Its instances still queued.
        queued: u64,
        /// Why.
        #[serde(flatten)]
        hold: Hold,
    },
    /// There is room for it on running nodes (Ray places it as resources free up).
    FitsRunningNodes,
    /// Its launch would take the cluster's hourly cost over `max_hourly_cost`.
    CostCap {
        /// The type not launched.
        node_type: String,
        /// The running and pending cost per hour.
        hourly_cost: f64,
        /// The cap.
        max_hourly_cost: f64,
    },
    /// Fits a type that is open, yet was not placed: its label selectors or placement
    /// constraints (a placement group's strategy) are not met.
    ConstraintsUnmet,
}

/// Which kind of demand a group counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DemandKind {
    /// Tasks and actors (counted by request).
    Task,
    /// Placement groups (counted by group; shapes are its bundles).
    PlacementGroup,
    /// `request_resources` bundles.
    Request,
}

/// One resource shape and how many of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// The resources.
    pub resources: BTreeMap<String, f64>,
    /// How many.
    pub count: u64,
}

/// Pending demand of one kind with one reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DemandGroup {
    /// Its kind.
    pub kind: DemandKind,
    /// Why it is pending.
    #[serde(flatten)]
    pub reason: DemandReason,
    /// How many requests (placement groups for [`DemandKind::PlacementGroup`]).
    pub count: u64,
    /// The largest shapes (at most [`MAX_EXAMPLES`]).
    pub shapes: Vec<Shape>,
}

/// Why a worker node is kept, or goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NodeReason {
    /// Work runs on it: the resources in use (summed over the group).
    Busy {
        /// Resources in use.
        in_use: BTreeMap<String, f64>,
    },
    /// Idle, not yet for its idle timeout.
    Idle {
        /// The longest idle time in the group (s).
        longest_s: u64,
        /// The timeout (s).
        timeout_s: u64,
    },
    /// Idle with no idle timeout (`idle_timeout_minutes` unset).
    IdleNoTimeout,
    /// Idle past its timeout, kept for its type's `min_workers`.
    KeptForMinWorkers {
        /// The setting.
        min_workers: u64,
    },
    /// Idle past its timeout, kept because pending demand is placed on it.
    KeptForDemand,
    /// Idle past its timeout, kept for `request_resources`.
    KeptForRequest,
    /// Being launched or set up.
    Launching {
        /// Its instance status (Ray's name).
        status: String,
    },
    /// Chosen to stop (Ray's termination cause, or rayscale's), or stopping.
    Stopping {
        /// Why.
        cause: String,
    },
    /// Ray refused to drain it (the GCS's reason); it stays.
    DrainRejected {
        /// The GCS's reason.
        why: String,
    },
    /// Ray's scheduler would stop it (`cause`); an operator's limit holds it.
    StopHeld {
        /// Ray's termination cause.
        cause: String,
        /// The limit.
        #[serde(flatten)]
        hold: StopHold,
    },
}

/// [`NodeReason::key`] of every busy node.
const BUSY_KEY: &str = "busy";

impl NodeReason {
    /// The part of the reason that groups nodes: what is summed or maxed is left out.
    fn key(&self) -> std::borrow::Cow<'static, str> {
        match self {
            NodeReason::Busy { .. } => BUSY_KEY.into(),
            NodeReason::Idle { timeout_s, .. } => format!("idle/{timeout_s}").into(),
            other => serde_json::to_string(other).unwrap_or_default().into(),
        }
    }

    /// Takes `other` (same key) into this group's details.
    fn absorb(&mut self, other: &NodeReason) {
        match (self, other) {
            (NodeReason::Busy { in_use }, NodeReason::Busy { in_use: more }) => {
                for (k, v) in more {
                    *in_use.entry(k.clone()).or_default() += v;
                }
            }
            (NodeReason::Idle { longest_s, .. }, NodeReason::Idle { longest_s: l, .. }) => {
                *longest_s = (*longest_s).max(*l);
            }
            _ => {}
        }
    }
}

/// Worker nodes of one type with one reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeGroup {
    /// The node type.
    pub node_type: String,
    /// Why.
    #[serde(flatten)]
    pub reason: NodeReason,
    /// How many nodes.
    pub count: u64,
    /// Some of their instance ids (at most [`MAX_EXAMPLES`]).
    pub examples: Vec<String>,
}

/// One iteration's reasons, grouped and counted, largest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Explanation {
    /// When (ns since the epoch).
    pub at_ns: i64,
    /// Pending demand by reason.
    pub demand: Vec<DemandGroup>,
    /// Worker nodes by type and reason.
    pub nodes: Vec<NodeGroup>,
    /// Groups left out past [`MAX_GROUPS`].
    #[serde(default)]
    pub groups_left_out: u64,
}

impl Explanation {
    /// Reads a stored explanation (outside input: any job can write the KV); `Err` says
    /// why it is not one.
    pub fn from_json(bytes: &[u8]) -> Result<Explanation, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not an explanation: {e}"))
    }

    /// Its JSON (what the driver stores).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The same reasons, whatever the time and the measures that move every iteration
    /// (how long idle nodes have been idle, what busy ones use): what decides whether a
    /// stored one is rewritten before its refresh.
    pub fn same_reasons(&self, other: &Explanation) -> bool {
        let nodes = |e: &Explanation| -> Vec<(String, std::borrow::Cow<'static, str>, u64)> {
            e.nodes
                .iter()
                .map(|g| (g.node_type.clone(), g.reason.key(), g.count))
                .collect()
        };
        self.demand == other.demand
            && nodes(self) == nodes(other)
            && self.groups_left_out == other.groups_left_out
    }

    /// Pending requests by reason name (Ray's metric label), for
    /// `rayscale_pending_demand{reason}`.
    pub fn demand_by_reason(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for g in &self.demand {
            *out.entry(g.reason.name()).or_default() += g.count;
        }
        out
    }

    /// Worker nodes by reason name, for `rayscale_nodes_kept{reason}`.
    pub fn nodes_by_reason(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for g in &self.nodes {
            *out.entry(g.reason.name()).or_default() += g.count;
        }
        out
    }

    /// One line per group, largest first: what `status --why` prints.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.push(if self.demand.is_empty() {
            "Pending demand: none".to_string()
        } else {
            "Pending demand:".to_string()
        });
        for g in &self.demand {
            out.push(format!("  {}", g.line()));
        }
        out.push(if self.nodes.is_empty() {
            "Worker nodes: none".to_string()
        } else {
            "Worker nodes:".to_string()
        });
        for g in &self.nodes {
            out.push(format!("  {}", g.line()));
        }
        if self.groups_left_out > 0 {
            out.push(format!(
                "  ({} smaller groups left out)",
                self.groups_left_out
            ));
        }
        out
    }

    /// The groups' one-line reasons as the event log says them: a line when a reason
    /// starts and one when it ends (keyed without counts, which change every iteration).
    pub fn event_keys(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        // Launches under way and room on running nodes pass on their own; counts change
        // every iteration: neither starts a line.
        for g in self.demand.iter().filter(|g| {
            !matches!(
                g.reason,
                DemandReason::WaitingForLaunch { .. }
                    | DemandReason::Paced { .. }
                    | DemandReason::FitsRunningNodes
            )
        }) {
            out.insert(
                format!("demand {:?} {}", g.kind, g.reason.line()),
                format!("{} pending: {}", g.kind.noun(2), g.reason.line()),
            );
        }
        for g in &self.nodes {
            if matches!(
                g.reason,
                NodeReason::KeptForMinWorkers { .. }
                    | NodeReason::KeptForDemand
                    | NodeReason::KeptForRequest
                    | NodeReason::DrainRejected { .. }
                    | NodeReason::StopHeld { .. }
            ) {
                out.insert(
                    format!("node {} {}", g.node_type, g.reason.key()),
                    format!("{} nodes {}", g.node_type, g.reason.line()),
                );
            }
        }
        out
    }
}

impl DemandKind {
    fn noun(self, n: u64) -> &'static str {
        match (self, n == 1) {
            (DemandKind::Task, true) => "task or actor",
            (DemandKind::Task, false) => "tasks and actors",
            (DemandKind::PlacementGroup, true) => "placement group",
            (DemandKind::PlacementGroup, false) => "placement groups",
            (DemandKind::Request, true) => "request_resources bundle",
            (DemandKind::Request, false) => "request_resources bundles",
        }
    }
}

/// `{CPU: 2, GPU: 1}`.
pub fn fmt_resources(m: &BTreeMap<String, f64>) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", inner.join(", "))
}

impl DemandReason {
    /// Its name (a metric label).
    pub fn name(&self) -> &'static str {
        match self {
            DemandReason::NoTypeFits { .. } => "no_type_fits",
            DemandReason::TypeAtMax { .. } => "type_at_max",
            DemandReason::ClusterAtMax { .. } => "cluster_at_max",
            DemandReason::Unavailable { .. } => "unavailable",
            DemandReason::WaitingForLaunch { .. } => "waiting_for_launch",
            DemandReason::Paced { .. } => "paced",
            DemandReason::FitsRunningNodes => "fits_running_nodes",
            DemandReason::CostCap { .. } => "cost_cap",
            DemandReason::ConstraintsUnmet => "constraints_unmet",
        }
    }

    /// What an operator reads.
    pub fn line(&self) -> String {
        match self {
            DemandReason::NoTypeFits { closest: None, .. } => {
                "infeasible: the config has no worker node type".into()
            }
            DemandReason::NoTypeFits {
                closest: Some(t),
                missing,
            } => {
                let m: Vec<String> = missing
                    .iter()
                    .map(|(r, asked, has)| format!("{r} {asked} (it has {has})"))
                    .collect();
                format!(
                    "infeasible: no node type has the resources; the closest, {t}, lacks {}",
                    m.join(", ")
                )
            }
            DemandReason::TypeAtMax {
                node_type,
                max_workers,
            } => format!("node type {node_type} is at its max_workers ({max_workers})"),
            DemandReason::ClusterAtMax { max_workers } => {
                format!("the cluster is at its max_workers ({max_workers})")
            }
            DemandReason::Unavailable {
                node_type,
                until_ns: 0,
                ..
            } => format!("node type {node_type} is unavailable (capacity errors)"),
            DemandReason::Unavailable {
                node_type,
                until_ns,
                error,
            } => format!(
                "node type {node_type} is unavailable until {} after {error}",
                clock(*until_ns)
            ),
            DemandReason::WaitingForLaunch { node_type, nodes } => {
                format!("waiting for {nodes} {node_type} nodes being launched")
            }
            DemandReason::Paced {
                node_type,
                queued,
                hold,
            } => {
                let why = match hold {
                    Hold::Backoff { failures, until_ns } => format!(
                        "after {failures} failed launches, it is tried again at {}",
                        clock(*until_ns)
                    ),
                    Hold::Concurrency { in_flight, max } => {
                        format!("{in_flight} launches in flight, max_concurrent_launches {max}")
                    }
                    Hold::Speed {
                        per_iteration,
                        upscaling_speed,
                    } => format!(
                        "upscaling_speed {upscaling_speed} allows {per_iteration} per iteration"
                    ),
                };
                format!("launch paced: {queued} {node_type} nodes queued ({why})")
            }
            DemandReason::FitsRunningNodes => {
                "there is room on running nodes (Ray places it as resources free up)".into()
            }
            DemandReason::CostCap {
                node_type,
                hourly_cost,
                max_hourly_cost,
            } => format!(
                "a {node_type} node would take the hourly cost ({hourly_cost}) over \
                 max_hourly_cost ({max_hourly_cost})"
            ),
            DemandReason::ConstraintsUnmet => {
                "fits an open node type, but its label selectors or placement strategy are not met"
                    .into()
            }
        }
    }
}

impl DemandGroup {
    fn line(&self) -> String {
        let shapes: Vec<String> = self
            .shapes
            .iter()
            .map(|s| format!("{} x {}", fmt_resources(&s.resources), s.count))
            .collect();
        format!(
            "{} {} ({}): {}",
            self.count,
            self.kind.noun(self.count),
            shapes.join(", "),
            self.reason.line()
        )
    }
}

impl NodeReason {
    /// Its name (a metric label).
    pub fn name(&self) -> &'static str {
        match self {
            NodeReason::Busy { .. } => "busy",
            NodeReason::Idle { .. } => "idle",
            NodeReason::IdleNoTimeout => "idle_no_timeout",
            NodeReason::KeptForMinWorkers { .. } => "min_workers",
            NodeReason::KeptForDemand => "needed_by_demand",
            NodeReason::KeptForRequest => "needed_by_request_resources",
            NodeReason::Launching { .. } => "launching",
            NodeReason::Stopping { .. } => "stopping",
            NodeReason::DrainRejected { .. } => "drain_rejected",
            NodeReason::StopHeld { .. } => "stop_held",
        }
    }

    /// What an operator reads.
    pub fn line(&self) -> String {
        match self {
            NodeReason::Busy { in_use } => format!("busy ({} in use)", fmt_resources(in_use)),
            NodeReason::Idle {
                longest_s,
                timeout_s,
            } => format!("idle for up to {longest_s} s of a {timeout_s} s timeout"),
            NodeReason::IdleNoTimeout => "idle, kept: no idle timeout is set".into(),
            NodeReason::KeptForMinWorkers { min_workers } => {
                format!("idle, kept for min_workers ({min_workers})")
            }
            NodeReason::KeptForDemand => "idle, kept: pending demand is placed on it".into(),
            NodeReason::KeptForRequest => "idle, kept for request_resources".into(),
            NodeReason::Launching { status } => format!("launching ({status})"),
            NodeReason::Stopping { cause } => format!("stopping ({cause})"),
            NodeReason::DrainRejected { why } => {
                format!("kept: Ray refused to drain it ({why})")
            }
            NodeReason::StopHeld { cause, hold } => {
                format!("kept past a stop ({cause}): {}", hold.line())
            }
        }
    }
}

impl NodeGroup {
    fn line(&self) -> String {
        let more = if (self.examples.len() as u64) < self.count {
            ", ..."
        } else {
            ""
        };
        format!(
            "{} {}: {} [{}{more}]",
            self.count,
            self.node_type,
            self.reason.line(),
            self.examples.join(", ")
        )
    }
}

#[cfg(test)]
mod tests;
