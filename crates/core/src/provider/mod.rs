//! The cloud side: [`CloudInstanceProvider`], the small trait every cloud (and the local
//! process provider, and the v1 node-provider adapter) implements, modelled on Ray 2.60's
//! `ICloudInstanceProvider`. The trait is object safe: the binary holds one
//! `Arc<dyn CloudInstanceProvider>` chosen at run time from `provider.type`.
//!
//! # Contract
//! Every implementation keeps these rules; the conformance suite (`tests/conformance`)
//! checks them on each provider's fake or emulator.
//! - **Observe, do not guess.** Calls are requests; their results are observed by a later
//!   [`list`](CloudInstanceProvider::list) (or [`poll_errors`](CloudInstanceProvider::poll_errors)).
//!   What a provider cannot know (whether Ray runs on an instance) it does not report.
//! - **`list` is complete or an error.** Every non-terminated instance of the cluster, the
//!   head included (as [`NodeKind::Head`]), across every page; never a part.
//! - **`launch` is idempotent by `request_id`.** However often a request is sent (a retry,
//!   a requeue, a replay after a crash), at most `count` instances exist for that request
//!   id. Sending a request again never makes a second set. Every instance made carries the
//!   request id where the cloud can hold it (tags, labels, environment); it may not
//!   (KubeRay pods), and the reconciler then joins by node type, as Ray does.
//! - **`launch` reports what it made.** [`LaunchOutcome::instances`] lists the instances
//!   whose ids the cloud returned at once (may be empty when it returns none);
//!   [`LaunchOutcome::shortfall`] says how many were not made and why (EC2 MinCount <
//!   MaxCount). An `Err` means nothing was made by this call.
//! - **`terminate` of an instance that is already gone succeeds.** A head is never
//!   terminated: asking is an [`ProviderErrorKind::InvalidConfig`] error and touches nothing.
//! - **Errors carry a kind** ([`ProviderErrorKind`]): capacity (with node type and, where
//!   known, zone), quota, throttled, invalid config, auth, not found, transient; and keep
//!   their source. Errors of calls that were accepted and failed later come back from
//!   `poll_errors`, once each.
//! - **Heads only through the launcher's calls.** [`launch_head`](CloudInstanceProvider::launch_head) and
//!   [`terminate_head`](CloudInstanceProvider::terminate_head)
//!   (used by `rayscale up`/`down`, never by the reconciler) make and remove the head: an
//!   instance of kind [`NodeKind::Head`] that boots Ray's head and `rayscale run`
//!   ([`boot::render_head`]). A provider that cannot (the local processes, KubeRay, whose
//!   head is the operator's) keeps the defaults, which refuse.
//! - **No global state, no runtime of its own.** A provider holds its client and config.

pub mod boot;
pub mod cloud;
mod error;
pub mod tags;

use crate::config::ClusterConfig;
use std::collections::BTreeMap;

pub use error::{ErrorSource, ProviderError, ProviderErrorDetail, ProviderErrorKind, ProviderOp};

/// Whether an instance runs Ray's head or a worker (Ray's `NodeKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    /// The head node: never adopted as a worker, never terminated by the autoscaler.
    Head,
    /// A worker node.
    Worker,
}

impl NodeKind {
    /// Ray's tag value (`ray-node-type` tag): `head` or `worker`.
    pub fn tag_value(self) -> &'static str {
        match self {
            NodeKind::Head => tags::NODE_KIND_HEAD,
            NodeKind::Worker => tags::NODE_KIND_WORKER,
        }
    }
}

/// The `ray-launch-config` tag a provider gives what it launches: each node type's
/// ([`crate::config::NodeTypeConfig::launch_config_hash`]), and the head's, which also
/// hashes what the head's launch alone takes ([`ClusterConfig::head_launch_hash`]); and
/// the head's [`tags::RAYSCALE_CONFIG`] (the digest of the config its boot writes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchHashes {
    by_type: BTreeMap<String, String>,
    head: Option<String>,
    head_config: Option<String>,
}

impl LaunchHashes {
    /// The tags of `config`'s node types and head.
    pub fn of(config: &ClusterConfig) -> Self {
        LaunchHashes {
            by_type: config
                .node_types
                .iter()
                .map(|t| (t.name.clone(), t.launch_config_hash.clone()))
                .collect(),
            head: config.head_launch_hash(),
            // A config whose head boot cannot be written launches no head (its launch
            // fails rendering the boot script, saying why).
            head_config: boot::head_config_text(config)
                .ok()
                .map(|t| boot::head_config_digest(&t)),
        }
    }

