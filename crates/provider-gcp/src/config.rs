//! The `provider:` block of a Ray GCP cluster YAML and each node type's `node_config`
//! (fields of Compute Engine's `Instance` resource in the REST API's camelCase, as Ray
//! passes them to `instances.insert`, or a Cloud TPU `Node`'s, see [`crate::tpu`]),
//! checked at load. A key rayscale does not carry onto the insert, a TPU head, or a
//! missing zone or project is an error naming its path, never a silently
//! different instance.

use std::collections::BTreeMap;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::LaunchHashes;
use serde_json::{Map, Value};

use crate::GcpError;

/// Ray's `provider.cache_stopped_nodes` default on GCP.
pub const DEFAULT_CACHE_STOPPED_NODES: bool = false;

/// The metadata key Compute Engine runs at every boot (guest environment's startup
/// scripts).
pub const STARTUP_SCRIPT_KEY: &str = "startup-script";

/// The GCP provider's view of a cluster config.
#[derive(Debug, Clone, PartialEq)]
pub struct GcpConfig {
    /// `cluster_name` (the `ray-cluster-name` label, sanitised).
    pub cluster_name: String,
    /// `provider.project_id`.
    pub project_id: String,
    /// `provider.region`.
    pub region: Option<String>,
    /// `provider.availability_zone`: the zone every instance is made in (Ray's GCP
    /// provider is zonal).
    pub zone: String,
    /// `provider.cache_stopped_nodes`: stop workers instead of deleting them, and start
    /// matching stopped ones before making new ones.
    pub cache_stopped_nodes: bool,
    /// The head node type, if the config names one.
    pub head_node_type: Option<String>,
    /// Each node type's `node_config`, by type name.
    pub node_types: BTreeMap<String, NodeConfig>,
    /// Each node type's `ray-launch-config` label, and the head's.
    pub launch_hashes: LaunchHashes,
    /// The head's `serviceAccounts` when its type names none: Ray's service account,
    /// set by `rayscale up`'s bootstrap (`head_node.serviceAccounts`), else `None` (the
    /// project's default account).
    pub head_service_accounts: Option<Value>,
    /// `provider.gcp_credentials`: what this process calls Google with instead of
    /// Application Default Credentials (`None`: ADC). Never shipped to the head (see
    /// `rayscale_core::provider::boot`): the head calls with its own service account.
    pub credentials: Option<crate::client::GcpCredentials>,
}

/// Provider keys Ray's GCP provider reads and rayscale does too.
const PROVIDER_KEYS: &[&str] = &[
    "type",
    "region",
    "availability_zone",
    "project_id",
    "cache_stopped_nodes",
    "use_internal_ips",
    "gcp_credentials",
];

/// Provider keys of Ray's schema that change nothing for rayscale (it starts Ray at boot,
/// not over SSH), and what `ray up` adds to the config it writes to the head.
const IGNORED_PROVIDER_KEYS: &[&str] = &[
    "disable_node_updaters",
    "foreground_node_launch",
    "_config_cache_path",
    "_has_tpus",
];

/// Provider keys rayscale refuses, and why.
const REFUSED_PROVIDER_KEYS: &[(&str, &str)] = &[];

/// The writable fields of Compute Engine's `Instance` resource (REST reference,
/// `compute/docs/reference/rest/v1/instances`), plus `sourceInstanceTemplate` (a query
/// parameter of `instances.insert` that Ray takes from `node_config`).
const INSTANCE_KEYS: &[&str] = &[
    "advancedMachineFeatures",
    "canIpForward",
    "confidentialInstanceConfig",
    "deletionProtection",
    "description",
    "disks",
    "displayDevice",
    "guestAccelerators",
    "hostname",
    "instanceEncryptionKey",
    "keyRevocationActionType",
    "labels",
    "machineType",
    "metadata",
    "minCpuPlatform",
    "networkInterfaces",
    "networkPerformanceConfig",
    "params",
    "privateIpv6GoogleAccess",
    "reservationAffinity",
    "resourcePolicies",
    "scheduling",
    "serviceAccounts",
    "shieldedInstanceConfig",
    "shieldedInstanceIntegrityPolicy",
    "sourceMachineImage",
    "sourceMachineImageEncryptionKey",
    "tags",
    "sourceInstanceTemplate",
];

