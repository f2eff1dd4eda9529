//! The crate's error type and the one table that maps EC2's error codes onto the
//! contract's kinds (`rayscale_core::provider::ProviderErrorKind`).
//!
//! EC2 answers errors as `<Response><Errors><Error><Code>..</Code>`; the SDK models no
//! typed errors for it, so the code string is what is matched. References: the EC2 API
//! "Error codes" page (client and server errors), and Karpenter's
//! `pkg/errors/errors.go` for the capacity codes.

use rayscale_core::provider::{ProviderError, ProviderErrorKind, ProviderOp};

/// What can go wrong in the AWS provider. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// A config value is unusable; `path` names it (`available_node_types.w.node_config.X`).
    #[error("{path}: {message}")]
    Config {
        /// Where.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An EC2 call failed.
    #[error("{call}: {message}")]
    Call {
        /// The EC2 action (`RunInstances`, ...).
        call: &'static str,
        /// The EC2 error code, when EC2 answered one.
        code: Option<String>,
        /// The HTTP status, when a response came.
        status: Option<u16>,
        /// The kind the code maps to.
        kind: ProviderErrorKind,
        /// One line: the code and EC2's message, or the SDK's failure.
        message: String,
    },
}

impl AwsError {
    /// A config error at `path`.
    pub fn config(path: impl Into<String>, message: impl Into<String>) -> Self {
        AwsError::Config {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The contract kind of this error (`node_type` fills in a capacity error).
    pub fn kind(&self) -> ProviderErrorKind {
        match self {
            AwsError::Config { .. } => ProviderErrorKind::InvalidConfig,
            AwsError::Call { kind, .. } => kind.clone(),
        }
    }

    /// The EC2 error code, if any.
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Call { code, .. } => code.as_deref(),
            AwsError::Config { .. } => None,
        }
    }

    /// As a contract error of `op`.
    pub fn into_provider(self, op: ProviderOp) -> ProviderError {
        ProviderError::new(op, self.kind(), self.to_string()).with_source(self)
    }
}

/// What a code means for a launch beyond its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The type has no capacity here now: try the next subnet or zone, then another type.
    Capacity,
    /// A subnet-scoped shortage (addresses): try the next subnet.
    SubnetFull,
    /// An account quota or limit.
    Quota,
    /// Slow down and retry.
    Throttled,
    /// The request is wrong; retrying will not help.
    Invalid,
    /// Credentials or permissions.
    Auth,
    /// The instance (or other resource) named does not exist.
    NotFound,
    /// May pass on retry.
    Transient,
}

/// The table: EC2 error code -> class. Unknown codes are transient for 5xx answers and
/// invalid config for 4xx ones (see [`classify`]).
const TABLE: &[(&str, Class)] = &[
    // Capacity: the type cannot be had here now.
    ("InsufficientInstanceCapacity", Class::Capacity),
    ("InsufficientCapacityOnHost", Class::Capacity),
    ("InsufficientHostCapacity", Class::Capacity),
    ("InsufficientCapacity", Class::Capacity),
    ("InsufficientReservedInstanceCapacity", Class::Capacity),
    ("Unsupported", Class::Capacity),
    ("UnfulfillableCapacity", Class::Capacity),
    ("SpotMaxPriceTooLow", Class::Capacity),
    ("InsufficientAddressCapacity", Class::SubnetFull),
    ("InsufficientFreeAddressesInSubnet", Class::SubnetFull),
    // Quota.
    ("InstanceLimitExceeded", Class::Quota),
    ("VcpuLimitExceeded", Class::Quota),
    ("MaxSpotInstanceCountExceeded", Class::Quota),
    ("MaxIOPSLimitExceeded", Class::Quota),
    ("VolumeLimitExceeded", Class::Quota),
    ("AddressLimitExceeded", Class::Quota),
    ("ResourceLimitExceeded", Class::Quota),
    ("PendingVerification", Class::Quota),
    // Throttling.
    ("RequestLimitExceeded", Class::Throttled),
    ("Throttling", Class::Throttled),
    ("ThrottlingException", Class::Throttled),
    ("EC2ThrottledException", Class::Throttled),
    ("RequestThrottled", Class::Throttled),
    ("TooManyRequestsException", Class::Throttled),
    // Auth.
    ("AuthFailure", Class::Auth),
    ("UnauthorizedOperation", Class::Auth),
    ("Blocked", Class::Auth),
    ("OptInRequired", Class::Auth),
    ("InvalidClientTokenId", Class::Auth),
    ("SignatureDoesNotMatch", Class::Auth),
    ("ExpiredToken", Class::Auth),
    ("ExpiredTokenException", Class::Auth),
    ("RequestExpired", Class::Auth),
    ("MissingAuthenticationToken", Class::Auth),
    ("AccessDenied", Class::Auth),
    ("UnrecognizedClientException", Class::Auth),
    // Not found (for terminate and stop: already gone).
    ("InvalidInstanceID.NotFound", Class::NotFound),
    ("InvalidInstanceID.Malformed", Class::NotFound),
    // Invalid requests and config.
    ("InvalidParameterValue", Class::Invalid),
    ("InvalidParameter", Class::Invalid),
    ("InvalidParameterCombination", Class::Invalid),
    ("MissingParameter", Class::Invalid),
    ("UnknownParameter", Class::Invalid),
    ("InvalidAMIID.NotFound", Class::Invalid),
    ("InvalidAMIID.Malformed", Class::Invalid),
    ("InvalidAMIID.Unavailable", Class::Invalid),
    ("InvalidSubnetID.NotFound", Class::Invalid),
    ("InvalidSubnetID.Malformed", Class::Invalid),
    // EC2's error page spells it both ways.
    ("InvalidSubnetId.NotFound", Class::Invalid),
    ("InvalidGroup.NotFound", Class::Invalid),
    ("InvalidGroupId.Malformed", Class::Invalid),
    ("InvalidKeyPair.NotFound", Class::Invalid),
    ("InvalidInstanceType", Class::Invalid),
    ("InvalidBlockDeviceMapping", Class::Invalid),
    (
        "InvalidLaunchTemplateName.NotFoundException",
        Class::Invalid,
    ),
    ("InvalidLaunchTemplateId.NotFound", Class::Invalid),
    ("InvalidLaunchTemplateId.VersionNotFound", Class::Invalid),
    ("NoSuchEntity", Class::Invalid),
    ("InvalidUserData.Malformed", Class::Invalid),
    ("UnsupportedOperation", Class::Invalid),
    ("IdempotentParameterMismatch", Class::Invalid),
    ("DryRunOperation", Class::Invalid),
    ("IncorrectInstanceState", Class::Transient),
    // Transient.
    ("InternalError", Class::Transient),
    ("InternalFailure", Class::Transient),
    ("ServiceUnavailable", Class::Transient),
    ("Unavailable", Class::Transient),
    ("RequestTimeout", Class::Transient),
    ("RequestTimeoutException", Class::Transient),
    ("DependencyViolation", Class::Transient),
];

