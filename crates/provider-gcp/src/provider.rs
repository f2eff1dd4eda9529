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
use rayscale_core::provider::boot::{BootTarget, HeadBootTarget, render_head, render_worker};
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, CloudInstanceState, LaunchOutcome, LaunchRequest,
    NodeKind, ProviderError, ProviderErrorKind, ProviderOp, idempotency_token, tags,
};
use tokio::time::Instant;

use crate::GcpError;
use crate::client::Polling;
use crate::config::GcpConfig;
use crate::errors::{Class, call_error, operation_error};
use crate::mapping::{self, InsertSpec, TypesByLabel};

/// `provider.type` of this provider.
pub const PROVIDER_TYPE: &str = "gcp";

/// Statuses of a live instance (Compute Engine's instance life cycle).
const LIVE: &[&str] = &[
    "PROVISIONING",
    "STAGING",
    "RUNNING",
    "STOPPING",
    "SUSPENDING",
];

/// Statuses of a stopped (cached) instance.
const STOPPED: &[&str] = &["TERMINATED", "SUSPENDED"];

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
            let page = page.map_err(|e| call_error("instances.list", &e, "", None))?;
            out.extend(page.items);
        }
        Ok(out)
    }

    /// Sends the call of `poller` and waits for its operation until it is done or
    /// `deadline` passes (the SDK's poller, with the client's polling backoff): the
    /// operation's name, and the failure it ended with, or `Ok(true)` done, `Ok(false)`
    /// not known to be done yet (still running, or its polls failed).
    async fn wait<P>(
        &self,
        mut poller: P,
        call: &'static str,
        node_type: &str,
        deadline: Instant,
    ) -> (Option<String>, Result<bool, GcpError>)
    where
        P: google_cloud_lro::Poller<model::Operation, model::Operation>,
    {
        let zone = self.state().cfg.zone.clone();
        let done = |op: &model::Operation| {
            operation_error(call, op, node_type, Some(&zone)).map_or(Ok(true), Err)
        };
        // The first poll sends the call itself.
        let name = match poller.poll().await {
            None => return (None, Ok(true)),
            Some(PollingResult::Completed(Ok(op))) => return (op.name.clone(), done(&op)),
            Some(PollingResult::Completed(Err(e)) | PollingResult::PollingError(e)) => {
                return (None, Err(call_error(call, &e, node_type, Some(&zone))));
            }
            Some(PollingResult::InProgress(op)) => op.and_then(|o| o.name),
        };
        match tokio::time::timeout_at(deadline, poller.until_done()).await {
            Ok(Ok(op)) => (name, done(&op)),
            Ok(Err(e)) => {
                tracing::debug!("polling {call} {name:?}: {e}");
                (name, Ok(false))
            }
            Err(_) => (name, Ok(false)),
        }
    }

    /// Inserts the instance of `spec`, retrying while throttled, and waits for it until
    /// `deadline` (an unfinished operation is left to `poll_errors`).
    async fn insert(
        &self,
        state: &State,
        spec: &InsertSpec<'_>,
        index: u64,
        deadline: Instant,
    ) -> Made {
        let cfg = &state.cfg;
        let nc = &cfg.node_types[spec.node_type];
        let body = match mapping::instance_body(cfg, spec) {
            Ok(b) => b,
            Err(e) => return Made::Failed(e),
        };
        let request_id = idempotency_token(spec.request_id.unwrap_or(spec.name), index);
        let mut delay = Duration::from_millis(250);
        let mut tries = 1;
        loop {
            self.calls.insert.fetch_add(1, Ordering::Relaxed);
            let poller = self
                .client
                .insert()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_request_id(&request_id)
                .set_or_clear_source_instance_template(nc.source_instance_template.clone())
                .set_body(body.clone())
                .poller();
            let (op, r) = self
                .wait(poller, "instances.insert", spec.node_type, deadline)
                .await;
            let made = || {
                let mut c = CloudInstance::worker(spec.name, spec.node_type, spec.request_id);
                c.kind = spec.kind;
                c.state = CloudInstanceState::Pending;
                c.launch_config_hash = cfg.launch_hashes.get(spec.node_type).cloned();
                c
            };
            return match r {
                Ok(true) => Made::Ok(made()),
                Ok(false) => {
                    if let Some(name) = op {
                        self.pending().push(PendingOp {
                            name,
                            call: "instances.insert",
                            op: ProviderOp::Launch {
                                request_id: spec.request_id.unwrap_or("").to_string(),
                                node_type: spec.node_type.to_string(),
                                count: 1,
                            },
                            node_type: spec.node_type.to_string(),
                            checks: 0,
                        });
                    }
                    Made::Ok(made())
                }
                // A replay of an insert that made it already.
                Err(e) if crate::errors::classify(e.code(), None) == Class::AlreadyExists => {
                    Made::Ok(made())
                }
                Err(e) if e.kind() == ProviderErrorKind::Throttled && tries < THROTTLE_TRIES => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    tries += 1;
                    continue;
                }
                Err(e) => Made::Failed(e),
            };
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
            (_, Ok(_)) => {
                let mut c = mapping::cloud_instance(inst, &state.types)
                    .unwrap_or_else(|| CloudInstance::worker(&name, node_type, None));
                c.request_id = Some(request_id.to_string());
                c.state = CloudInstanceState::Pending;
                Made::Ok(c)
            }
        }
    }

    /// The new instance `name` (the `index`-th of `request_id`), inserted and waited for.
    #[allow(clippy::too_many_arguments)]
    async fn insert_new(
        &self,
        state: &State,
        node_type: &str,
        kind: NodeKind,
        name: &str,
        request_id: &str,
        index: u64,
        boot_script: Option<&str>,
        deadline: Instant,
    ) -> Made {
        let spec = InsertSpec {
            node_type,
            kind,
            name,
            request_id: Some(request_id),
            boot_script,
        };
        self.insert(state, &spec, index, deadline).await
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
            .map_err(|e| call_error("zoneOperations.get", &e, &p.node_type, None));
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
        if !cfg.node_types.contains_key(t) {
            return Err(ProviderError::new(
                launch_op(req.count),
                ProviderErrorKind::InvalidConfig,
                format!("launch {}: unknown node type {t:?}", req.request_id),
            ));
        }
        let is_head_type = cfg.head_node_type.as_deref() == Some(t);
        if is_head_type != (kind == NodeKind::Head) {
            return Err(ProviderError::new(
                launch_op(req.count),
                ProviderErrorKind::InvalidConfig,
                format!(
                    "launch {}: {t:?} is {} the head's type (head_node_type)",
                    req.request_id,
                    if is_head_type { "" } else { "not" }
                ),
            ));
        }
        // 1. What this request made already (a replay after a crash, a retry).
        let all_states: Vec<&str> = LIVE.iter().chain(STOPPED).copied().collect();
        let ours = self
            .list_raw(
                cfg,
                &all_states,
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
                reuse.push(i.clone());
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
        let futs: Vec<_> = names
            .iter()
            .map(|(i, n)| self.insert_new(&state, t, kind, n, &req.request_id, *i, boot, deadline))
            .collect();
        let inserts: Vec<Made> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut failed = 0u64;
        for m in inserts {
            match m {
                Made::Ok(c) => made.push(c),
                Made::Failed(e) => {
                    failed += 1;
                    failures.push(e);
                }
            }
        }
        if failed == 0 && failures.is_empty() {
            return Ok(LaunchOutcome {
                instances: made,
                shortfall: None,
            });
        }
        // The error to report: a capacity one first (it moves the demand elsewhere).
        failures.sort_by_key(|e| !matches!(e.kind(), ProviderErrorKind::Capacity { .. }));
        let first = failures.swap_remove(0);
        let short = req.count.saturating_sub(made.len() as u64);
        tracing::info!(
            "launch {} of {t}: {short} of {} not made: {first}",
            req.request_id,
            req.count
        );
        if made.is_empty() {
            Err(first.into_provider(launch_op(req.count)))
        } else {
            Ok(LaunchOutcome {
                instances: made,
                shortfall: Some(first.into_provider(launch_op(short))),
            })
        }
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
        let all_states: Vec<&str> = LIVE.iter().chain(STOPPED).copied().collect();
        let known: BTreeMap<String, model::Instance> = self
            .list_raw(cfg, &all_states, &[])
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
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: id.clone(),
                },
                ProviderErrorKind::InvalidConfig,
                if head {
                    format!("refusing to terminate {id} as the head: it is not the cluster's head")
                } else {
                    format!("refusing to terminate {id}: it is the cluster's head")
                },
            ));
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
    let mut boot = BTreeMap::new();
    for t in cfg.node_types.keys() {
        let script = if cfg.head_node_type.as_deref() == Some(t.as_str()) {
            render_head(
                config,
                &HeadBootTarget {
                    node_type: t,
                    instance_id_command: mapping::INSTANCE_ID_COMMAND,
                    private_ip_command: mapping::PRIVATE_IP_COMMAND,
                    // Compute Engine runs the startup script at every boot.
                    per_boot: false,
                },
            )
        } else if let Some(ip) = head_ip {
            render_worker(
                config,
                &BootTarget {
                    node_type: t,
                    head_ip: ip,
                    instance_id_command: mapping::INSTANCE_ID_COMMAND,
                    per_boot: false,
                },
            )
        } else {
            continue;
        };
        let script = script.map_err(|e| GcpError::config("boot script", e.to_string()))?;
        boot.insert(t.clone(), script);
    }
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
                        operation_error(p.call, &op, &p.node_type, Some(&state.cfg.zone))
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
        match self.state.write() {
            Ok(mut c) => *c = Arc::new(state),
            Err(p) => *p.into_inner() = Arc::new(state),
        }
        Ok(())
    }
}
