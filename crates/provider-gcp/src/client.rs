//! Client construction only: credentials (Application Default Credentials, or none for a
//! loopback fake), the endpoint (`RAYSCALE_GCP_ENDPOINT`), the client's retry policy and
//! timeouts, and the operation-polling backoff.
//!
//! The client retries only calls it knows to be idempotent (GET, DELETE) on transient
//! errors, three attempts at most; `instances.insert`, `start` and `stop` (POST) are not
//! retried by it: a capacity answer must reach the fallback at once, and the provider
//! itself retries a throttled insert with the same `requestId`.

use std::time::Duration;

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

/// A client for `endpoint` (`None`: Google's), with Application Default Credentials, or
/// without credentials when the endpoint is a loopback `http://` URL (a local fake). Plain
/// http to anything else is refused.
pub async fn build(endpoint: Option<&str>, polling: &Polling) -> Result<Instances, GcpError> {
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
    match endpoint {
        Some(url) if is_loopback_http(url) => {
            b = b.with_endpoint(url.trim_end_matches('/')).with_credentials(
                google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
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
        let e = build(Some("http://compute.example.com"), &Polling::default())
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("RAYSCALE_GCP_ENDPOINT: "), "{e}");
        assert!(
            build(Some("http://127.0.0.1:1"), &Polling::default())
                .await
                .is_ok()
        );
    }
}
