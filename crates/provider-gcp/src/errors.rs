//! The crate's error type and the one table that maps Compute Engine's error codes onto
//! the contract's kinds (`rayscale_core::provider::ProviderErrorKind`).
//!
//! Compute Engine reports errors two ways (REST reference, "Handling API errors" and the
//! `Operation` resource):
//! - a failed call: an HTTP status with `{"error": {"code", "message", "errors":
//!   [{"reason", ...}], "status"}}`; the client keeps each `reason` as an `ErrorInfo`;
//! - a call accepted and failed later: its zone `Operation` ends `DONE` with
//!   `error.errors[].code` (`ZONE_RESOURCE_POOL_EXHAUSTED`, `QUOTA_EXCEEDED`, ...) and
//!   `httpErrorStatusCode`. The client's poller returns such an operation as Ok: it is a
//!   failure all the same ([`operation_error`]).

use google_cloud_compute_v1::model::Operation;
use rayscale_core::provider::{ProviderError, ProviderErrorKind, ProviderOp};

/// What can go wrong in the GCP provider. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum GcpError {
    /// A config value is unusable; `path` names it (`available_node_types.w.node_config.X`).
    #[error("{path}: {message}")]
    Config {
        /// Where.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A Compute Engine call, or the operation it started, failed.
    #[error("{call}: {message}")]
    Call {
        /// The method (`instances.insert`, ...).
        call: &'static str,
        /// Compute Engine's error code or reason, when it gave one.
        code: Option<String>,
        /// The HTTP status, when a response came.
        status: Option<u16>,
        /// The kind the code maps to.
        kind: ProviderErrorKind,
        /// One line: the code and Compute Engine's message, or the client's failure.
        message: String,
    },
}

impl GcpError {
    /// A config error at `path`.
    pub fn config(path: impl Into<String>, message: impl Into<String>) -> Self {
        GcpError::Config {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A call's answer that cannot be used (garbage, no answer, an unfinished operation):
    /// transient, without a code; `status` when a response came.
    pub fn transient(call: &'static str, status: Option<u16>, message: impl Into<String>) -> Self {
        GcpError::Call {
            call,
            code: None,
            status,
            kind: ProviderErrorKind::Transient,
            message: message.into(),
        }
    }

    /// The contract kind of this error.
    pub fn kind(&self) -> ProviderErrorKind {
        match self {
            GcpError::Config { .. } => ProviderErrorKind::InvalidConfig,
            GcpError::Call { kind, .. } => kind.clone(),
        }
    }

    /// The error code or reason, if any.
    pub fn code(&self) -> Option<&str> {
        match self {
            GcpError::Call { code, .. } => code.as_deref(),
            GcpError::Config { .. } => None,
        }
    }

    /// The HTTP status, if a response came.
    pub fn status(&self) -> Option<u16> {
        match self {
            GcpError::Call { status, .. } => *status,
            GcpError::Config { .. } => None,
        }
    }

    /// As a contract error of `op`.
    pub fn into_provider(self, op: ProviderOp) -> ProviderError {
        ProviderError::new(op, self.kind(), self.to_string()).with_source(self)
    }
}

/// What a code means beyond its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The zone has no capacity for the type now: another type may be had.
    Capacity,
    /// A project or region quota.
    Quota,
    /// Slow down and retry.
    Throttled,
    /// The request is wrong; retrying will not help.
    Invalid,
    /// Credentials or permissions.
    Auth,
    /// The resource named does not exist.
    NotFound,
    /// A resource of that name exists already (a replayed insert).
    AlreadyExists,
    /// May pass on retry.
    Transient,
}

/// The table: operation error code or HTTP error reason -> class. References: the REST
/// reference's `Operation.error.errors[].code`, "Troubleshooting resource availability"
/// (`ZONE_RESOURCE_POOL_EXHAUSTED(_WITH_DETAILS)`, stockouts), "Resource quotas"
/// (`QUOTA_EXCEEDED`), "Rate quotas" (`rateLimitExceeded`), and the standard `errors[]`
/// reasons of Google's JSON APIs. Unknown codes fall back on the HTTP status
/// ([`classify`]).
const TABLE: &[(&str, Class)] = &[
    // Capacity: the zone cannot give the type now.
    ("ZONE_RESOURCE_POOL_EXHAUSTED", Class::Capacity),
    ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", Class::Capacity),
    ("RESOURCE_POOL_EXHAUSTED", Class::Capacity),
    ("STOCKOUT", Class::Capacity),
    // The bulk insert API's HTTP 503 reason ("Troubleshooting bulk VM creation").
    ("insufficientCapacity", Class::Capacity),
    // Quota.
    ("QUOTA_EXCEEDED", Class::Quota),
    ("quotaExceeded", Class::Quota),
    // Throttling.
    ("rateLimitExceeded", Class::Throttled),
    ("userRateLimitExceeded", Class::Throttled),
    ("RATE_LIMIT_EXCEEDED", Class::Throttled),
    // Auth.
    ("forbidden", Class::Auth),
    ("authError", Class::Auth),
    ("PERMISSIONS_ERROR", Class::Auth),
    ("insufficientPermissions", Class::Auth),
    // Gone.
    ("notFound", Class::NotFound),
    ("RESOURCE_NOT_FOUND", Class::NotFound),
    // Exists.
    ("alreadyExists", Class::AlreadyExists),
    // Invalid.
    ("invalid", Class::Invalid),
    ("badRequest", Class::Invalid),
    ("required", Class::Invalid),
    ("INVALID_FIELD_VALUE", Class::Invalid),
    ("INVALID_USAGE", Class::Invalid),
    // Transient.
    ("backendError", Class::Transient),
    ("internalError", Class::Transient),
    ("resourceNotReady", Class::Transient),
];

/// The class of an error code (or reason) and HTTP status: the table first, then the
/// status (429 throttled, 401/403 auth, 404 not found, 409 exists, other 4xx invalid,
/// the rest transient).
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
        Some(409) => Class::AlreadyExists,
        Some(s) if (400..500).contains(&s) => Class::Invalid,
        _ => Class::Transient,
    }
}

