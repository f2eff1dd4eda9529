//! Pure translation of a node type into Ray 2.60's `ray start` flags.
//!
//! Ray 2.60's `ray start` takes `--num-cpus`, `--num-gpus`, `--memory` (hidden) and
//! `--object-store-memory` as integers (click `type=int`), every other resource as a JSON
//! object in `--resources`, and labels (hidden `--labels`) as `k1=v1,k2=v2` (its JSON form is
//! deprecated). `--num-cpus`/`--num-gpus` are always given (0 when the type has none), so
//! a worker never advertises the host's CPUs or GPUs instead of its node type's.

use rayscale_core::config::NodeTypeConfig;
use rayscale_core::model::resources::{Fixed, SCALE, to_f64};
use serde_json::{Map, Number, Value};

use crate::error::LocalProviderError;

/// Resources that have their own `ray start` flag.
const FLAG_RESOURCES: [&str; 4] = ["CPU", "GPU", "memory", "object_store_memory"];

/// Arguments of `ray start` (after the binary) for one worker of `node_type` joining the
/// GCS at `gcs` (`host:port`) with node IP `ip`.
///
/// ```text
/// start --address=<gcs> --block --node-ip-address=<ip> --num-cpus=N --num-gpus=G
///       [--memory=B] [--object-store-memory=B] --resources=<json> [--labels=k=v,...]
/// ```
pub fn ray_start_args(node_type: &NodeTypeConfig, gcs: &str, ip: &str) -> Vec<String> {
    let res = &node_type.resources;
    let mut args = vec![
        "start".to_string(),
        format!("--address={gcs}"),
        "--block".to_string(),
        format!("--node-ip-address={ip}"),
        format!("--num-cpus={}", quantity(res.get("CPU").unwrap_or(0))),
        format!("--num-gpus={}", quantity(res.get("GPU").unwrap_or(0))),
    ];
    if let Some(m) = res.get("memory") {
        args.push(format!("--memory={}", quantity(m)));
    }
    if let Some(m) = res.get("object_store_memory") {
        args.push(format!("--object-store-memory={}", quantity(m)));
    }
    let mut custom = Map::new();
    for (name, v) in res.iter() {
        if !FLAG_RESOURCES.contains(&name) {
            custom.insert(name.to_string(), json_quantity(v));
        }
    }
    args.push(format!("--resources={}", Value::Object(custom)));
    if !node_type.labels.is_empty() {
        let labels: Vec<String> = node_type
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        args.push(format!("--labels={}", labels.join(",")));
    }
    args
}

/// The `--temp-dir` of one worker: its own, short (Ray puts Unix sockets below it, and
/// their paths must stay under about 100 bytes), stable for the instance.
///
/// Workers must not share the head's session directory: Ray 2.60 names each node's plasma
/// socket after the first unused `sockets/plasma_store.N` there, a check that is not atomic
/// across processes, so `ray start`s launched together pick the same name and all but one
/// raylet die with "Address already in use" (measured: 3 or 4 of 4 workers started at
/// once, each costing a 30 s registration timeout).
pub fn worker_temp_dir(cluster_name: &str, instance_id: &str) -> std::path::PathBuf {
    // FNV-1a: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in cluster_name.bytes().chain([0]).chain(instance_id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    std::path::PathBuf::from(format!("/tmp/rsw-{h:016x}"))
}

/// Checks that `ray start` can express `node_type` exactly: the flag resources are whole
/// non-negative numbers, and labels survive the `k=v,k=v` syntax.
pub fn validate_node_type(node_type: &NodeTypeConfig) -> Result<(), LocalProviderError> {
    let bad = |reason: String| LocalProviderError::InvalidNodeType {
        name: node_type.name.clone(),
        reason,
    };
    for (name, v) in node_type.resources.iter() {
        if name.is_empty() {
            return Err(bad("a resource has an empty name".to_string()));
        }
        if v < 0 {
            return Err(bad(format!("resource {name} is negative ({})", to_f64(v))));
        }
        if FLAG_RESOURCES.contains(&name) && v % SCALE != 0 {
            return Err(bad(format!(
                "{name} must be a whole number for `ray start`, got {}",
                to_f64(v)
            )));
        }
    }
    for (k, v) in &node_type.labels {
        if k.is_empty() || k.contains([',', '=']) || v.contains([',', '=']) {
            return Err(bad(format!(
                "label {k:?}: {v:?} cannot be passed to `ray start --labels` (no ',' or '=')"
            )));
        }
    }
    Ok(())
}