/// A node type's `node_config`: the `Instance` body Ray would send, and the template.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeConfig {
    /// The instance fields, as the YAML spells them (`sourceInstanceTemplate` removed).
    pub body: Map<String, Value>,
    /// `sourceInstanceTemplate`: the instance template the insert starts from.
    pub source_instance_template: Option<String>,
    /// The slice, when the node config is a Cloud TPU's (no `machineType`, an
    /// `acceleratorType` or `acceleratorConfig`): `body` is then a TPU `Node`.
    pub tpu: Option<crate::tpu::Slice>,
}

impl GcpConfig {
    /// Reads the GCP view of `config`. Errors name the offending path in one line.
    pub fn from_cluster(config: &ClusterConfig) -> Result<Self, GcpError> {
        let provider = config
            .raw
            .get("provider")
            .and_then(Value::as_object)
            .ok_or_else(|| GcpError::config("provider", "must be a mapping"))?;
        rayscale_core::provider::cloud::ProviderKeys {
            cloud: "GCP",
            known: PROVIDER_KEYS,
            ignored: IGNORED_PROVIDER_KEYS,
            refused: REFUSED_PROVIDER_KEYS,
        }
        .check(provider)
        .map_err(|(path, message)| GcpError::config(path, message))?;
        let text = |key: &str, what: &str| -> Result<Option<String>, GcpError> {
            match provider.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
                Some(v) => Err(GcpError::config(
                    format!("provider.{key}"),
                    format!("must be {what}, got {v}"),
                )),
            }
        };
        let project_id = text("project_id", "a project id")?.ok_or_else(|| {
            GcpError::config(
                "provider.project_id",
                "is required: the project the instances are made in",
            )
        })?;
        let zone = text("availability_zone", "a zone name")?.ok_or_else(|| {
            GcpError::config(
                "provider.availability_zone",
                "is required: Compute Engine instances are made in one zone (e.g. us-west1-a)",
            )
        })?;
        if zone.contains(',') {
            return Err(GcpError::config(
                "provider.availability_zone",
                format!("{zone:?}: Ray's GCP provider takes one zone, not a list"),
            ));
        }
        let region = text("region", "a region name")?;
        // Each goes into URL paths (and the region into the SSH key's file name): only
        // the characters Google's names have.
        let plain = |s: &str, extra: &[char]| {
            s.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || extra.contains(&c)
            })
        };
        for (key, value, extra) in [
            ("project_id", Some(project_id.as_str()), &['.', ':'][..]),
            ("availability_zone", Some(zone.as_str()), &[][..]),
            ("region", region.as_deref(), &[][..]),
        ] {
            if let Some(v) = value
                && !plain(v, extra)
            {
                return Err(GcpError::config(
                    format!("provider.{key}"),
                    format!("{v:?}: not a Google Cloud name (lowercase letters, digits and -)"),
                ));
            }
        }
        let cache_stopped_nodes = match provider.get("cache_stopped_nodes") {
            None | Some(Value::Null) => DEFAULT_CACHE_STOPPED_NODES,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(GcpError::config(
                    "provider.cache_stopped_nodes",
                    format!("must be true or false, got {v}"),
                ));
            }
        };
        let mut node_types = BTreeMap::new();
        for t in &config.node_types {
            let path = format!("available_node_types.{}.node_config", t.name);
            let nc = NodeConfig::parse(&t.node_config, &path)?;
            if nc.tpu.is_some() && config.head_node_type.as_deref() == Some(t.name.as_str()) {
                return Err(GcpError::config(
                    path,
                    "the head is a Compute Engine instance in rayscale (give it a machineType); \
                     TPU VMs are workers",
                ));
            }
            node_types.insert(t.name.clone(), nc);
        }
        Ok(GcpConfig {
            cluster_name: config.cluster_name.clone(),
            project_id,
            region,
            zone,
            cache_stopped_nodes,
            head_node_type: config.head_node_type.clone(),
            node_types,
            launch_hashes: LaunchHashes::of(config),
            head_service_accounts: match config.head_node.get("serviceAccounts") {
                None | Some(Value::Null) => None,
                Some(v @ Value::Array(_)) => Some(v.clone()),
                Some(v) => {
                    return Err(GcpError::config(
                        "head_node.serviceAccounts",
                        format!("must be a list, got {v}"),
                    ));
                }
            },
            credentials: crate::client::GcpCredentials::from_provider(provider)?,
        })
    }
}

