//! The scheduling engine: interned shapes, run-length request lists, cached node trials.

use std::cmp::Ordering;
use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt};
use std::rc::Rc;

use super::{
    Decision, InstanceInput, NodeFate, NodeView, SchedulingRequest, Termination, TerminationCause,
    fcmp,
};
use crate::expander::{ExpanderChain, ExpansionOption};
use crate::model::resources::{Fixed, to_f64};
use crate::model::{
    InstanceStatus, LabelOperator, LabelSelector, PlacementConstraint, ResourceRequest,
};

/// Ray's prefix of implicit resources: a node that does not list one has 1 of it.
const IMPLICIT_PREFIX: &str = "node:__internal_implicit_resource_";
/// One unit, in fixed point.
const ONE: Fixed = crate::model::resources::SCALE;

type ResId = u32;
type ShapeId = u32;
/// Identity of a request: sorted resources, placement constraints, label selectors.
type ShapeKey = (
    Vec<(crate::model::Name, Fixed)>,
    Vec<PlacementConstraint>,
    Vec<LabelSelector>,
);
/// Affinity group key: label name, label value, label selectors.
type AffinityKey = (String, String, Vec<LabelSelector>);

/// Request source: demand (tasks, actors, gangs) or the cluster constraint. Each node keeps
/// separate availability and placed requests per source, as Ray does.
const DEMAND: usize = 0;
const CONSTRAINT: usize = 1;

/// Ray's utilisation score of a node for the requests placed on it (higher is better).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Rank of the first label selector satisfied (0 when none).
    pub labels: i64,
    /// False when a GPU node would get no GPU request.
    pub gpu_ok: bool,
    /// Number of requested resource types the node has.
    pub matching: i64,
    /// Minimum of `total * util^3` across resources.
    pub min_util: f64,
    /// Mean of `total * util^3` across resources.
    pub mean_util: f64,
}

impl Score {
    fn cmp(&self, o: &Score) -> Ordering {
        self.labels
            .cmp(&o.labels)
            .then(self.gpu_ok.cmp(&o.gpu_ok))
            .then(self.matching.cmp(&o.matching))
            .then(fcmp(self.min_util, o.min_util))
            .then(fcmp(self.mean_util, o.mean_util))
    }
}

/// An interned, canonical resource request.
#[derive(Debug, Clone)]
struct Shape {
    /// Entries with a positive amount.
    pos: Vec<(ResId, Fixed)>,
    /// The bundle names `GPU` (even with 0).
    has_gpu_key: bool,
    selectors: Vec<LabelSelector>,
    /// Anti-affinity constraints (label name, value).
    anti: Vec<(String, String)>,
    /// The original request (for output).
    request: ResourceRequest,
    /// Ray's sort key: (#placement constraints, #constraints of the first selector,
    /// #resources, sum of amounts, sorted items).
    sort_key: (usize, usize, usize, i128, Vec<(crate::model::Name, Fixed)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    shape: ShapeId,
    count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeStatus {
    ToLaunch,
    Schedulable,
    ToTerminate,
}

#[derive(Debug, Clone)]
struct SNode {
    type_idx: usize,
    status: NodeStatus,
    im_status: Option<InstanceStatus>,
    /// Index into the request's instances, for existing nodes.
    instance: Option<usize>,
    head: bool,
    idle_ms: i64,
    launch_hash: Rc<str>,
    /// Ray's tie-breaks after the score (recoverable availability, priority, availability).
    tie: TieBreak,
    total: Rc<Vec<(ResId, Fixed)>>,
    avail: [Vec<(ResId, Fixed)>; 2],
    sched: [Vec<(ShapeId, u64)>; 2],
    labels: Rc<Vec<(String, String)>>,
    term: Option<TerminationCause>,
    /// For a node this pass launches for a placement group: that gang's index, else
    /// [`NO_GANG`] (a `u32` beside the small fields, so a node stays as large as it was).
    gang: u32,
}

/// [`SNode::gang`] of a node launched for no placement group.
const NO_GANG: u32 = u32::MAX;

/// Ray's ordering after the utilisation score: recoverable availability, then the type's
/// priority, then cloud availability (higher first in each).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct TieBreak {
    recoverable: f64,
    priority: i64,
    availability: f64,
}

impl TieBreak {
    /// `Greater` when `self` ranks higher.
    pub(super) fn cmp(&self, o: &TieBreak) -> Ordering {
        fcmp(self.recoverable, o.recoverable)
            .then(self.priority.cmp(&o.priority))
            .then(fcmp(self.availability, o.availability))
    }
}

fn get(map: &[(ResId, Fixed)], k: ResId) -> Option<Fixed> {
    map.iter().find(|(r, _)| *r == k).map(|(_, v)| *v)
}

fn label<'a>(labels: &'a [(String, String)], k: &str) -> Option<&'a str> {
    labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

