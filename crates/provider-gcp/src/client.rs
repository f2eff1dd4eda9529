//! Client construction only: credentials (Ray's `provider.gcp_credentials` when the YAML
//! has them, else Application Default Credentials, or none for a loopback fake), the endpoint (`RAYSCALE_GCP_ENDPOINT`), the client's retry policy and
//! timeouts, and the operation-polling backoff.
//!
//! The client retries only calls it knows to be idempotent (GET, DELETE) on transient
//! errors, three attempts at most; `instances.insert`, `start` and `stop` (POST) are not
//! retried by it: a capacity answer must reach the fallback at once, and the provider
//! itself retries a throttled insert with the same `requestId`.

use std::time::Duration;

use google_cloud_auth::credentials::{CacheableResource, Credentials, EntityTag};
use google_cloud_compute_v1::client::Instances;
use google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder;
use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt};

use rayscale_core::provider::is_loopback_http;

use crate::GcpError;

/// The environment variable whose base URL replaces the Compute endpoint.
pub const ENDPOINT_ENV: &str = "RAYSCALE_GCP_ENDPOINT";

/// How operations are polled: the first delay, the longest, and how long a launch waits
/// for its operations before leaving them to `poll_errors`.
#[derive(Debug, Clone, PartialEq)]
pub struct Polling {
    /// The first delay between two polls of an operation.
    pub initial: Duration,
    /// The longest delay.
    pub maximum: Duration,
    /// How long `launch` waits for its operations (the driver's call deadline is 30 s).
    pub launch_wait: Duration,
}

impl Default for Polling {
    fn default() -> Self {
        Polling {
            initial: Duration::from_millis(500),
            maximum: Duration::from_secs(5),
            launch_wait: Duration::from_secs(20),
        }
    }
}

/// Ray's `provider.gcp_credentials`: what the machine running rayscale calls Google with
/// instead of Application Default Credentials (Ray's `construct_clients_from_provider_config`
/// takes the same two kinds). Its `Debug` never shows the secret.
#[derive(Clone, PartialEq)]
pub enum GcpCredentials {
    /// `{type: service_account, credentials: <the key file's JSON, as a string>}`: tokens
    /// signed with the key, for the `cloud-platform` scope.
    ServiceAccount(serde_json::Value),
    /// `{type: credentials_token, credentials: <an OAuth 2.0 access token>}`: sent as is.
    Token(String),
}

impl std::fmt::Debug for GcpCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GcpCredentials::ServiceAccount(key) => f
                .debug_tuple("ServiceAccount")
                .field(&key.get("client_email").and_then(|v| v.as_str()))
                .finish(),
            GcpCredentials::Token(_) => f.write_str("Token(..)"),
        }
    }
}

impl GcpCredentials {
    /// The credentials of a provider section; `None` without `gcp_credentials`.
    pub fn from_provider(
        provider: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<Self>, GcpError> {
        use serde_json::Value;
        let at = "provider.gcp_credentials";
        let m = match provider.get("gcp_credentials") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(GcpError::config(at, "must be a mapping")),
        };
        if let Some(k) = m
            .keys()
            .find(|k| !["type", "credentials"].contains(&k.as_str()))
        {
            return Err(GcpError::config(
                format!("{at}.{k}"),
                "not read (known: type, credentials)",
            ));
        }
        let secret = match m.get("credentials") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim(),
            Some(_) => {
                return Err(GcpError::config(
                    format!("{at}.credentials"),
                    "must be a non-empty string",
                ));
            }
            None => {
                return Err(GcpError::config(
                    format!("{at}.credentials"),
                    "required, as in Ray (the key file's JSON, or an access token)",
                ));
            }
        };
        match m.get("type").and_then(Value::as_str) {
            Some("service_account") => {
                // Never the text itself in the error: it is a private key.
                let key: Value = serde_json::from_str(secret).map_err(|e| {
                    GcpError::config(
                        format!("{at}.credentials"),
                        format!(
                            "not a service account key's JSON (line {}, column {}): paste the \
                             key file's content as one string",
                            e.line(),
                            e.column()
                        ),
                    )
                })?;
                for field in ["client_email", "private_key"] {
                    if key.get(field).and_then(Value::as_str).is_none() {
                        return Err(GcpError::config(
                            format!("{at}.credentials"),
                            format!("the service account key has no {field}"),
                        ));
                    }
                }
                Ok(Some(GcpCredentials::ServiceAccount(key)))
            }
            Some("credentials_token") => Ok(Some(GcpCredentials::Token(secret.to_string()))),
            other => Err(GcpError::config(
                format!("{at}.type"),
                format!(
                    "{}: expected service_account or credentials_token (as in Ray)",
                    other.map_or_else(|| "missing".to_string(), |t| format!("{t:?}"))
                ),
            )),
        }
    }

    /// The library's credentials for these. A key whose JSON lacks the library's fields is
    /// an error here; a `private_key` that is not a PKCS#8 PEM fails the first call, as an
    /// auth error naming it.
    pub fn to_credentials(&self) -> Result<Credentials, GcpError> {
        match self {
            GcpCredentials::ServiceAccount(key) => {
                google_cloud_auth::credentials::service_account::Builder::new(key.clone())
                    .build()
                    .map_err(|e| {
                        GcpError::config(
                            "provider.gcp_credentials.credentials",
                            format!("the service account key: {}", one_line(&e.to_string())),
                        )
                    })
            }
            GcpCredentials::Token(t) => {
                let value = http::HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    GcpError::config(
                        "provider.gcp_credentials.credentials",
                        "the token has characters a header cannot carry",
                    )
                })?;
                Ok(Credentials::from(StaticToken(value)))
            }
        }
    }
}

