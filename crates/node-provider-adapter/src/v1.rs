//! Ray's v1 node-provider interface (`ray/autoscaler/node_provider.py`), async.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::errors::AdapterError;

/// A node's tags (Ray's `Dict[str, str]`).
pub type Tags = BTreeMap<String, String>;

/// What the adapter needs to know of one node, read in one go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The provider's node id.
    pub id: String,
    /// Its tags.
    pub tags: Tags,
    /// `is_running`.
    pub running: bool,
    /// `internal_ip` (may be anything the provider says; the mapping keeps only IPs).
    pub internal_ip: Option<String>,
}

/// Ray's v1 `NodeProvider`. Methods with a default follow Ray's defaults.
#[async_trait::async_trait]
pub trait NodeProvider: Send + Sync {
    /// The provider type (for logs).
    fn provider_type(&self) -> &str;
    /// Ids of the nodes that are not terminated and carry every tag of `tag_filters`.
    async fn non_terminated_nodes(&self, tag_filters: &Tags) -> Result<Vec<String>, AdapterError>;
    /// Makes `count` nodes with `node_config` and `tags`; returns the ids the provider
    /// reports it made, or `None` when it reports none (Ray's providers may return
    /// nothing).
    async fn create_node(
        &self,
        node_config: &Value,
        tags: &Tags,
        count: u64,
    ) -> Result<Option<Vec<String>>, AdapterError>;
    /// As [`create_node`](Self::create_node), telling the provider the node type's
    /// resources and labels (Ray's default ignores them).
    async fn create_node_with_resources_and_labels(
        &self,
        node_config: &Value,
        tags: &Tags,
        count: u64,
        resources: &BTreeMap<String, f64>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Option<Vec<String>>, AdapterError> {
        let _ = (resources, labels);
        self.create_node(node_config, tags, count).await
    }
    /// Terminates one node.
    async fn terminate_node(&self, node_id: &str) -> Result<(), AdapterError>;
    /// Terminates nodes (Ray's default: one at a time).
    async fn terminate_nodes(&self, node_ids: &[String]) -> Result<(), AdapterError> {
        for id in node_ids {
            self.terminate_node(id).await?;
        }
        Ok(())
    }
    /// A node's tags.
    async fn node_tags(&self, node_id: &str) -> Result<Tags, AdapterError>;
    /// Sets (merges) tags on a node.
    async fn set_node_tags(&self, node_id: &str, tags: &Tags) -> Result<(), AdapterError>;
    /// Whether the node is running.
    async fn is_running(&self, node_id: &str) -> Result<bool, AdapterError>;
    /// Whether the node is terminated.
    async fn is_terminated(&self, node_id: &str) -> Result<bool, AdapterError>;
    /// The node's internal address.
    async fn internal_ip(&self, node_id: &str) -> Result<Option<String>, AdapterError>;
    /// The node's external address.
    async fn external_ip(&self, node_id: &str) -> Result<Option<String>, AdapterError>;
    /// Every non-terminated node matching `tag_filters` with its tags, running state and
    /// internal address. By default one call per node and field (as Ray's adapter
    /// does); the bridge answers it in one round trip.
    async fn describe(&self, tag_filters: &Tags) -> Result<Vec<NodeInfo>, AdapterError> {
        let mut out = Vec::new();
        for id in self.non_terminated_nodes(tag_filters).await? {
            out.push(NodeInfo {
                tags: self.node_tags(&id).await?,
                running: self.is_running(&id).await?,
                internal_ip: self.internal_ip(&id).await?,
                id,
            });
        }
        Ok(out)
    }
    /// Installs and starts Ray on a running worker as Ray's `RayInstaller` does (its
    /// `NodeUpdater`: file mounts, initialization, setup and start commands over SSH),
    /// once; `Ok` when the node's status tag says up-to-date. Not every provider can.
    async fn install_ray(
        &self,
        node_id: &str,
        node_type: &str,
        head_ip: &str,
    ) -> Result<(), AdapterError> {
        let _ = (node_id, node_type, head_ip);
        Err(AdapterError::Unsupported {
            method: "install_ray".into(),
        })
    }
}
