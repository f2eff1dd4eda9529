//! The instance table in the GCS KV, one key per instance, so that a save writes what
//! changed and a table of any size loads in bounded messages.
//!
//! Namespace `__rayscale`; each lease epoch writes a space of its own, so that a process
//! that lost the lease (paused mid-save, or whose renewals stopped landing) can never
//! write over the new holder's table:
//! - `records/<cluster>/<epoch>/<instance id>`: one record (JSON of [`Instance`]);
//! - `tables/<cluster>/<epoch>`: `{"version": v, "epoch": e}`, written after the space's
//!   records, so a space with this key holds a whole table;
//! - `availability/<cluster>`: what is known of the cloud's capacity
//!   ([`AvailabilityState`]).
//!
//! The holder of epoch `e` loads the highest space at or below `e` that has its meta key,
//! writes the whole table into space `e` at its first save, and then removes every older
//! space. Spaces above `e` (a newer holder's, or keys written by something else) are
//! never read or removed by it: the lease, not the table, says who holds the cluster.
//!
//! Former layouts, read when no space exists and removed by the first save:
//! `table/<cluster>` with `instance/<cluster>/<instance id>` (one key per instance, no
//! epoch in the key), and `instances/<cluster>` (the whole table as one value).
//!
//! Keys are outside input (any Ray job can write the namespace): an absurd epoch or
//! version is reported and ignored, never a reason to stop.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::future::Future;
use std::pin::Pin;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::gcs::Gcs;
use super::lease::MAX_EPOCH;
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

/// The highest table or record version rayscale reads as real (2^48); a stored value
/// above it was not written by rayscale.
pub const MAX_VERSION: u64 = 1 << 48;

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
    /// Records or keys that were left out (one line each naming the key): the cloud
    /// instances of records left out are adopted again as unknown, never lost.
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
    /// The space this process writes (its lease epoch).
    epoch: u64,
    /// Record version of each record in that space, as last written or loaded.
    stored: HashMap<String, u64>,
    stored_meta: Option<Meta>,
    /// Keys to remove once this space holds a whole table (older spaces, former layouts).
    cleanup: Vec<String>,
}

