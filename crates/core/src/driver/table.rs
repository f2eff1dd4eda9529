//! The instance table in the GCS KV, one key per instance, so that a save writes what
//! changed and a table of any size loads in bounded messages.
//!
//! Namespace `__rayscale`:
//! - `instance/<cluster>/<instance id>`: one record (JSON of [`Instance`]);
//! - `table/<cluster>`: `{"version": v, "epoch": e}`, the table version and the lease
//!   epoch of the last writer; a writer whose epoch is lower than the stored one has lost
//!   the lease and writes nothing;
//! - `availability/<cluster>`: what is known of the cloud's capacity
//!   ([`AvailabilityState`]);
//! - `instances/<cluster>`: the whole table as one value, as rayscale stored it before;
//!   read when no per-instance key exists, and removed by the first save.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::future::Future;
use std::pin::Pin;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::gcs::Gcs;
use crate::availability::AvailabilityState;
use crate::error::CoreError;
use crate::instance::{Instance, decode_table};

/// The KV namespace of rayscale's keys.
pub const NAMESPACE: &str = "__rayscale";

/// Keys fetched per `InternalKVMultiGet` (bounded messages at any table size).
const MULTI_GET_CHUNK: usize = 500;

/// KV writes in flight at once.
const CONCURRENT_WRITES: usize = 32;

/// Runs `calls` with at most [`CONCURRENT_WRITES`] in flight (one HTTP/2 connection
/// carries them); results in the order of `calls`. The futures are boxed with `Send`
/// spelled out, which the compiler cannot infer through a stream of borrowing closures.
async fn concurrently<'a, T: Send + 'a>(
    calls: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>,
) -> Vec<T> {
    futures_util::stream::iter(calls)
        .buffered(CONCURRENT_WRITES)
        .collect()
        .await
}

#[derive(Debug, Serialize, Deserialize, Default, PartialEq, Eq, Clone, Copy)]
struct Meta {
    version: u64,
    #[serde(default)]
    epoch: u64,
}

/// What a load found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The table version.
    pub version: u64,
    /// The records.
    pub instances: Vec<Instance>,
    /// Records that did not decode (left out, one line each naming the key): their cloud
    /// instances are adopted again as unknown, never lost.
    pub skipped: Vec<String>,
    /// Whether anything was stored.
    pub found: bool,
}

/// What a save wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SaveStats {
    /// Records written.
    pub written: usize,
    /// Records deleted.
    pub deleted: usize,
    /// Bytes of values written.
    pub bytes: usize,
}

/// One cluster's table in the KV, remembering what it last wrote.
#[derive(Debug)]
pub struct KvTable {
    cluster: String,
    /// Record version of each stored record, as last written or loaded.
    stored: HashMap<String, u64>,
    stored_meta: Option<Meta>,
    legacy: bool,
}

impl KvTable {
    /// The table of cluster `cluster`.
    pub fn new(cluster: &str) -> Self {
        KvTable {
            cluster: cluster.to_string(),
            stored: HashMap::new(),
            stored_meta: None,
            legacy: false,
        }
    }

    fn record_prefix(&self) -> String {
        format!("instance/{}/", self.cluster)
    }

    fn meta_key(&self) -> String {
        format!("table/{}", self.cluster)
    }

    fn legacy_key(&self) -> String {
        format!("instances/{}", self.cluster)
    }

    fn availability_key(&self) -> String {
        format!("availability/{}", self.cluster)
    }

    fn stored_err(key: &str, message: impl std::fmt::Display) -> CoreError {
        CoreError::Stored {
            namespace: NAMESPACE.into(),
            key: key.into(),
            message: crate::instance::error::one_line(message),
        }
    }

    /// The epoch of the last writer (0 when none).
    pub async fn stored_epoch<G: Gcs + ?Sized>(&self, gcs: &G) -> Result<u64, CoreError> {
        let key = self.meta_key();
        match gcs.kv_get(NAMESPACE, &key).await? {
            None => Ok(0),
            Some(b) => serde_json::from_slice::<Meta>(&b)
                .map(|m| m.epoch)
                .map_err(|e| Self::stored_err(&key, e)),
        }
    }

