//! Ray's enforcement steps: outdated nodes, min/max workers, idle termination.

use super::*;

impl Engine<'_> {
    pub(super) fn terminate_outdated(&mut self) {
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

    pub(super) fn count_by_type(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.type_names.len()];
        for n in &self.nodes {
            if n.status != NodeStatus::ToTerminate {
                counts[n.type_idx] += 1;
            }
        }
        counts
    }

    pub(super) fn enforce_min_workers(&mut self) {
        let counts = self.count_by_type();
        let mut new_nodes = Vec::new();
        for (ti, &cur) in counts.iter().enumerate().take(self.n_config_types) {
            // No new node of an unavailable type, not even for min_workers.
            let min = if self.unavailable[ti] {
                0
            } else {
                self.req.node_types[ti].min_workers
            };
            // Bounded work: nodes past the type's or the cluster's max would be cut by the
            // max enforcement right after, so they are never made (a min_workers of
            // 2,000,000,000 costs nothing).
            let type_max = u64::try_from(self.max_workers(ti)).unwrap_or(0);
            let min = min
                .min(type_max)
                .min(self.req.max_num_nodes.unwrap_or(u64::MAX));
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
    pub(super) fn termination_key(&self, n: &SNode) -> (bool, i64, f64) {
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
        (!self.ray_node_id(n).is_empty(), -n.idle_ms, avg)
    }

    pub(super) fn sort_for_termination(&self, nodes: &mut [SNode]) {
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
    pub(super) fn select_to_terminate(
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

    pub(super) fn enforce_max_per_type(&mut self) {
        let all = std::mem::take(&mut self.nodes);
        // The groups are sized first (in the order their types first appear), so that
        // no vector of nodes grows by copying itself.
        let mut sizes: Vec<(usize, usize)> = Vec::new();
        for n in all.iter().filter(|n| n.status != NodeStatus::ToTerminate) {
            match sizes.iter_mut().find(|(t, _)| *t == n.type_idx) {
                Some((_, c)) => *c += 1,
                None => sizes.push((n.type_idx, 1)),
            }
        }
        let live: usize = sizes.iter().map(|(_, c)| c).sum();
        let mut terminating = Vec::with_capacity(all.len());
        let mut groups: Vec<(usize, Vec<SNode>)> = sizes
            .iter()
            .map(|&(t, c)| (t, Vec::with_capacity(c)))
            .collect();
        for n in all {
            if n.status == NodeStatus::ToTerminate {
                terminating.push(n);
            } else if let Some((_, g)) = groups.iter_mut().find(|(t, _)| *t == n.type_idx) {
                g.push(n);
            }
        }
        let mut kept = Vec::with_capacity(live);
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

    pub(super) fn enforce_max_global(&mut self) {
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

    pub(super) fn enforce_idle_termination(&mut self) {
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
}
