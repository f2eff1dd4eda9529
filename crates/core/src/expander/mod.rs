//! Expanders: which node type to grow when new nodes are needed.
//!
//! After a placement pass has filled existing and pending nodes, the demand left over needs
//! new nodes. The scheduler then works in *rounds*: it builds one [`ExpansionOption`] per
//! node type that can hold some of that demand (how many new nodes of the type it needs, what
//! they would hold, what they would leave unused, the price if known), asks the
//! [`ExpanderChain`] to pick one, launches the picked option's nodes for the demand they hold,
//! and repeats for what is left until nothing fits or a limit is hit. The chain is asked once
//! per round, never once per request.
//!
//! A chain is a list of expanders, as in the Kubernetes Cluster Autoscaler's
//! `--expander=grpc,priority,least-waste`: each one narrows the candidate options; an
//! expander that fails (an error, an empty or nonsensical answer) leaves the set as it was
//! and the next one decides, with a warning and a counter. Options still tied at the end go
//! to the first in config order.
//!
//! The default expander is `ray`. When it heads the chain, the scheduler does not use
//! rounds at all: it chooses node by node exactly as Ray's `ResourceDemandScheduler` does
//! (the differential test against Ray covers this). Inside a chain, after another
//! expander, `ray` picks the option whose first node Ray's score tuple ranks best.
//!
//! Everything here is pure: randomness comes from a seeded generator, and the gRPC expander
//! (network I/O) is an implementation of [`Expander`] in another crate.

mod builtin;
/// The expander settings (they belong to the config, which holds them).
pub use crate::config::expander_settings as settings;

pub use builtin::{
    LeastNodes, LeastWaste, MostDemands, Price, Priority, RandomExpander, RayExpander, Weighted,
};
pub use settings::{BUILTIN_NAMES, ExpanderSettings, GrpcExpanderSettings, PriorityRule};

use crate::CoreError;
use crate::config::NodeTypeConfig;
use crate::model::{ResourceMap, ResourceRequest};

/// One way to grow the cluster in a round: new nodes of one type.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpansionOption {
    /// Node type to launch.
    pub node_type: String,
    /// How many new nodes of that type the demand needs (within limits).
    pub node_count: u64,
    /// The demands those nodes would hold, with counts, in scheduling order.
    pub demands: Vec<(ResourceRequest, u64)>,
    /// Total number of demands held.
    pub demand_count: u64,
    /// Resources of all those nodes together.
    pub total: ResourceMap,
    /// Resources they would leave unused.
    pub unused: ResourceMap,
    /// Price of all those nodes together (per hour), when the type has a price.
    pub price: Option<f64>,
    /// The type's Ray `priority` field.
    pub priority: i64,
    /// Rank of the option's first node by Ray's score tuple (0 = Ray's choice).
    pub ray_rank: usize,
}

/// Chooses among options. Implementations return the best options as indices into
/// `options`: one index is a decision, several are a tie for the next expander, an empty
/// list or an error means "no opinion" and the next expander decides.
pub trait Expander: Send {
    /// The name used in `--expander` and in warnings.
    fn name(&self) -> &str;
    /// Narrows `options` (never empty) to the best ones.
    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError>;
}

/// A chain of expanders with per-expander fallback counters.
pub struct ExpanderChain {
    expanders: Vec<Box<dyn Expander>>,
    prices: Vec<(String, f64)>,
    /// Per expander name: how many times it failed and the next one decided.
    fallbacks: Vec<(String, u64)>,
    /// Per expander: failed in this pass, so skipped until the next (a circuit breaker:
    /// a dead gRPC server costs one timeout per pass, not one per round).
    tripped: Vec<bool>,
    warnings: Vec<String>,
    rounds: u64,
}

impl std::fmt::Debug for ExpanderChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpanderChain")
            .field("names", &self.names())
            .field("rounds", &self.rounds)
            .field("fallbacks", &self.fallbacks)
            .finish()
    }
}

impl ExpanderChain {
    /// A chain of the given expanders; `prices` (node type -> price per node per hour) fill
    /// each option's price.
    pub fn new(expanders: Vec<Box<dyn Expander>>, prices: Vec<(String, f64)>) -> Self {
        ExpanderChain {
            fallbacks: expanders
                .iter()
                .map(|e| (e.name().to_string(), 0))
                .collect(),
            tripped: vec![false; expanders.len()],
            expanders,
            prices,
            warnings: Vec::new(),
            rounds: 0,
        }
    }

    /// The default chain: Ray's own choice.
    pub fn ray() -> Self {
        ExpanderChain::new(vec![Box::new(RayExpander)], Vec::new())
    }

