//! The existing-node half of a placement pass: the best-first choice among nodes that
//! already exist, with trials shared by alike nodes and kept while the runs allow them.

use super::dense::Dense;
use super::pack::Slot;
use super::*;

impl Engine<'_> {
    /// The existing-node half of `_try_schedule`: repeatedly the best node takes what it
    /// can. Returns the chosen nodes in order, then the untouched ones in order.
    ///
    /// Nodes whose trials must come out the same (same type, availability, placed
    /// requests, labels and tie-breaks) share one trial: it is computed for the class's
    /// earliest node, which is the one Ray's order picks among equals; when that node is
    /// picked, the next one inherits the trial if the runs still allow it. A cluster of
    /// many alike nodes then costs one trial per kind of node, not one per node.
    pub(super) fn place_on_existing(
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
        // The trial classes, and the eligible live members of each (earliest first).
        let mut class_of = vec![usize::MAX; n];
        let mut class_ids: HashMap<ClassKey, usize> = HashMap::new();
        let mut members: Vec<std::collections::BTreeSet<usize>> = Vec::new();
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
            let c = *class_ids.entry(class_key(node, src)).or_insert_with(|| {
                members.push(std::collections::BTreeSet::new());
                members.len() - 1
            });
            class_of[i] = c;
            if eligible[i] {
                members[c].insert(i);
            }
        }
        let classes = members.len();
        let rep =
            |members: &[std::collections::BTreeSet<usize>], c: usize| members[c].first().copied();
        // Each class's candidate (its trial, for its earliest eligible node), and the best.
        let mut best = Tournament::new(classes);
        // Trials on dense availability when the runs allow it (see `Dense`).
        let mut dense = if self.dense {
            Dense::new(self, runs, &existing, src)
        } else {
            None
        };
        // Spare takings buffers (of trials dropped), reused by the next trials.
        let mut spare: Vec<Vec<(usize, u64, u64)>> = Vec::new();
        let mut trials: Vec<Option<Option<LightTrial>>> = vec![None; classes];
        // Generation of each class's current trial, to recognise stale watchers.
        let mut generation: Vec<u32> = vec![0; classes];
        // Per run, the trials that took from it (class, generation), by the run count
        // below which they no longer hold (see `Trial::valid`): the last are the first to
        // break. Few distinct counts, many trials each; emptied lists are reused.
        let mut watchers: Vec<std::collections::BTreeMap<u64, Vec<(usize, u32)>>> =
            vec![std::collections::BTreeMap::new(); runs.len()];
        let mut lists: Vec<Vec<(usize, u32)>> = Vec::new();
        let mut queued = vec![true; classes];
        let mut dirty: Vec<usize> = (0..classes).collect();
        let mut picked = Vec::new();
        while runs.iter().any(|r| r.count > 0) {
            for c in dirty.drain(..) {
                queued[c] = false;
                let Some(i) = rep(&members, c) else {
                    continue;
                };
                let buf = spare.pop().unwrap_or_default();
                let t = match dense.as_mut() {
                    Some(d) => {
                        let t = self.dense_trial(d, i, existing[i], runs, buf);
                        // Checked against the sparse trial in this crate's tests (release
                        // ones too) and in debug builds.
                        #[cfg(any(test, debug_assertions))]
                        {
                            let l = self.light_trial(existing[i], runs, src, Vec::new());
                            assert_eq!(
                                t.as_ref().map(|t| (&t.taken, t.score)),
                                l.as_ref().map(|l| (&l.taken, l.score)),
                                "a dense trial differs from the node's own"
                            );
                        }
                        t
                    }
                    None => self.light_trial(existing[i], runs, src, buf),
                };
                generation[c] = generation[c].wrapping_add(1);
                if let Some(tr) = &t {
                    for &(r, k, cnt) in &tr.taken {
                        let threshold = if k < cnt { k } else { cnt };
                        watchers[r]
                            .entry(threshold)
                            .or_insert_with(|| lists.pop().unwrap_or_default())
                            .push((c, generation[c]));
                    }
                    best.set(c, Some(Ranked::new(tr, i)));
                }
                if let Some(Some(old)) = trials[c].replace(t) {
                    spare.push(old.taken);
                }
            }
            let Some(i) = best.top() else {
                break;
            };
            let c = class_of[i];
            best.set(c, None);
            let Some(Some(tr)) = trials[c].take() else {
                break;
            };
            // The picked node as its trial leaves it (the runs still allow the trial, so
            // doing it again gives the same).
            let Some(done) = self.trial(existing[i], runs, src) else {
                break;
            };
            debug_assert!(
                done.taken
                    .iter()
                    .map(|t| (t.0, t.1))
                    .eq(tr.taken.iter().map(|t| (t.0, t.1))),
                "a kept trial no longer holds"
            );
            alive[i] = false;
            members[c].remove(&i);
            for &(r, k, _) in &done.taken {
                runs[r].count -= k;
            }
            // The class's next node inherits the trial while the runs still allow it.
            if let Some(j) = rep(&members, c)
                && tr.valid(runs)
            {
                best.set(c, Some(Ranked::new(&tr, j)));
                trials[c] = Some(Some(tr));
            } else {
                spare.push(tr.taken);
                generation[c] = generation[c].wrapping_add(1);
                if !members[c].is_empty() && !queued[c] {
                    queued[c] = true;
                    dirty.push(c);
                }
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
                        let cj = class_of[j];
                        let before = rep(&members, cj);
                        members[cj].insert(j);
                        match &trials[cj] {
                            // The class's trial now belongs to its new earliest node.
                            Some(Some(tj)) if before.is_some_and(|b| j < b) => {
                                best.set(cj, Some(Ranked::new(tj, j)));
                            }
                            Some(_) if before.is_some() => {}
                            _ => {
                                if !queued[cj] {
                                    queued[cj] = true;
                                    dirty.push(cj);
                                }
                            }
                        }
                    }
                }
            }
            // Trials that took from a changed run and no longer hold are redone.
            for &(r, _, _) in &done.taken {
                let now = runs[r].count;
                while let Some(last) = watchers[r].last_entry() {
                    if *last.key() <= now {
                        break;
                    }
                    let mut list = last.remove();
                    for &(cj, g) in &list {
                        if generation[cj] != g {
                            continue;
                        }
                        if matches!(trials[cj], Some(Some(_)))
                            && let Some(Some(tj)) = trials[cj].take()
                        {
                            best.set(cj, None);
                            spare.push(tj.taken);
                            generation[cj] = generation[cj].wrapping_add(1);
                            if !queued[cj] {
                                queued[cj] = true;
                                dirty.push(cj);
                            }
                        }
                    }
                    list.clear();
                    lists.push(list);
                }
            }
            picked.push(Slot::New(done.node));
        }
        let mut out = picked;
        for (k, &i) in idx.iter().enumerate() {
            if alive[k] {
                out.push(Slot::Orig(i));
            }
        }
        out
    }
}