impl NodeConfig {
    /// Checks one `node_config` (at `path`): a mapping of `Instance` fields, with a
    /// `machineType` or an instance template, or a TPU `Node`'s.
    pub fn parse(v: &Value, path: &str) -> Result<Self, GcpError> {
        let map = match v {
            Value::Object(m) => m.clone(),
            Value::Null => Map::new(),
            other => {
                return Err(GcpError::config(
                    path,
                    format!("must be a mapping of Compute Engine instance fields, got {other}"),
                ));
            }
        };
        if crate::tpu::is_tpu(&map) {
            let slice = crate::tpu::slice(&map, path)?;
            crate::tpu::check(&map, path)?;
            return Ok(NodeConfig {
                body: map,
                source_instance_template: None,
                tpu: Some(slice),
            });
        }
        let mut map = map;
        if map.remove("networkConfig").is_some() {
            // A Cloud TPU field, dropped from the instance as Ray's create drops it. Ray's
            // bootstrap sets it beside `networkInterfaces` on every type (the config `ray
            // up` writes onto a head has it); alone, it is said.
            if map.contains_key("networkInterfaces") {
                tracing::debug!("{path}.networkConfig: a TPU field, dropped from the instance");
            } else {
                tracing::warn!(
                    "{path}.networkConfig: a Cloud TPU field, dropped from the Compute Engine \
                     instance (as Ray drops it); an instance takes networkInterfaces"
                );
            }
        }
        for key in map.keys() {
            if key == "name" {
                return Err(GcpError::config(
                    format!("{path}.name"),
                    "rayscale names instances itself (ray-<cluster>-<kind>-<hex>-compute), as Ray does",
                ));
            }
            if !INSTANCE_KEYS.contains(&key.as_str()) {
                return Err(GcpError::config(
                    format!("{path}.{key}"),
                    "not a field of a Compute Engine instance (REST reference: instances)",
                ));
            }
        }
        let mut body = map;
        let source_instance_template = match body.remove("sourceInstanceTemplate") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            Some(v) => {
                return Err(GcpError::config(
                    format!("{path}.sourceInstanceTemplate"),
                    format!("must be a template URL, got {v}"),
                ));
            }
        };
        match body.get("machineType") {
            Some(Value::String(s)) if !s.is_empty() => {}
            None if source_instance_template.is_some() => {}
            None => {
                return Err(GcpError::config(
                    format!("{path}.machineType"),
                    "is required (or a sourceInstanceTemplate that sets it)",
                ));
            }
            Some(v) => {
                return Err(GcpError::config(
                    format!("{path}.machineType"),
                    format!("must be a machine type name, got {v}"),
                ));
            }
        }
        // Ray's own defaults.yaml writes `scheduling` as a one-item list, and Ray's
        // example-gpu-docker.yaml as a list of one-key mappings; the API wants the one
        // object: the items' keys merged (a key given twice is refused).
        if let Some(Value::Array(items)) = body.get("scheduling") {
            let mut merged = Map::new();
            for (n, item) in items.iter().enumerate() {
                let Value::Object(m) = item else {
                    return Err(GcpError::config(
                        format!("{path}.scheduling[{n}]"),
                        format!("must be a mapping of Scheduling fields, got {item}"),
                    ));
                };
                for (k, v) in m {
                    if merged.insert(k.clone(), v.clone()).is_some() {
                        return Err(GcpError::config(
                            format!("{path}.scheduling[{n}].{k}"),
                            "given in two items of the list (one Scheduling object is sent)",
                        ));
                    }
                }
            }
            if merged.is_empty() {
                body.remove("scheduling");
            } else {
                body.insert("scheduling".into(), Value::Object(merged));
            }
        }
        Ok(NodeConfig {
            body,
            source_instance_template,
            tpu: None,
        })
    }

    /// The user's own `startup-script` metadata item, if any.
    pub fn user_startup_script(&self) -> Option<&str> {
        if self.tpu.is_some() {
            return self
                .body
                .get("metadata")
                .and_then(|m| m.get(STARTUP_SCRIPT_KEY))
                .and_then(Value::as_str);
        }
        metadata_items(&self.body)
            .into_iter()
            .find(|(k, _)| *k == STARTUP_SCRIPT_KEY)
            .and_then(|(_, v)| v.as_str())
    }

    /// Whether the instance is preemptible or Spot (`scheduling`; a TPU's
    /// `schedulingConfig.preemptible`, `.spot` or `.provisioningModel: SPOT`).
    pub fn is_spot(&self) -> bool {
        if self.tpu.is_some() {
            let s = self.body.get("schedulingConfig");
            let flag = |k: &str| s.and_then(|s| s.get(k)).and_then(Value::as_bool) == Some(true);
            let model = s
                .and_then(|s| s.get("provisioningModel"))
                .and_then(Value::as_str);
            return flag("preemptible") || flag("spot") || model == Some("SPOT");
        }
        let s = self.body.get("scheduling");
        s.and_then(|s| s.get("preemptible"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
            || s.and_then(|s| s.get("provisioningModel"))
                .and_then(Value::as_str)
                == Some("SPOT")
    }
}

/// The `metadata.items` of an instance body, as `(key, value)`.
pub fn metadata_items(body: &Map<String, Value>) -> Vec<(&str, &Value)> {
    body.get("metadata")
        .and_then(|m| m.get("items"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| Some((i.get("key")?.as_str()?, i.get("value")?)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> ClusterConfig {
        ClusterConfig::from_yaml_str(yaml, "test.yaml").expect("config loads")
    }

    const BASE: &str = "cluster_name: demo\nprovider: {type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: proj}\n\
        head_node_type: head\navailable_node_types:\n  head: {resources: {CPU: 0}, node_config: {machineType: n1-standard-2}}\n";

    #[test]
    fn reads_ray_provider_and_defaults() {
        let c = GcpConfig::from_cluster(&cluster(&format!(
            "{BASE}  w: {{resources: {{CPU: 2}}, node_config: {{machineType: n1-standard-2, scheduling: [{{preemptible: true}}]}}}}\n"
        )))
        .expect("loads");
        assert_eq!(c.project_id, "proj");
        assert_eq!(c.zone, "us-west1-a");
        assert!(!c.cache_stopped_nodes);
        let w = &c.node_types["w"];
        assert_eq!(w.body["scheduling"]["preemptible"], Value::Bool(true));
        assert!(w.is_spot());
        // A list of mappings (Ray's example-gpu-docker.yaml) is one Scheduling object.
        let c = GcpConfig::from_cluster(&cluster(&format!(
            "{BASE}  w: {{resources: {{CPU: 2}}, node_config: {{machineType: n1-standard-2, scheduling: [{{preemptible: true}}, {{onHostMaintenance: TERMINATE}}]}}}}\n"
        )))
        .expect("loads");
        assert_eq!(
            c.node_types["w"].body["scheduling"],
            serde_json::json!({"preemptible": true, "onHostMaintenance": "TERMINATE"})
        );
        let e = GcpConfig::from_cluster(&cluster(&format!(
            "{BASE}  w: {{resources: {{CPU: 2}}, node_config: {{machineType: n1-standard-2, scheduling: [{{preemptible: true}}, {{preemptible: false}}]}}}}\n"
        )))
        .expect_err("a key twice")
        .to_string();
        assert!(
            e.starts_with("available_node_types.w.node_config.scheduling[1].preemptible:"),
            "{e}"
        );
        // Names go into URL paths and a key's file name: Google's characters only.
        for (from, to, key) in [
            (
                "region: us-west1",
                "region: 'x/../../y'",
                "provider.region: ",
            ),
            (
                "project_id: proj",
                "project_id: 'p/q'",
                "provider.project_id: ",
            ),
            (
                "availability_zone: us-west1-a",
                "availability_zone: 'A?b'",
                "provider.availability_zone: ",
            ),
        ] {
            let e = GcpConfig::from_cluster(&cluster(&BASE.replace(from, to)))
                .expect_err("refused")
                .to_string();
            assert!(e.starts_with(key), "{e}");
        }
        assert!(
            GcpConfig::from_cluster(&cluster(
                &BASE.replace("project_id: proj", "project_id: 'example.com:proj-1'")
            ))
            .is_ok()
        );
    }

    #[test]
    fn errors_name_their_path() {
        let err = |extra: &str| {
            GcpConfig::from_cluster(&cluster(&format!("{BASE}{extra}")))
                .expect_err("refused")
                .to_string()
        };
        let pod = GcpConfig::from_cluster(&cluster(&format!(
            "{BASE}  t: {{resources: {{}}, node_config: {{acceleratorType: v4-16, runtimeVersion: x}}}}\n"
        )))
        .expect("a multi-host TPU slice loads");
        assert_eq!(pod.node_types["t"].tpu.as_ref().map(|s| s.hosts), Some(2));
        let ok = GcpConfig::from_cluster(&cluster(&format!(
            "{BASE}  t: {{resources: {{}}, node_config: {{acceleratorType: v4-8, runtimeVersion: x}}}}\n"
        )))
        .expect("a single-host TPU loads");
        assert_eq!(
            ok.node_types["t"]
                .tpu
                .as_ref()
                .map(|s| s.accelerator_type.as_str()),
            Some("v4-8")
        );
        let e = err("  t: {resources: {}, node_config: {machineType: n1, machinetype: x}}\n");
        assert!(
            e.starts_with("available_node_types.t.node_config.machinetype: not a field"),
            "{e}"
        );
        let e = err("  t: {resources: {}, node_config: {disks: []}}\n");
        assert!(
            e.starts_with("available_node_types.t.node_config.machineType: is required"),
            "{e}"
        );
        let e = err("  t: {resources: {}, node_config: {machineType: n1, name: x}}\n");
        assert!(
            e.starts_with("available_node_types.t.node_config.name:"),
            "{e}"
        );
        let bad = BASE.replace("project_id: proj", "project_id: null");
        let e = GcpConfig::from_cluster(&cluster(&bad))
            .expect_err("no project")
            .to_string();
        assert!(e.starts_with("provider.project_id: is required"), "{e}");
        // Ray's gcp_credentials: each malformed shape is named, never with the secret.
        for (given, starts) in [
            (
                "{type: service_account, credentials: 'not json s3cret'}",
                "provider.gcp_credentials.credentials: not a service account key's JSON",
            ),
            (
                "{type: service_account, credentials: '{\"client_email\": \"a@b\"}'}",
                "provider.gcp_credentials.credentials: the service account key has no private_key",
            ),
            (
                "{type: oauth, credentials: s3cret}",
                "provider.gcp_credentials.type: \"oauth\": expected service_account or",
            ),
            (
                "{type: credentials_token}",
                "provider.gcp_credentials.credentials: required",
            ),
        ] {
            let bad = BASE.replace(
                "project_id: proj",
                &format!("project_id: proj, gcp_credentials: {given}"),
            );
            let e = GcpConfig::from_cluster(&cluster(&bad))
                .expect_err(given)
                .to_string();
            assert!(e.starts_with(starts), "{given}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        let ok = BASE.replace(
            "project_id: proj",
            "project_id: proj, gcp_credentials: {type: credentials_token, credentials: ' ya29.t '}",
        );
        let c = GcpConfig::from_cluster(&cluster(&ok)).expect("a token");
        assert_eq!(
            c.credentials,
            Some(crate::client::GcpCredentials::Token("ya29.t".into()))
        );
        assert_eq!(format!("{:?}", c.credentials), "Some(Token(..))");
    }

    #[test]
    fn a_template_may_carry_the_machine_type() {
        let c = GcpConfig::from_cluster(&cluster(&format!(
            "{BASE}  t: {{resources: {{}}, node_config: {{sourceInstanceTemplate: global/instanceTemplates/w16}}}}\n"
        )))
        .expect("loads");
        let t = &c.node_types["t"];
        assert_eq!(
            t.source_instance_template.as_deref(),
            Some("global/instanceTemplates/w16")
        );
        assert!(!t.body.contains_key("sourceInstanceTemplate"));
    }
}
