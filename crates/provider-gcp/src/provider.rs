//! `impl CloudInstanceProvider` for Compute Engine: list (the cluster's label filter,
//! every page, or an error), launch (idempotent by request id: instances labelled with
//! it are counted first, each new instance's name and `requestId` derive from the request
//! and its index, stopped workers are started before new ones are made; each insert's
//! zone operation is awaited up to a bound, errors checked, and the unfinished ones are
//! checked again by `poll_errors`; an all-or-nothing gang is one `bulkInsert` with
//! `minCount` = `count`), terminate (delete, or stop when workers are cached;
//! gone is success).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use google_cloud_compute_v1::client::Instances;
use google_cloud_compute_v1::model;
use google_cloud_gax::paginator::Paginator as _;
use google_cloud_lro::PollingResult;
use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::cloud::PendingCheckError;
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, CloudInstanceState, LaunchOutcome, LaunchRequest,
    NodeKind, ProviderError, ProviderErrorKind, ProviderOp, cloud, idempotency_token, tags,
};
use tokio::time::Instant;

use crate::GcpError;
use crate::client::Polling;
use crate::config::GcpConfig;
use crate::errors::{Class, call_error, operation_error};
use crate::mapping::{self, InsertSpec, TypesByLabel};

mod launch;
mod tpu;
pub use tpu::{TPU_ENDPOINT, TPU_ENDPOINT_ENV};

/// `provider.type` of this provider.
pub const PROVIDER_TYPE: &str = "gcp";

/// Statuses of a live instance: every status of Compute Engine's instance life cycle
/// but the stopped ones (`instances` REST reference, `status`).
const LIVE: &[&str] = &[
    "PROVISIONING",
    "STAGING",
    "RUNNING",
    "STOPPING",
    "SUSPENDING",
    "REPAIRING",
    "PENDING",
    "PENDING_STOP",
    "DEPROVISIONING",
];

/// The status of a stopped instance that `start` brings back (a cached node).
const STOPPED: &[&str] = &["TERMINATED"];

/// Calls sent at once (inserts, deletes, ...).
const CONCURRENCY: usize = 32;

/// How often a throttled call is tried in all.
const THROTTLE_TRIES: u32 = 4;

/// How often `poll_errors` asks for an unfinished operation before leaving the
/// instance's fate to the list (an insert that never finishes is never listed running,
/// and the reconciler's timeouts take over).
const MAX_CHECKS: u32 = 100;

/// Instances per page of `instances.list` (the API's maximum).
const PAGE_SIZE: u32 = 500;

/// Compute Engine API calls made, by method (for benchmarks and tests).
#[derive(Debug, Default)]
pub struct CallCounts {
    /// `instances.list` pages.
    pub list: AtomicU64,
    /// `instances.insert`.
    pub insert: AtomicU64,
    /// `instances.bulkInsert` (an all-or-nothing gang).
    pub bulk_insert: AtomicU64,
    /// `zoneOperations.get` by `poll_errors` (the poller's own polls are counted by
    /// the fake in tests).
    pub get_operation: AtomicU64,
    /// `instances.delete`.
    pub delete: AtomicU64,
    /// `instances.stop`.
    pub stop: AtomicU64,
    /// `instances.start`.
    pub start: AtomicU64,
    /// `instances.setLabels`.
    pub set_labels: AtomicU64,
    /// TPU API `nodes.list` pages.
    pub tpu_list: AtomicU64,
    /// TPU API `nodes.create`.
    pub tpu_create: AtomicU64,
}

impl CallCounts {
    /// `(method, count)` for every method, in a stable order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        [
            ("instances.list", &self.list),
            ("instances.insert", &self.insert),
            ("instances.bulkInsert", &self.bulk_insert),
            ("zoneOperations.get", &self.get_operation),
            ("instances.delete", &self.delete),
            ("instances.stop", &self.stop),
            ("instances.start", &self.start),
            ("instances.setLabels", &self.set_labels),
            ("tpu.nodes.list", &self.tpu_list),
            ("tpu.nodes.create", &self.tpu_create),
        ]
        .into_iter()
        .map(|(n, c)| (n, c.load(Ordering::Relaxed)))
        .collect()
    }
}

