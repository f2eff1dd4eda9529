//! The GCS as the driver sees it: `rayscale_core::driver::Gcs` over [`GcsClient`], with
//! the wire conversions at this edge.

use async_trait::async_trait;
use rayscale_core::CoreError;
use rayscale_core::driver::{DrainReply, Gcs, GcsState};
use rayscale_core::reconciler::AutoscalingReport;

use crate::GcsError;
use crate::client::GcsClient;
use crate::convert::{autoscaling_state_to_proto, cluster_resource_state_frame, node_id_from_hex};
use crate::proto::ray::rpc::autoscaler as pb;

fn err(call: &str, e: GcsError) -> CoreError {
    CoreError::gcs(call, e)
}

fn utf8(call: &str, key: Vec<u8>) -> Result<String, CoreError> {
    String::from_utf8(key).map_err(|e| CoreError::gcs(call, format!("a key is not UTF-8: {e}")))
}

#[async_trait]
impl Gcs for GcsClient {
    async fn cluster_resource_state(&self) -> Result<GcsState, CoreError> {
        const CALL: &str = "GetClusterResourceState";
        let frame = self
            .get_cluster_resource_state_frame(0)
            .await
            .map_err(|e| err(CALL, e))?;
        // A demand row that does not convert is left out (as Ray's scheduler skips it); a
        // node row that does not is kept as unreadable (its instance is left as it was);
        // the rest of the state is acted on. A frame that does not decode is an error.
        let (version, state, skipped) =
            cluster_resource_state_frame(&frame, "cluster_resource_state")
                .map_err(|e| err(CALL, e))?;
        Ok(GcsState {
            version,
            state,
            skipped: skipped
                .iter()
                .map(ToString::to_string)
                .filter(|e| !e.starts_with("cluster_resource_state.node_states["))
                .collect(),
        })
    }

    async fn report_autoscaling_state(
        &self,
        report: &AutoscalingReport,
        seen_state_version: i64,
        version: i64,
    ) -> Result<(), CoreError> {
        let state = autoscaling_state_to_proto(report, seen_state_version, version);
        GcsClient::report_autoscaling_state(self, state)
            .await
            .map_err(|e| err("ReportAutoscalingState", e))
    }

    async fn held_report_version(&self) -> Result<i64, CoreError> {
        Ok(self
            .get_cluster_status()
            .await
            .map_err(|e| err("GetClusterStatus", e))?
            .autoscaling_state
            .map_or(0, |s| s.autoscaler_state_version))
    }

    async fn autoscaler_v2_enabled(&self) -> Result<bool, CoreError> {
        let v = GcsClient::kv_get(self, "__autoscaler", b"__autoscaler_v2_enabled")
            .await
            .map_err(|e| err("InternalKVGet", e))?;
        Ok(v.as_deref() == Some(b"1"))
    }

    async fn drain_idle_node(
        &self,
        node_id_hex: &str,
        reason: &str,
    ) -> Result<DrainReply, CoreError> {
        let node = node_id_from_hex(node_id_hex).map_err(|e| err("DrainNode", e))?;
        // Ray's RayStopper: an idle termination, no deadline.
        let r = self
            .drain_node(&node, pb::DrainNodeReason::IdleTermination, reason, 0)
            .await
            .map_err(|e| err("DrainNode", e))?;
        Ok(DrainReply {
            accepted: r.is_accepted,
            rejection: r.rejection_reason_message,
        })
    }

    async fn drain_node_until(
        &self,
        node_id_hex: &str,
        reason: &str,
        deadline_ms: i64,
    ) -> Result<DrainReply, CoreError> {
        let node = node_id_from_hex(node_id_hex).map_err(|e| err("DrainNode", e))?;
        let r = self
            .drain_node(&node, pb::DrainNodeReason::Preemption, reason, deadline_ms)
            .await
            .map_err(|e| err("DrainNode", e))?;
        Ok(DrainReply {
            accepted: r.is_accepted,
            rejection: r.rejection_reason_message,
        })
    }

    async fn stop_node(&self, node_id_hex: &str) -> Result<bool, CoreError> {
        let call = "NodeInfoGcsService.DrainNode";
        let node = node_id_from_hex(node_id_hex).map_err(|e| err(call, e))?;
        let drained = self
            .stop_nodes(std::slice::from_ref(&node))
            .await
            .map_err(|e| err(call, e))?;
        Ok(!drained.is_empty())
    }

    async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, CoreError> {
        GcsClient::kv_get(self, namespace, key.as_bytes())
            .await
            .map_err(|e| err("InternalKVGet", e))
    }

    async fn kv_multi_get(
        &self,
        namespace: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<u8>)>, CoreError> {
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        GcsClient::kv_multi_get(self, namespace, &keys)
            .await
            .map_err(|e| err("InternalKVMultiGet", e))?
            .into_iter()
            .map(|(k, v)| Ok((utf8("InternalKVMultiGet", k)?, v)))
            .collect()
    }

    async fn kv_put(
        &self,
        namespace: &str,
        key: &str,
        value: &[u8],
        overwrite: bool,
    ) -> Result<bool, CoreError> {
        GcsClient::kv_put(self, namespace, key.as_bytes(), value, overwrite)
            .await
            .map_err(|e| err("InternalKVPut", e))
    }

    async fn kv_del(&self, namespace: &str, key: &str) -> Result<(), CoreError> {
        GcsClient::kv_del(self, namespace, key.as_bytes(), false)
            .await
            .map(|_| ())
            .map_err(|e| err("InternalKVDel", e))
    }

    async fn kv_keys(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, CoreError> {
        GcsClient::kv_keys(self, namespace, prefix.as_bytes())
            .await
            .map_err(|e| err("InternalKVKeys", e))?
            .into_iter()
            .map(|k| utf8("InternalKVKeys", k))
            .collect()
    }
}
