//! rayscale's AWS provider: Ray nodes as EC2 instances, through `aws-sdk-ec2`.
//!
//! It maps a Ray AWS cluster YAML (`provider: {type: aws}`, each type's `node_config` as
//! boto3's `create_instances` keys) onto RunInstances, tags every instance as Ray's own
//! AWS provider does (so `ray down`, `ray get-head-ip` and the EC2 console see Ray's
//! nodes), lists the cluster's instances, and terminates (or, with
//! `cache_stopped_nodes`, stops and later restarts) workers.
//!
//! What it must not do: decide anything (the reconciler does), guess whether Ray runs on
//! an instance, hold global state or create a runtime, send a key of `node_config` that is
//! not a RunInstances member of botocore's model (or a value its shape refuses), or let
//! the SDK retry a capacity error.
//!
//! Files: `config` (the YAML), `mapping` (pure: node_config -> RunInstances, instance ->
//! `CloudInstance`), `client` (the SDK client and its error translation), `errors` (the
//! EC2 error-code table), `provider` (the trait implementation), and `resources` (Ray's
//! fill-in of node types' resources from DescribeInstanceTypes, which `ray up` does on
//! AWS: a pure part and a cached lookup; it is not part of the provider trait, so it
//! has its own file), and `bootstrap` (the subnets and security group `ray up` picks or
//! makes for node types that name none, which `rayscale up` does before the head), and
//! `keypair` (the key pair it finds or makes, with its private key under `~/.ssh`), and
//! `iam` (the head's instance profile and role it finds or makes, through `aws-sdk-iam`),
//! and `passthrough` (every other RunInstances member of `node_config`, checked against a
//! table generated from botocore's model and appended to the request as EC2's Query
//! protocol spells it).

pub mod bootstrap;
pub mod client;
pub mod cloudwatch;
pub mod config;
pub mod errors;
pub mod iam;
pub mod keypair;
pub mod mapping;
pub mod passthrough;
pub mod provider;
pub mod resources;

pub use config::{AwsConfig, NodeConfig};
pub use errors::AwsError;
pub use provider::{AwsProvider, CallCounts, PROVIDER_TYPE};
