//! What the driver needs of Ray's GCS, as a trait: the cluster state, the autoscaling
//! report, Ray's two ways of stopping a node, and the internal KV. `rayscale-gcs-client`
//! implements it over gRPC; [`crate::testing::FakeGcs`] in memory.

use async_trait::async_trait;

use crate::error::CoreError;
use crate::model::ClusterResourceState;
use crate::reconciler::AutoscalingReport;

/// The GCS's cluster resource state, converted.
#[derive(Debug, Clone, Default)]
pub struct GcsState {
    /// `cluster_resource_state_version`.
    pub version: i64,
    /// The state, without the rows that did not convert.
    pub state: ClusterResourceState,
    /// The rows left out, one line each naming the row.
    pub skipped: Vec<String>,
}

/// The GCS's answer to a drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReply {
    /// Whether the node accepted.
    pub accepted: bool,
    /// Why not, when it did not.
    pub rejection: String,
}

/// Ray's GCS as the driver uses it. Every call is one request; retries of transient
/// failures are the implementation's.
#[async_trait]
pub trait Gcs: Send + Sync {
    /// `AutoscalerStateService.GetClusterResourceState`.
    async fn cluster_resource_state(&self) -> Result<GcsState, CoreError>;

    /// `AutoscalerStateService.ReportAutoscalingState` with `report`, the state version it
    /// was computed from and the report's own version.
    async fn report_autoscaling_state(
        &self,
        report: &AutoscalingReport,
        seen_state_version: i64,
        version: i64,
    ) -> Result<(), CoreError>;

    /// The version of the autoscaling state the GCS holds (0 when none).
    async fn held_report_version(&self) -> Result<i64, CoreError>;

    /// Whether the head runs with autoscaler v2 (`__autoscaler_v2_enabled` is `1`).
    async fn autoscaler_v2_enabled(&self) -> Result<bool, CoreError>;

    /// `AutoscalerStateService.DrainNode` with `DRAIN_NODE_REASON_IDLE_TERMINATION` and
    /// deadline 0, as Ray's `RayStopper` drains an idle node: the node may reject it.
    async fn drain_idle_node(
        &self,
        node_id_hex: &str,
        reason: &str,
    ) -> Result<DrainReply, CoreError>;

    /// `AutoscalerStateService.DrainNode` with `DRAIN_NODE_REASON_PREEMPTION` and
    /// `deadline_ms` (since the epoch): Ray does not refuse it; the node takes no new work
    /// and what runs on it runs on until it ends or the node goes (consolidation).
    async fn drain_node_until(
        &self,
        node_id_hex: &str,
        reason: &str,
        deadline_ms: i64,
    ) -> Result<DrainReply, CoreError>;

    /// `NodeInfoGcsService.DrainNode`, as Ray's `RayStopper` stops a node for any other
    /// cause: the GCS stops the node now. Returns whether the GCS drained it.
    async fn stop_node(&self, node_id_hex: &str) -> Result<bool, CoreError>;

    /// The value of `key` in `namespace`.
    async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, CoreError>;

    /// The values of `keys` that exist, with their keys.
    async fn kv_multi_get(
        &self,
        namespace: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<u8>)>, CoreError>;

    /// Puts `value` under `key`; with `overwrite` false only when the key is absent (the
    /// GCS does this atomically). Returns whether the key was added.
    async fn kv_put(
        &self,
        namespace: &str,
        key: &str,
        value: &[u8],
        overwrite: bool,
    ) -> Result<bool, CoreError>;

    /// Deletes `key` (absent is fine).
    async fn kv_del(&self, namespace: &str, key: &str) -> Result<(), CoreError>;

    /// The keys starting with `prefix`.
    async fn kv_keys(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, CoreError>;
}
