//! What rayscale shows operators, against a real Ray 2.60 head:
//! - `/metrics` scraped with a real HTTP client after a live scale-up and checked against
//!   Ray's own definitions of its autoscaler metrics (`tests/live/check_metrics.py` builds
//!   Ray's `AutoscalerPrometheusMetrics` and compares names, types and labels), with the
//!   values the scale-up must have produced;
//! - the event file: the lines reach a job's console through Ray's own log monitor
//!   ("(autoscaler +1s) Adding 4 node(s) of type worker."), in Ray's JSON format;
//!   the nodes added and removed, the cluster's size, the warnings said once;
//! - `/readyz` failing while the GCS is down (and `/healthz` still answering), ready again
//!   after it comes back;
//! - the event lines compared with those Ray's own v2 autoscaler writes for the same
//!   workload on the same provider (Ray's fake_multinode: Ray's monitor drives it in one
//!   run, rayscale through its bridge in the other).
//!
//! - `rayscale status --why` and `rayscale explain` naming an infeasible shape, a type at
//!   its max and a node kept for `min_workers`.
//!
//! One at a time (a Ray cluster is heavy on a 2-core machine).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use rayscale_tests::e2e::{finish, start_workload};
use rayscale_tests::ray_head::{
    FAKE_HEAD, RayHead, RayHeadOptions, fake_cluster_env, free_ports, ray_from_env,
};
use rayscale_tests::{Scratch, wait_until, workspace_bin};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `rayscale run` with its metrics on `port`, the cluster marker in its environment and
/// `RAY_TMPDIR` set to the head's temp dir (so it finds the session's logs itself).
struct Loop {
    child: Child,
    log: PathBuf,
    marker: String,
    port: u16,
}

impl Loop {
    fn start(head: &RayHead, config: &Path, log: PathBuf, cluster: &str) -> Loop {
        let port = free_ports(1)[0];
        let file = std::fs::File::create(&log).unwrap();
        let marker = format!("RAYSCALE_CLUSTER={cluster}");
        let child = Command::new(workspace_bin("rayscale"))
            .args(["run", "--interval", "2", "--gcs", &head.addr(), "--ray"])
            .arg(head.ray_bin())
            .arg("--config")
            .arg(config)
            .args(["--metrics-port", &port.to_string(), "--ready-max-age", "20"])
            .env("RAYSCALE_CLUSTER", cluster)
            .env("RAY_TMPDIR", head.temp_dir())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        Loop {
            child,
            log,
            marker,
            port,
        }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        rayscale_tests::kill_with_env(&self.marker);
    }
}

