//! Ray's autoscaler event lines, as Ray 2.60's `AutoscalerEventLogger` words them for a
//! scheduling decision: launches and terminations counted by node type, the cluster's size
//! after a resize, and demand no node type can hold. Ray writes them to the cluster's
//! `logs/events/event_AUTOSCALER.log`, which its log monitor publishes to every job's
//! console ("(autoscaler +2s) Adding 3 node(s) of type cpu4.") and its dashboard lists.
//!
//! One difference, on purpose: Ray repeats the infeasible-demand warnings on every
//! iteration while the demand lasts (every 5 s, its TODO says "rate limit"); the driver's
//! caller says each once, when it starts (see [`Said`]).

use std::collections::BTreeSet;

use crate::model::resources::to_f64;
use crate::model::{
    ClusterConstraint, GangRequest, LabelOperator, ResourceMap, ResourceRequest, TerminationCause,
};
use crate::scheduler::Decision;

/// An event's severity (Ray's `Event.Severity` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Debug detail (not shown on consoles by default).
    Debug,
    /// A scaling action.
    Info,
    /// Demand nothing can hold.
    Warning,
}

impl Severity {
    /// Ray's name of the severity.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Debug => "DEBUG",
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
        }
    }
}

/// One event line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Event {
    /// Its severity.
    pub severity: Severity,
    /// The text, as Ray words it.
    pub message: String,
}

impl Event {
    fn info(message: String) -> Self {
        Event {
            severity: Severity::Info,
            message,
        }
    }
    fn warning(message: String) -> Self {
        Event {
            severity: Severity::Warning,
            message,
        }
    }
}

/// A float as Python's `repr` writes it for the values resources take (`1.0`, `0.5`).
fn py_float(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// A resource map as Python prints a dict of floats: `{'CPU': 1.0, 'GPU': 1.0}`.
pub fn py_resource_map(m: &ResourceMap) -> String {
    let items: Vec<String> =
        m.0.iter()
            .map(|(k, v)| format!("'{k}': {}", py_float(to_f64(*v))))
            .collect();
    format!("{{{}}}", items.join(", "))
}

/// Ray's `LabelSelectorOperator` names.
fn operator_name(op: LabelOperator) -> &'static str {
    match op {
        LabelOperator::Unspecified => "LABEL_OPERATOR_UNSPECIFIED",
        LabelOperator::In => "LABEL_OPERATOR_IN",
        LabelOperator::NotIn => "LABEL_OPERATOR_NOT_IN",
    }
}

/// Requests grouped as Ray's `group_by_count` does: equal requests together, in order of
/// first appearance.
fn group<'a>(
    requests: impl Iterator<Item = (&'a ResourceRequest, u64)>,
) -> Vec<(&'a ResourceRequest, u64)> {
    let mut out: Vec<(&ResourceRequest, u64)> = Vec::new();
    for (r, n) in requests {
        match out.iter_mut().find(|(q, _)| *q == r) {
            Some(e) => e.1 += n,
            None => out.push((r, n)),
        }
    }
    out
}

/// `{'CPU': 1.0}*3, {'GPU': 1.0}*1`.
fn counted(groups: &[(&ResourceRequest, u64)], with_selectors: bool) -> String {
    let parts: Vec<String> = groups
        .iter()
        .map(|(r, n)| {
            let mut s = format!("{}*{n}", py_resource_map(&r.resources));
            if with_selectors {
                let sel: Vec<String> = r
                    .label_selectors
                    .iter()
                    .flat_map(|s| s.constraints.iter())
                    .map(|c| {
                        format!(
                            "{} {} [{}]",
                            c.key,
                            operator_name(c.operator),
                            c.values.join(",")
                        )
                    })
                    .collect();
                if !sel.is_empty() {
                    s.push_str(&format!(" with label selectors: [{}]", sel.join("; ")));
                }
            }
            s
        })
        .collect();
    parts.join(", ")
}

const RESOLVE: &str = ". Add suitable node types to this cluster to resolve this issue.";

