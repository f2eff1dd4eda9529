//! rayscale's KubeRay provider: Ray worker pods of a RayCluster, scaled through the
//! Kubernetes API (`kube`), as Ray's own autoscaler does when it runs as the head pod's
//! sidecar (Ray 2.60's `cloud_providers/kuberay/cloud_provider.py`).
//!
//! The RayCluster is the config: every iteration reads it and derives Ray's cluster
//! config (`headgroup` and one node type per worker group, resources from
//! `rayStartParams` or the Ray container's limits, idle timeout and upscaling mode from
//! `autoscalerOptions`), as Ray's `autoscaling_config.py` does. Launches raise a group's
//! `replicas` (capped at `maxReplicas`), terminations name pods in the group's
//! `workersToDelete`; KubeRay's operator makes and deletes the pods. The pods
//! (`ray.io/cluster=<name>`) are listed once, at least as new as the head pod, and then
//! kept by a watch (`client::PodCache`); `watch_pods: false` lists them every iteration,
//! as Ray does.
//!
//! Where it does better than Ray's: every patch is guarded by a `test` of the
//! `resourceVersion` (a concurrent edit is read again, never overwritten); a pending
//! delete holds back only its own group's scale-up, not the whole cluster's; a launch
//! request is recorded in the RayCluster in the same patch (`rayscale.io/launch-ledger`),
//! so a replay after a restart adds nothing twice; the config read and the list of one
//! iteration share one GET of the RayCluster; an idle iteration reads no pod again (the
//! watch); the Ray container's status is found by name.
//!
//! What it must not do: delete or patch a pod (the operator owns pods), touch the head,
//! decide anything (the reconciler does), hold global state or create a runtime, or send
//! plain http anywhere but loopback. It does not resize pods in place (Ray 2.60's IPPR).
//!
//! Files: `config` (the RayCluster named by the flags), `mapping` (pure: RayCluster ->
//! Ray config, pod -> instance, scale changes -> JSON patches), `client` (the Kubernetes
//! client and its calls), `errors` (the status table), `provider` (the trait).

pub mod client;
pub mod config;
pub mod errors;
pub mod mapping;
pub mod provider;

pub use config::KubeRayConfig;
pub use errors::KubeRayError;
pub use provider::{KubeRayProvider, PROVIDER_TYPE, config_of};
