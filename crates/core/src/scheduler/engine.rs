//! The scheduling engine: interned shapes, run-length request lists, cached node trials.

use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
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
    Vec<(String, Fixed)>,
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
    sort_key: (usize, usize, usize, i128, Vec<(String, Fixed)>),
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
    ray_node_id: Rc<str>,
    head: bool,
    idle_ms: i64,
    launch_hash: Rc<str>,
    priority: i64,
    total: Rc<Vec<(ResId, Fixed)>>,
    avail: [Vec<(ResId, Fixed)>; 2],
    sched: [Vec<(ShapeId, u64)>; 2],
    labels: Rc<Vec<(String, String)>>,
    term: Option<TerminationCause>,
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
        self.taken.iter().all(|&(r, k, c)| {
            let now = runs[r].count;
            if k < c { now >= k } else { now == c }
        })
    }
}

pub(super) struct Engine<'a> {
    req: &'a SchedulingRequest,
    res_names: Vec<String>,
    res_ids: HashMap<String, ResId>,
    implicit: Vec<bool>,
    gpu: Option<ResId>,
    shapes: Vec<Shape>,
    shape_ids: HashMap<ShapeKey, ShapeId>,
    /// Node type names: config types first, then unknown ones met in instances.
    type_names: Vec<String>,
    n_config_types: usize,
    nodes: Vec<SNode>,
    /// Scratch: generation stamps of the unschedulable-shape cache.
    failed: Vec<u32>,
    stamp: u32,
    /// The expander chain, when it is not plain `ray` (new nodes are then chosen in rounds).
    chain: Option<&'a mut ExpanderChain>,
}

impl<'a> Engine<'a> {
    pub(super) fn new(req: &'a SchedulingRequest) -> Self {
        let type_names: Vec<String> = req.node_types.iter().map(|t| t.name.clone()).collect();
        Engine {
            req,
            res_names: Vec::new(),
            res_ids: HashMap::new(),
            implicit: Vec::new(),
            gpu: None,
            shapes: Vec::new(),
            shape_ids: HashMap::new(),
            n_config_types: type_names.len(),
            type_names,
            nodes: Vec::new(),
            failed: Vec::new(),
            stamp: 1,
            chain: None,
        }
    }

    /// Chooses new nodes with `chain` (in rounds) unless `ray` heads it.
    pub(super) fn with_chain(mut self, chain: &'a mut ExpanderChain) -> Self {
        if !chain.is_ray() {
            self.chain = Some(chain);
        }
        self
    }

    fn res_id(&mut self, name: &str) -> ResId {
        if let Some(id) = self.res_ids.get(name) {
            return *id;
        }
        let id = self.res_names.len() as ResId;
        self.res_names.push(name.to_string());
        self.res_ids.insert(name.to_string(), id);
        self.implicit.push(name.starts_with(IMPLICIT_PREFIX));
        if name == "GPU" {
            self.gpu = Some(id);
        }
        id
    }

    fn res_vec(&mut self, m: &crate::model::ResourceMap) -> Vec<(ResId, Fixed)> {
        m.0.iter().map(|(k, v)| (self.res_id(k), *v)).collect()
    }

    fn type_idx(&mut self, name: &str) -> usize {
        if let Some(i) = self.type_names.iter().position(|t| t == name) {
            return i;
        }
        self.type_names.push(name.to_string());
        self.type_names.len() - 1
    }

