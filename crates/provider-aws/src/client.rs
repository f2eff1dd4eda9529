//! Client construction only: the standard AWS chain (region, credentials, endpoint), the
//! SDK's retry policy and timeouts, and the translation of SDK errors into [`AwsError`].
//!
//! Region, endpoint and credentials come from the standard chain, so `AWS_REGION`,
//! `AWS_PROFILE`, `AWS_ENDPOINT_URL(_EC2)`, SSO and `credential_process` profiles, web
//! identity and instance roles work as in every AWS tool; `provider.region` overrides
//! the region, and `provider.aws_credentials` the credentials ([`StaticKeys`]), as Ray's. Describe, CreateTags, Stop and Terminate keep the SDK's standard retries
//! (3 attempts, throttling and 5xx); RunInstances and StartInstances are sent with
//! retries off (see [`no_retries`]): EC2 answers a capacity shortage with a 5xx, which
//! the SDK would retry, and a capacity error must reach the fallback at once.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::{Credentials, Region, SharedCredentialsProvider};
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use rayscale_core::provider::is_loopback_http;

use crate::AwsError;
use crate::errors::classify;

/// Timeouts of every call: connecting, one attempt, and the whole call with retries.
fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(Duration::from_secs(60))
        .operation_timeout(Duration::from_secs(180))
        .build()
}

fn retries() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(200))
        .with_max_backoff(Duration::from_secs(20))
}

/// A client from the standard chain; `region` (`provider.region`) overrides the chain's.
/// An endpoint from the environment (`AWS_ENDPOINT_URL_EC2`, `AWS_ENDPOINT_URL`, or the
/// loaded config) gets the check [`for_endpoint`] makes: plain http only to loopback.
pub async fn from_environment(
    region: Option<&str>,
    keys: Option<&StaticKeys>,
) -> Result<Client, AwsError> {
    Ok(Client::new(
        &load(region, "AWS_ENDPOINT_URL_EC2", keys).await?,
    ))
}

/// An IAM client from the standard chain, as [`from_environment`] (the endpoint from
/// `AWS_ENDPOINT_URL_IAM`, `AWS_ENDPOINT_URL` or the loaded config), for `rayscale up`'s
/// bootstrap of the head's instance profile.
pub async fn iam_from_environment(
    region: Option<&str>,
    keys: Option<&StaticKeys>,
) -> Result<aws_sdk_iam::Client, AwsError> {
    Ok(aws_sdk_iam::Client::new(
        &load(region, "AWS_ENDPOINT_URL_IAM", keys).await?,
    ))
}

/// An SSM client from the standard chain, as [`from_environment`] (the endpoint from
/// `AWS_ENDPOINT_URL_SSM`, `AWS_ENDPOINT_URL` or the loaded config), for `rayscale up`'s
/// upload of a `provider.cloudwatch` agent config.
pub async fn ssm_from_environment(
    region: Option<&str>,
    keys: Option<&StaticKeys>,
) -> Result<aws_sdk_ssm::Client, AwsError> {
    Ok(aws_sdk_ssm::Client::new(
        &load(region, "AWS_ENDPOINT_URL_SSM", keys).await?,
    ))
}

/// The standard chain's config, with rayscale's retries and timeouts; `service_url` is
/// the service's own endpoint variable.
async fn load(
    region: Option<&str>,
    service_url: &str,
    keys: Option<&StaticKeys>,
) -> Result<aws_config::SdkConfig, AwsError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(retries())
        .timeout_config(timeouts());
    if let Some(r) = region {
        loader = loader.region(Region::new(r.to_string()));
    }
    if let Some(k) = keys {
        loader = loader.credentials_provider(Credentials::new(
            k.access_key_id.clone(),
            k.secret_access_key.clone(),
            k.session_token.clone(),
            None,
            "provider.aws_credentials",
        ));
    }
    let conf = loader.load().await;
    let from_env = [service_url, "AWS_ENDPOINT_URL"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok().map(|u| (v, u)));
    let loaded = conf
        .endpoint_url()
        .map(|u| ("the AWS config", u.to_string()));
    for (what, url) in from_env.chain(loaded) {
        check_endpoint(what, &url)?;
    }
    Ok(conf)
}

/// `provider.aws_credentials`: the keys Ray passes to every boto3 client it makes
/// (`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`), which then take
/// the place of the standard chain's credentials. Its `Debug` does not show the secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticKeys {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKeys")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<hidden>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

impl StaticKeys {
    /// The keys of a cluster config's `provider.aws_credentials`; `None` without it.
    pub fn of(config: &rayscale_core::config::ClusterConfig) -> Result<Option<Self>, AwsError> {
        match config.raw.get("provider").and_then(|p| p.as_object()) {
            Some(p) => Self::from_provider(p),
            None => Ok(None),
        }
    }

