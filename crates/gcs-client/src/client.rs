//! The GCS client: Ray 2.60's `AutoscalerStateService` (all seven RPCs) and the
//! `InternalKVGcsService` subset an autoscaler needs, over one lazily connecting tonic
//! channel to `host:port` (plain HTTP/2: the GCS has no TLS).
//!
//! Every attempt of every call has a deadline ([`ClientOptions::deadline`], sent to the
//! GCS as `grpc-timeout` and enforced locally). Transient failures (see [`is_retryable`])
//! are retried with full-jitter exponential backoff ([`backoff_delay`]) up to
//! [`ClientOptions::max_attempts`] attempts in all; anything else fails at once. A reply
//! whose embedded `GcsStatus` is not OK is an error too.
//!
//! The channel reconnects by itself, so a client survives a restart of the GCS: calls
//! fail (retryably) while it is down and succeed again once it is back, without building
//! a new client. Cloning a client is cheap and shares the channel and the jitter
//! generator.
//!
//! How Ray 2.60 reports application errors: the GCS answers gRPC `ABORTED` with the Ray
//! status name as the message (`"Invalid"`, `"NotFound"`, ...) and the human text in the
//! `grpc-status-details-bin` trailer; both end up in [`GcsError::Rpc`]'s message.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rayscale_core::expander::SeededRng;
use tonic::transport::{Channel, Endpoint};

use crate::GcsError;
use crate::proto::ray::rpc as kvpb;
use crate::proto::ray::rpc::autoscaler as pb;
use kvpb::internal_kv_gcs_service_client::InternalKvGcsServiceClient;
use kvpb::node_info_gcs_service_client::NodeInfoGcsServiceClient;
use pb::autoscaler_state_service_client::AutoscalerStateServiceClient;

/// The size of a Ray node id in bytes (`NodeID::Size()`).
pub const NODE_ID_LEN: usize = 28;

/// Ray's `StatusCode::NotFound`, which the KV `Get` embeds for a missing key.
pub const RAY_STATUS_NOT_FOUND: i32 = 17;

/// Tuning of a [`GcsClient`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Deadline of each attempt (connection included). Default 10 s.
    pub deadline: Duration,
    /// Backoff ceiling before the first retry; doubles per retry. Default 100 ms.
    pub backoff_base: Duration,
    /// Largest backoff ceiling. Default 5 s.
    pub backoff_cap: Duration,
    /// Attempts per call in all, the first included (at least 1 is made). Default 5.
    pub max_attempts: u32,
    /// Seed of the jitter generator (same seed, same sleeps). Default 0.
    pub seed: u64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            deadline: Duration::from_secs(10),
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(5),
            max_attempts: 5,
            seed: 0,
        }
    }
}

/// The upper bound of the sleep before retry number `retry` (0 for the first retry):
/// `min(backoff_cap, backoff_base * 2^retry)`.
pub fn backoff_ceiling(options: &ClientOptions, retry: u32) -> Duration {
    let factor = 2u32.saturating_pow(retry);
    options
        .backoff_base
        .checked_mul(factor)
        .unwrap_or(options.backoff_cap)
        .min(options.backoff_cap)
}

/// The sleep before retry number `retry`, drawn with full jitter: uniform in
/// `[0, backoff_ceiling(options, retry))`, from the deterministic `rng`.
pub fn backoff_delay(options: &ClientOptions, retry: u32, rng: &mut SeededRng) -> Duration {
    backoff_ceiling(options, retry).mul_f64(rng.next_f64())
}

/// Ray status names (the message of an `ABORTED` reply) that no retry will change.
const PERMANENT_RAY_STATUSES: [&str; 11] = [
    "Invalid",
    "InvalidArgument",
    "NotFound",
    "KeyError",
    "TypeError",
    "NotImplemented",
    "AlreadyExists",
    "ObjectExists",
    "PermissionDenied",
    "AuthError",
    "IntentionalSystemExit",
];

/// Fragments of the messages tonic and hyper give to connection-level failures.
const TRANSPORT_HINTS: [&str; 9] = [
    "transport error",
    "service was not ready",
    "connection",
    "connect error",
    "error trying to connect",
    "broken pipe",
    "reset",
    "closed",
    "timeout expired",
];

