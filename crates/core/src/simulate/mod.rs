//! `rayscale simulate`: a discrete-event simulation, in virtual time, of the real
//! reconciler and scheduler ([`crate::reconciler::reconcile`] with the config's expander
//! chain) against a simulated cloud (boot time, boot failures and capacity errors per node
//! type, seeded) and a workload trace ([`trace`]), stepping at the autoscaler's period.
//!
//! What it models, and how simply: Ray's placement of work on nodes is first-fit in node
//! order (tasks and actors by shape; a placement group all bundles at once, STRICT_SPREAD on
//! distinct nodes, STRICT_PACK on one); actors are demand that lasts; a node drained while
//! busy hands its work back to the queue (it starts again); instances are billed from
//! launch to termination. A spot type's running instances get a preemption notice after
//! an exponentially drawn time (`preemption_mean_s`): Ray drains the node (nothing new is
//! placed there; the reconciler is told as a watcher tells it, with the deadline), and at
//! the end of the notice window the cloud takes the instance: the work still on it goes
//! back to the queue, and what it had done is counted as work lost. Pure: no clock, no I/O; the same inputs give the same result.

mod cluster;
pub mod plot;
pub mod trace;

use std::collections::BTreeMap;

use crate::availability::{Availability, DEFAULT_RECOVERY_S};
use crate::config::ClusterConfig;
use crate::error::CoreError;
use crate::expander::{ExpanderChain, SeededRng};
use crate::instance::{InMemoryStorage, InstanceManager};
use crate::model::{
    ClusterResourceState, GangRequest, NodeState, NodeStatus, PlacementConstraint, ResourceMap,
    ResourceRequest, ResourceRequestByCount,
};
use crate::provider::{
    CloudInstance, CloudInstanceState, ProviderError, ProviderErrorKind, ProviderOp,
};
use crate::reconciler::{
    DrainRejection, Effect, IdSource, Observed, ReconcilerSettings, reconcile,
};
use crate::scheduler::request::HEAD_MARKER;

pub use trace::{Arrival, Kind, Strategy, Trace};

const EPS: f64 = 1e-9;
const NS: f64 = 1e9;
/// Where the simulated clock starts (ns since the epoch; any fixed value).
const START_NS: i64 = 1_800_000_000_000_000_000;

type Shape = BTreeMap<String, f64>;

/// One sample of the series (taken after each iteration).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds from the start.
    pub t_s: f64,
    /// Live instances (booting or running) per worker node type.
    pub nodes: BTreeMap<String, u64>,
    /// Units of work waiting (tasks, actors, placement groups).
    pub pending: u64,
    /// Cost so far.
    pub cost: f64,
}

/// What one node type cost and did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeSummary {
    /// Instance-hours billed.
    pub node_hours: f64,
    /// Their cost.
    pub cost: f64,
    /// Instances launched.
    pub launched: u64,
    /// Launch requests that met a capacity error.
    pub capacity_errors: u64,
    /// Instances that died while booting.
    pub boot_failures: u64,
}

/// The summary of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Simulated seconds.
    pub end_s: f64,
    /// Per worker node type.
    pub types: BTreeMap<String, TypeSummary>,
    /// Total cost.
    pub cost: f64,
    /// Time from arrival to placement (s), per unit of work: p50, p90, p99, max.
    pub wait_p50_s: f64,
    /// See `wait_p50_s`.
    pub wait_p90_s: f64,
    /// See `wait_p50_s`.
    pub wait_p99_s: f64,
    /// See `wait_p50_s`.
    pub wait_max_s: f64,
    /// The area under the pending-work curve (unit-seconds).
    pub pending_area: f64,
    /// Units of work placed.
    pub placed: u64,
    /// Units never placed by the end.
    pub unplaced: u64,
    /// Launch effects (requests) and instances terminated.
    pub launch_requests: u64,
    /// See `launch_requests`.
    pub terminated: u64,
    /// Drains a busy node refused.
    pub drains_refused: u64,
    /// Preemption notices (spot instances the cloud took back).
    pub preemptions: u64,
    /// Work lost to preemptions: unit-seconds done on a node before the cloud took it
    /// (run again).
    pub work_lost_unit_s: f64,
    /// Nodes drained by consolidation (`rayscale.consolidation`).
    pub consolidations: u64,
    /// Work consolidation ran again: unit-seconds done on a drained node before its
    /// deadline ended it.
    pub consolidation_rerun_unit_s: f64,
    /// When autostop had stopped every worker (`rayscale.autostop_minutes`), if it did.
    pub autostopped_at_s: Option<f64>,
    /// Iterations run.
    pub iterations: u64,
}

