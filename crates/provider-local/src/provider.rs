//! [`LocalProcessProvider`]: the trait implementation.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rayscale_core::config::{ClusterConfig, NodeTypeConfig};
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, CloudInstanceState, LaunchOutcome, LaunchRequest,
    ProviderError, ProviderErrorKind, ProviderOp,
};
use rustix::io::Errno;
use rustix::process::{Pid, Signal};

use crate::args::{ray_start_args, validate_node_type, worker_temp_dir};
use crate::error::LocalProviderError;
use crate::procfs::{self, ProcInfo, Targets};
use crate::{ENV_CLUSTER, ENV_INSTANCE_ID, ENV_NODE_TYPE, ENV_REQUEST_ID, instance_id};

/// How often a stopping instance is looked at.
const POLL: Duration = Duration::from_millis(100);
/// How long after SIGKILL an instance may take to vanish before it counts as failed.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// At most this many characters of a log line go into an error message.
const LOG_LINE_MAX: usize = 300;

/// Configuration of a [`LocalProcessProvider`].
#[derive(Debug, Clone, PartialEq)]
pub struct LocalProcessConfig {
    /// The cluster's name; every worker carries it in `RAYSCALE_CLUSTER`.
    pub cluster_name: String,
    /// The GCS the workers join (`host:port`; on this host, `127.0.0.1:<port>`).
    pub gcs_address: String,
    /// The `ray` executable (a bare name is looked up on `PATH`).
    pub ray_binary: PathBuf,
    /// The node types that may be launched at first (the provider then keeps them, and
    /// [`reconfigure`](CloudInstanceProvider::reconfigure) replaces them).
    pub node_types: Vec<NodeTypeConfig>,
    /// Time between SIGTERM and SIGKILL on terminate.
    pub grace_period: Duration,
    /// `--node-ip-address` of the workers. Ray 2.60's `ray start` replaces a loopback
    /// address by the host's routable IP, under which the node then registers.
    pub node_ip: String,
    /// Extra environment of the workers (the provider's own variables win).
    pub extra_env: Vec<(String, String)>,
    /// Directory of the workers' `<instance id>.log` files (stdout and stderr of
    /// `ray start`).
    pub log_dir: PathBuf,
}

impl LocalProcessConfig {
    /// The config with defaults: grace period 10 s, node IP `127.0.0.1`, no extra
    /// environment, logs in [`LocalProcessConfig::default_log_dir`].
    pub fn new(
        cluster_name: impl Into<String>,
        gcs_address: impl Into<String>,
        ray_binary: impl Into<PathBuf>,
        node_types: Vec<NodeTypeConfig>,
    ) -> Self {
        let cluster_name = cluster_name.into();
        LocalProcessConfig {
            log_dir: Self::default_log_dir(&cluster_name),
            cluster_name,
            gcs_address: gcs_address.into(),
            ray_binary: ray_binary.into(),
            node_types,
            grace_period: Duration::from_secs(10),
            node_ip: "127.0.0.1".to_string(),
            extra_env: Vec::new(),
        }
    }

    /// `<temp dir>/rayscale-<cluster>/logs`, the cluster name reduced to
    /// `[A-Za-z0-9_-]`.
    pub fn default_log_dir(cluster_name: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("rayscale-{}", file_safe(cluster_name)))
            .join("logs")
    }
}

/// Worker nodes as local `ray start --block` processes (see the crate docs).
///
/// Cheap to share behind an `Arc`; background tasks (reaping children, SIGKILL after the
/// grace period) run on the tokio runtime that called `launch` / `terminate`.
#[derive(Debug)]
pub struct LocalProcessProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: LocalProcessConfig,
    /// The node types launches follow (the config's, replaced on a config reload).
    node_types: Mutex<Vec<NodeTypeConfig>>,
    state: Mutex<State>,
    /// Serializes launches, so two launches of one request cannot both miss each other.
    launch_lock: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Instances this object spawned (never spawned again, even once gone).
    launched: HashSet<String>,
    /// Instances whose `ray start` is this object's child and not yet reaped.
    children: HashSet<String>,
    /// Instances asked to stop: their exit is not an error.
    stop_requested: HashSet<String>,
    /// Instances the autoscaler asked to terminate (until they are gone): their logs are
    /// removed with them.
    terminate_asked: HashSet<String>,
    /// Instances whose `ray start` exited on its own: their log and Ray temp dir are kept
    /// (the error that reported the exit names the log; the raylet's logs are in the temp
    /// dir), even when the autoscaler terminates what is left of them. Kept for the
    /// process's life (an id is never launched again; one short string per crash).
    died: HashSet<String>,
    /// Instances being stopped (listed with `is_running = false`).
    terminating: HashSet<String>,
    /// Last seen process group of each instance's leader.
    known_pgids: HashMap<String, i32>,
    /// Errors for `poll_errors`.
    errors: Vec<ProviderError>,
}

