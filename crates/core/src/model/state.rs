//! The GCS side of a snapshot, as plain Rust types (converted from protobuf at the edge).

use super::resources::ResourceMap;

/// Each byte's two lowercase hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = [HEX[b >> 4], HEX[b & 15]];
        b += 1;
    }
    t
};

/// Lowercase hex of a binary id.
fn hex(id: &[u8]) -> String {
    let mut out = vec![0u8; id.len() * 2];
    for (o, &b) in out.chunks_exact_mut(2).zip(id) {
        o.copy_from_slice(&HEX_PAIRS[usize::from(b)]);
    }
    // Only ASCII hex digits were written.
    String::from_utf8(out).unwrap_or_default()
}

/// Ray node status as the GCS reports it (`NodeStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeStatus {
    /// Unset (Ray treats it as running).
    Unspecified,
    /// Running and busy.
    Running,
    /// Dead.
    Dead,
    /// Running and idle.
    Idle,
    /// Draining.
    Draining,
}

/// A Ray node as the GCS reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeState {
    /// Binary node id.
    pub node_id: Vec<u8>,
    /// Cloud instance id the raylet was started with.
    pub instance_id: String,
    /// Node type name (`RAY_NODE_TYPE_NAME`).
    pub ray_node_type_name: String,
    /// Resources still available.
    pub available_resources: ResourceMap,
    /// Total resources.
    pub total_resources: ResourceMap,
    /// Dynamic labels (deprecated in Ray, still read for STRICT_SPREAD).
    pub dynamic_labels: Vec<(String, String)>,
    /// Static labels.
    pub labels: Vec<(String, String)>,
    /// How long the node has been idle, in ms.
    pub idle_duration_ms: i64,
    /// Status.
    pub status: Option<NodeStatus>,
}

impl NodeState {
    /// Whether Ray counts the node idle (its status, or an idle time): what Ray's
    /// scheduler terminates for idleness and autostop waits for.
    pub fn is_idle(&self) -> bool {
        self.status == Some(NodeStatus::Idle) || self.idle_duration_ms > 0
    }

    /// The node id in lowercase hex (Ray's `NodeID.hex()`).
    pub fn node_id_hex(&self) -> String {
        hex(&self.node_id)
    }
}

/// Label selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelOperator {
    /// Unset or unknown: never satisfied (as in Ray's autoscaler).
    Unspecified,
    /// The label value must be one of the values.
    In,
    /// The label value must not be one of the values.
    NotIn,
}

/// One constraint of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelConstraint {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: LabelOperator,
    /// Values (a set; order kept as received).
    pub values: Vec<String>,
}

/// A label selector: all constraints must hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LabelSelector {
    /// The constraints.
    pub constraints: Vec<LabelConstraint>,
}

/// A placement constraint of a resource request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PlacementConstraint {
    /// Must land with the others carrying the same label (STRICT_PACK).
    Affinity {
        /// Label name.
        label_name: String,
        /// Label value.
        label_value: String,
    },
    /// Must not land on a node already carrying the label (STRICT_SPREAD).
    AntiAffinity {
        /// Label name.
        label_name: String,
        /// Label value.
        label_value: String,
    },
    /// A constraint with neither field set.
    Empty,
}

/// One resource request (a task, an actor or a bundle).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceRequest {
    /// The resources, in received order.
    pub resources: ResourceMap,
    /// Placement constraints.
    pub placement_constraints: Vec<PlacementConstraint>,
    /// Label selectors, in priority order (later ones are fallbacks).
    pub label_selectors: Vec<LabelSelector>,
}

/// A resource request repeated `count` times.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceRequestByCount {
    /// The request.
    pub request: ResourceRequest,
    /// How many.
    pub count: u64,
}

/// A gang (placement group) request: all or nothing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GangRequest {
    /// The legacy `requests` field.
    pub requests: Vec<ResourceRequest>,
    /// Human-readable details.
    pub details: String,
    /// The requests of the first bundle selector, when the gang uses `bundle_selectors`
    /// (Ray schedules only the first one).
    pub first_bundle_selector: Option<Vec<ResourceRequest>>,
}

impl GangRequest {
    /// The requests Ray schedules for this gang.
    pub fn effective_requests(&self) -> &[ResourceRequest] {
        match &self.first_bundle_selector {
            Some(r) => r,
            None => &self.requests,
        }
    }
}

/// A `request_resources` constraint: the cluster must be able to hold all of these at once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterConstraint {
    /// The requests and their counts.
    pub resource_requests: Vec<ResourceRequestByCount>,
}

/// A live node's row of the GCS's reply that could not be read (an amount that means
/// nothing: NaN, infinite, a negative total). The node is there, so its instance is kept
/// exactly as it was: never taken for gone, idle or free, never stopped for it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnreadableNode {
    /// Binary node id.
    pub node_id: Vec<u8>,
    /// Cloud instance id the raylet was started with.
    pub instance_id: String,
    /// Node type name, as reported.
    pub ray_node_type_name: String,
    /// Status, as reported.
    pub status: Option<NodeStatus>,
    /// Why the row could not be read (one line naming the field).
    pub reason: String,
}

impl UnreadableNode {
    /// The node id in lowercase hex.
    pub fn node_id_hex(&self) -> String {
        hex(&self.node_id)
    }
}

/// The GCS's view of the cluster (`ClusterResourceState`), as far as scheduling needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterResourceState {
    /// All Ray nodes the GCS knows and whose rows were read, in the order it reported them.
    pub node_states: Vec<NodeState>,
    /// Live nodes whose rows could not be read (see [`UnreadableNode`]).
    pub unreadable_nodes: Vec<UnreadableNode>,
    /// Pending task/actor demand.
    pub pending_resource_requests: Vec<ResourceRequestByCount>,
    /// Pending placement groups.
    pub pending_gang_resource_requests: Vec<GangRequest>,
    /// `request_resources` constraints (at most one).
    pub cluster_resource_constraints: Vec<ClusterConstraint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_per_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let want: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&all), want);
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0xab, 0x01]), "ab01");
    }
}