/// A run: its series and summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// One sample per iteration.
    pub series: Vec<Sample>,
    /// The summary.
    pub summary: Summary,
}

/// Resolved behaviour of a node type.
#[derive(Debug, Clone, Copy)]
struct Behaviour {
    boot_s: f64,
    failure_rate: f64,
    capacity_error_rate: f64,
    capacity: Option<u64>,
    price: f64,
    preemption_mean_s: Option<f64>,
    notice_s: f64,
}

#[derive(Debug)]
struct Vm {
    id: String,
    node_type: String,
    request_id: String,
    hash: String,
    launched_s: f64,
    ready_s: f64,
    /// Index of its Ray node once it runs.
    node: Option<usize>,
}

#[derive(Debug)]
struct Node {
    id: Vec<u8>,
    instance_id: String,
    node_type: String,
    total: Shape,
    avail: Shape,
    running: u64,
    idle_since_s: f64,
    alive: bool,
    /// When the cloud's preemption notice comes (spot types).
    notice_at_s: Option<f64>,
    /// Draining on a notice: the cloud takes the instance at this time.
    taken_at_s: Option<f64>,
    /// Drained with a deadline (consolidation): no new work; what runs there runs on
    /// until the instance is terminated.
    draining: bool,
}

impl Node {
    /// Whether Ray may place new work on it.
    fn open(&self) -> bool {
        self.alive && self.taken_at_s.is_none() && !self.draining
    }
}

/// Work waiting: `count` units of one shape (or one placement group).
#[derive(Debug, Clone)]
struct Waiting {
    arrived_s: f64,
    duration_s: f64,
    count: u64,
    shape: Shape,
    /// A placement group: its bundles, strategy and id.
    gang: Option<(Vec<Shape>, Strategy, u64)>,
}

/// Work placed: what it holds where, until `end_s`.
#[derive(Debug)]
struct Placed {
    end_s: f64,
    holds: Vec<(usize, Shape)>,
    /// Its entry in the wait times (taken back if it is handed back to the queue).
    wait: usize,
    /// To hand back if its node is stopped.
    again: Waiting,
}

struct Ids(u64);

impl IdSource for Ids {
    fn instance_id(&mut self) -> String {
        self.0 += 1;
        format!("im-{:06}", self.0)
    }
    fn request_id(&mut self) -> String {
        self.0 += 1;
        format!("lr-{:06}", self.0)
    }
}

fn fits(avail: &Shape, need: &Shape) -> bool {
    need.iter()
        .all(|(k, v)| avail.get(k).is_some_and(|a| *a + EPS >= *v))
}

fn take(avail: &mut Shape, need: &Shape) {
    for (k, v) in need {
        if let Some(a) = avail.get_mut(k) {
            *a -= v;
        }
    }
}

fn give(avail: &mut Shape, need: &Shape) {
    for (k, v) in need {
        *avail.entry(k.clone()).or_default() += v;
    }
}

/// How many of `need` fit in `avail`.
fn how_many(avail: &Shape, need: &Shape) -> u64 {
    need.iter()
        .map(|(k, v)| {
            let a = avail.get(k).copied().unwrap_or(0.0);
            ((a + EPS) / v).floor().max(0.0) as u64
        })
        .min()
        .unwrap_or(0)
}

/// A node type's configured resources (none for a type the config lacks).
fn type_shape(config: &ClusterConfig, node_type: &str) -> Shape {
    config
        .node_type(node_type)
        .map(|t| {
            t.resources
                .0
                .iter()
                .map(|(k, v)| (k.to_string(), crate::model::resources::to_f64(*v)))
                .collect()
        })
        .unwrap_or_default()
}

