//! The one error type of this crate.

/// Errors raised by the core: always name the offending path of the input.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum CoreError {
    /// An input document (cluster config, scenario) is malformed at `path`.
    #[error("{path}: {message}")]
    Invalid {
        /// Dotted path of the offending value, e.g. `config.available_node_types.gpu`.
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// An instance-table update was refused (stale version, invalid transition, ...).
    #[error("instance table: {0}")]
    Instance(#[from] crate::instance::InstanceError),
    /// A call to the GCS failed (unreachable, refused, or answered garbage). The message
    /// names the call and the GCS.
    #[error("{message}")]
    Gcs {
        /// The call, e.g. `InternalKVPut`.
        call: String,
        /// What went wrong, on one line.
        message: String,
    },
    /// A value rayscale stored in the GCS KV does not decode.
    #[error("GCS KV {namespace}/{key}: {message}")]
    Stored {
        /// The KV namespace.
        namespace: String,
        /// The key.
        key: String,
        /// Why it does not decode.
        message: String,
    },
    /// A call to the cloud provider failed or did not answer.
    #[error("cloud provider: {0}")]
    Provider(String),
    /// This process does not hold the cluster's autoscaler lease (any more).
    #[error("not the active autoscaler: {0}")]
    LeaseLost(String),
    /// The text could not be parsed as YAML/JSON at all.
    #[error("{origin}: {message}")]
    Parse {
        /// Where the text came from (file name or a section name).
        origin: String,
        /// The parser's message, on one line.
        message: String,
    },
}

impl CoreError {
    /// Shorthand for [`CoreError::Gcs`]; the message is prefixed with the call unless it
    /// names it already.
    pub fn gcs(call: impl Into<String>, message: impl std::fmt::Display) -> Self {
        let call = call.into();
        let message = crate::instance::error::one_line(message);
        let message = if message.contains(&call) {
            message
        } else {
            format!("GCS {call}: {message}")
        };
        CoreError::Gcs { call, message }
    }

    /// Shorthand for [`CoreError::Invalid`].
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        CoreError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}
