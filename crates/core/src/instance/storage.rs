//! Where the instance table lives: a storage trait with optimistic concurrency, an
//! in-memory implementation, and the byte encoding for key-value backends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::{InstanceError, one_line};
use super::record::Instance;

/// A versioned instance table.
///
/// The table has one version that every successful write increases. Writers name the
/// version they read ([`load`](Self::load)); a write against any other version is refused
/// with [`InstanceError::VersionConflict`] and changes nothing (Ray's
/// `InstanceStorage.batch_upsert_instances` with `expected_storage_version`).
///
/// Storage keeps records as given: the per-instance `version` is maintained by
/// [`InstanceManager`](super::InstanceManager), not by the storage.
pub trait InstanceStorage {
    /// The table version and every stored instance.
    fn load(&self) -> Result<(u64, Vec<Instance>), InstanceError>;

    /// The table version and every stored instance, shared: a storage that keeps its
    /// records in memory lends them without copying. The default wraps [`load`](Self::load).
    fn load_shared(&self) -> Result<(u64, Vec<Arc<Instance>>), InstanceError> {
        let (version, all) = self.load()?;
        Ok((version, all.into_iter().map(Arc::new).collect()))
    }

    /// The table version and the stored instances among `ids` (in any order). The
    /// default reads the whole table; a storage that can look records up overrides it.
    fn load_some(&self, ids: &[&str]) -> Result<(u64, Vec<Instance>), InstanceError> {
        let (version, all) = self.load()?;
        let wanted: BTreeSet<&str> = ids.iter().copied().collect();
        Ok((
            version,
            all.into_iter()
                .filter(|i| wanted.contains(i.instance_id.as_str()))
                .collect(),
        ))
    }

    /// Calls `f` with every stored instance and returns the table version. The default
    /// reads the whole table; a storage that holds it in memory lends its records.
    fn visit(&self, f: &mut dyn FnMut(&Instance)) -> Result<u64, InstanceError> {
        let (version, all) = self.load()?;
        all.iter().for_each(f);
        Ok(version)
    }

    /// Inserts or replaces `upserts` (by `instance_id`), then removes `deletes` (unknown
    /// ids are ignored), all at once, if the table is still at `expected_table_version`.
    /// Returns the new table version. On error nothing is changed.
    fn batch_upsert(
        &mut self,
        expected_table_version: u64,
        upserts: &[Instance],
        deletes: &[String],
    ) -> Result<u64, InstanceError>;
}

/// An [`InstanceStorage`] in memory: a map by instance id and a version starting at 0.
/// Loads return instances sorted by id.
///
/// Changes can be made tentatively: after [`begin`](Self::begin), writes remember what
/// they replaced, so [`rollback`](Self::rollback) undoes them all at a cost that grows
/// with what changed, not with the table (the driver's all-or-nothing iterations).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InMemoryStorage {
    version: u64,
    instances: BTreeMap<String, Arc<Instance>>,
    journal: Option<Journal>,
}

/// What an open change replaced: the table version at `begin`, and each record's value
/// before its first write since (`None`: it did not exist).
#[derive(Debug, Clone, Default, PartialEq)]
struct Journal {
    version: u64,
    before: BTreeMap<String, Option<Arc<Instance>>>,
}

impl InMemoryStorage {
    /// An empty table at version 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table at `version` holding `instances` (a later duplicate id replaces an earlier
    /// one), e.g. one decoded with [`decode_table`].
    pub fn with_instances(version: u64, instances: impl IntoIterator<Item = Instance>) -> Self {
        InMemoryStorage {
            version,
            instances: instances
                .into_iter()
                .map(|i| (i.instance_id.clone(), Arc::new(i)))
                .collect(),
            journal: None,
        }
    }

    /// Opens a tentative change. A change still open (its step was cut short: dropped or
    /// panicked before it committed) is rolled back first: only committed writes last.
    pub fn begin(&mut self) {
        self.rollback();
        self.journal = Some(Journal {
            version: self.version,
            before: BTreeMap::new(),
        });
    }

    /// Keeps what was written since [`begin`](Self::begin).
    pub fn commit(&mut self) {
        self.journal = None;
    }

    /// Undoes everything written since [`begin`](Self::begin), version included. Without
    /// an open change, does nothing.
    pub fn rollback(&mut self) {
        let Some(j) = self.journal.take() else {
            return;
        };
        for (id, old) in j.before {
            match old {
                Some(i) => {
                    self.instances.insert(id, i);
                }
                None => {
                    self.instances.remove(&id);
                }
            }
        }
        self.version = j.version;
    }

    /// The stored instances, sorted by id.
    pub fn iter(&self) -> impl Iterator<Item = &Instance> + Clone {
        self.instances.values().map(|i| &**i)
    }