    /// Builds the chain `settings` names. `grpc` is the gRPC expander (built by an I/O crate)
    /// and must be given when the chain names `grpc`.
    pub fn from_settings(
        settings: &ExpanderSettings,
        node_types: &[NodeTypeConfig],
        grpc: Option<Box<dyn Expander>>,
    ) -> Result<Self, CoreError> {
        let mut grpc = grpc;
        let mut out: Vec<Box<dyn Expander>> = Vec::new();
        let seed = settings.seed;
        for (i, name) in settings.chain.iter().enumerate() {
            // Each seeded expander gets its own stream, so adding one does not shift another.
            let stream = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let e: Box<dyn Expander> = match name.as_str() {
                "ray" => Box::new(RayExpander),
                "random" => Box::new(RandomExpander::new(stream)),
                "most-demands" => Box::new(MostDemands),
                "least-waste" => Box::new(LeastWaste),
                "least-nodes" => Box::new(LeastNodes),
                "price" => Box::new(Price),
                "priority" => Box::new(Priority::new(&settings.priorities, node_types)?),
                "weighted" => Box::new(Weighted::new(
                    &settings.priorities,
                    &settings.weights,
                    node_types,
                    stream,
                )?),
                "grpc" => grpc.take().ok_or_else(|| {
                    CoreError::invalid(
                        "expander",
                        "grpc needs a server address (--grpc-expander-url or rayscale.expander.grpc.url)",
                    )
                })?,
                other => {
                    return Err(CoreError::invalid(
                        "expander",
                        format!(
                            "unknown expander {other:?} (known: {})",
                            BUILTIN_NAMES.join(", ")
                        ),
                    ));
                }
            };
            out.push(e);
        }
        if out.is_empty() {
            out.push(Box::new(RayExpander));
        }
        Ok(ExpanderChain::new(out, settings.prices.clone()))
    }

    /// The expander names, in chain order.
    pub fn names(&self) -> Vec<&str> {
        self.expanders.iter().map(|e| e.name()).collect()
    }

    /// True when `ray` heads the chain: the scheduler then chooses exactly as Ray does.
    pub fn is_ray(&self) -> bool {
        self.expanders.first().is_none_or(|e| e.name() == "ray")
    }

    /// Price per node per hour of `node_type`, when configured.
    pub fn price_of(&self, node_type: &str) -> Option<f64> {
        self.prices
            .iter()
            .find(|(t, _)| t == node_type)
            .map(|(_, p)| *p)
    }

    /// Starts a scheduling pass: expanders that failed in the last pass are asked again.
    pub fn begin_pass(&mut self) {
        self.tripped.iter_mut().for_each(|t| *t = false);
    }

    /// Picks one option (an index into `options`, never empty) by running the chain. An
    /// expander that fails is skipped for the rest of the pass (see [`Self::begin_pass`]).
    pub fn choose(&mut self, options: &[ExpansionOption]) -> usize {
        self.rounds += 1;
        let mut cand: Vec<usize> = (0..options.len()).collect();
        for (ei, e) in self.expanders.iter_mut().enumerate() {
            if cand.len() <= 1 {
                break;
            }
            if self.tripped[ei] {
                self.fallbacks[ei].1 += 1;
                continue;
            }
            let view: Vec<ExpansionOption> = cand.iter().map(|&i| options[i].clone()).collect();
            let failure = match e.best_options(&view) {
                Ok(picked) if picked.is_empty() => Some("no option chosen".to_string()),
                Ok(picked) => match picked.iter().find(|&&p| p >= view.len()) {
                    Some(bad) => Some(format!("answer names option {bad} of {}", view.len())),
                    None => {
                        let mut next: Vec<usize> = Vec::new();
                        for p in picked {
                            if !next.contains(&cand[p]) {
                                next.push(cand[p]);
                            }
                        }
                        next.sort_unstable();
                        cand = next;
                        None
                    }
                },
                Err(err) => Some(err.to_string()),
            };
            if let Some(why) = failure {
                self.fallbacks[ei].1 += 1;
                self.tripped[ei] = true;
                let next = self
                    .fallbacks
                    .get(ei + 1)
                    .map_or("config order", |(n, _)| n.as_str());
                self.warnings.push(format!(
                    "expander {} failed ({why}); {next} decides this round, and {} is \
                     skipped for the rest of this pass",
                    self.fallbacks[ei].0, self.fallbacks[ei].0
                ));
            }
        }
        cand.first().copied().unwrap_or(0)
    }

    /// How many rounds the chain decided.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Per expander name, how many times it failed and the next one decided.
    pub fn fallbacks(&self) -> &[(String, u64)] {
        &self.fallbacks
    }

    /// Takes the warnings collected since the last call.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }
}

/// A small seeded generator (SplitMix64): deterministic, good enough for choosing options.
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator with the given seed.
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform index below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        // Lemire's multiply-shift; the bias is below 2^-32 for any realistic n.
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests;
