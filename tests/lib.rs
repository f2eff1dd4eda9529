//! Workspace integration tests of rayscale (see `tests/`), and the helpers they share:
//! the provider conformance suite (`conformance`), a scriptable gRPC expander server for
//! the expander tests and benchmarks (`expander_server`), a fake Ray GCS on loopback gRPC
//! for sizes no machine can start (`fake_gcs_server`), the thread both serve on
//! (`serving`), a real Ray head node for the live tests (`ray_head`), and the clouds'
//! emulators and fakes (`fakes`: moto's EC2 behind a fault switch).

pub mod conformance;
pub mod expander_server;
pub mod fake_gcs_server;
pub mod fakes;
pub mod ray_head;
pub mod serving;

use std::path::{Path, PathBuf};

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