/// `tests/live/check_metrics.py` with `args`, its JSON answer.
fn check_metrics(args: &[&str]) -> Value {
    let (python, _) = ray_from_env();
    let out = Command::new(python)
        .arg(root().join("tests/live/check_metrics.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check_metrics.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// GET `url`: (status, body); status 0 when nothing answered.
fn get(url: &str) -> (u64, String) {
    let v = check_metrics(&["get", url]);
    (
        v["status"].as_u64().unwrap_or(0),
        v["body"].as_str().unwrap_or_default().to_string(),
    )
}

/// The workload's `console` mode: 8 one-CPU tasks of 3 s, then a 64-CPU task left pending
/// for `wait_s`; the job's console (Ray prints the autoscaler's events there).
fn console_job(head: &RayHead, wait_s: u32) -> (bool, String) {
    let wait = wait_s.to_string();
    let w = start_workload(
        head.python(),
        &head.addr(),
        &["console", "8", "1", "3", &wait],
    );
    finish(w, Duration::from_secs(240))
}

/// The events of an event file: (severity, message) per line; a line that is not Ray's
/// JSON event fails the test.
fn events(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            for key in [
                "event_id",
                "source_type",
                "source_hostname",
                "source_pid",
                "severity",
                "message",
                "timestamp",
                "label",
                "custom_fields",
            ] {
                assert!(v.get(key).is_some(), "no {key} in {l}");
            }
            assert_eq!(v["source_type"], "AUTOSCALER", "{l}");
            assert_eq!(v["event_id"].as_str().unwrap().len(), 36, "{l}");
            assert!(
                v["timestamp"]
                    .as_str()
                    .is_some_and(|t| t.parse::<i64>().is_ok()),
                "{l}"
            );
            (
                v["severity"].as_str().unwrap().to_string(),
                v["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The session's event file under a head's temp dir.
fn event_file(head: &RayHead) -> PathBuf {
    head.temp_dir()
        .join("session_latest/logs/events/event_AUTOSCALER.log")
}

/// What a run's events add up to: nodes added per type, removed per "type (reason)", the
/// "Resized to" lines in order, and the warnings (each once).
#[derive(Debug, PartialEq, Default)]
struct Summary {
    added: BTreeMap<String, u64>,
    removed: BTreeMap<String, u64>,
    resized: Vec<String>,
    warnings: std::collections::BTreeSet<String>,
}

fn summary(events: &[(String, String)]) -> Summary {
    let mut s = Summary::default();
    for (severity, m) in events {
        if let Some(rest) = m.strip_prefix("Adding ") {
            let (n, t) = rest.split_once(" node(s) of type ").unwrap();
            *s.added
                .entry(t.trim_end_matches('.').to_string())
                .or_default() += n.parse::<u64>().unwrap();
        } else if let Some(rest) = m.strip_prefix("Removing ") {
            let (n, t) = rest.split_once(" nodes of type ").unwrap();
            *s.removed
                .entry(t.trim_end_matches('.').to_string())
                .or_default() += n.parse::<u64>().unwrap();
        } else if m.starts_with("Resized to ") {
            s.resized.push(m.clone());
        } else if severity == "WARNING" {
            s.warnings.insert(m.clone());
        }
    }
    s
}

#[test]
fn metrics_events_and_readiness_on_a_live_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = format!("ops{}", std::process::id());
    let scratch = Scratch::new("ops-live");
    let mut head = RayHead::start_with(RayHeadOptions::external_autoscaler("head"));
    let config = scratch.path("cluster.yaml");
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.5\n\
             head_node_type: head\nprovider: {{type: local_processes}}\navailable_node_types:\n  \
             head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n  \
             worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{}}}}\n"
        ),
    )
    .unwrap();
    let lp = Loop::start(&head, &config, scratch.path("rayscale.log"), &cluster);
    let ready = wait_until(Duration::from_secs(30), || get(&lp.url("/readyz")).0 == 200);
    assert!(
        ready,
        "never ready: {:?}\n{}",
        get(&lp.url("/readyz")),
        lp.log()
    );
    assert_eq!(get(&lp.url("/healthz")), (200, "ok\n".to_string()));
    assert_eq!(get(&lp.url("/nothing")).0, 404);

    // A job with the cluster's events on its console: Ray's log monitor publishes
    // rayscale's event file there.
    // The event reaches the console through the raylet's report, rayscale's iteration,
    // the event file and Ray's log monitor: 15 s on a loaded 2-core machine, not 8.
    let (ok, out) = console_job(&head, 15);
    assert!(ok && out.contains("done 8"), "job: {out}\n{}", lp.log());
    assert!(
        out.contains("(autoscaler +") && out.contains(" node(s) of type worker."),
        "the job's console lacks rayscale's events:\n{out}"
    );
    assert!(
        out.contains(
            "No available node types can fulfill resource requests {'CPU': 64.0}*1. \
             Add suitable node types to this cluster to resolve this issue."
        ),
        "{out}"
    );

    // Metrics right after the scale-up, checked against Ray's own definitions.
    let session = std::fs::read_link(head.temp_dir().join("session_latest"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .expect("the head's session_latest link");
    // Every worker up (8 tasks may have finished on fewer while the last booted).
    let all_up = wait_until(Duration::from_secs(60), || {
        let m = check_metrics(&["check", &lp.url("/metrics"), &session]);
        m["samples"]["autoscaler_active_nodes{NodeType=worker}"].as_f64() == Some(4.0)
    });
    assert!(all_up, "{}", lp.log());
    let m = check_metrics(&["check", &lp.url("/metrics"), &session]);
    assert_eq!(m["problems"], serde_json::json!([]), "{m}");
    assert!(m["families"].as_u64().unwrap() >= 20, "{m}");
    let sample = |k: &str| m["samples"][k].as_f64().unwrap_or(-1.0);
    assert_eq!(
        sample("autoscaler_active_nodes{NodeType=worker}"),
        4.0,
        "{m}"
    );
    assert_eq!(sample("autoscaler_active_nodes{NodeType=head}"), 1.0, "{m}");
    assert_eq!(
        sample("autoscaler_pending_nodes{NodeType=worker}"),
        0.0,
        "{m}"
    );
    assert_eq!(
        sample("autoscaler_cluster_resources{resource=CPU}"),
        8.0,
        "{m}"
    );
    assert_eq!(sample("autoscaler_started_nodes_total{}"), 4.0, "{m}");
    assert_eq!(
        sample("autoscaler_worker_create_node_time_seconds_count{}"),
        4.0,
        "{m}"
    );
    assert_eq!(sample("autoscaler_running_workers_nodes{}"), 4.0, "{m}");
    assert!(
        sample("rayscale_effects_total{effect=launch}") >= 1.0,
        "{m}"
    );
    assert_eq!(sample("rayscale_lease_held{}"), 1.0, "{m}");
    assert!(
        sample("autoscaler_update_time_seconds_count{}") >= 1.0,
        "{m}"
    );
    // Pending while the workers came up, zero now.
    assert_eq!(
        sample("autoscaler_pending_resources{resource=CPU}"),
        0.0,
        "{m}"
    );

    // Idle (30 s: long enough for the checks above): drained and terminated; counted
    // and said.
    let stopped = wait_until(Duration::from_secs(120), || {
        let m = check_metrics(&["check", &lp.url("/metrics"), &session]);
        m["samples"]["autoscaler_stopped_nodes_total{}"].as_f64() == Some(4.0)
            && m["samples"]["autoscaler_active_nodes{NodeType=worker}"].as_f64() == Some(0.0)
    });
    assert!(stopped, "{}", lp.log());
    let file = event_file(&head);
    let s = summary(&events(&file));
    assert_eq!(
        s.added,
        BTreeMap::from([("worker".to_string(), 4)]),
        "{s:?}"
    );
    assert_eq!(
        s.removed,
        BTreeMap::from([("worker (idle)".to_string(), 4)]),
        "{s:?}"
    );
    assert_eq!(
        s.resized.iter().max_by_key(|r| cpus(r)).map(String::as_str),
        Some("Resized to 8 CPUs.")
    );
    assert_eq!(
        s.resized.last().map(String::as_str),
        Some("Resized to 0 CPUs.")
    );
    let warnings = events(&file)
        .into_iter()
        .filter(|(severity, _)| severity == "WARNING")
        .count();
    assert_eq!(warnings, 1, "said once while it lasts: {s:?}");

    // The GCS goes down: not ready (the process still answers), then ready again.
    head.stop();
    let down = wait_until(Duration::from_secs(60), || {
        let (status, body) = get(&lp.url("/readyz"));
        status == 503 && body.contains("GCS unreachable")
    });
    assert!(down, "{:?}\n{}", get(&lp.url("/readyz")), lp.log());
    assert_eq!(get(&lp.url("/healthz")).0, 200);
    head.start_again();
    let back = wait_until(Duration::from_secs(90), || get(&lp.url("/readyz")).0 == 200);
    assert!(back, "{:?}\n{}", get(&lp.url("/readyz")), lp.log());
    let m = check_metrics(&["check", &lp.url("/metrics"), ""]);
    assert!(
        m["samples"]["autoscaler_update_loop_exceptions_total{}"]
            .as_f64()
            .unwrap_or(0.0)
            >= 1.0,
        "{m}"
    );
}

/// `rayscale` with `args`: (success, stdout and stderr).
fn rayscale(args: &[&str]) -> (bool, String) {
    let out = Command::new(workspace_bin("rayscale"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn status_why_names_an_infeasible_shape_a_type_at_its_max_and_a_node_kept_for_min_workers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = format!("why{}", std::process::id());
    let scratch = Scratch::new("ops-why");
    let head = RayHead::start_with(RayHeadOptions::external_autoscaler("head"));
    let config = scratch.path("cluster.yaml");
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.1\n\
             head_node_type: head\nprovider: {{type: local_processes}}\navailable_node_types:\n  \
             head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n  \
             capped: {{resources: {{CPU: 2}}, max_workers: 1, node_config: {{}}}}\n  \
             spare: {{resources: {{CPU: 1}}, min_workers: 1, max_workers: 1, node_config: {{}}}}\n"
        ),
    )
    .unwrap();
    let lp = Loop::start(&head, &config, scratch.path("rayscale.log"), &cluster);
    // A {GPU: 8} task no type holds, and three {CPU: 2} tasks on a type of one node.
    let mut work = Command::new(head.python())
        .arg(root().join("tests/live/workload.py"))
        .arg(head.addr())
        .args(["why", "3", "2", "150"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let expected = [
        "lacks GPU 8 (it has 0)",
        "node type capped is at its max_workers (1)",
        "1 spare: idle, kept for min_workers (1)",
    ];
    let mut last = String::new();
    let said = wait_until(Duration::from_secs(120), || {
        let (ok, out) = rayscale(&[
            "status",
            "--why",
            "--gcs",
            &head.addr(),
            "--cluster",
            &cluster,
        ]);
        last = out;
        ok && expected.iter().all(|e| last.contains(e))
    });
    assert!(said, "status --why:\n{last}\n{}", lp.log());
    // Two {CPU: 2} tasks wait for the capped type, and one placement says so.
    assert!(
        last.contains(
            "2 tasks and actors ({CPU: 2} x 2): node type capped is at its max_workers (1)"
        ),
        "{last}"
    );
    // `explain` works it out on its own, from the same cluster.
    let (ok, out) = rayscale(&[
        "explain",
        "--config",
        config.to_str().unwrap(),
        "--gcs",
        &head.addr(),
    ]);
    assert!(ok, "{out}");
    for e in &expected[..2] {
        assert!(out.contains(e), "explain lacks {e:?}:\n{out}");
    }
    let _ = work.kill();
    let _ = work.wait();
}

#[test]
fn consolidation_drains_one_of_two_half_empty_nodes_and_every_retriable_task_finishes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = format!("cons{}", std::process::id());
    let scratch = Scratch::new("ops-cons");
    let head = RayHead::start_with(RayHeadOptions::external_autoscaler("head"));
    let config = scratch.path("cluster.yaml");
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 2\n\
             head_node_type: head\nprovider: {{type: local_processes}}\navailable_node_types:\n  \
             head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n  \
             w: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {{}}}}\n\
             rayscale: {{consolidation: {{node_types: [w], utilization_below: 0.6, after_s: 5, \
             drain_deadline_s: 10}}}}\n"
        ),
    )
    .unwrap();
    let lp = Loop::start(&head, &config, scratch.path("rayscale.log"), &cluster);
    // Two workers, one 30 s task of {CPU: 1} on each: both half empty. One is drained
    // (its task's load fits on the other), terminated at the deadline, and its task is
    // retried on the other node.
    let job = start_workload(head.python(), &head.addr(), &["consolidate", "30"]);
    let (ok, out) = rayscale_tests::e2e::finish(job, Duration::from_secs(300));
    let log = lp.log();
    assert!(ok && out.contains("placed on 2 nodes"), "{out}\n{log}");
    assert!(out.contains("done 2 on 1 nodes"), "{out}\n{log}");
    let drains: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("with a deadline") && l.contains("CONSOLIDATION"))
        .collect();
    assert_eq!(drains.len(), 1, "{log}");
}

