//! The client: credentials (`azure_identity`'s default chain, or none for a loopback
//! fake), the endpoint (`RAYSCALE_AZURE_ENDPOINT`), the retry policy and timeouts, and the
//! two calls `azure_mgmt_compute` 0.21 cannot make soundly, sent on the same transport:
//! a VM create with its body as JSON (the SDK's model drops user-assigned identities),
//! and the polling of a long-running operation (the SDK's create "poller" re-sends the
//! PUT and takes any 200 for done; delete, deallocate and start have none).
//!
//! Retries: `azure_core`'s policy retries 408, 429 and 5xx (honouring `Retry-After`),
//! three times at most; a 409 (`SkuNotAvailable`, a quota) reaches the fallback at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use azure_core::auth::{AccessToken, Secret, TokenCredential};
use azure_core::{
    ClientOptions, Context, ExponentialRetryOptions, HttpClient, Method, Pipeline, Request,
    RetryOptions, TransportOptions, Url, headers,
};
use azure_mgmt_compute::package_2024_07_01 as compute;
use rayscale_core::provider::is_loopback_http;
use serde_json::Value;

use crate::AzureError;
use crate::errors::{body_error, call_error, one_line, sdk_error};

/// The environment variable whose base URL replaces the Resource Manager endpoint.
pub const ENDPOINT_ENV: &str = "RAYSCALE_AZURE_ENDPOINT";

/// Azure Resource Manager in Azure's public cloud.
pub const PUBLIC_ENDPOINT: &str = "https://management.azure.com";

/// The token scope of Resource Manager (the same for a private endpoint).
pub const SCOPE: &str = "https://management.azure.com/.default";

/// The compute API version every call uses.
pub const API_VERSION: &str = "2024-07-01";

/// The network API version of the one network call: a NIC's private address.
pub const NETWORK_API_VERSION: &str = "2024-05-01";

/// What [`Arm::nic_addresses`] reads of a NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicAddresses {
    /// The primary configuration's private address.
    pub private_ip: Option<String>,
    /// The resource id of its public address, if it has one.
    pub public_ip_id: Option<String>,
}

/// How long one HTTP exchange may take (until the response's headers).
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

/// How operations are polled: the first delay, the longest (a `Retry-After` longer than
/// this is shortened to it), and how long a launch waits for its operations before
/// leaving them to `poll_errors`.
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
            initial: Duration::from_secs(1),
            maximum: Duration::from_secs(10),
            launch_wait: Duration::from_secs(20),
        }
    }
}

/// HTTP requests sent, by call (every page, poll and retry counts).
#[derive(Debug, Default)]
pub struct CallCounts {
    /// `PUT virtualMachines/{vm}` (and `PATCH`: tag updates).
    pub create: AtomicU64,
    /// `GET .../virtualMachines` pages.
    pub list: AtomicU64,
    /// `GET .../virtualMachines/{vm}/instanceView` (and plain gets).
    pub get: AtomicU64,
    /// `GET` of an operation's status.
    pub operation: AtomicU64,
    /// `DELETE virtualMachines/{vm}`.
    pub delete: AtomicU64,
    /// `POST .../deallocate`.
    pub deallocate: AtomicU64,
    /// `POST .../start`.
    pub start: AtomicU64,
    /// `GET networkInterfaces/{nic}` (a head's address).
    pub nic: AtomicU64,
    /// Anything else.
    pub other: AtomicU64,
}

