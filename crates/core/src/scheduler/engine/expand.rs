//! New nodes chosen by an expander chain, in rounds.

use super::*;

impl Engine<'_> {
    /// New nodes chosen by the expander chain, in rounds: one option per node type that can
    /// hold some of the runs (as many nodes as the runs need, within limits), the chain picks
    /// one, its nodes are added, and the next round looks at what is left.
    pub(super) fn expand_in_rounds(
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
            // Ray's ranking of each option's first node: score, then tie-breaks, then order.
            let mut order: Vec<usize> = (0..built.len()).collect();
            order.sort_by(|&a, &b| {
                built[b]
                    .score
                    .cmp(&built[a].score)
                    .then(
                        fresh[built[b].type_idx]
                            .tie
                            .cmp(&fresh[built[a].type_idx].tie),
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
    pub(super) fn option(
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
        let mut total: Vec<(crate::model::Name, Fixed)> = Vec::new();
        let mut unused: Vec<(crate::model::Name, Fixed)> = Vec::new();
        let add = |acc: &mut Vec<(crate::model::Name, Fixed)>, items: &[(ResId, Fixed)], m: u64| {
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
}