/// One trial of a node against a request list.
#[derive(Debug, Clone)]
struct Trial {
    /// (run index, taken, run count when tried).
    taken: Vec<(usize, u64, u64)>,
    node: SNode,
    score: Score,
}

impl Trial {
    /// Still the trial's result on the current runs? It is while every run it took from
    /// still offers what it took, and runs it took whole are untouched.
    fn valid(&self, runs: &[Run]) -> bool {
        holds(&self.taken, runs)
    }
}

/// A trial's takings and score without the node it leaves (the existing-node pass keeps
/// thousands of these and makes the node only for the one it picks).
#[derive(Debug, Clone)]
struct LightTrial {
    /// (run index, taken, run count when tried).
    taken: Vec<(usize, u64, u64)>,
    score: Score,
    tie: TieBreak,
}

impl LightTrial {
    fn valid(&self, runs: &[Run]) -> bool {
        holds(&self.taken, runs)
    }
}

fn holds(taken: &[(usize, u64, u64)], runs: &[Run]) -> bool {
    taken.iter().all(|&(r, k, c)| {
        let now = runs[r].count;
        if k < c { now >= k } else { now == c }
    })
}

pub(super) struct Engine<'a> {
    req: &'a SchedulingRequest,
    res_names: Vec<crate::model::Name>,
    res_ids: HashMap<String, ResId>,
    /// The first names met in maps, by pointer (see `res_id_of`).
    met: Vec<(crate::model::Name, ResId)>,
    implicit: Vec<bool>,
    gpu: Option<ResId>,
    shapes: Vec<Shape>,
    shape_ids: HashMap<ShapeKey, ShapeId>,
    /// Node type names: config types first, then unknown ones met in instances.
    type_names: Vec<crate::model::Name>,
    n_config_types: usize,
    nodes: Vec<SNode>,
    /// Scratch: generation stamps of the unschedulable-shape cache.
    failed: Vec<u32>,
    stamp: u32,
    /// Scratch node of light trials (its buffers are reused).
    scratch: Option<SNode>,
    /// The expander chain, when it is not plain `ray` (new nodes are then chosen in rounds).
    chain: Option<&'a mut ExpanderChain>,
    /// Per config type: no new node may be launched of it in this pass.
    unavailable: Vec<bool>,
    /// What the pass returns of its nodes.
    views: super::Views,
    /// The launch hash last given to a node (see `hash_rc`).
    last_hash: Option<Rc<str>>,
    /// Trials of existing nodes may run on dense availability (off only to test that it
    /// decides the same).
    dense: bool,
}

impl<'a> Engine<'a> {
    pub(super) fn new(req: &'a SchedulingRequest) -> Self {
        let type_names: Vec<crate::model::Name> = req
            .node_types
            .iter()
            .map(|t| t.name.as_str().into())
            .collect();
        Engine {
            req,
            res_names: Vec::new(),
            res_ids: HashMap::new(),
            met: Vec::new(),
            implicit: Vec::new(),
            gpu: None,
            shapes: Vec::new(),
            shape_ids: HashMap::new(),
            n_config_types: type_names.len(),
            type_names,
            nodes: Vec::new(),
            failed: Vec::new(),
            stamp: 1,
            scratch: None,
            chain: None,
            unavailable: req
                .node_types
                .iter()
                .map(|t| req.unavailable_node_types.contains(&t.name))
                .collect(),
            views: super::Views::Full,
            last_hash: None,
            dense: true,
        }
    }

