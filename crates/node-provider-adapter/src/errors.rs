//! [`AdapterError`] and the table that gives each a [`ProviderErrorKind`].
//!
//! A Python provider raises anything; the bridge reports the exception's class, its
//! `category` where Ray's `NodeLaunchException` has one, and its message. The kind is read
//! from those the way an operator would: capacity words of the clouds Ray's v1 providers
//! reach (EC2, GCE, Azure, vSphere, Aliyun), quota, throttling, credentials; a Python
//! programming or config error (`ValueError`, `KeyError`, ...) is invalid config; anything
//! else may pass on retry.

use std::time::Duration;

use rayscale_core::provider::ProviderErrorKind;

/// What went wrong in the adapter or the bridge.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The provider raised an exception.
    #[error("{method}: {exc_type}: {message}")]
    Raised {
        /// The v1 method called.
        method: String,
        /// The exception's class name.
        exc_type: String,
        /// Ray's `NodeLaunchException.category`, when it is one.
        category: Option<String>,
        /// The exception's message (first line).
        message: String,
    },
    /// The child did not answer in time (it is restarted when the call is not an install).
    #[error("{method}: the python bridge did not answer within {timeout:?}")]
    Timeout {
        /// The v1 method called.
        method: String,
        /// The call's deadline.
        timeout: Duration,
    },
    /// The child exited with the call in flight (restarted on the next call).
    #[error("{method}: the python bridge exited ({status}); it is restarted on the next call")]
    Crashed {
        /// The v1 method called.
        method: String,
        /// How it exited.
        status: String,
    },
    /// The child could not be started.
    #[error("cannot start the python bridge with {python}: {source}")]
    Spawn {
        /// The interpreter.
        python: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The child started but could not make the provider.
    #[error("the python bridge could not load provider {provider_type:?}: {message}")]
    Load {
        /// `provider.type`.
        provider_type: String,
        /// The child's one line.
        message: String,
    },
    /// The child answered something that is not the protocol.
    #[error("{method}: the python bridge answered garbage: {line}")]
    Protocol {
        /// The v1 method called.
        method: String,
        /// The line (cut to 200 characters).
        line: String,
    },
    /// Writing to the child failed.
    #[error("{method}: cannot write to the python bridge: {source}")]
    Io {
        /// The v1 method called.
        method: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The provider cannot do this.
    #[error("{method}: not supported by this node provider")]
    Unsupported {
        /// The method.
        method: String,
    },
    /// A config value is wrong (names the path).
    #[error("{path}: {message}")]
    Config {
        /// Where in the cluster config.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl AdapterError {
    /// The kind of this error for a call about `node_type` (capacity errors name it).
    pub fn kind(&self, node_type: &str) -> ProviderErrorKind {
        match self {
            AdapterError::Raised {
                exc_type,
                category,
                message,
                ..
            } => kind_of_exception(exc_type, category.as_deref(), message, node_type),
            AdapterError::Timeout { .. }
            | AdapterError::Crashed { .. }
            | AdapterError::Protocol { .. }
            | AdapterError::Io { .. } => ProviderErrorKind::Transient,
            AdapterError::Spawn { .. }
            | AdapterError::Load { .. }
            | AdapterError::Unsupported { .. }
            | AdapterError::Config { .. } => ProviderErrorKind::InvalidConfig,
        }
    }
}

/// The kind of a Python exception: `exc_type` its class, `category` Ray's
/// `NodeLaunchException.category`, `message` its text.
pub fn kind_of_exception(
    exc_type: &str,
    category: Option<&str>,
    message: &str,
    node_type: &str,
) -> ProviderErrorKind {
    let text = format!("{} {}", category.unwrap_or(""), message).to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if has(&[
        "insufficientinstancecapacity",
        "insufficient capacity",
        "zone_resource_pool_exhausted",
        "skunotavailable",
        "allocationfailed",
        "out of capacity",
        "no capacity",
        "capacity",
        "no free node",
        "no available host",
        "operation.conflict",
        "nostock",
    ]) {
        return ProviderErrorKind::Capacity {
            node_type: node_type.to_string(),
            zone: None,
        };
    }
    if has(&["quota", "limitexceeded", "limit exceeded", "instancelimit"])
        && !has(&["requestlimitexceeded"])
    {
        return ProviderErrorKind::Quota;
    }
    if has(&[
        "requestlimitexceeded",
        "throttl",
        "rate exceeded",
        "rate limit",
        "too many requests",
        "toomanyrequests",
        "429",
    ]) {
        return ProviderErrorKind::Throttled;
    }
    if has(&[
        "unauthorized",
        "authfailure",
        "forbidden",
        "permission denied",
        "permissiondenied",
        "credential",
        "not authorized",
        "accessdenied",
        "access denied",
    ]) {
        return ProviderErrorKind::Auth;
    }
    if has(&["notfound", "not found", "does not exist"]) {
        return ProviderErrorKind::NotFound;
    }
    match exc_type {
        "ValueError"
        | "TypeError"
        | "KeyError"
        | "AttributeError"
        | "AssertionError"
        | "ImportError"
        | "ModuleNotFoundError"
        | "NotImplementedError" => ProviderErrorKind::InvalidConfig,
        _ => ProviderErrorKind::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(t: &str, c: Option<&str>, m: &str) -> &'static str {
        kind_of_exception(t, c, m, "cpu").name()
    }

    #[test]
    fn python_exceptions_get_the_kind_an_operator_would_give() {
        assert_eq!(
            k(
                "NodeLaunchException",
                Some("InsufficientInstanceCapacity"),
                "We currently do not have sufficient capacity"
            ),
            "capacity"
        );
        assert_eq!(
            k("Exception", None, "ZONE_RESOURCE_POOL_EXHAUSTED in us-c1"),
            "capacity"
        );
        assert_eq!(
            k(
                "ClientError",
                None,
                "VcpuLimitExceeded: You have requested more vCPU"
            ),
            "quota"
        );
        assert_eq!(
            k(
                "ClientError",
                None,
                "RequestLimitExceeded: Request limit exceeded."
            ),
            "throttled"
        );
        assert_eq!(
            k(
                "ClientError",
                None,
                "AuthFailure: AWS was not able to validate"
            ),
            "auth"
        );
        assert_eq!(k("KeyError", None, "'InstanceType'"), "invalid_config");
        assert_eq!(k("ConnectionResetError", None, "peer reset"), "transient");
        assert_eq!(k("Exception", None, "instance i-1 not found"), "not_found");
        let e = AdapterError::Timeout {
            method: "create_node".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(e.kind("cpu").name(), "transient");
    }
}