impl Class {
    /// The contract kind; a capacity class names `node_type`, and no zone: a cluster
    /// lives in one zone (`provider.availability_zone`), so a zone out of capacity is
    /// the type out (the error's message names the zone).
    pub fn kind(self, node_type: &str) -> ProviderErrorKind {
        match self {
            Class::Capacity => ProviderErrorKind::Capacity {
                node_type: node_type.to_string(),
                zone: None,
            },
            Class::Quota => ProviderErrorKind::Quota,
            Class::Throttled => ProviderErrorKind::Throttled,
            Class::Invalid | Class::AlreadyExists => ProviderErrorKind::InvalidConfig,
            Class::Auth => ProviderErrorKind::Auth,
            Class::NotFound => ProviderErrorKind::NotFound,
            Class::Transient => ProviderErrorKind::Transient,
        }
    }
}

/// The first code of the table among `codes`, else the first code.
fn pick<'a>(codes: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let codes: Vec<&str> = codes.into_iter().collect();
    codes
        .iter()
        .find(|c| TABLE.iter().any(|(k, _)| k == *c))
        .or(codes.first())
        .copied()
}

/// A client error of `call` as a [`GcpError`] (`node_type` fills in a capacity error).
pub fn call_error(
    call: &'static str,
    err: &google_cloud_gax::error::Error,
    node_type: &str,
) -> GcpError {
    let status = err.http_status_code();
    let (code, message) = match err.status() {
        Some(s) => {
            let reasons = s.details.iter().filter_map(|d| match d {
                google_cloud_gax::error::rpc::StatusDetails::ErrorInfo(i) => {
                    Some(i.reason.as_str())
                }
                _ => None,
            });
            let code = pick(reasons).map(str::to_string);
            let message = match &code {
                Some(c) => format!("{c}: {}", s.message),
                None => s.message.clone(),
            };
            (code, message)
        }
        None => (None, one_line(&err.to_string())),
    };
    let mut class = classify(code.as_deref(), status);
    if err.is_authentication() {
        class = Class::Auth;
    }
    GcpError::Call {
        call,
        code,
        status,
        kind: class.kind(node_type),
        message,
    }
}

