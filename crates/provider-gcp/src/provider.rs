//! `impl CloudInstanceProvider` for Compute Engine: list (the cluster's label filter,
//! every page, or an error), launch (idempotent by request id: instances labelled with
//! it are counted first, each new instance's name and `requestId` derive from the request
//! and its index, stopped workers are started before new ones are made; each insert's
//! zone operation is awaited up to a bound, errors checked, and the unfinished ones are
//! checked again by `poll_errors`), terminate (delete, or stop when workers are cached;
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
}

impl CallCounts {
    /// `(method, count)` for every method, in a stable order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        [
            ("instances.list", &self.list),
            ("instances.insert", &self.insert),
            ("zoneOperations.get", &self.get_operation),
            ("instances.delete", &self.delete),
            ("instances.stop", &self.stop),
            ("instances.start", &self.start),
            ("instances.setLabels", &self.set_labels),
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
}

/// Ray nodes as Compute Engine instances.
pub struct GcpProvider {
    client: Instances,
    state: RwLock<Arc<State>>,
    head_ip: Option<String>,
    polling: Polling,
    calls: Arc<CallCounts>,
    pending: Mutex<Vec<PendingOp>>,
}

/// What one config load gives: the GCP view, each type's boot script, the label map.
struct State {
    cfg: GcpConfig,
    boot: BTreeMap<String, String>,
    types: TypesByLabel,
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
        })
    }

    /// A provider whose client uses `RAYSCALE_GCP_ENDPOINT` when set (else Google's
    /// endpoint with Application Default Credentials); see [`new`](Self::new).
    pub async fn from_environment(
        config: &ClusterConfig,
        head_ip: Option<&str>,
    ) -> Result<Self, GcpError> {
        load(config, head_ip)?;
        let endpoint = std::env::var(crate::client::ENDPOINT_ENV).ok();
        let polling = Polling::default();
        let client = crate::client::build(endpoint.as_deref(), &polling).await?;
        Self::new(client, config, head_ip, polling)
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

    /// Sends the insert of the instance `name` (the `index`-th of `request_id`), again
    /// while throttled (same `requestId`): how it ended, or its operation still running.
    #[allow(clippy::too_many_arguments)]
    async fn send_insert(
        &self,
        state: &State,
        node_type: &str,
        kind: NodeKind,
        name: &str,
        request_id: &str,
        index: u64,
        boot_script: Option<&str>,
    ) -> (
        CloudInstance,
        Started<impl google_cloud_lro::Poller<model::Operation, model::Operation>>,
    ) {
        let spec = InsertSpec {
            node_type,
            kind,
            name,
            request_id: Some(request_id),
            boot_script,
        };
        let cfg = &state.cfg;
        let mut made = CloudInstance::worker(name, node_type, Some(request_id));
        made.kind = kind;
        made.state = CloudInstanceState::Pending;
        made.launch_config_hash = cfg.launch_hashes.get(node_type).cloned();
        let nc = &cfg.node_types[node_type];
        let body = match mapping::instance_body(cfg, &spec) {
            Ok(b) => b,
            Err(e) => return (made, Started::Ended(None, Err(e))),
        };
        let token = idempotency_token(request_id, index);
        let mut delay = Duration::from_millis(250);
        let mut tries = 1;
        loop {
            let poller = self
                .client
                .insert()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_request_id(&token)
                .set_or_clear_source_instance_template(nc.source_instance_template.clone())
                .set_body(body.clone())
                .poller();
            self.calls.insert.fetch_add(1, Ordering::Relaxed);
            match self.start(poller, "instances.insert", node_type).await {
                // Throttled, or lost on the way (the same `requestId` makes a second send
                // safe): again, with backoff.
                Started::Ended(_, Err(e))
                    if matches!(
                        e.kind(),
                        ProviderErrorKind::Throttled | ProviderErrorKind::Transient
                    ) && tries < THROTTLE_TRIES =>
                {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    tries += 1;
                }
                // The name is taken: made by this request already (a replay), or not.
                Started::Ended(op, Err(e))
                    if crate::errors::classify(e.code(), e.status()) == Class::AlreadyExists =>
                {
                    let ours = self.is_ours(cfg, name, request_id).await;
                    return match ours {
                        Ok(true) => (made, Started::Ended(op, Ok(true))),
                        Ok(false) => (
                            made,
                            Started::Ended(
                                op,
                                Err(GcpError::Call {
                                    call: "instances.insert",
                                    code: e.code().map(str::to_string),
                                    status: e.status(),
                                    kind: ProviderErrorKind::Transient,
                                    message: format!(
                                        "the name {name} is taken by an instance of another launch request"
                                    ),
                                }),
                            ),
                        ),
                        Err(e) => (made, Started::Ended(op, Err(e))),
                    };
                }
                other => return (made, other),
            }
        }
    }

    /// Whether the instance `name` carries the launch request `request_id`.
    async fn is_ours(
        &self,
        cfg: &GcpConfig,
        name: &str,
        request_id: &str,
    ) -> Result<bool, GcpError> {
        let i = self
            .client
            .get()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_instance(name)
            .send()
            .await
            .map_err(|e| call_error("instances.get", &e, ""))?;
        Ok(i.labels.get(tags::LAUNCH_REQUEST).map(String::as_str)
            == Some(mapping::label_value(request_id).as_str()))
    }

    /// Waits for an insert `send_insert` left running, until `deadline`; an unfinished
    /// one is left to `poll_errors`.
    async fn finish_insert<P>(
        &self,
        made: CloudInstance,
        op: Option<String>,
        poller: P,
        deadline: Instant,
    ) -> Made
    where
        P: google_cloud_lro::Poller<model::Operation, model::Operation>,
    {
        match self
            .finish(poller, "instances.insert", &made.node_type, deadline)
            .await
        {
            Ok(true) => Made::Ok(made),
            Ok(false) => {
                if let Some(name) = op {
                    self.pending().push(PendingOp {
                        name,
                        call: "instances.insert",
                        op: ProviderOp::Launch {
                            request_id: made.request_id.clone().unwrap_or_default(),
                            node_type: made.node_type.clone(),
                            count: 1,
                        },
                        node_type: made.node_type.clone(),
                        checks: 0,
                    });
                }
                Made::Ok(made)
            }
            Err(e) => Made::Failed(e),
        }
    }

    /// Starts a stopped instance for `request_id`, labelling it with the request first
    /// (so a replay counts it).
    async fn restart(
        &self,
        state: &State,
        inst: &model::Instance,
        request_id: &str,
        node_type: &str,
        deadline: Instant,
    ) -> Made {
        let cfg = &state.cfg;
        let Some(name) = inst.name.clone() else {
            return Made::Failed(GcpError::config("instance", "an instance without a name"));
        };
        let mut labels = inst.labels.clone();
        labels.insert(
            tags::LAUNCH_REQUEST.to_string(),
            mapping::label_value(request_id),
        );
        labels.insert(
            tags::NODE_STATUS.to_string(),
            mapping::STATUS_UNINITIALIZED.to_string(),
        );
        let mut body = model::InstancesSetLabelsRequest::default();
        body.labels = labels;
        body.label_fingerprint = inst.label_fingerprint.clone();
        self.calls.set_labels.fetch_add(1, Ordering::Relaxed);
        let poller = self
            .client
            .set_labels()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_instance(&name)
            .set_body(body)
            .poller();
        if let (_, Err(e)) = self
            .wait(poller, "instances.setLabels", node_type, deadline)
            .await
        {
            return Made::Failed(e);
        }
        self.calls.start.fetch_add(1, Ordering::Relaxed);
        let poller = self
            .client
            .start()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_instance(&name)
            .set_request_id(idempotency_token(&format!("{request_id}/start/{name}"), 0))
            .poller();
        match self
            .wait(poller, "instances.start", node_type, deadline)
            .await
        {
            (_, Err(e)) => Made::Failed(e),
            (op, Ok(done)) => {
                if !done && let Some(op) = op {
                    // A start that fails late (a stockout) is reported by poll_errors.
                    self.pending().push(PendingOp {
                        name: op,
                        call: "instances.start",
                        op: ProviderOp::Launch {
                            request_id: request_id.to_string(),
                            node_type: node_type.to_string(),
                            count: 1,
                        },
                        node_type: node_type.to_string(),
                        checks: 0,
                    });
                }
                let mut c = mapping::cloud_instance(inst, &state.types)
                    .unwrap_or_else(|| CloudInstance::worker(&name, node_type, None));
                c.request_id = Some(request_id.to_string());
                c.state = CloudInstanceState::Pending;
                Made::Ok(c)
            }
        }
    }

    /// Deletes (or stops) one instance; `None` when done, gone or left to `poll_errors`.
    async fn remove_one(
        &self,
        cfg: &GcpConfig,
        name: &str,
        inst: &model::Instance,
        stop: bool,
        deadline: Instant,
    ) -> Option<(String, GcpError)> {
        if stop && mapping::is_stopped(inst) {
            return None;
        }
        let (call, (op, r)) = if stop {
            self.calls.stop.fetch_add(1, Ordering::Relaxed);
            let p = self
                .client
                .stop()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_instance(name)
                .poller();
            (
                "instances.stop",
                self.wait(p, "instances.stop", "", deadline).await,
            )
        } else {
            self.calls.delete.fetch_add(1, Ordering::Relaxed);
            let p = self
                .client
                .delete()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_instance(name)
                .poller();
            (
                "instances.delete",
                self.wait(p, "instances.delete", "", deadline).await,
            )
        };
        match (op, r) {
            (_, Err(e)) if e.kind() == ProviderErrorKind::NotFound => None,
            (_, Err(e)) => Some((name.to_string(), e)),
            (Some(op), Ok(false)) => {
                self.pending().push(PendingOp {
                    name: op,
                    call,
                    op: ProviderOp::Terminate {
                        cloud_instance_id: name.to_string(),
                    },
                    node_type: String::new(),
                    checks: 0,
                });
                None
            }
            (_, Ok(_)) => None,
        }
    }

    /// Asks for a pending operation once more.
    async fn check_op(
        &self,
        cfg: &GcpConfig,
        mut p: PendingOp,
    ) -> (PendingOp, Result<model::Operation, GcpError>) {
        p.checks += 1;
        self.calls.get_operation.fetch_add(1, Ordering::Relaxed);
        let r = self
            .client
            .get_operation()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_operation(&p.name)
            .send()
            .await
            .map_err(|e| call_error("zoneOperations.get", &e, &p.node_type));
        (p, r)
    }

    async fn launch_inner(
        &self,
        req: &LaunchRequest,
        kind: NodeKind,
    ) -> Result<LaunchOutcome, ProviderError> {
        let deadline = Instant::now() + self.polling.launch_wait;
        let state = self.state();
        let cfg = &state.cfg;
        let t = req.node_type.as_str();
        let launch_op = |count: u64| ProviderOp::Launch {
            request_id: req.request_id.clone(),
            node_type: req.node_type.clone(),
            count,
        };
        cloud::check_launch(
            cfg.head_node_type.as_deref(),
            cfg.node_types.contains_key(t),
            req,
            kind,
        )?;
        // The cluster's one zone took an instance back or ran out a short while ago:
        // there is nowhere else to go, so the type is out (no call is made).
        if req.avoid_zones.contains(&cfg.zone) {
            return Err(GcpError::Call {
                call: "instances.insert",
                code: None,
                status: None,
                kind: Class::Capacity.kind(t),
                message: format!("zone {} is avoided for now: {t} not launched", cfg.zone),
            }
            .into_provider(launch_op(req.count)));
        }
        // 1. What this request made already (a replay after a crash, a retry), in any
        //    status.
        let ours = self
            .list_raw(
                cfg,
                &[],
                &[
                    (tags::LAUNCH_REQUEST, req.request_id.as_str()),
                    (tags::USER_NODE_TYPE, t),
                ],
            )
            .await
            .map_err(|e| e.into_provider(launch_op(req.count)))?;
        let taken: BTreeSet<String> = ours.iter().filter_map(|i| i.name.clone()).collect();
        let mut made: Vec<CloudInstance> = Vec::new();
        let mut reuse: Vec<model::Instance> = Vec::new();
        for i in &ours {
            if mapping::is_stopped(i) {
                // An interrupted restart of a cached node is finished; without caching,
                // a stopped one (a preempted spot worker) is not this request's any more.
                if cfg.cache_stopped_nodes && mapping::is_restartable(i) {
                    reuse.push(i.clone());
                }
            } else {
                made.extend(mapping::cloud_instance(i, &state.types));
            }
        }
        let mut remaining = req.count.saturating_sub(made.len() as u64);
        // 2. Cached nodes: stopped instances of this kind, type and launch config.
        if cfg.cache_stopped_nodes && remaining > reuse.len() as u64 {
            let hash = cfg.launch_hashes.get(t).cloned().unwrap_or_default();
            let stopped = self
                .list_raw(
                    cfg,
                    STOPPED,
                    &[
                        (tags::NODE_KIND, kind.tag_value()),
                        (tags::USER_NODE_TYPE, t),
                        (tags::LAUNCH_CONFIG, hash.as_str()),
                    ],
                )
                .await
                .map_err(|e| e.into_provider(launch_op(req.count)))?;
            let mut more: Vec<model::Instance> = stopped
                .into_iter()
                .filter(|i| i.name.as_ref().is_some_and(|n| !taken.contains(n)))
                .collect();
            more.sort_by(|a, b| a.name.cmp(&b.name));
            reuse.extend(more);
        }
        reuse.truncate(usize::try_from(remaining).unwrap_or(usize::MAX));
        let mut failures: Vec<GcpError> = Vec::new();
        let futs: Vec<_> = reuse
            .iter()
            .map(|i| self.restart(&state, i, &req.request_id, t, deadline))
            .collect();
        let restarts: Vec<Made> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for m in restarts {
            match m {
                Made::Ok(c) => {
                    remaining = remaining.saturating_sub(1);
                    made.push(c);
                }
                Made::Failed(e) => {
                    tracing::warn!("restarting a stopped {t}: {e}");
                    failures.push(e);
                }
            }
        }
        // 3. New instances: names (and request ids) by index, skipping names taken.
        let boot = state.boot.get(t).map(String::as_str);
        let mut names = Vec::new();
        let mut index = 0u64;
        while (names.len() as u64) < remaining {
            let n = mapping::instance_name(&cfg.cluster_name, kind, &req.request_id, index);
            if !taken.contains(&n) {
                names.push((index, n));
            }
            index += 1;
        }
        // Every insert is sent first (32 at a time), then the operations still running
        // are awaited together, until the deadline.
        let futs: Vec<_> = names
            .iter()
            .map(|(i, n)| self.send_insert(&state, t, kind, n, &req.request_id, *i, boot))
            .collect();
        let sent: Vec<_> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut inserts: Vec<Made> = Vec::new();
        let mut running = Vec::new();
        for (made, started) in sent {
            match started {
                Started::Ended(_, Ok(_)) => inserts.push(Made::Ok(made)),
                Started::Ended(_, Err(e)) => inserts.push(Made::Failed(e)),
                Started::Running(op, poller) => {
                    running.push(self.finish_insert(made, op, poller, deadline))
                }
            }
        }
        let finished: Vec<Made> = futures_util::stream::iter(running)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        inserts.extend(finished);
        for m in inserts {
            match m {
                Made::Ok(c) => made.push(c),
                Made::Failed(e) => failures.push(e),
            }
        }
        cloud::launch_outcome(req, made, failures, GcpError::kind, GcpError::into_provider)
    }

    /// Deletes (or, with cached workers, stops) `ids`: workers, or with `head` the head
    /// alone. Names not of the cluster, or gone, are left alone (gone is success).
    async fn terminate_inner(&self, ids: &[String], head: bool) -> Result<(), ProviderError> {
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

fn load(config: &ClusterConfig, head_ip: Option<&str>) -> Result<State, GcpError> {
    let cfg = GcpConfig::from_cluster(config)?;
    let types = mapping::types_by_label(&cfg)?;
    let boot = cloud::boot_scripts(config, head_ip, &mapping::METADATA)
        .map_err(|e| GcpError::config("boot script", e.to_string()))?;
    // Map each type once, so a value the client's model does not take fails now.
    for t in cfg.node_types.keys() {
        let kind = if cfg.head_node_type.as_deref() == Some(t.as_str()) {
            NodeKind::Head
        } else {
            NodeKind::Worker
        };
        mapping::instance_body(
            &cfg,
            &InsertSpec {
                node_type: t,
                kind,
                name: "check",
                request_id: None,
                boot_script: boot.get(t).map(String::as_str),
            },
        )?;
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
        Ok(all
            .iter()
            .filter_map(|i| mapping::cloud_instance(i, &state.types))
            .collect())
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

    /// The operations `launch` and `terminate` left running, asked again: each that
    /// ended with an error, once; each still running stays.
    async fn poll_errors(&self) -> Vec<ProviderError> {
        let ops: Vec<PendingOp> = std::mem::take(&mut *self.pending());
        if ops.is_empty() {
            return Vec::new();
        }
        let state = self.state();
        let cfg = &state.cfg;
        let futs: Vec<_> = ops.into_iter().map(|p| self.check_op(cfg, p)).collect();
        let checked: Vec<(PendingOp, Result<model::Operation, GcpError>)> =
            futures_util::stream::iter(futs)
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        let mut errors = Vec::new();
        let mut still = Vec::new();
        for (p, r) in checked {
            match r {
                Ok(op) if op.status == Some(model::operation::Status::Done) => {
                    if let Some(e) =
                        operation_error(p.call, &op, &p.node_type)
                    {
                        errors.push(e.into_provider(p.op.clone()));
                    }
                }
                Ok(_) if p.checks < MAX_CHECKS => still.push(p),
                Ok(_) => tracing::warn!(
                    "operation {} ({}) still not done after {MAX_CHECKS} checks: left to the list",
                    p.name,
                    p.call
                ),
                // Operations are kept for a while, then gone: the list tells the rest.
                Err(e) if e.kind() == ProviderErrorKind::NotFound => {}
                // Asking cannot succeed (permissions): said once, and the list tells the rest.
                Err(e)
                    if matches!(
                        e.kind(),
                        ProviderErrorKind::Auth | ProviderErrorKind::InvalidConfig
                    ) =>
                {
                    errors.push(e.into_provider(p.op.clone()));
                }
                Err(e) => {
                    tracing::debug!("checking operation {}: {e}", p.name);
                    if p.checks < MAX_CHECKS {
                        still.push(p);
                    }
                }
            }
        }
        self.pending().extend(still);
        errors
    }

    async fn reconfigure(&self, config: &ClusterConfig) -> Result<(), ProviderError> {
        let state = load(config, self.head_ip.as_deref())
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        let old = self.state();
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