/// Ray's reason text of a termination cause.
fn cause_text(c: TerminationCause) -> &'static str {
    match c {
        TerminationCause::Outdated => "outdated",
        TerminationCause::MaxNumNodes => "max number of worker nodes reached",
        TerminationCause::MaxNumNodePerType => "max number of worker nodes per type reached",
        TerminationCause::Idle => "idle",
        TerminationCause::Consolidation => "consolidation: its load fits on the other nodes",
        TerminationCause::Autostop => "autostop",
        TerminationCause::Gang => "gang released: the placement group is planned again whole",
    }
}

/// The scaling events of a decision: launches by type, terminations by cause and type,
/// then the cluster's size when either happened (Ray's `log_cluster_scheduling_update`,
/// with `log_cluster_shape` on).
pub fn scaling_events(d: &Decision) -> Vec<Event> {
    let mut out = Vec::new();
    for (node_type, count) in &d.launch {
        out.push(Event::info(format!(
            "Adding {count} node(s) of type {node_type}."
        )));
    }
    let mut by_cause: Vec<((TerminationCause, &str), u64)> = Vec::new();
    for t in &d.terminate {
        let key = (t.cause, t.node_type.as_str());
        match by_cause.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 += 1,
            None => by_cause.push((key, 1)),
        }
    }
    for ((cause, node_type), count) in &by_cause {
        out.push(Event::info(format!(
            "Removing {count} nodes of type {node_type} ({}).",
            cause_text(*cause)
        )));
    }
    if !d.launch.is_empty() || !d.terminate.is_empty() {
        let r = &d.cluster_resources;
        let whole = |name: &str| r.get(name).map(|v| to_f64(v) as i64);
        let mut s = format!("Resized to {} CPUs", whole("CPU").unwrap_or(0));
        if let Some(g) = whole("GPU") {
            s.push_str(&format!(", {g} GPUs"));
        }
        if let Some(t) = whole("TPU") {
            s.push_str(&format!(", {t} TPUs"));
        }
        s.push('.');
        out.push(Event::info(s));
        out.push(Event {
            severity: Severity::Debug,
            message: format!("Current cluster resources: {}.", py_resource_map(r)),
        });
    }
    out
}

/// The warnings about demand no node type can hold: tasks and actors, each placement
/// group, the `request_resources` constraint.
pub fn infeasible_events(
    requests: &[(ResourceRequest, u64)],
    gangs: &[GangRequest],
    constraints: &[ClusterConstraint],
) -> Vec<Event> {
    let mut out = Vec::new();
    if !requests.is_empty() {
        let groups = group(requests.iter().map(|(r, n)| (r, *n)));
        out.push(Event::warning(format!(
            "No available node types can fulfill resource requests {}{RESOLVE}",
            counted(&groups, true)
        )));
    }
    for g in gangs {
        let groups = group(g.requests.iter().map(|r| (r, 1)));
        out.push(Event::warning(format!(
            "No available node types can fulfill placement group requests (detail={}): {}{RESOLVE}",
            g.details,
            counted(&groups, false)
        )));
    }
    for c in constraints {
        let groups: Vec<(&ResourceRequest, u64)> = c
            .resource_requests
            .iter()
            .map(|r| (&r.request, r.count))
            .collect();
        out.push(Event::warning(format!(
            "No available node types can fulfill cluster constraint: {}{RESOLVE}",
            counted(&groups, false)
        )));
    }
    out
}

/// Remembers which warnings are being said, so that each is said when its condition
/// starts, not on every iteration while it lasts.
#[derive(Debug, Default)]
pub struct Said(BTreeSet<String>);

impl Said {
    /// The events of `now` not said on the last call (all of them on the first).
    pub fn new_ones(&mut self, now: Vec<Event>) -> Vec<Event> {
        let keys: BTreeSet<String> = now.iter().map(|e| e.message.clone()).collect();
        let fresh = now
            .into_iter()
            .filter(|e| !self.0.contains(&e.message))
            .collect();
        self.0 = keys;
        fresh
    }
}
