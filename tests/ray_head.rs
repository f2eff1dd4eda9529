//! [`RayHead`]: a real Ray head node (GCS + raylet) for live tests, started with the
//! Ray of the venv named by `RAYSCALE_PYTHON`.
//!
//! Each head gets free loopback ports (GCS, Ray client server, dashboard agent), a short
//! unique temp dir (`/tmp/rs-<pid>-<n>`, where Ray keeps its own logs), and its own
//! process group. Stopping kills exactly this head's processes, never `ray stop` (which
//! would kill every cluster on the machine, including other tests'): the members of the
//! process groups of its `ray start` runs, processes whose command line names its temp
//! dir, and their descendants (agents and workers rename themselves, e.g.
//! `ray::DashboardAgent`); SIGTERM first, SIGKILL after a short grace. Dropping a head
//! stops it and removes its temp dir.
//!
//! Worker nodes that join a head (started by other code with `--address` set to
//! [`RayHead::addr`], possibly through [`RayHead::ray_bin`]) and autoscalers pointed at it
//! are NOT stopped with it, not even by [`RayHead::restart`]: whoever starts them owns them.
//!
//! No Python or Ray is silently skipped: a missing `RAYSCALE_PYTHON` or a venv without
//! `ray` panics with instructions.

use std::collections::BTreeSet;
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rayscale_gcs_client::client::{ClientOptions, GcsClient};
pub use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;

/// How long `ray start --head` plus the head node's registration may take.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long stopped processes get between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

static NEXT_ID: AtomicU32 = AtomicU32::new(0);
/// Serializes `ray start` within one test binary: parallel starts on a 2-core machine
/// only slow each other down.
static START_LOCK: Mutex<()> = Mutex::new(());

/// Extra settings of a head.
#[derive(Debug, Clone, Default)]
pub struct RayHeadOptions {
    /// Arguments appended to `ray start --head ...` (e.g. `--resources={"a": 1}`).
    pub extra_args: Vec<String>,
    /// Environment variables for Ray's processes (e.g. `RAY_enable_autoscaler_v2=1`).
    pub env: Vec<(String, String)>,
    /// The GCS port (default: a free one), for configs that must name it beforehand.
    pub port: Option<u16>,
}

/// Ray's fake head node id (`fake_multi_node/node_provider.py`).
pub const FAKE_HEAD: &str = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000";

/// The environment of a head as Ray's fake-cluster harness (`AutoscalingCluster`) starts
/// it: the fake provider's head id, autoscaler v2.
pub fn fake_cluster_env() -> Vec<(String, String)> {
    [
        ("RAY_FAKE_CLUSTER", "1"),
        ("RAY_enable_autoscaler_v2", "1"),
        ("RAY_CLOUD_INSTANCE_ID", FAKE_HEAD),
        ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", FAKE_HEAD),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl RayHeadOptions {
    /// A head for an external autoscaler, as the docs say to start one:
    /// `RAY_enable_autoscaler_v2=1 ray start --head --no-monitor`, with the head's node type
    /// named `head_type` (so `ray status` lists it under its type).
    pub fn external_autoscaler(head_type: &str) -> Self {
        RayHeadOptions {
            port: None,
            extra_args: vec!["--no-monitor".into()],
            env: vec![
                ("RAY_enable_autoscaler_v2".into(), "1".into()),
                ("RAY_NODE_TYPE_NAME".into(), head_type.into()),
            ],
        }
    }
}

/// A running (or stopped) Ray head node owned by a test.
#[derive(Debug)]
pub struct RayHead {
    python: PathBuf,
    ray: PathBuf,
    temp_dir: PathBuf,
    port: u16,
    client_server_port: u16,
    agent_listen_port: u16,
    options: RayHeadOptions,
    /// Process groups of every `ray start` of this head.
    pgids: Vec<u32>,
    running: bool,
    last_start: Duration,
    last_ray_start: Duration,
}

/// The venv's python from `RAYSCALE_PYTHON` and the `ray` beside it; panics with a clear
/// message when either is missing.
pub fn ray_from_env() -> (PathBuf, PathBuf) {
    let python = match std::env::var_os("RAYSCALE_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "RAYSCALE_PYTHON is not set: live tests need a real Ray 2.60. Set it to the \
             python of a venv with `pip install 'ray[default]==2.60.0'`, e.g. \
             RAYSCALE_PYTHON=/opt/rayscale-venv/bin/python"
        ),
    };
    let ray = python
        .parent()
        .map(|d| d.join("ray"))
        .unwrap_or_else(|| PathBuf::from("ray"));
    if !python.exists() {
        panic!(
            "RAYSCALE_PYTHON={} does not exist (expected a venv's python)",
            python.display()
        );
    }
    if !ray.is_file() {
        panic!(
            "no `ray` next to RAYSCALE_PYTHON={} (looked for {}): install \
             'ray[default]==2.60.0' into that venv",
            python.display(),
            ray.display()
        );
    }
    (python, ray)
}

