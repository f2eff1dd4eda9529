//! rayscale's GCP provider: Ray nodes as Compute Engine instances, through Google's Rust
//! client (`google-cloud-compute-v1`), and Cloud TPU VMs and multi-host slices through
//! the TPU API (v2alpha1, the version Ray calls).
//!
//! It maps a Ray GCP cluster YAML (`provider: {type: gcp, project_id, availability_zone}`,
//! each type's `node_config` as fields of Compute Engine's `Instance`) onto
//! `instances.insert`, names and labels every instance as Ray's own GCP provider does (so
//! `ray down` and the console see Ray's nodes; the name is the cloud instance id), lists
//! the cluster's instances by label, and deletes (or, with `cache_stopped_nodes`, stops
//! and later starts) workers. Ray starts at boot from the `startup-script` metadata.
//!
//! What it must not do: decide anything (the reconciler does), guess whether Ray runs on
//! an instance, hold global state or create a runtime, take an operation that ended with
//! an error for a success, send plain http anywhere but loopback, or make a TPU head
//! (refused at load). Its bootstrap must not create projects, make
//! a service account a head that names its own does not use, or write project metadata
//! without the fingerprint it read.
//!
//! Files: `config` (the YAML), `mapping` (pure: node_config -> `Instance`, instance ->
//! `CloudInstance`, names, labels, the list filter), `tpu` (pure, the same for a TPU
//! node, and Ray's `TPU-<type>-head` resource), `client` (credentials, endpoint,
//! retries, polling), `errors` (the error-code table), `provider` (the trait
//! implementation); `bootstrap` (`rayscale up`'s part of Ray's `bootstrap_gcp`: the
//! head's service account, the project's SSH key, the subnet) over `rest` (its few calls
//! to IAM, Resource Manager and Compute's projects).

pub mod bootstrap;
pub mod client;
pub mod config;
pub mod errors;
pub mod mapping;
pub mod provider;
pub mod rest;
pub mod tpu;

pub use client::Polling;
pub use config::{GcpConfig, NodeConfig};
pub use errors::GcpError;
pub use provider::{CallCounts, GcpProvider, PROVIDER_TYPE};
