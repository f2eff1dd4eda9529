//! rayscale's Azure provider: Ray nodes as Azure virtual machines, through Resource
//! Manager's compute API (`azure_mgmt_compute` 0.21 on `azure_core`, credentials from
//! `azure_identity`).
//!
//! It maps a Ray Azure cluster YAML (`provider: {type: azure, location, resource_group,
//! subscription_id}`, each type's `azure_arm_parameters` as Ray's VM template takes them)
//! onto one `virtualMachines.createOrUpdate` per VM, with the VM's NIC, public address and
//! OS disk made with it and deleted with it; names VMs from the launch request (a
//! replayed create is a PUT of the same VM) and tags them as Ray's Azure provider does;
//! lists the resource group's VMs of the cluster with their power state; and deletes (or,
//! with `cache_stopped_nodes`, Ray's Azure default, deallocates and later starts)
//! workers. Ray starts at boot from `customData` (cloud-init).
//!
//! What it must not do: decide anything (the reconciler does), guess whether Ray runs on
//! a VM, hold global state or create a runtime, take an operation that ended `Failed` for
//! a success, leave a VM whose create failed behind, send plain http anywhere but
//! loopback, or make networks, identities or resource groups anywhere but in `up`'s
//! bootstrap (`bootstrap`, Ray's `bootstrap_azure`; see docs/src/platforms/azure.md).
//!
//! Files: `bootstrap` (`rayscale up`'s resource group, network, identity and key),
//! `config` (the YAML), `mapping` (pure: node_config -> VM body, VM ->
//! `CloudInstance`, names, tags), `client` (credentials, endpoint, retries, the create
//! call and operation polling the SDK cannot do soundly), `errors` (the error-code
//! table), `provider` (the trait implementation).

pub mod bootstrap;
pub mod client;
pub mod config;
pub mod errors;
pub mod mapping;
pub mod provider;

pub use client::Polling;
pub use config::{AzureConfig, NodeConfig};
pub use errors::AzureError;
pub use provider::{AzureProvider, PROVIDER_TYPE};
