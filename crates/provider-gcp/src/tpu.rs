//! Cloud TPU VMs, pure: a TPU node type's `node_config` checked as Ray 2.60 checks it
//! (`get_node_type`, `_validate_tpu_config`), its slice's accelerator type and chips,
//! the `Node` body of the TPU API's `nodes.create` (v2alpha1, the version Ray's GCP
//! provider calls, with Ray's own rewrites of the body), a TPU node read back as core's
//! `CloudInstance`, and Ray's `TPU-<type>-head` resource filled in.
//!
//! A node config is a TPU when it has no `machineType` and an `acceleratorType` or an
//! `acceleratorConfig` (Ray's rule). A multi-host slice (`v4-16`, `v5litepod-16`, ...)
//! is one TPU node whose every host runs the boot script and a Ray node: its type is
//! marked as several hosts per instance ([`fill_resources`], core's `MultiHost`), so
//! core counts, idles, drains and deletes the slice as one unit, and only worker 0
//! (the `agent-worker-number` metadata attribute) carries `TPU-<type>-head`, as Ray's
//! TPU command runner leaves it off the other hosts. Ray's own autoscaler warns that it
//! does not scale such slices correctly (`get_node_type`); rayscale does.
//!
//! References: the TPU API's REST reference and discovery document
//! (tpu.googleapis.com, v2alpha1: `projects.locations.nodes`, `Node`, `Node.State`),
//! "TPU versions" (chips per host, cores per chip).

use std::collections::BTreeMap;

use rayscale_core::config::{ClusterConfig, MultiHost};
use rayscale_core::provider::{CloudInstance, CloudInstanceState, NodeKind, tags};
use serde_json::{Map, Value, json};

use crate::GcpError;
use crate::config::{GcpConfig, STARTUP_SCRIPT_KEY};
use crate::mapping::{self, InsertSpec, MAX_NAME, TypesByLabel};

/// The TPU API version rayscale calls (Ray 2.60's `TPU_VERSION`).
pub const API_VERSION: &str = "v2alpha1";

/// The suffix Ray gives TPU nodes (`GCPNodeType.TPU`); Ray tells a TPU node from a
/// Compute Engine instance by it, and so does rayscale.
pub const NAME_SUFFIX: &str = "tpu";

/// The label Cloud TPU puts on the Compute Engine VMs behind a TPU node: the instance
/// list leaves them out (they are not the cluster's instances; Ray's filter too).
pub const TPU_VM_LABEL: &str = "tpu_cores";

/// Writable fields of the v2alpha1 `Node` (the discovery document's `Node` schema, its
/// read-only fields left out).
pub const NODE_KEYS: &[&str] = &[
    "acceleratorConfig",
    "acceleratorType",
    "autocheckpointEnabled",
    "bootDiskConfig",
    "cidrBlock",
    "dataDisks",
    "description",
    "health",
    "labels",
    "metadata",
    "networkConfig",
    "networkConfigs",
    "runtimeVersion",
    "schedulingConfig",
    "serviceAccount",
    "shieldedInstanceConfig",
    "tags",
];

/// TPU generations Ray 2.60 knows (`VALID_TPU_TYPES`).
const GENERATIONS: &[&str] = &["v2", "v3", "v4", "v5p", "v5litepod", "v6e", "v7x"];

/// What core sees of a TPU node's state (`Node.State`): being made, started or restarted
/// is pending (Ray's non-terminated states but `READY`), `READY` running, and every
/// other state stopping: being repaired, reimaged, stopped, deleted or hidden, and
/// stopped, preempted, terminated, hidden or unknown. Ray leaves those out of its list;
/// rayscale lists them, so a node that is down is still seen (never taken as gone
/// while it exists: a preempted node holds its name and quota until it is deleted, and
/// core deletes it once Ray's node on it is dead), and a state Google adds later too.
fn state_of(s: &str) -> CloudInstanceState {
    match s {
        "CREATING" | "STARTING" | "RESTARTING" => CloudInstanceState::Pending,
        "READY" => CloudInstanceState::Running,
        _ => CloudInstanceState::Stopping,
    }
}

