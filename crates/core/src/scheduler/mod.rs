//! The Ray-compatible scheduler: a pure function from a snapshot to a decision.
//!
//! [`schedule`] makes the same decisions as Ray 2.60's `ResourceDemandScheduler.schedule`,
//! step by step in Ray's order: outdated nodes, `min_workers` per type, `max_workers` per
//! type, the global `max_workers`, the cluster resource constraint, each gang (placement
//! group) request, the task/actor requests, and idle termination. Every placement pass fills
//! existing (and pending) nodes first, then new nodes, choosing nodes by Ray's score tuple
//! (label-selector rank, GPU avoidance, matching resource types, minimum and mean
//! utilisation), then Ray's tie-breaks (recoverable availability, the per-type priority,
//! cloud availability), with Ray's list orders deciding exact ties. Types listed as
//! unavailable (after capacity errors) get no new nodes.
//!
//! It is not a line-by-line port. Requests are interned into shapes and kept as run-length
//! lists (a run of identical requests is placed with one division, not one check per
//! request); identical pending nodes are evaluated once; each candidate node's trial result
//! is cached and reused for as long as the requests it took are still there, so a placement
//! pass over many nodes does not re-simulate every node in every round.
//!
//! Where Ray 2.60 plainly has a bug, this scheduler does what Ray evidently intends; each
//! such case is listed in docs/src/concepts/compatibility.md:
//! - `MIN_WORKERS_ALIASING`: Ray creates the nodes it adds for `min_workers` as one object
//!   repeated, so cutting one of them (global `max_workers`) cuts them all. Here each is
//!   its own node.
//! - `PENDING_LAUNCH_HASH`: Ray builds pending (not yet running) nodes without their
//!   instance's launch config hash, so with `disable_launch_config_check: false` every
//!   pending instance looks outdated and is terminated. Here pending nodes keep their hash.
//! - `TERMINATING_CAPACITY`: Ray places demand on nodes it has just decided to terminate
//!   (outdated, over a max), so that demand is neither launched for nor reported until a
//!   later loop. Here a node being terminated takes no demand.

mod engine;
pub mod request;

use std::cmp::Ordering;

use crate::config::NodeTypeConfig;
use crate::expander::ExpanderChain;
use crate::model::{
    ClusterConstraint, GangRequest, InstanceStatus, ResourceMap, ResourceRequest,
    ResourceRequestByCount,
};

pub use crate::model::TerminationCause;
pub use engine::Score;

/// The Ray node of a running instance, as the GCS reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RayNodeInput {
    /// Node id in hex.
    pub node_id_hex: String,
    /// Total resources.
    pub total: ResourceMap,
    /// Available resources.
    pub available: ResourceMap,
    /// Static labels merged with dynamic labels (dynamic ones win).
    pub labels: Vec<(String, String)>,
    /// Idle duration in ms.
    pub idle_duration_ms: i64,
}

/// One instance known to the instance manager, joined with its Ray node if any.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceInput {
    /// Instance manager id.
    pub instance_id: String,
    /// Node type name.
    pub node_type: String,
    /// Instance status.
    pub status: InstanceStatus,
    /// True for the head node.
    pub is_head: bool,
    /// Launch config hash the instance was launched with.
    pub launch_config_hash: String,
    /// The Ray node, when Ray runs on the instance.
    pub ray_node: Option<RayNodeInput>,
}

/// Everything one scheduling pass looks at.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SchedulingRequest {
    /// Node types, in config order (the order breaks ties).
    pub node_types: Vec<NodeTypeConfig>,
    /// The head node type: its `max_workers` does not count the head itself.
    pub head_node_type: Option<String>,
    /// Maximum number of nodes including the head (`max_workers + 1`); `None` for no cap.
    pub max_num_nodes: Option<u64>,
    /// Global idle timeout in seconds; `None` disables idle termination.
    pub idle_timeout_s: Option<f64>,
    /// When false, nodes whose launch config hash differs from their type's are outdated.
    pub disable_launch_config_check: bool,
    /// Task/actor demand.
    pub resource_requests: Vec<ResourceRequestByCount>,
    /// Placement groups.
    pub gang_requests: Vec<GangRequest>,
    /// `request_resources` constraints (at most one is used).
    pub cluster_constraints: Vec<ClusterConstraint>,
    /// Current instances.
    pub instances: Vec<InstanceInput>,
    /// Ray's `cloud_resource_availabilities` (node type -> score in [0, 1]; absent = 1):
    /// the last tie-break after the score, the recoverable availability and the priority.
    pub cloud_resource_availabilities: Vec<(String, f64)>,
    /// Ray's `recoverable_resource_availabilities` (absent = 1): ordered right after the
    /// score.
    pub recoverable_resource_availabilities: Vec<(String, f64)>,
    /// rayscale's own: node types no new node is launched of in this pass (capacity
    /// errors); existing and pending nodes of them still take demand.
    pub unavailable_node_types: Vec<String>,
}

