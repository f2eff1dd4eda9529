//! Trials of the existing-node pass on dense availability.
//!
//! Where no run has label selectors or anti-affinity, a trial reads nothing of a node but
//! its availability of the resources the runs ask for (the pass's dimensions); its score
//! reads, beyond that, what the pass never changes (the node's total, labels and earlier
//! placements). Both are laid out once per pass, per node, in flat arrays, so each of the
//! many trials of a big cluster is a short loop over small numbers. The result is the
//! sparse trial's exactly: the crate's tests (release ones too) and debug builds check every
//! dense trial against it, and a property test compares whole passes.

use super::pack::{Utilisation, util_term};
use super::*;

/// Most dimensions a dense pass has (shapes asking for many distinct resources, such as
/// `node:<ip>` ones, keep the sparse trial).
const MAX_DIMS: usize = 16;

/// One term of a node's utilisation sum, in the order of its total map (Ray sums them in
/// that order, so the order is kept).
#[derive(Debug, Clone, Copy)]
enum Term {
    /// A dimension: its index and the node's total of it.
    Dim(usize, f64),
    /// A resource no run asks for: its (unchanging) `total * util^3`.
    Fixed(f64),
}

/// What a node's score reads that its trials do not change.
#[derive(Debug, Clone, Copy)]
struct NodeConst {
    /// The selector rank of the first of its earlier placements whose selectors it meets.
    labels: i64,
    /// Its earlier placements name `GPU`.
    any_gpu: bool,
    /// It has GPUs.
    gpu_node: bool,
    /// Dimensions in its total map, and those its earlier placements ask for.
    total_dims: u16,
    placed_dims: u16,
    /// Resources of its total, not dimensions, that its earlier placements ask for.
    placed_other: i64,
    /// Dimensions its availability map holds.
    present: u16,
    /// Its terms: `terms[first..first + len]`.
    first: usize,
    len: usize,
}

/// The runs and nodes of one existing-node pass, laid out for dense trials.
pub(super) struct Dense {
    dims: Vec<ResId>,
    /// Per run, its shape's amount of each dimension (`runs × dims`, row by row), in
    /// fixed-point units as `i64` (a pass with a larger amount keeps the sparse trial).
    req: Vec<i64>,
    /// Per run, the dimensions its shape asks for, and whether it names `GPU`.
    run_dims: Vec<u16>,
    run_gpu: Vec<bool>,
    /// Per node (as indexed in the pass), its availability of each dimension
    /// (`nodes × dims`; a missing implicit resource counts 1, another missing one 0), as
    /// `i64` like `req`.
    avail: Vec<i64>,
    nodes: Vec<NodeConst>,
    terms: Vec<Term>,
    /// Scratch: one trial's availability.
    scratch: Vec<i64>,
}

impl Dense {
    /// The layout of `runs` and `nodes` (the pass's nodes, for source `src`), or `None`
    /// when the runs need the sparse trial.
    pub(super) fn new(e: &Engine<'_>, runs: &[Run], nodes: &[&SNode], src: usize) -> Option<Dense> {
        let mut dims: Vec<ResId> = Vec::new();
        for r in runs {
            let shape = &e.shapes[r.shape as usize];
            if !shape.selectors.is_empty() || !shape.anti.is_empty() {
                return None;
            }
            for &(k, _) in &shape.pos {
                if !dims.contains(&k) {
                    if dims.len() == MAX_DIMS {
                        return None;
                    }
                    dims.push(k);
                }
            }
        }
        let dim = |k: ResId| dims.iter().position(|d| *d == k);
        let n = dims.len();
        let mut req = vec![0; runs.len() * n];
        let mut run_dims = Vec::with_capacity(runs.len());
        let mut run_gpu = Vec::with_capacity(runs.len());
        for (ri, r) in runs.iter().enumerate() {
            let shape = &e.shapes[r.shape as usize];
            let mut mask = 0u16;
            for &(k, v) in &shape.pos {
                if let Some(j) = dim(k) {
                    req[ri * n + j] = i64::try_from(v).ok()?;
                    mask |= 1 << j;
                }
            }
            run_dims.push(mask);
            run_gpu.push(shape.has_gpu_key);
        }
        let mut avail = Vec::with_capacity(nodes.len() * n);
        let mut consts = Vec::with_capacity(nodes.len());
        let mut terms = Vec::new();
        for node in nodes {
            let own = &node.avail[src];
            let mut present = 0u16;
            for (j, &k) in dims.iter().enumerate() {
                let v = match get(own, k) {
                    Some(v) => {
                        present |= 1 << j;
                        v
                    }
                    None if e.implicit[k as usize] => ONE,
                    None => 0,
                };
                avail.push(i64::try_from(v).ok()?);
            }
            let placed = &node.sched[src];
            let mut labels = 0;
            for (sid, _) in placed {
                let r = Engine::selector_rank(&node.labels, &e.shapes[*sid as usize].selectors);
                if r != 0 {
                    labels = r;
                    break;
                }
            }
            let asks = |k: ResId| {
                placed
                    .iter()
                    .any(|(sid, _)| get(&e.shapes[*sid as usize].pos, k).is_some())
            };
            let mut total_dims = 0u16;
            let mut placed_dims = 0u16;
            let mut placed_other = 0i64;
            let first = terms.len();
            for (i, &(k, t)) in node.total.iter().enumerate() {
                // Each type counts once toward `matching` (as `score_of` counts).
                let seen = node.total[..i].iter().any(|(x, _)| *x == k);
                match dim(k) {
                    Some(j) => {
                        total_dims |= 1 << j;
                        if asks(k) {
                            placed_dims |= 1 << j;
                        }
                    }
                    None => placed_other += i64::from(!seen && asks(k)),
                }
                if t == 0 {
                    continue;
                }
                match dim(k) {
                    Some(j) => terms.push(Term::Dim(j, to_f64(t))),
                    None => {
                        if let Some(a) = get(own, k) {
                            terms.push(Term::Fixed(util_term(to_f64(t), a)));
                        }
                    }
                }
            }
            consts.push(NodeConst {
                labels,
                any_gpu: placed
                    .iter()
                    .any(|(sid, _)| e.shapes[*sid as usize].has_gpu_key),
                gpu_node: e
                    .gpu
                    .and_then(|g| get(&node.total, g))
                    .is_some_and(|v| v > 0),
                total_dims,
                placed_dims,
                placed_other,
                present,
                first,
                len: terms.len() - first,
            });
        }
        Some(Dense {
            scratch: vec![0; n],
            dims,
            req,
            run_dims,
            run_gpu,
            avail,
            nodes: consts,
            terms,
        })
    }
}