/// Whether a gRPC failure with `code` and `message` is transient.
///
/// Retryable: `Unavailable`, `DeadlineExceeded`, `ResourceExhausted`; `Aborted` unless
/// its message names a permanent Ray status (Ray 2.60 answers every non-OK Ray status as
/// `ABORTED` with the status name as message, e.g. `"Invalid"` or `"NotFound"`);
/// `Unknown` and `Cancelled` only when the message says the connection failed or the
/// local deadline fired. Everything else (`InvalidArgument`, `NotFound`, `Unimplemented`,
/// `Internal`, ...) is not.
pub fn is_retryable(code: tonic::Code, message: &str) -> bool {
    use tonic::Code;
    match code {
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted => true,
        Code::Aborted => !PERMANENT_RAY_STATUSES.contains(&message.trim()),
        Code::Unknown | Code::Cancelled => {
            let m = message.to_ascii_lowercase();
            TRANSPORT_HINTS.iter().any(|h| m.contains(h))
        }
        _ => false,
    }
}

/// Whether `status` is transient: [`is_retryable`] on its code and message, or an
/// `Unknown`/`Cancelled` status caused by a transport or I/O error.
fn status_is_retryable(status: &tonic::Status) -> bool {
    if is_retryable(status.code(), status.message()) {
        return true;
    }
    if matches!(status.code(), tonic::Code::Unknown | tonic::Code::Cancelled) {
        let mut source = std::error::Error::source(status);
        while let Some(e) = source {
            if e.is::<tonic::transport::Error>() || e.is::<std::io::Error>() {
                return true;
            }
            source = e.source();
        }
    }
    false
}

/// One line: newlines and runs of whitespace become single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The message of a failed call: the gRPC message plus Ray's detail text (sent in
/// `grpc-status-details-bin`) when there is one.
fn status_message(status: &tonic::Status) -> String {
    let mut m = one_line(status.message());
    let details = status.details();
    if !details.is_empty()
        && let Ok(text) = std::str::from_utf8(details)
    {
        let text = one_line(text);
        if !text.is_empty() {
            if m.is_empty() {
                m = text;
            } else {
                m = format!("{m}: {text}");
            }
        }
    }
    if m.is_empty() {
        m = "(no message)".to_string();
    }
    m
}

/// The name of a Ray `StatusCode` (as embedded in `GcsStatus.code`).
pub fn ray_status_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "OutOfMemory",
        2 => "KeyError",
        3 => "TypeError",
        4 => "Invalid",
        5 => "IOError",
        9 => "UnknownError",
        10 => "NotImplemented",
        11 => "RedisError",
        12 => "TimedOut",
        13 => "Interrupted",
        14 => "IntentionalSystemExit",
        15 => "UnexpectedSystemExit",
        16 => "CreationTaskError",
        17 => "NotFound",
        18 => "Disconnected",
        19 => "SchedulingCancelled",
        20 => "AlreadyExists",
        _ => "?",
    }
}

/// Whether a non-OK embedded Ray status is transient (I/O, time-out, disconnect,
/// interruption, Redis or unknown error).
fn ray_status_is_retryable(code: i32) -> bool {
    matches!(code, 5 | 9 | 11 | 12 | 13 | 18)
}

/// Replies that may embed a `GcsStatus`.
trait EmbeddedStatus {
    fn gcs_status(&self) -> Option<&kvpb::GcsStatus> {
        None
    }
}