/// One existing instance to terminate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    /// Instance manager id.
    pub instance_id: String,
    /// Ray node id in hex, empty when Ray does not run on it.
    pub ray_node_id: String,
    /// Node type.
    pub node_type: String,
    /// Status the instance had.
    pub instance_status: InstanceStatus,
    /// Why.
    pub cause: TerminationCause,
    /// Idle duration when the cause is idleness.
    pub idle_duration_ms: i64,
}

/// The outcome of one scheduling pass.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// New instances to launch per node type (config order; zero counts omitted).
    pub launch: Vec<(String, u64)>,
    /// Existing instances to terminate, in Ray's order.
    pub terminate: Vec<Termination>,
    /// Task/actor requests that fit nowhere, with their counts (in scheduling order).
    pub infeasible_requests: Vec<(ResourceRequest, u64)>,
    /// Indices (into the request's `gang_requests`) of infeasible gang requests.
    pub infeasible_gang_requests: Vec<usize>,
    /// Indices (into `cluster_constraints`) of infeasible constraints.
    pub infeasible_constraints: Vec<usize>,
    /// Error-free but noteworthy: more than one constraint was given (only the first is used).
    pub extra_constraints_ignored: bool,
    /// Total resources of the resulting cluster (every node but those to terminate, the
    /// launches included), in order of first appearance: Ray's `get_cluster_resources`,
    /// which its "Resized to N CPUs." event line reads.
    pub cluster_resources: crate::model::ResourceMap,
}

/// Runs one scheduling pass.
pub fn schedule(req: &SchedulingRequest) -> Decision {
    engine::Engine::new(req).with_views(Views::None).run().0
}

/// Runs one scheduling pass choosing new nodes with an expander chain (see
/// [`crate::expander`]); with `ray` at the head of the chain this is exactly [`schedule`].
pub fn schedule_with(req: &SchedulingRequest, chain: &mut ExpanderChain) -> Decision {
    engine::Engine::new(req)
        .with_views(Views::None)
        .with_chain(chain)
        .run()
        .0
}

/// Like [`schedule_with`], also returning every node of the resulting cluster.
pub fn schedule_with_explained(
    req: &SchedulingRequest,
    chain: &mut ExpanderChain,
) -> (Decision, Vec<NodeView>) {
    engine::Engine::new(req).with_chain(chain).run()
}

/// Like [`schedule_with_explained`], with only what was placed on each node: its views'
/// `total`, `available` and `available_for_constraint` are empty (the reconciler's and
/// the explanation's use, without three maps built per node).
pub fn schedule_with_placements(
    req: &SchedulingRequest,
    chain: &mut ExpanderChain,
) -> (Decision, Vec<NodeView>) {
    engine::Engine::new(req)
        .with_views(Views::Placements)
        .with_chain(chain)
        .run()
}

/// What a scheduling pass returns of the nodes of the resulting cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Views {
    /// Nothing (the decision alone).
    None,
    /// Each node's type, fate and placements.
    Placements,
    /// All of [`NodeView`].
    Full,
}

/// What happens to a node of the resulting cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFate {
    /// A new instance to launch.
    Launch,
    /// An existing instance that stays.
    Keep,
    /// An existing (or just planned) instance to terminate.
    Terminate,
}

/// One node of the resulting cluster and the demand placed on it (for tests and
/// explanations).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// Node type (shared by the views of its type's nodes).
    pub node_type: crate::model::Name,
    /// Its fate.
    pub fate: NodeFate,
    /// Index into the request's instances, for existing instances.
    pub instance: Option<usize>,
    /// Total resources.
    pub total: ResourceMap,
    /// Resources left for demand after placement.
    pub available: ResourceMap,
    /// Resources left for the cluster constraint after placement.
    pub available_for_constraint: ResourceMap,
    /// Demand placed on the node (gangs and tasks), with counts.
    pub placed: Vec<(ResourceRequest, u64)>,
    /// Constraint requests placed on the node, with counts.
    pub placed_constraint: Vec<(ResourceRequest, u64)>,
    /// For a node this pass launches for a placement group: its index in the request's
    /// `gang_requests` (the group it was made for; later bundles may share it).
    pub gang: Option<usize>,
}

/// Like [`schedule`], also returning every node of the resulting cluster.
pub fn schedule_explained(req: &SchedulingRequest) -> (Decision, Vec<NodeView>) {
    engine::Engine::new(req).run()
}

/// [`schedule_explained`] with every trial on the nodes' own maps.
#[cfg(test)]
fn schedule_explained_sparse(req: &SchedulingRequest) -> (Decision, Vec<NodeView>) {
    engine::Engine::new(req).without_dense().run()
}

/// Order on f64 as Python compares them. Scores and tie-breaks are finite (a NaN would
/// compare equal to anything here, and rank as 0 in the existing-node pass's keys).
pub(crate) fn fcmp(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b).unwrap_or(Ordering::Equal)
}

#[cfg(test)]
mod tests;
