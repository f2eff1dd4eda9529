//! The built-in expanders. Each keeps every option tied for best, so the next expander of
//! the chain can break the tie.

use super::settings::PriorityRule;
use super::{Expander, ExpansionOption, SeededRng};
use crate::CoreError;
use crate::config::NodeTypeConfig;
use crate::model::resources::to_f64;

/// Two scores closer than this are a tie (float sums of fixed-point fractions).
const EPS: f64 = 1e-9;

/// Indices of the options with the smallest key (ties kept).
fn argmin_by(options: &[ExpansionOption], key: impl Fn(&ExpansionOption) -> f64) -> Vec<usize> {
    let keys: Vec<f64> = options.iter().map(key).collect();
    let best = keys.iter().copied().fold(f64::INFINITY, f64::min);
    (0..options.len())
        .filter(|&i| keys[i] <= best + EPS)
        .collect()
}

/// Ray's choice: the option whose first node Ray's score tuple ranks best.
#[derive(Debug, Clone, Copy, Default)]
pub struct RayExpander;

impl Expander for RayExpander {
    fn name(&self) -> &str {
        "ray"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        Ok(argmin_by(options, |o| o.ray_rank as f64))
    }
}

/// A uniformly random option, from a seeded generator.
#[derive(Debug, Clone)]
pub struct RandomExpander {
    rng: SeededRng,
}

impl RandomExpander {
    /// A random expander with the given seed.
    pub fn new(seed: u64) -> Self {
        RandomExpander {
            rng: SeededRng::new(seed),
        }
    }
}

impl Expander for RandomExpander {
    fn name(&self) -> &str {
        "random"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        Ok(vec![self.rng.below(options.len())])
    }
}

/// The options that hold the most demands (the Cluster Autoscaler's `most-pods`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MostDemands;

impl Expander for MostDemands {
    fn name(&self) -> &str {
        "most-demands"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        Ok(argmin_by(options, |o| -(o.demand_count as f64)))
    }
}

/// The options that leave the least unused: the sum over the resources the new nodes offer
/// of the unused fraction (the Cluster Autoscaler sums CPU and memory; here every resource
/// counts, so an idle GPU is waste too).
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastWaste;

/// The waste score of an option (lower is better).
pub fn waste(o: &ExpansionOption) -> f64 {
    o.total
        .iter()
        .filter(|(_, t)| *t > 0)
        .map(|(k, t)| to_f64(o.unused.get(k).unwrap_or(0)) / to_f64(t))
        .sum()
}

impl Expander for LeastWaste {
    fn name(&self) -> &str {
        "least-waste"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        Ok(argmin_by(options, waste))
    }
}

/// The options that need the fewest new nodes.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastNodes;

impl Expander for LeastNodes {
    fn name(&self) -> &str {
        "least-nodes"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        Ok(argmin_by(options, |o| o.node_count as f64))
    }
}

/// The cheapest options (node count times the type's price). Options of types without a
/// price are not candidates; when no option has a price, no opinion.
#[derive(Debug, Clone, Copy, Default)]
pub struct Price;

impl Expander for Price {
    fn name(&self) -> &str {
        "price"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        if options.iter().all(|o| o.price.is_none()) {
            return Ok(Vec::new());
        }
        Ok(argmin_by(options, |o| o.price.unwrap_or(f64::INFINITY))
            .into_iter()
            .filter(|&i| options[i].price.is_some())
            .collect())
    }
}

/// Priority of each node type: from the priority map when one is configured (the highest
/// priority whose regex matches the name; types matching none have none), else the type's
/// Ray `priority` field.
fn priorities(rules: &[PriorityRule], node_types: &[NodeTypeConfig]) -> Vec<(String, Option<i64>)> {
    node_types
        .iter()
        .map(|t| {
            let p = if rules.is_empty() {
                Some(t.priority)
            } else {
                rules
                    .iter()
                    .filter(|r| r.patterns.iter().any(|re| re.is_match(&t.name)))
                    .map(|r| r.priority)
                    .max()
            };
            (t.name.clone(), p)
        })
        .collect()
}

/// The options of the highest-priority node types.
#[derive(Debug, Clone)]
pub struct Priority {
    by_type: Vec<(String, Option<i64>)>,
}

impl Priority {
    /// A priority expander over the given map (empty: Ray's `priority` fields).
    pub fn new(rules: &[PriorityRule], node_types: &[NodeTypeConfig]) -> Result<Self, CoreError> {
        Ok(Priority {
            by_type: priorities(rules, node_types),
        })
    }

    fn of(&self, node_type: &str) -> Option<i64> {
        self.by_type
            .iter()
            .find(|(t, _)| t == node_type)
            .and_then(|(_, p)| *p)
    }

    /// Indices of the options in the top priority tier (empty when none has a priority).
    fn top_tier(&self, options: &[ExpansionOption]) -> Vec<usize> {
        let prios: Vec<Option<i64>> = options.iter().map(|o| self.of(&o.node_type)).collect();
        let Some(best) = prios.iter().flatten().max().copied() else {
            return Vec::new();
        };
        (0..options.len())
            .filter(|&i| prios[i] == Some(best))
            .collect()
    }
}

impl Expander for Priority {
    fn name(&self) -> &str {
        "priority"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        Ok(self.top_tier(options))
    }
}

/// Weighted random choice among the node types of the top priority tier (e.g. 80/20
/// between two instance families), from a seeded generator. Types without a weight (or
/// weight 0) are not chosen while a weighted one is a candidate.
#[derive(Debug, Clone)]
pub struct Weighted {
    tiers: Priority,
    weights: Vec<(String, f64)>,
    rng: SeededRng,
}

impl Weighted {
    /// A weighted expander.
    pub fn new(
        rules: &[PriorityRule],
        weights: &[(String, f64)],
        node_types: &[NodeTypeConfig],
        seed: u64,
    ) -> Result<Self, CoreError> {
        Ok(Weighted {
            tiers: Priority::new(rules, node_types)?,
            weights: weights.to_vec(),
            rng: SeededRng::new(seed),
        })
    }

    fn weight(&self, node_type: &str) -> f64 {
        self.weights
            .iter()
            .find(|(t, _)| t == node_type)
            .map_or(0.0, |(_, w)| *w)
    }
}

impl Expander for Weighted {
    fn name(&self) -> &str {
        "weighted"
    }
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        let mut tier = self.tiers.top_tier(options);
        if tier.is_empty() {
            tier = (0..options.len()).collect();
        }
        let weighted: Vec<(usize, f64)> = tier
            .iter()
            .map(|&i| (i, self.weight(&options[i].node_type)))
            .filter(|(_, w)| *w > 0.0)
            .collect();
        let sum: f64 = weighted.iter().map(|(_, w)| w).sum();
        if weighted.is_empty() || sum <= 0.0 {
            // No weights in the top tier: leave the tier to the next expander.
            return Ok(tier);
        }
        let mut x = self.rng.next_f64() * sum;
        for &(i, w) in &weighted {
            if x < w {
                return Ok(vec![i]);
            }
            x -= w;
        }
        Ok(weighted.last().map(|(i, _)| vec![*i]).unwrap_or_default())
    }
}
