//! [`ProviderError`]: what failed ([`ProviderOp`]) and why ([`ProviderErrorKind`]).

use std::sync::Arc;

/// Which call (or which part of one) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderOp {
    /// A launch request failed for `count` of its instances.
    Launch {
        /// The launch request.
        request_id: String,
        /// Its node type.
        node_type: String,
        /// How many instances of it failed.
        count: u64,
    },
    /// An instance failed on its own after its launch (its boot or its process died)
    /// before anyone asked it to stop.
    Instance {
        /// The instance.
        cloud_instance_id: String,
        /// The launch request that made it, if known.
        request_id: Option<String>,
        /// Its node type.
        node_type: String,
    },
    /// Installing Ray on an instance (over SSH, by Ray's node updater) failed, after its
    /// retries.
    InstallRay {
        /// The instance.
        cloud_instance_id: String,
    },
    /// Terminating an instance failed.
    Terminate {
        /// The instance.
        cloud_instance_id: String,
    },
    /// Listing failed.
    List,
    /// Anything else (building the provider, credentials, ...).
    Other,
}

/// Why a call failed: one table per cloud maps the cloud's errors onto these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderErrorKind {
    /// The cloud has no capacity for the node type now (EC2
    /// InsufficientInstanceCapacity, GCE ZONE_RESOURCE_POOL_EXHAUSTED, Azure
    /// SkuNotAvailable / AllocationFailed). The type is made unavailable for a while.
    Capacity {
        /// The node type.
        node_type: String,
        /// The zone, where the cloud says.
        zone: Option<String>,
    },
    /// A quota or limit of the account is reached.
    Quota,
    /// The cloud asks to slow down (HTTP 429, RequestLimitExceeded).
    Throttled,
    /// The request or config is wrong: retrying the same will not help.
    InvalidConfig,
    /// Credentials are missing, expired or lack a permission.
    Auth,
    /// The thing asked about does not exist.
    NotFound,
    /// Anything that may pass on retry (network, 5xx, a crashed child process).
    Transient,
}

impl ProviderErrorKind {
    /// A short name for logs and metrics: `capacity`, `quota`, `throttled`,
    /// `invalid_config`, `auth`, `not_found`, `transient`.
    pub fn name(&self) -> &'static str {
        match self {
            ProviderErrorKind::Capacity { .. } => "capacity",
            ProviderErrorKind::Quota => "quota",
            ProviderErrorKind::Throttled => "throttled",
            ProviderErrorKind::InvalidConfig => "invalid_config",
            ProviderErrorKind::Auth => "auth",
            ProviderErrorKind::NotFound => "not_found",
            ProviderErrorKind::Transient => "transient",
        }
    }
}

/// The source of a provider error, shared so that errors stay cheap to clone.
pub type ErrorSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// An error of a provider call: what failed, why, a one-line message, and the cloud's or
/// SDK's own error as its source. Boxed, so `Result`s stay small; its fields are read
/// through [`ProviderErrorDetail`] (`e.kind`, `e.op`, `e.message`).
#[derive(Debug, Clone)]
pub struct ProviderError(Box<ProviderErrorDetail>);

/// The fields of a [`ProviderError`].
#[derive(Debug, Clone)]
pub struct ProviderErrorDetail {
    /// What failed.
    pub op: ProviderOp,
    /// Why.
    pub kind: ProviderErrorKind,
    /// One line saying what is wrong (names the node type, instance or request).
    pub message: String,
    /// The underlying error.
    pub source: Option<ErrorSource>,
}

impl std::ops::Deref for ProviderError {
    type Target = ProviderErrorDetail;
    fn deref(&self) -> &ProviderErrorDetail {
        &self.0
    }
}

impl std::ops::DerefMut for ProviderError {
    fn deref_mut(&mut self) -> &mut ProviderErrorDetail {
        &mut self.0
    }
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for ProviderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for ProviderError {
    /// Equal when op, kind and message are (sources are not compared).
    fn eq(&self, o: &Self) -> bool {
        self.op == o.op && self.kind == o.kind && self.message == o.message
    }
}

impl ProviderError {
    /// An error of `op` of kind `kind`.
    pub fn new(op: ProviderOp, kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        ProviderError(Box::new(ProviderErrorDetail {
            op,
            kind,
            message: message.into(),
            source: None,
        }))
    }

    /// A failed call that is not a launch or terminate of something (`ProviderOp::Other`).
    pub fn call(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        Self::new(ProviderOp::Other, kind, message)
    }

    /// With `source` as the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same error, for `op`.
    pub fn for_op(mut self, op: ProviderOp) -> Self {
        self.op = op;
        self
    }

    /// True when retrying later may help: capacity, throttling, transient failures.
    pub fn retryable(&self) -> bool {
        matches!(
            self.kind,
            ProviderErrorKind::Capacity { .. }
                | ProviderErrorKind::Throttled
                | ProviderErrorKind::Transient
        )
    }

    /// The node type and zone of a capacity error.
    pub fn capacity(&self) -> Option<(&str, Option<&str>)> {
        match &self.kind {
            ProviderErrorKind::Capacity { node_type, zone } => {
                Some((node_type.as_str(), zone.as_deref()))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn keeps_its_source_and_kind() {
        let io = std::io::Error::other("connection reset");
        let e = ProviderError::call(ProviderErrorKind::Transient, "list failed").with_source(io);
        assert_eq!(e.to_string(), "list failed");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("connection reset")
        );
        assert!(e.retryable());
        assert!(!ProviderError::call(ProviderErrorKind::Auth, "x").retryable());
        let c = ProviderError::new(
            ProviderOp::List,
            ProviderErrorKind::Capacity {
                node_type: "gpu".into(),
                zone: Some("z1".into()),
            },
            "no capacity",
        );
        assert_eq!(c.capacity(), Some(("gpu", Some("z1"))));
        assert_eq!(c.kind.name(), "capacity");
    }
}