/// `n` distinct ports that were free on loopback a moment ago.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// Whether `hay` contains `needle` followed by a character that cannot continue a path
/// component or a number (so `/tmp/rs-1-1` does not match `/tmp/rs-1-10`).
pub fn contains_token(hay: &str, needle: &str) -> bool {
    let mut from = 0;
    while let Some(i) = hay[from..].find(needle) {
        let end = from + i + needle.len();
        match hay[end..].chars().next() {
            None => return true,
            Some(c) if !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') => {
                return true;
            }
            _ => from = from + i + 1,
        }
    }
    false
}

/// One process as seen in `/proc`.
#[derive(Debug, Clone)]
struct ProcInfo {
    pid: u32,
    ppid: u32,
    pgid: u32,
    zombie: bool,
    cmdline: String,
}

fn read_proc(pid: u32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; comm may contain spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    let mut raw = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/cmdline"))
        .and_then(|mut f| f.read_to_end(&mut raw))
        .ok()?;
    let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
    Some(ProcInfo {
        pid,
        ppid,
        pgid,
        zombie: state == "Z" || state == "X",
        cmdline,
    })
}

fn all_procs() -> Vec<ProcInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read_proc)
        .collect()
}

fn alive(pid: u32) -> bool {
    read_proc(pid).is_some_and(|p| !p.zombie)
}