impl Engine<'_> {
    /// What [`light_trial`](Self::light_trial) gives for node `i` of the pass (`node`):
    /// each run takes as many as fit (Ray's one-then-the-rest comes to that without
    /// selectors or anti-affinity), then Ray's score of what the node is left with.
    pub(super) fn dense_trial(
        &self,
        d: &mut Dense,
        i: usize,
        node: &SNode,
        runs: &[Run],
        mut taken: Vec<(usize, u64, u64)>,
    ) -> Option<LightTrial> {
        // A node this pass terminates takes nothing (TERMINATING_CAPACITY).
        if node.status == NodeStatus::ToTerminate {
            return None;
        }
        let n = d.dims.len();
        let c = d.nodes[i];
        let have = &mut d.scratch;
        have.copy_from_slice(&d.avail[i * n..(i + 1) * n]);
        let mut present = c.present;
        let mut asked = c.placed_dims;
        let mut gpu = c.any_gpu;
        taken.clear();
        for (ri, run) in runs.iter().enumerate() {
            if run.count == 0 {
                continue;
            }
            let req = &d.req[ri * n..(ri + 1) * n];
            let mut fit = u64::MAX;
            for (&v, &h) in req.iter().zip(have.iter()) {
                if v > 0 {
                    // h / v fits u64 (both positive); Ray's floor of a ratio.
                    let m = if h < v { 0 } else { (h / v) as u64 };
                    fit = fit.min(m);
                    if fit == 0 {
                        break;
                    }
                }
            }
            if fit == 0 {
                continue;
            }
            let k = fit.min(run.count);
            for (&v, h) in req.iter().zip(have.iter_mut()) {
                if v > 0 {
                    // k <= h / v for this h, so v·k <= h: nothing overflows.
                    *h -= v.saturating_mul(i64::try_from(k).unwrap_or(i64::MAX));
                }
            }
            // A missing (implicit) resource taken from is in the map from now on.
            present |= d.run_dims[ri];
            asked |= d.run_dims[ri];
            gpu |= d.run_gpu[ri];
            taken.push((ri, k, run.count));
        }
        if taken.is_empty() {
            return None;
        }
        let mut util = Utilisation::new();
        for term in &d.terms[c.first..c.first + c.len] {
            let u = match *term {
                Term::Dim(j, tf) => {
                    if present & (1 << j) == 0 {
                        continue;
                    }
                    util_term(tf, Fixed::from(have[j]))
                }
                Term::Fixed(u) => u,
            };
            util.add(u);
        }
        let (min_util, mean_util) = util.min_and_mean();
        let score = Score {
            labels: c.labels,
            gpu_ok: !c.gpu_node || gpu,
            matching: i64::from((c.total_dims & asked).count_ones()) + c.placed_other,
            min_util,
            mean_util,
        };
        Some(LightTrial {
            taken,
            score,
            tie: node.tie,
        })
    }
}