    /// Loads the table (per-instance keys, or else the former single value).
    pub async fn load<G: Gcs + ?Sized>(&mut self, gcs: &G) -> Result<Loaded, CoreError> {
        let prefix = self.record_prefix();
        let keys = gcs.kv_keys(NAMESPACE, &prefix).await?;
        let meta_key = self.meta_key();
        let meta = match gcs.kv_get(NAMESPACE, &meta_key).await? {
            None => None,
            Some(b) => Some(
                serde_json::from_slice::<Meta>(&b).map_err(|e| Self::stored_err(&meta_key, e))?,
            ),
        };
        let mut out = Loaded::default();
        self.stored.clear();
        self.stored_meta = meta;
        self.legacy = false;
        if keys.is_empty() && meta.is_none() {
            let legacy = self.legacy_key();
            let Some(bytes) = gcs.kv_get(NAMESPACE, &legacy).await? else {
                return Ok(out);
            };
            let (version, instances) =
                decode_table(&bytes).map_err(|e| Self::stored_err(&legacy, e))?;
            self.legacy = true;
            out.found = true;
            out.version = version;
            out.instances = instances;
            return Ok(out);
        }
        out.found = true;
        out.version = meta.map_or(0, |m| m.version);
        for chunk in keys.chunks(MULTI_GET_CHUNK) {
            for (key, bytes) in gcs.kv_multi_get(NAMESPACE, chunk).await? {
                match serde_json::from_slice::<Instance>(&bytes) {
                    Ok(i) if key.strip_prefix(&prefix) == Some(i.instance_id.as_str()) => {
                        self.stored.insert(i.instance_id.clone(), i.version);
                        out.instances.push(i);
                    }
                    Ok(i) => out.skipped.push(format!(
                        "{NAMESPACE}/{key}: holds instance {:?}, not the one its key names",
                        i.instance_id
                    )),
                    Err(e) => out.skipped.push(format!(
                        "{NAMESPACE}/{key}: {}",
                        crate::instance::error::one_line(e)
                    )),
                }
            }
        }
        out.instances
            .sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        Ok(out)
    }

