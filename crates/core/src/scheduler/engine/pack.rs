//! Placement: fitting shapes on nodes, Ray's score, the best-first placement passes.

use super::*;

impl Engine<'_> {
    /// Can `avail` hold one `shape` (resources only)?
    #[inline]
    pub(super) fn fits(&self, avail: &[(ResId, Fixed)], shape: &Shape) -> bool {
        shape.pos.iter().all(|&(k, v)| {
            let have = get(avail, k).unwrap_or(if self.implicit[k as usize] { ONE } else { 0 });
            v <= have
        })
    }

    /// How many `shape`s `avail` can hold (resources only); `u64::MAX` when unbounded.
    pub(super) fn max_fit(&self, avail: &[(ResId, Fixed)], shape: &Shape) -> u64 {
        let mut best = u64::MAX;
        for &(k, v) in &shape.pos {
            let have = get(avail, k).unwrap_or(if self.implicit[k as usize] { ONE } else { 0 });
            let n = if have <= 0 { 0 } else { quotient(have, v) };
            best = best.min(n);
        }
        best
    }

    pub(super) fn subtract(&self, avail: &mut Vec<(ResId, Fixed)>, shape: &Shape, times: u64) {
        for &(k, v) in &shape.pos {
            let amount = v.saturating_mul(times as i128);
            match avail.iter_mut().find(|(r, _)| *r == k) {
                Some(e) => e.1 -= amount,
                // Only implicit resources can be missing here (fits() said so).
                None => avail.push((k, ONE - amount)),
            }
        }
    }

    pub(super) fn selector_rank(labels: &[(String, String)], selectors: &[LabelSelector]) -> i64 {
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
    pub(super) fn try_one(&self, node: &mut SNode, sid: ShapeId, src: usize) -> bool {
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
    #[inline]
    pub(super) fn can_take(&self, node: &SNode, sid: ShapeId, src: usize) -> bool {
        let shape = &self.shapes[sid as usize];
        if shape.selectors.is_empty() && shape.anti.is_empty() {
            return self.fits(&node.avail[src], shape);
        }
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

    pub(super) fn push_sched(node: &mut SNode, src: usize, sid: ShapeId, k: u64) {
        match node.sched[src].last_mut() {
            Some(last) if last.0 == sid => last.1 += k,
            _ => node.sched[src].push((sid, k)),
        }
    }

    /// Ray's `try_schedule` of one node against the whole request list, on a copy.
    pub(super) fn trial(&mut self, node: &SNode, runs: &[Run], src: usize) -> Option<Trial> {
        let first = self.first_fit(node, runs, src)?;
        let mut n = node.clone();
        let mut taken = Vec::new();
        self.fill(&mut n, runs, src, first, &mut taken);
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

    /// What [`trial`](Self::trial) would take and score, without a copy of the node: the
    /// work is done on a scratch node whose buffers are reused from trial to trial.
    /// `taken` is a buffer to reuse (a discarded trial's).
    pub(super) fn light_trial(
        &mut self,
        node: &SNode,
        runs: &[Run],
        src: usize,
        mut taken: Vec<(usize, u64, u64)>,
    ) -> Option<LightTrial> {
        let first = self.first_fit(node, runs, src)?;
        let mut n = match self.scratch.take() {
            Some(mut n) => {
                n.avail[src].clear();
                n.avail[src].extend_from_slice(&node.avail[src]);
                n.sched[src].clear();
                n.sched[src].extend_from_slice(&node.sched[src]);
                n.labels = node.labels.clone();
                n.total = node.total.clone();
                n
            }
            None => node.clone(),
        };
        taken.clear();
        self.fill(&mut n, runs, src, first, &mut taken);
        let score = (!taken.is_empty()).then(|| self.score(&n, src));
        self.scratch = Some(n);
        Some(LightTrial {
            taken,
            score: score?,
            tie: node.tie,
        })
    }

    /// The first run `node` can take one request of, or `None` (a node this pass
    /// terminates takes nothing: compatibility rule TERMINATING_CAPACITY). Starts a new
    /// generation of the unschedulable-shape cache, which [`fill`](Self::fill) goes on
    /// with.
    fn first_fit(&mut self, node: &SNode, runs: &[Run], src: usize) -> Option<usize> {
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
        for (ri, run) in runs.iter().enumerate() {
            if run.count == 0 || self.failed[run.shape as usize] == self.stamp {
                continue;
            }
            if self.can_take(node, run.shape, src) {
                return Some(ri);
            }
            self.failed[run.shape as usize] = self.stamp;
        }
        None
    }

    /// Places on `n` what it can take of `runs`, from run `first` on, as Ray's
    /// `try_schedule` does; pushes (run index, taken, run count) of each run taken from
    /// onto `taken`.
    fn fill(
        &mut self,
        n: &mut SNode,
        runs: &[Run],
        src: usize,
        first: usize,
        taken: &mut Vec<(usize, u64, u64)>,
    ) {
        for (ri, run) in runs.iter().enumerate().skip(first) {
            if run.count == 0 || self.failed[run.shape as usize] == self.stamp {
                continue;
            }
            let shape = &self.shapes[run.shape as usize];
            let labels_before = n.labels.len();
            if !self.try_one(n, run.shape, src) {
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
            Self::push_sched(n, src, run.shape, k);
            taken.push((ri, k, run.count));
        }
    }

    /// Ray's `_compute_score`.
    pub(super) fn score(&self, n: &SNode, src: usize) -> Score {
        let avail = &n.avail[src];
        self.score_of(n, n.sched[src].iter().map(|(sid, _)| *sid), |k| {
            get(avail, k)
        })
    }

    /// Ray's `_compute_score` of `n` (its total and labels) with the shapes `sched` placed
    /// (in order) and `avail` as its availability.
    pub(super) fn score_of(
        &self,
        n: &SNode,
        sched: impl Iterator<Item = ShapeId> + Clone,
        avail: impl Fn(ResId) -> Option<Fixed>,
    ) -> Score {
        let mut labels = 0;
        for sid in sched.clone() {
            let r = Self::selector_rank(&n.labels, &self.shapes[sid as usize].selectors);
            if r != 0 {
                labels = r;
                break;
            }
        }
        let any_gpu = sched
            .clone()
            .any(|sid| self.shapes[sid as usize].has_gpu_key);
        // The requested resource types the node has: the types of its total (each once)
        // that some placed shape asks for.
        let matching = n
            .total
            .iter()
            .enumerate()
            .filter(|&(i, &(k, _))| {
                !n.total[..i].iter().any(|(x, _)| *x == k)
                    && sched
                        .clone()
                        .any(|sid| get(&self.shapes[sid as usize].pos, k).is_some())
            })
            .count() as i64;
        let mut util = Utilisation::new();
        for &(k, t) in n.total.iter() {
            if t == 0 {
                continue;
            }
            if let Some(a) = avail(k) {
                util.add(util_term(to_f64(t), a));
            }
        }
        let (min_util, mean_util) = util.min_and_mean();
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

    /// Better trial first: higher score, then Ray's tie-breaks; exact ties keep the
    /// earlier node (returns `Less` when `a` should win).
    pub(super) fn better(a: &Trial, b: &Trial) -> Ordering {
        b.score.cmp(&a.score).then(b.node.tie.cmp(&a.node.tie))
    }

    /// Ray's `_try_schedule`: existing nodes first, then new ones. Returns the resulting
    /// node list (Ray's order) and what is left of the runs.
    pub(super) fn try_schedule(
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
        let mut existing = Vec::with_capacity(nodes.len());
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
}

/// `total * util^3` of one resource of `tf` in all and `a` available (Ray's utilisation
/// term).
pub(super) fn util_term(tf: f64, a: Fixed) -> f64 {
    let util = (tf - to_f64(a)) / tf;
    tf * super::cube::cube(util)
}

/// Ray's utilisation terms of a node summed in order: their minimum and mean (0 and 0
/// for none).
pub(super) struct Utilisation {
    min: f64,
    sum: f64,
    count: usize,
}

impl Utilisation {
    pub(super) fn new() -> Self {
        Utilisation {
            min: f64::INFINITY,
            sum: 0.0,
            count: 0,
        }
    }

    pub(super) fn add(&mut self, u: f64) {
        self.min = self.min.min(u);
        self.sum += u;
        self.count += 1;
    }

    pub(super) fn min_and_mean(&self) -> (f64, f64) {
        if self.count == 0 {
            (0.0, 0.0)
        } else {
            (self.min, self.sum / self.count as f64)
        }
    }
}

/// How many `v` fit in `have` (both positive), saturating: a 64-bit division when both
/// fit (the same quotient, no library call).
pub(super) fn quotient(have: Fixed, v: Fixed) -> u64 {
    match (i64::try_from(have), i64::try_from(v)) {
        (Ok(h), Ok(d)) => (h / d) as u64,
        _ => u64::try_from(have / v).unwrap_or(u64::MAX),
    }
}

/// One node of a placement pass's result: an untouched node of the input (by index) or a
/// new or changed one.
pub(super) enum Slot {
    Orig(usize),
    New(SNode),
}

/// The node list a placement pass produced, taking untouched nodes from `nodes`.
pub(super) fn materialize(nodes: Vec<SNode>, slots: Vec<Slot>) -> Vec<SNode> {
    let mut nodes: Vec<Option<SNode>> = nodes.into_iter().map(Some).collect();
    slots
        .into_iter()
        .filter_map(|s| match s {
            Slot::Orig(i) => nodes[i].take(),
            Slot::New(n) => Some(n),
        })
        .collect()
}

/// Ray's `combine_requests_with_affinity`: requests sharing an affinity constraint (and
/// label selectors) become one request with the summed resources, placed after the others.
pub(super) fn combine_affinity(requests: &[ResourceRequest]) -> Vec<ResourceRequest> {
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
