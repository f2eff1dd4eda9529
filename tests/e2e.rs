//! Helpers of the end-to-end tests that run a whole cluster on this machine (a cloud's
//! fake or emulator, the boot simulator, a real Ray): the workload, the GCS probe, and
//! child processes with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::wait_until;

/// Waits for a child process up to `timeout` (killed after it): its exit success and
/// output.
pub fn finish(mut child: std::process::Child, timeout: Duration) -> (bool, String) {
    let pid = child.id();
    if !wait_until(timeout, || crate::has_exited(pid)) {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Runs the test workload (4 tasks of 2 CPUs for 4 s) against `gcs`: ok and its output.
pub fn workload(python: &Path, gcs: &str) -> (bool, String) {
    let w = Command::new(python)
        .arg(root().join("tests/live/workload.py"))
        .arg(gcs)
        .args(["tasks", "4", "2", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("workload");
    let (ok, text) = finish(w, Duration::from_secs(240));
    (ok && text.contains("done 4"), text)
}

/// Whether a GCS answers at `gcs` (`rayscale status`).
pub fn gcs_answers(gcs: &str) -> bool {
    Command::new(crate::workspace_bin("rayscale"))
        .args(["status", "--gcs", gcs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}