    /// The tags a node of `kind` gets besides Ray's: a head its
    /// [`tags::RAYSCALE_CONFIG`].
    pub fn extra_tags(&self, kind: NodeKind) -> Vec<(&'static str, String)> {
        match (kind, &self.head_config) {
            (NodeKind::Head, Some(d)) => vec![(tags::RAYSCALE_CONFIG, d.clone())],
            _ => Vec::new(),
        }
    }

    /// The tag of a node of `node_type` and `kind` (empty for a type the config lacks).
    pub fn get(&self, node_type: &str, kind: NodeKind) -> &str {
        match (kind, &self.head) {
            (NodeKind::Head, Some(h)) => h,
            _ => self
                .by_type
                .get(node_type)
                .map(String::as_str)
                .unwrap_or(""),
        }
    }
}

/// The cloud's state of an instance, reduced to what the reconciler needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CloudInstanceState {
    /// Being allocated or booting (EC2 `pending`, GCE `PROVISIONING`/`STAGING`, a pod
    /// not yet running).
    Pending,
    /// Running (Ray's `is_running`).
    Running,
    /// Being stopped or terminated.
    Stopping,
}

/// A cloud instance as the provider lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudInstance {
    /// The provider's id of the instance (what Ray's raylet reports as its cloud instance
    /// id).
    pub cloud_instance_id: String,
    /// Node type it was launched as (`ray-user-node-type`).
    pub node_type: String,
    /// Head or worker (`ray-node-type`).
    pub kind: NodeKind,
    /// The launch request that made it, when the cloud carries one.
    pub request_id: Option<String>,
    /// The cloud's state.
    pub state: CloudInstanceState,
    /// Private IP address, once known.
    pub private_ip: Option<String>,
    /// Public IP address, when the instance has one and the cloud's listing gives it
    /// (Ray's `external_ip`: what `get-head-ip` prints without `use_internal_ips`).
    pub public_ip: Option<String>,
    /// The launch config hash it was launched with (`ray-launch-config`), when carried.
    pub launch_config_hash: Option<String>,
    /// The cloud's labels or tags on the instance.
    pub labels: BTreeMap<String, String>,
    /// Where the instance runs, as the provider names zones in [`LaunchRequest::avoid_zones`]
    /// (AWS: the subnet id when the type launches into subnets, else the availability
    /// zone; GCE and Azure: the zone), when known.
    pub zone: Option<String>,
}

impl CloudInstance {
    /// A running worker of `node_type` made by `request_id`, nothing else known.
    pub fn worker(
        cloud_instance_id: impl Into<String>,
        node_type: impl Into<String>,
        request_id: Option<&str>,
    ) -> Self {
        CloudInstance {
            cloud_instance_id: cloud_instance_id.into(),
            node_type: node_type.into(),
            kind: NodeKind::Worker,
            request_id: request_id.map(str::to_string),
            state: CloudInstanceState::Running,
            private_ip: None,
            public_ip: None,
            launch_config_hash: None,
            labels: BTreeMap::new(),
            zone: None,
        }
    }

    /// The same instance in `state`.
    pub fn in_state(mut self, state: CloudInstanceState) -> Self {
        self.state = state;
        self
    }

    /// The same instance as a head.
    pub fn as_head(mut self) -> Self {
        self.kind = NodeKind::Head;
        self
    }

    /// Ray's `is_running`: running, neither pending nor being stopped.
    pub fn is_running(&self) -> bool {
        self.state == CloudInstanceState::Running
    }

    /// Whether this is the head.
    pub fn is_head(&self) -> bool {
        self.kind == NodeKind::Head
    }
}