    /// Every trial on the nodes' own maps (tests compare the dense trials with it).
    #[cfg(test)]
    pub(super) fn without_dense(mut self) -> Self {
        self.dense = false;
        self
    }

    /// Returns `views` of the nodes (all of them by default).
    pub(super) fn with_views(mut self, views: super::Views) -> Self {
        self.views = views;
        self
    }

    /// The tie-breaks of a node of type `name` with `priority`.
    fn tie(&self, name: &str, priority: i64) -> TieBreak {
        let look = |m: &[(String, f64)]| m.iter().find(|(t, _)| t == name).map_or(1.0, |(_, v)| *v);
        TieBreak {
            recoverable: look(&self.req.recoverable_resource_availabilities),
            priority,
            availability: look(&self.req.cloud_resource_availabilities),
        }
    }

    /// Chooses new nodes with `chain` (in rounds) unless `ray` heads it.
    pub(super) fn with_chain(mut self, chain: &'a mut ExpanderChain) -> Self {
        chain.begin_pass();
        if !chain.is_ray() {
            self.chain = Some(chain);
        }
        self
    }

    // ------------------------------------------------------------------ the pass

    pub(super) fn run(mut self) -> (Decision, Vec<NodeView>) {
        let req = self.req;
        self.nodes.reserve(req.instances.len());
        for (i, inst) in req.instances.iter().enumerate() {
            if let Some(n) = self.node_from_instance(i, inst) {
                self.nodes.push(n);
            }
        }
        let mut decision = Decision::default();

        self.terminate_outdated();
        self.enforce_min_workers();
        self.enforce_max_per_type();
        self.enforce_max_global();

        // Cluster resource constraint (Ray asserts there is at most one).
        if req.cluster_constraints.len() > 1 {
            decision.extra_constraints_ignored = true;
        }
        if let Some(c) = req.cluster_constraints.first() {
            let runs = self.runs_of(&c.resource_requests);
            if !runs.is_empty() {
                let nodes = std::mem::take(&mut self.nodes);
                let (slots, left) = self.try_schedule(&nodes, runs, CONSTRAINT);
                if left.iter().any(|r| r.count > 0) {
                    decision.infeasible_constraints.push(0);
                    self.nodes = nodes;
                } else {
                    self.nodes = materialize(nodes, slots);
                }
            }
        }

        // Gang requests, most constrained first.
        let mut order: Vec<usize> = (0..req.gang_requests.len()).collect();
        let gang_key = |g: &crate::model::GangRequest| {
            let pc: usize = g
                .requests
                .iter()
                .map(|r| r.placement_constraints.len())
                .sum();
            (pc, g.requests.len())
        };
        order.sort_by(|a, b| {
            gang_key(&req.gang_requests[*b]).cmp(&gang_key(&req.gang_requests[*a]))
        });
        for gi in order {
            let combined = combine_affinity(req.gang_requests[gi].effective_requests());
            let runs: Vec<Run> = combined
                .iter()
                .map(|r| Run {
                    shape: self.intern(r),
                    count: 1,
                })
                .collect();
            let runs = self.sorted_runs(runs);
            if runs.is_empty() {
                continue;
            }
            let nodes = std::mem::take(&mut self.nodes);
            let (mut slots, left) = self.try_schedule(&nodes, runs, DEMAND);
            if left.iter().any(|r| r.count > 0) {
                decision.infeasible_gang_requests.push(gi);
                self.nodes = nodes;
            } else {
                // The nodes launched for this gang (what atomic gangs launch together);
                // a node launched for an earlier gang stays that gang's.
                for s in &mut slots {
                    if let Slot::New(n) = s
                        && n.status == NodeStatus::ToLaunch
                        && n.gang == NO_GANG
                    {
                        n.gang = u32::try_from(gi).unwrap_or(NO_GANG);
                    }
                }
                self.nodes = materialize(nodes, slots);
            }
        }

        // Task and actor requests.
        let runs = self.runs_of(&req.resource_requests);
        if !runs.is_empty() {
            let nodes = std::mem::take(&mut self.nodes);
            let (slots, left) = self.try_schedule(&nodes, runs, DEMAND);
            self.nodes = materialize(nodes, slots);
            for r in left.into_iter().filter(|r| r.count > 0) {
                decision
                    .infeasible_requests
                    .push((self.shapes[r.shape as usize].request.clone(), r.count));
            }
        }

        self.enforce_idle_termination();

        // The decision.
        let mut launch: Vec<(String, u64)> = Vec::new();
        for n in &self.nodes {
            if n.status == NodeStatus::ToLaunch {
                let name = &self.type_names[n.type_idx];
                match launch.iter_mut().find(|(t, _)| t == name.as_str()) {
                    Some(e) => e.1 += 1,
                    None => launch.push((name.to_string(), 1)),
                }
            }
        }
        decision.launch = launch;
        for n in &self.nodes {
            if let (Some(cause), Some(i)) = (n.term, n.instance) {
                let inst = &req.instances[i];
                decision.terminate.push(Termination {
                    instance_id: inst.instance_id.clone(),
                    ray_node_id: self.ray_node_id(n).to_string(),
                    node_type: self.type_names[n.type_idx].to_string(),
                    instance_status: inst.status,
                    cause,
                    idle_duration_ms: n.idle_ms,
                });
            }
        }
        // Indexed by resource id (every node has its own `node:<ip>` resource).
        let mut at: Vec<Option<usize>> = vec![None; self.res_names.len()];
        let mut totals: Vec<(ResId, Fixed)> = Vec::new();
        for n in self
            .nodes
            .iter()
            .filter(|n| n.status != NodeStatus::ToTerminate)
        {
            for &(k, x) in n.total.iter() {
                match at.get(k as usize).copied().flatten() {
                    Some(i) => totals[i].1 += x,
                    None => {
                        if let Some(slot) = at.get_mut(k as usize) {
                            *slot = Some(totals.len());
                        }
                        totals.push((k, x));
                    }
                }
            }
        }
        decision.cluster_resources = crate::model::ResourceMap(
            totals
                .into_iter()
                .map(|(k, x)| (self.res_names[k as usize].clone(), x))
                .collect(),
        );
        let views = match self.views {
            super::Views::None => Vec::new(),
            _ => self.nodes.iter().map(|n| self.view(n)).collect(),
        };
        (decision, views)
    }