/// An access token given as is (`credentials_token`): Google answers 401 once it expires,
/// as Ray's `OAuthCredentials` without a refresh token.
struct StaticToken(http::HeaderValue);

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StaticToken(..)")
    }
}

impl google_cloud_auth::credentials::CredentialsProvider for StaticToken {
    async fn headers(
        &self,
        _extensions: http::Extensions,
    ) -> Result<CacheableResource<http::HeaderMap>, google_cloud_auth::errors::CredentialsError>
    {
        let mut data = http::HeaderMap::new();
        let mut value = self.0.clone();
        value.set_sensitive(true);
        data.insert(http::header::AUTHORIZATION, value);
        Ok(CacheableResource::New {
            entity_tag: EntityTag::new(),
            data,
        })
    }

    async fn universe_domain(&self) -> Option<String> {
        None
    }
}

/// A client for `endpoint` (`None`: Google's), with `credentials` when given (Ray's
/// `gcp_credentials`, sent to any endpoint, a loopback fake included), else Application
/// Default Credentials, or none when the endpoint is a loopback `http://` URL (a local
/// fake). Plain http to anything else is refused.
pub async fn build(
    endpoint: Option<&str>,
    polling: &Polling,
    credentials: Option<&Credentials>,
) -> Result<Instances, GcpError> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // The client's TLS and token signing use the process's provider (the binary
        // installs one at start-up); without one they would panic.
        return Err(GcpError::config(
            "tls",
            "no rustls crypto provider is installed in this process",
        ));
    }
    let mut b = Instances::builder()
        .with_retry_policy(
            Aip194Strict
                .with_attempt_limit(3)
                .with_time_limit(Duration::from_secs(120)),
        )
        .with_attempt_timeout(Duration::from_secs(60))
        .with_polling_backoff_policy(
            ExponentialBackoffBuilder::new()
                .with_initial_delay(polling.initial)
                .with_maximum_delay(polling.maximum)
                .build()
                .map_err(|e| GcpError::config("polling", e.to_string()))?,
        );
    if let Some(c) = credentials {
        b = b.with_credentials(c.clone());
    }
    match endpoint {
        Some(url) if is_loopback_http(url) => {
            b = b.with_endpoint(url.trim_end_matches('/'));
            if credentials.is_none() {
                b = b.with_credentials(
                    google_cloud_auth::credentials::anonymous::Builder::new().build(),
                );
            }
        }
        Some(url) if url.starts_with("https://") => {
            b = b.with_endpoint(url.trim_end_matches('/'));
        }
        Some(url) => {
            return Err(GcpError::config(
                ENDPOINT_ENV,
                format!("{url:?}: plain http is allowed only to a loopback address"),
            ));
        }
        None => {}
    }
    b.build().await.map_err(|e| no_credentials(&e.to_string()))
}

/// The error of a process without Application Default Credentials (`why`: the library's).
pub(crate) fn no_credentials(why: &str) -> GcpError {
    GcpError::Call {
        call: "credentials",
        code: None,
        status: None,
        kind: rayscale_core::provider::ProviderErrorKind::Auth,
        message: format!(
            "no Application Default Credentials ({}): set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login`",
            one_line(why)
        ),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plain_http_elsewhere_is_refused() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let e = build(
            Some("http://compute.example.com"),
            &Polling::default(),
            None,
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.starts_with("RAYSCALE_GCP_ENDPOINT: "), "{e}");
        assert!(
            build(Some("http://127.0.0.1:1"), &Polling::default(), None)
                .await
                .is_ok()
        );
    }
}