/// The failure an operation that ended `DONE` reports in `error`, if any (`call` names
/// what started it).
pub fn operation_error(call: &'static str, op: &Operation, node_type: &str) -> Option<GcpError> {
    let errors = &op.error.as_ref()?.errors;
    let first = errors.first();
    let code = pick(errors.iter().filter_map(|e| e.code.as_deref())).map(str::to_string);
    let status = op
        .http_error_status_code
        .and_then(|s| u16::try_from(s).ok());
    let text = errors
        .iter()
        .filter_map(|e| e.message.as_deref())
        .collect::<Vec<_>>()
        .join("; ");
    let message = match (&code, text.is_empty()) {
        (Some(c), false) => format!("{c}: {text}"),
        (Some(c), true) => c.clone(),
        (None, _) => first
            .map(|_| text.clone())
            .unwrap_or_else(|| "the operation failed".to_string()),
    };
    Some(GcpError::Call {
        call,
        kind: classify(code.as_deref(), status).kind(node_type),
        code,
        status,
        message: one_line(&message),
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        let cases: &[(Option<&str>, Option<u16>, Class)] = &[
            (
                Some("ZONE_RESOURCE_POOL_EXHAUSTED"),
                Some(503),
                Class::Capacity,
            ),
            (
                Some("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
                None,
                Class::Capacity,
            ),
            // The bulk API's capacity reason is a 503: a capacity error, not a retry.
            (Some("insufficientCapacity"), Some(503), Class::Capacity),
            (Some("QUOTA_EXCEEDED"), Some(403), Class::Quota),
            (Some("rateLimitExceeded"), Some(403), Class::Throttled),
            (None, Some(429), Class::Throttled),
            (Some("notFound"), Some(404), Class::NotFound),
            (None, Some(404), Class::NotFound),
            (Some("alreadyExists"), Some(409), Class::AlreadyExists),
            (Some("forbidden"), Some(403), Class::Auth),
            (None, Some(401), Class::Auth),
            (Some("invalid"), Some(400), Class::Invalid),
            (Some("somethingNew"), Some(400), Class::Invalid),
            (None, Some(503), Class::Transient),
            (Some("backendError"), Some(500), Class::Transient),
            (None, None, Class::Transient),
        ];
        for (code, status, want) in cases {
            assert_eq!(classify(*code, *status), *want, "{code:?} {status:?}");
        }
        assert_eq!(
            Class::Capacity.kind("w"),
            ProviderErrorKind::Capacity {
                node_type: "w".into(),
                zone: None
            }
        );
    }

    #[test]
    fn an_operation_done_with_errors_is_a_failure() {
        let op: Operation = serde_json::from_value(serde_json::json!({
            "name": "operation-1", "status": "DONE", "httpErrorStatusCode": 503,
            "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                "message": "The zone 'projects/p/zones/z' does not have enough resources available to fulfill the request."}]}
        }))
        .expect("operation JSON");
        let e = operation_error("instances.insert", &op, "w").expect("an error");
        assert_eq!(e.code(), Some("ZONE_RESOURCE_POOL_EXHAUSTED"));
        assert!(matches!(e.kind(), ProviderErrorKind::Capacity { .. }));
        assert!(
            e.to_string()
                .starts_with("instances.insert: ZONE_RESOURCE_POOL_EXHAUSTED: The zone")
        );
        let ok: Operation =
            serde_json::from_value(serde_json::json!({"name": "operation-2", "status": "DONE"}))
                .expect("operation JSON");
        assert!(operation_error("instances.insert", &ok, "w").is_none());
    }
}
