//! Ray's resource fill-in for AWS (`AWSNodeProvider.fillout_available_node_types_resources`,
//! which `ray up` runs): each node type's `CPU`, a worker type's `memory`, and its GPUs or
//! Neuron cores (with their `accelerator_type:<name>` resource) come from its
//! `node_config.InstanceType` as EC2's DescribeInstanceTypes describes it; what the YAML
//! gives wins. Ray's own example YAMLs leave `resources: {}` and rely on this.
//!
//! The pure part ([`instance_type_facts`], [`detected_resources`], [`fill_resources`])
//! takes EC2's description; [`InstanceTypes`] asks EC2 once per instance type and process
//! (the answers do not change) and fills a config with them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types as ec2;
use rayscale_core::config::ClusterConfig;
use serde_json::{Map, Value};

use crate::AwsError;
use crate::client::sdk_error;

/// Ray 2.60's share of a node's memory kept for the object store
/// (`ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION`): a worker type's `memory`
/// resource is the rest.
const OBJECT_STORE_SHARE: f64 = 0.3;

/// Neuron cores per instance type (Ray 2.60's `AWS_NEURON_INSTANCE_MAP`: EC2's API does
/// not describe them).
pub const NEURON_CORES: &[(&str, i64)] = &[
    ("trn1.2xlarge", 2),
    ("trn1.32xlarge", 32),
    ("trn1n.32xlarge", 32),
    ("inf2.xlarge", 2),
    ("inf2.8xlarge", 2),
    ("inf2.24xlarge", 12),
    ("inf2.48xlarge", 24),
];

/// Ray's accelerator type of a Neuron core (`ray.util.accelerators.AWS_NEURON_CORE`).
const NEURON_CORE_TYPE: &str = "aws-neuron-core";

/// What Ray reads of an instance type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceTypeFacts {
    /// `VCpuInfo.DefaultVCpus`.
    pub vcpus: i64,
    /// `MemoryInfo.SizeInMiB`.
    pub memory_mib: i64,
    /// `GpuInfo.Gpus`: each kind's count and name (Ray supports one kind).
    pub gpus: Vec<(i64, String)>,
}