macro_rules! embedded_status {
    ($($t:ty),* $(,)?) => {
        $(impl EmbeddedStatus for $t {
            fn gcs_status(&self) -> Option<&kvpb::GcsStatus> {
                self.status.as_ref()
            }
        })*
    };
}
embedded_status!(
    kvpb::InternalKvGetReply,
    kvpb::InternalKvPutReply,
    kvpb::InternalKvDelReply,
    kvpb::InternalKvKeysReply,
    kvpb::InternalKvMultiGetReply,
    kvpb::DrainNodeReply,
);
impl EmbeddedStatus for pb::GetClusterResourceStateReply {}
impl EmbeddedStatus for pb::ReportAutoscalingStateReply {}
impl EmbeddedStatus for pb::ReportClusterConfigReply {}
impl EmbeddedStatus for pb::RequestClusterResourceConstraintReply {}
impl EmbeddedStatus for pb::GetClusterStatusReply {}
impl EmbeddedStatus for pb::DrainNodeReply {}
impl EmbeddedStatus for pb::ResizeRayletResourceInstancesReply {}
// A reply read off its frame (`GetClusterResourceStateReply` has no status).
impl EmbeddedStatus for prost::bytes::Bytes {}

#[derive(Clone)]
struct Stubs {
    autoscaler: AutoscalerStateServiceClient<Channel>,
    kv: InternalKvGcsServiceClient<Channel>,
    node: NodeInfoGcsServiceClient<Channel>,
    /// Calls whose reply is read off its frame (`crate::wire`).
    frames: tonic::client::Grpc<Channel>,
}

/// The largest gRPC message sent or accepted: Ray's own `max_grpc_message_size` (500 MiB
/// in Ray 2.60), so that the state of a cluster of any size Ray handles gets through
/// (tonic's default, 4 MiB, is passed by a 30,000-node state).
pub const MAX_MESSAGE_BYTES: usize = 500 * 1024 * 1024;

/// A client of one Ray GCS. Cheap to clone; clones share the channel.
#[derive(Clone)]
pub struct GcsClient {
    addr: String,
    options: ClientOptions,
    stubs: Stubs,
    rng: Arc<Mutex<SeededRng>>,
}

impl std::fmt::Debug for GcsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsClient")
            .field("addr", &self.addr)
            .field("options", &self.options)
            .finish()
    }
}

/// Splits `addr` (`host:port`, optionally `http://host:port`) into the normalized
/// `host:port`, or says what is wrong.
fn parse_addr(addr: &str) -> Result<String, String> {
    let a = addr.trim();
    let rest = match a.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err("the GCS speaks plain-text gRPC; https:// is not supported".into());
        }
        Some((scheme, _)) => return Err(format!("unsupported scheme {scheme:?}")),
        None => a,
    };
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        return Err("expected host:port, not a URL with a path".into());
    }
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err("expected host:port (the port is missing)".into());
    };
    if host.is_empty() || host == "[]" {
        return Err("expected host:port (the host is missing)".into());
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err("an IPv6 host must be in brackets, e.g. [::1]:6379".into());
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("invalid port {port:?} (expected 1-65535)")),
        Ok(p) => Ok(format!("{host}:{p}")),
    }
}

