//! The error type of the instance manager.

use crate::model::instance::InstanceStatus;

/// Why an instance update, a storage write or a table decode was refused.
///
/// Every message is one line and names the instance (or the table) concerned. An update
/// refused with any of these errors has changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceError {
    /// An update names an instance that is not in the table.
    #[error("instance {instance_id}: not found")]
    NotFound {
        /// The instance named by the update.
        instance_id: String,
    },
    /// A new instance (no expected version) has an id that is already taken, either in the
    /// table or by an earlier event of the same batch.
    #[error("instance {instance_id}: already exists")]
    AlreadyExists {
        /// The duplicate id.
        instance_id: String,
    },
    /// The update was computed from an older version of the instance.
    #[error("instance {instance_id}: stale version {expected}, current version is {actual}")]
    StaleVersion {
        /// The instance concerned.
        instance_id: String,
        /// The version the update expected.
        expected: u64,
        /// The version stored.
        actual: u64,
    },
    /// The status change is not in the valid-transition table.
    #[error("instance {instance_id}: invalid transition {} -> {}", .from.name(), .to.name())]
    InvalidTransition {
        /// The instance concerned.
        instance_id: String,
        /// Its current status.
        from: InstanceStatus,
        /// The status asked for.
        to: InstanceStatus,
    },
    /// The event is malformed: empty id, a new instance in a status new instances may not
    /// start in, or a field the target status needs is missing.
    #[error("instance {instance_id}: {message}")]
    InvalidEvent {
        /// The instance concerned (may be empty when the id itself is missing).
        instance_id: String,
        /// What is wrong.
        message: String,
    },
    /// The instance table changed since it was read (optimistic concurrency).
    #[error("instance table: version conflict: expected {expected}, current version is {actual}")]
    VersionConflict {
        /// The table version the writer expected.
        expected: u64,
        /// The table version stored.
        actual: u64,
    },
    /// Stored bytes are not an encoded instance table.
    #[error("instance table: cannot decode: {0}")]
    Decode(String),
    /// The table could not be encoded (not expected to happen for well-formed records).
    #[error("instance table: cannot encode: {0}")]
    Encode(String),
    /// A storage backend failed (for backends outside this crate).
    #[error("instance storage: {0}")]
    Storage(String),
}

impl InstanceError {
    /// Shorthand for [`InstanceError::InvalidEvent`].
    pub fn invalid_event(instance_id: impl Into<String>, message: impl Into<String>) -> Self {
        InstanceError::InvalidEvent {
            instance_id: instance_id.into(),
            message: message.into(),
        }
    }
}

/// Collapses a (library) message to one line.
pub(crate) fn one_line(message: impl std::fmt::Display) -> String {
    message
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
