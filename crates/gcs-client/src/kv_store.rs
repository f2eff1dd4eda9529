//! rayscale's instance table kept in the GCS internal KV, so that it survives a restart
//! of rayscale and lives exactly as long as the cluster's GCS.
//!
//! The whole table (its version and every instance) is one value, encoded with
//! `rayscale_core::instance::encode_table`, under key `instances/<cluster name>` in
//! namespace [`KvInstanceStore::NAMESPACE`]. Beside it, under `availability/<cluster name>`,
//! what the loop knows of the cloud's capacity (JSON of
//! `rayscale_core::availability::AvailabilityState`), so that a restart keeps it and
//! `rayscale snapshot` can put it in a scenario.

use rayscale_core::availability::AvailabilityState;
use rayscale_core::instance::{Instance, decode_table, encode_table};

use crate::GcsError;
use crate::client::GcsClient;

/// The instance table of one cluster in the GCS KV.
#[derive(Debug, Clone)]
pub struct KvInstanceStore {
    client: GcsClient,
    namespace: String,
    key: String,
    availability_key: String,
}

impl KvInstanceStore {
    /// The KV namespace of rayscale's keys.
    pub const NAMESPACE: &'static str = "__rayscale";

    /// The store of cluster `cluster_name`: key `instances/<cluster_name>` in
    /// [`NAMESPACE`](Self::NAMESPACE).
    pub fn new(client: GcsClient, cluster_name: &str) -> Self {
        KvInstanceStore {
            client,
            namespace: Self::NAMESPACE.to_string(),
            key: format!("instances/{cluster_name}"),
            availability_key: format!("availability/{cluster_name}"),
        }
    }

    /// The KV namespace used.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The KV key used.
    pub fn key(&self) -> &str {
        &self.key
    }

    fn table_error(&self, message: String) -> GcsError {
        self.key_error(&self.key, message)
    }

    fn key_error(&self, key: &str, message: String) -> GcsError {
        GcsError::InstanceTable {
            namespace: self.namespace.clone(),
            key: key.to_string(),
            message,
        }
    }

    /// The stored table version and instances, `None` if nothing is stored (a new
    /// cluster, or a GCS that restarted without persistence). Bytes that do not decode are
    /// a one-line [`GcsError::InstanceTable`] naming the key.
    pub async fn load(&self) -> Result<Option<(u64, Vec<Instance>)>, GcsError> {
        let Some(bytes) = self
            .client
            .kv_get(&self.namespace, self.key.as_bytes())
            .await?
        else {
            return Ok(None);
        };
        decode_table(&bytes)
            .map(Some)
            .map_err(|e| self.table_error(e.to_string()))
    }

    /// Stores the table (`version` and `instances`), replacing what was stored.
    ///
    /// The KV has no compare-and-swap, so this store is meant for a single writer (one
    /// rayscale per cluster); optimistic concurrency is the instance manager's, in memory.
    pub async fn save(&self, version: u64, instances: &[Instance]) -> Result<(), GcsError> {
        let bytes =
            encode_table(version, instances).map_err(|e| self.table_error(e.to_string()))?;
        self.client
            .kv_put(&self.namespace, self.key.as_bytes(), &bytes, true)
            .await
            .map(|_| ())
    }

    /// The stored availability state, `None` if none is stored. Bytes that do not decode
    /// are a one-line [`GcsError::InstanceTable`] naming the key.
    pub async fn load_availability(&self) -> Result<Option<AvailabilityState>, GcsError> {
        let Some(bytes) = self
            .client
            .kv_get(&self.namespace, self.availability_key.as_bytes())
            .await?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| self.key_error(&self.availability_key, e.to_string()))
    }

    /// Stores the availability state, replacing what was stored.
    pub async fn save_availability(&self, state: &AvailabilityState) -> Result<(), GcsError> {
        let bytes = serde_json::to_vec(state)
            .map_err(|e| self.key_error(&self.availability_key, e.to_string()))?;
        self.client
            .kv_put(
                &self.namespace,
                self.availability_key.as_bytes(),
                &bytes,
                true,
            )
            .await
            .map(|_| ())
    }

    /// Removes the stored table (and the availability state). Returns whether there was a
    /// table.
    pub async fn delete(&self) -> Result<bool, GcsError> {
        self.client
            .kv_del(&self.namespace, self.availability_key.as_bytes(), false)
            .await?;
        self.client
            .kv_del(&self.namespace, self.key.as_bytes(), false)
            .await
            .map(|n| n > 0)
    }
}