impl GcsClient {
    /// A client of the GCS at `addr` (`host:port`, e.g. `127.0.0.1:6379`; an `http://`
    /// prefix is accepted). Nothing is connected yet: the first call connects, and every
    /// call after a failure reconnects. Must be called inside a tokio runtime.
    ///
    /// Fails with [`GcsError::Connect`] for a malformed address, `https://`, or no
    /// runtime.
    pub fn new(addr: &str, options: ClientOptions) -> Result<Self, GcsError> {
        let bad = |message: String| GcsError::Connect {
            addr: addr.to_string(),
            message,
        };
        let normalized = parse_addr(addr).map_err(bad)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(bad(
                "a GcsClient must be created inside a tokio runtime".into()
            ));
        }
        let endpoint = Endpoint::from_shared(format!("http://{normalized}"))
            .map_err(|e| bad(format!("invalid address ({})", one_line(&e.to_string()))))?
            .connect_timeout(options.deadline);
        let channel = endpoint.connect_lazy();
        Ok(GcsClient {
            addr: normalized,
            rng: Arc::new(Mutex::new(SeededRng::new(options.seed))),
            options,
            stubs: Stubs {
                autoscaler: AutoscalerStateServiceClient::new(channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
                kv: InternalKvGcsServiceClient::new(channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
                node: NodeInfoGcsServiceClient::new(channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
                frames: tonic::client::Grpc::new(channel)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            },
        })
    }

    /// The GCS address, normalized to `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The options the client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    fn next_delay(&self, retry: u32) -> Duration {
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        backoff_delay(&self.options, retry, &mut rng)
    }

    fn rpc_error(
        &self,
        method: &'static str,
        code: String,
        message: String,
        retryable: bool,
        attempts: u32,
    ) -> GcsError {
        GcsError::Rpc {
            method,
            addr: self.addr.clone(),
            code,
            message,
            retryable,
            attempts,
        }
    }

    /// Runs `rpc` with the deadline and retry policy. An embedded status whose code is in
    /// `ok_codes` (besides 0) counts as success; the caller inspects it.
    async fn call<Req, Rep, F, Fut>(
        &self,
        method: &'static str,
        req: Req,
        ok_codes: &[i32],
        rpc: F,
    ) -> Result<Rep, GcsError>
    where
        Req: Clone,
        Rep: EmbeddedStatus,
        F: Fn(Stubs, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Rep>, tonic::Status>>,
    {
        let deadline = self.options.deadline;
        let max_attempts = self.options.max_attempts.max(1);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(deadline);
            let outcome = tokio::time::timeout(deadline, rpc(self.stubs.clone(), request)).await;
            let (code, message, retryable) = match outcome {
                Ok(Ok(reply)) => {
                    let reply = reply.into_inner();
                    match reply.gcs_status() {
                        Some(s) if s.code != 0 && !ok_codes.contains(&s.code) => (
                            format!("GcsStatus {} ({})", s.code, ray_status_name(s.code)),
                            if s.message.trim().is_empty() {
                                "(no message)".to_string()
                            } else {
                                one_line(&s.message)
                            },
                            ray_status_is_retryable(s.code),
                        ),
                        _ => return Ok(reply),
                    }
                }
                Ok(Err(status)) => {
                    let timed_out = status.code() == tonic::Code::Cancelled
                        && status
                            .message()
                            .to_ascii_lowercase()
                            .contains("timeout expired");
                    if timed_out {
                        (
                            format!("{:?}", tonic::Code::DeadlineExceeded),
                            format!("no reply within {deadline:?}"),
                            true,
                        )
                    } else {
                        (
                            format!("{:?}", status.code()),
                            status_message(&status),
                            status_is_retryable(&status),
                        )
                    }
                }
                Err(_elapsed) => (
                    format!("{:?}", tonic::Code::DeadlineExceeded),
                    format!("no reply within {deadline:?}"),
                    true,
                ),
            };
            if !retryable || attempt >= max_attempts {
                return Err(self.rpc_error(method, code, message, retryable, attempt));
            }
            tokio::time::sleep(self.next_delay(attempt - 1)).await;
        }
    }

    fn check_node_id(method: &str, node_id: &[u8]) -> Result<(), GcsError> {
        if node_id.len() == NODE_ID_LEN {
            Ok(())
        } else {
            Err(GcsError::Invalid {
                path: format!("{method}.node_id"),
                message: format!(
                    "a Ray node id has {NODE_ID_LEN} bytes, got {} (not sent: the GCS \
                     does not validate it)",
                    node_id.len()
                ),
            })
        }
    }

    // --- AutoscalerStateService -------------------------------------------------------

    /// `GetClusterResourceState`: nodes, pending demand, gangs and constraints.
    /// `last_seen_version` is the `cluster_resource_state_version` last seen (0 at first).
    pub async fn get_cluster_resource_state(
        &self,
        last_seen_version: i64,
    ) -> Result<pb::ClusterResourceState, GcsError> {
        let req = pb::GetClusterResourceStateRequest {
            last_seen_cluster_resource_state_version: last_seen_version,
        };
        let reply = self
            .call("GetClusterResourceState", req, &[], |mut s, r| async move {
                s.autoscaler.get_cluster_resource_state(r).await
            })
            .await?;
        reply
            .cluster_resource_state
            .ok_or_else(|| GcsError::Invalid {
                path: "GetClusterResourceStateReply.cluster_resource_state".into(),
                message: format!("missing in the reply of the GCS at {}", self.addr),
            })
    }

    /// `GetClusterResourceState`'s reply as its frame's bytes, for
    /// [`convert::cluster_resource_state_frame`](crate::convert::cluster_resource_state_frame)
    /// to read without building prost's message first (the driver's path: a 10,000-node
    /// state is read several times faster). Deadlines and retries as for every call.
    pub async fn get_cluster_resource_state_frame(
        &self,
        last_seen_version: i64,
    ) -> Result<prost::bytes::Bytes, GcsError> {
        const PATH: &str = "/ray.rpc.autoscaler.AutoscalerStateService/GetClusterResourceState";
        let req = pb::GetClusterResourceStateRequest {
            last_seen_cluster_resource_state_version: last_seen_version,
        };
        self.call("GetClusterResourceState", req, &[], |s, r| async move {
            let mut grpc = s.frames;
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(PATH);
            grpc.unary(r, path, crate::codec::FrameCodec::default())
                .await
        })
        .await
    }

    /// [`get_cluster_resource_state`](Self::get_cluster_resource_state) converted to
    /// `rayscale-core`'s model (conversion errors name the offending field). The state's
    /// version is only in the raw form.
    pub async fn get_cluster_resource_state_core(
        &self,
    ) -> Result<rayscale_core::model::ClusterResourceState, GcsError> {
        let state = self.get_cluster_resource_state(0).await?;
        crate::convert::cluster_resource_state(state, "cluster_resource_state")
    }

    /// `ReportAutoscalingState`: what the autoscaler is doing (pending and failed
    /// launches, infeasible demand), shown by `ray status` and `GetClusterStatus`.
    pub async fn report_autoscaling_state(
        &self,
        state: pb::AutoscalingState,
    ) -> Result<(), GcsError> {
        let req = pb::ReportAutoscalingStateRequest {
            autoscaling_state: Some(state),
        };
        self.call("ReportAutoscalingState", req, &[], |mut s, r| async move {
            s.autoscaler.report_autoscaling_state(r).await
        })
        .await
        .map(|_| ())
    }

    /// `ReportClusterConfig`: the node groups and resource bounds of the cluster.
    pub async fn report_cluster_config(&self, config: pb::ClusterConfig) -> Result<(), GcsError> {
        let req = pb::ReportClusterConfigRequest {
            cluster_config: Some(config),
        };
        self.call("ReportClusterConfig", req, &[], |mut s, r| async move {
            s.autoscaler.report_cluster_config(r).await
        })
        .await
        .map(|_| ())
    }

    /// `RequestClusterResourceConstraint` (what `ray.autoscaler.sdk.request_resources`
    /// sends): replaces the cluster's resource floor.
    pub async fn request_cluster_resource_constraint(
        &self,
        constraint: pb::ClusterResourceConstraint,
    ) -> Result<(), GcsError> {
        let req = pb::RequestClusterResourceConstraintRequest {
            cluster_resource_constraint: Some(constraint),
        };
        self.call(
            "RequestClusterResourceConstraint",
            req,
            &[],
            |mut s, r| async move { s.autoscaler.request_cluster_resource_constraint(r).await },
        )
        .await
        .map(|_| ())
    }

    /// `GetClusterStatus`: the last reported autoscaling state plus the current cluster
    /// resource state.
    pub async fn get_cluster_status(&self) -> Result<pb::GetClusterStatusReply, GcsError> {
        self.call(
            "GetClusterStatus",
            pb::GetClusterStatusRequest {},
            &[],
            |mut s, r| async move { s.autoscaler.get_cluster_status(r).await },
        )
        .await
    }

    /// `DrainNode`: asks the GCS to drain `node_id` (28 bytes, checked before sending).
    /// `deadline_timestamp_ms` is the wall-clock time after which the node may be killed
    /// (0: none; negative is refused by Ray as `Invalid`). Ray 2.60 accepts a drain of a
    /// node it does not know (the node is treated as already gone).
    pub async fn drain_node(
        &self,
        node_id: &[u8],
        reason: pb::DrainNodeReason,
        reason_message: &str,
        deadline_timestamp_ms: i64,
    ) -> Result<pb::DrainNodeReply, GcsError> {
        Self::check_node_id("DrainNode", node_id)?;
        let req = pb::DrainNodeRequest {
            node_id: node_id.to_vec(),
            reason: reason as i32,
            reason_message: reason_message.to_string(),
            deadline_timestamp_ms,
        };
        self.call("DrainNode", req, &[], |mut s, r| async move {
            s.autoscaler.drain_node(r).await
        })
        .await
    }

    /// `ResizeRayletResourceInstances`: sets the total of `resources` on the raylet of
    /// `node_id` (28 bytes) and returns the node's new total resources. An unknown node is
    /// an `Aborted`/`NotFound` error.
    pub async fn resize_raylet_resource_instances(
        &self,
        node_id: &[u8],
        resources: BTreeMap<String, f64>,
    ) -> Result<BTreeMap<String, f64>, GcsError> {
        Self::check_node_id("ResizeRayletResourceInstances", node_id)?;
        let req = pb::ResizeRayletResourceInstancesRequest {
            node_id: node_id.to_vec(),
            resources,
        };
        self.call(
            "ResizeRayletResourceInstances",
            req,
            &[],
            |mut s, r| async move { s.autoscaler.resize_raylet_resource_instances(r).await },
        )
        .await
        .map(|reply| reply.total_resources)
    }

    // --- InternalKVGcsService -----------------------------------------------------------

    /// The value under `key` in `namespace`, `None` if there is none.
    pub async fn kv_get(&self, namespace: &str, key: &[u8]) -> Result<Option<Vec<u8>>, GcsError> {
        let req = kvpb::InternalKvGetRequest {
            key: key.to_vec(),
            namespace: namespace.as_bytes().to_vec(),
        };
        let reply = self
            .call(
                "InternalKVGet",
                req,
                &[RAY_STATUS_NOT_FOUND],
                |mut s, r| async move { s.kv.internal_kv_get(r).await },
            )
            .await?;
        let found = reply
            .status
            .as_ref()
            .is_none_or(|s| s.code != RAY_STATUS_NOT_FOUND);
        Ok(found.then_some(reply.value))
    }

    /// Stores `value` under `key` in `namespace`. With `overwrite` false an existing value
    /// is kept. Returns whether a new key was created (false when the key existed, whether
    /// or not it was overwritten).
    pub async fn kv_put(
        &self,
        namespace: &str,
        key: &[u8],
        value: &[u8],
        overwrite: bool,
    ) -> Result<bool, GcsError> {
        let req = kvpb::InternalKvPutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            overwrite,
            namespace: namespace.as_bytes().to_vec(),
        };
        self.call("InternalKVPut", req, &[], |mut s, r| async move {
            s.kv.internal_kv_put(r).await
        })
        .await
        .map(|reply| reply.added)
    }

