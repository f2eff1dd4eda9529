//! rayscale's live loop against a real Ray 2.60 head (`ray start --head`, from the venv in
//! `RAYSCALE_PYTHON`), with workers as local `ray start --block` processes: scale-up from
//! zero, idle scale-down through DrainNode, STRICT_SPREAD placement groups,
//! `request-resources`, infeasible demand in `ray status`, crash safety (`kill -9` in the
//! middle of a scale-up), a GCS restart, and bad input. The tests run one at a time (a Ray
//! cluster is heavy on a 2-core machine).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rayscale_gcs_client::client::ClientOptions;
use rayscale_tests::Scratch;
use rayscale_tests::ray_head::{RayHead, RayHeadOptions};

static SERIAL: Mutex<()> = Mutex::new(());

fn rayscale_bin() -> PathBuf {
    rayscale_tests::workspace_bin("rayscale")
}

fn config_text(cluster: &str, idle_minutes: f64) -> String {
    format!(
        "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: {idle_minutes}\n\
         head_node_type: head\nprovider: {{type: local_processes}}\navailable_node_types:\n  \
         head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n  \
         worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{}}}}\n"
    )
}

/// A running `rayscale run` process.
struct Loop {
    child: Child,
    log: PathBuf,
}

impl Loop {
    fn start(head: &RayHead, config: &Path, log: PathBuf) -> Loop {
        Self::start_at(&head.addr(), head, config, log)
    }

    /// `rayscale run` against the GCS at `gcs` (the head's, or a proxy in front of it).
    fn start_at(gcs: &str, head: &RayHead, config: &Path, log: PathBuf) -> Loop {
        Self::spawn(gcs, head, config, log, &["--interval", "2"], &[])
    }

    /// `rayscale run` with its defaults against the GCS at `gcs`, with `env` added to its
    /// environment (which the workers it launches inherit).
    fn start_defaults_at(
        gcs: &str,
        head: &RayHead,
        config: &Path,
        log: PathBuf,
        env: &[(&str, &str)],
    ) -> Loop {
        Self::spawn(gcs, head, config, log, &[], env)
    }