/// A request to launch `count` instances of `node_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRequest {
    /// Idempotency key of the request: at most `count` instances ever exist for it.
    pub request_id: String,
    /// Node type.
    pub node_type: String,
    /// Number of instances.
    pub count: u64,
    /// The node type's launch config hash, for the `ray-launch-config` tag.
    pub launch_config_hash: String,
    /// Zones (AWS: availability zones or subnet ids, as the provider names them in its
    /// capacity errors and [`CloudInstance::zone`]) this launch must not use: they ran
    /// out of capacity or took an instance back a short while ago. A provider that has
    /// no other zone left fails the launch with a capacity error without a zone (the
    /// type is out), without calling the cloud.
    pub avoid_zones: Vec<String>,
    /// All or nothing (an atomic gang, `rayscale.gangs: atomic`): a provider whose cloud
    /// has a call that makes all `count` instances or none uses it (EC2 `RunInstances`
    /// with `MinCount = MaxCount`, GCE `instances.bulkInsert` with `minCount`) and
    /// fails the launch whole when it cannot; the others launch as usual, and the reconciler
    /// releases a gang that does not come up whole.
    pub all_or_nothing: bool,
}

/// What a launch call made.
#[derive(Debug, Clone, Default)]
pub struct LaunchOutcome {
    /// Instances the cloud returned at once (possibly none; the next `list` shows them).
    pub instances: Vec<CloudInstance>,
    /// How many of the request were not made, and why: an error whose
    /// [`ProviderOp::Launch`] count is the shortfall. `None` when all were made (or are
    /// being made).
    pub shortfall: Option<ProviderError>,
}

impl LaunchOutcome {
    /// Everything asked for was accepted; the ids are not known yet.
    pub fn accepted() -> Self {
        LaunchOutcome::default()
    }
}

/// The cloud, as the reconciler sees it. Object safe: used as
/// `Arc<dyn CloudInstanceProvider>`. See the module docs for the contract.
#[async_trait::async_trait]
pub trait CloudInstanceProvider: Send + Sync {
    /// The `provider.type` this provider serves (for logs).
    fn provider_type(&self) -> &str;
    /// Every non-terminated instance of this cluster, the head included, or an error.
    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError>;
    /// Asks for new instances (idempotent by `request.request_id`).
    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError>;
    /// Asks for workers to be terminated (`request_id` keys the call). Instances already
    /// gone succeed; a head is refused.
    async fn terminate(
        &self,
        cloud_instance_ids: &[String],
        request_id: &str,
    ) -> Result<(), ProviderError>;
    /// Errors of accepted calls that failed since the last poll, each once.
    async fn poll_errors(&self) -> Vec<ProviderError>;
    /// Asks for the cluster's head: one instance of kind head of `request.node_type`,
    /// booting Ray's head and the autoscaler (the launcher's call; idempotent by
    /// `request_id` as [`launch`](Self::launch) is). By default: refused.
    async fn launch_head(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        Err(ProviderError::new(
            ProviderOp::Launch {
                request_id: request.request_id.clone(),
                node_type: request.node_type.clone(),
                count: request.count,
            },
            ProviderErrorKind::InvalidConfig,
            format!(
                "provider {} does not launch heads: start the head as it documents",
                self.provider_type()
            ),
        ))
    }
    /// Removes the cluster's head (the launcher's `down`, after the workers); gone is
    /// success. By default: refused.
    async fn terminate_head(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
        Err(ProviderError::new(
            ProviderOp::Terminate {
                cloud_instance_id: cloud_instance_id.to_string(),
            },
            ProviderErrorKind::InvalidConfig,
            format!("provider {} does not terminate heads", self.provider_type()),
        ))
    }
    /// Tags the cluster's head `ray-node-status: up-to-date`
    /// ([`tags::STATUS_UP_TO_DATE`]), as Ray's node updater does once the head's setup
    /// ran: Ray's CLI (`ray rsync-up`, `rsync-down`, `submit`) finds a cluster's head by
    /// it. The loop calls it for the one running head whose tag says otherwise, once its
    /// GCS answers (a head that booted itself, from `rayscale up`), when
    /// [`tags_heads`](Self::tags_heads). Other tags stay. Succeeds only once the cloud has
    /// the tag; an operation still running is an error (the loop tries again). By default
    /// [`tag_head`](Self::tag_head) with that tag.
    async fn mark_head_up_to_date(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
        self.tag_head(
            cloud_instance_id,
            &[(tags::NODE_STATUS, tags::STATUS_UP_TO_DATE.to_string())],
        )
        .await
    }
    /// Sets `tags` on the cluster's running head, other tags staying (`rayscale up`
    /// sets [`tags::RAYSCALE_CONFIG`] once it pushed a changed config to the head), with
    /// the checks and the wait of
    /// [`mark_head_up_to_date`](Self::mark_head_up_to_date), which is by default this
    /// call with Ray's status tag. By default refused.
    async fn tag_head(
        &self,
        cloud_instance_id: &str,
        tags: &[(&str, String)],
    ) -> Result<(), ProviderError> {
        let _ = tags;
        Err(ProviderError::call(
            ProviderErrorKind::InvalidConfig,
            format!(
                "provider {} does not tag {cloud_instance_id}: its heads are set up by Ray's \
                 updater or carry no Ray status",
                self.provider_type()
            ),
        ))
    }
    /// Whether [`mark_head_up_to_date`](Self::mark_head_up_to_date) is for this provider
    /// (its heads boot themselves from `rayscale up` and carry Ray's status tag): AWS,
    /// GCP, Azure. By default false.
    fn tags_heads(&self) -> bool {
        false
    }
    /// Whether Ray is installed on this provider's instances by the autoscaler (Ray's node
    /// updater over SSH: the v1 node-provider adapter without `disable_node_updaters`),
    /// rather than by the instance's own boot. When true, a running ALLOCATED worker goes
    /// to RAY_INSTALLING and [`install_ray`](Self::install_ray) is called for it.
    fn installs_ray(&self) -> bool {
        false
    }
    /// Starts installing Ray on a running worker and returns at once (idempotent per
    /// instance: a call for an install in progress does nothing). Success is observed when
    /// the node joins the GCS; a failure comes back from
    /// [`poll_errors`](Self::poll_errors) as a [`ProviderOp::InstallRay`] error, after
    /// the provider's retries. By default: refused.
    async fn install_ray(
        &self,
        cloud_instance_id: &str,
        node_type: &str,
    ) -> Result<(), ProviderError> {
        let _ = node_type;
        Err(ProviderError::new(
            ProviderOp::InstallRay {
                cloud_instance_id: cloud_instance_id.to_string(),
            },
            ProviderErrorKind::InvalidConfig,
            format!("provider {} does not install ray", self.provider_type()),
        ))
    }
    /// The cluster config changed (the loop re-reads it every iteration, as Ray does):
    /// launches from now on follow `config`. An error keeps the last config everywhere.
    /// Providers that read nothing of the config after construction keep the default.
    async fn reconfigure(&self, config: &ClusterConfig) -> Result<(), ProviderError> {
        let _ = config;
        Ok(())
    }
}