/// A TPU node type's slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The accelerator type as Ray names it (`v4-8`, `v5litepod-4`, `v6e-8`).
    pub accelerator_type: String,
    /// TPU chips in the slice.
    pub chips: u64,
    /// Hosts (TPU VMs) in the slice: 1, or a multi-host slice's (chips / chips per host).
    pub hosts: u32,
}

impl Slice {
    /// Ray's resource that only a slice's worker 0 carries: `TPU-<type>-head`.
    pub fn head_resource(&self) -> String {
        format!("TPU-{}-head", self.accelerator_type)
    }
}

/// Whether a node config is a Cloud TPU's (Ray's `get_node_type`).
pub fn is_tpu(map: &Map<String, Value>) -> bool {
    !map.contains_key("machineType")
        && (map.contains_key("acceleratorType") || map.contains_key("acceleratorConfig"))
}

/// Ray's cores per chip of a generation (`get_tpu_cores_per_chip`): 1 on v5litepod and
/// v6e, else 2.
fn cores_per_chip(generation: &str) -> u64 {
    if generation.starts_with("v5litepod") || generation.starts_with("v6e") {
        1
    } else {
        2
    }
}

/// Ray's chips one host sees (`get_num_tpu_visible_chips_per_host`): up to 8 on
/// v5litepod and v6e slices of at most 8 chips, else 4.
fn chips_per_host(accelerator_type: &str, chips: u64) -> u64 {
    let eight = accelerator_type.starts_with("v5litepod") || accelerator_type.starts_with("v6e");
    if eight && chips <= 8 { chips.max(1) } else { 4 }
}

/// `v<digits><letters>-<digits>` or `tpu<digits><letters>-<digits>` (Ray's
/// `is_valid_tpu_accelerator_type`).
fn well_formed(t: &str) -> bool {
    let (head, size) = match t.split_once('-') {
        Some(p) => p,
        None => return false,
    };
    let rest = head
        .strip_prefix("tpu")
        .or_else(|| head.strip_prefix('v'))
        .unwrap_or("");
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    digits > 0
        && rest[digits..].chars().all(|c| c.is_ascii_alphabetic())
        && !size.is_empty()
        && size.chars().all(|c| c.is_ascii_digit())
}