    fn intern(&mut self, r: &ResourceRequest) -> ShapeId {
        let mut items: Vec<(String, Fixed)> = r.resources.0.clone();
        items.sort();
        let key = (
            items,
            r.placement_constraints.clone(),
            r.label_selectors.clone(),
        );
        if let Some(id) = self.shape_ids.get(&key) {
            return *id;
        }
        let items = key.0.clone();
        let pos: Vec<(ResId, Fixed)> = items
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| (self.res_id(k), *v))
            .collect();
        let anti = r
            .placement_constraints
            .iter()
            .filter_map(|c| match c {
                PlacementConstraint::AntiAffinity {
                    label_name,
                    label_value,
                } => Some((label_name.clone(), label_value.clone())),
                _ => None,
            })
            .collect();
        let sum: i128 = r.resources.0.iter().map(|(_, v)| *v).sum();
        let sort_key = (
            r.placement_constraints.len(),
            r.label_selectors.first().map_or(0, |s| s.constraints.len()),
            r.resources.0.len(),
            sum,
            items,
        );
        let id = self.shapes.len() as ShapeId;
        self.shapes.push(Shape {
            has_gpu_key: r.resources.0.iter().any(|(k, _)| k == "GPU"),
            pos,
            selectors: r.label_selectors.clone(),
            anti,
            request: r.clone(),
            sort_key,
        });
        self.shape_ids.insert(key, id);
        self.failed.push(0);
        id
    }

    /// Sorts runs as Ray sorts requests (descending by its key, stable) and merges
    /// neighbours of the same shape.
    fn sorted_runs(&self, mut runs: Vec<Run>) -> Vec<Run> {
        runs.retain(|r| r.count > 0);
        runs.sort_by(|a, b| {
            let ka = &self.shapes[a.shape as usize].sort_key;
            let kb = &self.shapes[b.shape as usize].sort_key;
            kb.cmp(ka)
        });
        let mut out: Vec<Run> = Vec::with_capacity(runs.len());
        for r in runs {
            match out.last_mut() {
                Some(last) if last.shape == r.shape => last.count += r.count,
                _ => out.push(r),
            }
        }
        out
    }

    fn node_from_config(&mut self, type_idx: usize, status: NodeStatus) -> SNode {
        let t = &self.req.node_types[type_idx];
        let total = {
            let m = t.resources.clone();
            self.res_vec(&m)
        };
        let t = &self.req.node_types[type_idx];
        SNode {
            type_idx,
            status,
            im_status: None,
            instance: None,
            ray_node_id: Rc::from(""),
            head: false,
            idle_ms: 0,
            launch_hash: Rc::from(""),
            priority: t.priority,
            avail: [total.clone(), total.clone()],
            total: Rc::new(total),
            sched: [Vec::new(), Vec::new()],
            labels: Rc::new(t.labels.clone()),
            term: None,
        }
    }

    fn node_from_instance(&mut self, idx: usize, inst: &InstanceInput) -> Option<SNode> {
        if !inst.status.can_reach_ray_running() {
            return None;
        }
        let config_idx = self
            .req
            .node_types
            .iter()
            .position(|t| t.name == inst.node_type);
        if inst.status == InstanceStatus::RayRunning {
            let ray = inst.ray_node.as_ref()?;
            let total = self.res_vec(&ray.total);
            let avail = self.res_vec(&ray.available);
            let type_idx = self.type_idx(&inst.node_type);
            return Some(SNode {
                type_idx,
                status: NodeStatus::Schedulable,
                im_status: Some(inst.status),
                instance: Some(idx),
                ray_node_id: Rc::from(ray.node_id_hex.as_str()),
                head: inst.is_head,
                idle_ms: ray.idle_duration_ms,
                launch_hash: Rc::from(inst.launch_config_hash.as_str()),
                priority: config_idx.map_or(0, |i| self.req.node_types[i].priority),
                avail: [avail, total.clone()],
                total: Rc::new(total),
                sched: [Vec::new(), Vec::new()],
                labels: Rc::new(ray.labels.clone()),
                term: None,
            });
        }
        let Some(ci) = config_idx else {
            if self.req.disable_launch_config_check {
                return None;
            }
            let type_idx = self.type_idx(&inst.node_type);
            return Some(SNode {
                type_idx,
                status: NodeStatus::ToTerminate,
                im_status: Some(inst.status),
                instance: Some(idx),
                ray_node_id: Rc::from(""),
                head: false,
                idle_ms: 0,
                launch_hash: Rc::from(inst.launch_config_hash.as_str()),
                priority: 0,
                total: Rc::new(Vec::new()),
                avail: [Vec::new(), Vec::new()],
                sched: [Vec::new(), Vec::new()],
                labels: Rc::new(Vec::new()),
                term: Some(TerminationCause::Outdated),
            });
        };
        let mut n = self.node_from_config(ci, NodeStatus::Schedulable);
        n.im_status = Some(inst.status);
        n.instance = Some(idx);
        n.head = inst.is_head;
        // Compatibility rule PENDING_LAUNCH_HASH: keep the instance's hash.
        n.launch_hash = Rc::from(inst.launch_config_hash.as_str());
        Some(n)
    }

    /// Per config type, how many more nodes it may get (its max minus the given nodes).
    fn new_node_budget(&self, nodes: &[SNode]) -> Vec<i64> {
        let mut available: Vec<i64> = (0..self.n_config_types)
            .map(|t| self.max_workers(t))
            .collect();
        for n in nodes {
            if n.type_idx < self.n_config_types {
                available[n.type_idx] -= 1;
            }
        }
        available
    }

    fn max_workers(&self, type_idx: usize) -> i64 {
        if type_idx >= self.n_config_types {
            return 0;
        }
        let t = &self.req.node_types[type_idx];
        let base = t
            .max_workers
            .map_or(i64::MAX / 4, |m| m.min(i64::MAX as u64 / 4) as i64);
        let is_head_type = self.req.head_node_type.as_deref() == Some(t.name.as_str());
        base + i64::from(is_head_type)
    }

    // ------------------------------------------------------------------ the pass

    pub(super) fn run(mut self) -> (Decision, Vec<NodeView>) {
        let req = self.req;
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
            let runs: Vec<Run> = c
                .resource_requests
                .iter()
                .map(|rc| Run {
                    shape: self.intern(&rc.request),
                    count: rc.count,
                })
                .collect();
            let runs = self.sorted_runs(runs);
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
            let (slots, left) = self.try_schedule(&nodes, runs, DEMAND);
            if left.iter().any(|r| r.count > 0) {
                decision.infeasible_gang_requests.push(gi);
                self.nodes = nodes;
            } else {
                self.nodes = materialize(nodes, slots);
            }
        }

        // Task and actor requests.
        let runs: Vec<Run> = req
            .resource_requests
            .iter()
            .map(|rc| Run {
                shape: self.intern(&rc.request),
                count: rc.count,
            })
            .collect();
        let runs = self.sorted_runs(runs);
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
                match launch.iter_mut().find(|(t, _)| t == name) {
                    Some(e) => e.1 += 1,
                    None => launch.push((name.clone(), 1)),
                }
            }
        }
        decision.launch = launch;
        for n in &self.nodes {
            if let (Some(cause), Some(i)) = (n.term, n.instance) {
                let inst = &req.instances[i];
                decision.terminate.push(Termination {
                    instance_id: inst.instance_id.clone(),
                    ray_node_id: n.ray_node_id.to_string(),
                    node_type: self.type_names[n.type_idx].clone(),
                    instance_status: inst.status,
                    cause,
                    idle_duration_ms: n.idle_ms,
                });
            }
        }
        let views = self.nodes.iter().map(|n| self.view(n)).collect();
        (decision, views)
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
            total: map(&n.total),
            available: map(&n.avail[DEMAND]),
            available_for_constraint: map(&n.avail[CONSTRAINT]),
            placed: placed(DEMAND),
            placed_constraint: placed(CONSTRAINT),
        }
    }

    // ------------------------------------------------------------------ steps

    fn terminate_outdated(&mut self) {
        if self.req.disable_launch_config_check {
            return;
        }
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if n.status != NodeStatus::Schedulable || n.head {
                continue;
            }
            let outdated = if n.type_idx >= self.n_config_types {
                true
            } else {
                let h = &self.req.node_types[n.type_idx].launch_config_hash;
                !h.is_empty() && **h != *n.launch_hash
            };
            if outdated {
                let n = &mut self.nodes[i];
                n.status = NodeStatus::ToTerminate;
                n.term = Some(TerminationCause::Outdated);
            }
        }
    }

    fn count_by_type(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.type_names.len()];
        for n in &self.nodes {
            if n.status != NodeStatus::ToTerminate {
                counts[n.type_idx] += 1;
            }
        }
        counts
    }

    fn enforce_min_workers(&mut self) {
        let counts = self.count_by_type();
        let mut new_nodes = Vec::new();
        for (ti, &cur) in counts.iter().enumerate().take(self.n_config_types) {
            let min = self.req.node_types[ti].min_workers;
            // Compatibility rule MIN_WORKERS_ALIASING: distinct nodes.
            for _ in cur..min {
                new_nodes.push(self.node_from_config(ti, NodeStatus::ToLaunch));
            }
        }
        if !new_nodes.is_empty() {
            new_nodes.append(&mut self.nodes);
            self.nodes = new_nodes;
        }
    }

    /// Ray's termination preference: not running Ray first, then longest idle, then lowest
    /// mean utilisation.
    fn termination_key(&self, n: &SNode) -> (bool, i64, f64) {
        let avail = &n.avail[DEMAND];
        let mut sum = 0.0f64;
        let mut cnt = 0usize;
        for &(k, t) in n.total.iter() {
            if t <= 0 {
                continue;
            }
            let tf = to_f64(t);
            let a = get(avail, k).map_or(0.0, to_f64);
            sum += (tf - a) / tf;
            cnt += 1;
        }
        let avg = if cnt > 0 { sum / cnt as f64 } else { 0.0 };
        (!n.ray_node_id.is_empty(), -n.idle_ms, avg)
    }

    fn sort_for_termination(&self, nodes: &mut [SNode]) {
        let mut keyed: Vec<((bool, i64, f64), usize)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (self.termination_key(n), i))
            .collect();
        keyed.sort_by(|a, b| {
            a.0.0
                .cmp(&b.0.0)
                .then(a.0.1.cmp(&b.0.1))
                .then(fcmp(a.0.2, b.0.2))
        });
        let perm: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
        let copy: Vec<SNode> = perm.iter().map(|&i| nodes[i].clone()).collect();
        for (slot, n) in nodes.iter_mut().zip(copy) {
            *slot = n;
        }
    }

    /// Ray's `_select_nodes_to_terminate`: sorts `nodes` for termination, keeps the head,
    /// marks the first `count` others. Returns (terminated, remaining with the head last).
    fn select_to_terminate(
        &self,
        mut nodes: Vec<SNode>,
        count: usize,
        cause: TerminationCause,
    ) -> (Vec<SNode>, Vec<SNode>) {
        self.sort_for_termination(&mut nodes);
        let head = nodes.iter().position(|n| n.head).map(|i| nodes.remove(i));
        let count = count.min(nodes.len());
        let mut remaining = nodes.split_off(count);
        for n in nodes.iter_mut() {
            n.status = NodeStatus::ToTerminate;
            n.term = Some(cause);
        }
        remaining.extend(head);
        (nodes, remaining)
    }

    fn enforce_max_per_type(&mut self) {
        let all = std::mem::take(&mut self.nodes);
        let mut terminating = Vec::new();
        let mut groups: Vec<(usize, Vec<SNode>)> = Vec::new();
        for n in all {
            if n.status == NodeStatus::ToTerminate {
                terminating.push(n);
            } else {
                match groups.iter_mut().find(|(t, _)| *t == n.type_idx) {
                    Some((_, g)) => g.push(n),
                    None => groups.push((n.type_idx, vec![n])),
                }
            }
        }
        let mut kept = Vec::new();
        for (ti, g) in groups {
            let max = self.max_workers(ti);
            let extra = g.len() as i64 - max;
            if extra <= 0 {
                kept.extend(g);
                continue;
            }
            let (mut gone, remaining) =
                self.select_to_terminate(g, extra as usize, TerminationCause::MaxNumNodePerType);
            terminating.append(&mut gone);
            kept.extend(remaining);
        }
        terminating.extend(kept);
        self.nodes = terminating;
    }

    fn enforce_max_global(&mut self) {
        let Some(max) = self.req.max_num_nodes else {
            return;
        };
        let live_count = self
            .nodes
            .iter()
            .filter(|n| n.status != NodeStatus::ToTerminate)
            .count() as u64;
        // Ray skips the step when the cap is 0 (falsy) or not exceeded.
        if max == 0 || live_count <= max {
            return;
        }
        let all = std::mem::take(&mut self.nodes);
        let (mut terminating, live): (Vec<SNode>, Vec<SNode>) = all
            .into_iter()
            .partition(|n| n.status == NodeStatus::ToTerminate);
        let extra = (live_count - max) as usize;
        let (mut gone, remaining) =
            self.select_to_terminate(live, extra, TerminationCause::MaxNumNodes);
        terminating.append(&mut gone);
        terminating.extend(remaining);
        self.nodes = terminating;
    }

    fn enforce_idle_termination(&mut self) {
        let counts = self.count_by_type();
        let mut terminated = vec![0u64; self.type_names.len()];
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        let keys: Vec<(bool, i64, f64)> =
            self.nodes.iter().map(|n| self.termination_key(n)).collect();
        order.sort_by(|&a, &b| {
            let (ka, kb) = (&keys[a], &keys[b]);
            ka.0.cmp(&kb.0).then(ka.1.cmp(&kb.1)).then(fcmp(ka.2, kb.2))
        });
        for i in order {
            let n = &self.nodes[i];
            if n.status != NodeStatus::Schedulable || n.head {
                continue;
            }
            let pending = matches!(
                n.im_status,
                Some(InstanceStatus::Queued)
                    | Some(InstanceStatus::Allocated)
                    | Some(InstanceStatus::RayInstalling)
            );
            let timeout = if pending {
                // Ray's pending-node idle timeout is off unless an environment variable
                // sets it; rayscale's plan keeps it off.
                None
            } else if n.type_idx < self.n_config_types {
                self.req.node_types[n.type_idx]
                    .idle_timeout_s
                    .or(self.req.idle_timeout_s)
            } else {
                self.req.idle_timeout_s
            };
            let Some(timeout) = timeout else {
                continue;
            };
            if (n.idle_ms as f64) <= timeout * 1000.0 {
                continue;
            }
            if !n.sched[DEMAND].is_empty() || !n.sched[CONSTRAINT].is_empty() {
                continue;
            }
            let min = if n.type_idx < self.n_config_types {
                self.req.node_types[n.type_idx].min_workers
            } else {
                0
            };
            if counts[n.type_idx].saturating_sub(terminated[n.type_idx]) <= min {
                continue;
            }
            terminated[n.type_idx] += 1;
            let n = &mut self.nodes[i];
            n.status = NodeStatus::ToTerminate;
            n.term = Some(TerminationCause::Idle);
        }
    }

    // ------------------------------------------------------------------ placement

    /// Can `avail` hold one `shape` (resources only)?
    fn fits(&self, avail: &[(ResId, Fixed)], shape: &Shape) -> bool {
        shape.pos.iter().all(|&(k, v)| {
            let have = get(avail, k).unwrap_or(if self.implicit[k as usize] { ONE } else { 0 });
            v <= have
        })
    }

    /// How many `shape`s `avail` can hold (resources only); `u64::MAX` when unbounded.
    fn max_fit(&self, avail: &[(ResId, Fixed)], shape: &Shape) -> u64 {
        let mut best = u64::MAX;
        for &(k, v) in &shape.pos {
            let have = get(avail, k).unwrap_or(if self.implicit[k as usize] { ONE } else { 0 });
            let n = if have <= 0 { 0 } else { (have / v) as u64 };
            best = best.min(n);
        }
        best
    }

    fn subtract(&self, avail: &mut Vec<(ResId, Fixed)>, shape: &Shape, times: u64) {
        for &(k, v) in &shape.pos {
            let amount = v.saturating_mul(times as i128);
            match avail.iter_mut().find(|(r, _)| *r == k) {
                Some(e) => e.1 -= amount,
                // Only implicit resources can be missing here (fits() said so).
                None => avail.push((k, ONE - amount)),
            }
        }
    }

    fn selector_rank(labels: &[(String, String)], selectors: &[LabelSelector]) -> i64 {
        let n = selectors.len() as i64;
        for (i, sel) in selectors.iter().enumerate() {
            let ok = sel.constraints.iter().all(|c| {
                let v = label(labels, &c.key);
                match c.operator {
                    LabelOperator::In => v.is_some_and(|v| c.values.iter().any(|x| x == v)),
                    LabelOperator::NotIn => !v.is_some_and(|v| c.values.iter().any(|x| x == v)),
                    LabelOperator::Unspecified => false,
                }
            });
            if ok {
                return n - i as i64;
            }
        }
        0
    }

    /// Ray's `_try_schedule_one` for the first request of a run.
    fn try_one(&self, node: &mut SNode, sid: ShapeId, src: usize) -> bool {
        if !self.can_take(node, sid, src) {
            return false;
        }
        let shape = &self.shapes[sid as usize];
        self.subtract(&mut node.avail[src], shape, 1);
        for (name, value) in &shape.anti {
            if label(&node.labels, name).is_none() {
                Rc::make_mut(&mut node.labels).push((name.clone(), value.clone()));
            }
        }
        true
    }

    /// Could `node` take one request of shape `sid` (label selectors, anti-affinity,
    /// resources)? Does not change the node.
    fn can_take(&self, node: &SNode, sid: ShapeId, src: usize) -> bool {
        let shape = &self.shapes[sid as usize];
        if !shape.selectors.is_empty() && Self::selector_rank(&node.labels, &shape.selectors) == 0 {
            return false;
        }
        for (name, value) in &shape.anti {
            if label(&node.labels, name) == Some(value.as_str()) {
                return false;
            }
        }
        self.fits(&node.avail[src], shape)
    }

    fn push_sched(node: &mut SNode, src: usize, sid: ShapeId, k: u64) {
        match node.sched[src].last_mut() {
            Some(last) if last.0 == sid => last.1 += k,
            _ => node.sched[src].push((sid, k)),
        }
    }

    /// Ray's `try_schedule` of one node against the whole request list, on a copy.
    fn trial(&mut self, node: &SNode, runs: &[Run], src: usize) -> Option<Trial> {
        // Compatibility rule TERMINATING_CAPACITY: a node this pass terminates takes nothing.
        if node.status == NodeStatus::ToTerminate {
            return None;
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.failed.iter_mut().for_each(|s| *s = 0);
            self.stamp = 1;
        }
        // Until the first request lands the node does not change: find that request
        // without copying the node (most nodes of a busy cluster take nothing).
        let mut first = None;
        for (ri, run) in runs.iter().enumerate() {
            if run.count == 0 || self.failed[run.shape as usize] == self.stamp {
                continue;
            }
            if self.can_take(node, run.shape, src) {
                first = Some(ri);
                break;
            }
            self.failed[run.shape as usize] = self.stamp;
        }
        let first = first?;
        let mut n = node.clone();
        let mut taken = Vec::new();
        for (ri, run) in runs.iter().enumerate().skip(first) {
            if run.count == 0 || self.failed[run.shape as usize] == self.stamp {
                continue;
            }
            let shape = &self.shapes[run.shape as usize];
            let labels_before = n.labels.len();
            if !self.try_one(&mut n, run.shape, src) {
                self.failed[run.shape as usize] = self.stamp;
                continue;
            }
            let mut k = 1u64;
            if n.labels.len() > labels_before {
                // A label was added (anti-affinity): Ray clears its unschedulable cache, and
                // the same shape cannot land here again.
                self.stamp = self.stamp.wrapping_add(1);
                if self.stamp == 0 {
                    self.failed.iter_mut().for_each(|s| *s = 0);
                    self.stamp = 1;
                }
                if k < run.count {
                    self.failed[run.shape as usize] = self.stamp;
                }
            } else if k < run.count {
                let more = self.max_fit(&n.avail[src], shape).min(run.count - k);
                if more > 0 {
                    self.subtract(&mut n.avail[src], shape, more);
                    k += more;
                }
                if k < run.count {
                    self.failed[run.shape as usize] = self.stamp;
                }
            }
            Self::push_sched(&mut n, src, run.shape, k);
            taken.push((ri, k, run.count));
        }
        if taken.is_empty() {
            return None;
        }
        let score = self.score(&n, src);
        Some(Trial {
            taken,
            node: n,
            score,
        })
    }

    /// Ray's `_compute_score`.
    fn score(&self, n: &SNode, src: usize) -> Score {
        let sched = &n.sched[src];
        let mut labels = 0;
        for (sid, _) in sched {
            let r = Self::selector_rank(&n.labels, &self.shapes[*sid as usize].selectors);
            if r != 0 {
                labels = r;
                break;
            }
        }
        let mut types: Vec<ResId> = Vec::new();
        let mut any_gpu = false;
        for (sid, _) in sched {
            let s = &self.shapes[*sid as usize];
            any_gpu |= s.has_gpu_key;
            for (k, _) in &s.pos {
                if !types.contains(k) {
                    types.push(*k);
                }
            }
        }
        let matching = types
            .iter()
            .filter(|k| get(&n.total, **k).is_some())
            .count() as i64;
        let avail = &n.avail[src];
        let mut min_util = f64::INFINITY;
        let mut sum = 0.0f64;
        let mut cnt = 0usize;
        for &(k, t) in n.total.iter() {
            if t == 0 {
                continue;
            }
            if let Some(a) = get(avail, k) {
                let tf = to_f64(t);
                let util = (tf - to_f64(a)) / tf;
                let u = tf * util.powf(3.0);
                min_util = min_util.min(u);
                sum += u;
                cnt += 1;
            }
        }
        let (min_util, mean_util) = if cnt == 0 {
            (0.0, 0.0)
        } else {
            (min_util, sum / cnt as f64)
        };
        let is_gpu_node = self
            .gpu
            .and_then(|g| get(&n.total, g))
            .is_some_and(|v| v > 0);
        Score {
            labels,
            gpu_ok: !is_gpu_node || any_gpu,
            matching,
            min_util,
            mean_util,
        }
    }

    /// Better trial first: higher score, then higher type priority; exact ties keep the
    /// earlier node (returns `Less` when `a` should win).
    fn better(a: &Trial, b: &Trial) -> Ordering {
        b.score
            .cmp(&a.score)
            .then(b.node.priority.cmp(&a.node.priority))
    }

    /// Ray's `_try_schedule`: existing nodes first, then new ones. Returns the resulting
    /// node list (Ray's order) and what is left of the runs.
    fn try_schedule(
        &mut self,
        nodes: &[SNode],
        mut runs: Vec<Run>,
        src: usize,
    ) -> (Vec<Slot>, Vec<Run>) {
        // Ray's pre-filter: running nodes that cannot hold any one request go last.
        let mut shapes_pos: Vec<&[(ResId, Fixed)]> = Vec::new();
        for r in &runs {
            let p = self.shapes[r.shape as usize].pos.as_slice();
            if !shapes_pos.contains(&p) {
                shapes_pos.push(p);
            }
        }
        let implicit = &self.implicit;
        let can_fit_any = |avail: &[(ResId, Fixed)]| {
            shapes_pos.is_empty()
                || shapes_pos.iter().any(|pos| {
                    pos.iter().all(|&(k, v)| {
                        v <= get(avail, k).unwrap_or(if implicit[k as usize] { ONE } else { 0 })
                    })
                })
        };
        let mut exhausted = Vec::new();
        let mut existing = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if n.im_status == Some(InstanceStatus::RayRunning) && !can_fit_any(&n.avail[src]) {
                exhausted.push(Slot::Orig(i));
            } else {
                existing.push(i);
            }
        }

        let mut target = self.place_on_existing(nodes, existing, &mut runs, src);
        target.append(&mut exhausted);

        if let Some(chain) = self.chain.take() {
            self.expand_in_rounds(chain, nodes, &mut target, &mut runs, src);
            self.chain = Some(chain);
            return (target, runs);
        }

        // New nodes.
        let mut available = self.new_node_budget(nodes);
        let mut pool: Vec<usize> = (0..self.n_config_types)
            .filter(|t| available[*t] > 0)
            .collect();
        let mut cache: Vec<Option<Option<Trial>>> = vec![None; self.n_config_types];
        let fresh: Vec<SNode> = (0..self.n_config_types)
            .map(|t| self.node_from_config(t, NodeStatus::ToLaunch))
            .collect();
        while runs.iter().any(|r| r.count > 0) && !pool.is_empty() {
            if let Some(max) = self.req.max_num_nodes
                && target.len() as u64 >= max
            {
                break;
            }
            let mut best: Option<usize> = None;
            for (pi, &t) in pool.iter().enumerate() {
                let stale = match &cache[t] {
                    None => true,
                    Some(Some(tr)) => !tr.valid(&runs),
                    Some(None) => false,
                };
                if stale {
                    cache[t] = Some(self.trial(&fresh[t], &runs, src));
                }
                if let Some(Some(tr)) = &cache[t] {
                    let better = match best {
                        None => true,
                        Some(bi) => {
                            let Some(Some(b)) = &cache[pool[bi]] else {
                                unreachable!("best always has a trial")
                            };
                            Self::better(tr, b) == Ordering::Less
                        }
                    };
                    if better {
                        best = Some(pi);
                    }
                }
            }
            let Some(bi) = best else {
                break;
            };
            let t = pool.remove(bi);
            let Some(Some(tr)) = cache[t].clone() else {
                break;
            };
            for &(r, k, _) in &tr.taken {
                runs[r].count -= k;
            }
            target.push(Slot::New(tr.node));
            available[t] -= 1;
            if available[t] > 0 {
                pool.push(t);
            }
        }
        (target, runs)
    }

    /// New nodes chosen by the expander chain, in rounds: one option per node type that can
    /// hold some of the runs (as many nodes as the runs need, within limits), the chain picks
    /// one, its nodes are added, and the next round looks at what is left.
    fn expand_in_rounds(
        &mut self,
        chain: &mut ExpanderChain,
        nodes: &[SNode],
        target: &mut Vec<Slot>,
        runs: &mut Vec<Run>,
        src: usize,
    ) {
        struct Built {
            type_idx: usize,
            /// Distinct node fills, each repeated `m` times.
            patterns: Vec<(SNode, u64)>,
            runs_after: Vec<Run>,
            count: u64,
            score: Score,
        }
        let mut available = self.new_node_budget(nodes);
        let fresh: Vec<SNode> = (0..self.n_config_types)
            .map(|t| self.node_from_config(t, NodeStatus::ToLaunch))
            .collect();
        while runs.iter().any(|r| r.count > 0) {
            let global_left = match self.req.max_num_nodes {
                Some(max) => max.saturating_sub(target.len() as u64),
                None => u64::MAX,
            };
            if global_left == 0 {
                break;
            }
            let mut built: Vec<Built> = Vec::new();
            for (t, node) in fresh.iter().enumerate() {
                if available[t] <= 0 {
                    continue;
                }
                let cap = (available[t] as u64).min(global_left);
                let mut sim = runs.clone();
                let mut patterns = Vec::new();
                let mut count = 0u64;
                let mut score = None;
                while count < cap {
                    let Some(tr) = self.trial(node, &sim, src) else {
                        break;
                    };
                    // The same fill repeats on identical fresh nodes while every run it
                    // took from can give as much again.
                    let mut m = cap - count;
                    for &(_, k, c) in &tr.taken {
                        m = m.min(if k < c { c / k } else { 1 });
                    }
                    for &(r, k, _) in &tr.taken {
                        sim[r].count -= k * m;
                    }
                    score.get_or_insert(tr.score);
                    patterns.push((tr.node, m));
                    count += m;
                }
                if let Some(score) = score {
                    built.push(Built {
                        type_idx: t,
                        patterns,
                        runs_after: sim,
                        count,
                        score,
                    });
                }
            }
            if built.is_empty() {
                break;
            }
            // Ray's ranking of each option's first node: score, then priority, then order.
            let mut order: Vec<usize> = (0..built.len()).collect();
            order.sort_by(|&a, &b| {
                built[b]
                    .score
                    .cmp(&built[a].score)
                    .then(
                        fresh[built[b].type_idx]
                            .priority
                            .cmp(&fresh[built[a].type_idx].priority),
                    )
                    .then(a.cmp(&b))
            });
            let mut ray_rank = vec![0usize; built.len()];
            for (rank, &i) in order.iter().enumerate() {
                ray_rank[i] = rank;
            }
            let options: Vec<ExpansionOption> = built
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    self.option(
                        b.type_idx,
                        &b.patterns,
                        runs,
                        &b.runs_after,
                        b.count,
                        ray_rank[i],
                        src,
                        chain,
                    )
                })
                .collect();
            let pick = chain.choose(&options).min(built.len() - 1);
            let b = built.swap_remove(pick);
            for (node, m) in b.patterns {
                for _ in 1..m {
                    target.push(Slot::New(node.clone()));
                }
                target.push(Slot::New(node));
            }
            *runs = b.runs_after;
            available[b.type_idx] -= b.count as i64;
        }
    }

    /// Describes one option for the expanders.
    #[allow(clippy::too_many_arguments)]
    fn option(
        &self,
        type_idx: usize,
        patterns: &[(SNode, u64)],
        before: &[Run],
        after: &[Run],
        count: u64,
        ray_rank: usize,
        src: usize,
        chain: &ExpanderChain,
    ) -> ExpansionOption {
        let mut demands = Vec::new();
        let mut demand_count = 0;
        for (b, a) in before.iter().zip(after) {
            let held = b.count - a.count;
            if held > 0 {
                demands.push((self.shapes[b.shape as usize].request.clone(), held));
                demand_count += held;
            }
        }
        let mut total: Vec<(String, Fixed)> = Vec::new();
        let mut unused: Vec<(String, Fixed)> = Vec::new();
        let add = |acc: &mut Vec<(String, Fixed)>, items: &[(ResId, Fixed)], m: u64| {
            for &(k, v) in items {
                let name = &self.res_names[k as usize];
                let v = v * m as i128;
                match acc.iter_mut().find(|(n, _)| n == name) {
                    Some(e) => e.1 += v,
                    None => acc.push((name.clone(), v)),
                }
            }
        };
        for (node, m) in patterns {
            add(&mut total, &node.total, *m);
            add(&mut unused, &node.avail[src], *m);
        }
        let t = &self.req.node_types[type_idx];
        ExpansionOption {
            node_type: t.name.clone(),
            node_count: count,
            demands,
            demand_count,
            total: crate::model::ResourceMap(total),
            unused: crate::model::ResourceMap(unused),
            price: chain.price_of(&t.name).map(|p| p * count as f64),
            priority: t.priority,
            ray_rank,
        }
    }

    /// The existing-node half of `_try_schedule`: repeatedly the best node takes what it
    /// can. Returns the chosen nodes in order, then the untouched ones in order.
    fn place_on_existing(
        &mut self,
        nodes: &[SNode],
        existing: Vec<usize>,
        runs: &mut [Run],
        src: usize,
    ) -> Vec<Slot> {
        let idx = existing;
        let existing: Vec<&SNode> = idx.iter().map(|&i| &nodes[i]).collect();
        let n = existing.len();
        let mut alive = vec![true; n];
        // Ray evaluates only the first of identical non-running nodes (its NodeStateCache).
        let mut groups: HashMap<StateKey, VecDeque<usize>> = HashMap::new();
        let mut eligible = vec![true; n];
        for (i, node) in existing.iter().enumerate() {
            // Nodes being terminated take nothing and never hide an identical live node.
            if node.status == NodeStatus::ToTerminate {
                eligible[i] = false;
                continue;
            }
            if node.im_status != Some(InstanceStatus::RayRunning) {
                let q = groups.entry(state_key(node, src)).or_default();
                if !q.is_empty() {
                    eligible[i] = false;
                }
                q.push_back(i);
            }
        }
        let mut trials: Vec<Option<Option<Trial>>> = vec![None; n];
        // Generation of each node's current trial, to recognise stale heap entries.
        let mut generation: Vec<u32> = vec![0; n];
        // Per run, the trials that took from it, keyed by the run count below which the
        // trial no longer holds (see `Trial::valid`): the top is the first to break.
        let mut watchers: Vec<std::collections::BinaryHeap<(u64, usize, u32)>> =
            vec![std::collections::BinaryHeap::new(); runs.len()];
        let mut best_set: std::collections::BTreeSet<Ranked> = std::collections::BTreeSet::new();
        let mut dirty: Vec<usize> = (0..n).filter(|i| eligible[*i]).collect();
        let mut picked = Vec::new();
        while runs.iter().any(|r| r.count > 0) {
            for i in dirty.drain(..) {
                if !alive[i] || !eligible[i] {
                    continue;
                }
                let t = self.trial(existing[i], runs, src);
                generation[i] = generation[i].wrapping_add(1);
                if let Some(tr) = &t {
                    for &(r, k, c) in &tr.taken {
                        let threshold = if k < c { k } else { c };
                        watchers[r].push((threshold, i, generation[i]));
                    }
                    best_set.insert(Ranked {
                        score: tr.score,
                        priority: tr.node.priority,
                        pos: i,
                    });
                }
                trials[i] = Some(t);
            }
            let Some(top) = best_set.iter().next().cloned() else {
                break;
            };
            best_set.remove(&top);
            let i = top.pos;
            let Some(Some(tr)) = trials[i].take() else {
                break;
            };
            alive[i] = false;
            for &(r, k, _) in &tr.taken {
                runs[r].count -= k;
            }
            // The next identical non-running node becomes the one Ray evaluates.
            if existing[i].im_status != Some(InstanceStatus::RayRunning)
                && existing[i].status != NodeStatus::ToTerminate
            {
                let key = state_key(existing[i], src);
                if let Some(q) = groups.get_mut(&key) {
                    q.retain(|&j| j != i);
                    if let Some(&j) = q.front()
                        && !eligible[j]
                    {
                        eligible[j] = true;
                        dirty.push(j);
                    }
                }
            }
            // Trials that took from a changed run and no longer hold are redone.
            for &(r, _, _) in &tr.taken {
                let now = runs[r].count;
                while let Some(&(threshold, j, g)) = watchers[r].peek() {
                    if threshold <= now {
                        break;
                    }
                    watchers[r].pop();
                    if !alive[j] || generation[j] != g {
                        continue;
                    }
                    if let Some(Some(tj)) = &trials[j] {
                        best_set.remove(&Ranked {
                            score: tj.score,
                            priority: tj.node.priority,
                            pos: j,
                        });
                        trials[j] = None;
                        generation[j] = generation[j].wrapping_add(1);
                        dirty.push(j);
                    }
                }
            }
            picked.push((i, tr.node));
        }
        let mut out: Vec<Slot> = picked.into_iter().map(|(_, n)| Slot::New(n)).collect();
        for (k, &i) in idx.iter().enumerate() {
            if alive[k] {
                out.push(Slot::Orig(i));
            }
        }
        out
    }
}