fn resource_map(s: &Shape) -> ResourceMap {
    ResourceMap::from_f64_pairs(s.iter().map(|(k, v)| (k.clone(), *v)))
}

/// Weighted percentile of (value, weight) pairs sorted by value.
fn percentile(sorted: &[(f64, u64)], q: f64) -> f64 {
    let total: u64 = sorted.iter().map(|(_, w)| w).sum();
    if total == 0 {
        return 0.0;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (v, w) in sorted {
        seen += w;
        if seen >= rank {
            return *v;
        }
    }
    sorted.last().map_or(0.0, |(v, _)| *v)
}

/// The simulation of one config on one trace.
pub struct Sim<'a> {
    config: &'a ClusterConfig,
    trace: &'a Trace,
    behaviour: BTreeMap<String, Behaviour>,
    rng: SeededRng,
    t_s: f64,
    vms: Vec<Vm>,
    nodes: Vec<Node>,
    waiting: Vec<Waiting>,
    placed: Vec<Placed>,
    arrivals: Vec<(f64, usize)>,
    next_arrival: usize,
    errors: Vec<ProviderError>,
    rejections: Vec<DrainRejection>,
    next_vm: u64,
    next_pg: u64,
    waits: Vec<(f64, u64)>,
    summary: Summary,
}

impl<'a> Sim<'a> {
    /// A simulation of `config` (with `chain`'s prices as the default prices) on `trace`.
    pub fn new(config: &'a ClusterConfig, chain: &ExpanderChain, trace: &'a Trace) -> Self {
        let mut behaviour = BTreeMap::new();
        for t in &config.node_types {
            let own = trace.cloud.types.get(&t.name);
            let d = &trace.cloud.default;
            let pick = |f: fn(&trace::TypeModel) -> Option<f64>| own.and_then(f).or_else(|| f(d));
            behaviour.insert(
                t.name.clone(),
                Behaviour {
                    boot_s: pick(|m| m.boot_s).unwrap_or(60.0),
                    failure_rate: pick(|m| m.failure_rate).unwrap_or(0.0),
                    capacity_error_rate: pick(|m| m.capacity_error_rate).unwrap_or(0.0),
                    capacity: own.and_then(|m| m.capacity).or(d.capacity),
                    price: pick(|m| m.price_per_hour)
                        .or_else(|| chain.price_of(&t.name))
                        .unwrap_or(0.0),
                    preemption_mean_s: pick(|m| m.preemption_mean_s),
                    notice_s: pick(|m| m.notice_s).unwrap_or(30.0),
                },
            );
        }
        let mut arrivals: Vec<(f64, usize)> = Vec::new();
        for (i, a) in trace.workload.iter().enumerate() {
            for r in 0..a.repeat.max(1) {
                arrivals.push((a.at_s + r as f64 * a.every_s, i));
            }
        }
        arrivals.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        // The head: a Ray node of the head type, never a cloud instance of the loop's.
        let head_type = config
            .head_node_type
            .clone()
            .unwrap_or_else(|| "head".into());
        let mut head_total = type_shape(config, &head_type);
        head_total.insert(HEAD_MARKER.into(), 1.0);
        Sim {
            config,
            trace,
            behaviour,
            rng: SeededRng::new(trace.seed),
            t_s: 0.0,
            vms: Vec::new(),
            nodes: vec![Node {
                id: vec![0; 4],
                instance_id: "head".into(),
                node_type: head_type,
                avail: head_total.clone(),
                total: head_total,
                running: 0,
                idle_since_s: 0.0,
                alive: true,
                notice_at_s: None,
                taken_at_s: None,
                draining: false,
            }],
            waiting: Vec::new(),
            placed: Vec::new(),
            arrivals,
            next_arrival: 0,
            errors: Vec::new(),
            rejections: Vec::new(),
            next_vm: 0,
            next_pg: 0,
            waits: Vec::new(),
            summary: Summary::default(),
        }
    }

    fn behaviour(&self, node_type: &str) -> Behaviour {
        self.behaviour.get(node_type).copied().unwrap_or(Behaviour {
            boot_s: 60.0,
            failure_rate: 0.0,
            capacity_error_rate: 0.0,
            capacity: None,
            price: 0.0,
            preemption_mean_s: None,
            notice_s: 30.0,
        })
    }