/// The slice of a TPU node config at `path`, checked as Ray checks it (one of
/// `acceleratorType` and `acceleratorConfig`; Ray's accepted spellings; a generation Ray
/// knows), with its hosts.
pub fn slice(map: &Map<String, Value>, path: &str) -> Result<Slice, GcpError> {
    let at = |k: &str| format!("{path}.{k}");
    if map.contains_key("acceleratorType") && map.contains_key("acceleratorConfig") {
        return Err(GcpError::config(
            at("acceleratorConfig"),
            "acceleratorType and acceleratorConfig cannot both be set (as in Ray)",
        ));
    }
    let (accelerator_type, chips, key) = if let Some(v) = map.get("acceleratorType") {
        let t = v
            .as_str()
            .filter(|t| well_formed(t))
            .ok_or_else(|| {
                GcpError::config(
                    at("acceleratorType"),
                    format!("must be v<generation>-<cores or chips> (v4-8, v6e-4), got {v}"),
                )
            })?
            .to_string();
        let generation = t.split('-').next().unwrap_or_default();
        if !GENERATIONS.iter().any(|g| generation.starts_with(g)) {
            return Err(GcpError::config(
                at("acceleratorType"),
                format!(
                    "{t}: not a TPU generation Ray knows ({})",
                    GENERATIONS.join(", ")
                ),
            ));
        }
        let cores: u64 = t
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                GcpError::config(at("acceleratorType"), format!("{t}: size too large"))
            })?;
        let chips = cores / cores_per_chip(generation);
        (t, chips, "acceleratorType")
    } else {
        let c = map
            .get("acceleratorConfig")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                GcpError::config(
                    at("acceleratorConfig"),
                    "must be a mapping {type, topology}",
                )
            })?;
        let (Some(ty), Some(topology)) = (
            c.get("type").and_then(Value::as_str),
            c.get("topology").and_then(Value::as_str),
        ) else {
            return Err(GcpError::config(
                at("acceleratorConfig"),
                "expects a type and a topology (strings), as Ray's",
            ));
        };
        let generation_ok = ty == "V5LITE_POD"
            || ty.strip_prefix('V').is_some_and(|r| {
                let d = r.chars().take_while(char::is_ascii_digit).count();
                d > 0 && r[d..].chars().all(|c| c.is_ascii_alphabetic())
            });
        if !generation_ok {
            return Err(GcpError::config(
                at("acceleratorConfig.type"),
                format!("should be V<generation> (V4, V5P, V5LITE_POD, V6E), got {ty:?}"),
            ));
        }
        if ty == "V2" || ty == "V3" {
            return Err(GcpError::config(
                at("acceleratorConfig.type"),
                format!("acceleratorConfig is not supported on V2/V3 TPUs, got {ty}"),
            ));
        }
        let dims: Vec<&str> = topology.split('x').collect();
        let mut chips: u64 = 1;
        let dims_ok = (2..=3).contains(&dims.len())
            && dims.iter().all(|d| {
                !d.is_empty()
                    && d.chars().all(|c| c.is_ascii_digit())
                    && d.parse::<u64>()
                        .ok()
                        .and_then(|n| chips.checked_mul(n))
                        .map(|n| chips = n)
                        .is_some()
            });
        if !dims_ok {
            return Err(GcpError::config(
                at("acceleratorConfig.topology"),
                format!("should be of the form AxB or AxBxC, got {topology:?}"),
            ));
        }
        let generation = match ty.to_ascii_lowercase().as_str() {
            "v5lite_pod" => "v5litepod".to_string(),
            g => g.to_string(),
        };
        if !GENERATIONS.iter().any(|g| generation.starts_with(g)) {
            return Err(GcpError::config(
                at("acceleratorConfig.type"),
                format!(
                    "{ty}: not a TPU generation Ray knows ({})",
                    GENERATIONS.join(", ")
                ),
            ));
        }
        let cores = chips
            .checked_mul(cores_per_chip(&generation))
            .ok_or_else(|| GcpError::config(at("acceleratorConfig.topology"), "too large"))?;
        (format!("{generation}-{cores}"), chips, "acceleratorConfig")
    };
    let hosts = u32::try_from(
        chips
            .div_ceil(chips_per_host(&accelerator_type, chips))
            .max(1),
    )
    .map_err(|_| GcpError::config(at(key), format!("{accelerator_type}: too large")))?;
    Ok(Slice {
        accelerator_type,
        chips,
        hosts,
    })
}

/// Checks a TPU node config's keys and values at `path` (after [`slice`]): `Node`
/// fields, `serviceAccounts` (Ray rewrites it to `serviceAccount`), a runtime version,
/// metadata as strings.
pub fn check(map: &Map<String, Value>, path: &str) -> Result<(), GcpError> {
    for key in map.keys() {
        if key == "networkInterfaces" {
            // Ray drops it from a TPU's body: a Compute Engine field its bootstrap sets on
            // every type, beside `networkConfig`. Alone, it is said.
            if map.contains_key("networkConfig") {
                tracing::debug!("{path}.networkInterfaces: a Compute Engine field, dropped");
            } else {
                tracing::warn!(
                    "{path}.networkInterfaces: a Compute Engine field, dropped from the TPU \
                     node (as Ray drops it); a TPU node takes networkConfig"
                );
            }
            continue;
        }
        if key == "name" {
            return Err(GcpError::config(
                format!("{path}.name"),
                "rayscale names TPU nodes itself (ray-<cluster>-<kind>-<hex>-tpu), as Ray does",
            ));
        }
        if key != "serviceAccounts" && !NODE_KEYS.contains(&key.as_str()) {
            return Err(GcpError::config(
                format!("{path}.{key}"),
                "not a field of a Cloud TPU node (TPU API v2alpha1 reference: Node)",
            ));
        }
    }
    match map.get("runtimeVersion") {
        Some(Value::String(s)) if !s.is_empty() => {}
        None => {
            return Err(GcpError::config(
                format!("{path}.runtimeVersion"),
                "is required for a TPU VM (a TPU software version, e.g. tpu-ubuntu2204-base)",
            ));
        }
        Some(v) => {
            return Err(GcpError::config(
                format!("{path}.runtimeVersion"),
                format!("must be a string, got {v}"),
            ));
        }
    }
    if let Some(m) = map.get("metadata") {
        let ok = m
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string));
        if !ok {
            return Err(GcpError::config(
                format!("{path}.metadata"),
                "a TPU node's metadata is a mapping of strings (not Compute Engine's items list)",
            ));
        }
    }
    if let Some(s) = map.get("serviceAccounts") {
        let first = s
            .as_array()
            .and_then(|a| a.first())
            .and_then(Value::as_object);
        if first.is_none() {
            return Err(GcpError::config(
                format!("{path}.serviceAccounts"),
                "a list of service accounts (a TPU node takes the first, as Ray)",
            ));
        }
        if s.as_array().is_some_and(|a| a.len() > 1) {
            tracing::warn!(
                "{path}.serviceAccounts: a TPU node takes one service account; the first is \
                 used and the rest dropped, as Ray drops them"
            );
        }
    }
    Ok(())
}