/// One node of a placement pass's result: an untouched node of the input (by index) or a
/// new or changed one.
enum Slot {
    Orig(usize),
    New(SNode),
}

/// The node list a placement pass produced, taking untouched nodes from `nodes`.
fn materialize(nodes: Vec<SNode>, slots: Vec<Slot>) -> Vec<SNode> {
    let mut nodes: Vec<Option<SNode>> = nodes.into_iter().map(Some).collect();
    slots
        .into_iter()
        .filter_map(|s| match s {
            Slot::Orig(i) => nodes[i].take(),
            Slot::New(n) => Some(n),
        })
        .collect()
}

/// Ray's NodeStateCache key (type, kind, total, available for the source, labels), as
/// order-insensitive sorted vectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StateKey {
    type_idx: usize,
    head: bool,
    total: Vec<(ResId, Fixed)>,
    avail: Vec<(ResId, Fixed)>,
    labels: Vec<(String, String)>,
}

fn state_key(n: &SNode, src: usize) -> StateKey {
    let mut total = n.total.to_vec();
    total.sort_unstable();
    let mut avail = n.avail[src].clone();
    avail.sort_unstable();
    let mut labels = n.labels.to_vec();
    labels.sort_unstable();
    StateKey {
        type_idx: n.type_idx,
        head: n.head,
        total,
        avail,
        labels,
    }
}

