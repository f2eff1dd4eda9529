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
    /// Shorthand for [`CoreError::Invalid`].
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        CoreError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}
