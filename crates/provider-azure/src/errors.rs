//! The crate's error type and the one table that maps Azure Resource Manager's error
//! codes onto the contract's kinds (`rayscale_core::provider::ProviderErrorKind`).
//!
//! ARM reports errors two ways (Microsoft's "Azure REST API reference: common error
//! responses" and "Track asynchronous Azure operations"):
//! - a failed call: an HTTP status with `{"error": {"code", "message", "details": [...]}}`;
//!   the client keeps `error.code` (or the `x-ms-error-code` header);
//! - a call accepted (201/202) and failed later: its operation status (the
//!   `Azure-AsyncOperation` URL) ends `Failed` with `error.code` (`AllocationFailed`,
//!   `ZonalAllocationFailed`, `OverconstrainedAllocationRequest`, ...), and a VM made by
//!   a failed create stays, `provisioningState: Failed`.

use rayscale_core::provider::{ProviderError, ProviderErrorKind, ProviderOp};

/// What can go wrong in the Azure provider. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum AzureError {
    /// A config value is unusable; `path` names it (`available_node_types.w.node_config.X`).
    #[error("{path}: {message}")]
    Config {
        /// Where.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An ARM call, or the operation it started, failed.
    #[error("{call}: {message}")]
    Call {
        /// The call (`virtualMachines.createOrUpdate`, ...).
        call: &'static str,
        /// ARM's error code, when it gave one.
        code: Option<String>,
        /// The HTTP status, when a response came.
        status: Option<u16>,
        /// The kind the code maps to.
        kind: ProviderErrorKind,
        /// One line: the code and ARM's message, or the client's failure.
        message: String,
    },
}