/// An idempotency token for `request_id` and `batch` (EC2 `ClientToken`, GCE `requestId`,
/// ...): a name-based UUID (version 5 layout over SHA-1), the same for the same inputs
/// in every process, 36 characters (under EC2's 64 and GCE's UUID rule).
pub fn idempotency_token(request_id: &str, batch: u64) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(b"rayscale-launch\0");
    h.update(request_id.as_bytes());
    h.update(b"\0");
    h.update(&batch.to_be_bytes());
    let d = h.digest().bytes();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether `url` is plain `http://` to a loopback address (`localhost`, 127.0.0.0/8,
/// `::1`): the only plain-http endpoint a provider accepts (a local emulator or fake),
/// and the only one it sends requests to without credentials.
pub fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split('/').next().unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stable_distinct_and_uuid_shaped() {
        let a = idempotency_token("lr-1", 0);
        assert_eq!(a, idempotency_token("lr-1", 0));
        assert_ne!(a, idempotency_token("lr-1", 1));
        assert_ne!(a, idempotency_token("lr-2", 0));
        assert_eq!(a.len(), 36);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('5'), "version 5: {a}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "variant: {a}"
        );
    }

    #[test]
    fn plain_http_only_to_loopback() {
        assert!(is_loopback_http("http://127.0.0.1:5000"));
        assert!(is_loopback_http("http://localhost:5000/"));
        assert!(is_loopback_http("http://[::1]:5000"));
        assert!(!is_loopback_http("http://10.0.0.1:5000"));
        assert!(!is_loopback_http("https://compute.googleapis.com"));
        assert!(!is_loopback_http("http://ec2.amazonaws.com"));
    }

    #[test]
    fn running_means_running() {
        let c = CloudInstance::worker("i-1", "cpu", None);
        assert!(c.is_running());
        assert!(!c.clone().in_state(CloudInstanceState::Pending).is_running());
        assert!(!c.in_state(CloudInstanceState::Stopping).is_running());
    }
}
