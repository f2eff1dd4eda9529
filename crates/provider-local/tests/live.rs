//! The local-process provider with the real Ray 2.60: a head on a free loopback port, one
//! worker of a 2-CPU type launched through the provider, registered, terminated, gone.
//!
//! Needs `RAYSCALE_PYTHON` (the venv python; `ray` is beside it). It never skips: without
//! it the test fails, saying so. It never runs `ray stop` (that stops every Ray on the
//! host): the head is stopped by its process group and by the processes naming its temp
//! dir.

#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{KillOnDrop, all_procs, is_live, tagged, wait_until};
use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest};
use rayscale_provider_local::{LocalProcessConfig, LocalProcessProvider};
use rustix::process::{Pid, Signal};

/// Stops the head (its process group, then every process naming its temp dir) and removes
/// the temp dir, also when the test panics.
struct Head {
    temp: PathBuf,
    pgid: i32,
}

impl Head {
    fn signal(&self, sig: Signal) {
        if self.pgid > 1
            && let Some(g) = Pid::from_raw(self.pgid)
        {
            let _ = rustix::process::kill_process_group(g, sig);
        }
        let temp = self.temp.display().to_string();
        for p in all_procs() {
            if p.state != 'Z'
                && p.cmdline.contains(&temp)
                && p.pid as u32 != std::process::id()
                && let Some(pid) = Pid::from_raw(p.pid)
            {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    }

    fn remaining(&self) -> Vec<i32> {
        let temp = self.temp.display().to_string();
        all_procs()
            .into_iter()
            .filter(|p| p.state != 'Z' && (p.pgid == self.pgid || p.cmdline.contains(&temp)))
            .map(|p| p.pid)
            .collect()
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        self.signal(Signal::TERM);
        for _ in 0..50 {
            if self.remaining().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.signal(Signal::KILL);
        for _ in 0..50 {
            if self.remaining().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir_all(&self.temp);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `ray status --address <gcs>` output ("" when it fails).
async fn ray_status(ray: &Path, gcs: &str) -> String {
    let out = tokio::process::Command::new(ray)
        .args(["status", "--address", gcs])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(30), out).await {
        Ok(Ok(o)) => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_ray_worker_registers_and_terminates_cleanly() {
    let python = std::env::var_os("RAYSCALE_PYTHON").unwrap_or_else(|| {
        panic!(
            "RAYSCALE_PYTHON is not set: point it at the python of a venv with Ray 2.60 \
             (e.g. RAYSCALE_PYTHON=/opt/rayscale-venv/bin/python); this live test does not skip"
        )
    });
    let ray = Path::new(&python).with_file_name("ray");
    assert!(
        ray.is_file(),
        "RAYSCALE_PYTHON={}: no `ray` beside it ({} is missing); install Ray 2.60 there",
        Path::new(&python).display(),
        ray.display()
    );

    let temp = PathBuf::from(format!("/tmp/rsl-{}", std::process::id()));
    std::fs::create_dir_all(&temp).unwrap();
    let port = free_port();
    let gcs = format!("127.0.0.1:{port}");
    let head_log = temp.join("head.log");
    let mut head_cmd = std::process::Command::new(&ray);
    head_cmd
        .args([
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            &format!("--port={port}"),
            "--num-cpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            &format!("--temp-dir={}", temp.display()),
            // Other heads may run on this host: no fixed ports (10001, 8265).
            &format!("--ray-client-server-port={}", free_port()),
            &format!("--dashboard-port={}", free_port()),
        ])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&head_log).unwrap())
        .stderr(std::fs::File::create(temp.join("head.err")).unwrap())
        .process_group(0);
    let head_child = head_cmd.spawn().unwrap();
    // The head's daemons stay in this process group after `ray start --head` returns.
    let head = Head {
        temp: temp.clone(),
        pgid: head_child.id() as i32,
    };
    let status = head_child.wait_with_output().unwrap().status;
    assert!(
        status.success(),
        "ray start --head failed ({status}): {}",
        std::fs::read_to_string(&head_log).unwrap_or_default()
    );

    let cluster = format!("rsl-live-{}", std::process::id());
    let _kill_workers = KillOnDrop(cluster.clone());
    let yaml = format!(
        r#"
cluster_name: {cluster}
provider: {{type: local_processes}}
head_node_type: head
available_node_types:
  head: {{resources: {{CPU: 0}}, node_config: {{}}}}
  cpu2:
    resources: {{CPU: 2, live_marker: 1}}
    labels: {{zone: z1}}
    node_config: {{}}
    max_workers: 1
"#
    );
    let config = ClusterConfig::from_yaml_str(&yaml, "live.yaml").unwrap();
    let mut cfg = LocalProcessConfig::new(&cluster, &gcs, &ray, config.node_types);
    cfg.log_dir = temp.join("worker-logs");
    let provider = LocalProcessProvider::new(cfg).unwrap();

    let t0 = Instant::now();
    provider
        .launch(&LaunchRequest {
            request_id: "live".into(),
            node_type: "cpu2".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
        .await
        .unwrap();
    let id = "local-live-0";
    let mut registered = None;
    while t0.elapsed() < Duration::from_secs(120) {
        let s = ray_status(&ray, &gcs).await;
        if s.contains("/2.0 CPU") && s.contains("live_marker") {
            registered = Some(t0.elapsed());
            break;
        }
        let errors = provider.poll_errors().await;
        assert!(errors.is_empty(), "worker failed: {errors:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = std::fs::read_to_string(provider.log_path(id)).unwrap_or_default();
    let registered = registered.unwrap_or_else(|| panic!("worker never registered; log:\n{log}"));
    println!(
        "MEASURED worker registered {:.1} s after launch",
        registered.as_secs_f64()
    );

    let listed = provider.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].cloud_instance_id, id);
    assert_eq!(listed[0].node_type, "cpu2");
    assert_eq!(listed[0].request_id.as_deref(), Some("live"));
    assert!(listed[0].is_running());

    // A task on the worker that starts a child of its own, so the worker node has Ray
    // worker processes (which Ray 2.60 puts in process groups of their own).
    let driver_src = r#"
import subprocess, sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=1, resources={"live_marker": 1})
def hold():
    subprocess.Popen(["sleep", "303"])
    time.sleep(300)
ray.get(hold.remote())
"#;
    let mut driver = tokio::process::Command::new(&python)
        .args(["-c", driver_src, &gcs])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(temp.join("driver.log")).unwrap())
        .stderr(std::fs::File::create(temp.join("driver.err")).unwrap())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let t_task = Instant::now();
    let task_child = || {
        tagged(&cluster, Some(id))
            .into_iter()
            .find(|p| p.cmdline.starts_with("sleep 303"))
    };
    assert!(
        wait_until(Duration::from_secs(90), || task_child().is_some()).await,
        "the task never ran on the worker: {}",
        std::fs::read_to_string(temp.join("driver.err")).unwrap_or_default()
    );
    println!(
        "MEASURED task running on the worker {:.1} s after the driver started",
        t_task.elapsed().as_secs_f64()
    );
    let sleeper = task_child().unwrap();

    // What `ray start` made, and which process groups it lives in.
    let tagged_now = tagged(&cluster, Some(id));
    let leader = tagged_now
        .iter()
        .find(|p| p.pid == p.pgid && p.cmdline.contains("--block"))
        .map(|p| p.pid)
        .unwrap();
    let in_group: Vec<_> = all_procs()
        .into_iter()
        .filter(|p| p.pgid == leader && p.state != 'Z')
        .collect();
    for p in &in_group {
        let tag = if tagged_now.iter().any(|t| t.pid == p.pid) {
            "tagged"
        } else {
            "untagged"
        };
        println!(
            "MEASURED group {leader}: pid {} ppid {} {tag} {:.70}",
            p.pid, p.ppid, p.cmdline
        );
    }
    for p in tagged_now.iter().filter(|p| p.pgid != leader) {
        println!(
            "MEASURED outside the group: pid {} pgid {} {:.70}",
            p.pid, p.pgid, p.cmdline
        );
    }
    assert!(in_group.iter().any(|p| p.cmdline.contains("raylet")));
    assert_ne!(
        sleeper.pgid, leader,
        "Ray 2.60 runs workers in groups of their own"
    );

    let t1 = Instant::now();
    provider
        .terminate(&[id.to_string()], "live-stop")
        .await
        .unwrap();
    let gone = || {
        tagged(&cluster, Some(id)).is_empty()
            && !is_live(leader)
            && all_procs()
                .iter()
                .all(|p| p.pgid != leader || p.state == 'Z')
    };
    assert!(
        wait_until(Duration::from_secs(30), gone).await,
        "left after terminate: {:?}",
        tagged(&cluster, Some(id))
    );
    println!(
        "MEASURED all worker processes gone {:.1} s after terminate",
        t1.elapsed().as_secs_f64()
    );
    assert!(!is_live(sleeper.pid), "the task's child survived");
    assert!(provider.list().await.unwrap().is_empty());
    assert!(provider.poll_errors().await.is_empty());
    // The GCS lets go of the node too.
    let mut removed = false;
    for _ in 0..60 {
        if !ray_status(&ray, &gcs).await.contains("/2.0 CPU") {
            removed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(removed, "the GCS still shows the worker's CPUs");
    println!(
        "MEASURED GCS shows no worker CPUs {:.1} s after terminate",
        t1.elapsed().as_secs_f64()
    );
    driver.kill().await.unwrap();
    drop(head);
    assert!(!temp.exists());
}