    fn remember(&mut self, id: &str) {
        if let Some(j) = &mut self.journal
            && !j.before.contains_key(id)
        {
            j.before
                .insert(id.to_string(), self.instances.get(id).cloned());
        }
    }

    /// The current table version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The stored instance `instance_id`, if any.
    pub fn get(&self, instance_id: &str) -> Option<&Instance> {
        self.instances.get(instance_id).map(|i| &**i)
    }

    /// The number of stored instances.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }
}

impl InstanceStorage for InMemoryStorage {
    fn load(&self) -> Result<(u64, Vec<Instance>), InstanceError> {
        Ok((
            self.version,
            self.instances.values().map(|i| (**i).clone()).collect(),
        ))
    }

    fn load_shared(&self) -> Result<(u64, Vec<Arc<Instance>>), InstanceError> {
        Ok((self.version, self.instances.values().cloned().collect()))
    }

    fn load_some(&self, ids: &[&str]) -> Result<(u64, Vec<Instance>), InstanceError> {
        Ok((
            self.version,
            ids.iter()
                .filter_map(|id| self.instances.get(*id).map(|i| (**i).clone()))
                .collect(),
        ))
    }

    fn visit(&self, f: &mut dyn FnMut(&Instance)) -> Result<u64, InstanceError> {
        self.instances.values().for_each(|i| f(i));
        Ok(self.version)
    }

    fn batch_upsert(
        &mut self,
        expected_table_version: u64,
        upserts: &[Instance],
        deletes: &[String],
    ) -> Result<u64, InstanceError> {
        if expected_table_version != self.version {
            return Err(InstanceError::VersionConflict {
                expected: expected_table_version,
                actual: self.version,
            });
        }
        for instance in upserts {
            self.remember(&instance.instance_id);
            self.instances
                .insert(instance.instance_id.clone(), Arc::new(instance.clone()));
        }
        for id in deletes {
            self.remember(id);
            self.instances.remove(id);
        }
        self.version = self.version.saturating_add(1);
        Ok(self.version)
    }
}

/// A storage lent for a while (the driver lends its table to one iteration's instance
/// manager and keeps it whatever becomes of the iteration).
impl<T: InstanceStorage + ?Sized> InstanceStorage for &mut T {
    fn load(&self) -> Result<(u64, Vec<Instance>), InstanceError> {
        (**self).load()
    }

    fn load_shared(&self) -> Result<(u64, Vec<Arc<Instance>>), InstanceError> {
        (**self).load_shared()
    }

    fn load_some(&self, ids: &[&str]) -> Result<(u64, Vec<Instance>), InstanceError> {
        (**self).load_some(ids)
    }

    fn visit(&self, f: &mut dyn FnMut(&Instance)) -> Result<u64, InstanceError> {
        (**self).visit(f)
    }

    fn batch_upsert(
        &mut self,
        expected_table_version: u64,
        upserts: &[Instance],
        deletes: &[String],
    ) -> Result<u64, InstanceError> {
        (**self).batch_upsert(expected_table_version, upserts, deletes)
    }
}

/// The encoded form of a table: `{"version": 7, "instances": [...]}`.
#[derive(Serialize)]
struct TableRef<'a> {
    version: u64,
    instances: &'a [Instance],
}

#[derive(Deserialize)]
struct TableOwned {
    version: u64,
    instances: Vec<Instance>,
}

/// Encodes a whole table (its version and instances) as JSON bytes under one key, as
/// rayscale stored it in the GCS KV before one key per instance (the driver still reads
/// that form, and tests plant it). Statuses are written as Ray's names.
///
/// Fails only if serialization itself fails, which well-formed records (strings,
/// integers, booleans and lists) never do.
pub fn encode_table(version: u64, instances: &[Instance]) -> Result<Vec<u8>, InstanceError> {
    serde_json::to_vec(&TableRef { version, instances })
        .map_err(|e| InstanceError::Encode(one_line(e)))
}

/// Decodes bytes written by [`encode_table`] into `(version, instances)`.
///
/// Anything else (garbage, truncation, an unknown status name, two records with the same
/// id) is a one-line [`InstanceError::Decode`], never a panic.
pub fn decode_table(bytes: &[u8]) -> Result<(u64, Vec<Instance>), InstanceError> {
    let table: TableOwned =
        serde_json::from_slice(bytes).map_err(|e| InstanceError::Decode(one_line(e)))?;
    let mut seen = BTreeSet::new();
    for instance in &table.instances {
        if !seen.insert(instance.instance_id.as_str()) {
            return Err(InstanceError::Decode(format!(
                "duplicate instance id `{}`",
                instance.instance_id
            )));
        }
    }
    Ok((table.version, table.instances))
}
