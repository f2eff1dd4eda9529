//! The instance manager: validated, versioned, all-or-nothing updates of the instance
//! table, with subscribers notified after each applied batch.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::instance::InstanceStatus;

use super::error::InstanceError;
use super::event::InstanceUpdateEvent;
use super::record::{Instance, StatusChange};
use super::storage::InstanceStorage;
use super::transitions::{is_terminal, is_valid_new_status, is_valid_transition};

/// Something that reacts to applied updates (Ray's `InstanceUpdatedSubscriber`), e.g. a
/// component that launches instances when they become REQUESTED or records allocation
/// failures.
///
/// Subscribers are called synchronously, in subscription order, only after a batch was
/// stored; they cannot veto it. They must not block: a subscriber with slow work queues it.
pub trait InstanceUpdateSubscriber {
    /// Called with the events of one batch, in the order given to
    /// [`InstanceManager::update`], after all of them were applied.
    fn notify(&mut self, events: &[InstanceUpdateEvent]);
}

/// The result of an applied batch.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateOutcome {
    /// The table version after the write.
    pub table_version: u64,
    /// The records written, once each in their final state, in the order the batch first
    /// touched them.
    pub instances: Vec<Instance>,
}

/// The instance manager (Ray's `InstanceManager`): the only writer of the instance table.
///
/// Every [`update`](Self::update) reads the table from the storage, checks all events
/// against it, and writes all changed records in one
/// [`batch_upsert`](InstanceStorage::batch_upsert) at the version read, so a concurrent
/// writer makes it fail with [`InstanceError::VersionConflict`] rather than be overwritten.
/// Nothing is cached: the storage is the source of truth.
///
/// Not thread safe by itself (takes `&mut self`); one manager per cluster.
pub struct InstanceManager<S: InstanceStorage> {
    storage: S,
    subscribers: Vec<Box<dyn InstanceUpdateSubscriber + Send>>,
}

impl<S: InstanceStorage> InstanceManager<S> {
    /// A manager over `storage`, without subscribers.
    pub fn new(storage: S) -> Self {
        InstanceManager {
            storage,
            subscribers: Vec::new(),
        }
    }

