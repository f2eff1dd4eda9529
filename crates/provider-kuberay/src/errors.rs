//! The crate's error type and the one table that maps the Kubernetes API's answers onto
//! the contract's kinds (`rayscale_core::provider::ProviderErrorKind`).
//!
//! The API server answers a failed call with an HTTP status and a `Status` object
//! (`reason`, `message`; API concepts, "Status"). The table:
//! - 409 `Conflict` (the `resourceVersion` a patch carries is stale): a concurrent edit;
//!   the provider re-reads and retries;
//! - 429 `TooManyRequests` (API priority and fairness): throttled;
//! - 401/403: auth (the service account lacks a permission: see the RBAC manifest);
//! - 404: not found (the RayCluster or a pod);
//! - 400/422 otherwise: invalid (the patch or the RayCluster is wrong);
//! - 5xx, 410 `Expired`/`Gone`, 504 (a `NotOlderThan` list the cache cannot serve yet)
//!   and connection failures: transient.

use rayscale_core::provider::{ProviderError, ProviderErrorKind, ProviderOp};

/// What can go wrong in the KubeRay provider. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum KubeRayError {
    /// The RayCluster (or a flag) is unusable; `path` names where.
    #[error("{path}: {message}")]
    Config {
        /// Where (`RayCluster.spec.workerGroupSpecs[0].maxReplicas`, ...).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A Kubernetes API call failed.
    #[error("{call}: {message}")]
    Call {
        /// What was called (`get RayCluster ns/name`, ...).
        call: String,
        /// The HTTP status, when an answer came.
        status: Option<u16>,
        /// The kind it maps to.
        kind: ProviderErrorKind,
        /// One line: the status, reason and the server's message, or the client's failure.
        message: String,
        /// The client's error (boxed: it is large).
        #[source]
        source: Option<Box<kube::Error>>,
    },
    /// No client could be configured (no in-cluster service account, no kubeconfig).
    #[error("kubernetes client: {0}")]
    Client(String),
}

impl KubeRayError {
    /// The contract kind.
    pub fn kind(&self) -> ProviderErrorKind {
        match self {
            KubeRayError::Config { .. } => ProviderErrorKind::InvalidConfig,
            KubeRayError::Call { kind, .. } => kind.clone(),
            KubeRayError::Client(_) => ProviderErrorKind::Auth,
        }
    }

    /// Whether this is a concurrent edit (retry after reading again).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            KubeRayError::Call {
                status: Some(409),
                ..
            }
        )
    }

    /// As a contract error of `op`.
    pub fn into_provider(self, op: ProviderOp) -> ProviderError {
        ProviderError::new(op, self.kind(), self.to_string()).with_source(self)
    }

    /// A failed call, classified by [`classify`].
    pub fn call(call: impl Into<String>, e: kube::Error) -> Self {
        let (status, kind, message) = classify(&e);
        KubeRayError::Call {
            call: call.into(),
            status,
            kind,
            message,
            source: Some(Box::new(e)),
        }
    }
}

/// The table: a client error -> (HTTP status, kind, one-line message).
pub fn classify(e: &kube::Error) -> (Option<u16>, ProviderErrorKind, String) {
    match e {
        kube::Error::Api(s) => {
            let code = s.code;
            let message = format!(
                "{code} {}: {}",
                if s.reason.is_empty() {
                    "-"
                } else {
                    s.reason.as_str()
                },
                s.message.replace('\n', " ")
            );
            (Some(code), kind_of(code), message)
        }
        other => (
            None,
            ProviderErrorKind::Transient,
            other.to_string().replace('\n', " "),
        ),
    }
}

/// The kind of an HTTP status.
pub fn kind_of(code: u16) -> ProviderErrorKind {
    match code {
        409 => ProviderErrorKind::Transient,
        429 => ProviderErrorKind::Throttled,
        401 | 403 => ProviderErrorKind::Auth,
        404 => ProviderErrorKind::NotFound,
        400 | 422 => ProviderErrorKind::InvalidConfig,
        _ => ProviderErrorKind::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        assert_eq!(kind_of(429), ProviderErrorKind::Throttled);
        assert_eq!(kind_of(403), ProviderErrorKind::Auth);
        assert_eq!(kind_of(404), ProviderErrorKind::NotFound);
        assert_eq!(kind_of(409), ProviderErrorKind::Transient);
        assert_eq!(kind_of(422), ProviderErrorKind::InvalidConfig);
        assert_eq!(kind_of(503), ProviderErrorKind::Transient);
        assert_eq!(kind_of(504), ProviderErrorKind::Transient);
    }
}
