//! Client construction only: the standard AWS chain (region, credentials, endpoint), the
//! SDK's retry policy and timeouts, and the translation of SDK errors into [`AwsError`].
//!
//! Region, endpoint and credentials come from the standard chain, so `AWS_REGION`,
//! `AWS_PROFILE`, `AWS_ENDPOINT_URL(_EC2)`, SSO and `credential_process` profiles, web
//! identity and instance roles work as in every AWS tool; `provider.region` overrides
//! the region. Describe, CreateTags, Stop and Terminate keep the SDK's standard retries
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
pub async fn from_environment(region: Option<&str>) -> Result<Client, AwsError> {
    Ok(Client::new(&load(region, "AWS_ENDPOINT_URL_EC2").await?))
}

/// An IAM client from the standard chain, as [`from_environment`] (the endpoint from
/// `AWS_ENDPOINT_URL_IAM`, `AWS_ENDPOINT_URL` or the loaded config), for `rayscale up`'s
/// bootstrap of the head's instance profile.
pub async fn iam_from_environment(region: Option<&str>) -> Result<aws_sdk_iam::Client, AwsError> {
    Ok(aws_sdk_iam::Client::new(
        &load(region, "AWS_ENDPOINT_URL_IAM").await?,
    ))
}

/// An SSM client from the standard chain, as [`from_environment`] (the endpoint from
/// `AWS_ENDPOINT_URL_SSM`, `AWS_ENDPOINT_URL` or the loaded config), for `rayscale up`'s
/// upload of a `provider.cloudwatch` agent config.
pub async fn ssm_from_environment(region: Option<&str>) -> Result<aws_sdk_ssm::Client, AwsError> {
    Ok(aws_sdk_ssm::Client::new(
        &load(region, "AWS_ENDPOINT_URL_SSM").await?,
    ))
}

/// The standard chain's config, with rayscale's retries and timeouts; `service_url` is
/// the service's own endpoint variable.
async fn load(region: Option<&str>, service_url: &str) -> Result<aws_config::SdkConfig, AwsError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(retries())
        .timeout_config(timeouts());
    if let Some(r) = region {
        loader = loader.region(Region::new(r.to_string()));
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
