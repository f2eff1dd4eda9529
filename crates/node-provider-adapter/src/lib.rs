//! rayscale's node-provider adapter: every Ray v1 node provider (vSphere, Aliyun, the
//! on-premise `local` provider over SSH, `fake_multinode`, any `external` module) as a
//! [`CloudInstanceProvider`](rayscale_core::provider::CloudInstanceProvider), with Ray
//! 2.60's semantics (`autoscaler/v2/instance_manager/node_provider.py`).
//!
//! - [`v1::NodeProvider`] is Ray's v1 interface (`non_terminated_nodes`,
//!   `create_node_with_resources_and_labels`, `terminate_nodes`, `node_tags`, ...).
//! - [`NodeProviderAdapter`] turns one into the contract: Ray's tags on every launch
//!   (`ray-launch-request`, `ray-user-node-type`, `ray-node-type`, `ray-node-status`, ...),
//!   launches in batches of [`config::MAX_LAUNCH_BATCH`] with bounded concurrency,
//!   idempotent by request id (the request tag is counted before anything is made),
//!   unmanaged nodes skipped, the head never terminated, and Ray installed over SSH by
//!   Ray's own node updater where the provider needs it (retried as Ray does).
//! - [`PythonBridge`] is a `NodeProvider` that runs Ray's own Python provider class in a
//!   child process (`python/rayscale_bridge.py`, shipped inside the binary) speaking
//!   line-delimited JSON over its stdin/stdout: a deadline per call, a restart after a
//!   crash or a hang, the child's stderr forwarded to the logs.
//!
//! What it must not do: re-implement a Ray provider (the bridge runs Ray's), decide
//! anything (the reconciler does), hold global state or create a runtime (background
//! work is spawned on the caller's runtime), or write to the child anything but the
//! protocol.
//!
//! Files: `config` (the adapter's and the bridge's settings), `v1` (the v1 trait),
//! `mapping` (pure: tags of a launch, v1 node -> instance), `client` (the Python bridge),
//! `errors` (the error enum and its kind table), `provider` (the adapter).

pub mod client;
pub mod config;
pub mod errors;
pub mod mapping;
pub mod provider;
pub mod v1;

#[cfg(test)]
mod tests;

pub use client::PythonBridge;
pub use config::{AdapterConfig, BridgeConfig};
pub use errors::AdapterError;
pub use provider::NodeProviderAdapter;
pub use v1::{NodeInfo, NodeProvider, Tags};

/// Locks `m`, taking the data of a mutex a panicking thread poisoned (every critical
/// section here leaves its data whole).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The provider types of Ray served through the bridge (`external` needs `module`).
pub const PROVIDER_TYPES: [&str; 5] = ["external", "local", "fake_multinode", "vsphere", "aliyun"];