/// A candidate in the best-first set: greatest score, then priority, then earliest node.
#[derive(Debug, Clone, Copy)]
struct Ranked {
    score: Score,
    priority: i64,
    pos: usize,
}

impl PartialEq for Ranked {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ranked {
    fn cmp(&self, o: &Self) -> Ordering {
        o.score
            .cmp(&self.score)
            .then(o.priority.cmp(&self.priority))
            .then(self.pos.cmp(&o.pos))
    }
}

/// Ray's `combine_requests_with_affinity`: requests sharing an affinity constraint (and
/// label selectors) become one request with the summed resources, placed after the others.
fn combine_affinity(requests: &[ResourceRequest]) -> Vec<ResourceRequest> {
    let mut out: Vec<ResourceRequest> = Vec::new();
    let mut groups: Vec<(AffinityKey, ResourceRequest)> = Vec::new();
    for r in requests {
        match r.placement_constraints.first() {
            Some(PlacementConstraint::Affinity {
                label_name,
                label_value,
            }) => {
                let key = (
                    label_name.clone(),
                    label_value.clone(),
                    r.label_selectors.clone(),
                );
                match groups.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, combined)) => {
                        for (name, v) in &r.resources.0 {
                            match combined.resources.0.iter_mut().find(|(n, _)| n == name) {
                                Some(e) => e.1 += *v,
                                None => combined.resources.0.push((name.clone(), *v)),
                            }
                        }
                    }
                    None => {
                        let combined = ResourceRequest {
                            resources: r.resources.clone(),
                            placement_constraints: vec![PlacementConstraint::Affinity {
                                label_name: label_name.clone(),
                                label_value: label_value.clone(),
                            }],
                            label_selectors: r.label_selectors.clone(),
                        };
                        groups.push((key, combined));
                    }
                }
            }
            Some(PlacementConstraint::AntiAffinity { .. }) | None => out.push(r.clone()),
            // A constraint with neither field: Ray drops such a request from the gang.
            Some(PlacementConstraint::Empty) => {}
        }
    }
    out.extend(groups.into_iter().map(|(_, r)| r));
    out
}