/// Parses a zero-padded epoch (exactly 20 digits).
fn parse_epoch(s: &str) -> Option<u64> {
    (s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

impl KvTable {
    /// The table of cluster `cluster`.
    pub fn new(cluster: &str) -> Self {
        KvTable {
            cluster: cluster.to_string(),
            epoch: 0,
            stored: HashMap::new(),
            stored_meta: None,
            cleanup: Vec::new(),
        }
    }

    fn meta_prefix(&self) -> String {
        format!("tables/{}/", self.cluster)
    }

    fn meta_key(&self, epoch: u64) -> String {
        format!("tables/{}/{epoch:020}", self.cluster)
    }

    fn records_prefix(&self) -> String {
        format!("records/{}/", self.cluster)
    }

    fn record_prefix(&self, epoch: u64) -> String {
        format!("records/{}/{epoch:020}/", self.cluster)
    }

    fn former_record_prefix(&self) -> String {
        format!("instance/{}/", self.cluster)
    }

    fn former_meta_key(&self) -> String {
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

    /// The clusters whose tables the GCS holds (any layout), sorted.
    pub async fn clusters<G: Gcs + ?Sized>(gcs: &G) -> Result<Vec<String>, CoreError> {
        let mut out = std::collections::BTreeSet::new();
        for k in gcs.kv_keys(NAMESPACE, "tables/").await? {
            if let Some((c, e)) = k.strip_prefix("tables/").and_then(|r| r.rsplit_once('/'))
                && parse_epoch(e).is_some()
            {
                out.insert(c.to_string());
            }
        }
        for k in gcs.kv_keys(NAMESPACE, "table/").await? {
            if let Some(c) = k.strip_prefix("table/") {
                out.insert(c.to_string());
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Loads the table for the holder of `epoch`: the highest space at or below it (see
    /// the module docs), or else a former layout. The next save writes into space `epoch`.
    pub async fn load<G: Gcs + ?Sized>(
        &mut self,
        gcs: &G,
        epoch: u64,
    ) -> Result<Loaded, CoreError> {
        self.epoch = epoch;
        self.stored.clear();
        self.stored_meta = None;
        self.cleanup.clear();
        let mut out = Loaded::default();
        let meta_prefix = self.meta_prefix();
        let records_prefix = self.records_prefix();
        let (meta_keys, record_keys) = futures_util::future::join(
            gcs.kv_keys(NAMESPACE, &meta_prefix),
            gcs.kv_keys(NAMESPACE, &records_prefix),
        )
        .await;
        let (meta_keys, record_keys) = (meta_keys?, record_keys?);
        // The spaces with a meta key, highest first; those above `epoch` are not ours.
        let mut spaces: Vec<u64> = Vec::new();
        for k in &meta_keys {
            match k.strip_prefix(&meta_prefix).and_then(parse_epoch) {
                Some(e) if e <= epoch => spaces.push(e),
                Some(e) => out.skipped.push(format!(
                    "{NAMESPACE}/{k}: a table of epoch {e}, above this process's {epoch}: \
                     ignored"
                )),
                None => out
                    .skipped
                    .push(format!("{NAMESPACE}/{k}: not a table key: ignored")),
            }
        }
        spaces.sort_unstable_by(|a, b| b.cmp(a));
        let mut chosen = None;
        for e in spaces {
            let key = self.meta_key(e);
            let Some(bytes) = gcs.kv_get(NAMESPACE, &key).await? else {
                continue;
            };
            match serde_json::from_slice::<Meta>(&bytes) {
                Ok(m) => {
                    chosen = Some((e, m));
                    break;
                }
                Err(err) => out.skipped.push(format!(
                    "{NAMESPACE}/{key}: {}: ignored",
                    crate::instance::error::one_line(err)
                )),
            }
        }
        // Every older space goes once this one holds the table; newer ones stay.
        for k in meta_keys.iter() {
            if k.strip_prefix(&meta_prefix)
                .and_then(parse_epoch)
                .is_some_and(|e| e < epoch)
            {
                self.cleanup.push(k.clone());
            }
        }
        for k in record_keys.iter() {
            let space = k
                .strip_prefix(&records_prefix)
                .and_then(|r| r.split_once('/'))
                .and_then(|(e, _)| parse_epoch(e));
            if space.is_some_and(|e| e < epoch) {
                self.cleanup.push(k.clone());
            }
        }
        let Some((space, meta)) = chosen else {
            self.load_former(gcs, &mut out).await?;
            return Ok(out);
        };
        out.found = true;
        out.version = if meta.version > MAX_VERSION {
            out.skipped.push(format!(
                "{NAMESPACE}/{}: table version {} is above any real one: counting from 0",
                self.meta_key(space),
                meta.version
            ));
            0
        } else {
            meta.version
        };
        let prefix = self.record_prefix(space);
        let keys: Vec<String> = record_keys
            .into_iter()
            .filter(|k| k.starts_with(&prefix))
            .collect();
        self.read_records(gcs, &keys, &prefix, &mut out).await?;
        if space == epoch {
            self.stored = out
                .instances
                .iter()
                .map(|i| (i.instance_id.clone(), i.version))
                .collect();
            self.stored_meta = Some(Meta {
                version: out.version,
                epoch,
            });
        }
        Ok(out)
    }

    /// Reads records `keys` (each under `prefix` plus its instance id) into `out`.
    async fn read_records<G: Gcs + ?Sized>(
        &self,
        gcs: &G,
        keys: &[String],
        prefix: &str,
        out: &mut Loaded,
    ) -> Result<(), CoreError> {
        for chunk in keys.chunks(MULTI_GET_CHUNK) {
            for (key, bytes) in gcs.kv_multi_get(NAMESPACE, chunk).await? {
                match serde_json::from_slice::<Instance>(&bytes) {
                    Ok(i) if key.strip_prefix(prefix) != Some(i.instance_id.as_str()) => {
                        out.skipped.push(format!(
                            "{NAMESPACE}/{key}: holds instance {:?}, not the one its key names",
                            i.instance_id
                        ))
                    }
                    Ok(i) if i.version > MAX_VERSION => out.skipped.push(format!(
                        "{NAMESPACE}/{key}: record version {} is above any real one",
                        i.version
                    )),
                    Ok(i) => out.instances.push(i),
                    Err(e) => out.skipped.push(format!(
                        "{NAMESPACE}/{key}: {}",
                        crate::instance::error::one_line(e)
                    )),
                }
            }
        }
        out.instances
            .sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        Ok(())
    }

    /// Loads a table of a former layout (see the module docs), if any, and marks its keys
    /// for removal.
    async fn load_former<G: Gcs + ?Sized>(
        &mut self,
        gcs: &G,
        out: &mut Loaded,
    ) -> Result<(), CoreError> {
        let prefix = self.former_record_prefix();
        let keys = gcs.kv_keys(NAMESPACE, &prefix).await?;
        let meta_key = self.former_meta_key();
        let meta = match gcs.kv_get(NAMESPACE, &meta_key).await? {
            None => None,
            Some(b) => match serde_json::from_slice::<Meta>(&b) {
                Ok(m) => Some(m),
                Err(e) => {
                    out.skipped.push(format!(
                        "{NAMESPACE}/{meta_key}: {}: ignored",
                        crate::instance::error::one_line(e)
                    ));
                    Some(Meta::default())
                }
            },
        };
        if keys.is_empty() && meta.is_none() {
            let legacy = self.legacy_key();
            let Some(bytes) = gcs.kv_get(NAMESPACE, &legacy).await? else {
                return Ok(());
            };
            let (version, instances) =
                decode_table(&bytes).map_err(|e| Self::stored_err(&legacy, e))?;
            out.found = true;
            out.version = version.min(MAX_VERSION);
            out.instances = instances
                .into_iter()
                .filter(|i| i.version <= MAX_VERSION)
                .collect();
            self.cleanup.push(legacy);
            return Ok(());
        }
        out.found = true;
        out.version = meta.map_or(0, |m| m.version);
        if out.version > MAX_VERSION {
            out.version = 0;
        }
        self.read_records(gcs, &keys, &prefix, out).await?;
        self.cleanup.extend(keys);
        self.cleanup.push(meta_key);
        Ok(())
    }

    /// Writes what changed since the last load or save into space `epoch` (the whole
    /// table the first time): records whose version moved, the deletion of records no
    /// longer in `instances`, and then the meta key. Once the space holds a whole table,
    /// removes the older spaces and former layouts.
    ///
    /// A save that fails part-way leaves the space with some records newer than others;
    /// each record is whole, and the next save writes the rest.
    pub async fn save<'a, G: Gcs + ?Sized>(
        &mut self,
        gcs: &G,
        version: u64,
        instances: impl IntoIterator<Item = &'a Instance> + Clone + Send,
        epoch: u64,
    ) -> Result<SaveStats, CoreError> {
        if epoch != self.epoch {
            // Another space (a table not loaded for this epoch): write it all.
            self.epoch = epoch;
            self.stored.clear();
            self.stored_meta = None;
        }
        let prefix = self.record_prefix(epoch);
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
        result?;
        if !self.cleanup.is_empty() {
            let keys = std::mem::take(&mut self.cleanup);
            let results =
                concurrently(keys.iter().map(|k| gcs.kv_del(NAMESPACE, k)).collect()).await;
            for (k, r) in keys.into_iter().zip(results) {
                if let Err(e) = r {
                    tracing::debug!("cannot remove the old table key {k} yet: {e}");
                    self.cleanup.push(k);
                }
            }
        }
        Ok(stats)
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
            let key = self.meta_key(meta.epoch);
            let bytes = serde_json::to_vec(&meta).map_err(|e| Self::stored_err(&key, e))?;
            gcs.kv_put(NAMESPACE, &key, &bytes, true).await?;
            stats.bytes += bytes.len();
            self.stored_meta = Some(meta);
        }
        Ok(())
    }

    /// Removes the whole table (every space and former layout) and the availability
    /// state. Returns how many records there were in the newest table.
    pub async fn delete<G: Gcs + ?Sized>(&mut self, gcs: &G) -> Result<usize, CoreError> {
        let loaded = self.load(gcs, MAX_EPOCH).await?;
        let mut keys = gcs.kv_keys(NAMESPACE, &self.records_prefix()).await?;
        keys.extend(gcs.kv_keys(NAMESPACE, &self.meta_prefix()).await?);
        keys.extend(gcs.kv_keys(NAMESPACE, &self.former_record_prefix()).await?);
        keys.extend([
            self.former_meta_key(),
            self.legacy_key(),
            self.availability_key(),
        ]);
        concurrently(keys.iter().map(|k| gcs.kv_del(NAMESPACE, k)).collect())
            .await
            .into_iter()
            .collect::<Result<Vec<()>, CoreError>>()?;
        self.stored.clear();
        self.stored_meta = None;
        self.cleanup.clear();
        Ok(loaded.instances.len())
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