/// Ray's TPU node name for the `index`-th node of `request_id`:
/// `ray-<cluster>-<kind>-<8 hex>-tpu`.
pub fn node_name(cluster: &str, kind: NodeKind, request_id: &str, index: u64) -> String {
    rayscale_core::provider::cloud::node_name(
        cluster,
        kind,
        request_id,
        index,
        MAX_NAME,
        Some(NAME_SUFFIX),
    )
}

/// Whether a cloud instance id names a TPU node (Ray's `name_to_type`).
pub fn is_tpu_name(id: &str) -> bool {
    id.rsplit('-').next() == Some(NAME_SUFFIX)
}

/// `projects/<p>/locations/<zone>`: the parent of the cluster's TPU nodes.
pub fn parent(cfg: &GcpConfig) -> String {
    format!("projects/{}/locations/{}", cfg.project_id, cfg.zone)
}

/// Ray's service account rewrite: `serviceAccounts[0]` -> `serviceAccount`, its
/// `scopes` -> `scope`.
fn service_account(v: &Value) -> Option<Value> {
    let first = v.as_array()?.first()?.as_object()?;
    let mut out = Map::new();
    if let Some(e) = first.get("email") {
        out.insert("email".into(), e.clone());
    }
    if let Some(s) = first.get("scopes") {
        out.insert("scope".into(), s.clone());
    }
    Some(Value::Object(out))
}

/// The `Node` body of `nodes.create` for `spec`, as Ray's `GCPTPU.create_instance`
/// writes it: the node config without `networkInterfaces`, Ray's labels over the
/// user's, `networkConfig.enableExternalIps` true unless given, `serviceAccounts`
/// rewritten (the head's default account too), and the `startup-script` metadata
/// (the user's first, then rayscale's boot script).
pub fn node_json(cfg: &GcpConfig, spec: &InsertSpec<'_>) -> Result<Value, GcpError> {
    let t = spec.node_type;
    let nc = cfg.node_types.get(t).ok_or_else(|| {
        GcpError::config(format!("available_node_types.{t}"), "unknown node type")
    })?;
    let mut body = nc.body.clone();
    body.remove("networkInterfaces");
    let accounts = body.remove("serviceAccounts").or_else(|| {
        (spec.kind == NodeKind::Head && !body.contains_key("serviceAccount"))
            .then(|| cfg.head_service_accounts.clone())
            .flatten()
    });
    if let Some(a) = accounts.as_ref().and_then(service_account) {
        body.insert("serviceAccount".into(), a);
    }
    let mut labels: Map<String, Value> = body
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let hash = cfg.launch_hashes.get(t, spec.kind);
    for (k, v) in mapping::ray_labels(&cfg.cluster_name, t, spec.kind, spec.request_id, hash) {
        labels.insert(k, Value::String(v));
    }
    body.insert("labels".into(), Value::Object(labels));
    let net = body.entry("networkConfig").or_insert_with(|| json!({}));
    if let Some(n) = net.as_object_mut() {
        n.entry("enableExternalIps").or_insert(Value::Bool(true));
    }
    let mut metadata: Map<String, Value> = body
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let user = metadata.get(STARTUP_SCRIPT_KEY).and_then(Value::as_str);
    match mapping::startup_script(user, spec.boot_script) {
        Some(s) => {
            metadata.insert(STARTUP_SCRIPT_KEY.into(), Value::String(s));
        }
        None => {
            metadata.remove(STARTUP_SCRIPT_KEY);
        }
    }
    if !metadata.is_empty() {
        body.insert("metadata".into(), Value::Object(metadata));
    }
    Ok(Value::Object(body))
}

