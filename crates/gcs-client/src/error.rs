//! The one error type of this crate.

/// Errors of the GCS client and of protocol conversions.
#[derive(Debug, thiserror::Error)]
pub enum GcsError {
    /// A proto3 JSON document did not decode; `path` names the offending field.
    #[error("{path}: {message}")]
    Json {
        /// Dotted path of the offending value.
        path: String,
        /// The decoder's message.
        message: String,
    },
    /// A protobuf message from the GCS did not decode.
    #[error("malformed {what} from the GCS: {source}")]
    Decode {
        /// Which message.
        what: &'static str,
        /// Decoder error.
        #[source]
        source: prost::DecodeError,
    },
    /// A value is outside what rayscale accepts (e.g. a negative count).
    #[error("{path}: {message}")]
    Invalid {
        /// Dotted path of the offending value.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The gRPC expander is misconfigured (address, certificate, flags).
    #[error("grpc expander: {0}")]
    ExpanderConfig(String),
    /// A GCS call failed: a gRPC error (after the client's retries, if the code is
    /// retryable) or a non-OK status embedded in Ray's reply.
    #[error(
        "GCS {method} at {addr} failed after {attempts} attempt(s): {code}: {message}{}",
        if *retryable { " (retryable)" } else { "" }
    )]
    Rpc {
        /// The RPC, e.g. `"GetClusterResourceState"`.
        method: &'static str,
        /// The GCS address called (`host:port`).
        addr: String,
        /// The gRPC code (e.g. `"Unavailable"`), or `"GcsStatus <n>"` for a non-OK status
        /// embedded in the reply.
        code: String,
        /// What went wrong, on one line.
        message: String,
        /// Whether the failure was transient (a later call may succeed).
        retryable: bool,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The GCS address is unusable (malformed, TLS asked for, no runtime to connect from).
    #[error("GCS address {addr:?}: {message}")]
    Connect {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        message: String,
    },
}