    /// Arrivals up to now join the queue.
    fn arrive(&mut self) {
        while let Some(&(at, i)) = self.arrivals.get(self.next_arrival) {
            if at > self.t_s + EPS {
                break;
            }
            self.next_arrival += 1;
            let a = &self.trace.workload[i];
            match a.kind {
                Kind::PlacementGroup => {
                    for _ in 0..a.count {
                        self.next_pg += 1;
                        self.waiting.push(Waiting {
                            arrived_s: at,
                            duration_s: a.duration_s,
                            count: 1,
                            shape: Shape::new(),
                            gang: Some((a.bundles.clone(), a.strategy(), self.next_pg)),
                        });
                    }
                }
                Kind::Task | Kind::Actor => self.waiting.push(Waiting {
                    arrived_s: at,
                    duration_s: a.duration_s,
                    count: a.count,
                    shape: a.resources.clone(),
                    gang: None,
                }),
            }
        }
    }

    /// Booted instances join as Ray nodes (or die booting); finished work frees its nodes.
    fn progress(&mut self) {
        let t = self.t_s;
        let mut died = Vec::new();
        for i in 0..self.vms.len() {
            let v = &self.vms[i];
            if v.node.is_some() || v.ready_s > t + EPS {
                continue;
            }
            let b = self.behaviour(&v.node_type);
            if b.failure_rate > 0.0 && self.rng.next_f64() < b.failure_rate {
                died.push(self.vms[i].id.clone());
                continue;
            }
            let v = &self.vms[i];
            let total = type_shape(self.config, &v.node_type);
            let n = self.nodes.len() as u32;
            let (id, node_type) = (v.id.clone(), v.node_type.clone());
            // Spot: when its notice comes (exponential, drawn once per instance).
            let notice_at_s = b
                .preemption_mean_s
                .map(|mean| t - mean * (1.0 - self.rng.next_f64()).ln());
            self.nodes.push(Node {
                id: n.to_be_bytes().to_vec(),
                instance_id: id,
                node_type,
                avail: total.clone(),
                total,
                running: 0,
                idle_since_s: t,
                alive: true,
                notice_at_s,
                taken_at_s: None,
                draining: false,
            });
            self.vms[i].node = Some(self.nodes.len() - 1);
        }
        for id in died {
            if let Some(i) = self.vms.iter().position(|v| v.id == id) {
                let v = self.vms.remove(i);
                self.bill(&v);
                if let Some(s) = self.summary.types.get_mut(&v.node_type) {
                    s.boot_failures += 1;
                }
                self.errors.push(ProviderError::new(
                    ProviderOp::Instance {
                        cloud_instance_id: v.id.clone(),
                        request_id: Some(v.request_id.clone()),
                        node_type: v.node_type.clone(),
                    },
                    ProviderErrorKind::Transient,
                    "simulated: the instance died while booting",
                ));
            }
        }
        let mut i = 0;
        while i < self.placed.len() {
            if self.placed[i].end_s <= t + EPS {
                let p = self.placed.swap_remove(i);
                self.release(&p);
            } else {
                i += 1;
            }
        }
        self.preempt();
    }