    /// `f()` when the pass returns full views, else an empty map.
    fn full_views(
        &self,
        f: impl FnOnce() -> crate::model::ResourceMap,
    ) -> crate::model::ResourceMap {
        if self.views == super::Views::Full {
            f()
        } else {
            crate::model::ResourceMap::default()
        }
    }

    fn view(&self, n: &SNode) -> NodeView {
        let map = |v: &[(ResId, Fixed)]| {
            crate::model::ResourceMap(
                v.iter()
                    .map(|(k, x)| (self.res_names[*k as usize].clone(), *x))
                    .collect(),
            )
        };
        let placed = |src: usize| {
            n.sched[src]
                .iter()
                .map(|(s, k)| (self.shapes[*s as usize].request.clone(), *k))
                .collect()
        };
        NodeView {
            node_type: self.type_names[n.type_idx].clone(),
            fate: match n.status {
                NodeStatus::ToLaunch => NodeFate::Launch,
                NodeStatus::Schedulable => NodeFate::Keep,
                NodeStatus::ToTerminate => NodeFate::Terminate,
            },
            instance: n.instance,
            total: self.full_views(|| map(&n.total)),
            available: self.full_views(|| map(&n.avail[DEMAND])),
            available_for_constraint: self.full_views(|| map(&n.avail[CONSTRAINT])),
            placed: placed(DEMAND),
            placed_constraint: placed(CONSTRAINT),
            gang: (n.gang != NO_GANG).then_some(n.gang as usize),
        }
    }
}

mod build;
mod cube;
mod dense;
mod enforce;
mod existing;
mod expand;
mod pack;

use pack::{Slot, combine_affinity, materialize};