/// A fixed-point quantity as `ray start` text: an integer when whole, else a decimal.
fn quantity(v: Fixed) -> String {
    if v % SCALE == 0 {
        (v / SCALE).to_string()
    } else {
        to_f64(v).to_string()
    }
}

/// A fixed-point quantity as a JSON number: an integer when whole.
fn json_quantity(v: Fixed) -> Value {
    if v % SCALE == 0
        && let Ok(i) = i64::try_from(v / SCALE)
    {
        return Value::Number(Number::from(i));
    }
    Number::from_f64(to_f64(v)).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayscale_core::model::ResourceMap;

    fn node_type(res: &[(&str, f64)], labels: &[(&str, &str)]) -> NodeTypeConfig {
        NodeTypeConfig {
            name: "t".into(),
            resources: ResourceMap::from_f64_pairs(res.iter().map(|(k, v)| (k.to_string(), *v))),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            min_workers: 0,
            max_workers: None,
            idle_timeout_s: None,
            priority: 0,
            node_config: Value::Object(Map::new()),
            launch_config_hash: String::new(),
            hosts: None,
        }
    }

    #[test]
    fn full_node_type() {
        let t = node_type(
            &[
                ("CPU", 4.0),
                ("GPU", 1.0),
                ("memory", 8e9),
                ("object_store_memory", 1e9),
                ("accelerator_type:A100", 1.0),
                ("tpu", 0.5),
            ],
            &[("zone", "a"), ("ray.io/market-type", "spot")],
        );
        assert_eq!(
            ray_start_args(&t, "127.0.0.1:6379", "127.0.0.1"),
            vec![
                "start",
                "--address=127.0.0.1:6379",
                "--block",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=4",
                "--num-gpus=1",
                "--memory=8000000000",
                "--object-store-memory=1000000000",
                r#"--resources={"accelerator_type:A100":1,"tpu":0.5}"#,
                "--labels=zone=a,ray.io/market-type=spot",
            ]
        );
    }

    #[test]
    fn empty_node_type_pins_cpus_and_gpus_to_zero() {
        let t = node_type(&[], &[]);
        assert_eq!(
            ray_start_args(&t, "h:1", "127.0.0.1"),
            vec![
                "start",
                "--address=h:1",
                "--block",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=0",
                "--num-gpus=0",
                "--resources={}",
            ]
        );
    }

    #[test]
    fn custom_resources_keep_config_order() {
        let t = node_type(&[("z", 1.0), ("CPU", 2.0), ("a", 3.0)], &[]);
        let args = ray_start_args(&t, "h:1", "127.0.0.1");
        assert_eq!(args[4], "--num-cpus=2");
        assert_eq!(args[6], r#"--resources={"z":1,"a":3}"#);
    }

    #[test]
    fn validation() {
        assert!(validate_node_type(&node_type(&[("CPU", 2.0), ("x", 0.25)], &[])).is_ok());
        let e = validate_node_type(&node_type(&[("CPU", 0.5)], &[])).map_err(|e| e.to_string());
        assert_eq!(
            e,
            Err("node type \"t\": CPU must be a whole number for `ray start`, got 0.5".to_string())
        );
        assert!(validate_node_type(&node_type(&[("memory", 1.5)], &[])).is_err());
        assert!(validate_node_type(&node_type(&[("GPU", -1.0)], &[])).is_err());
        assert!(validate_node_type(&node_type(&[], &[("a", "b,c")])).is_err());
        assert!(validate_node_type(&node_type(&[], &[("a=b", "c")])).is_err());
        assert!(validate_node_type(&node_type(&[], &[("", "c")])).is_err());
    }
}
