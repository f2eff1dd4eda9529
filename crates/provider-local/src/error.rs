//! The crate's error type, converted into [`ProviderError`] at the trait boundary.

use std::io;
use std::path::PathBuf;

use rayscale_core::provider::{ProviderError, ProviderErrorKind, ProviderOp};

/// What can go wrong in the local-process provider. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum LocalProviderError {
    /// The configured `ray` binary does not exist (or is not on `PATH`).
    #[error("ray binary {} not found", .0.display())]
    RayBinaryNotFound(PathBuf),
    /// The configured `ray` binary exists but is not an executable file.
    #[error("ray binary {} is not an executable file", .0.display())]
    RayBinaryNotExecutable(PathBuf),
    /// A node type cannot be expressed as `ray start` flags.
    #[error("node type {name:?}: {reason}")]
    InvalidNodeType {
        /// The node type.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Some other configuration value is unusable.
    #[error("local provider config: {0}")]
    InvalidConfig(String),
    /// A launch asked for a node type the config does not have.
    #[error("unknown node type {0:?}")]
    UnknownNodeType(String),
    /// A launch request id that cannot be carried in an instance id.
    #[error("launch request id {id:?} is invalid: {reason}")]
    InvalidRequestId {
        /// The request id.
        id: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// The per-cluster log directory (or a log file in it) cannot be created.
    #[error("cannot create {}: {source}", path.display())]
    LogFile {
        /// The directory or file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// `ray start` could not be spawned.
    #[error("cannot start `ray start` for {instance_id}: {source}")]
    Spawn {
        /// The instance that was being launched.
        instance_id: String,
        /// The cause.
        source: io::Error,
    },
    /// `/proc` cannot be read.
    #[error("cannot scan /proc: {0}")]
    Proc(#[source] io::Error),
    /// A signal could not be delivered (other than to a process that is already gone).
    #[error("cannot send SIG{signal} to {target}: {source}")]
    Signal {
        /// `TERM` or `KILL`.
        signal: &'static str,
        /// `process N` or `process group N`.
        target: String,
        /// The cause.
        source: io::Error,
    },
}

impl LocalProviderError {
    /// The error table: which [`ProviderErrorKind`] each error is.
    pub fn kind(&self) -> ProviderErrorKind {
        match self {
            LocalProviderError::RayBinaryNotFound(_)
            | LocalProviderError::RayBinaryNotExecutable(_)
            | LocalProviderError::InvalidNodeType { .. }
            | LocalProviderError::InvalidConfig(_)
            | LocalProviderError::UnknownNodeType(_)
            | LocalProviderError::InvalidRequestId { .. } => ProviderErrorKind::InvalidConfig,
            LocalProviderError::Spawn { .. }
            | LocalProviderError::Proc(_)
            | LocalProviderError::LogFile { .. }
            | LocalProviderError::Signal { .. } => ProviderErrorKind::Transient,
        }
    }

    /// True when the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        self.kind() == ProviderErrorKind::Transient
    }

    /// Converts into the trait's error for `op`, keeping this error as its source.
    pub fn into_provider_error(self, op: ProviderOp) -> ProviderError {
        ProviderError::new(op, self.kind(), self.to_string()).with_source(self)
    }
}

impl From<LocalProviderError> for ProviderError {
    /// A failed call ([`ProviderOp::Other`]).
    fn from(e: LocalProviderError) -> Self {
        e.into_provider_error(ProviderOp::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_table() {
        let cases = [
            (
                LocalProviderError::UnknownNodeType("x".into()),
                ProviderErrorKind::InvalidConfig,
            ),
            (
                LocalProviderError::Proc(io::Error::other("x")),
                ProviderErrorKind::Transient,
            ),
            (
                LocalProviderError::Spawn {
                    instance_id: "i".into(),
                    source: io::Error::other("x"),
                },
                ProviderErrorKind::Transient,
            ),
            (
                LocalProviderError::RayBinaryNotFound("ray".into()),
                ProviderErrorKind::InvalidConfig,
            ),
        ];
        for (e, kind) in cases {
            let p = e.into_provider_error(ProviderOp::List);
            assert_eq!(p.kind, kind, "{p}");
            assert!(std::error::Error::source(&p).is_some());
        }
    }
}
