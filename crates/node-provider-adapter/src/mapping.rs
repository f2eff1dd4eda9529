//! Pure mapping between Ray's v1 world and the contract: the tags of a launch (Ray's
//! `NodeProviderAdapter._launch_nodes_by_type`), a listed node as a [`CloudInstance`]
//! (its `get_non_terminated`), a node type's resources and labels.

use std::collections::BTreeMap;

use rayscale_core::config::NodeTypeConfig;
use rayscale_core::model::resources::to_f64;
use rayscale_core::provider::{CloudInstance, CloudInstanceState, NodeKind, tags};

use crate::v1::{NodeInfo, Tags};

/// The tags of a worker launched for `request_id` (Ray's, value for value).
pub fn launch_tags(
    cluster_name: &str,
    node_type: &str,
    request_id: &str,
    launch_config_hash: &str,
) -> Tags {
    Tags::from([
        (
            tags::NODE_NAME.to_string(),
            format!("ray-{cluster_name}-worker"),
        ),
        (
            tags::NODE_KIND.to_string(),
            tags::NODE_KIND_WORKER.to_string(),
        ),
        (
            tags::NODE_STATUS.to_string(),
            tags::STATUS_UNINITIALIZED.to_string(),
        ),
        (
            tags::LAUNCH_CONFIG.to_string(),
            launch_config_hash.to_string(),
        ),
        (tags::LAUNCH_REQUEST.to_string(), request_id.to_string()),
        (tags::USER_NODE_TYPE.to_string(), node_type.to_string()),
    ])
}

/// What a listed node is to the adapter.
#[derive(Debug, PartialEq)]
pub enum Listed {
    /// A node of the cluster.
    Node(CloudInstance),
    /// Not managed by Ray (no `ray-node-type` tag, or `unmanaged`): skipped.
    Unmanaged,
    /// A `ray-node-type` tag Ray does not know: skipped, with this line.
    Invalid(String),
}

/// A listed node as an instance (Ray's `get_non_terminated`): kind from `ray-node-type`,
/// type from `ray-user-node-type`, request from `ray-launch-request`; the address only
/// when it is one (Ray's `fake_multinode` answers its node id).
pub fn to_instance(node: &NodeInfo) -> Listed {
    let kind = match node.tags.get(tags::NODE_KIND).map(String::as_str) {
        None | Some(tags::NODE_KIND_UNMANAGED) => return Listed::Unmanaged,
        Some(tags::NODE_KIND_WORKER) => NodeKind::Worker,
        Some(tags::NODE_KIND_HEAD) => NodeKind::Head,
        Some(other) => {
            return Listed::Invalid(format!(
                "node {}: tag {}={other:?} is neither head, worker nor unmanaged: skipped",
                node.id,
                tags::NODE_KIND
            ));
        }
    };
    let tag = |k: &str| node.tags.get(k).filter(|v| !v.is_empty()).cloned();
    Listed::Node(CloudInstance {
        cloud_instance_id: node.id.clone(),
        node_type: tag(tags::USER_NODE_TYPE).unwrap_or_default(),
        kind,
        request_id: tag(tags::LAUNCH_REQUEST),
        state: if node.running {
            CloudInstanceState::Running
        } else {
            CloudInstanceState::Pending
        },
        private_ip: node
            .internal_ip
            .clone()
            .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok()),
        public_ip: None,
        launch_config_hash: tag(tags::LAUNCH_CONFIG),
        labels: node.tags.clone(),
        zone: None,
    })
}

/// A node type's resources, as Ray hands them to `create_node_with_resources_and_labels`.
pub fn resources_of(t: &NodeTypeConfig) -> BTreeMap<String, f64> {
    t.resources
        .0
        .iter()
        .map(|(k, v)| (k.to_string(), to_f64(*v)))
        .collect()
}

/// A node type's labels.
pub fn labels_of(t: &NodeTypeConfig) -> BTreeMap<String, String> {
    t.labels.iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(tags: &[(&str, &str)], ip: Option<&str>) -> NodeInfo {
        NodeInfo {
            id: "n-1".into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            running: true,
            internal_ip: ip.map(str::to_string),
        }
    }

    #[test]
    fn rays_tags_and_its_reading_of_them() {
        let t = launch_tags("c", "cpu", "lr-1", "h1");
        assert_eq!(t["ray-node-name"], "ray-c-worker");
        assert_eq!(t["ray-node-type"], "worker");
        assert_eq!(t["ray-node-status"], "uninitialized");
        assert_eq!(t["ray-launch-request"], "lr-1");
        let listed: Vec<(String, String)> = t.clone().into_iter().collect();
        let refs: Vec<(&str, &str)> = listed
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let Listed::Node(c) = to_instance(&node(&refs, Some("10.0.0.7"))) else {
            panic!("a worker");
        };
        assert_eq!(
            (
                c.kind,
                c.node_type.as_str(),
                c.request_id.as_deref(),
                c.private_ip.as_deref()
            ),
            (NodeKind::Worker, "cpu", Some("lr-1"), Some("10.0.0.7"))
        );
        assert_eq!(c.launch_config_hash.as_deref(), Some("h1"));
        // fake_multinode answers its node id for an address: not an address.
        let Listed::Node(c) = to_instance(&node(&[("ray-node-type", "head")], Some("fff00001")))
        else {
            panic!("a head");
        };
        assert_eq!((c.kind, c.private_ip), (NodeKind::Head, None));
        assert_eq!(to_instance(&node(&[], None)), Listed::Unmanaged);
        assert_eq!(
            to_instance(&node(&[("ray-node-type", "unmanaged")], None)),
            Listed::Unmanaged
        );
        assert!(matches!(
            to_instance(&node(&[("ray-node-type", "gpu")], None)),
            Listed::Invalid(m) if m.contains("n-1")
        ));
    }
}
