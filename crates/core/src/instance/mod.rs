//! The instance manager: Ray's instance state machine with versioned, all-or-nothing
//! updates over a storage trait (modelled on Ray 2.60's
//! `autoscaler/v2/instance_manager/{instance_manager,common,instance_storage}.py`).
//!
//! - [`transitions`]: the exhaustive valid-transition table of [`InstanceStatus`].
//! - [`Instance`]: the stored record, with its status history.
//! - [`InstanceUpdateEvent`]: one change (or creation) of one instance.
//! - [`InstanceStorage`]: the versioned table ([`InMemoryStorage`], and
//!   [`encode_table`]/[`decode_table`] for key-value backends elsewhere).
//! - [`InstanceManager`]: validates a batch of events, applies it atomically, then
//!   notifies [`InstanceUpdateSubscriber`]s.
//!
//! Pure: no I/O, no clock (time is the caller's `now_ns`), no randomness (ids are the
//! caller's).
//!
//! [`InstanceStatus`]: crate::model::instance::InstanceStatus

pub mod error;
pub mod event;
pub mod manager;
pub mod record;
pub mod storage;
pub mod transitions;

#[cfg(test)]
mod tests;

pub use error::InstanceError;
pub use event::InstanceUpdateEvent;
pub use manager::{InstanceManager, InstanceUpdateSubscriber, UpdateOutcome};
pub use record::{Instance, StatusChange};
pub use storage::{InMemoryStorage, InstanceStorage, decode_table, encode_table};
pub use transitions::{
    NEW_INSTANCE_STATUSES, is_terminal, is_valid_new_status, is_valid_transition,
    reachable_statuses, valid_transitions,
};