    /// Adds a subscriber, notified after every successful non-empty update.
    pub fn subscribe(&mut self, subscriber: Box<dyn InstanceUpdateSubscriber + Send>) {
        self.subscribers.push(subscriber);
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The storage, mutably (for tests and for backends that need maintenance).
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// Gives the storage back.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// The table version and every instance, terminal ones included (Ray's
    /// `get_instance_manager_state`).
    pub fn get_instances(&self) -> Result<(u64, Vec<Instance>), InstanceError> {
        self.storage.load()
    }

    /// [`get_instances`](Self::get_instances), shared with the storage where it can lend
    /// its records (no copy of the table).
    pub fn get_instances_shared(
        &self,
    ) -> Result<(u64, Vec<std::sync::Arc<Instance>>), InstanceError> {
        self.storage.load_shared()
    }

    /// The table version and every instance by id.
    pub fn instances_by_id(&self) -> Result<(u64, BTreeMap<String, Instance>), InstanceError> {
        let (version, instances) = self.storage.load()?;
        Ok((
            version,
            instances
                .into_iter()
                .map(|i| (i.instance_id.clone(), i))
                .collect(),
        ))
    }

    /// Instance `instance_id`, if stored.
    pub fn get_instance(&self, instance_id: &str) -> Result<Option<Instance>, InstanceError> {
        let (_, instances) = self.storage.load()?;
        Ok(instances.into_iter().find(|i| i.instance_id == instance_id))
    }

    /// Applies `events` in order, all or nothing, at time `now_ns` (nanoseconds since the
    /// Unix epoch, from the caller's clock).
    ///
    /// Each event is checked against the table as changed by the events before it, so one
    /// batch may move an instance twice (the second event then expects the version the
    /// first produced). The batch is refused, with nothing applied and no subscriber
    /// called, if any event:
    /// - names an unknown instance ([`InstanceError::NotFound`]), or creates an id that
    ///   exists ([`InstanceError::AlreadyExists`]);
    /// - expects another version than the current one ([`InstanceError::StaleVersion`]);
    /// - asks for a transition outside the table ([`InstanceError::InvalidTransition`]);
    /// - is malformed ([`InstanceError::InvalidEvent`]): empty id, a new instance in a
    ///   status other than QUEUED/ALLOCATED/TERMINATING or without a node type, or a
    ///   target status whose required field is unset after the event (REQUESTED:
    ///   `launch_request_id`; ALLOCATED and TERMINATING: `cloud_instance_id`;
    ///   RAY_RUNNING: `node_id`), as Ray asserts;
    /// - or the storage refuses the write ([`InstanceError::VersionConflict`], ...).
    ///
    /// An applied event sets the new status, appends `(status, now_ns, details)` to the
    /// history, adds one to the instance's version, sets the fields the event carries and
    /// bumps the retry counts it asks for. An empty batch changes nothing (no write, no
    /// notification).
    pub fn update(
        &mut self,
        events: &[InstanceUpdateEvent],
        now_ns: i64,
    ) -> Result<UpdateOutcome, InstanceError> {
        let (version, instances) = self.storage.load_some(&touched_ids(events))?;
        self.apply(version, instances, events, now_ns)
    }

    /// Like [`update`](Self::update), but first requires the table to be at
    /// `expected_table_version` (Ray's `expected_version` of an update request), for
    /// callers that computed the events from a whole-table snapshot.
    pub fn update_at_version(
        &mut self,
        expected_table_version: u64,
        events: &[InstanceUpdateEvent],
        now_ns: i64,
    ) -> Result<UpdateOutcome, InstanceError> {
        let (version, instances) = self.storage.load_some(&touched_ids(events))?;
        if version != expected_table_version {
            return Err(InstanceError::VersionConflict {
                expected: expected_table_version,
                actual: version,
            });
        }
        self.apply(version, instances, events, now_ns)
    }

    /// Removes the terminal records (TERMINATED, ALLOCATION_FAILED) that entered their
    /// status before `older_than_ns`, and returns their ids, sorted. Records without a
    /// timestamp for their terminal status count as old. Subscribers are not notified
    /// (no status changes). Nothing to remove means no write.
    pub fn prune_terminal(&mut self, older_than_ns: i64) -> Result<Vec<String>, InstanceError> {
        let mut ids: Vec<String> = Vec::new();
        let version = self.storage.visit(&mut |i| {
            if is_terminal(i.status) && i.status_since(i.status).is_none_or(|t| t < older_than_ns) {
                ids.push(i.instance_id.clone());
            }
        })?;
        ids.sort();
        if !ids.is_empty() {
            self.storage.batch_upsert(version, &[], &ids)?;
        }
        Ok(ids)
    }

    fn apply(
        &mut self,
        version: u64,
        instances: Vec<Instance>,
        events: &[InstanceUpdateEvent],
        now_ns: i64,
    ) -> Result<UpdateOutcome, InstanceError> {
        if events.is_empty() {
            return Ok(UpdateOutcome {
                table_version: version,
                instances: Vec::new(),
            });
        }
        let mut table: BTreeMap<String, Instance> = instances
            .into_iter()
            .map(|i| (i.instance_id.clone(), i))
            .collect();
        let mut touched: Vec<String> = Vec::new();
        let mut touched_set: BTreeSet<String> = BTreeSet::new();
        for event in events {
            let updated = apply_event(table.get(&event.instance_id), event, now_ns)?;
            if touched_set.insert(event.instance_id.clone()) {
                touched.push(event.instance_id.clone());
            }
            table.insert(event.instance_id.clone(), updated);
        }
        let upserts: Vec<Instance> = touched.iter().filter_map(|id| table.remove(id)).collect();
        let table_version = self.storage.batch_upsert(version, &upserts, &[])?;
        for subscriber in &mut self.subscribers {
            subscriber.notify(events);
        }
        Ok(UpdateOutcome {
            table_version,
            instances: upserts,
        })
    }
}

/// The distinct instance ids `events` touch.
fn touched_ids(events: &[InstanceUpdateEvent]) -> Vec<&str> {
    let mut ids: Vec<&str> = events.iter().map(|e| e.instance_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The most status-history entries a record keeps (the creation and the latest ones).
/// REQUESTED is entered at most `max_request_retries + 1` times, all early in a record's
/// life, so the counts the reconciler takes from the history are unaffected.
pub const MAX_HISTORY: usize = 64;

/// The record `current` (None: not stored) becomes after `event`, or why not.
fn apply_event(
    current: Option<&Instance>,
    event: &InstanceUpdateEvent,
    now_ns: i64,
) -> Result<Instance, InstanceError> {
    let id = &event.instance_id;
    if id.is_empty() {
        return Err(InstanceError::invalid_event("", "empty instance id"));
    }
    let mut instance = match (current, event.expected_version) {
        (Some(_), None) => {
            return Err(InstanceError::AlreadyExists {
                instance_id: id.clone(),
            });
        }
        (None, Some(_)) => {
            return Err(InstanceError::NotFound {
                instance_id: id.clone(),
            });
        }
        (None, None) => {
            if !is_valid_new_status(event.new_status) {
                return Err(InstanceError::invalid_event(
                    id.clone(),
                    format!(
                        "a new instance must start in QUEUED, ALLOCATED or TERMINATING, not {}",
                        event.new_status.name()
                    ),
                ));
            }
            Instance::new(
                id.clone(),
                String::new(),
                event.new_status,
                now_ns,
                event.details.clone(),
            )
        }
        (Some(current), Some(expected)) => {
            if current.version != expected {
                return Err(InstanceError::StaleVersion {
                    instance_id: id.clone(),
                    expected,
                    actual: current.version,
                });
            }
            if !is_valid_transition(current.status, event.new_status) {
                return Err(InstanceError::InvalidTransition {
                    instance_id: id.clone(),
                    from: current.status,
                    to: event.new_status,
                });
            }
            let mut next = current.clone();
            next.status = event.new_status;
            next.version = next.version.saturating_add(1);
            next.status_history.push(StatusChange {
                status: event.new_status,
                timestamp_ns: now_ns,
                details: event.details.clone(),
            });
            // Bounded: the creation and the latest changes are kept (a node that cycles
            // between RAY_RUNNING and RAY_STOP_REQUESTED must not grow its record forever).
            let len = next.status_history.len();
            if len > MAX_HISTORY {
                next.status_history.drain(1..=len - MAX_HISTORY);
            }
            next
        }
    };
    set_fields(&mut instance, event);
    if event.is_create() && instance.node_type.is_empty() {
        return Err(InstanceError::invalid_event(
            id.clone(),
            "a new instance needs a node type",
        ));
    }
    check_required_fields(&instance)?;
    Ok(instance)
}

fn set_fields(instance: &mut Instance, event: &InstanceUpdateEvent) {
    if let Some(v) = &event.launch_request_id {
        instance.launch_request_id.clone_from(v);
    }
    if let Some(v) = event.launch_request_size {
        instance.launch_request_size = v;
    }
    if let Some(v) = &event.cloud_instance_id {
        instance.cloud_instance_id = Some(v.clone());
    }
    if let Some(v) = &event.node_id {
        instance.node_id = Some(v.clone());
    }
    if let Some(v) = &event.node_type {
        instance.node_type.clone_from(v);
    }
    if let Some(v) = &event.launch_config_hash {
        instance.launch_config_hash.clone_from(v);
    }
    if let Some(v) = event.is_head {
        instance.is_head = v;
    }
    if let Some(v) = &event.error {
        instance.last_error = Some(v.clone());
    }
    // A stop starts afresh with its own cause and deadline, and a node back to
    // RAY_RUNNING (a refused or timed-out stop) keeps neither: a later idle stop must not
    // inherit a consolidation drain's deadline.
    if matches!(
        event.new_status,
        InstanceStatus::RayRunning | InstanceStatus::RayStopRequested
    ) {
        instance.stop_cause = None;
        instance.drain_deadline_ns = None;
    }
    if let Some(v) = &event.stop_cause {
        instance.stop_cause = Some(v.clone());
    }
    if let Some(v) = event.drain_deadline_ns {
        instance.drain_deadline_ns = Some(v);
    }
    if let Some(v) = &event.gang {
        instance.gang = Some(v.clone());
    }
    if event.bump_launch_retries {
        instance.launch_retries = instance.launch_retries.saturating_add(1);
    }
    if event.bump_termination_retries {
        instance.termination_retries = instance.termination_retries.saturating_add(1);
    }
}

/// The fields Ray asserts for a status, checked on the record after the event (so an
/// event need not repeat a value already stored).
fn check_required_fields(instance: &Instance) -> Result<(), InstanceError> {
    let set = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    let missing = match instance.status {
        InstanceStatus::Requested if instance.launch_request_id.is_empty() => {
            Some("launch_request_id")
        }
        InstanceStatus::Allocated | InstanceStatus::Terminating
            if !set(&instance.cloud_instance_id) =>
        {
            Some("cloud_instance_id")
        }
        InstanceStatus::RayRunning if !set(&instance.node_id) => Some("node_id"),
        _ => None,
    };
    match missing {
        Some(field) => Err(InstanceError::invalid_event(
            instance.instance_id.clone(),
            format!("{} needs {field}", instance.status.name()),
        )),
        None => Ok(()),
    }
}
