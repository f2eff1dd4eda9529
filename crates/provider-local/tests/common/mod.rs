//! Helpers shared by the integration tests: temp dirs, `/proc` inspection, cleanup guards.

#![allow(dead_code, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rayscale_core::config::{ClusterConfig, NodeTypeConfig};
use rustix::process::{Pid, Signal};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rsl-test-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes an executable script.
pub fn write_script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Node types from a small cluster YAML (so the config loader is exercised too).
pub fn node_types() -> Vec<NodeTypeConfig> {
    let yaml = r#"
cluster_name: t
provider: {type: local_processes}
head_node_type: head
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  cpu2:
    resources: {CPU: 2, memory: 1000000000, custom: 3}
    labels: {zone: z1}
    node_config: {}
    max_workers: 4
"#;
    ClusterConfig::from_yaml_str(yaml, "test.yaml")
        .unwrap()
        .node_types
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub state: char,
    pub cmdline: String,
    pub environ: Vec<String>,
}

pub fn read_proc(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    Some(Proc {
        pid,
        ppid: f[1].parse().ok()?,
        pgid: f[2].parse().ok()?,
        state: f[0].chars().next()?,
        cmdline: String::from_utf8_lossy(&cmdline).replace('\0', " "),
        environ: environ
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect(),
    })
}

pub fn all_procs() -> Vec<Proc> {
    let mut out: Vec<Proc> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_proc)
        .collect();
    out.sort_by_key(|p| p.pid);
    out
}

/// Live (non-zombie) processes whose environment carries `RAYSCALE_CLUSTER=<cluster>`
/// (and, when given, `RAY_CLOUD_INSTANCE_ID=<instance>`).
pub fn tagged(cluster: &str, instance: Option<&str>) -> Vec<Proc> {
    let c = format!("RAYSCALE_CLUSTER={cluster}");
    let i = instance.map(|i| format!("RAY_CLOUD_INSTANCE_ID={i}"));
    all_procs()
        .into_iter()
        .filter(|p| p.state != 'Z' && p.environ.contains(&c))
        .filter(|p| i.as_ref().is_none_or(|i| p.environ.contains(i)))
        .collect()
}

/// True while the process exists and is not a zombie.
pub fn is_live(pid: i32) -> bool {
    read_proc(pid).is_some_and(|p| p.state != 'Z')
}

/// Zombies whose parent is this test process (what the provider must reap).
pub fn my_zombies() -> Vec<Proc> {
    let me = std::process::id() as i32;
    all_procs()
        .into_iter()
        .filter(|p| p.state == 'Z' && p.ppid == me)
        .collect()
}

/// Polls `f` every 50 ms until it is true or `timeout` passes; returns its last value.
pub async fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let step = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    loop {
        if f() {
            return true;
        }
        if waited >= timeout {
            return false;
        }
        tokio::time::sleep(step).await;
        waited += step;
    }
}

/// SIGKILLs every process tagged with the cluster (and its group) on drop, so a failing
/// test leaves nothing behind.
pub struct KillOnDrop(pub String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let mine = rustix::process::getpgrp().as_raw_pid();
        for p in tagged(&self.0, None) {
            if p.pgid == p.pid
                && p.pgid != mine
                && let Some(g) = Pid::from_raw(p.pgid)
                && p.pgid > 1
            {
                let _ = rustix::process::kill_process_group(g, Signal::KILL);
            }
            if let Some(pid) = Pid::from_raw(p.pid)
                && p.pid > 1
            {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
    }
}
