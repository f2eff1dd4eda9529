//! Domain model shared by the scheduler, the config and (later) the instance manager.

pub mod instance;
pub mod name;
pub mod resources;
pub mod state;

pub use instance::{InstanceStatus, TerminationCause};
pub use name::Name;
pub use resources::{Fixed, ResourceMap};
pub use state::{
    ClusterConstraint, ClusterResourceState, GangRequest, LabelConstraint, LabelOperator,
    LabelSelector, NodeState, NodeStatus, PlacementConstraint, ResourceRequest,
    ResourceRequestByCount, UnreadableNode,
};