/// An operation a call started that was not done when the call returned.
#[derive(Debug, Clone)]
struct PendingOp {
    /// The operation's name.
    name: String,
    /// The method that started it.
    call: &'static str,
    /// What it was for (the contract's op of its error).
    op: ProviderOp,
    /// The node type (for a capacity error).
    node_type: String,
    /// How often `poll_errors` asked for it.
    checks: u32,
    /// A TPU API operation (`projects/.../operations/...`), not a zone operation.
    tpu: bool,
}

/// Ray nodes as Compute Engine instances.
pub struct GcpProvider {
    client: Instances,
    state: RwLock<Arc<State>>,
    head_ip: Option<String>,
    polling: Polling,
    calls: Arc<CallCounts>,
    pending: Mutex<Vec<PendingOp>>,
    /// The TPU API, for TPU node types.
    tpu: Option<crate::rest::Rest>,
}

/// What one config load gives: the GCP view, each type's boot script, the label map.
struct State {
    cfg: GcpConfig,
    boot: BTreeMap<String, String>,
    types: TypesByLabel,
}

/// The first `count` names `name(index)` gives that are not `taken`, with their index
/// (a replay names the same nodes; a name made already is skipped).
fn free_names(
    taken: &BTreeSet<String>,
    count: u64,
    name: impl Fn(u64) -> String,
) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut index = 0u64;
    while (out.len() as u64) < count {
        let n = name(index);
        if !taken.contains(&n) {
            out.push((index, n));
        }
        index += 1;
    }
    out
}

impl State {
    fn has_tpus(&self) -> bool {
        self.cfg.node_types.values().any(|n| n.tpu.is_some())
    }
}

/// A call sent: how it ended (the operation's name, and `Ok(true)` done or the error),
/// or its operation still running, with its poller.
enum Started<P> {
    Ended(Option<String>, Result<bool, GcpError>),
    Running(Option<String>, P),
}

/// How one insert (or start) ended.
enum Made {
    /// The instance exists (or is being made).
    Ok(CloudInstance),
    /// It failed; nothing was made.
    Failed(GcpError),
}

impl GcpProvider {
    /// A provider for `config` on `client`. Every node type's `node_config` is mapped
    /// once here, so a bad one fails at load, naming its path. With `head_ip`, workers
    /// boot with rayscale's boot script (joining the head at `head_ip`); without, they
    /// get only the user's `startup-script`.
    pub fn new(
        client: Instances,
        config: &ClusterConfig,
        head_ip: Option<&str>,
        polling: Polling,
    ) -> Result<Self, GcpError> {
        let state = load(config, head_ip)?;
        Ok(GcpProvider {
            client,
            state: RwLock::new(Arc::new(state)),
            head_ip: head_ip.map(str::to_string),
            polling,
            calls: Arc::new(CallCounts::default()),
            pending: Mutex::new(Vec::new()),
            tpu: None,
        })
    }

    /// The provider with `api` as its TPU API client (TPU node types need one).
    pub fn with_tpu_api(mut self, api: crate::rest::Rest) -> Self {
        self.tpu = Some(api);
        self
    }

