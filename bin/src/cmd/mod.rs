//! One module per command of the `rayscale` binary, each with its arguments and the
//! wiring only it needs; what several share (the GCS clients, the loop, the providers,
//! the local head, the cloud launcher, the ops endpoints) sits beside `cmd/`.

pub mod boot_script;
pub mod down;
pub mod explain;
#[cfg(feature = "kuberay")]
pub mod kuberay;
pub mod plan;
pub mod request_resources;
pub mod run;
pub mod simulate;
pub mod snapshot;
pub mod status;
pub mod up;