/// Ray's NodeStateCache key (type, kind, total, available for the source, labels), as
/// order-insensitive sorted vectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct StateKey {
    type_idx: usize,
    head: bool,
    total: Vec<(ResId, Fixed)>,
    avail: Vec<(ResId, Fixed)>,
    labels: Vec<(String, String)>,
}

pub(super) fn state_key(n: &SNode, src: usize) -> StateKey {
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

/// What a node's trial and its score read (see `place_on_existing`), in the node's own
/// order: nodes with equal keys have equal trials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ClassKey {
    type_idx: usize,
    head: bool,
    tie: (u64, i64, u64),
    total: Rc<Vec<(ResId, Fixed)>>,
    avail: Vec<(ResId, Fixed)>,
    sched: Vec<(ShapeId, u64)>,
    labels: Rc<Vec<(String, String)>>,
}

pub(super) fn class_key(n: &SNode, src: usize) -> ClassKey {
    ClassKey {
        type_idx: n.type_idx,
        head: n.head,
        tie: (
            n.tie.recoverable.to_bits(),
            n.tie.priority,
            n.tie.availability.to_bits(),
        ),
        total: n.total.clone(),
        avail: n.avail[src].clone(),
        sched: n.sched[src].clone(),
        labels: n.labels.clone(),
    }
}

