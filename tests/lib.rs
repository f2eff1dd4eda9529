//! Workspace integration tests of rayscale (see `tests/`), and the helpers they share:
//! the provider conformance suite (`conformance`), a scriptable gRPC expander server for
//! the expander tests and benchmarks (`expander_server`), a fake Ray GCS on loopback gRPC
//! for sizes no machine can start (`fake_gcs_server`), the thread both serve on
//! (`serving`), a real Ray head node for the live tests (`ray_head`), and the clouds'
//! emulators and fakes (`fakes`: moto's EC2 behind a fault switch), and the boot
//! simulator that plays a cloud's data plane with local processes (`boot_sim`), and the
//! cluster YAMLs whose requests the contract check judges (`cluster_yamls`), and an
//! OpenSSH server on loopback for what SSHes into a node (`sshd`), and what the
//! `file_mounts` tests share (`mounts`).

pub mod boot_sim;
pub mod cluster_yamls;
pub mod conformance;
pub mod delay_proxy;
pub mod e2e;
pub mod expander_server;
pub mod fake_gcs_server;
pub mod fakes;
pub mod mounts;
pub mod ray_head;
pub mod serving;
pub mod sshd;

use std::path::{Path, PathBuf};

/// This process's `PATH` with `tests/fakes/loopback_ssh` first: the `rayscale` a test runs
/// reaches loopback only over SSH (its `up` may SSH to a head; an emulator's instance
/// addresses are refused at once, not tried).
pub fn loopback_ssh_path() -> String {
    format!(
        "{}:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fakes/loopback_ssh")
            .display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A binary of this workspace built with the same profile as the running test
/// (`target/<profile>/<name>`). `scripts/test.sh` builds them first; a missing binary
/// fails the test loudly.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join(name))
        .expect("target directory");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build --release -p {})",
        bin.display(),
        if name == "rayscale" {
            "rayscale"
        } else {
            "rayscale-expander-example"
        }
    );
    bin
}

/// Running processes (zombies excluded) whose environment holds `kv` (`NAME=value`): how
/// tests find what a node started, since Ray's daemons rename themselves.
pub fn processes_with_env(kv: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|buf| buf.split(|b| *b == 0).any(|e| e == kv.as_bytes()))
                .unwrap_or(false)
        })
        .filter(|pid| !has_exited(*pid))
        .collect()
}

/// Kills (SIGKILL) every running process whose environment holds `kv` (test cleanup).
pub fn kill_with_env(kv: &str) {
    let pids = processes_with_env(kv);
    if !pids.is_empty() {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .args(pids.iter().map(u32::to_string))
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Whether process `pid` is gone or a zombie (exited, not yet reaped).
pub fn has_exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Polls `f` every half second until it holds or `timeout` passes; its last answer.
pub fn wait_until(timeout: std::time::Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    f()
}

/// Installs the process's TLS crypto provider (ring, as the binary does): this crate
/// links the AWS SDK's aws-lc-rs beside tonic's ring, so rustls cannot pick one itself.
/// Every test that speaks TLS calls it first; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A scratch directory of one test (`<tmp>/rayscale-<name>-<pid>`), emptied when made and
/// removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh directory for `name`.
    pub fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("rayscale-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Scratch(d)
    }
    /// A path inside it.
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