/// The node types both runs share.
const TYPES: &str = "available_node_types:\n  \
    ray.head.default: {resources: {CPU: 0}, node_config: {}, max_workers: 0}\n  \
    ray.worker.cpu: {resources: {CPU: 2}, node_config: {}, min_workers: 0, max_workers: 4}\n";

/// Runs the console job on `head`, waits until its workers are gone, returns the events.
fn run_and_collect(head: &RayHead, what: &str, log: impl Fn() -> String) -> Vec<(String, String)> {
    let (ok, out) = console_job(head, 15);
    assert!(ok && out.contains("done 8"), "{what}: {out}\n{}", log());
    let gone = wait_until(Duration::from_secs(120), || head.alive_workers().is_empty());
    assert!(
        gone,
        "{what}: workers left {:?}\n{}",
        head.alive_workers(),
        log()
    );
    // The last lines of an iteration are written with it; give a slow writer a moment.
    std::thread::sleep(Duration::from_secs(3));
    events(&event_file(head))
}

#[test]
fn event_lines_match_rays_own_autoscaler_for_the_same_workload() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (python, _) = ray_from_env();
    let scratch = Scratch::new("ops-events");

    // Ray: its v2 monitor with the fake provider, as ray.cluster_utils.AutoscalingCluster
    // starts it (the config in Ray's JSON form, given to `ray start --autoscaling-config`).
    let port = free_ports(1)[0];
    let ray_config = scratch.path("ray.yaml");
    std::fs::write(
        &ray_config,
        format!(
            "cluster_name: fake_multinode\nmax_workers: 4\nupscaling_speed: 100\n\
             idle_timeout_minutes: 0.2\nhead_node_type: ray.head.default\n\
             provider: {{type: external, module: ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider, \
             use_node_id_as_ip: true, disable_node_updaters: true, disable_launch_config_check: true, \
             launch_multiple: true, head_node_id: {FAKE_HEAD}, gcs_address: '127.0.0.1:{port}'}}\n\
             auth: {{}}\ndocker: {{}}\ninitialization_commands: []\nsetup_commands: []\n\
             head_setup_commands: []\nworker_setup_commands: []\nhead_start_ray_commands: []\n\
             worker_start_ray_commands: []\nfile_mounts: {{}}\ncluster_synced_files: []\n\
             file_mounts_sync_continuously: false\nrsync_exclude: []\nrsync_filter: []\n{TYPES}"
        ),
    )
    .unwrap();
    let mut options = RayHeadOptions {
        extra_args: vec![format!("--autoscaling-config={}", ray_config.display())],
        env: fake_cluster_env(),
        port: Some(port),
    };
    // Ray's metrics server on a free port (44217 may be taken).
    options.env.push((
        "AUTOSCALER_METRIC_PORT".into(),
        free_ports(1)[0].to_string(),
    ));
    let mut ray_head = RayHead::start_with(options);
    let monitor_log = ray_head.temp_dir().join("session_latest/logs/monitor.log");
    let ray_events = run_and_collect(&ray_head, "Ray", || {
        std::fs::read_to_string(&monitor_log).unwrap_or_default()
    });
    ray_head.stop();

    // rayscale: the same provider class through its bridge, the same node types.
    let cluster = format!("opsev{}", std::process::id());
    let mut options = RayHeadOptions::external_autoscaler("ray.head.default");
    options.env.extend(fake_cluster_env());
    let head = RayHead::start_with(options);
    let config = scratch.path("cluster.yaml");
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
             head_node_type: ray.head.default\n\
             provider: {{type: fake_multinode, head_node_id: {FAKE_HEAD}}}\n\
             rayscale: {{bridge: {{python: {}}}}}\n{TYPES}",
            python.display()
        ),
    )
    .unwrap();
    let lp = Loop::start(&head, &config, scratch.path("rayscale.log"), &cluster);
    let ours = run_and_collect(&head, "rayscale", || lp.log());

    let (theirs, mine) = (summary(&ray_events), summary(&ours));
    let show = || format!("Ray's: {ray_events:#?}\nrayscale's: {ours:#?}");
    assert_eq!(mine.added, theirs.added, "{}", show());
    assert_eq!(mine.removed, theirs.removed, "{}", show());
    assert_eq!(mine.warnings, theirs.warnings, "{}", show());
    assert!(
        !theirs.added.is_empty() && !theirs.warnings.is_empty(),
        "{}",
        show()
    );
    // The cluster's size when it grew, and when it was empty again.
    let peak = |s: &Summary| s.resized.iter().max_by_key(|r| cpus(r)).cloned();
    assert_eq!(peak(&mine), peak(&theirs), "{}", show());
    assert_eq!(mine.resized.last(), theirs.resized.last(), "{}", show());
    // Every line is one of Ray's (same severity, same text) but for the debug detail.
    let kinds = |e: &[(String, String)]| {
        e.iter()
            .filter(|(s, _)| s != "DEBUG")
            .map(|(s, m)| (s.clone(), m.split(' ').next().unwrap_or("").to_string()))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(kinds(&ours), kinds(&ray_events), "{}", show());
}

/// The CPU count of a "Resized to N CPUs..." line.
fn cpus(line: &str) -> usize {
    line.trim_start_matches("Resized to ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
