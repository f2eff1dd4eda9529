//! `rayscale-provider-local`: rayscale's embedded default provider (cluster YAML
//! `provider: {type: local_processes}`). Each worker node is one local
//! `ray start --address=<gcs> --block` process in a process group of its own.
//!
//! What it does: [`LocalProcessProvider`] implements
//! [`rayscale_core::provider::CloudInstanceProvider`]. `launch` spawns `ray start` with
//! the node type's resources and labels as flags ([`ray_start_args`]) and tags the process
//! through its environment (`RAY_CLOUD_INSTANCE_ID`, `RAY_NODE_TYPE_NAME`,
//! `RAYSCALE_CLUSTER`, `RAYSCALE_LAUNCH_REQUEST_ID`); `list` finds instances by scanning
//! `/proc` for those tags, so a restarted rayscale sees the workers an earlier one started
//! and never launches one twice; `terminate` sends SIGTERM to the instance's process group
//! and SIGKILL to whatever of it is left after the grace period; an instance whose
//! `ray start` exits on its own is reported once through `poll_errors`.
//!
//! What it must NOT do: keep state files, talk to anything but local processes (no
//! network; the workers reach the GCS themselves), run a shell, leave zombies or orphans
//! behind, signal a process it cannot attribute to this cluster by its environment or its
//! instance's process group, or run `ray stop` (which stops every Ray on the host).
//! Linux only (`/proc`).

mod args;
mod error;
mod procfs;
mod provider;

pub use args::{ray_start_args, validate_node_type, worker_temp_dir};
pub use error::LocalProviderError;
pub use provider::{LocalProcessConfig, LocalProcessProvider};

/// The `provider.type` of a cluster YAML that selects this provider.
pub const PROVIDER_TYPE: &str = "local_processes";

/// Environment variable naming the instance (read by Ray 2.60's raylet as the node's cloud
/// instance id).
pub const ENV_INSTANCE_ID: &str = "RAY_CLOUD_INSTANCE_ID";
/// Environment variable naming the node type (read by Ray 2.60 as the node type name).
pub const ENV_NODE_TYPE: &str = "RAY_NODE_TYPE_NAME";
/// Environment variable naming the rayscale cluster that owns the process.
pub const ENV_CLUSTER: &str = "RAYSCALE_CLUSTER";
/// Environment variable carrying the launch request id.
pub const ENV_REQUEST_ID: &str = "RAYSCALE_LAUNCH_REQUEST_ID";

/// The instance id of the `k`-th instance of launch request `request_id`.
pub fn instance_id(request_id: &str, k: u64) -> String {
    format!("local-{request_id}-{k}")
}
