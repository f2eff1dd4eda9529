//! The adapter's and the bridge's settings, from the cluster config.
//!
//! ```yaml
//! provider:
//!   type: local                 # or external (with module), fake_multinode, vsphere, aliyun
//!   disable_node_updaters: false  # Ray's key: true when nodes start Ray themselves
//! rayscale:
//!   bridge:
//!     python: /opt/venv/bin/python  # default: $RAYSCALE_PYTHON, else python3
//!     call_timeout_s: 20            # every call but creates and installs (under the
//!                                   # loop's own 30 s deadline of a list)
//!     launch_timeout_s: 300         # one create_node call
//!     install_timeout_s: 1800       # one attempt of Ray's node updater
//! ```

use std::path::PathBuf;
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use serde_json::Value;

use crate::errors::AdapterError;

/// Ray's `AUTOSCALER_MAX_LAUNCH_BATCH`: nodes per `create_node` call.
pub const MAX_LAUNCH_BATCH: u64 = 5;
/// Ray's `AUTOSCALER_MAX_CONCURRENT_LAUNCHES`: nodes being created at once.
pub const MAX_CONCURRENT_LAUNCHES: u64 = 10;

/// How the adapter drives its v1 provider.
#[derive(Debug, Clone)]
pub struct AdapterConfig {
    /// `cluster_name` (the `ray-node-name` tag).
    pub cluster_name: String,
    /// Nodes per create call.
    pub batch: u64,
    /// Create calls in flight at once (Ray: `ceil(max_concurrent_launches / batch)`).
    pub concurrent_batches: usize,
    /// How long `launch` waits for its create calls before it returns and leaves the
    /// rest to `poll_errors`.
    pub launch_wait: Duration,
    /// Whether Ray is installed by Ray's node updater (not `disable_node_updaters`).
    pub installs_ray: bool,
    /// The head's address as workers reach it (`RAY_HEAD_IP` of the start commands).
    pub head_ip: String,
    /// Attempts of an install (Ray's `ThreadedRayInstaller`: 3).
    pub install_attempts: u32,
    /// Wait before the second attempt, doubled after each (Ray: 10 s).
    pub install_retry_interval: Duration,
}

impl AdapterConfig {
    /// Ray's defaults for `config`; `head_ip` is the head's address for workers.
    pub fn new(config: &ClusterConfig, head_ip: &str) -> Result<Self, AdapterError> {
        let provider = config.raw.get("provider");
        let updaters_off = match provider.and_then(|p| p.get("disable_node_updaters")) {
            None | Some(Value::Null) => config.provider_type == "fake_multinode",
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(AdapterError::Config {
                    path: "provider.disable_node_updaters".into(),
                    message: format!("expected a boolean, got {v}"),
                });
            }
        };
        Ok(AdapterConfig {
            cluster_name: config.cluster_name.clone(),
            batch: MAX_LAUNCH_BATCH,
            concurrent_batches: MAX_CONCURRENT_LAUNCHES.div_ceil(MAX_LAUNCH_BATCH) as usize,
            launch_wait: Duration::from_secs(10),
            installs_ray: !updaters_off,
            head_ip: head_ip.to_string(),
            install_attempts: 3,
            install_retry_interval: Duration::from_secs(10),
        })
    }
}

/// How the Python child runs.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The interpreter (with Ray installed, the version of the cluster).
    pub python: PathBuf,
    /// `provider.type`.
    pub provider_type: String,
    /// The cluster config handed to the child (Ray's provider gets its `provider`
    /// block; Ray's node updater the rest).
    pub cluster_config: Value,
    /// Extra environment of the child.
    pub env: Vec<(String, String)>,
    /// Deadline of every call but creates and installs (20 s: under the loop's 30 s
    /// deadline of a list, so a hung child is replaced before the next iteration).
    pub call_timeout: Duration,
    /// Deadline of one create call.
    pub launch_timeout: Duration,
    /// Deadline of one install attempt.
    pub install_timeout: Duration,
    /// Deadline of the child's start (importing Ray, making the provider).
    pub start_timeout: Duration,
}

fn secs(block: &Value, key: &str, default: u64) -> Result<Duration, AdapterError> {
    match block.get(key) {
        None | Some(Value::Null) => Ok(Duration::from_secs(default)),
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(AdapterError::Config {
                path: format!("rayscale.bridge.{key}"),
                message: format!("expected a positive number of seconds, got {v}"),
            }),
        },
    }
}

