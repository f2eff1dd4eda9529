//! The main job on the embedded local default, as the README runs it: `rayscale up` of a
//! local_processes cluster starts a Ray 2.60 head on loopback (from the venv in
//! `RAYSCALE_PYTHON`) and autoscales it in the foreground; `rayscale down`, run beside
//! it, stops the head first (the loop in `up` then reads no GCS and launches nothing,
//! and `up` ends), then the workers. A worker type's `min_workers` is kept by the loop, so workers first
//! would race it: the loop would launch again what `down` terminates.

use std::process::{Command, Stdio};
use std::time::Duration;

use rayscale_tests::ray_head::{alive_workers_at, free_ports, ray_from_env};
use rayscale_tests::{Scratch, wait_until};

/// Kills what the test started, whatever happened: `up`, the cluster's workers, and the
/// head (found by the temporary directory `up` names it with), and removes their
/// directories.
struct Cleanup {
    cluster: String,
    up: std::process::Child,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.up.kill();
        let _ = self.up.wait();
        rayscale_tests::kill_with_env(&format!("RAYSCALE_CLUSTER={}", self.cluster));
        // The head's processes name its temporary directory on their command lines.
        let head = std::env::temp_dir().join(format!("rayscale-{}-head", self.cluster));
        let needle = head.display().to_string();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle)
                && let Some(pid) = e.file_name().to_str()
            {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
        for dir in [
            head,
            std::env::temp_dir().join(format!("rayscale-{}", self.cluster)),
        ] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn down_beside_up_stops_the_head_then_the_min_workers_worker_and_launches_nothing_again() {
    let (_python, ray) = ray_from_env();
    let port = free_ports(1)[0];
    let gcs = format!("127.0.0.1:{port}");
    let cluster = format!("lu{}", std::process::id());
    let scratch = Scratch::new("local-up");
    let config = scratch.path("cluster.yaml");
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 2\nidle_timeout_minutes: 5\n\
             head_node_type: head\nprovider: {{type: local_processes}}\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n  \
             worker: {{resources: {{CPU: 1}}, min_workers: 1, max_workers: 2, node_config: {{}}}}\n"
        ),
    )
    .expect("config");
    let args = |cmd: &str| {
        vec![
            cmd.to_string(),
            config.display().to_string(),
            "--port".into(),
            port.to_string(),
            "--ray".into(),
            ray.display().to_string(),
        ]
    };
    let up_log = scratch.path("up.log");
    let up = Command::new(rayscale_tests::workspace_bin("rayscale"))
        .args(args("up"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(scratch.path("up.out")).expect("up out"))
        .stderr(std::fs::File::create(&up_log).expect("up log"))
        .spawn()
        .expect("rayscale up");
    let mut cleanup = Cleanup {
        cluster: cluster.clone(),
        up,
    };
    let log = || std::fs::read_to_string(&up_log).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(180), || alive_workers_at(&gcs).len()
            == 1),
        "no worker for min_workers: {}",
        log()
    );
    // `up`'s log says each worker the loop launched.
    let launched = || log().matches(" made local-").count();
    assert_eq!(launched(), 1, "{}", log());

    let out = Command::new(rayscale_tests::workspace_bin("rayscale"))
        .args(args("down"))
        .output()
        .expect("rayscale down");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("is down (1 workers, head stopped)"),
        "{text}\n{}",
        log()
    );
    assert!(
        !rayscale_tests::e2e::gcs_answers(&gcs),
        "the head's GCS still answers"
    );
    assert!(
        rayscale_tests::processes_with_env(&format!("RAYSCALE_CLUSTER={cluster}")).is_empty(),
        "the worker's processes are gone"
    );
    // `up` sees its head gone and ends, having launched nothing again.
    let mut up_status = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            up_status = cleanup.up.try_wait().ok().flatten();
            up_status.is_some()
        }),
        "up still runs after down: {}",
        log()
    );
    let out = std::fs::read_to_string(scratch.path("up.out")).unwrap_or_default();
    assert!(
        up_status.is_some_and(|s| s.success())
            && out.contains(&format!("cluster {cluster}: the head at {gcs} is gone"))
            && out.contains("up ends"),
        "{up_status:?} {out}\n{}",
        log()
    );
    assert_eq!(
        launched(),
        1,
        "a worker was launched again during or after down: {}",
        log()
    );
}