/// A TPU node of the TPU API as core sees it, in any state (see [`state_of`]); `None`
/// for one without Ray's kind label, of another cluster, or without a name or state.
pub fn cloud_instance(node: &Value, cluster: &str, types: &TypesByLabel) -> Option<CloudInstance> {
    let full = node.get("name")?.as_str()?;
    let id = full.rsplit('/').next().filter(|s| !s.is_empty())?;
    let labels: BTreeMap<String, String> = node
        .get("labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    if labels.get(tags::CLUSTER_NAME).map(String::as_str) != Some(&mapping::label_value(cluster)) {
        return None;
    }
    let kind = match labels.get(tags::NODE_KIND).map(String::as_str) {
        Some(tags::NODE_KIND_HEAD) => NodeKind::Head,
        Some(tags::NODE_KIND_WORKER) => NodeKind::Worker,
        _ => return None,
    };
    let state = state_of(node.get("state")?.as_str()?);
    let node_type = labels
        .get(tags::USER_NODE_TYPE)
        .map(|v| types.get(v).cloned().unwrap_or_else(|| v.clone()))
        .unwrap_or_default();
    let endpoint = node
        .get("networkEndpoints")
        .and_then(Value::as_array)
        .and_then(|a| a.first());
    let text = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Some(CloudInstance {
        cloud_instance_id: id.to_string(),
        node_type,
        kind,
        request_id: labels.get(tags::LAUNCH_REQUEST).cloned(),
        state,
        private_ip: text(endpoint.and_then(|e| e.get("ipAddress"))),
        public_ip: text(endpoint.and_then(|e| e.pointer("/accessConfig/externalIp"))),
        launch_config_hash: labels.get(tags::LAUNCH_CONFIG).cloned(),
        labels,
        zone: full
            .split('/')
            .skip_while(|s| *s != "locations")
            .nth(1)
            .map(str::to_string),
    })
}