    /// A provider whose client uses `RAYSCALE_GCP_ENDPOINT` when set (else Google's
    /// endpoint with Application Default Credentials); see [`new`](Self::new).
    pub async fn from_environment(
        config: &ClusterConfig,
        head_ip: Option<&str>,
    ) -> Result<Self, GcpError> {
        let state = load(config, head_ip)?;
        let endpoint = std::env::var(crate::client::ENDPOINT_ENV).ok();
        let polling = Polling::default();
        let credentials = state
            .cfg
            .credentials
            .as_ref()
            .map(crate::client::GcpCredentials::to_credentials)
            .transpose()?;
        let client =
            crate::client::build(endpoint.as_deref(), &polling, credentials.as_ref()).await?;
        let p = Self::new(client, config, head_ip, polling)?;
        if !state.has_tpus() {
            return Ok(p);
        }
        // A loopback Compute endpoint (a local fake) serves the TPU API too unless told
        // otherwise; a real one never stands for Google's TPU endpoint.
        let tpu = std::env::var(TPU_ENDPOINT_ENV).ok().or_else(|| {
            endpoint
                .clone()
                .filter(|e| rayscale_core::provider::is_loopback_http(e))
        });
        let api = crate::rest::Rest::new(
            tpu.as_deref().unwrap_or(TPU_ENDPOINT),
            TPU_ENDPOINT_ENV,
            credentials.as_ref(),
        )
        .await?;
        Ok(p.with_tpu_api(api))
    }

    /// The Compute Engine calls made so far.
    pub fn calls(&self) -> &CallCounts {
        &self.calls
    }