fn signal(sig: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    // Errors (a process already gone) are expected and ignored.
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl RayHead {
    /// Starts a head with default settings; panics (with Ray's output) if it does not come
    /// up. Blocks for several seconds: from async code prefer
    /// `tokio::task::spawn_blocking(RayHead::start)`.
    pub fn start() -> RayHead {
        Self::start_with(RayHeadOptions::default())
    }

    /// Starts a head with `options`.
    pub fn start_with(options: RayHeadOptions) -> RayHead {
        let (python, ray) = ray_from_env();
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let temp_dir = PathBuf::from(format!("/tmp/rs-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&temp_dir);
        std::fs::create_dir_all(&temp_dir).expect("create the head's temp dir");
        let ports = free_ports(3);
        let mut head = RayHead {
            python,
            ray,
            temp_dir,
            port: options.port.unwrap_or(ports[0]),
            client_server_port: ports[1],
            agent_listen_port: ports[2],
            options,
            pgids: Vec::new(),
            running: false,
            last_start: Duration::ZERO,
            last_ray_start: Duration::ZERO,
        };
        head.launch();
        head
    }

    /// `127.0.0.1:<port>`, the GCS address.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The GCS port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Ray's temp dir of this head (its logs are under `session_latest/logs`).
    pub fn temp_dir(&self) -> &Path {
        &self.temp_dir
    }

    /// The venv's python (`RAYSCALE_PYTHON`).
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// The venv's `ray` executable.
    pub fn ray_bin(&self) -> &Path {
        &self.ray
    }

    /// How long the last start took: `ray start` plus the head node showing up in
    /// `GetClusterResourceState`.
    pub fn last_start_duration(&self) -> Duration {
        self.last_start
    }

    /// How long the last `ray start --head` command itself ran (it returns once the
    /// processes are up; the head node may register a little later).
    pub fn last_ray_start_duration(&self) -> Duration {
        self.last_ray_start
    }

    /// Whether the head is started (not stopped).
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Alive worker nodes (neither the head nor dead) by cloud instance id; empty when
    /// the GCS does not answer within 3 s.
    pub fn alive_workers(&self) -> Vec<String> {
        alive_workers_at(&self.addr())
    }

    /// A GCS client of this head with `options`. Must be called inside a tokio runtime.
    pub fn client(&self, options: ClientOptions) -> GcsClient {
        GcsClient::new(&self.addr(), options).expect("GCS client of a RayHead")
    }

    fn launch(&mut self) {
        let _serial = START_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let started = Instant::now();
        let out_path = self.temp_dir.join("ray-start.out");
        let out = std::fs::File::create(&out_path).expect("create ray-start.out");
        let err = out.try_clone().expect("clone ray-start.out");
        let mut cmd = Command::new(&self.ray);
        cmd.arg("start")
            .arg("--head")
            .arg("--node-ip-address=127.0.0.1")
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--ray-client-server-port={}",
                self.client_server_port
            ))
            .arg(format!(
                "--dashboard-agent-listen-port={}",
                self.agent_listen_port
            ))
            .arg("--num-cpus=0")
            .arg("--include-dashboard=false")
            .arg("--disable-usage-stats")
            .arg(format!("--temp-dir={}", self.temp_dir.display()))
            .args(&self.options.extra_args)
            .env_remove("RAY_ADDRESS")
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.temp_dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.ray.display()));
        self.pgids.push(child.id());
        self.running = true;
        let deadline = started + START_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    self.stop();
                    panic!(
                        "`ray start --head` did not finish within {START_TIMEOUT:?}; its \
                         output:\n{}",
                        tail(&out_path, 30)
                    );
                }
            }
        };
        self.last_ray_start = started.elapsed();
        if !status.success() {
            self.stop();
            panic!(
                "`ray start --head --port={}` failed ({status}); its output:\n{}",
                self.port,
                tail(&out_path, 30)
            );
        }
        if let Err(e) = self.wait_until_head_registered(deadline) {
            self.stop();
            panic!(
                "the GCS at {} did not show the head node: {e}; ray start said:\n{}\n\
                 gcs_server.err:\n{}",
                self.addr(),
                tail(&out_path, 15),
                tail(
                    &self.temp_dir.join("session_latest/logs/gcs_server.err"),
                    15
                )
            );
        }
        self.last_start = started.elapsed();
    }

    /// Polls the GCS (from a helper thread with its own runtime, so this works from sync
    /// and async callers alike) until the head node is in `GetClusterResourceState`.
    fn wait_until_head_registered(&self, deadline: Instant) -> Result<(), String> {
        let addr = self.addr();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot build a runtime: {e}"))?;
            rt.block_on(async move {
                let opts = ClientOptions {
                    deadline: Duration::from_secs(2),
                    max_attempts: 1,
                    ..ClientOptions::default()
                };
                let client = GcsClient::new(&addr, opts).map_err(|e| e.to_string())?;
                let mut last = String::from("no answer yet");
                while Instant::now() < deadline {
                    if TcpStream::connect_timeout(
                        &addr.parse().map_err(|e| format!("{addr}: {e}"))?,
                        Duration::from_millis(500),
                    )
                    .is_ok()
                    {
                        match client.get_cluster_resource_state(0).await {
                            Ok(s) if s.node_states.iter().any(is_head_node) => return Ok(()),
                            Ok(s) => last = format!("{} node(s), no head", s.node_states.len()),
                            Err(e) => last = e.to_string(),
                        }
                    } else {
                        last = "nothing listens on the GCS port".into();
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(last)
            })
        })
        .join()
        .map_err(|_| "the readiness thread panicked".to_string())?
    }

    /// The pids of this head's live processes (see the module docs for how they are
    /// found), excluding the calling process. Workers joined to the head are not included.
    pub fn pids(&self) -> Vec<u32> {
        let me = std::process::id();
        let procs = all_procs();
        let dir = self.temp_dir.to_string_lossy().into_owned();
        let mut set: BTreeSet<u32> = procs
            .iter()
            .filter(|p| p.pid != me && !p.zombie)
            .filter(|p| self.pgids.contains(&p.pgid) || contains_token(&p.cmdline, &dir))
            .map(|p| p.pid)
            .collect();
        // Descendants: agents and workers rename themselves (`ray::DashboardAgent`, ...).
        loop {
            let before = set.len();
            for p in &procs {
                if p.pid != me && !p.zombie && set.contains(&p.ppid) {
                    set.insert(p.pid);
                }
            }
            if set.len() == before {
                break;
            }
        }
        set.into_iter().collect()
    }

    /// Kills this head's processes (SIGTERM, then SIGKILL after a short grace) and waits
    /// until they are gone. The temp dir and ports are kept for [`start_again`].
    ///
    /// [`start_again`]: Self::start_again
    pub fn stop(&mut self) {
        let pids = self.pids();
        signal("TERM", &pids);
        let grace_end = Instant::now() + TERM_GRACE;
        while Instant::now() < grace_end && pids.iter().any(|p| alive(*p)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Kill survivors and anything that appeared meanwhile (e.g. a worker).
        for _ in 0..50 {
            let left = self.pids();
            if left.is_empty() {
                break;
            }
            signal("KILL", &left);
            std::thread::sleep(Duration::from_millis(100));
        }
        self.running = false;
    }

    /// Starts a stopped head again on the same ports and temp dir (a new Ray session: the
    /// GCS keeps no state across restarts without external storage).
    pub fn start_again(&mut self) {
        if self.running {
            self.stop();
        }
        self.launch();
    }

    /// [`stop`](Self::stop), then [`start_again`](Self::start_again).
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Waits until the GCS reports at least `n` nodes that are not dead and returns the
    /// state; panics after `timeout`.
    pub async fn wait_for_alive_nodes(
        &self,
        client: &GcsClient,
        n: usize,
        timeout: Duration,
    ) -> pb::ClusterResourceState {
        let end = tokio::time::Instant::now() + timeout;
        let mut last: String;
        loop {
            match client.get_cluster_resource_state(0).await {
                Ok(s) => {
                    let alive = s
                        .node_states
                        .iter()
                        .filter(|n| n.status != pb::NodeStatus::Dead as i32)
                        .count();
                    if alive >= n {
                        return s;
                    }
                    last = format!("{alive} alive node(s)");
                }
                Err(e) => last = e.to_string(),
            }
            if tokio::time::Instant::now() >= end {
                panic!(
                    "the GCS at {} did not report {n} alive node(s) within {timeout:?}: {last}",
                    self.addr()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Alive worker nodes (neither the head nor dead) of the GCS at `addr`, by cloud
/// instance id; empty when it does not answer within 3 s.
pub fn alive_workers_at(addr: &str) -> Vec<String> {
    workers_at(addr)
        .into_iter()
        .filter(|w| w.status != pb::NodeStatus::Dead)
        .map(|w| w.instance_id)
        .collect()
}

/// A worker node as the GCS reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Worker {
    /// Its cloud instance id.
    pub instance_id: String,
    /// Its Ray node type.
    pub node_type: String,
    /// Its status.
    pub status: pb::NodeStatus,
    /// Whether some of its CPUs are in use.
    pub busy: bool,
    /// Its total resources.
    pub total: std::collections::BTreeMap<String, f64>,
}

/// The worker nodes (not the head) of the GCS at `addr`, dead ones too; empty when it
/// does not answer within 3 s.
pub fn workers_at(addr: &str) -> Vec<Worker> {
    try_workers_at(addr).unwrap_or_default()
}

/// Alive worker nodes (neither the head nor dead) of the GCS at `addr`, by cloud
/// instance id; an error when it does not answer within 3 s (so a caller can tell "no
/// workers" from "no answer").
pub fn try_alive_workers_at(addr: &str) -> Result<Vec<String>, String> {
    Ok(try_workers_at(addr)?
        .into_iter()
        .filter(|w| w.status != pb::NodeStatus::Dead)
        .map(|w| w.instance_id)
        .collect())
}

/// The worker nodes (not the head) of the GCS at `addr`, dead ones too; an error when it
/// does not answer within 3 s.
pub fn try_workers_at(addr: &str) -> Result<Vec<Worker>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build a runtime: {e}"))?;
    rt.block_on(async {
        let c = GcsClient::new(
            addr,
            ClientOptions {
                deadline: Duration::from_secs(3),
                max_attempts: 1,
                ..Default::default()
            },
        )
        .map_err(|e| format!("GCS client of {addr}: {e}"))?;
        let s = c
            .get_cluster_resource_state(0)
            .await
            .map_err(|e| format!("GetClusterResourceState at {addr}: {e}"))?;
        Ok(s.node_states
            .iter()
            .filter(|n| !is_head_node(n))
            .map(|n| Worker {
                instance_id: n.instance_id.clone(),
                node_type: n.ray_node_type_name.clone(),
                status: pb::NodeStatus::try_from(n.status).unwrap_or(pb::NodeStatus::Unspecified),
                busy: n.available_resources.get("CPU").copied().unwrap_or(0.0)
                    < n.total_resources.get("CPU").copied().unwrap_or(0.0),
                total: n
                    .total_resources
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect(),
            })
            .collect())
    })
}

/// Whether `n` is the head node (it has the `node:__internal_head__` resource).
pub fn is_head_node(n: &pb::NodeState) -> bool {
    n.total_resources.contains_key("node:__internal_head__")
}

impl Drop for RayHead {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.temp_dir);
    }
}