    /// Writes what changed since the last load or save: records whose version moved, the
    /// deletion of records no longer in `instances`, and the table version. Refuses
    /// (writing nothing) when a writer with a higher epoch than `epoch` wrote the table.
    ///
    /// A save that fails part-way leaves the KV with some records newer than others;
    /// each record is whole, and the next save writes the rest.
    pub async fn save<'a, G: Gcs + ?Sized>(
        &mut self,
        gcs: &G,
        version: u64,
        instances: impl IntoIterator<Item = &'a Instance> + Clone + Send,
        epoch: u64,
    ) -> Result<SaveStats, CoreError> {
        let stored_epoch = self.stored_epoch(gcs).await?;
        if stored_epoch > epoch {
            return Err(CoreError::LeaseLost(format!(
                "the instance table was written under epoch {stored_epoch}, this process \
                 holds {epoch}"
            )));
        }
        let prefix = self.record_prefix();
        let mut puts = Vec::new();
        for i in instances.clone() {
            if self.stored.get(&i.instance_id) == Some(&i.version) {
                continue;
            }
            let key = format!("{prefix}{}", i.instance_id);
            let bytes = serde_json::to_vec(i).map_err(|e| Self::stored_err(&key, e))?;
            puts.push((i.instance_id.clone(), i.version, key, bytes));
        }
        let live: HashSet<&str> = instances
            .into_iter()
            .map(|i| i.instance_id.as_str())
            .collect();
        let gone: Vec<String> = self
            .stored
            .keys()
            .filter(|id| !live.contains(id.as_str()))
            .cloned()
            .collect();
        let mut stats = SaveStats::default();
        let result = self
            .write(
                gcs,
                &prefix,
                &puts,
                &gone,
                Meta { version, epoch },
                &mut stats,
            )
            .await;
        if result.is_err() {
            // The caller drops the table this save was for: a record written now may
            // come again at the same version with other content. Rewrite every record
            // written by this save next time.
            for (id, ..) in &puts {
                if self.stored.contains_key(id) {
                    self.stored.insert(id.clone(), u64::MAX);
                }
            }
        }
        result.map(|()| stats)
    }

    /// The writes of a save: puts, then deletes (each batch concurrent, bounded), then
    /// the meta key; `stored` follows every write that made it.
    async fn write<G: Gcs + ?Sized>(
        &mut self,
        gcs: &G,
        prefix: &str,
        puts: &[(String, u64, String, Vec<u8>)],
        gone: &[String],
        meta: Meta,
        stats: &mut SaveStats,
    ) -> Result<(), CoreError> {
        let mut first_err = None;
        let put_results = concurrently(
            puts.iter()
                .map(|(_, _, key, bytes)| gcs.kv_put(NAMESPACE, key, bytes, true))
                .collect(),
        )
        .await;
        for ((id, v, _, bytes), r) in puts.iter().zip(put_results) {
            match r {
                Ok(_) => {
                    stats.written += 1;
                    stats.bytes += bytes.len();
                    self.stored.insert(id.clone(), *v);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let keys: Vec<String> = gone.iter().map(|id| format!("{prefix}{id}")).collect();
        let del_results =
            concurrently(keys.iter().map(|key| gcs.kv_del(NAMESPACE, key)).collect()).await;
        for (id, r) in gone.iter().zip(del_results) {
            match r {
                Ok(()) => {
                    self.stored.remove(id);
                    stats.deleted += 1;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        if self.stored_meta != Some(meta) {
            let bytes = serde_json::to_vec(&meta).map_err(|e| Self::stored_err("table", e))?;
            gcs.kv_put(NAMESPACE, &self.meta_key(), &bytes, true)
                .await?;
            stats.bytes += bytes.len();
            self.stored_meta = Some(meta);
        }
        if self.legacy {
            gcs.kv_del(NAMESPACE, &self.legacy_key()).await?;
            self.legacy = false;
        }
        Ok(())
    }

    /// Removes the whole table and the availability state. Returns how many records
    /// there were.
    pub async fn delete<G: Gcs + ?Sized>(&mut self, gcs: &G) -> Result<usize, CoreError> {
        let keys = gcs.kv_keys(NAMESPACE, &self.record_prefix()).await?;
        concurrently(keys.iter().map(|k| gcs.kv_del(NAMESPACE, k)).collect())
            .await
            .into_iter()
            .collect::<Result<Vec<()>, CoreError>>()?;
        gcs.kv_del(NAMESPACE, &self.meta_key()).await?;
        gcs.kv_del(NAMESPACE, &self.availability_key()).await?;
        let legacy = gcs.kv_get(NAMESPACE, &self.legacy_key()).await?;
        gcs.kv_del(NAMESPACE, &self.legacy_key()).await?;
        self.stored.clear();
        self.stored_meta = None;
        let legacy_count = legacy
            .and_then(|b| decode_table(&b).ok())
            .map_or(0, |(_, i)| i.len());
        Ok(keys.len() + legacy_count)
    }

    /// The stored availability state, `None` if none.
    pub async fn load_availability<G: Gcs + ?Sized>(
        &self,
        gcs: &G,
    ) -> Result<Option<AvailabilityState>, CoreError> {
        let key = self.availability_key();
        let Some(bytes) = gcs.kv_get(NAMESPACE, &key).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Self::stored_err(&key, e))
    }

    /// Stores the availability state.
    pub async fn save_availability<G: Gcs + ?Sized>(
        &self,
        gcs: &G,
        state: &AvailabilityState,
    ) -> Result<(), CoreError> {
        let key = self.availability_key();
        let bytes = serde_json::to_vec(state).map_err(|e| Self::stored_err(&key, e))?;
        gcs.kv_put(NAMESPACE, &key, &bytes, true).await.map(|_| ())
    }
}