    fn spawn(
        gcs: &str,
        head: &RayHead,
        config: &Path,
        log: PathBuf,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Loop {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = Command::new(rayscale_bin())
            .arg("run")
            .args(args)
            .args(["--gcs", gcs, "--ray"])
            .arg(head.ray_bin())
            .arg("--config")
            .arg(config)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("rayscale starts");
        Loop { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.log_text().contains(needle))
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM and waits (at most `timeout`) for the exit status.
    fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        self.kill9();
    }
}

use rayscale_tests::wait_until;

/// Process ids whose environment says they belong to `cluster` (worker `ray start`
/// processes and everything they started).
fn cluster_processes(cluster: &str) -> Vec<u32> {
    rayscale_tests::processes_with_env(&format!("RAYSCALE_CLUSTER={cluster}"))
}

/// Kills every process of `cluster` (test cleanup).
fn kill_cluster(cluster: &str) {
    rayscale_tests::kill_with_env(&format!("RAYSCALE_CLUSTER={cluster}"));
}

/// Alive worker nodes in the GCS, by cloud instance id. A GCS that does not answer (a 3 s
/// deadline, on a busy 2-core machine) is asked again rather than read as "no workers",
/// which would fail a one-shot count or pass a wait for fewer nodes; one that stays silent
/// for 30 s fails the test.
fn alive_workers(head: &RayHead) -> Vec<String> {
    let t = Instant::now();
    loop {
        match rayscale_tests::ray_head::try_alive_workers_at(&head.addr()) {
            Ok(w) => return w,
            Err(e) if t.elapsed() >= Duration::from_secs(30) => {
                panic!("the GCS did not answer for {:?}: {e}", t.elapsed())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

fn python() -> PathBuf {
    PathBuf::from(
        std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON must name the venv's python"),
    )
}

fn workload(head: &RayHead, args: &[&str]) -> Child {
    rayscale_tests::e2e::start_workload(&python(), &head.addr(), args)
}

fn finish(child: Child, timeout: Duration) -> (bool, String) {
    let pid = child.id();
    let t = Instant::now();
    let mut child = child;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t.elapsed() < timeout => std::thread::sleep(Duration::from_millis(300)),
            _ => {
                let _ = child.kill();
                break;
            }
        }
    }
    let out: Output = child.wait_with_output().expect("workload output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = pid;
    (out.status.success(), text)
}

/// One live test's world: its cluster name, scratch dir with the cluster YAML and a head
/// with `--num-cpus=0` (every task needs a worker). The tests run one at a time; the
/// cluster's worker processes are killed at the end.
struct Fixture {
    cluster: String,
    scratch: Scratch,
    config: PathBuf,
    head: RayHead,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Fixture {
    /// A cluster whose head is started for an external autoscaler (v2, no Ray monitor).
    fn new(name: &str, idle_minutes: f64) -> Fixture {
        Self::with_head(
            name,
            idle_minutes,
            RayHeadOptions::external_autoscaler("head"),
        )
    }

    fn with_head(name: &str, idle_minutes: f64, options: RayHeadOptions) -> Fixture {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let cluster = format!("{name}{}", std::process::id());
        let scratch = Scratch::new(&format!("live-{name}"));
        let config = scratch.path("cluster.yaml");
        std::fs::write(&config, config_text(&cluster, idle_minutes)).expect("config");
        Fixture {
            cluster,
            scratch,
            config,
            head: RayHead::start_with(options),
            _serial: serial,
        }
    }

    fn start_loop(&self) -> Loop {
        Loop::start(&self.head, &self.config, self.scratch.path("rayscale.log"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        kill_cluster(&self.cluster);
    }
}

#[test]
fn scale_up_from_zero_then_idle_scale_down_through_drain() {
    let f = Fixture::new("up", 0.2);
    let (cluster, head) = (f.cluster.clone(), &f.head);
    let lp = f.start_loop();
    let w = workload(head, &["tasks", "8", "1", "3"]);
    let (ok, out) = finish(w, Duration::from_secs(180));
    let log = lp.log_text();
    assert!(
        ok && out.contains("done 8"),
        "workload failed: {out}\nrayscale log:\n{log}"
    );
    assert!(log.contains("launching"), "{log}");
    assert_no_traceback(&out);
    // Idle for 12 s: drained through the GCS, then terminated; no process left.
    let gone = wait_until(Duration::from_secs(90), || {
        alive_workers(head).is_empty() && cluster_processes(&cluster).is_empty()
    });
    let log = lp.log_text();
    assert!(
        gone,
        "workers still there: {:?}\n{log}",
        cluster_processes(&cluster)
    );
    assert!(log.contains("draining"), "no drain in the log:\n{log}");
}

#[test]
fn nested_tasks_run_to_the_end_and_no_busy_worker_is_drained() {
    // Parents blocked in `ray.get` lend their CPUs to their children; once resumed, a node
    // runs more tasks than it has CPUs (Ray then reports it with no CPU entry). Nothing of
    // that may read as an idle or a dead node: every task finishes, and no worker is
    // drained or terminated while the workload runs.
    let f = Fixture::new("nested", 0.5);
    let head = &f.head;
    let lp = f.start_loop();
    let w = workload(head, &["nested", "6", "2", "4"]);
    let (ok, out) = finish(w, Duration::from_secs(240));
    let log = lp.log_text();
    assert!(
        ok && out.contains("done 6"),
        "workload failed: {out}\nrayscale log:\n{log}"
    );
    assert!(log.contains("launching"), "{log}");
    for harm in [
        "draining",
        "stopping ray",
        "terminating",
        "cannot read the GCS row",
    ] {
        assert!(
            !log.contains(harm),
            "{harm:?} while the workload ran:\n{log}"
        );
    }
}

/// Ray's own GCS client drops a connection whose HTTP/2 handshake is not done within
/// `gcs_grpc_min_reconnect_backoff_ms` (gRPC's minimum connect timeout, at most 2 s with
/// Ray's defaults): with every answer 2.5 s late, no worker node would ever join. Ray's
/// settings for a high-latency GCS, which the workers inherit from rayscale.
const SLOW_GCS_RAY_ENV: [(&str, &str); 3] = [
    ("RAY_gcs_grpc_initial_reconnect_backoff_ms", "15000"),
    ("RAY_gcs_grpc_min_reconnect_backoff_ms", "15000"),
    ("RAY_gcs_grpc_max_reconnect_backoff_ms", "15000"),
];

#[test]
fn run_with_its_defaults_serves_a_gcs_that_answers_two_and_a_half_seconds_late() {
    // Every GCS answer 2.5 s late, for rayscale's calls (lease, state, table, report,
    // drain) and for the workers it launches (they join the GCS at `--gcs`): `rayscale
    // run` with its defaults scales a 2-task job up, and the cluster back to zero, with
    // one lease epoch throughout. Measured before: the test ran no job; the proxy on
    // 127.0.0.1 was never reached by a worker (Ray's `ray start` replaces a loopback
    // address by the host's IP), and through a reachable one Ray's GCS client gave up on
    // every connection (see SLOW_GCS_RAY_ENV): the job never ran. Measured now: the
    // first launch about 25 s after the lease, the job done in about 100 s.
    let f = Fixture::new("slowgcs", 0.2);
    let proxy = rayscale_tests::delay_proxy::DelayProxy::start_on(
        "127.0.0.2",
        &f.head.addr(),
        Duration::from_millis(2500),
    );
    let mut lp = Loop::start_defaults_at(
        &proxy.addr,
        &f.head,
        &f.config,
        f.scratch.path("rayscale.log"),
        &SLOW_GCS_RAY_ENV,
    );
    assert!(
        lp.wait_log("holding the autoscaler lease", Duration::from_secs(90)),
        "{}",
        lp.log_text()
    );
    let (ok, out) = finish(
        workload(&f.head, &["tasks", "2", "2", "5"]),
        Duration::from_secs(240),
    );
    assert!(
        ok && out.contains("done 2"),
        "workload failed: {out}\nrayscale log:\n{}",
        lp.log_text()
    );
    // Idle for 12 s: drained and terminated through the slow GCS; no process left.
    let gone = wait_until(Duration::from_secs(120), || {
        alive_workers(&f.head).is_empty() && cluster_processes(&f.cluster).is_empty()
    });
    assert!(lp.alive(), "{}", lp.log_text());
    let log = lp.log_text();
    assert!(
        gone,
        "workers still there: {:?}\n{log}",
        cluster_processes(&f.cluster)
    );
    assert!(
        log.contains("launching") && log.contains("draining"),
        "{log}"
    );
    // One rayscale acts: one epoch for the whole run, never given up.
    assert_eq!(
        log.matches("holding the autoscaler lease").count(),
        1,
        "{log}"
    );
    for bad in ["no Ray GCS answers", "no longer acting", "giving it up"] {
        assert!(!log.contains(bad), "{bad:?}:\n{log}");
    }
}

/// Ray prints a traceback per log line into every job when the v2 flag is turned on for a
/// head whose log monitor runs in v1 mode (measured: 219 in a 10 s job).
fn assert_no_traceback(job_output: &str) {
    for bad in ["Traceback", "Failed to parse event"] {
        assert!(
            !job_output.contains(bad),
            "the job printed {bad:?}:\n{job_output}"
        );
    }
}

#[test]
fn a_head_started_without_v2_is_autoscaled_without_tracebacks_and_told_once() {
    let f = Fixture::with_head("v1", 0.2, RayHeadOptions::default());
    let lp = f.start_loop();
    let (ok, out) = finish(
        workload(&f.head, &["tasks", "4", "1", "3"]),
        Duration::from_secs(180),
    );
    let log = lp.log_text();
    assert!(
        ok && out.contains("done 4"),
        "workload failed: {out}\n{log}"
    );
    assert_no_traceback(&out);
    assert_eq!(
        log.matches("started without RAY_enable_autoscaler_v2=1")
            .count(),
        1,
        "{log}"
    );
    // The flag is left as the head set it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _in_runtime = rt.enter();
    let client = f.head.client(ClientOptions {
        deadline: Duration::from_secs(3),
        ..Default::default()
    });
    let flag = rt
        .block_on(client.kv_get("__autoscaler", b"__autoscaler_v2_enabled"))
        .expect("kv get");
    assert_eq!(flag.as_deref(), Some(&b"0"[..]));
}

#[test]
fn strict_spread_placement_group_lands_on_distinct_nodes() {
    let f = Fixture::new("sp", 5.0);
    let head = &f.head;
    let lp = f.start_loop();
    let (ok, out) = finish(workload(head, &["spread", "3"]), Duration::from_secs(180));
    assert!(
        ok && out.contains("spread 3 distinct nodes for 3 bundles"),
        "{out}\n{}",
        lp.log_text()
    );
}

#[test]
fn request_resources_keeps_capacity_up_while_idle() {
    let f = Fixture::new("rr", 0.1);
    let head = &f.head;
    let lp = f.start_loop();
    let out = Command::new(rayscale_bin())
        .args(["request-resources", "--gcs", &head.addr(), "--bundles"])
        .arg(r#"[{"CPU": 2}, {"CPU": 2}]"#)
        .output()
        .expect("request-resources runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let up = wait_until(Duration::from_secs(90), || alive_workers(head).len() == 2);
    assert!(
        up,
        "2 workers expected, got {:?}\n{}",
        alive_workers(head),
        lp.log_text()
    );
    // Well past the 6 s idle timeout, they stay: the request is a floor.
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(alive_workers(head).len(), 2, "{}", lp.log_text());
    assert!(!lp.log_text().contains("draining"), "{}", lp.log_text());
}

#[test]
fn infeasible_demand_launches_nothing_and_shows_in_ray_status() {
    let f = Fixture::new("inf", 5.0);
    let (cluster, head) = (f.cluster.clone(), &f.head);
    let lp = f.start_loop();
    let mut w = workload(head, &["infeasible"]);
    let mut shown = String::new();
    let seen = wait_until(Duration::from_secs(60), || {
        let out = Command::new(head.ray_bin())
            .args(["status", "--address", &head.addr()])
            .output();
        shown = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        shown.contains("GPU: 8") || shown.contains("'GPU': 8")
    });
    // `ray status` lists the demand from the GCS at once; rayscale's report of it as
    // infeasible follows with its next iteration.
    let mut ours = String::new();
    wait_until(Duration::from_secs(30), || {
        ours = Command::new(rayscale_bin())
            .args(["status", "--gcs", &head.addr()])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        ours.split("Infeasible:")
            .nth(1)
            .is_some_and(|s| s.contains("GPU: 8"))
    });
    let _ = w.kill();
    let _ = w.wait();
    assert!(
        seen,
        "ray status does not show the infeasible demand:\n{shown}\n{}",
        lp.log_text()
    );
    let infeasible = ours.split("Infeasible:").nth(1).unwrap_or("");
    assert!(infeasible.contains("GPU: 8"), "rayscale status:\n{ours}");
    assert!(!lp.log_text().contains("launching"), "{}", lp.log_text());
    assert!(cluster_processes(&cluster).is_empty());
}

#[test]
fn kill_9_in_the_middle_of_a_scale_up_launches_nothing_twice() {
    let f = Fixture::new("cr", 5.0);
    let (cluster, head) = (f.cluster.clone(), &f.head);
    let mut lp = f.start_loop();
    let w = workload(head, &["tasks", "8", "1", "4"]);
    assert!(
        lp.wait_log("launching", Duration::from_secs(60)),
        "{}",
        lp.log_text()
    );
    lp.kill9();
    let before: Vec<u32> = cluster_processes(&cluster);
    let lp2 = f.start_loop();
    let (ok, out) = finish(w, Duration::from_secs(180));
    assert!(ok && out.contains("done 8"), "{out}\n{}", lp2.log_text());
    // The new loop acts once the old holder's lease has lapsed (about 20 s): the
    // workload, on the workers the first loop launched, may be done before that.
    assert!(
        lp2.wait_log("loaded", Duration::from_secs(60)),
        "the restarted loop did not load its table:\n{}",
        lp2.log_text()
    );
    let log = lp2.log_text();
    // Every worker process becomes a node the GCS knows (none leaked), never more than
    // the 4 the demand needs, each instance id once (none launched twice).
    let mut nodes = Vec::new();
    let mut procs = ProcInstances::default();
    let settled = wait_until(Duration::from_secs(90), || {
        nodes = alive_workers(head);
        nodes.sort();
        procs = ProcInstances::scan(&cluster);
        !nodes.is_empty() && nodes == procs.ids() && procs.defects().is_empty()
    });
    assert!(
        settled,
        "processes {procs:?} ({:?}) vs nodes {nodes:?}\n{}",
        procs.defects(),
        lp2.log_text()
    );
    let mut unique = nodes.clone();
    unique.dedup();
    assert_eq!(
        unique.len(),
        nodes.len(),
        "an instance joined twice: {nodes:?}"
    );
    assert!(nodes.len() <= 4, "{nodes:?}\n{log}");
    assert!(before.len() <= cluster_processes(&cluster).len() + 64);
}

#[test]
fn sigterm_stops_the_loop_cleanly() {
    let f = Fixture::new("st", 5.0);
    let mut lp = f.start_loop();
    assert!(
        lp.wait_log("provider: local_processes", Duration::from_secs(30)),
        "{}",
        lp.log_text()
    );
    let status = lp.terminate(Duration::from_secs(20));
    let log = lp.log_text();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(log.contains("SIGTERM: stopping the loop"), "{log}");
    assert!(log.contains("loop stopped"), "{log}");
}

#[test]
fn ray_status_is_current_right_after_a_restart() {
    let f = Fixture::new("rv", 5.0);
    let head = &f.head;
    // An earlier rayscale reported up to version 1000 before it was replaced.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _in_runtime = rt.enter();
    let client = head.client(ClientOptions {
        deadline: Duration::from_secs(3),
        ..Default::default()
    });
    rt.block_on(client.report_autoscaling_state(
        rayscale_gcs_client::proto::ray::rpc::autoscaler::AutoscalingState {
            autoscaler_state_version: 1000,
            ..Default::default()
        },
    ))
    .expect("report");
    let lp = f.start_loop();
    let mut w = workload(head, &["infeasible"]);
    let mut version = 0;
    let current = wait_until(Duration::from_secs(20), || {
        version = rt
            .block_on(client.get_cluster_status())
            .ok()
            .and_then(|r| r.autoscaling_state)
            .map_or(0, |s| s.autoscaler_state_version);
        version > 1000
    });
    // The workload (a Python driver) and each `ray status` take seconds on a 2-core
    // machine: as long as for the same demand in `infeasible_demand_...` above.
    let mut shown = String::new();
    let infeasible_shown = wait_until(Duration::from_secs(60), || {
        shown = Command::new(head.ray_bin())
            .args(["status", "--address", &head.addr()])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        shown.contains("GPU: 8") || shown.contains("'GPU': 8")
    });
    let _ = w.kill();
    let _ = w.wait();
    assert!(
        current,
        "the GCS still holds version {version}:\n{}",
        lp.log_text()
    );
    assert!(
        infeasible_shown,
        "ray status does not show the new report:\n{shown}"
    );
}

/// The cluster's worker instances as `/proc` shows them, by instance id.
///
/// The provider starts each instance as one `ray start ... --block` leading a process
/// group of its own, with `RAYSCALE_CLUSTER` and `RAY_CLOUD_INSTANCE_ID` in its
/// environment, which everything it starts inherits. Ray 2.60's raylet puts each of its
/// worker processes (`ray::IDLE`, `ray::<task>`) into a process group of its own too, and
/// those keep the environment: counting tagged group leaders counts an instance once more
/// for every such worker. So processes are grouped by instance id, and the `ray start`
/// leaders (the provider's own) are told apart by their arguments, as the provider does.
#[derive(Debug, Default)]
struct ProcInstances {
    /// Instance id -> how many live processes carry it (its `ray start`, Ray's daemons
    /// that keep their environment, Ray's workers).
    processes: BTreeMap<String, usize>,
    /// Instance id -> its live `ray start --block` process-group leaders.
    starts: BTreeMap<String, Vec<u32>>,
}

impl ProcInstances {
    /// The instances of `cluster` now (zombies excluded).
    fn scan(cluster: &str) -> ProcInstances {
        let mut out = ProcInstances::default();
        for pid in cluster_processes(cluster) {
            // A process may exit between the listing and these reads: skipped.
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            let Some(id) = environ
                .split(|b| *b == 0)
                .find_map(|kv| kv.strip_prefix(b"RAY_CLOUD_INSTANCE_ID="))
                .map(|id| String::from_utf8_lossy(id).into_owned())
            else {
                continue;
            };
            *out.processes.entry(id.clone()).or_default() += 1;
            if leads_own_group(pid) && is_ray_start_block(pid) {
                out.starts.entry(id).or_default().push(pid);
            }
        }
        out
    }

    /// Every instance with a live process, once each, sorted: an instance whose
    /// `ray start` is gone but whose processes linger counts (it leaked).
    fn ids(&self) -> Vec<String> {
        self.processes.keys().cloned().collect()
    }

    /// What is wrong with the instances: one launched twice (two `ray start` leaders
    /// with its id), or one whose `ray start` is gone while its processes live on.
    fn defects(&self) -> Vec<String> {
        self.processes
            .keys()
            .filter_map(|id| match self.starts.get(id).map_or(0, Vec::len) {
                1 => None,
                0 => Some(format!("{id}: processes but no live `ray start --block`")),
                n => Some(format!(
                    "{id}: {n} `ray start --block` leaders {:?}",
                    self.starts[id]
                )),
            })
            .collect()
    }
}

/// Whether `pid` leads its process group (pid == pgid).
fn leads_own_group(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    fields.get(2).and_then(|p| p.parse::<u32>().ok()) == Some(pid)
}

/// Whether `pid`'s arguments hold both `start` and `--block` (a `ray start --block`; Ray's
/// workers retitle themselves `ray::...`).
fn is_ray_start_block(pid: u32) -> bool {
    let mut raw = Vec::new();
    if std::fs::File::open(format!("/proc/{pid}/cmdline"))
        .and_then(|mut f| f.read_to_end(&mut raw))
        .is_err()
    {
        return false;
    }
    let args: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
    args.contains(&&b"start"[..]) && args.contains(&&b"--block"[..])
}

/// Waits (at most `timeout`) until the GCS of `head` holds an autoscaling state a loop
/// reported (one iteration done).
fn wait_for_a_report(head: &RayHead, timeout: Duration) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _in_runtime = rt.enter();
    let client = head.client(ClientOptions {
        deadline: Duration::from_secs(3),
        ..Default::default()
    });
    wait_until(timeout, || {
        rt.block_on(client.get_cluster_status())
            .ok()
            .and_then(|r| r.autoscaling_state)
            .is_some_and(|s| s.autoscaler_state_version > 0)
    })
}

#[test]
fn a_gcs_restart_is_survived() {
    let mut f = Fixture::new("gr", 0.2);
    let mut lp = f.start_loop();
    // The loop iterates (it has loaded its table and reported to the GCS) before the GCS
    // goes. A fixed wait assumed a fast machine: a restart during the loop's first probe
    // makes it exit ("no Ray GCS answers"), one before its table is loaded is logged as
    // "cannot load the instance table yet", not as an outage of a running loop.
    assert!(
        wait_for_a_report(&f.head, Duration::from_secs(60)),
        "no autoscaling state reported:\n{}",
        lp.log_text()
    );
    let head = &mut f.head;
    head.restart();
    assert!(
        lp.wait_log("GCS unreachable", Duration::from_secs(30)),
        "no outage logged:\n{}",
        lp.log_text()
    );
    assert!(lp.alive(), "rayscale exited:\n{}", lp.log_text());
    // After the restart it still scales the (new) cluster.
    let (ok, out) = finish(
        workload(head, &["tasks", "2", "1", "1"]),
        Duration::from_secs(180),
    );
    assert!(ok && out.contains("done 2"), "{out}\n{}", lp.log_text());
    assert!(lp.alive());
}

#[test]
fn bad_input_fails_with_one_line_and_starts_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = format!("bad{}", std::process::id());
    let scratch = Scratch::new("live-bad");
    let good = scratch.path("good.yaml");
    std::fs::write(&good, config_text(&cluster, 5.0)).expect("config");
    let broken = scratch.path("broken.yaml");
    std::fs::write(&broken, "cluster_name: x\nmax_workers: [1, 2\n").expect("config");
    let (_, ray) = rayscale_tests::ray_head::ray_from_env();
    let ray = ray.display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "run".into(),
                "--config".into(),
                broken.display().to_string(),
                "--gcs".into(),
                "127.0.0.1:1".into(),
                "--ray".into(),
                ray.clone(),
            ],
            "broken.yaml",
        ),
        (
            vec![
                "run".into(),
                "--config".into(),
                good.display().to_string(),
                "--gcs".into(),
                "127.0.0.1:1".into(),
                "--ray".into(),
                ray.clone(),
            ],
            "no Ray GCS answers at 127.0.0.1:1",
        ),
        (
            vec![
                "run".into(),
                "--config".into(),
                good.display().to_string(),
                "--gcs".into(),
                "127.0.0.1:1".into(),
                "--ray".into(),
                "/nonexistent/bin/ray".into(),
            ],
            "/nonexistent/bin/ray",
        ),
        (
            vec![
                "up".into(),
                good.display().to_string(),
                "--port".into(),
                "1".into(),
                "--ray".into(),
                "/nonexistent/bin/ray".into(),
            ],
            "/nonexistent/bin/ray",
        ),
    ];
    for (args, want) in cases {
        let t = Instant::now();
        let out = Command::new(rayscale_bin())
            .args(&args)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} should name {want:?}");
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{args:?} took {:?}",
            t.elapsed()
        );
    }
    assert!(cluster_processes(&cluster).is_empty());
}

#[test]
fn two_loops_act_as_one_and_the_survivor_takes_over_after_kill_9() {
    let f = Fixture::new("ha", 5.0);
    let (cluster, head) = (f.cluster.clone(), &f.head);
    let mut one = f.start_loop();
    assert!(
        one.wait_log("holding the autoscaler lease", Duration::from_secs(30)),
        "{}",
        one.log_text()
    );
    let two = Loop::start(head, &f.config, f.scratch.path("rayscale-2.log"));
    assert!(
        two.wait_log(
            "waiting: the autoscaler lease is held by",
            Duration::from_secs(30)
        ),
        "{}",
        two.log_text()
    );
    // Three tasks of two CPUs: three workers, not six.
    let (ok, out) = finish(
        workload(head, &["tasks", "3", "2", "5"]),
        Duration::from_secs(180),
    );
    assert!(ok && out.contains("done 3"), "{out}\n{}", one.log_text());
    // Time for a launch the second loop should not make to show up.
    std::thread::sleep(Duration::from_secs(5));
    let procs = ProcInstances::scan(&cluster);
    // Three, or a fourth from a demand report that lags a task's start (Ray launches it
    // too; e2e.rs's preemption test saw it): never one launched twice.
    assert!(
        (3..=4).contains(&procs.ids().len()) && procs.defects().is_empty(),
        "three instances, each launched once, expected: {procs:?} ({:?})\n{}\n{}",
        procs.defects(),
        one.log_text(),
        two.log_text()
    );
    // The follower launched nothing while the leader held the lease (the split brain the
    // count above cannot tell from a lagging fourth worker).
    assert!(
        !two.log_text().contains("launching"),
        "the follower launched:\n{}",
        two.log_text()
    );
    // The leader dies without a word; the follower takes over when the lease runs out and serves
    // the next demand.
    one.kill9();
    let died = Instant::now();
    assert!(
        two.wait_log("holding the autoscaler lease", Duration::from_secs(30)),
        "{}",
        two.log_text()
    );
    // The lease (10 s, renewed every 2 s) runs out, then the follower's next try (every
    // 2 s) takes it: ~12 s, with slack for GCS calls on a loaded 2-core machine.
    assert!(
        died.elapsed() <= Duration::from_secs(22),
        "{:?}",
        died.elapsed()
    );
    let (ok, out) = finish(
        workload(head, &["tasks", "4", "2", "5"]),
        Duration::from_secs(180),
    );
    assert!(ok && out.contains("done 4"), "{out}\n{}", two.log_text());
    let procs = ProcInstances::scan(&cluster);
    assert!(
        procs.ids().len() <= 4 && procs.defects().is_empty(),
        "at most four instances, each launched once, expected: {procs:?} ({:?})\n{}",
        procs.defects(),
        two.log_text()
    );
}

#[test]
fn lowering_max_workers_stops_busy_nodes_at_once() {
    let f = Fixture::new("mx", 5.0);
    let head = &f.head;
    let lp = f.start_loop();
    let mut w = workload(head, &["tasks", "3", "2", "120"]);
    assert!(
        wait_until(Duration::from_secs(120), || alive_workers(head).len() == 3),
        "{:?}\n{}",
        alive_workers(head),
        lp.log_text()
    );
    // Every node is busy; the user lowers the type's max to 1 in the YAML. Ray stops
    // the surplus at once (an idle drain would be rejected by a busy node).
    std::fs::write(
        &f.config,
        config_text(&f.cluster, 5.0)
            .replace("max_workers: 4, node_config", "max_workers: 1, node_config"),
    )
    .expect("config");
    let t = Instant::now();
    let stopped = wait_until(Duration::from_secs(30), || alive_workers(head).len() <= 1);
    let _ = w.kill();
    let _ = w.wait();
    assert!(stopped, "{:?}\n{}", alive_workers(head), lp.log_text());
    assert!(
        lp.log_text().contains("config reloaded"),
        "{}",
        lp.log_text()
    );
    assert!(
        lp.log_text().contains("stopping ray on"),
        "{}",
        lp.log_text()
    );
    eprintln!("surplus stopped {:?} after the edit", t.elapsed());
}