impl LocalProcessProvider {
    /// Checks the config (the `ray` binary exists and is executable; every node type can be
    /// expressed as `ray start` flags), creates the log directory, and makes the provider.
    pub fn new(mut config: LocalProcessConfig) -> Result<Self, LocalProviderError> {
        if config.cluster_name.is_empty() || config.cluster_name.contains('\0') {
            return Err(LocalProviderError::InvalidConfig(format!(
                "cluster name {:?} must be non-empty text",
                config.cluster_name
            )));
        }
        if config.gcs_address.is_empty() {
            return Err(LocalProviderError::InvalidConfig(
                "the GCS address is empty".to_string(),
            ));
        }
        config.ray_binary = resolve_ray_binary(&config.ray_binary)?;
        for t in &config.node_types {
            validate_node_type(t)?;
        }
        std::fs::create_dir_all(&config.log_dir).map_err(|source| LocalProviderError::LogFile {
            path: config.log_dir.clone(),
            source,
        })?;
        Ok(LocalProcessProvider {
            inner: Arc::new(Inner {
                // One copy: the provider's, which a config reload replaces.
                node_types: Mutex::new(std::mem::take(&mut config.node_types)),
                config,
                state: Mutex::new(State::default()),
                launch_lock: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The config in use (`ray_binary` resolved; its node types moved into the provider,
    /// see [`Self::node_types`]).
    pub fn config(&self) -> &LocalProcessConfig {
        &self.inner.config
    }

    /// The node types launches follow now.
    pub fn node_types(&self) -> Vec<NodeTypeConfig> {
        self.inner
            .node_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The log file of an instance (stdout and stderr of its `ray start`).
    pub fn log_path(&self, cloud_instance_id: &str) -> PathBuf {
        self.inner.log_path(cloud_instance_id)
    }

    async fn launch_impl(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        let kind = |count| ProviderOp::Launch {
            request_id: request.request_id.clone(),
            node_type: request.node_type.clone(),
            count,
        };
        let fail = |e: LocalProviderError, count| Err(e.into_provider_error(kind(count)));
        let reason = if request.request_id.is_empty() {
            Some("it is empty")
        } else if request.request_id.contains('\0') {
            Some("it contains a NUL byte")
        } else {
            None
        };
        if let Some(reason) = reason {
            let id = request.request_id.clone();
            return fail(
                LocalProviderError::InvalidRequestId { id, reason },
                request.count,
            );
        }
        let cfg = &self.inner.config;
        let found = self
            .inner
            .node_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|t| t.name == request.node_type)
            .cloned();
        let Some(node_type) = found else {
            let e = LocalProviderError::UnknownNodeType(request.node_type.clone());
            return fail(e, request.count);
        };
        if request.count == 0 {
            return Ok(LaunchOutcome::accepted());
        }
        let _serial = self.inner.launch_lock.lock().await;
        let snapshot = match procfs::scan(&cfg.cluster_name) {
            Ok(s) => s,
            Err(e) => return fail(LocalProviderError::Proc(e), request.count),
        };
        let live = procfs::instances(&without_self(snapshot));
        let mut made = Vec::new();
        for k in 0..request.count {
            let id = instance_id(&request.request_id, k);
            if live.contains_key(&id) || self.inner.lock().launched.contains(&id) {
                continue;
            }
            if let Err(e) = self.inner.spawn(&id, &node_type, &request.request_id) {
                let error = e.into_provider_error(kind(request.count - k));
                if made.is_empty() {
                    return Err(error);
                }
                return Ok(LaunchOutcome {
                    instances: made,
                    shortfall: Some(error),
                });
            }
            let mut c = CloudInstance::worker(id, &node_type.name, Some(&request.request_id));
            c.state = CloudInstanceState::Pending;
            c.private_ip = Some(cfg.node_ip.clone());
            made.push(c);
        }
        Ok(LaunchOutcome {
            instances: made,
            shortfall: None,
        })
    }

    async fn list_impl(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        let snapshot = self.inner.scan()?;
        let observed = procfs::instances(&snapshot);
        let mut out = Vec::with_capacity(observed.len());
        let mut leaderless = Vec::new();
        {
            let mut st = self.inner.lock();
            let State {
                known_pgids,
                terminating,
                ..
            } = &mut *st;
            known_pgids.retain(|id, _| observed.contains_key(id) || terminating.contains(id));
            for (id, o) in &observed {
                if let Some(l) = o.leader {
                    known_pgids.insert(id.clone(), l);
                }
                let stopping = terminating.contains(id);
                if o.leader.is_none() && !stopping {
                    leaderless.push(id.clone());
                }
                let mut c = CloudInstance::worker(
                    id.clone(),
                    o.tags.node_type.clone(),
                    Some(o.tags.request_id.as_str()).filter(|r| !r.is_empty()),
                );
                c.state = if o.leader.is_some() && !stopping {
                    CloudInstanceState::Running
                } else {
                    CloudInstanceState::Stopping
                };
                c.private_ip = Some(self.inner.config.node_ip.clone());
                out.push(c);
            }
        }
        // What is left of an instance whose `ray start` died is no node any more: stop it.
        for id in leaderless {
            if let Err(e) = self.inner.begin_termination(&id, &snapshot) {
                let kind = ProviderOp::Terminate {
                    cloud_instance_id: id,
                };
                self.inner.lock().errors.push(e.into_provider_error(kind));
            }
        }
        Ok(out)
    }

    async fn terminate_impl(&self, ids: &[String]) -> Result<(), ProviderError> {
        let snapshot = self.inner.scan()?;
        let mut first_error = None;
        for id in ids {
            {
                let mut st = self.inner.lock();
                st.stop_requested.insert(id.clone());
                st.terminate_asked.insert(id.clone());
            }
            if let Err(e) = self.inner.begin_termination(id, &snapshot) {
                let kind = ProviderOp::Terminate {
                    cloud_instance_id: id.clone(),
                };
                first_error.get_or_insert(e.into_provider_error(kind));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[async_trait::async_trait]
impl CloudInstanceProvider for LocalProcessProvider {
    fn provider_type(&self) -> &str {
        crate::PROVIDER_TYPE
    }

    /// Every instance of the cluster with a live process, found in `/proc`; `is_running` is
    /// false while it is being stopped (or when its `ray start` is gone and the rest is
    /// being cleaned up).
    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        self.list_impl().await
    }

    /// Spawns the missing instances `local-<request_id>-<k>`, `k < count`, and reports them
    /// (pending until listed).
    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.launch_impl(request).await
    }

    /// SIGTERM to each instance's process group now, SIGKILL to what is left after the
    /// grace period (in the background). Unknown or gone instances succeed.
    async fn terminate(
        &self,
        cloud_instance_ids: &[String],
        _request_id: &str,
    ) -> Result<(), ProviderError> {
        self.terminate_impl(cloud_instance_ids).await
    }

    /// Unexpected exits of `ray start` (as launch errors) and instances that survived
    /// SIGKILL (as terminate errors), each once.
    async fn poll_errors(&self) -> Vec<ProviderError> {
        std::mem::take(&mut self.inner.lock().errors)
    }

    /// Launches from now on follow the new config's node types (each checked first; a
    /// type `ray start` cannot express keeps the old ones).
    async fn reconfigure(&self, config: &ClusterConfig) -> Result<(), ProviderError> {
        for t in &config.node_types {
            validate_node_type(t).map_err(|e| e.into_provider_error(ProviderOp::Other))?;
        }
        *self
            .inner
            .node_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = config.node_types.clone();
        Ok(())
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log_path(&self, id: &str) -> PathBuf {
        self.config.log_dir.join(format!("{}.log", file_safe(id)))
    }

    fn scan(&self) -> Result<Vec<ProcInfo>, LocalProviderError> {
        procfs::scan(&self.config.cluster_name)
            .map(without_self)
            .map_err(LocalProviderError::Proc)
    }

    /// Spawns one `ray start` and the task that reaps it.
    fn spawn(
        self: &Arc<Self>,
        id: &str,
        node_type: &NodeTypeConfig,
        request_id: &str,
    ) -> Result<(), LocalProviderError> {
        let cfg = &self.config;
        let log_path = self.log_path(id);
        let log_err = |source| LocalProviderError::LogFile {
            path: log_path.clone(),
            source,
        };
        let stdout = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(log_err)?;
        let stderr = stdout.try_clone().map_err(log_err)?;
        let mut cmd = tokio::process::Command::new(&cfg.ray_binary);
        cmd.args(ray_start_args(node_type, &cfg.gcs_address, &cfg.node_ip))
            .arg(format!(
                "--temp-dir={}",
                worker_temp_dir(&cfg.cluster_name, id).display()
            ))
            .envs(cfg.extra_env.iter().map(|(k, v)| (k, v)))
            .env(ENV_INSTANCE_ID, id)
            .env(ENV_NODE_TYPE, &node_type.name)
            .env(ENV_CLUSTER, &cfg.cluster_name)
            .env(ENV_REQUEST_ID, request_id)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .kill_on_drop(false);
        let child = cmd.spawn().map_err(|source| LocalProviderError::Spawn {
            instance_id: id.to_string(),
            source,
        })?;
        {
            let mut st = self.lock();
            st.launched.insert(id.to_string());
            st.children.insert(id.to_string());
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                st.known_pgids.insert(id.to_string(), pid);
            }
        }
        let exit = Exit {
            pgid: child.id().and_then(|p| i32::try_from(p).ok()),
            id: id.to_string(),
            node_type: node_type.name.clone(),
            request_id: request_id.to_string(),
            log_path,
        };
        tokio::spawn(self.clone().reap(child, exit));
        Ok(())
    }

    /// Waits for a spawned `ray start`; an exit nobody asked for is reported once and
    /// whatever the instance left behind is stopped.
    async fn reap(self: Arc<Self>, mut child: tokio::process::Child, exit: Exit) {
        let status = child.wait().await;
        let expected = {
            let mut st = self.lock();
            st.children.remove(&exit.id);
            st.stop_requested.remove(&exit.id)
        };
        if expected {
            return;
        }
        self.lock().died.insert(exit.id.clone());
        let status = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown status ({e})"),
        };
        let last = last_log_line(&exit.log_path)
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        let message = format!(
            "instance {} (node type {}): `ray start` exited ({status}) before it was \
             terminated; log {}{last}",
            exit.id,
            exit.node_type,
            exit.log_path.display()
        );
        self.lock().errors.push(ProviderError::new(
            ProviderOp::Instance {
                cloud_instance_id: exit.id.clone(),
                request_id: Some(exit.request_id).filter(|r| !r.is_empty()),
                node_type: exit.node_type,
            },
            ProviderErrorKind::Transient,
            message,
        ));
        if let Some(g) = exit.pgid {
            self.lock().known_pgids.insert(exit.id.clone(), g);
        }
        if let Ok(snapshot) = self.scan()
            && let Err(e) = self.begin_termination(&exit.id, &snapshot)
        {
            let kind = ProviderOp::Terminate {
                cloud_instance_id: exit.id,
            };
            self.lock().errors.push(e.into_provider_error(kind));
        }
    }

    /// Starts stopping an instance: SIGTERM to its leader's process group (to everything
    /// of it when the leader is gone), and a task that sends SIGKILL after the grace
    /// period. Does nothing when the instance is gone or already being stopped.
    fn begin_termination(
        self: &Arc<Self>,
        id: &str,
        snapshot: &[ProcInfo],
    ) -> Result<(), LocalProviderError> {
        let known = self.lock().known_pgids.get(id).copied();
        let found = procfs::targets(snapshot, id, known);
        if found.is_empty() {
            self.finish(id);
            return Ok(());
        }
        let leader_group = found.leader.or(known);
        {
            let mut st = self.lock();
            if !st.terminating.insert(id.to_string()) {
                return Ok(());
            }
            if let Some(g) = leader_group {
                st.known_pgids.insert(id.to_string(), g);
            }
        }
        let sent = match found.leader {
            // `ray start` shuts its raylet down, and the raylet its workers.
            Some(leader) => signal_group(leader, Signal::TERM),
            None => signal_all(&found, Signal::TERM),
        };
        tokio::spawn(self.clone().stop(id.to_string(), leader_group));
        sent
    }

    /// Waits up to the grace period for the instance to vanish (sending SIGTERM to any
    /// of its processes outside the leader's group once that group is gone), then sends
    /// SIGKILL to everything left until nothing is.
    async fn stop(self: Arc<Self>, id: String, leader_group: Option<i32>) {
        let grace_ticks = self.config.grace_period.as_millis() / POLL.as_millis();
        let mut strays_told = false;
        for _ in 0..grace_ticks {
            tokio::time::sleep(POLL).await;
            let Some(left) = self.targets(&id, leader_group) else {
                continue;
            };
            if left.is_empty() {
                self.finish(&id);
                return;
            }
            if !strays_told && leader_group.is_none_or(|g| !left.groups.contains(&g)) {
                // Best effort: a failure here is retried with SIGKILL below.
                let _ = signal_all(&left, Signal::TERM);
                strays_told = true;
            }
        }
        let mut last_error = None;
        for _ in 0..KILL_WAIT.as_millis() / POLL.as_millis() {
            if let Some(left) = self.targets(&id, leader_group) {
                if left.is_empty() {
                    self.finish(&id);
                    return;
                }
                last_error = signal_all(&left, Signal::KILL).err();
            }
            tokio::time::sleep(POLL).await;
        }
        let message = match last_error {
            Some(e) => e.to_string(),
            None => format!(
                "instance {id} still has processes {} s after SIGKILL",
                KILL_WAIT.as_secs()
            ),
        };
        self.lock().errors.push(ProviderError::new(
            ProviderOp::Terminate {
                cloud_instance_id: id,
            },
            ProviderErrorKind::Transient,
            message,
        ));
    }

    fn targets(&self, id: &str, leader_group: Option<i32>) -> Option<Targets> {
        let snapshot = self.scan().ok()?;
        Some(procfs::targets(&snapshot, id, leader_group))
    }

    /// The instance is gone: forget its transient state, and remove what it left on
    /// disk.
    fn finish(&self, id: &str) {
        let (asked, died) = {
            let mut st = self.lock();
            st.terminating.remove(id);
            st.known_pgids.remove(id);
            if !st.children.contains(id) {
                st.stop_requested.remove(id);
            }
            (st.terminate_asked.remove(id), st.died.contains(id))
        };
        if !died {
            self.clean_up(id, asked);
        }
    }

    /// Removes a gone instance's Ray temp dir (its session: logs, sockets, spilled
    /// objects), and its `ray start` log when the autoscaler terminated it; off the async
    /// threads when a runtime is there (a session with spilled objects can be large).
    fn clean_up(&self, id: &str, remove_log: bool) {
        let dir = worker_temp_dir(&self.config.cluster_name, id);
        let log = remove_log.then(|| self.log_path(id));
        let id = id.to_string();
        let work = move || {
            let gone = |r: std::io::Result<()>, what: &Path| match r {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(
                        "cannot remove {} of gone instance {id}: {e}",
                        what.display()
                    );
                }
                _ => {}
            };
            gone(std::fs::remove_dir_all(&dir), &dir);
            if let Some(log) = log {
                gone(std::fs::remove_file(&log), &log);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(work);
            }
            Err(_) => work(),
        }
    }
}

/// What the reaper needs to report an exit.
#[derive(Debug)]
struct Exit {
    /// The process group `ray start` made (its pid).
    pgid: Option<i32>,
    id: String,
    node_type: String,
    request_id: String,
    log_path: PathBuf,
}

/// Drops this process's own tags (rayscale itself must never count as a worker).
fn without_self(mut snapshot: Vec<ProcInfo>) -> Vec<ProcInfo> {
    let me = rustix::process::getpid().as_raw_pid();
    for p in snapshot.iter_mut().filter(|p| p.pid == me) {
        p.tags = None;
    }
    snapshot
}

/// Sends `sig` to every group and process of `targets`; the first failure is returned,
/// after trying all.
fn signal_all(targets: &Targets, sig: Signal) -> Result<(), LocalProviderError> {
    let mut first = Ok(());
    for g in &targets.groups {
        let r = signal_group(*g, sig);
        if first.is_ok() {
            first = r;
        }
    }
    for p in &targets.pids {
        let r = signal_pid(*p, sig);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

fn signal_name(sig: Signal) -> &'static str {
    if sig == Signal::KILL { "KILL" } else { "TERM" }
}

/// False for ids that must never be signalled: 0 and below, 1 (`kill(-1)` reaches every
/// process of the user), this process and its process group.
fn may_signal(id: i32) -> bool {
    id > 1
        && id != rustix::process::getpid().as_raw_pid()
        && id != rustix::process::getpgrp().as_raw_pid()
}

/// `kill(-pgid, sig)`; a group that is gone is fine (see [`may_signal`]).
fn signal_group(pgid: i32, sig: Signal) -> Result<(), LocalProviderError> {
    if !may_signal(pgid) {
        return Ok(());
    }
    let Some(pid) = Pid::from_raw(pgid) else {
        return Ok(());
    };
    match rustix::process::kill_process_group(pid, sig) {
        Ok(()) | Err(Errno::SRCH) => Ok(()),
        Err(e) => Err(LocalProviderError::Signal {
            signal: signal_name(sig),
            target: format!("process group {pgid}"),
            source: e.into(),
        }),
    }
}

/// `kill(pid, sig)`; a process that is gone is fine (see [`may_signal`]).
fn signal_pid(pid: i32, sig: Signal) -> Result<(), LocalProviderError> {
    if !may_signal(pid) {
        return Ok(());
    }
    let Some(p) = Pid::from_raw(pid) else {
        return Ok(());
    };
    match rustix::process::kill_process(p, sig) {
        Ok(()) | Err(Errno::SRCH) => Ok(()),
        Err(e) => Err(LocalProviderError::Signal {
            signal: signal_name(sig),
            target: format!("process {pid}"),
            source: e.into(),
        }),
    }
}

/// `path` if it is an executable file; a bare name is looked up on `PATH`.
fn resolve_ray_binary(path: &Path) -> Result<PathBuf, LocalProviderError> {
    let bare = !path.as_os_str().is_empty() && path.components().count() == 1 && {
        let s = path.as_os_str().as_encoded_bytes();
        !s.contains(&b'/')
    };
    let candidate = if bare {
        let dirs = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&dirs)
            .map(|d| d.join(path))
            .find(|c| c.is_file())
            .ok_or_else(|| LocalProviderError::RayBinaryNotFound(path.to_path_buf()))?
    } else {
        path.to_path_buf()
    };
    let meta = std::fs::metadata(&candidate)
        .map_err(|_| LocalProviderError::RayBinaryNotFound(candidate.clone()))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(LocalProviderError::RayBinaryNotExecutable(candidate));
    }
    Ok(candidate)
}

/// `s` with every character outside `[A-Za-z0-9_-]` replaced by `_` (and `.` kept), fit
/// for a file name.
fn file_safe(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with('.') {
        format!("_{out}")
    } else {
        out
    }
}

/// The last non-empty line of a log file, without terminal escapes, shortened.
fn last_log_line(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().map(strip_escapes).rfind(|l| !l.is_empty())?;
    Some(line.chars().take(LOG_LINE_MAX).collect())
}

/// Removes ANSI escape sequences and control characters; trims.
fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ params final-byte (a letter).
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else if !c.is_control() {
            out.push(c);
        }
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(file_safe("local-r/1-0"), "local-r_1-0");
        assert_eq!(file_safe("..x"), "_..x");
        assert_eq!(file_safe("a b.c"), "a_b.c");
    }

    #[test]
    fn escapes_are_stripped() {
        assert_eq!(
            strip_escapes("\u{1b}[36m\u{1b}[1m--block\u{1b}[22m\u{1b}[39m done\r"),
            "--block done"
        );
    }

    #[test]
    fn never_signals_everyone_or_itself() {
        // kill(-1) would reach every process of the user, kill(0) our own group.
        let me = rustix::process::getpid().as_raw_pid();
        let my_group = rustix::process::getpgrp().as_raw_pid();
        for protected in [-5, 0, 1, me, my_group] {
            assert!(!may_signal(protected), "{protected}");
        }
        assert!(may_signal(i32::MAX));
    }

    #[test]
    fn config_defaults() {
        let c = LocalProcessConfig::new("my cluster", "127.0.0.1:1", "/x/ray", Vec::new());
        assert_eq!(c.grace_period, Duration::from_secs(10));
        assert_eq!(c.node_ip, "127.0.0.1");
        assert!(c.log_dir.ends_with("rayscale-my_cluster/logs"));
    }
}