/// A candidate: the greatest is the greatest score, then Ray's tie-breaks, then the
/// earliest node. The score and tie-breaks are packed into words that compare as they do
/// ([`Score::cmp`], [`TieBreak::cmp`]), so candidates compare as integers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ranked {
    key: [u64; 8],
    pos: usize,
}

impl Ranked {
    fn new(tr: &LightTrial, pos: usize) -> Ranked {
        let s = &tr.score;
        let t = &tr.tie;
        Ranked {
            key: [
                int_key(s.labels),
                u64::from(s.gpu_ok),
                int_key(s.matching),
                float_key(s.min_util),
                float_key(s.mean_util),
                float_key(t.recoverable),
                int_key(t.priority),
                float_key(t.availability),
            ],
            pos,
        }
    }
}

/// No class (a tournament node nobody wins).
const NOBODY: u32 = u32::MAX;

/// One candidate per class and the best of them: a tournament tree over the classes,
/// whose changed leaves are replayed up to the root when the best is asked for (the whole
/// tree at once when many changed, as after a run runs out and most trials are redone).
struct Tournament {
    slot: Vec<Option<Ranked>>,
    /// Winner of each tree node (the root is 1, leaf `c` is `width + c`).
    win: Vec<u32>,
    width: usize,
    changed: Vec<u32>,
    is_changed: Vec<bool>,
}

impl Tournament {
    fn new(classes: usize) -> Tournament {
        let width = classes.next_power_of_two().max(1);
        Tournament {
            slot: vec![None; classes],
            win: vec![NOBODY; 2 * width],
            width,
            changed: Vec::new(),
            is_changed: vec![false; classes],
        }
    }

    fn set(&mut self, c: usize, r: Option<Ranked>) {
        self.slot[c] = r;
        if !self.is_changed[c] {
            self.is_changed[c] = true;
            self.changed.push(c as u32);
        }
    }

    fn pick(&self, a: u32, b: u32) -> u32 {
        match (a, b) {
            (NOBODY, x) | (x, NOBODY) => x,
            _ => {
                if self.slot[b as usize] > self.slot[a as usize] {
                    b
                } else {
                    a
                }
            }
        }
    }

    /// The node of the best candidate.
    fn top(&mut self) -> Option<usize> {
        let leaf = |t: &Tournament, c: u32| {
            if t.slot[c as usize].is_some() {
                c
            } else {
                NOBODY
            }
        };
        if self.changed.len() * 8 > self.width {
            for &c in &self.changed {
                self.win[self.width + c as usize] = leaf(self, c);
            }
            for n in (1..self.width).rev() {
                self.win[n] = self.pick(self.win[2 * n], self.win[2 * n + 1]);
            }
        } else {
            for k in 0..self.changed.len() {
                let c = self.changed[k];
                let mut n = self.width + c as usize;
                self.win[n] = leaf(self, c);
                n /= 2;
                while n >= 1 {
                    self.win[n] = self.pick(self.win[2 * n], self.win[2 * n + 1]);
                    n /= 2;
                }
            }
        }
        for &c in &self.changed {
            self.is_changed[c as usize] = false;
        }
        self.changed.clear();
        let w = self.win[1];
        (w != NOBODY)
            .then(|| self.slot[w as usize].map(|r| r.pos))
            .flatten()
    }
}

/// `i64` order as `u64` order.
fn int_key(x: i64) -> u64 {
    (x as u64) ^ (1 << 63)
}

/// `f64` order (as [`fcmp`](super::fcmp): -0 equals 0) as `u64` order. Scores and
/// tie-breaks are finite; a NaN (which `fcmp` holds equal to anything) ranks as 0.
fn float_key(x: f64) -> u64 {
    debug_assert!(!x.is_nan(), "a NaN score or tie-break");
    let x = if x == 0.0 || x.is_nan() { 0.0 } else { x };
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
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
        self.key.cmp(&o.key).then(o.pos.cmp(&self.pos))
    }
}