    /// Notices that came (the node drains) and instances the cloud takes.
    fn preempt(&mut self) {
        let t = self.t_s;
        let mut taken = Vec::new();
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            if !node.alive {
                continue;
            }
            if node.taken_at_s.is_none()
                && let Some(at) = node.notice_at_s
                && at <= t + EPS
            {
                let notice = self.behaviour(&node.node_type).notice_s;
                self.nodes[n].taken_at_s = Some(at + notice);
                self.summary.preemptions += 1;
            }
            if self.nodes[n].taken_at_s.is_some_and(|at| at <= t + EPS) {
                taken.push(n);
            }
        }
        for n in taken {
            // The work on it is lost: what it had done is run again.
            for p in self
                .placed
                .iter()
                .filter(|p| p.holds.iter().any(|(m, _)| *m == n))
            {
                let started = p.end_s - p.again.duration_s;
                self.summary.work_lost_unit_s += (t - started).max(0.0) * p.again.count as f64;
            }
            let id = self.nodes[n].instance_id.clone();
            if let Some(i) = self.vms.iter().position(|v| v.id == id) {
                let v = self.vms.remove(i);
                self.bill(&v);
            }
            self.stop_node(n);
        }
    }

    /// The notices of draining nodes, as the workers' watchers leave them.
    fn notices(&self) -> Vec<crate::preemption::Notice> {
        self.nodes
            .iter()
            .filter(|n| n.alive)
            .filter_map(|n| {
                Some(crate::preemption::Notice {
                    cloud_instance_id: n.instance_id.clone(),
                    source: "simulated".into(),
                    deadline_ns: Some(START_NS + (n.taken_at_s? * NS) as i64),
                    message: "simulated preemption".into(),
                })
            })
            .collect()
    }

    fn release(&mut self, p: &Placed) {
        let t = self.t_s;
        for (n, shape) in &p.holds {
            let node = &mut self.nodes[*n];
            give(&mut node.avail, shape);
            node.running = node.running.saturating_sub(1);
            if node.running == 0 {
                node.idle_since_s = t;
            }
        }
    }

    /// Places waiting work, first fit in node order.
    fn place(&mut self) {
        let t = self.t_s;
        let waiting = std::mem::take(&mut self.waiting);
        for mut w in waiting {
            match w.gang.clone() {
                None => {
                    let mut left = w.count;
                    for n in 0..self.nodes.len() {
                        if left == 0 {
                            break;
                        }
                        // Ray places nothing new on a draining node.
                        if !self.nodes[n].open() {
                            continue;
                        }
                        let k = how_many(&self.nodes[n].avail, &w.shape).min(left);
                        if k > 0 {
                            self.waits.push((t - w.arrived_s, k));
                        }
                        let wait = self.waits.len().saturating_sub(1);
                        for _ in 0..k {
                            take(&mut self.nodes[n].avail, &w.shape);
                            self.nodes[n].running += 1;
                            self.placed.push(Placed {
                                end_s: t + w.duration_s,
                                holds: vec![(n, w.shape.clone())],
                                wait,
                                again: Waiting {
                                    count: 1,
                                    ..w.clone()
                                },
                            });
                        }
                        left -= k;
                    }
                    let placed = w.count - left;
                    self.summary.placed += placed;
                    if left > 0 {
                        w.count = left;
                        self.waiting.push(w);
                    }
                }
                Some((bundles, strategy, _)) => {
                    if let Some(holds) = self.fit_gang(&bundles, strategy) {
                        for (n, b) in &holds {
                            take(&mut self.nodes[*n].avail, b);
                            self.nodes[*n].running += 1;
                        }
                        self.waits.push((t - w.arrived_s, 1));
                        self.summary.placed += 1;
                        self.placed.push(Placed {
                            end_s: t + w.duration_s,
                            holds,
                            wait: self.waits.len() - 1,
                            again: w,
                        });
                    } else {
                        self.waiting.push(w);
                    }
                }
            }
        }
    }

    fn fit_gang(&self, bundles: &[Shape], strategy: Strategy) -> Option<Vec<(usize, Shape)>> {
        let alive: Vec<usize> = (0..self.nodes.len())
            .filter(|n| self.nodes[*n].open())
            .collect();
        if strategy == Strategy::StrictPack {
            let mut sum = Shape::new();
            for b in bundles {
                give(&mut sum, b);
            }
            return alive
                .iter()
                .find(|n| fits(&self.nodes[**n].avail, &sum))
                .map(|n| bundles.iter().map(|b| (*n, b.clone())).collect());
        }
        let mut avail: BTreeMap<usize, Shape> = alive
            .iter()
            .map(|n| (*n, self.nodes[*n].avail.clone()))
            .collect();
        let mut used: Vec<usize> = Vec::new();
        let mut holds = Vec::new();
        for b in bundles {
            let n = alive.iter().copied().find(|n| {
                (strategy != Strategy::StrictSpread || !used.contains(n))
                    && avail.get(n).is_some_and(|a| fits(a, b))
            })?;
            if let Some(a) = avail.get_mut(&n) {
                take(a, b);
            }
            used.push(n);
            holds.push((n, b.clone()));
        }
        Some(holds)
    }

    fn done(&self, min_workers: u64) -> bool {
        self.next_arrival >= self.arrivals.len()
            && self.waiting.is_empty()
            && self.placed.is_empty()
            && self.vms.len() as u64 <= min_workers
    }

    /// Runs to the end; errors are the reconciler's.
    pub fn run(mut self, chain: &mut ExpanderChain) -> Result<Run, CoreError> {
        let mut im = InstanceManager::new(InMemoryStorage::new());
        let settings = ReconcilerSettings::from_config(self.config);
        let mut avail = Availability::new(self.config.unavailable_type_ttl_s, DEFAULT_RECOVERY_S);
        let mut ids = Ids(0);
        let step = self.trace.step_s;
        let min_workers: u64 = self.config.node_types.iter().map(|t| t.min_workers).sum();
        let cap = self.trace.end_s.unwrap_or(86_400.0);
        let mut series = Vec::new();
        let mut cost = 0.0;
        loop {
            self.arrive();
            self.progress();
            self.place();
            let ray = self.ray_state();
            let cloud = self.cloud();
            let errors = std::mem::take(&mut self.errors);
            let rejections = std::mem::take(&mut self.rejections);
            let notices = self.notices();
            let now_ns = START_NS + (self.t_s * NS) as i64;
            let out = reconcile(
                &mut im,
                self.config,
                chain,
                &settings,
                &mut avail,
                Observed {
                    ray: &ray,
                    cloud: &cloud,
                    provider_errors: &errors,
                    drain_rejections: &rejections,
                    notices: &notices,
                },
                now_ns,
                &mut ids,
            )?;
            self.summary.iterations += 1;
            if let Some(d) = &out.decision {
                self.summary.consolidations += d
                    .terminate
                    .iter()
                    .filter(|t| t.cause == crate::scheduler::TerminationCause::Consolidation)
                    .count() as u64;
            }
            if out.autostop.as_ref().is_some_and(|a| a.head_due) {
                self.summary.autostopped_at_s.get_or_insert(self.t_s);
            }
            self.apply(&out.effects);
            let _ = im.prune_terminal(now_ns.saturating_sub(3600 * 1_000_000_000));
            // The sample after the iteration's effects.
            let mut nodes: BTreeMap<String, u64> = self
                .config
                .node_types
                .iter()
                .filter(|t| Some(&t.name) != self.config.head_node_type.as_ref())
                .map(|t| (t.name.clone(), 0))
                .collect();
            for v in &self.vms {
                *nodes.entry(v.node_type.clone()).or_default() += 1;
            }
            let pending: u64 = self.waiting.iter().map(|w| w.count).sum();
            series.push(Sample {
                t_s: self.t_s,
                nodes,
                pending,
                cost,
            });
            let end = self
                .trace
                .end_s
                .map_or(self.done(min_workers), |e| self.t_s + EPS >= e)
                || self.t_s + EPS >= cap;
            if end {
                break;
            }
            // The next step: what runs meanwhile is billed, what waits is counted.
            for v in &self.vms {
                cost += step / 3600.0 * self.behaviour(&v.node_type).price;
            }
            self.summary.pending_area += pending as f64 * step;
            // From the step count, not by adding: no drift over a long run.
            self.t_s = self.summary.iterations as f64 * step;
        }
        // Bill what still runs.
        let vms = std::mem::take(&mut self.vms);
        for v in &vms {
            self.bill(v);
        }
        let mut waits = std::mem::take(&mut self.waits);
        waits.sort_by(|a, b| a.0.total_cmp(&b.0));
        let s = &mut self.summary;
        s.end_s = self.t_s;
        s.cost = s.types.values().map(|t| t.cost).sum();
        s.wait_p50_s = percentile(&waits, 0.50);
        s.wait_p90_s = percentile(&waits, 0.90);
        s.wait_p99_s = percentile(&waits, 0.99);
        s.wait_max_s = waits.last().map_or(0.0, |w| w.0);
        s.unplaced = self.waiting.iter().map(|w| w.count).sum();
        Ok(Run {
            series,
            summary: self.summary,
        })
    }
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