impl CallCounts {
    /// `(call, count)` for every call, in a stable order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        [
            ("virtualMachines.createOrUpdate", &self.create),
            ("virtualMachines.list", &self.list),
            ("virtualMachines.instanceView", &self.get),
            ("operations.get", &self.operation),
            ("virtualMachines.delete", &self.delete),
            ("virtualMachines.deallocate", &self.deallocate),
            ("virtualMachines.start", &self.start),
            ("networkInterfaces.get", &self.nic),
            ("other", &self.other),
        ]
        .into_iter()
        .map(|(n, c)| (n, c.load(Ordering::Relaxed)))
        .collect()
    }

    fn count(&self, method: &Method, path: &str) {
        let c = if path.contains("/networkInterfaces/") {
            &self.nic
        } else if path.contains("/operations/") {
            &self.operation
        } else if path.ends_with("/virtualMachines") {
            &self.list
        } else if *method == Method::Put || *method == Method::Patch {
            &self.create
        } else if *method == Method::Delete {
            &self.delete
        } else if path.ends_with("/deallocate") {
            &self.deallocate
        } else if path.ends_with("/start") {
            &self.start
        } else if *method == Method::Get {
            &self.get
        } else {
            &self.other
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The transport under every call: the SDK's reqwest client with a deadline per
/// exchange, counting calls, and without credentials on the wire for a loopback fake.
#[derive(Debug)]
struct Transport {
    inner: Arc<dyn HttpClient>,
    anonymous: bool,
    calls: Arc<CallCounts>,
}

#[async_trait::async_trait]
impl HttpClient for Transport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<azure_core::Response> {
        self.calls.count(request.method(), request.url().path());
        let stripped;
        let req = if self.anonymous {
            let mut r = Request::new(request.url().clone(), *request.method());
            for (k, v) in request.headers().iter() {
                if *k != headers::AUTHORIZATION {
                    r.insert_header(k.clone(), v.clone());
                }
            }
            r.set_body(request.body().clone());
            stripped = r;
            &stripped
        } else {
            request
        };
        match tokio::time::timeout(HTTP_TIMEOUT, self.inner.execute_request(req)).await {
            Ok(r) => r,
            Err(_) => Err(azure_core::Error::message(
                azure_core::error::ErrorKind::Io,
                format!("no response in {} s", HTTP_TIMEOUT.as_secs()),
            )),
        }
    }
}

/// No credential: a loopback fake needs none (the transport sends no Authorization).
#[derive(Debug)]
struct NoCredential;

#[async_trait::async_trait]
impl TokenCredential for NoCredential {
    async fn get_token(&self, _scopes: &[&str]) -> azure_core::Result<AccessToken> {
        Ok(AccessToken::new(
            Secret::new(""),
            time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        ))
    }
    async fn clear_cache(&self) -> azure_core::Result<()> {
        Ok(())
    }
}

/// An operation a call started, to poll: its status URL (`Azure-AsyncOperation`), or
/// else its `Location`.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationUrl {
    /// `Azure-AsyncOperation`: a status resource (`{status, error}`).
    AsyncOperation(String),
    /// `Location`: 202 while running, then the call's own final answer.
    Location(String),
}

/// What a poll of an operation says.
#[derive(Debug)]
pub enum OpStatus {
    /// Still running; poll again after this long (its `Retry-After`, if any).
    Running(Option<Duration>),
    /// Done.
    Succeeded,
    /// Done, failed (the operation's `error`, or the final answer's).
    Failed {
        /// ARM's code.
        code: Option<String>,
        /// One line.
        message: String,
        /// The HTTP status of the final answer (Location polling), if an error one.
        status: Option<u16>,
    },
}

/// The answer of a call that may have started an operation.
#[derive(Debug)]
pub struct Accepted {
    /// The HTTP status (200, 201, 202, 204).
    pub status: u16,
    /// The operation to poll, if the answer named one.
    pub operation: Option<OperationUrl>,
    /// `Retry-After`, if given.
    pub retry_after: Option<Duration>,
    /// The body (JSON), if any.
    pub body: Value,
}

/// A client of Azure Resource Manager for the compute calls rayscale makes.
#[derive(Clone)]
pub struct Arm {
    /// The generated compute client (list, instance view, delete, deallocate, start).
    pub compute: compute::Client,
    pipeline: Pipeline,
    credential: Arc<dyn TokenCredential>,
    endpoint: Url,
    calls: Arc<CallCounts>,
}

impl std::fmt::Debug for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arm")
            .field("endpoint", &self.endpoint.as_str())
            .finish()
    }
}

