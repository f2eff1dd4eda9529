//! Ray's own v1 providers driven by rayscale through the node-provider adapter and its
//! Python bridge, against a real Ray 2.60 head, end to end with a workload:
//! - `fake_multinode` (Ray's test provider: workers are real raylets the provider starts
//!   itself): scale up, tasks finish, idle scale-down;
//! - `local` (on-premise hosts over SSH): a real OpenSSH server started here on loopback
//!   with its own host and user keys, worker "hosts" 127.0.0.2 and 127.0.0.3; Ray's node
//!   updater SSHes in and runs the setup and start commands (RAY_INSTALLING), the nodes
//!   join, are used, and are drained and released when idle.
//!
//! One at a time (a Ray cluster is heavy on a 2-core machine).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rayscale_tests::e2e::finish;
use rayscale_tests::ray_head::{
    FAKE_HEAD, RayHead, RayHeadOptions, fake_cluster_env, ray_from_env,
};
use rayscale_tests::sshd::{Sshd, login_user};
use rayscale_tests::{Scratch, wait_until, workspace_bin};

static SERIAL: Mutex<()> = Mutex::new(());

/// `rayscale run` with the cluster marker in its environment (so every process it and
/// Ray's provider start can be found and killed at the end).
struct Loop {
    child: Child,
    log: PathBuf,
    marker: String,
}

impl Loop {
    fn start(head: &RayHead, config: &Path, log: PathBuf, cluster: &str) -> Loop {
        let file = std::fs::File::create(&log).unwrap();
        let marker = format!("RAYSCALE_CLUSTER={cluster}");
        let child = Command::new(workspace_bin("rayscale"))
            .args(["run", "--interval", "2", "--gcs", &head.addr(), "--config"])
            .arg(config)
            .env("RAYSCALE_CLUSTER", cluster)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        Loop { child, log, marker }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        rayscale_tests::kill_with_env(&self.marker);
    }
}

fn workload(head: &RayHead, args: &[&str]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let w = Command::new(head.python())
        .arg(root.join("tests/live/workload.py"))
        .arg(head.addr())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(w, Duration::from_secs(240))
}