impl AzureError {
    /// A config error at `path`.
    pub fn config(path: impl Into<String>, message: impl Into<String>) -> Self {
        AzureError::Config {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The contract kind of this error.
    pub fn kind(&self) -> ProviderErrorKind {
        match self {
            AzureError::Config { .. } => ProviderErrorKind::InvalidConfig,
            AzureError::Call { kind, .. } => kind.clone(),
        }
    }

    /// ARM's error code, if any.
    pub fn code(&self) -> Option<&str> {
        match self {
            AzureError::Call { code, .. } => code.as_deref(),
            AzureError::Config { .. } => None,
        }
    }

    /// The HTTP status, if a response came.
    pub fn status(&self) -> Option<u16> {
        match self {
            AzureError::Call { status, .. } => *status,
            AzureError::Config { .. } => None,
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
    /// The region or zone has no capacity for the size now: another type may be had.
    Capacity,
    /// A subscription or regional quota.
    Quota,
    /// Slow down and retry.
    Throttled,
    /// The request is wrong; retrying will not help.
    Invalid,
    /// Credentials or permissions.
    Auth,
    /// The resource named does not exist.
    NotFound,
    /// Another operation holds the resource now (409 `Conflict`, `OperationNotAllowed`
    /// while one runs): may pass later.
    Conflict,
    /// May pass on retry.
    Transient,
}

/// The table: ARM error code -> class. References: "Resolve errors for SKU not available"
/// (`SkuNotAvailable`), "Troubleshoot allocation failures" (`AllocationFailed`,
/// `ZonalAllocationFailed`, `OverconstrainedAllocationRequest`,
/// `OverconstrainedZonalAllocationRequest`), "Resolve errors for resource quotas"
/// (`QuotaExceeded`, `OperationNotAllowed` with a quota message), "Throttling Resource
/// Manager requests" (429 `TooManyRequests`), and ARM's common codes. Unknown codes fall
/// back on the HTTP status ([`classify`]).
const TABLE: &[(&str, Class)] = &[
    // Capacity: the region or zone cannot give the size now.
    ("SkuNotAvailable", Class::Capacity),
    ("AllocationFailed", Class::Capacity),
    ("ZonalAllocationFailed", Class::Capacity),
    ("OverconstrainedAllocationRequest", Class::Capacity),
    ("OverconstrainedZonalAllocationRequest", Class::Capacity),
    // Quota.
    ("QuotaExceeded", Class::Quota),
    ("ResourceQuotaExceeded", Class::Quota),
    ("SubscriptionRequestsThrottled", Class::Throttled),
    // Throttling.
    ("TooManyRequests", Class::Throttled),
    ("RetryableError", Class::Transient),
    // Auth.
    ("AuthorizationFailed", Class::Auth),
    ("AuthenticationFailed", Class::Auth),
    ("InvalidAuthenticationToken", Class::Auth),
    ("InvalidAuthenticationTokenTenant", Class::Auth),
    ("LinkedAuthorizationFailed", Class::Auth),
    // Gone.
    ("ResourceNotFound", Class::NotFound),
    ("NotFound", Class::NotFound),
    ("ResourceGroupNotFound", Class::NotFound),
    // Busy.
    ("Conflict", Class::Conflict),
    ("OperationPreempted", Class::Conflict),
    // Invalid.
    ("InvalidParameter", Class::Invalid),
    ("InvalidRequestFormat", Class::Invalid),
    ("BadRequest", Class::Invalid),
    ("InvalidResourceReference", Class::Invalid),
    ("PropertyChangeNotAllowed", Class::Invalid),
    ("ImageNotFound", Class::Invalid),
    ("PlatformImageNotFound", Class::Invalid),
    ("MissingApiVersionParameter", Class::Invalid),
    ("InvalidApiVersionParameter", Class::Invalid),
    ("NoRegisteredProviderFound", Class::Invalid),
    // Transient.
    ("InternalServerError", Class::Transient),
    ("InternalExecutionError", Class::Transient),
    ("GatewayTimeout", Class::Transient),
];

/// The class of an ARM error code and HTTP status, with its message: a 429 is throttled
/// whatever its code; quota errors come as `OperationNotAllowed` whose message speaks of
/// a quota; then the table, then the status (401/403 auth, 404 not found, 409 conflict,
/// other 4xx invalid, the rest transient).
pub fn classify(code: Option<&str>, status: Option<u16>, message: &str) -> Class {
    // Compute throttles with HTTP 429 and the top-level code `OperationNotAllowed`
    // (details `TooManyRequests`: "Troubleshooting API throttling errors"): the status
    // says it before the code does.
    if status == Some(429) {
        return Class::Throttled;
    }
    if code == Some("OperationNotAllowed") {
        let m = message.to_ascii_lowercase();
        return if m.contains("quota") {
            Class::Quota
        } else {
            Class::Conflict
        };
    }
    if let Some(c) = code
        && let Some((_, class)) = TABLE.iter().find(|(k, _)| k.eq_ignore_ascii_case(c))
    {
        return *class;
    }
    match status {
        Some(429) => Class::Throttled,
        Some(401 | 403) => Class::Auth,
        Some(404) => Class::NotFound,
        Some(409) => Class::Conflict,
        Some(s) if (400..500).contains(&s) => Class::Invalid,
        _ => Class::Transient,
    }
}

impl Class {
    /// The contract kind; a capacity class names `node_type` and `zone`.
    pub fn kind(self, node_type: &str, zone: Option<&str>) -> ProviderErrorKind {
        match self {
            Class::Capacity => ProviderErrorKind::Capacity {
                node_type: node_type.to_string(),
                zone: zone.map(str::to_string),
            },
            Class::Quota => ProviderErrorKind::Quota,
            Class::Throttled => ProviderErrorKind::Throttled,
            Class::Invalid => ProviderErrorKind::InvalidConfig,
            Class::Auth => ProviderErrorKind::Auth,
            Class::NotFound => ProviderErrorKind::NotFound,
            Class::Conflict | Class::Transient => ProviderErrorKind::Transient,
        }
    }
}

/// An ARM error body (`{"error": {"code", "message", "details"}}`, or the operation
/// status's `error`): the code (a known one among `details` first) and the message.
pub fn body_error(body: &serde_json::Value) -> (Option<String>, String) {
    let e = body.get("error").unwrap_or(body);
    let mut codes: Vec<(&str, &str)> = Vec::new();
    fn entry(v: &serde_json::Value) -> Option<(&str, &str)> {
        Some((
            v.get("code")?.as_str()?,
            v.get("message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or(""),
        ))
    }
    if let Some(c) = entry(e) {
        codes.push(c);
    }
    if let Some(details) = e.get("details").and_then(serde_json::Value::as_array) {
        codes.extend(details.iter().filter_map(entry));
    }
    let known = codes
        .iter()
        .find(|(c, _)| TABLE.iter().any(|(k, _)| k.eq_ignore_ascii_case(c)))
        .or(codes.first());
    match known {
        Some((c, m)) => (Some((*c).to_string()), one_line(m)),
        None => (None, "no error details".to_string()),
    }
}

/// An error of `call` from its code, status and message.
pub fn call_error(
    call: &'static str,
    code: Option<String>,
    status: Option<u16>,
    message: &str,
    node_type: &str,
    zone: Option<&str>,
) -> AzureError {
    let class = classify(code.as_deref(), status, message);
    let message = match &code {
        Some(c) if !message.starts_with(c.as_str()) => format!("{c}: {}", one_line(message)),
        _ => one_line(message),
    };
    AzureError::Call {
        call,
        code,
        status,
        kind: class.kind(node_type, zone),
        message,
    }
}

/// A client error of `call` (`azure_core`'s error, with the HTTP status and ARM's code
/// when a response came) as an [`AzureError`].
pub fn sdk_error(
    call: &'static str,
    err: &azure_core::Error,
    node_type: &str,
    zone: Option<&str>,
) -> AzureError {
    let (status, code) = match err.kind() {
        azure_core::error::ErrorKind::HttpResponse { status, error_code } => {
            (Some(u16::from(*status)), error_code.clone())
        }
        azure_core::error::ErrorKind::Credential => {
            return AzureError::Call {
                call,
                code: None,
                status: None,
                kind: ProviderErrorKind::Auth,
                message: format!(
                    "no Azure credentials ({}): set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET, use a managed identity, or run `az login`",
                    one_line(&err.to_string())
                ),
            };
        }
        _ => (None, None),
    };
    let message = err
        .as_http_error()
        .and_then(|h| h.error_message().map(str::to_string))
        .unwrap_or_else(|| full_chain(err));
    call_error(call, code, status, &message, node_type, zone)
}

/// The error and its sources, one line.
fn full_chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut e = err.source();
    while let Some(inner) = e {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        e = inner.source();
    }
    one_line(&s)
}

/// `s` on one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table() {
        let cases: &[(Option<&str>, Option<u16>, &str, Class)] = &[
            (Some("SkuNotAvailable"), Some(409), "", Class::Capacity),
            (Some("AllocationFailed"), None, "", Class::Capacity),
            (Some("ZonalAllocationFailed"), None, "", Class::Capacity),
            (
                Some("OverconstrainedAllocationRequest"),
                None,
                "",
                Class::Capacity,
            ),
            (
                Some("OperationNotAllowed"),
                Some(409),
                "Operation could not be completed as it results in exceeding approved standardDSv3Family Cores quota.",
                Class::Quota,
            ),
            (
                Some("OperationNotAllowed"),
                Some(409),
                "Operation 'start' is not allowed since another operation is in progress.",
                Class::Conflict,
            ),
            (Some("QuotaExceeded"), Some(400), "", Class::Quota),
            (None, Some(429), "", Class::Throttled),
            (Some("TooManyRequests"), Some(429), "", Class::Throttled),
            // Compute's throttling answer (found by the contract check's error lists:
            // it was read as a conflict before).
            (
                Some("OperationNotAllowed"),
                Some(429),
                "The server rejected the request because too many requests have been received for this subscription.",
                Class::Throttled,
            ),
            (Some("ResourceNotFound"), Some(404), "", Class::NotFound),
            (None, Some(404), "", Class::NotFound),
            (Some("AuthorizationFailed"), Some(403), "", Class::Auth),
            (None, Some(401), "", Class::Auth),
            (Some("InvalidParameter"), Some(400), "", Class::Invalid),
            (Some("SomethingNew"), Some(400), "", Class::Invalid),
            (None, Some(503), "", Class::Transient),
            (
                Some("InternalExecutionError"),
                Some(500),
                "",
                Class::Transient,
            ),
            (None, None, "", Class::Transient),
        ];
        for (code, status, msg, want) in cases {
            assert_eq!(classify(*code, *status, msg), *want, "{code:?} {status:?}");
        }
        assert_eq!(
            Class::Capacity.kind("w", Some("2")),
            ProviderErrorKind::Capacity {
                node_type: "w".into(),
                zone: Some("2".into())
            }
        );
    }

    #[test]
    fn a_known_code_among_the_details_wins() {
        let body = json!({"error": {"code": "DeploymentFailed", "message": "At least one resource deployment operation failed.",
            "details": [{"code": "ZonalAllocationFailed", "message": "Allocation failed. We do not have sufficient capacity\n for the requested VM size in this zone."}]}});
        let (code, msg) = body_error(&body);
        assert_eq!(code.as_deref(), Some("ZonalAllocationFailed"));
        assert_eq!(
            msg,
            "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone."
        );
        let e = call_error(
            "virtualMachines.createOrUpdate",
            code,
            None,
            &msg,
            "w",
            Some("1"),
        );
        assert!(matches!(e.kind(), ProviderErrorKind::Capacity { .. }));
        assert!(
            e.to_string().starts_with(
                "virtualMachines.createOrUpdate: ZonalAllocationFailed: Allocation failed."
            ),
            "{e}"
        );
        let (code, msg) = body_error(&json!({"unexpected": true}));
        assert_eq!(code, None);
        assert_eq!(msg, "no error details");
    }
}
