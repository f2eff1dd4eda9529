//! A small JSON-over-HTTPS client for the few calls of `rayscale up`'s bootstrap
//! ([`crate::bootstrap`]) that the Instances client does not make: Cloud Resource Manager
//! v1 (`projects.get`, `getIamPolicy`, `setIamPolicy`), IAM v1 (`serviceAccounts.get`,
//! `create`) and Compute v1's `projects.get`, `setCommonInstanceMetadata`,
//! `globalOperations.get` and `subnetworks.list`, each once per `up`; and the provider's
//! Cloud TPU calls (TPU API v2alpha1 `nodes` and `operations`, [`crate::tpu`]): Ray's
//! version of that API has no Rust client, and Google's generated crates for IAM and
//! Resource Manager would add two SDKs to the build for five calls, so these are sent by
//! hand, with the same Application Default Credentials (or
//! none, to a loopback fake) and the same endpoint rule as [`crate::client`].
//!
//! What it must not do: retry (the bootstrap decides what is safe to send again), or send
//! plain http anywhere but loopback.

use std::time::Duration;

use google_cloud_auth::credentials::{CacheableResource, Credentials};
use rayscale_core::provider::is_loopback_http;
use serde_json::Value;

use crate::GcpError;
use crate::errors::classify;

/// One Google REST API at `base` (`https://iam.googleapis.com`, or a loopback fake).
#[derive(Clone)]
pub struct Rest {
    http: reqwest::Client,
    base: String,
    credentials: Option<Credentials>,
}

impl Rest {
    /// A client for `base` (`env` names where it came from, for errors) with `given`
    /// credentials (Ray's `gcp_credentials`) when there are, else Application Default
    /// Credentials for `https://` and none for a loopback `http://` URL; plain http
    /// elsewhere is refused.
    pub async fn new(base: &str, env: &str, given: Option<&Credentials>) -> Result<Self, GcpError> {
        let credentials = if !is_loopback_http(base) && !base.starts_with("https://") {
            return Err(GcpError::config(
                env,
                format!("{base:?}: plain http is allowed only to a loopback address"),
            ));
        } else if let Some(c) = given {
            Some(c.clone())
        } else if is_loopback_http(base) {
            None
        } else {
            Some(
                google_cloud_auth::credentials::Builder::default()
                    .build()
                    .map_err(|e| crate::client::no_credentials(&e.to_string()))?,
            )
        };
        let http = reqwest::Client::builder()
            .user_agent(concat!("rayscale/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| GcpError::config(env, format!("an HTTP client: {e}")))?;
        Ok(Rest {
            http,
            base: base.trim_end_matches('/').to_string(),
            credentials,
        })
    }

    /// `GET {base}/{path}`.
    pub async fn get(&self, call: &'static str, path: &str) -> Result<Value, GcpError> {
        self.send(call, reqwest::Method::GET, path, None).await
    }

    /// `POST {base}/{path}` with `body`.
    pub async fn post(
        &self,
        call: &'static str,
        path: &str,
        body: &Value,
    ) -> Result<Value, GcpError> {
        self.send(call, reqwest::Method::POST, path, Some(body))
            .await
    }

    /// `DELETE {base}/{path}`.
    pub async fn delete(&self, call: &'static str, path: &str) -> Result<Value, GcpError> {
        self.send(call, reqwest::Method::DELETE, path, None).await
    }

    async fn send(
        &self,
        call: &'static str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, GcpError> {
        let url = format!("{}/{}", self.base, path.trim_start_matches('/'));
        let mut req = self.http.request(method, &url);
        if let Some(c) = &self.credentials {
            let headers = match c.headers(Default::default()).await {
                Ok(CacheableResource::New { data, .. }) => data,
                Ok(CacheableResource::NotModified) => Default::default(),
                Err(e) => {
                    return Err(GcpError::Call {
                        call,
                        code: None,
                        status: None,
                        kind: rayscale_core::provider::ProviderErrorKind::Auth,
                        message: format!("credentials: {}", one_line(&e.to_string())),
                    });
                }
            };
            req = req.headers(headers);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| GcpError::transient(call, None, one_line(&e.to_string())))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| GcpError::transient(call, Some(status), one_line(&e.to_string())))?;
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        if (200..300).contains(&status) {
            return match parsed {
                Some(v) if v.is_object() => Ok(v),
                _ => Err(GcpError::transient(
                    call,
                    Some(status),
                    format!(
                        "HTTP {status} with a body that is not a JSON object: {}",
                        clip(&text)
                    ),
                )),
            };
        }
        let error = parsed.as_ref().and_then(|v| v.get("error"));
        let code = error
            .and_then(|e| e.get("errors"))
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|e| e.get("reason"))
            .or_else(|| error.and_then(|e| e.get("status")))
            .and_then(Value::as_str)
            .map(str::to_string);
        let message = error
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .map(one_line)
            .unwrap_or_else(|| clip(&text));
        Err(GcpError::Call {
            call,
            kind: classify(code.as_deref(), Some(status)).kind(""),
            message: format!(
                "HTTP {status}{}: {message}",
                code.as_deref().map(|c| format!(" {c}")).unwrap_or_default()
            ),
            code,
            status: Some(status),
        })
    }
}

/// `s` on one line (runs of white space as one space).
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `s` on one line, cut at 200 characters.
pub(crate) fn clip(s: &str) -> String {
    let s = one_line(s);
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}