#[test]
fn fake_multinode_through_the_bridge_scales_up_runs_tasks_and_scales_down() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (python, _) = ray_from_env();
    let cluster = format!("fmn{}", std::process::id());
    let scratch = Scratch::new("v1live-fmn");
    // The head as Ray's own fake-cluster harness starts it: the provider's fake head id.
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
             rayscale: {{bridge: {{python: {}}}}}\n\
             available_node_types:\n  ray.head.default: {{resources: {{CPU: 0}}, node_config: {{}}, max_workers: 0}}\n  \
             ray.worker.cpu: {{resources: {{CPU: 2}}, node_config: {{}}, max_workers: 4}}\n",
            python.display()
        ),
    )
    .unwrap();
    let lp = Loop::start(&head, &config, scratch.path("rayscale.log"), &cluster);
    let (ok, out) = workload(&head, &["tasks", "8", "1", "3"]);
    let log = lp.log();
    assert!(
        ok && out.contains("done 8"),
        "workload: {out}\nrayscale log:\n{log}"
    );
    assert!(
        log.contains("python bridge for provider fake_multinode started"),
        "{log}"
    );
    assert!(log.contains("launching"), "{log}");
    let workers = head.alive_workers();
    assert!(
        !workers.is_empty() && workers.iter().all(|w| w.starts_with("fffff")),
        "workers by the provider's node ids: {workers:?}"
    );
    // Idle for 12 s: drained and terminated through Ray's provider.
    let gone = wait_until(Duration::from_secs(120), || head.alive_workers().is_empty());
    let log = lp.log();
    assert!(
        gone,
        "workers still alive: {:?}\n{log}",
        head.alive_workers()
    );
    // Ray's drain stops the raylet first; rayscale terminates on seeing it dead, in a
    // later iteration: wait for it rather than assume it came before the node died.
    let terminated = wait_until(Duration::from_secs(30), || {
        let log = lp.log();
        log.contains("draining") && log.contains("terminating")
    });
    let log = lp.log();
    assert!(terminated, "{log}");
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn local_provider_over_ssh_installs_ray_with_rays_node_updater() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (python, ray) = ray_from_env();
    let cluster = format!("ssh{}", std::process::id());
    let scratch = Scratch::new("v1live-ssh");
    let sshd = Sshd::start(&scratch.0, None);
    let head = RayHead::start_with(RayHeadOptions::external_autoscaler("head"));
    let config = scratch.path("cluster.yaml");
    let setup_marks = scratch.path("setup-ran");
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 2\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
             head_node_type: head\n\
             provider: {{type: local, head_ip: 127.0.0.1, worker_ips: [127.0.0.2, 127.0.0.3]}}\n\
             auth: {{ssh_user: {user}, ssh_private_key: {key}, ssh_proxy_command: 'nc %h {port}'}}\n\
             rayscale: {{bridge: {{python: {python}}}}}\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{}}, max_workers: 0}}\n  \
             local.cluster.node: {{resources: {{CPU: 1}}, node_config: {{}}, min_workers: 0, max_workers: 2}}\n\
             setup_commands:\n  - echo $SSH_CONNECTION >> {marks}\n\
             worker_start_ray_commands:\n  - export RAYSCALE_CLUSTER={cluster}; {ray} start --address=$RAY_HEAD_IP:{gcs_port} \
             --node-ip-address=$RAY_CLOUD_INSTANCE_ID --num-cpus=1 --disable-usage-stats \
             --dashboard-agent-listen-port=0 --temp-dir={tmp}/w_$RAY_CLOUD_INSTANCE_ID\n",
            user = login_user(),
            key = sshd.key.display(),
            port = sshd.port,
            python = python.display(),
            marks = setup_marks.display(),
            ray = ray.display(),
            gcs_port = head.port(),
            tmp = scratch.0.display(),
        ),
    )
    .unwrap();
    let lp = Loop::start(&head, &config, scratch.path("rayscale.log"), &cluster);
    let t0 = Instant::now();
    let (ok, out) = workload(&head, &["spread", "2"]);
    let log = lp.log();
    assert!(
        ok && out.contains("spread 2 distinct nodes"),
        "workload: {out}\nrayscale log:\n{log}"
    );
    eprintln!("two SSH workers installed and used in {:?}", t0.elapsed());
    let mut workers = head.alive_workers();
    workers.sort();
    assert_eq!(workers, ["127.0.0.2", "127.0.0.3"], "{log}");
    assert!(log.contains("installing ray on 127.0.0.2"), "{log}");
    // Ray's updater returns after `ray start` has returned on the host, and the worker
    // may run tasks before that: wait for both installs to be reported, not just joined.
    let installed = wait_until(Duration::from_secs(90), || {
        lp.log().matches("ray installed on 127.0.0.").count() == 2
    });
    assert!(installed, "{}", lp.log());
    // The setup commands ran once on each host (the address sshd was reached at).
    let marks = std::fs::read_to_string(&setup_marks).unwrap_or_default();
    let mut hosts: Vec<&str> = marks
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["127.0.0.2", "127.0.0.3"], "{marks}");
    for l in log
        .lines()
        .filter(|l| l.contains("installing ray on") || l.contains("ray installed on"))
    {
        eprintln!("{l}");
    }
    // Idle: drained, released back to the provider (its hosts free again).
    let gone = wait_until(Duration::from_secs(120), || head.alive_workers().is_empty());
    let events = |log: String| {
        log.lines()
            .filter(|l| !l.contains("rayscale::bridge"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        gone,
        "workers still alive: {:?}\n{}",
        head.alive_workers(),
        events(lp.log())
    );
    let released = wait_until(Duration::from_secs(30), || {
        lp.log().contains("terminating 127.0.0.")
    });
    assert!(released, "{}", events(lp.log()));
}