/// The class of an EC2 answer: its code if it has one (the table), else its HTTP status
/// (429 throttled, 401/403 auth, other 4xx invalid, 5xx and none transient).
pub fn classify(code: Option<&str>, status: Option<u16>) -> Class {
    if let Some(c) = code
        && let Some((_, class)) = TABLE.iter().find(|(k, _)| *k == c)
    {
        return *class;
    }
    match status {
        Some(429) => Class::Throttled,
        Some(401 | 403) => Class::Auth,
        Some(404) => Class::NotFound,
        Some(s) if (400..500).contains(&s) => Class::Invalid,
        _ => Class::Transient,
    }
}

impl Class {
    /// The contract kind; a capacity class names `node_type` and `zone`.
    pub fn kind(self, node_type: &str, zone: Option<&str>) -> ProviderErrorKind {
        match self {
            Class::Capacity | Class::SubnetFull => ProviderErrorKind::Capacity {
                node_type: node_type.to_string(),
                zone: zone.map(str::to_string),
            },
            Class::Quota => ProviderErrorKind::Quota,
            Class::Throttled => ProviderErrorKind::Throttled,
            Class::Invalid => ProviderErrorKind::InvalidConfig,
            Class::Auth => ProviderErrorKind::Auth,
            Class::NotFound => ProviderErrorKind::NotFound,
            Class::Transient => ProviderErrorKind::Transient,
        }
    }

    /// Whether the next subnet (or zone) may succeed where this one failed.
    pub fn next_subnet_may_help(self) -> bool {
        matches!(self, Class::Capacity | Class::SubnetFull)
    }
}

/// The instance ids an `InvalidInstanceID.NotFound` message names
/// (`The instance ID 'i-1' does not exist`, `The instance IDs 'i-1, i-2' do not exist`).
pub fn missing_instance_ids(message: &str) -> Vec<String> {
    let Some(start) = message.find('\'') else {
        return Vec::new();
    };
    let rest = &message[start + 1..];
    let Some(end) = rest.find('\'') else {
        return Vec::new();
    };
    rest[..end]
        .split(',')
        .map(str::trim)
        .filter(|s| s.starts_with("i-"))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        for (code, status, want) in [
            ("InsufficientInstanceCapacity", 500, "capacity"),
            ("InsufficientCapacityOnHost", 500, "capacity"),
            ("Unsupported", 400, "capacity"),
            ("InstanceLimitExceeded", 400, "quota"),
            ("VcpuLimitExceeded", 400, "quota"),
            ("MaxSpotInstanceCountExceeded", 400, "quota"),
            ("RequestLimitExceeded", 503, "throttled"),
            ("InvalidAMIID.NotFound", 400, "invalid_config"),
            ("InvalidSubnetID.NotFound", 400, "invalid_config"),
            ("InvalidParameterValue", 400, "invalid_config"),
            ("AuthFailure", 401, "auth"),
            ("UnauthorizedOperation", 403, "auth"),
            ("InvalidInstanceID.NotFound", 400, "not_found"),
            ("InternalError", 500, "transient"),
            ("SomethingNew", 503, "transient"),
            ("SomethingNew", 400, "invalid_config"),
        ] {
            assert_eq!(
                classify(Some(code), Some(status)).kind("t", None).name(),
                want,
                "{code}"
            );
        }
        assert_eq!(classify(None, Some(429)), Class::Throttled);
        assert_eq!(classify(None, None), Class::Transient);
        assert!(Class::SubnetFull.next_subnet_may_help());
        assert!(!Class::Quota.next_subnet_may_help());
    }

    #[test]
    fn not_found_messages_name_their_ids() {
        assert_eq!(
            missing_instance_ids("The instance ID 'i-0abc' does not exist"),
            ["i-0abc"]
        );
        assert_eq!(
            missing_instance_ids("The instance IDs 'i-1, i-2' do not exist"),
            ["i-1", "i-2"]
        );
        assert!(missing_instance_ids("no quotes here").is_empty());
    }
}