/// `config` with Ray's `TPU-<type>-head: 1` on each TPU node type's resources (Ray's
/// `fillout_available_node_types_resources` on GCP, which sets it over the YAML's), and
/// a multi-host slice's type marked as several hosts per instance ([`MultiHost`]: core
/// counts, idles and stops the slice as one unit, and only its worker 0 carries the head
/// resource, as Ray's TPU command runner leaves it off the other hosts).
pub fn fill_resources(config: &ClusterConfig) -> Result<ClusterConfig, GcpError> {
    let cfg = GcpConfig::from_cluster(config)?;
    let mut raw = config.raw.clone();
    let mut changed = false;
    for (t, nc) in &cfg.node_types {
        let Some(s) = &nc.tpu else { continue };
        let Some(res) = raw
            .get_mut("available_node_types")
            .and_then(|types| types.get_mut(t.as_str()))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let r = res.entry("resources").or_insert_with(|| json!({}));
        if let Some(r) = r.as_object_mut()
            && r.get(&s.head_resource()) != Some(&json!(1))
        {
            r.insert(s.head_resource(), json!(1));
            changed = true;
        }
    }
    let mut out = if changed {
        config
            .with_raw(&raw)
            .map_err(|e| GcpError::config("available_node_types", e.to_string()))?
    } else {
        config.clone()
    };
    for t in &mut out.node_types {
        t.hosts = match cfg.node_types.get(&t.name).and_then(|nc| nc.tpu.as_ref()) {
            Some(s) if s.hosts > 1 => Some(MultiHost {
                count: s.hosts,
                first_host_only: vec![s.head_resource()],
            }),
            _ => None,
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn slices_are_named_and_counted_as_ray_does() {
        for (cfg, want, chips) in [
            (json!({"acceleratorType": "v4-8"}), "v4-8", 4),
            (json!({"acceleratorType": "v2-8"}), "v2-8", 4),
            (json!({"acceleratorType": "v5litepod-8"}), "v5litepod-8", 8),
            (json!({"acceleratorType": "v6e-4"}), "v6e-4", 4),
            (json!({"acceleratorType": "v5p-8"}), "v5p-8", 4),
            (
                json!({"acceleratorConfig": {"type": "V4", "topology": "2x2x1"}}),
                "v4-8",
                4,
            ),
            (
                json!({"acceleratorConfig": {"type": "V5LITE_POD", "topology": "2x4"}}),
                "v5litepod-8",
                8,
            ),
        ] {
            let s = slice(&map(cfg.clone()), "t").unwrap_or_else(|e| panic!("{cfg}: {e}"));
            assert_eq!(
                (s.accelerator_type.as_str(), s.chips),
                (want, chips),
                "{cfg}"
            );
        }
        assert_eq!(
            slice(&map(json!({"acceleratorType": "v6e-8"})), "t")
                .expect("ok")
                .head_resource(),
            "TPU-v6e-8-head"
        );
    }

    #[test]
    fn hosts_are_chips_over_rays_chips_per_host() {
        for (cfg, hosts) in [
            (json!({"acceleratorType": "v4-8"}), 1),
            (json!({"acceleratorType": "v6e-8"}), 1),
            (json!({"acceleratorType": "v5litepod-8"}), 1),
            (json!({"acceleratorType": "v4-16"}), 2),
            (json!({"acceleratorType": "v4-32"}), 4),
            (json!({"acceleratorType": "v2-32"}), 4),
            // Over 8 chips a v5litepod/v6e host sees 4 (Ray's chips per host).
            (json!({"acceleratorType": "v5litepod-16"}), 4),
            (json!({"acceleratorType": "v6e-16"}), 4),
            // No chips at all (a size of 0): one host, never a division by zero.
            (json!({"acceleratorType": "v5litepod-0"}), 1),
            (json!({"acceleratorType": "v4-0"}), 1),
            (
                json!({"acceleratorConfig": {"type": "V5LITE_POD", "topology": "0x4"}}),
                1,
            ),
            (
                json!({"acceleratorConfig": {"type": "V4", "topology": "2x2x2"}}),
                2,
            ),
            (
                json!({"acceleratorConfig": {"type": "V5P", "topology": "2x2x4"}}),
                4,
            ),
        ] {
            let s = slice(&map(cfg.clone()), "t").unwrap_or_else(|e| panic!("{cfg}: {e}"));
            assert_eq!(s.hosts, hosts, "{cfg}");
        }
    }

    #[test]
    fn a_multi_host_type_is_marked_with_its_hosts_and_head_resource() {
        let yaml = "cluster_name: c\nmax_workers: 4\nprovider: {type: gcp, region: us-central2, availability_zone: us-central2-b, project_id: p}\nhead_node_type: h\navailable_node_types:\n  h: {resources: {}, node_config: {machineType: n1-standard-4}}\n  pod: {resources: {TPU: 4}, node_config: {acceleratorType: v4-16, runtimeVersion: tpu-vm-v4-base}}\n  one: {resources: {TPU: 4}, node_config: {acceleratorType: v4-8, runtimeVersion: tpu-vm-v4-base}}\n";
        let cfg = ClusterConfig::from_yaml_str(yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
        let filled = fill_resources(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let pod = filled.node_type("pod").expect("pod");
        assert_eq!(
            pod.hosts,
            Some(MultiHost {
                count: 2,
                first_host_only: vec!["TPU-v4-16-head".to_string()],
            })
        );
        assert!(pod.resources.get("TPU-v4-16-head").is_some());
        assert_eq!(filled.node_type("one").and_then(|t| t.hosts.clone()), None);
        // Filled again (a config reload): the mark stays, once.
        let again = fill_resources(&filled).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.node_type("pod").map(|t| &t.hosts), Some(&pod.hosts));
    }

    #[test]
    fn what_ray_refuses_is_a_one_line_error() {
        for (cfg, path) in [
            (
                json!({"acceleratorType": "v4-8", "acceleratorConfig": {"type": "V4", "topology": "2x2x1"}}),
                "t.acceleratorConfig:",
            ),
            (json!({"acceleratorType": "v4"}), "t.acceleratorType:"),
            (json!({"acceleratorType": "x4-8"}), "t.acceleratorType:"),
            (json!({"acceleratorType": "v9-8"}), "t.acceleratorType:"),
            (
                json!({"acceleratorConfig": {"type": "V3", "topology": "2x2"}}),
                "t.acceleratorConfig.type:",
            ),
            (
                json!({"acceleratorConfig": {"type": "v4", "topology": "2x2"}}),
                "t.acceleratorConfig.type:",
            ),
            (
                json!({"acceleratorConfig": {"type": "V4", "topology": "2x2x2x2"}}),
                "t.acceleratorConfig.topology:",
            ),
            (
                json!({"acceleratorConfig": {"type": "V4"}}),
                "t.acceleratorConfig:",
            ),
        ] {
            let e = slice(&map(cfg.clone()), "t")
                .expect_err("refused")
                .to_string();
            assert!(e.starts_with(path), "{cfg}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        for (cfg, path) in [
            (
                json!({"acceleratorType": "v4-8"}),
                "t.runtimeVersion: is required",
            ),
            (
                json!({"acceleratorType": "v4-8", "runtimeVersion": "x", "machineImage": "m"}),
                "t.machineImage: not a field",
            ),
            (
                json!({"acceleratorType": "v4-8", "runtimeVersion": "x", "metadata": {"items": []}}),
                "t.metadata:",
            ),
            (
                json!({"acceleratorType": "v4-8", "runtimeVersion": "x", "name": "n"}),
                "t.name:",
            ),
        ] {
            let e = check(&map(cfg.clone()), "t")
                .expect_err("refused")
                .to_string();
            assert!(e.starts_with(path), "{cfg}: {e}");
        }
    }

    #[test]
    fn tpu_names_are_told_from_instances() {
        let n = node_name("demo", NodeKind::Worker, "lr-1", 0);
        assert!(
            n.starts_with("ray-demo-worker-") && n.ends_with("-tpu"),
            "{n}"
        );
        assert!(n.len() <= MAX_NAME);
        assert!(is_tpu_name(&n));
        assert!(!is_tpu_name("ray-demo-worker-0123abcd-compute"));
        assert_eq!(n, node_name("demo", NodeKind::Worker, "lr-1", 0));
    }

    #[test]
    fn a_node_reads_back_only_when_live_and_the_clusters() {
        let types: TypesByLabel = [("tpu".to_string(), "tpu".to_string())].into();
        let node = |state: &str, cluster: &str| {
            json!({
                "name": "projects/p/locations/us-central2-b/nodes/ray-demo-worker-0a1b2c3d-tpu",
                "state": state,
                "labels": {"ray-cluster-name": cluster, "ray-node-type": "worker",
                           "ray-user-node-type": "tpu", "ray-launch-request": "lr-1"},
                "networkEndpoints": [{"ipAddress": "10.0.0.7", "port": 8470,
                                      "accessConfig": {"externalIp": "34.1.2.3"}}]
            })
        };
        let c = cloud_instance(&node("READY", "demo"), "demo", &types).expect("ok");
        assert_eq!(c.cloud_instance_id, "ray-demo-worker-0a1b2c3d-tpu");
        assert_eq!(c.state, CloudInstanceState::Running);
        assert_eq!(c.private_ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(c.public_ip.as_deref(), Some("34.1.2.3"));
        assert_eq!(c.zone.as_deref(), Some("us-central2-b"));
        assert_eq!(c.request_id.as_deref(), Some("lr-1"));
        assert_eq!(
            cloud_instance(&node("CREATING", "demo"), "demo", &types).map(|c| c.state),
            Some(CloudInstanceState::Pending)
        );
        // A node that is down is still listed (never taken as gone while it exists).
        for down in [
            "PREEMPTED",
            "STOPPED",
            "TERMINATED",
            "REPAIRING",
            "UNKNOWN",
            "NEW",
        ] {
            assert_eq!(
                cloud_instance(&node(down, "demo"), "demo", &types).map(|c| c.state),
                Some(CloudInstanceState::Stopping),
                "{down}"
            );
        }
        assert!(cloud_instance(&node("READY", "other"), "demo", &types).is_none());
        assert!(cloud_instance(&json!({"name": 3}), "demo", &types).is_none());
    }
}
