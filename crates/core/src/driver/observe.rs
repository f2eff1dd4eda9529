//! The loop's observers: what an operator's tools (metrics, health, the event log) are
//! told after each iteration and each step. Observers see; they never decide: nothing
//! they do reaches the loop, and they must return quickly (no I/O that can block; hand it
//! to a task of their own).

use crate::config::ClusterConfig;
use crate::expander::ExpanderChain;
use crate::instance::Instance;
use crate::model::ClusterResourceState;
use crate::provider::ProviderError;
use crate::reconciler::{DrainRejection, Outcome};

use super::{LeaseView, StepReport};

/// An iteration that reconciled and whose table was stored (its effects have run).
pub struct IterationView<'a> {
    /// Wall clock of the iteration (ns since the epoch).
    pub now_ns: i64,
    /// The config it ran with.
    pub config: &'a ClusterConfig,
    /// The instance table after it (terminal records included until pruned).
    pub instances: Vec<&'a Instance>,
    /// The GCS's state it saw.
    pub ray: &'a ClusterResourceState,
    /// What it decided.
    pub outcome: &'a Outcome,
    /// Provider errors it took in (earlier effects' and the provider's own), each once.
    pub provider_errors: &'a [ProviderError],
    /// Drains the GCS refused or that failed since the last iteration, each once.
    pub drain_rejections: &'a [DrainRejection],
    /// The expander chain (its choice and fall-back counts since it was built).
    pub chain: &'a ExpanderChain,
    /// The first iteration since this process loaded the table (at start, or on taking
    /// the lease over): transitions older than it were another process's (or an earlier
    /// life's) to count.
    pub first_after_load: bool,
    /// Preemption advice that drained no node (AWS rebalance recommendations under
    /// `on_rebalance: ignore`), each once, when first listed.
    pub advisories: &'a [crate::preemption::Notice],
}

/// A step, whatever it did.
pub struct StepView<'a> {
    /// Wall clock at its end (ns since the epoch).
    pub now_ns: i64,
    /// What it did.
    pub report: &'a StepReport,
    /// The lease as this process sees it (with the last GCS error of the lease task).
    pub lease: &'a LeaseView,
}

/// Told about each step and each stored iteration, in the loop's task.
pub trait Observer: Send + Sync {
    /// After an iteration's effects ran.
    fn iteration(&self, _view: &IterationView<'_>) {}
    /// At the end of every step.
    fn step(&self, _view: &StepView<'_>) {}
}
