//! What the provider is told at start: which RayCluster (the flags of Ray's own `ray
//! kuberay-autoscaler`). Everything else, node types included, is read from the
//! RayCluster on every iteration ([`crate::mapping::cluster_config_value`]).

use std::time::Duration;

use crate::errors::KubeRayError;

/// The RayCluster a provider serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeRayConfig {
    /// `metadata.name` of the RayCluster (`--cluster-name`).
    pub cluster_name: String,
    /// Its namespace (`--cluster-namespace`).
    pub namespace: String,
    /// The head pod's name, whose `resourceVersion` bounds each pod list from below
    /// (`RAY_HEAD_POD_NAME`, as Ray reads it); else learned from the first list.
    pub head_pod_name: Option<String>,
    /// A RayCluster read this recently is reused by the next call (the config read and
    /// the list of one iteration share one GET).
    pub reuse_window: Duration,
    /// Patches tried again after a conflict (a concurrent edit), each on a fresh read.
    pub conflict_retries: u32,
    /// Keep the pods by one list and a watch (true), or list them every iteration as
    /// Ray does (false).
    pub watch_pods: bool,
}

impl KubeRayConfig {
    /// The RayCluster `name` in `namespace`, checked as Kubernetes names are (DNS-1123).
    pub fn new(name: &str, namespace: &str) -> Result<Self, KubeRayError> {
        for (what, v) in [("--cluster-name", name), ("--cluster-namespace", namespace)] {
            let ok = !v.is_empty()
                && v.len() <= 253
                && v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric());
            if !ok {
                return Err(KubeRayError::Config {
                    path: what.into(),
                    message: format!("{v:?} is not a Kubernetes object name"),
                });
            }
        }
        Ok(KubeRayConfig {
            cluster_name: name.to_string(),
            namespace: namespace.to_string(),
            head_pod_name: std::env::var("RAY_HEAD_POD_NAME")
                .ok()
                .filter(|s| !s.is_empty()),
            reuse_window: Duration::from_millis(500),
            conflict_retries: 3,
            watch_pods: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(KubeRayConfig::new("raycluster-a", "default").is_ok());
        let e = KubeRayConfig::new("Bad_Name", "default")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("--cluster-name:"), "{e}");
        assert!(KubeRayConfig::new("a", "").is_err());
    }
}
