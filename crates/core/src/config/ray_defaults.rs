//! What Ray takes from a cloud's `defaults.yaml` when a cluster YAML leaves a top-level
//! key out. Ray's `prepare_config` (run by `ray up` and by the v2 autoscaler on every
//! config it reads) lays the YAML's top-level keys over the cloud's defaults, so a YAML
//! without `max_workers` is capped at the defaults' 2 workers, one without `auth` logs in
//! as `ubuntu`, and one without `available_node_types` gets the defaults' head and worker
//! types. rayscale does the same for the keys it acts on, for the clouds it runs
//! (`aws`, `gcp`, `azure`); `tests/tests/ray_defaults.rs` checks every value here against
//! the wheel's `defaults.yaml`.
//!
//! Not filled: the defaults' setup commands (they install a nightly Ray wheel and, on
//! Azure, conda; rayscale's boot script installs and starts Ray its own way, and takes
//! Ray's default start commands already), and the
//! keys whose default is empty (`file_mounts`, `docker`, ...), which rayscale already
//! reads as absent. `idle_timeout_minutes` (5) and `upscaling_speed` (1.0) have
//! rayscale's own defaults, which are the same.

use serde_json::{Value, json};

/// Ray's default `max_workers` for the clouds rayscale runs (all three say 2).
const RAY_DEFAULT_MAX_WORKERS: u64 = 2;

/// The head type Ray's defaults.yaml of a cloud names (`head_node_type`), which Ray takes
/// when a cluster YAML names none; `None` for a provider without one.
pub fn head_type(provider_type: &str) -> Option<&'static str> {
    match provider_type {
        "aws" | "azure" => Some("ray.head.default"),
        "gcp" => Some("ray_head_default"),
        _ => None,
    }
}

/// The node types of the cloud's defaults.yaml, in its order.
pub fn node_types(provider_type: &str) -> Option<Value> {
    let v = match provider_type {
        "aws" => json!({
            "ray.head.default": {
                "resources": {},
                "node_config": {
                    "InstanceType": "m5.large",
                    "BlockDeviceMappings": [
                        {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 256}}
                    ]
                }
            },
            "ray.worker.default": {
                "min_workers": 0,
                "resources": {},
                "node_config": {
                    "InstanceType": "m5.large",
                    "InstanceMarketOptions": {"MarketType": "spot"}
                }
            }
        }),
        "gcp" => {
            let disks = json!([{
                "boot": true,
                "autoDelete": true,
                "type": "PERSISTENT",
                "initializeParams": {
                    "diskSizeGb": 50,
                    "sourceImage":
                        "projects/deeplearning-platform-release/global/images/family/common-cpu"
                }
            }]);
            json!({
                "ray_head_default": {
                    "resources": {"CPU": 2},
                    "node_config": {"machineType": "n1-standard-2", "disks": disks}
                },
                "ray_worker_small": {
                    "min_workers": 0,
                    "resources": {"CPU": 2},
                    "node_config": {
                        "machineType": "n1-standard-2",
                        "disks": disks,
                        "scheduling": [{"preemptible": true}]
                    }
                }
            })
        }
        "azure" => {
            let vm = |extra: (&str, &str)| {
                let mut p = json!({
                    "vmSize": "Standard_D2s_v3",
                    "imagePublisher": "microsoft-dsvm",
                    "imageOffer": "ubuntu-2204",
                    "imageSku": "2204-gen2",
                    "imageVersion": "latest"
                });
                if let Some(o) = p.as_object_mut() {
                    o.insert(extra.0.to_string(), Value::from(extra.1));
                }
                json!({"azure_arm_parameters": p})
            };
            json!({
                "ray.head.default": {
                    "resources": {"CPU": 2},
                    "node_config": vm(("availability_zone", "none"))
                },
                "ray.worker.default": {
                    "min_workers": 0,
                    "resources": {"CPU": 2},
                    "node_config": vm(("priority", "Spot"))
                }
            })
        }
        _ => return None,
    };
    Some(v)
}

/// The top-level keys `fill` takes from the defaults.
const FILLED: [&str; 3] = ["max_workers", "auth", "available_node_types"];

/// The defaults' top-level values, by key (the keys filled, in their order), for a
/// cloud with a defaults.yaml.
pub fn top_level(provider_type: &str) -> Vec<(&'static str, Value)> {
    let Some(types) = node_types(provider_type) else {
        return Vec::new();
    };
    vec![
        (FILLED[0], Value::from(RAY_DEFAULT_MAX_WORKERS)),
        (FILLED[1], json!({"ssh_user": "ubuntu"})),
        (FILLED[2], types),
    ]
}

/// `v` with the cloud defaults' values for the top-level keys it leaves out, or `None`
/// when it leaves none out (or is not a mapping, or names no cloud with defaults). A
/// filled-in `available_node_types` is said as a warning: it launches instances the YAML
/// never names.
pub fn fill(v: &Value, path: &str) -> Option<Value> {
    let obj = v.as_object()?;
    let provider_type = obj.get("provider")?.get("type")?.as_str()?;
    // Most YAMLs name all three: nothing is built for them (every config load asks).
    if FILLED.iter().all(|k| obj.contains_key(*k)) {
        return None;
    }
    let missing: Vec<(&str, Value)> = top_level(provider_type)
        .into_iter()
        .filter(|(k, _)| !obj.contains_key(*k))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut out = obj.clone();
    for (k, value) in missing {
        if k == "available_node_types" {
            let names: Vec<&str> = value
                .as_object()
                .map(|m| m.keys().map(String::as_str).collect())
                .unwrap_or_default();
            tracing::warn!(
                "{}: not set, so Ray's default node types for {provider_type} ({}), as \
                 ray up takes them from its defaults.yaml",
                super::schema::join(path, k),
                names.join(", ")
            );
        }
        out.insert(k.to_string(), value);
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_left_out_is_filled_and_only_for_a_cloud() {
        let given = json!({"cluster_name": "c", "provider": {"type": "aws"}, "max_workers": 7});
        let filled = fill(&given, "").unwrap_or_else(|| panic!("auth and types are missing"));
        assert_eq!(
            filled["max_workers"],
            json!(7),
            "the YAML's own value stays"
        );
        assert_eq!(filled["auth"], json!({"ssh_user": "ubuntu"}));
        assert!(filled["available_node_types"]["ray.worker.default"].is_object());
        assert_eq!(fill(&filled, ""), None, "nothing left to fill");
        for other in ["kuberay", "local", "fake"] {
            let v = json!({"provider": {"type": other}});
            assert_eq!(fill(&v, ""), None, "{other}");
        }
        assert_eq!(fill(&json!([1]), ""), None);
    }

    #[test]
    fn each_clouds_defaults_name_their_own_head_type() {
        for cloud in ["aws", "gcp", "azure"] {
            let types = node_types(cloud).unwrap_or_else(|| panic!("{cloud}"));
            let head = head_type(cloud).unwrap_or_else(|| panic!("{cloud}"));
            assert!(types.get(head).is_some(), "{cloud}: {head}");
            assert_eq!(types.as_object().map(|m| m.len()), Some(2), "{cloud}");
        }
    }
}
