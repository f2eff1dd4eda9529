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
}