impl BridgeConfig {
    /// The bridge for `config`; `gcs_address` fills what Ray's test provider
    /// `fake_multinode` needs (`gcs_address`, `launch_multiple`, `RAY_FAKE_CLUSTER`).
    pub fn new(config: &ClusterConfig, gcs_address: &str) -> Result<Self, AdapterError> {
        let empty = Value::Object(Default::default());
        let block = config
            .raw
            .get("rayscale")
            .and_then(|r| r.get("bridge"))
            .unwrap_or(&empty);
        if let Some(o) = block.as_object() {
            for k in o.keys() {
                if !matches!(
                    k.as_str(),
                    "python" | "call_timeout_s" | "launch_timeout_s" | "install_timeout_s"
                ) {
                    return Err(AdapterError::Config {
                        path: format!("rayscale.bridge.{k}"),
                        message: rayscale_core::config::keys::unknown("bridge"),
                    });
                }
            }
        } else {
            return Err(AdapterError::Config {
                path: "rayscale.bridge".into(),
                message: format!("expected a mapping, got {block}"),
            });
        }
        let python = match block.get("python") {
            Some(Value::String(p)) => PathBuf::from(p),
            None | Some(Value::Null) => std::env::var_os("RAYSCALE_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("python3")),
            Some(v) => {
                return Err(AdapterError::Config {
                    path: "rayscale.bridge.python".into(),
                    message: format!("expected a path, got {v}"),
                });
            }
        };
        let mut cluster_config = config.raw.clone();
        let mut env = Vec::new();
        if config.provider_type == "external"
            && !config
                .raw
                .get("provider")
                .and_then(|p| p.get("module"))
                .is_some_and(Value::is_string)
        {
            return Err(AdapterError::Config {
                path: "provider.module".into(),
                message: "is required for provider.type external (module.path.ClassName of a Ray v1 NodeProvider)".into(),
            });
        }
        if config.provider_type == "fake_multinode" {
            if let Some(p) = cluster_config
                .get_mut("provider")
                .and_then(Value::as_object_mut)
            {
                p.entry("gcs_address")
                    .or_insert_with(|| Value::String(gcs_address.to_string()));
                p.entry("launch_multiple").or_insert(Value::Bool(true));
            }
            env.push(("RAY_FAKE_CLUSTER".to_string(), "1".to_string()));
        }
        Ok(BridgeConfig {
            python,
            provider_type: config.provider_type.clone(),
            cluster_config,
            env,
            call_timeout: secs(block, "call_timeout_s", 20)?,
            launch_timeout: secs(block, "launch_timeout_s", 300)?,
            install_timeout: secs(block, "install_timeout_s", 1800)?,
            start_timeout: Duration::from_secs(120),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str, t: &str) -> ClusterConfig {
        let yaml = format!(
            "cluster_name: c\nprovider: {{type: {t}}}\nhead_node_type: h\n{extra}\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
        );
        ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn bridge_settings_are_checked_with_one_line_errors() {
        let c = config(
            "rayscale: {bridge: {call_timeout_s: 5, python: /x/python}}\n",
            "local",
        );
        let b = BridgeConfig::new(&c, "127.0.0.1:1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.call_timeout, Duration::from_secs(5));
        assert_eq!(b.python, PathBuf::from("/x/python"));
        let c = config("rayscale: {bridge: {call_timeout_s: soon}}\n", "local");
        let e = BridgeConfig::new(&c, "a")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("rayscale.bridge.call_timeout_s: expected"),
            "{e}"
        );
        let c = config("rayscale: {bridge: {pyhton: x}}\n", "local");
        let e = BridgeConfig::new(&c, "a")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("rayscale.bridge.pyhton: unknown key"), "{e}");
        let e = BridgeConfig::new(&config("", "external"), "a")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("provider.module: is required"), "{e}");
    }

    #[test]
    fn fake_multinode_gets_what_it_needs_and_starts_ray_itself() {
        let c = config("", "fake_multinode");
        let b = BridgeConfig::new(&c, "127.0.0.1:6379").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            b.cluster_config["provider"]["gcs_address"],
            Value::String("127.0.0.1:6379".into())
        );
        assert!(b.env.iter().any(|(k, _)| k == "RAY_FAKE_CLUSTER"));
        let a = AdapterConfig::new(&c, "127.0.0.1").unwrap_or_else(|e| panic!("{e}"));
        assert!(!a.installs_ray);
        let a =
            AdapterConfig::new(&config("", "local"), "127.0.0.1").unwrap_or_else(|e| panic!("{e}"));
        assert!(a.installs_ray);
        assert_eq!((a.batch, a.concurrent_batches), (5, 2));
    }
}