    /// The keys of a provider section's `aws_credentials`; `None` without it.
    pub fn from_provider(
        provider: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<Self>, AwsError> {
        use serde_json::Value;
        let at = "provider.aws_credentials";
        let m = match provider.get("aws_credentials") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(AwsError::config(at, "must be a mapping")),
        };
        const KEYS: [&str; 3] = [
            "aws_access_key_id",
            "aws_secret_access_key",
            "aws_session_token",
        ];
        if let Some(k) = m.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(AwsError::config(
                format!("{at}.{k}"),
                format!("not read (known: {})", KEYS.join(", ")),
            ));
        }
        let get = |k: &str| -> Result<Option<String>, AwsError> {
            match m.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
                Some(_) => Err(AwsError::config(
                    format!("{at}.{k}"),
                    "must be a non-empty string",
                )),
            }
        };
        let (id, secret, token) = (
            get("aws_access_key_id")?,
            get("aws_secret_access_key")?,
            get("aws_session_token")?,
        );
        match (id, secret) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(Some(StaticKeys {
                access_key_id,
                secret_access_key,
                session_token: token,
            })),
            (None, None) if token.is_none() => Ok(None),
            _ => Err(AwsError::config(
                at,
                "aws_access_key_id and aws_secret_access_key go together",
            )),
        }
    }
}

/// Plain `http://` only to a loopback address (credentials and user data travel in the
/// clear otherwise).
fn check_endpoint(what: &str, endpoint: &str) -> Result<(), AwsError> {
    if endpoint.is_empty() || endpoint.starts_with("https://") || is_loopback_http(endpoint) {
        return Ok(());
    }
    Err(AwsError::config(
        "endpoint",
        format!("{what}: {endpoint:?}: plain http is allowed only to a loopback address"),
    ))
}

/// A client for an EC2-compatible endpoint with fixed credentials and no environment
/// (tests against moto, private emulators). Only plain `http://` loopback endpoints or
/// `https://` ones are accepted.
pub fn for_endpoint(endpoint: &str, region: &str) -> Result<Client, AwsError> {
    Ok(Client::new(&fixed(endpoint, region)?))
}

/// An IAM client for the same kind of endpoint as [`for_endpoint`] (moto serves IAM
/// beside EC2), with the same checks.
pub fn iam_for_endpoint(endpoint: &str, region: &str) -> Result<aws_sdk_iam::Client, AwsError> {
    Ok(aws_sdk_iam::Client::new(&fixed(endpoint, region)?))
}

/// An SSM client for the same kind of endpoint as [`for_endpoint`] (moto serves SSM
/// beside EC2), with the same checks.
pub fn ssm_for_endpoint(endpoint: &str, region: &str) -> Result<aws_sdk_ssm::Client, AwsError> {
    Ok(aws_sdk_ssm::Client::new(&fixed(endpoint, region)?))
}

/// The config of [`for_endpoint`] and [`iam_for_endpoint`]: `endpoint`, checked, with
/// fixed credentials and rayscale's retries and timeouts.
fn fixed(endpoint: &str, region: &str) -> Result<aws_config::SdkConfig, AwsError> {
    if !endpoint.starts_with("https://") && !is_loopback_http(endpoint) {
        return Err(AwsError::config(
            "endpoint",
            format!("{endpoint:?}: plain http is allowed only to a loopback address"),
        ));
    }
    Ok(aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "static",
        )))
        .endpoint_url(endpoint)
        .retry_config(retries())
        .timeout_config(timeouts())
        .build())
}

/// The per-call override that turns the SDK's retries off (RunInstances,
/// StartInstances).
pub fn no_retries() -> aws_sdk_ec2::config::Builder {
    aws_sdk_ec2::config::Builder::default().retry_config(RetryConfig::disabled())
}

/// An SDK error of `call` as an [`AwsError`], its kind from the error table
/// (`node_type` and `zone` fill in a capacity error).
pub fn sdk_error<E, R>(
    call: &'static str,
    err: SdkError<E, R>,
    node_type: &str,
    zone: Option<&str>,
) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + HttpStatus,
{
    let status = err.raw_response().map(HttpStatus::status_code);
    let code = err.code().map(str::to_string);
    let message = match (&code, err.message()) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c.clone(),
        _ => one_line(&DisplayErrorContext(&err).to_string()),
    };
    let mut class = classify(code.as_deref(), status);
    // Missing credentials fail before any request is sent.
    if code.is_none() && status.is_none() && message.to_ascii_lowercase().contains("credentials") {
        class = crate::errors::Class::Auth;
    }
    AwsError::Call {
        call,
        code,
        status,
        kind: class.kind(node_type, zone),
        message,
    }
}

/// The HTTP status of a raw response.
pub trait HttpStatus {
    /// The status code.
    fn status_code(&self) -> u16;
}

impl HttpStatus for aws_sdk_ec2::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_to_loopback() {
        assert!(for_endpoint("http://ec2.us-east-1.amazonaws.com", "us-east-1").is_err());
        assert!(for_endpoint("https://ec2.us-east-1.amazonaws.com", "us-east-1").is_ok());
        assert!(iam_for_endpoint("http://iam.amazonaws.com", "us-east-1").is_err());
        assert!(iam_for_endpoint("http://127.0.0.1:5000", "us-east-1").is_ok());
    }
}