/// A client for `endpoint` (`None`: Azure's public cloud), with `azure_identity`'s
/// default chain (environment, managed identity, Azure CLI), or without credentials
/// when the endpoint is a loopback `http://` URL (a local fake). Plain http to anything
/// else is refused.
pub fn build(endpoint: Option<&str>) -> Result<Arm, AzureError> {
    let (url, anonymous) = match endpoint {
        Some(u) if is_loopback_http(u) => (u.trim_end_matches('/'), true),
        Some(u) if u.starts_with("https://") => (u.trim_end_matches('/'), false),
        Some(u) => {
            return Err(AzureError::config(
                ENDPOINT_ENV,
                format!("{u:?}: plain http is allowed only to a loopback address"),
            ));
        }
        None => (PUBLIC_ENDPOINT, false),
    };
    let endpoint =
        Url::parse(url).map_err(|e| AzureError::config(ENDPOINT_ENV, format!("{url:?}: {e}")))?;
    let calls = Arc::new(CallCounts::default());
    let http: Arc<dyn HttpClient> = Arc::new(Transport {
        inner: azure_core::new_http_client(),
        anonymous,
        calls: calls.clone(),
    });
    let credential: Arc<dyn TokenCredential> = if anonymous {
        Arc::new(NoCredential)
    } else {
        let token_http: Arc<dyn HttpClient> = Arc::new(Transport {
            inner: azure_core::new_http_client(),
            anonymous: false,
            calls: Arc::new(CallCounts::default()),
        });
        Arc::new(
            azure_identity::DefaultAzureCredential::create(
                azure_identity::TokenCredentialOptions::from(token_http),
            )
            .map_err(|e| sdk_error("credentials", &e, "", None))?,
        )
    };
    let retry = RetryOptions::exponential(
        ExponentialRetryOptions::default()
            .max_retries(3u32)
            .initial_delay(Duration::from_millis(250))
            .max_total_elapsed(Duration::from_secs(90))
            .max_delay(Duration::from_secs(20)),
    );
    let transport = TransportOptions::new(http);
    let compute = compute::Client::builder(credential.clone())
        .endpoint(endpoint.clone())
        .scopes(&[SCOPE])
        .retry(retry.clone())
        .transport(transport.clone())
        .build()
        .map_err(|e| AzureError::config(ENDPOINT_ENV, one_line(&e.to_string())))?;
    let pipeline = Pipeline::new(
        Some("rayscale-provider-azure"),
        Some(env!("CARGO_PKG_VERSION")),
        ClientOptions::new(transport).retry(retry),
        Vec::new(),
        Vec::new(),
    );
    Ok(Arm {
        compute,
        pipeline,
        credential,
        endpoint,
        calls,
    })
}