    /// Deletes `key` (or, with `by_prefix`, every key starting with `key`) in
    /// `namespace`. Returns how many keys were deleted (0 if none matched).
    pub async fn kv_del(
        &self,
        namespace: &str,
        key: &[u8],
        by_prefix: bool,
    ) -> Result<u64, GcsError> {
        let req = kvpb::InternalKvDelRequest {
            key: key.to_vec(),
            namespace: namespace.as_bytes().to_vec(),
            del_by_prefix: by_prefix,
        };
        self.call("InternalKVDel", req, &[], |mut s, r| async move {
            s.kv.internal_kv_del(r).await
        })
        .await
        .map(|reply| u64::try_from(reply.deleted_num).unwrap_or(0))
    }

    /// The values of `keys` in `namespace` that exist, with their keys.
    pub async fn kv_multi_get(
        &self,
        namespace: &str,
        keys: &[Vec<u8>],
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, GcsError> {
        let req = kvpb::InternalKvMultiGetRequest {
            keys: keys.to_vec(),
            namespace: namespace.as_bytes().to_vec(),
        };
        self.call("InternalKVMultiGet", req, &[], |mut s, r| async move {
            s.kv.internal_kv_multi_get(r).await
        })
        .await
        .map(|reply| {
            reply
                .results
                .into_iter()
                .map(|e| (e.key, e.value))
                .collect()
        })
    }

    // --- NodeInfoGcsService -------------------------------------------------------------

    /// `NodeInfoGcsService.DrainNode`: the GCS stops the nodes now (how Ray's autoscaler
    /// stops a node for any cause but idleness). Returns the ids of the nodes it drained.
    pub async fn stop_nodes(&self, node_ids: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, GcsError> {
        for id in node_ids {
            Self::check_node_id("NodeInfoGcsService.DrainNode", id)?;
        }
        let req = kvpb::DrainNodeRequest {
            drain_node_data: node_ids
                .iter()
                .map(|id| kvpb::DrainNodeData {
                    node_id: id.clone(),
                })
                .collect(),
        };
        self.call(
            "NodeInfoGcsService.DrainNode",
            req,
            &[],
            |mut s, r| async move { s.node.drain_node(r).await },
        )
        .await
        .map(|reply| {
            reply
                .drain_node_status
                .into_iter()
                .map(|s| s.node_id)
                .collect()
        })
    }

    /// The keys starting with `prefix` in `namespace` (in the GCS's order).
    pub async fn kv_keys(&self, namespace: &str, prefix: &[u8]) -> Result<Vec<Vec<u8>>, GcsError> {
        let req = kvpb::InternalKvKeysRequest {
            prefix: prefix.to_vec(),
            namespace: namespace.as_bytes().to_vec(),
        };
        self.call("InternalKVKeys", req, &[], |mut s, r| async move {
            s.kv.internal_kv_keys(r).await
        })
        .await
        .map(|reply| reply.results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn opts() -> ClientOptions {
        ClientOptions::default()
    }

    #[test]
    fn ceiling_doubles_from_base_and_is_capped() {
        let o = opts();
        let ms: Vec<u128> = (0..10)
            .map(|r| backoff_ceiling(&o, r).as_millis())
            .collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]);
        // Huge retry numbers neither overflow nor exceed the cap.
        assert_eq!(backoff_ceiling(&o, 64), Duration::from_secs(5));
        assert_eq!(backoff_ceiling(&o, u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn delays_are_deterministic_per_seed() {
        let o = opts();
        let schedule = |seed| {
            let mut rng = SeededRng::new(seed);
            (0..8)
                .map(|r| backoff_delay(&o, r, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(schedule(7), schedule(7));
        assert_ne!(schedule(7), schedule(8));
    }

    #[test]
    fn delays_have_full_jitter_within_the_ceiling() {
        let o = opts();
        let mut rng = SeededRng::new(42);
        for retry in 0..10 {
            let ceiling = backoff_ceiling(&o, retry);
            let samples: Vec<Duration> = (0..2000)
                .map(|_| backoff_delay(&o, retry, &mut rng))
                .collect();
            assert!(samples.iter().all(|d| *d < ceiling), "retry {retry}");
            // Full jitter: the whole [0, ceiling) range is used, low values included
            // (equal jitter would never go below ceiling / 2).
            let low = samples.iter().filter(|d| **d < ceiling / 10).count();
            let high = samples.iter().filter(|d| **d > ceiling * 9 / 10).count();
            assert!(
                low > 100 && high > 100,
                "retry {retry}: low {low} high {high}"
            );
            let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / 2000.0;
            let half = ceiling.as_secs_f64() / 2.0;
            assert!(
                (mean - half).abs() < half * 0.1,
                "retry {retry}: mean {mean}"
            );
        }
    }

    #[test]
    fn zero_base_means_no_sleep() {
        let o = ClientOptions {
            backoff_base: Duration::ZERO,
            ..opts()
        };
        let mut rng = SeededRng::new(1);
        assert!((0..5).all(|r| backoff_delay(&o, r, &mut rng).is_zero()));
    }

    #[test]
    fn retryable_codes() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
        ] {
            assert!(is_retryable(code, "anything"), "{code:?}");
        }
        for code in [
            Code::Ok,
            Code::InvalidArgument,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::FailedPrecondition,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::DataLoss,
            Code::Unauthenticated,
        ] {
            assert!(!is_retryable(code, "transport error"), "{code:?}");
        }
    }

    #[test]
    fn aborted_is_retryable_unless_ray_says_it_is_permanent() {
        // Ray 2.60 sends ABORTED with the Ray status name as message.
        assert!(!is_retryable(Code::Aborted, "Invalid"));
        assert!(!is_retryable(Code::Aborted, "NotFound"));
        assert!(!is_retryable(Code::Aborted, "InvalidArgument"));
        assert!(is_retryable(Code::Aborted, "TimedOut"));
        assert!(is_retryable(Code::Aborted, "Disconnected"));
        assert!(is_retryable(Code::Aborted, "aborted by a concurrent write"));
    }

    #[test]
    fn unknown_is_retryable_only_for_connection_failures() {
        assert!(is_retryable(
            Code::Unknown,
            "Service was not ready: transport error"
        ));
        assert!(is_retryable(Code::Unknown, "connection reset by peer"));
        assert!(is_retryable(
            Code::Unknown,
            "h2 protocol error: broken pipe"
        ));
        assert!(!is_retryable(
            Code::Unknown,
            "unexpected exception in handler"
        ));
        assert!(is_retryable(Code::Cancelled, "Timeout expired"));
        assert!(!is_retryable(Code::Cancelled, "cancelled by the caller"));
        // The source chain counts too.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let mut status = tonic::Status::unknown("boom");
        status.set_source(Arc::new(io));
        assert!(status_is_retryable(&status));
        assert!(!status_is_retryable(&tonic::Status::unknown("boom")));
    }

    #[test]
    fn embedded_status_classification() {
        assert!(ray_status_is_retryable(12)); // TimedOut
        assert!(ray_status_is_retryable(18)); // Disconnected
        assert!(!ray_status_is_retryable(4)); // Invalid
        assert!(!ray_status_is_retryable(RAY_STATUS_NOT_FOUND));
        assert_eq!(ray_status_name(RAY_STATUS_NOT_FOUND), "NotFound");
    }

    #[test]
    fn messages_are_one_line_and_include_ray_details() {
        let s = tonic::Status::with_details(
            Code::Aborted,
            "Invalid",
            "Draining deadline must be\nnon-negative, received -1"
                .as_bytes()
                .to_vec()
                .into(),
        );
        assert_eq!(
            status_message(&s),
            "Invalid: Draining deadline must be non-negative, received -1"
        );
        assert_eq!(
            status_message(&tonic::Status::unavailable("")),
            "(no message)"
        );
    }

    #[test]
    fn addresses() {
        assert_eq!(
            parse_addr("127.0.0.1:6379").as_deref(),
            Ok("127.0.0.1:6379")
        );
        assert_eq!(parse_addr(" http://h:1/ ").as_deref(), Ok("h:1"));
        assert_eq!(parse_addr("[::1]:80").as_deref(), Ok("[::1]:80"));
        for bad in [
            "",
            "127.0.0.1",
            ":6379",
            "h:0",
            "h:65536",
            "h:port",
            "https://h:1",
            "unix://x:1",
            "::1:80",
            "h:1/path",
        ] {
            assert!(parse_addr(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn new_outside_a_runtime_is_a_connect_error() {
        let e = GcsClient::new("127.0.0.1:1", opts()).expect_err("no runtime");
        assert!(matches!(e, GcsError::Connect { .. }), "{e}");
        assert!(e.to_string().contains("tokio runtime"), "{e}");
    }

    #[tokio::test]
    async fn bad_addresses_are_one_line_connect_errors() {
        for bad in ["nonsense", "https://127.0.0.1:1", "127.0.0.1:99999"] {
            let e = GcsClient::new(bad, opts()).expect_err(bad);
            assert!(matches!(e, GcsError::Connect { .. }), "{e}");
            let text = e.to_string();
            assert!(!text.contains('\n') && text.contains(bad), "{text}");
        }
    }

    #[tokio::test]
    async fn short_node_ids_are_refused_before_sending() {
        let c = GcsClient::new("127.0.0.1:1", opts()).expect("client");
        let e = c
            .drain_node(b"short", pb::DrainNodeReason::IdleTermination, "", 0)
            .await
            .expect_err("short id");
        assert!(e.to_string().contains("28 bytes"), "{e}");
    }
}