    fn state(&self) -> Arc<State> {
        match self.state.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<PendingOp>> {
        match self.pending.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Every instance of the cluster in `statuses` with `labels`, across every page.
    async fn list_raw(
        &self,
        cfg: &GcpConfig,
        statuses: &[&str],
        labels: &[(&str, &str)],
    ) -> Result<Vec<model::Instance>, GcpError> {
        let mut pages = self
            .client
            .list()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_filter(mapping::list_filter(&cfg.cluster_name, statuses, labels))
            .set_max_results(PAGE_SIZE)
            .by_page();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            self.calls.list.fetch_add(1, Ordering::Relaxed);
            let page = page.map_err(|e| call_error("instances.list", &e, ""))?;
            out.extend(page.items);
        }
        Ok(out)
    }

    /// Sends the call of `poller` (its first poll): how it ended, or its operation, still
    /// running.
    async fn start<P>(&self, mut poller: P, call: &'static str, node_type: &str) -> Started<P>
    where
        P: google_cloud_lro::Poller<model::Operation, model::Operation>,
    {
        match poller.poll().await {
            None => Started::Ended(None, Ok(true)),
            Some(PollingResult::Completed(Ok(op))) => Started::Ended(
                op.name.clone(),
                operation_error(call, &op, node_type).map_or(Ok(true), Err),
            ),
            Some(PollingResult::Completed(Err(e)) | PollingResult::PollingError(e)) => {
                Started::Ended(None, Err(call_error(call, &e, node_type)))
            }
            Some(PollingResult::InProgress(op)) => match op.and_then(|o| o.name) {
                Some(name) => Started::Running(Some(name), poller),
                // Accepted, but nothing to poll (the poller could not go on either).
                None => Started::Ended(None, Ok(false)),
            },
        }
    }

    /// Waits for a running operation until it is done or `deadline` passes (the SDK's
    /// poller, with the client's polling backoff): the failure it ended with, or
    /// `Ok(true)` done, `Ok(false)` not known to be done yet (still running, or its polls
    /// failed).
    async fn finish<P>(
        &self,
        poller: P,
        call: &'static str,
        node_type: &str,
        deadline: Instant,
    ) -> Result<bool, GcpError>
    where
        P: google_cloud_lro::Poller<model::Operation, model::Operation>,
    {
        match tokio::time::timeout_at(deadline, poller.until_done()).await {
            Ok(Ok(op)) => operation_error(call, &op, node_type).map_or(Ok(true), Err),
            Ok(Err(e)) => {
                tracing::debug!("polling {call}: {e}");
                Ok(false)
            }
            Err(_) => Ok(false),
        }
    }

    /// [`start`](Self::start), then [`finish`](Self::finish): the operation's name and
    /// how it ended.
    async fn wait<P>(
        &self,
        poller: P,
        call: &'static str,
        node_type: &str,
        deadline: Instant,
    ) -> (Option<String>, Result<bool, GcpError>)
    where
        P: google_cloud_lro::Poller<model::Operation, model::Operation>,
    {
        match self.start(poller, call, node_type).await {
            Started::Ended(name, r) => (name, r),
            Started::Running(name, p) => {
                let r = self.finish(p, call, node_type, deadline).await;
                (name, r)
            }
        }
    }

    /// `instances.setLabels` of instance `name` (`inst`) with its labels and `changes`,
    /// waited for until `deadline` (`Ok(false)`: still running then); the fingerprint its
    /// labels were read with guards against a concurrent change.
    async fn set_labels(
        &self,
        cfg: &GcpConfig,
        name: &str,
        inst: &model::Instance,
        changes: &[(&str, String)],
        node_type: &str,
        deadline: Instant,
    ) -> Result<bool, GcpError> {
        let mut body = model::InstancesSetLabelsRequest::default();
        body.labels = inst.labels.clone();
        for (k, v) in changes {
            body.labels.insert((*k).to_string(), v.clone());
        }
        body.label_fingerprint = inst.label_fingerprint.clone();
        self.calls.set_labels.fetch_add(1, Ordering::Relaxed);
        let poller = self
            .client
            .set_labels()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_instance(name)
            .set_body(body)
            .poller();
        self.wait(poller, "instances.setLabels", node_type, deadline)
            .await
            .1
    }

    /// Deletes (or, with cached workers, stops) `ids`: workers, or with `head` the head
    /// alone. Names not of the cluster, or gone, are left alone (gone is success).
    async fn terminate_inner(&self, ids: &[String], head: bool) -> Result<(), ProviderError> {
        let (tpus, ids): (Vec<String>, Vec<String>) = ids
            .iter()
            .cloned()
            .partition(|i| crate::tpu::is_tpu_name(i));
        // Both halves run; the first failure is the call's.
        let tpu_result = if tpus.is_empty() {
            Ok(())
        } else {
            self.tpu_terminate(&tpus, head).await
        };
        let compute_result = self.terminate_compute(&ids, head).await;
        tpu_result.and(compute_result)
    }

    /// Deletes (or stops) the Compute Engine instances `ids`: see
    /// [`terminate_inner`](Self::terminate_inner).
    async fn terminate_compute(&self, ids: &[String], head: bool) -> Result<(), ProviderError> {
        if ids.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + self.polling.launch_wait;
        let state = self.state();
        let cfg = &state.cfg;
        let first = ProviderOp::Terminate {
            cloud_instance_id: ids[0].clone(),
        };
        let known: BTreeMap<String, model::Instance> = self
            .list_raw(cfg, &[], &[])
            .await
            .map_err(|e| e.into_provider(first.clone()))?
            .into_iter()
            .filter_map(|i| Some((i.name.clone()?, i)))
            .filter(|(n, _)| ids.contains(n))
            .collect();
        let want = if head {
            NodeKind::Head
        } else {
            NodeKind::Worker
        };
        if let Some((id, _)) = known
            .iter()
            .find(|(_, i)| mapping::cloud_instance(i, &state.types).is_none_or(|c| c.kind != want))
        {
            return Err(cloud::refuse_terminate(id, head));
        }
        let stop = cfg.cache_stopped_nodes && !head;
        let futs: Vec<_> = known
            .iter()
            .map(|(name, i)| self.remove_one(cfg, name, i, stop, deadline))
            .collect();
        let results: Vec<Option<(String, GcpError)>> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        match results.into_iter().flatten().next() {
            None => Ok(()),
            Some((name, e)) => Err(e.into_provider(ProviderOp::Terminate {
                cloud_instance_id: name,
            })),
        }
    }
}

/// What asking for a pending operation told: done (with the failure it ended with, if
/// any), or still running.
enum Checked {
    Done(Option<GcpError>),
    Running,
}

/// Files a pending operation by what asking for it told (`Err`: the asking failed): a
/// failure it ended with is reported once; one still running is kept, up to
/// [`MAX_CHECKS`] asks; an operation gone (kept a while, then dropped) leaves the rest to
/// the list; asking that cannot succeed (permissions) is said once.
fn settle(
    p: PendingOp,
    checked: Result<Checked, GcpError>,
    errors: &mut Vec<ProviderError>,
    still: &mut Vec<PendingOp>,
) {
    match checked {
        Ok(Checked::Done(Some(e))) => errors.push(e.into_provider(p.op.clone())),
        Ok(Checked::Done(None)) => {}
        Ok(Checked::Running) if p.checks < MAX_CHECKS => still.push(p),
        Ok(Checked::Running) => tracing::warn!(
            "operation {} ({}) still not done after {MAX_CHECKS} checks: left to the list",
            p.name,
            p.call
        ),
        Err(e) => match cloud::pending_check_error(e.kind()) {
            PendingCheckError::Forget => {}
            PendingCheckError::Report => errors.push(e.into_provider(p.op.clone())),
            PendingCheckError::Retry => {
                tracing::debug!("checking operation {}: {e}", p.name);
                if p.checks < MAX_CHECKS {
                    still.push(p);
                }
            }
        },
    }
}

fn load(config: &ClusterConfig, head_ip: Option<&str>) -> Result<State, GcpError> {
    let cfg = GcpConfig::from_cluster(config)?;
    let types = mapping::types_by_label(&cfg)?;
    let mut boot = cloud::boot_scripts(config, head_ip, &mapping::METADATA)
        .map_err(|e| GcpError::config("boot script", e.to_string()))?;
    if cfg.node_types.values().any(|n| n.tpu.is_some()) {
        let tpu_boot = cloud::boot_scripts(config, head_ip, &mapping::TPU_METADATA)
            .map_err(|e| GcpError::config("boot script", e.to_string()))?;
        for (t, nc) in &cfg.node_types {
            if nc.tpu.is_some() {
                match tpu_boot.get(t) {
                    Some(s) => boot.insert(t.clone(), s.clone()),
                    None => boot.remove(t),
                };
            }
        }
    }
    // Map each type once, so a value the client's model does not take fails now.
    for (t, nc) in &cfg.node_types {
        let kind = if cfg.head_node_type.as_deref() == Some(t.as_str()) {
            NodeKind::Head
        } else {
            NodeKind::Worker
        };
        let spec = InsertSpec {
            node_type: t,
            kind,
            name: "check",
            request_id: None,
            boot_script: boot.get(t).map(String::as_str),
        };
        if nc.tpu.is_some() {
            crate::tpu::node_json(&cfg, &spec)?;
        } else {
            mapping::instance_body(&cfg, &spec)?;
        }
    }
    Ok(State { cfg, boot, types })
}

#[async_trait::async_trait]
impl CloudInstanceProvider for GcpProvider {
    fn provider_type(&self) -> &str {
        PROVIDER_TYPE
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        let state = self.state();
        let all = self
            .list_raw(&state.cfg, LIVE, &[])
            .await
            .map_err(|e| e.into_provider(ProviderOp::List))?;
        let mut out: Vec<CloudInstance> = all
            .iter()
            .filter_map(|i| mapping::cloud_instance(i, &state.types))
            .collect();
        out.extend(
            self.tpu_list(&state)
                .await
                .map_err(|e| e.into_provider(ProviderOp::List))?,
        );
        Ok(out)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.launch_inner(request, NodeKind::Worker).await
    }

    async fn terminate(
        &self,
        cloud_instance_ids: &[String],
        _request_id: &str,
    ) -> Result<(), ProviderError> {
        self.terminate_inner(cloud_instance_ids, false).await
    }

    async fn launch_head(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.launch_inner(request, NodeKind::Head).await
    }

    async fn terminate_head(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
        self.terminate_inner(&[cloud_instance_id.to_string()], true)
            .await
    }

    /// `instances.setLabels` with the head's labels and the one changed (the
    /// fingerprint they were read with guards against a concurrent change), after a
    /// list that finds `cloud_instance_id` the cluster's running head.
    fn tags_heads(&self) -> bool {
        true
    }

    async fn tag_head(
        &self,
        cloud_instance_id: &str,
        changes: &[(&str, String)],
    ) -> Result<(), ProviderError> {
        let state = self.state();
        let cfg = &state.cfg;
        let heads = self
            .list_raw(
                cfg,
                &["RUNNING"],
                &[(tags::NODE_KIND, tags::NODE_KIND_HEAD)],
            )
            .await
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        let Some(inst) = heads.into_iter().find(|i| {
            i.name.as_deref() == Some(cloud_instance_id)
                && mapping::cloud_instance(i, &state.types).is_some_and(|c| c.is_head())
        }) else {
            return Err(cloud::refuse_mark(cloud_instance_id));
        };
        let deadline = Instant::now() + self.polling.launch_wait;
        let done = self
            .set_labels(cfg, cloud_instance_id, &inst, changes, "", deadline)
            .await
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        if !done {
            return Err(ProviderError::call(
                ProviderErrorKind::Transient,
                format!("instances.setLabels of {cloud_instance_id}: not done in time"),
            ));
        }
        Ok(())
    }

    /// The operations `launch` and `terminate` left running, asked again: each that
    /// ended with an error, once; each still running stays.
    async fn poll_errors(&self) -> Vec<ProviderError> {
        let ops: Vec<PendingOp> = std::mem::take(&mut *self.pending());
        if ops.is_empty() {
            return Vec::new();
        }
        let state = self.state();
        let cfg = &state.cfg;
        let (tpu_ops, ops): (Vec<PendingOp>, Vec<PendingOp>) = ops.into_iter().partition(|p| p.tpu);
        let mut errors = Vec::new();
        let mut still = Vec::new();
        for mut p in tpu_ops {
            p.checks += 1;
            let checked = self.tpu_get_op(&p.name).await.map(|op| {
                match tpu::tpu_op_end(p.call, &op, &p.node_type) {
                    None => Checked::Running,
                    // A delete of a node already gone is done; any other failure is said.
                    Some(Err(e))
                        if !(p.call == "nodes.delete"
                            && e.kind() == ProviderErrorKind::NotFound) =>
                    {
                        Checked::Done(Some(e))
                    }
                    Some(_) => Checked::Done(None),
                }
            });
            settle(p, checked, &mut errors, &mut still);
        }
        let futs: Vec<_> = ops.into_iter().map(|p| self.check_op(cfg, p)).collect();
        let checked: Vec<(PendingOp, Result<model::Operation, GcpError>)> =
            futures_util::stream::iter(futs)
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        for (p, r) in checked {
            let r = r.map(|op| {
                if op.status == Some(model::operation::Status::Done) {
                    Checked::Done(operation_error(p.call, &op, &p.node_type))
                } else {
                    Checked::Running
                }
            });
            settle(p, r, &mut errors, &mut still);
        }
        self.pending().extend(still);
        errors
    }

    async fn reconfigure(&self, config: &ClusterConfig) -> Result<(), ProviderError> {
        let state = load(config, self.head_ip.as_deref())
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        let old = self.state();
        if self.tpu.is_none()
            && let Some((t, _)) = state.cfg.node_types.iter().find(|(_, n)| n.tpu.is_some())
        {
            return Err(GcpError::config(
                format!("available_node_types.{t}"),
                "a TPU node type added while running: restart rayscale so that it reaches the \
                 TPU API (the config is not applied)",
            )
            .into_provider(ProviderOp::Other));
        }
        // The instances made so far would no longer be seen (and so leak).
        cloud::refuse_moves(&[
            (
                "provider.project_id",
                old.cfg.project_id.as_str(),
                state.cfg.project_id.as_str(),
            ),
            (
                "provider.availability_zone",
                old.cfg.zone.as_str(),
                state.cfg.zone.as_str(),
            ),
            (
                "cluster_name",
                old.cfg.cluster_name.as_str(),
                state.cfg.cluster_name.as_str(),
            ),
        ])?;
        match self.state.write() {
            Ok(mut c) => *c = Arc::new(state),
            Err(p) => *p.into_inner() = Arc::new(state),
        }
        Ok(())
    }
}