/// `Retry-After` (seconds) of a response.
fn retry_after(h: &azure_core::headers::Headers) -> Option<Duration> {
    h.get_optional_str(&headers::RETRY_AFTER)
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// The operation an answer names.
fn operation_of(h: &azure_core::headers::Headers) -> Option<OperationUrl> {
    h.get_optional_string(&headers::AZURE_ASYNCOPERATION)
        .map(OperationUrl::AsyncOperation)
        .or_else(|| {
            h.get_optional_string(&headers::LOCATION)
                .map(OperationUrl::Location)
        })
}

impl Arm {
    /// The HTTP requests sent so far.
    pub fn calls(&self) -> &CallCounts {
        &self.calls
    }

    /// The path of VM `name` in `sub` / `rg`.
    pub fn vm_path(sub: &str, rg: &str, name: &str) -> String {
        format!(
            "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{name}"
        )
    }

    async fn send(
        &self,
        call: &'static str,
        mut req: Request,
        node_type: &str,
        zone: Option<&str>,
    ) -> Result<(u16, azure_core::headers::Headers, Value), AzureError> {
        let token = self
            .credential
            .get_token(&[SCOPE])
            .await
            .map_err(|e| sdk_error(call, &e, node_type, zone))?;
        req.insert_header(
            headers::AUTHORIZATION,
            format!("Bearer {}", token.token.secret()),
        );
        let rsp = self
            .pipeline
            .send(&Context::default(), &mut req)
            .await
            .map_err(|e| sdk_error(call, &e, node_type, zone))?;
        let (status, h, body) = rsp.deconstruct();
        let bytes = body
            .collect()
            .await
            .map_err(|e| sdk_error(call, &e, node_type, zone))?;
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| AzureError::Call {
                call,
                code: None,
                status: Some(u16::from(status)),
                kind: rayscale_core::provider::ProviderErrorKind::Transient,
                message: format!("an answer that is not JSON: {e}"),
            })?
        };
        Ok((u16::from(status), h, body))
    }

    /// `PUT` of VM `name` with `body` (create, or the same VM again: a replay), or with
    /// `patch` a `PATCH` (an update of its tags).
    #[allow(clippy::too_many_arguments)]
    pub async fn put_vm(
        &self,
        sub: &str,
        rg: &str,
        name: &str,
        body: &Value,
        patch: bool,
        node_type: &str,
        zone: Option<&str>,
    ) -> Result<Accepted, AzureError> {
        let (call, method) = if patch {
            ("virtualMachines.update", Method::Patch)
        } else {
            ("virtualMachines.createOrUpdate", Method::Put)
        };
        self.send_json(
            call,
            method,
            &Self::vm_path(sub, rg, name),
            API_VERSION,
            Some(body),
            node_type,
            zone,
        )
        .await
    }

    /// `method` of the resource `id` (a resource id path) at `api_version`, with `body`
    /// as JSON: the bootstrap's calls (resource groups, network, identity, roles).
    pub async fn resource(
        &self,
        call: &'static str,
        method: Method,
        id: &str,
        api_version: &str,
        body: Option<&Value>,
    ) -> Result<Accepted, AzureError> {
        self.send_json(call, method, id, api_version, body, "", None)
            .await
    }

    /// `method` of `path` at `api_version` with `body` as JSON; errors name `node_type`
    /// and `zone` where a launch's do.
    #[allow(clippy::too_many_arguments)]
    async fn send_json(
        &self,
        call: &'static str,
        method: Method,
        path: &str,
        api_version: &str,
        body: Option<&Value>,
        node_type: &str,
        zone: Option<&str>,
    ) -> Result<Accepted, AzureError> {
        let mut url = self.endpoint.clone();
        url.set_path(path);
        url.query_pairs_mut()
            .append_pair("api-version", api_version);
        let mut req = Request::new(url, method);
        if let Some(b) = body {
            req.insert_header("content-type", "application/json");
            req.set_body(b.to_string());
        }
        let (status, h, body) = self.send(call, req, node_type, zone).await?;
        Ok(Accepted {
            status,
            operation: operation_of(&h),
            retry_after: retry_after(&h),
            body,
        })
    }

    /// The addresses of the NIC `nic_id` (a resource id) from the network API (the compute
    /// API does not give a VM's addresses): its primary configuration's private address
    /// and the id of its public address resource. Read for heads only (the launcher
    /// reports the head's addresses; the reconciler needs no worker's).
    pub async fn nic_addresses(&self, nic_id: &str) -> Result<NicAddresses, AzureError> {
        let body = self.network_get("networkInterfaces.get", nic_id).await?;
        let configs = body
            .get("properties")
            .and_then(|p| p.get("ipConfigurations"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let primary = configs
            .iter()
            .find(|c| {
                c.get("properties").and_then(|p| p.get("primary")) == Some(&Value::Bool(true))
            })
            .or(configs.first())
            .and_then(|c| c.get("properties"));
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        Ok(NicAddresses {
            private_ip: text(primary.and_then(|p| p.get("privateIPAddress"))),
            public_ip_id: text(
                primary
                    .and_then(|p| p.get("publicIPAddress"))
                    .and_then(|a| a.get("id")),
            ),
        })
    }

    /// The address of the public IP address resource `id` (`properties.ipAddress`;
    /// `None` until Azure has given one).
    pub async fn public_ip_address(&self, id: &str) -> Result<Option<String>, AzureError> {
        let body = self.network_get("publicIPAddresses.get", id).await?;
        Ok(body
            .get("properties")
            .and_then(|p| p.get("ipAddress"))
            .and_then(Value::as_str)
            .map(str::to_string))
    }

    /// `GET` of the network resource `id` (a resource id).
    async fn network_get(&self, call: &'static str, id: &str) -> Result<Value, AzureError> {
        Ok(self
            .resource(call, Method::Get, id, NETWORK_API_VERSION, None)
            .await?
            .body)
    }

    /// The answer of an SDK call (`send()` of a delete, deallocate or start) as
    /// [`Accepted`].
    pub async fn accepted(
        call: &'static str,
        rsp: azure_core::Result<azure_core::Response>,
    ) -> Result<Accepted, AzureError> {
        let rsp = rsp.map_err(|e| sdk_error(call, &e, "", None))?;
        let status = u16::from(rsp.status());
        Ok(Accepted {
            status,
            operation: operation_of(rsp.headers()),
            retry_after: retry_after(rsp.headers()),
            body: Value::Null,
        })
    }

    /// Polls `op` once.
    pub async fn poll(
        &self,
        call: &'static str,
        op: &OperationUrl,
        node_type: &str,
        zone: Option<&str>,
    ) -> Result<OpStatus, AzureError> {
        let (raw, is_async) = match op {
            OperationUrl::AsyncOperation(u) => (u, true),
            OperationUrl::Location(u) => (u, false),
        };
        let url = Url::parse(raw).map_err(|e| AzureError::Call {
            call,
            code: None,
            status: None,
            kind: rayscale_core::provider::ProviderErrorKind::Transient,
            message: format!("an operation URL that does not parse ({raw:?}): {e}"),
        })?;
        if url.host_str() != self.endpoint.host_str() || url.port() != self.endpoint.port() {
            // The bearer token goes only to the endpoint it was asked for.
            return Err(AzureError::Call {
                call,
                code: None,
                status: None,
                kind: rayscale_core::provider::ProviderErrorKind::InvalidConfig,
                message: format!(
                    "refusing to poll {raw:?}: not on the endpoint {}",
                    self.endpoint
                ),
            });
        }
        let req = Request::new(url, Method::Get);
        match self.send(call, req, node_type, zone).await {
            Ok((status, h, body)) => {
                if !is_async {
                    return Ok(if status == 202 {
                        OpStatus::Running(retry_after(&h))
                    } else {
                        OpStatus::Succeeded
                    });
                }
                let st = body.get("status").and_then(Value::as_str).unwrap_or("");
                Ok(match st.to_ascii_lowercase().as_str() {
                    "succeeded" => OpStatus::Succeeded,
                    "failed" | "canceled" | "cancelled" => {
                        let (code, message) = body_error(&body);
                        OpStatus::Failed {
                            code,
                            message: if message == "no error details" {
                                format!("the operation ended {st}")
                            } else {
                                message
                            },
                            status: None,
                        }
                    }
                    _ => OpStatus::Running(retry_after(&h)),
                })
            }
            // Location polling: the call's own final answer was an error.
            Err(e) if !is_async && e.status().is_some() => Ok(OpStatus::Failed {
                code: e.code().map(str::to_string),
                message: match &e {
                    AzureError::Call { message, .. } => message.clone(),
                    other => other.to_string(),
                },
                status: e.status(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Polls `op` until it ends or `deadline` passes (delays from `polling`, a longer
    /// `Retry-After` shortened to `polling.maximum`): `Ok(true)` done, `Ok(false)` still
    /// running (or its polls failed), or the failure it ended with.
    #[allow(clippy::too_many_arguments)]
    pub async fn wait(
        &self,
        call: &'static str,
        op: &OperationUrl,
        first_delay: Option<Duration>,
        polling: &Polling,
        deadline: tokio::time::Instant,
        node_type: &str,
        zone: Option<&str>,
    ) -> Result<bool, AzureError> {
        let mut delay = first_delay.unwrap_or(polling.initial).min(polling.maximum);
        let mut backoff = polling.initial;
        loop {
            if tokio::time::Instant::now() + delay > deadline {
                return Ok(false);
            }
            tokio::time::sleep(delay).await;
            match self.poll(call, op, node_type, zone).await {
                Ok(OpStatus::Succeeded) => return Ok(true),
                Ok(OpStatus::Failed {
                    code,
                    message,
                    status,
                }) => return Err(call_error(call, code, status, &message, node_type, zone)),
                Ok(OpStatus::Running(after)) => {
                    backoff = (backoff * 2).min(polling.maximum);
                    delay = after.unwrap_or(backoff).min(polling.maximum);
                }
                Err(e) => {
                    tracing::debug!("polling {call}: {e}");
                    return Ok(false);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_elsewhere_is_refused() {
        let e = build(Some("http://management.example.com"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("RAYSCALE_AZURE_ENDPOINT: "), "{e}");
        assert!(build(Some("http://127.0.0.1:1")).is_ok());
    }
}