/// The facts of one entry of DescribeInstanceTypes' answer, with its name; `None` when
/// EC2 left out the name, the vCPUs or the memory (the type is then not filled in).
pub fn instance_type_facts(t: &ec2::InstanceTypeInfo) -> Option<(String, InstanceTypeFacts)> {
    let name = t.instance_type()?.as_str().to_string();
    let vcpus = i64::from(t.v_cpu_info()?.default_v_cpus()?);
    let memory_mib = t.memory_info()?.size_in_mib()?;
    let gpus = t
        .gpu_info()
        .map(|g| {
            g.gpus()
                .iter()
                .map(|d| {
                    (
                        i64::from(d.count().unwrap_or(0)),
                        d.name().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Some((
        name,
        InstanceTypeFacts {
            vcpus,
            memory_mib,
            gpus,
        },
    ))
}

/// The resources Ray detects for a node of `instance_type` (`is_head`: no `memory`),
/// before the YAML's own. `path` names the node type in errors.
pub fn detected_resources(
    instance_type: &str,
    facts: &InstanceTypeFacts,
    is_head: bool,
    path: &str,
) -> Result<Map<String, Value>, AwsError> {
    let mut r = Map::new();
    r.insert("CPU".into(), Value::from(facts.vcpus));
    if !is_head {
        let bytes = facts
            .memory_mib
            .checked_mul(1024 * 1024)
            .filter(|b| *b >= 0)
            .ok_or_else(|| {
                AwsError::config(
                    path,
                    format!(
                        "EC2 describes {instance_type} with {} MiB of memory, which is not a size",
                        facts.memory_mib
                    ),
                )
            })?;
        // Ray: int(bytes * (1 - 0.3)), in floating point.
        let memory = (bytes as f64 * (1.0 - OBJECT_STORE_SHARE)) as i64;
        r.insert("memory".into(), Value::from(memory));
    }
    match facts.gpus.as_slice() {
        [] => {}
        [(count, name)] => {
            if *count != 0 {
                r.insert("GPU".into(), Value::from(*count));
                if !name.is_empty() {
                    r.insert(format!("accelerator_type:{name}"), Value::from(1));
                }
            }
        }
        more => {
            return Err(AwsError::config(
                path,
                format!(
                    "EC2 describes {instance_type} with {} kinds of GPU; Ray supports one",
                    more.len()
                ),
            ));
        }
    }
    let lower = instance_type.to_ascii_lowercase();
    if let Some((_, cores)) = NEURON_CORES.iter().find(|(t, _)| *t == lower) {
        r.insert("neuron_cores".into(), Value::from(*cores));
        r.insert(
            format!("accelerator_type:{NEURON_CORE_TYPE}"),
            Value::from(1),
        );
    }
    Ok(r)
}

/// The instance types the node types of cluster YAML `raw` name
/// (`node_config.InstanceType`), by node type.
pub fn instance_types_named(raw: &Value) -> BTreeMap<String, String> {
    raw.get("available_node_types")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(t, v)| {
            let it = v.get("node_config")?.get("InstanceType")?.as_str()?;
            Some((t.clone(), it.to_string()))
        })
        .collect()
}

/// Cluster YAML `raw` with every node type's resources filled in from `facts` as Ray
/// fills them (the YAML's keys win). A type without `node_config.InstanceType` (a
/// launch template) is left as it is; an instance type `facts` lacks is an error naming
/// the type, as in Ray.
pub fn fill_resources(
    raw: &Value,
    region: &str,
    facts: &BTreeMap<String, InstanceTypeFacts>,
) -> Result<Value, AwsError> {
    let head = raw.get("head_node_type").and_then(Value::as_str);
    let mut out = raw.clone();
    for (node_type, instance_type) in instance_types_named(raw) {
        let path = format!("available_node_types.{node_type}.node_config.InstanceType");
        let f = facts.get(&instance_type).ok_or_else(|| {
            AwsError::config(
                &path,
                format!("instance type {instance_type} is not available in AWS region {region:?}"),
            )
        })?;
        let mut r = detected_resources(&instance_type, f, head == Some(&node_type), &path)?;
        let t = &mut out["available_node_types"][&node_type];
        if let Some(own) = t.get("resources").and_then(Value::as_object) {
            for (k, v) in own {
                r.insert(k.clone(), v.clone());
            }
        }
        t["resources"] = Value::Object(r);
    }
    Ok(out)
}

/// EC2's descriptions of instance types, asked once per type and kept for the process.
pub struct InstanceTypes {
    client: Client,
    region: String,
    known: Mutex<BTreeMap<String, InstanceTypeFacts>>,
}

impl InstanceTypes {
    /// Over `client`, whose region is `region` (for messages).
    pub fn new(client: Client, region: &str) -> Self {
        InstanceTypes {
            client,
            region: region.to_string(),
            known: Mutex::new(BTreeMap::new()),
        }
    }

    /// From the standard AWS chain, with the config's `provider.region` over it.
    pub async fn from_environment(config: &ClusterConfig) -> Result<Self, AwsError> {
        let region = config
            .raw
            .get("provider")
            .and_then(|p| p.get("region"))
            .and_then(Value::as_str);
        let keys = crate::client::StaticKeys::of(config)?;
        let client = crate::client::from_environment(region, keys.as_ref()).await?;
        let resolved = client
            .config()
            .region()
            .map(|r| r.as_ref().to_string())
            .unwrap_or_default();
        Ok(InstanceTypes::new(client, &resolved))
    }

    /// `config` with its node types' resources filled in (see [`fill_resources`]),
    /// asking EC2 only about instance types it has not described yet. An error (EC2's,
    /// or an instance type EC2 does not offer) leaves `config` unfilled with the reason.
    pub async fn fill(&self, config: &ClusterConfig) -> Result<ClusterConfig, AwsError> {
        let named: BTreeSet<String> = instance_types_named(&config.raw).into_values().collect();
        let missing: Vec<String> = {
            let known = lock(&self.known);
            named
                .iter()
                .filter(|t| !known.contains_key(*t))
                .cloned()
                .collect()
        };
        if !missing.is_empty() {
            let described = self.describe(&missing).await?;
            lock(&self.known).extend(described);
        }
        let facts = lock(&self.known).clone();
        let raw = fill_resources(&config.raw, &self.region, &facts)?;
        config.with_raw(&raw).map_err(|e| {
            AwsError::config(
                "available_node_types",
                format!("with its resources filled in from EC2: {e}"),
            )
        })
    }

    /// DescribeInstanceTypes of `names`, every page.
    async fn describe(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, InstanceTypeFacts>, AwsError> {
        let mut out = BTreeMap::new();
        let mut req = self.client.describe_instance_types();
        for n in names {
            req = req.instance_types(ec2::InstanceType::from(n.as_str()));
        }
        let mut pages = req.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("DescribeInstanceTypes", e, "", None))?;
            out.extend(page.instance_types().iter().filter_map(instance_type_facts));
        }
        Ok(out)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(vcpus: i64, mib: i64, gpus: &[(i64, &str)]) -> InstanceTypeFacts {
        InstanceTypeFacts {
            vcpus,
            memory_mib: mib,
            gpus: gpus.iter().map(|(c, n)| (*c, n.to_string())).collect(),
        }
    }

    #[test]
    fn rays_numbers_for_a_gpu_worker_a_neuron_worker_and_the_head() {
        let g5 = facts(4, 16384, &[(1, "A10G")]);
        let r = detected_resources("g5.xlarge", &g5, false, "p").unwrap_or_default();
        assert_eq!(
            Value::Object(r),
            serde_json::json!({"CPU": 4, "memory": 12025908428_i64, "GPU": 1,
                "accelerator_type:A10G": 1})
        );
        // The head gets no memory resource, as in Ray.
        let r = detected_resources("g5.xlarge", &g5, true, "p").unwrap_or_default();
        assert!(!r.contains_key("memory"), "{r:?}");
        let inf2 = facts(4, 16384, &[]);
        let r = detected_resources("INF2.xlarge", &inf2, false, "p").unwrap_or_default();
        assert_eq!(r["neuron_cores"], 2);
        assert_eq!(r["accelerator_type:aws-neuron-core"], 1);
        // A GPU count of 0 adds nothing; two kinds are refused, as Ray asserts.
        let r = detected_resources("x", &facts(2, 8, &[(0, "T4")]), false, "p").unwrap_or_default();
        assert!(!r.contains_key("GPU"), "{r:?}");
        let e = detected_resources("x", &facts(2, 8, &[(1, "a"), (1, "b")]), false, "p");
        assert!(e.is_err());
        let e = detected_resources("x", &facts(2, i64::MAX, &[]), false, "nt");
        assert!(
            e.is_err_and(|e| e.to_string().starts_with("nt: EC2 describes x with")),
            "checked arithmetic on what the cloud says"
        );
    }

    #[test]
    fn the_yamls_keys_win_and_a_type_without_an_instance_type_is_left_alone() {
        let raw = serde_json::json!({
            "head_node_type": "head",
            "available_node_types": {
                "head": {"resources": {}, "node_config": {"InstanceType": "m5.large"}},
                "gpu": {"resources": {"CPU": 3, "custom": 1},
                        "node_config": {"InstanceType": "g5.xlarge"}},
                "tmpl": {"resources": {}, "node_config": {"LaunchTemplate": {"LaunchTemplateId": "lt-1"}}},
            }
        });
        let known = BTreeMap::from([
            ("m5.large".to_string(), facts(2, 8192, &[])),
            ("g5.xlarge".to_string(), facts(4, 16384, &[(1, "A10G")])),
        ]);
        let out = fill_resources(&raw, "us-east-1", &known).unwrap_or_default();
        let types = &out["available_node_types"];
        assert_eq!(types["head"]["resources"], serde_json::json!({"CPU": 2}));
        assert_eq!(
            types["gpu"]["resources"],
            serde_json::json!({"CPU": 3, "custom": 1, "memory": 12025908428_i64, "GPU": 1,
                "accelerator_type:A10G": 1})
        );
        assert_eq!(types["tmpl"]["resources"], serde_json::json!({}));
        // An instance type EC2 does not describe: an error naming where.
        let e = fill_resources(&raw, "us-east-1", &BTreeMap::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("available_node_types.gpu.node_config.InstanceType: instance type g5.xlarge is not available in AWS region \"us-east-1\""),
            "{e}"
        );
    }
}
