//! Pure functions, no client, no async: a node type's `node_config` -> the `Instance`
//! body of `instances.insert` (Ray's names, labels and short-name expansion, the boot
//! script in the `startup-script` metadata); a Compute Engine instance -> core's
//! `CloudInstance`.

use std::collections::BTreeMap;

use google_cloud_compute_v1::model;
use rayscale_core::provider::{CloudInstance, CloudInstanceState, NodeKind, tags};
use serde_json::{Map, Value, json};

use crate::GcpError;
use crate::config::{GcpConfig, NodeConfig, STARTUP_SCRIPT_KEY};

/// How an instance learns who it is: the metadata server; Compute Engine runs the
/// startup script at every boot.
pub const METADATA: rayscale_core::provider::cloud::MetadataCommands<'static> =
    rayscale_core::provider::cloud::MetadataCommands {
        instance_id: INSTANCE_ID_COMMAND,
        private_ip: PRIVATE_IP_COMMAND,
        per_boot: false,
        notices: Some(rayscale_core::provider::boot::NoticeCloud::Gce),
        host_index: Some(HOST_INDEX_COMMAND),
    };

/// How a node of `node_type` learns who it is: a TPU VM's commands for a TPU type's
/// `node_config` (Ray's rule, [`crate::tpu::is_tpu`]), else a Compute Engine instance's.
pub fn metadata_for(
    config: &rayscale_core::config::ClusterConfig,
    node_type: &str,
) -> rayscale_core::provider::cloud::MetadataCommands<'static> {
    let tpu = config
        .raw
        .pointer(&format!(
            "/available_node_types/{}/node_config",
            node_type.replace('~', "~0").replace('/', "~1")
        ))
        .and_then(Value::as_object)
        .is_some_and(crate::tpu::is_tpu);
    if tpu { TPU_METADATA } else { METADATA }
}

/// Compute Engine's longest instance name and label value (RFC 1035 names; label rules).
pub const MAX_NAME: usize = 63;

/// The suffix Ray's GCP provider gives Compute Engine instances (`GCPNodeType.COMPUTE`).
pub const NAME_SUFFIX: &str = "compute";

/// The interface default when a node config names none, as Ray's bootstrap and `gcloud`
/// give one: the project's `default` network, with an external address.
pub fn default_network_interfaces() -> Value {
    json!([{
        "network": "global/networks/default",
        "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    }])
}

/// A shell command that prints `path` of the metadata server (`instance/...`), retried
/// while it comes up. `RAYSCALE_METADATA_URL` replaces the server's address (the boot
/// simulator's stand-in).
macro_rules! metadata_command {
    ($path:literal) => {
        concat!(
            "curl -sf --retry 20 --retry-connrefused --retry-delay 1 -H 'Metadata-Flavor: Google' ",
            "\"${RAYSCALE_METADATA_URL:-http://metadata.google.internal}/computeMetadata/v1/",
            $path,
            "\""
        )
    };
}

/// The shell command that prints the instance's name (its cloud instance id, as in Ray).
pub const INSTANCE_ID_COMMAND: &str = metadata_command!("instance/name");

/// The shell command that prints the instance's private address (first interface).
pub const PRIVATE_IP_COMMAND: &str = metadata_command!("instance/network-interfaces/0/ip");

/// The shell command that prints a TPU VM's TPU node name (its cloud instance id): the
/// `instance-id` attribute Cloud TPU sets (Ray's TPU name lookup; `instance/name` is the
/// Compute Engine VM behind the node).
pub const TPU_INSTANCE_ID_COMMAND: &str = metadata_command!("instance/attributes/instance-id");

/// The shell command that prints which host of its TPU slice a TPU VM is: the
/// `agent-worker-number` attribute Cloud TPU sets on each host (0 on the first; Ray's
/// TPU accelerator manager reads it too). A Compute Engine instance is one host; its
/// boot never asks (only a multi-host type's script does).
pub const HOST_INDEX_COMMAND: &str = metadata_command!("instance/attributes/agent-worker-number");

/// How a TPU VM learns who it is: the metadata server, as a Compute Engine instance.
pub const TPU_METADATA: rayscale_core::provider::cloud::MetadataCommands<'static> =
    rayscale_core::provider::cloud::MetadataCommands {
        instance_id: TPU_INSTANCE_ID_COMMAND,
        ..METADATA
    };

/// A value as a Compute Engine label value: lowercase letters, digits, `_` and `-`, at
/// most 63 characters (others become `-`).
pub fn label_value(s: &str) -> String {
    s.chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(MAX_NAME)
        .collect()
}

/// Ray's instance name for the `index`-th node of `request_id`:
/// `ray-<cluster>-<kind>-<8 hex>-compute`, the hex derived from the request and index
/// (so a replayed insert names the same instance), the cluster part shortened to keep
/// the name within 63 characters.
pub fn instance_name(cluster: &str, kind: NodeKind, request_id: &str, index: u64) -> String {
    rayscale_core::provider::cloud::node_name(
        cluster,
        kind,
        request_id,
        index,
        MAX_NAME,
        Some(NAME_SUFFIX),
    )
}

/// Ray's labels for a node of `node_type` and `kind` (values as label values).
pub fn ray_labels(
    cluster: &str,
    node_type: &str,
    kind: NodeKind,
    request_id: Option<&str>,
    launch_hash: &str,
) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(tags::CLUSTER_NAME.to_string(), label_value(cluster));
    l.insert(tags::NODE_KIND.to_string(), kind.tag_value().to_string());
    l.insert(tags::USER_NODE_TYPE.to_string(), label_value(node_type));
    l.insert(
        tags::NODE_NAME.to_string(),
        label_value(&format!("ray-{cluster}-{}", kind.tag_value())),
    );
    l.insert(
        tags::NODE_STATUS.to_string(),
        tags::STATUS_UNINITIALIZED.to_string(),
    );
    l.insert(tags::LAUNCH_CONFIG.to_string(), label_value(launch_hash));
    if let Some(r) = request_id {
        l.insert(tags::LAUNCH_REQUEST.to_string(), label_value(r));
    }
    l
}

/// The `startup-script`: the user's own (run first, from a file, so its `exit` cannot
/// skip the boot script) and rayscale's boot script; either alone as it is.
pub fn startup_script(user: Option<&str>, boot: Option<&str>) -> Option<String> {
    const END: &str = "RAYSCALE_USER_STARTUP_SCRIPT";
    match (user, boot) {
        (None, None) => None,
        (Some(u), None) => Some(u.to_string()),
        (None, Some(b)) => Some(b.to_string()),
        (Some(u), Some(b)) => {
            let mut s = String::from("#!/bin/bash\n");
            s.push_str("cat > /tmp/rayscale-user-startup.sh <<'");
            s.push_str(END);
            s.push_str("'\n");
            s.push_str(u.trim_end_matches('\n'));
            s.push('\n');
            s.push_str(END);
            s.push_str("\nbash /tmp/rayscale-user-startup.sh || echo \"user startup-script failed: $?\" >&2\n");
            s.push_str("bash <<'");
            s.push_str(END);
            s.push_str("_BOOT'\n");
            s.push_str(b.trim_end_matches('\n'));
            s.push('\n');
            s.push_str(END);
            s.push_str("_BOOT\n");
            Some(s)
        }
    }
}

/// One instance to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct InsertSpec<'a> {
    /// The node type.
    pub node_type: &'a str,
    /// Head or worker.
    pub kind: NodeKind,
    /// The instance name.
    pub name: &'a str,
    /// The launch request, for its label.
    pub request_id: Option<&'a str>,
    /// rayscale's boot script, if any.
    pub boot_script: Option<&'a str>,
}

/// The `Instance` body for `spec`, as JSON in the REST API's spelling: the node config
/// with short names expanded (`machineType`, `guestAccelerators[].acceleratorType`,
/// `disks[].initializeParams.diskType`, as Ray's `_convert_resources_to_urls` and the
/// API's partial URLs), the default interface where none is named, Ray's labels over the
/// user's, the head's default service account, and the `startup-script`.
pub fn instance_json(cfg: &GcpConfig, spec: &InsertSpec<'_>) -> Result<Value, GcpError> {
    let t = spec.node_type;
    let nc: &NodeConfig = cfg.node_types.get(t).ok_or_else(|| {
        GcpError::config(format!("available_node_types.{t}"), "unknown node type")
    })?;
    let path = format!("available_node_types.{t}.node_config");
    let mut body: Map<String, Value> = nc.body.clone();
    let zone = &cfg.zone;
    if let Some(Value::String(mt)) = body.get_mut("machineType")
        && !mt.contains("/machineTypes/")
    {
        *mt = format!("zones/{zone}/machineTypes/{mt}");
    }
    if let Some(Value::Array(accs)) = body.get_mut("guestAccelerators") {
        for a in accs {
            if let Some(Value::String(at)) = a.get_mut("acceleratorType")
                && !at.contains("/acceleratorTypes/")
            {
                *at = format!(
                    "projects/{}/zones/{zone}/acceleratorTypes/{at}",
                    cfg.project_id
                );
            }
        }
    }
    if let Some(Value::Array(disks)) = body.get_mut("disks") {
        for d in disks {
            if let Some(Value::String(dt)) = d
                .get_mut("initializeParams")
                .and_then(|p| p.get_mut("diskType"))
                && !dt.contains("/diskTypes/")
            {
                *dt = format!("zones/{zone}/diskTypes/{dt}");
            }
        }
    }
    if !body.contains_key("networkInterfaces") && nc.source_instance_template.is_none() {
        body.insert("networkInterfaces".into(), default_network_interfaces());
    }
    if spec.kind == NodeKind::Head
        && !body.contains_key("serviceAccounts")
        && nc.source_instance_template.is_none()
    {
        // rayscale on the head calls the Compute API as the instance's service account:
        // Ray's, when `up`'s bootstrap set it, else the project's default one.
        body.insert(
            "serviceAccounts".into(),
            cfg.head_service_accounts.clone().unwrap_or_else(|| {
                json!([{"email": "default", "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}])
            }),
        );
    }
    let mut labels: Map<String, Value> = match body.remove("labels") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(v) => {
            return Err(GcpError::config(
                format!("{path}.labels"),
                format!("must be a mapping, got {v}"),
            ));
        }
    };
    let hash = cfg.launch_hashes.get(t, spec.kind);
    for (k, v) in ray_labels(&cfg.cluster_name, t, spec.kind, spec.request_id, hash) {
        labels.insert(k, Value::String(v));
    }
    for (k, v) in cfg.launch_hashes.extra_tags(spec.kind) {
        labels.insert(k.to_string(), Value::String(v));
    }
    body.insert("labels".into(), Value::Object(labels));
    body.insert("name".into(), Value::String(spec.name.to_string()));
    let script = startup_script(nc.user_startup_script(), spec.boot_script);
    if let Some(script) = script {
        let mut metadata = match body.remove("metadata") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(v) => {
                return Err(GcpError::config(
                    format!("{path}.metadata"),
                    format!("must be a mapping with items, got {v}"),
                ));
            }
        };
        let mut items: Vec<Value> = match metadata.remove("items") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a,
            Some(v) => {
                return Err(GcpError::config(
                    format!("{path}.metadata.items"),
                    format!("must be a list of {{key, value}}, got {v}"),
                ));
            }
        };
        items.retain(|i| i.get("key").and_then(Value::as_str) != Some(STARTUP_SCRIPT_KEY));
        items.push(json!({"key": STARTUP_SCRIPT_KEY, "value": script}));
        metadata.insert("items".into(), Value::Array(items));
        body.insert("metadata".into(), Value::Object(metadata));
    }
    Ok(Value::Object(body))
}

/// The SDK's `Instance` for `spec` ([`instance_json`] read into the client's model: a
/// value of the wrong type is an error naming its path).
pub fn instance_body(cfg: &GcpConfig, spec: &InsertSpec<'_>) -> Result<model::Instance, GcpError> {
    into_model(spec.node_type, &instance_json(cfg, spec)?)
}

/// `json` read into the client's model `T`: a value of the wrong type is an error naming
/// its path in the node type's `node_config`.
fn into_model<T: serde::de::DeserializeOwned>(
    node_type: &str,
    json: &Value,
) -> Result<T, GcpError> {
    let text = json.to_string();
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
        GcpError::config(
            format!("available_node_types.{node_type}.node_config.{}", e.path()),
            one_line(&e.inner().to_string()),
        )
    })
}

/// The `Instance` fields an `instances.bulkInsert` can carry: those of its
/// `InstanceProperties` (the names are per instance). A node config with another field
/// (`hostname`, `params`, ...) is launched instance by instance instead.
const BULK_FIELDS: &[&str] = &[
    "advancedMachineFeatures",
    "canIpForward",
    "confidentialInstanceConfig",
    "description",
    "disks",
    "guestAccelerators",
    "keyRevocationActionType",
    "labels",
    "machineType",
    "metadata",
    "minCpuPlatform",
    "networkInterfaces",
    "networkPerformanceConfig",
    "privateIpv6GoogleAccess",
    "reservationAffinity",
    "resourceManagerTags",
    "resourcePolicies",
    "scheduling",
    "serviceAccounts",
    "shieldedInstanceConfig",
    "tags",
];

/// The first field of `nc` an `instances.bulkInsert` cannot carry, if any.
pub fn bulk_blocker(nc: &NodeConfig) -> Option<&str> {
    nc.body
        .keys()
        .map(String::as_str)
        .find(|k| !BULK_FIELDS.contains(k))
}

/// The body of one `instances.bulkInsert` that makes all of `names` or none
/// (`minCount` = `count`, "if minCount instances cannot be created, then no instances
/// will be created", `BulkInsertInstanceResource` in the REST reference): the instance
/// of [`instance_json`] as `instanceProperties`, whose machine, accelerator and disk
/// types and resource policies are names, not URLs (as in an instance template), one entry of
/// `perInstanceProperties` per name (its key; the entry's own `name` is output only), and the node type's template if it has one.
/// `spec.name` is not used. The caller checks [`bulk_blocker`] first.
pub fn bulk_body(
    cfg: &GcpConfig,
    spec: &InsertSpec<'_>,
    names: &[String],
) -> Result<model::BulkInsertInstanceResource, GcpError> {
    let Value::Object(mut props) = instance_json(cfg, spec)? else {
        return Err(GcpError::config("instance", "not a mapping"));
    };
    props.remove("name");
    let last = |v: &mut Value| {
        if let Value::String(s) = v
            && let Some(short) = s.rsplit('/').next()
        {
            *s = short.to_string();
        }
    };
    if let Some(mt) = props.get_mut("machineType") {
        last(mt);
    }
    if let Some(Value::Array(accs)) = props.get_mut("guestAccelerators") {
        for a in accs {
            if let Some(at) = a.get_mut("acceleratorType") {
                last(at);
            }
        }
    }
    if let Some(Value::Array(disks)) = props.get_mut("disks") {
        for d in disks {
            if let Some(dt) = d
                .get_mut("initializeParams")
                .and_then(|p| p.get_mut("diskType"))
            {
                last(dt);
            }
        }
    }
    if let Some(Value::Array(policies)) = props.get_mut("resourcePolicies") {
        policies.iter_mut().for_each(last);
    }
    let count = names.len() as u64;
    let per: Map<String, Value> = names.iter().map(|n| (n.clone(), json!({}))).collect();
    let mut body = json!({
        "count": count.to_string(),
        "minCount": count.to_string(),
        "instanceProperties": props,
        "perInstanceProperties": per,
    });
    if let Some(t) = cfg
        .node_types
        .get(spec.node_type)
        .and_then(|nc| nc.source_instance_template.clone())
    {
        body["sourceInstanceTemplate"] = Value::String(t);
    }
    into_model(spec.node_type, &body)
}

/// Node types by their label value (`ray-user-node-type`), for reading instances back.
pub type TypesByLabel = BTreeMap<String, String>;

/// The [`TypesByLabel`] of `cfg`; two types with one label value are an error.
pub fn types_by_label(cfg: &GcpConfig) -> Result<TypesByLabel, GcpError> {
    let mut out = TypesByLabel::new();
    for t in cfg.node_types.keys() {
        if let Some(other) = out.insert(label_value(t), t.clone()) {
            return Err(GcpError::config(
                format!("available_node_types.{t}"),
                format!(
                    "its label value {:?} is {other:?}'s too (labels are lowercase letters, digits, _ and -)",
                    label_value(t)
                ),
            ));
        }
    }
    Ok(out)
}

/// The instance as core sees it; `None` for an instance without Ray's kind label.
/// PROVISIONING, STAGING, PENDING and REPAIRING are pending, RUNNING running, the rest
/// (stopping, suspending, stopped, deprovisioning) not usable.
pub fn cloud_instance(i: &model::Instance, types: &TypesByLabel) -> Option<CloudInstance> {
    use model::instance::Status;
    let id = i.name.as_deref()?;
    let labels: BTreeMap<String, String> = i
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let kind = match labels.get(tags::NODE_KIND).map(String::as_str) {
        Some(tags::NODE_KIND_HEAD) => NodeKind::Head,
        Some(tags::NODE_KIND_WORKER) => NodeKind::Worker,
        _ => return None,
    };
    let state = match &i.status {
        Some(Status::Provisioning | Status::Staging | Status::Pending | Status::Repairing) => {
            CloudInstanceState::Pending
        }
        Some(Status::Running) => CloudInstanceState::Running,
        Some(_) => CloudInstanceState::Stopping,
        None => CloudInstanceState::Pending,
    };
    let node_type = labels
        .get(tags::USER_NODE_TYPE)
        .map(|v| types.get(v).cloned().unwrap_or_else(|| v.clone()))
        .unwrap_or_default();
    Some(CloudInstance {
        cloud_instance_id: id.to_string(),
        node_type,
        kind,
        request_id: labels.get(tags::LAUNCH_REQUEST).cloned(),
        state,
        private_ip: i
            .network_interfaces
            .first()
            .and_then(|n| n.network_ip.clone()),
        // Ray's GCP `external_ip`: the first interface's first access config's NAT address.
        public_ip: i
            .network_interfaces
            .first()
            .and_then(|n| n.access_configs.first())
            .and_then(|a| a.nat_ip.clone())
            .filter(|ip| !ip.is_empty()),
        launch_config_hash: labels.get(tags::LAUNCH_CONFIG).cloned(),
        labels,
        // The zone's URL ends in its name.
        zone: i
            .zone
            .as_deref()
            .and_then(|z| z.rsplit('/').next())
            .filter(|z| !z.is_empty())
            .map(str::to_string),
    })
}

/// Whether an instance is stopped (`TERMINATED` in Compute Engine's words, or the
/// unused `STOPPED`) or suspended: not running, not on its way.
pub fn is_stopped(i: &model::Instance) -> bool {
    use model::instance::Status;
    matches!(
        i.status,
        Some(Status::Terminated | Status::Stopped | Status::Suspended)
    )
}

/// Whether `instances.start` brings a stopped instance back (a suspended one needs
/// `resume`, which rayscale does not send).
pub fn is_restartable(i: &model::Instance) -> bool {
    use model::instance::Status;
    matches!(i.status, Some(Status::Terminated | Status::Stopped))
}

/// The list filter of the cluster's instances in `statuses`, with `labels` too (the
/// `filter` grammar of `instances.list`: `labels.k = v`, `status = S`, `AND`, `OR`).
pub fn list_filter(cluster: &str, statuses: &[&str], labels: &[(&str, &str)]) -> String {
    let mut parts = vec![
        format!("(labels.{} = {})", tags::CLUSTER_NAME, label_value(cluster)),
        // The Compute Engine VMs behind a TPU node carry its labels; they are not the
        // cluster's instances (Ray's filter leaves them out too).
        format!("(NOT labels.{}:*)", crate::tpu::TPU_VM_LABEL),
    ];
    for (k, v) in labels {
        parts.push(format!("(labels.{k} = {})", label_value(v)));
    }
    if !statuses.is_empty() {
        parts.push(format!(
            "({})",
            statuses
                .iter()
                .map(|s| format!("(status = {s})"))
                .collect::<Vec<_>>()
                .join(" OR ")
        ));
    }
    parts.join(" AND ")
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayscale_core::config::ClusterConfig;

    fn cfg(extra: &str) -> GcpConfig {
        let yaml = format!(
            "cluster_name: Demo.Cluster\nprovider: {{type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: proj}}\n\
             head_node_type: head\navailable_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{machineType: n1-standard-2}}}}\n{extra}"
        );
        let c = ClusterConfig::from_yaml_str(&yaml, "t.yaml").expect("config");
        GcpConfig::from_cluster(&c).expect("gcp config")
    }

    #[test]
    fn names_are_rays_and_stable() {
        let a = instance_name("demo", NodeKind::Worker, "lr-1", 0);
        assert!(
            a.starts_with("ray-demo-worker-") && a.ends_with("-compute"),
            "{a}"
        );
        assert_eq!(a.len(), "ray-demo-worker-".len() + 8 + "-compute".len());
        assert_eq!(a, instance_name("demo", NodeKind::Worker, "lr-1", 0));
        assert_ne!(a, instance_name("demo", NodeKind::Worker, "lr-1", 1));
        let long = instance_name(&"X_y".repeat(40), NodeKind::Head, "lr-1", 0);
        assert!(long.len() <= MAX_NAME, "{long}");
        assert!(long.starts_with("ray-x-yx-y"), "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_eq!(label_value("Demo.Cluster_1"), "demo-cluster_1");
    }

    #[test]
    fn a_bulk_insert_is_all_or_none_with_names_not_urls() {
        let c = cfg(
            "  gpu:\n    resources: {GPU: 1}\n    node_config:\n      machineType: n1-standard-8\n      \
             guestAccelerators: [{acceleratorType: nvidia-tesla-t4, acceleratorCount: 1}]\n      \
             disks: [{boot: true, initializeParams: {diskType: pd-ssd, diskSizeGb: 50}}]\n      \
             resourcePolicies: [projects/proj/regions/us-west1/resourcePolicies/compact]\n  \
             odd: {resources: {CPU: 1}, node_config: {machineType: n1-standard-2, hostname: a.b}}\n",
        );
        let names: Vec<String> = (0..3)
            .map(|i| instance_name("demo", NodeKind::Worker, "lr-g", i))
            .collect();
        let spec = InsertSpec {
            node_type: "gpu",
            kind: NodeKind::Worker,
            name: &names[0],
            request_id: Some("lr-g"),
            boot_script: Some("#!/bin/bash\necho boot\n"),
        };
        let b = bulk_body(&c, &spec, &names).expect("bulk body");
        assert_eq!((b.count, b.min_count), (Some(3), Some(3)));
        let mut keys: Vec<&String> = b.per_instance_properties.keys().collect();
        keys.sort();
        let mut want: Vec<&String> = names.iter().collect();
        want.sort();
        assert_eq!(keys, want);
        let p = b.instance_properties.expect("instance properties");
        assert_eq!(p.machine_type.as_deref(), Some("n1-standard-8"));
        assert_eq!(
            p.guest_accelerators[0].accelerator_type.as_deref(),
            Some("nvidia-tesla-t4")
        );
        assert_eq!(
            p.disks[0]
                .initialize_params
                .as_ref()
                .and_then(|i| i.disk_type.as_deref()),
            Some("pd-ssd")
        );
        assert_eq!(
            p.labels.get("ray-launch-request").map(String::as_str),
            Some("lr-g")
        );
        assert!(p.metadata.is_some(), "the boot script is in the metadata");
        assert_eq!(bulk_blocker(&c.node_types["gpu"]), None);
        assert_eq!(bulk_blocker(&c.node_types["odd"]), Some("hostname"));
    }

    #[test]
    fn the_body_ray_would_send_and_more() {
        let c = cfg(
            "  gpu:\n    resources: {GPU: 1}\n    node_config:\n      machineType: n1-standard-8\n      \
             labels: {team: ml, ray-node-type: mine}\n      \
             guestAccelerators: [{acceleratorType: nvidia-tesla-t4, acceleratorCount: 1}]\n      \
             disks: [{boot: true, initializeParams: {diskType: pd-ssd, diskSizeGb: 50}}]\n      \
             metadata: {items: [{key: startup-script, value: 'echo user'}, {key: other, value: x}]}\n      \
             scheduling: {provisioningModel: SPOT}\n",
        );
        let spec = InsertSpec {
            node_type: "gpu",
            kind: NodeKind::Worker,
            name: "ray-demo-cluster-worker-00000000-compute",
            request_id: Some("lr-ABC"),
            boot_script: Some("#!/bin/bash\necho boot\n"),
        };
        let j = instance_json(&c, &spec).expect("body");
        assert_eq!(
            j["machineType"],
            "zones/us-west1-a/machineTypes/n1-standard-8"
        );
        assert_eq!(
            j["guestAccelerators"][0]["acceleratorType"],
            "projects/proj/zones/us-west1-a/acceleratorTypes/nvidia-tesla-t4"
        );
        assert_eq!(
            j["disks"][0]["initializeParams"]["diskType"],
            "zones/us-west1-a/diskTypes/pd-ssd"
        );
        assert_eq!(j["labels"]["team"], "ml");
        assert_eq!(j["labels"]["ray-node-type"], "worker", "Ray's label wins");
        assert_eq!(j["labels"]["ray-cluster-name"], "demo-cluster");
        assert_eq!(j["labels"]["ray-launch-request"], "lr-abc");
        assert_eq!(j["networkInterfaces"], default_network_interfaces());
        assert!(
            j.get("serviceAccounts").is_none(),
            "workers keep the user's"
        );
        let items = j["metadata"]["items"].as_array().expect("items");
        assert_eq!(items.len(), 2);
        let script = items
            .iter()
            .find(|i| i["key"] == STARTUP_SCRIPT_KEY)
            .and_then(|i| i["value"].as_str())
            .expect("startup script");
        let user_at = script.find("echo user").expect("user part");
        let boot_at = script.find("echo boot").expect("boot part");
        assert!(user_at < boot_at, "{script}");
        // The SDK's model takes it, spot and all.
        let m = instance_body(&c, &spec).expect("model");
        assert_eq!(
            m.scheduling
                .and_then(|s| s.provisioning_model)
                .map(|p| p.name().map(str::to_string)),
            Some(Some("SPOT".to_string()))
        );
        // A head gets the default service account.
        let head = instance_json(
            &c,
            &InsertSpec {
                node_type: "head",
                kind: NodeKind::Head,
                ..spec.clone()
            },
        )
        .expect("head body");
        assert_eq!(head["serviceAccounts"][0]["email"], "default");
    }

    #[test]
    fn a_wrong_type_names_its_path() {
        let c =
            cfg("  w: {resources: {}, node_config: {machineType: n1, canIpForward: sometimes}}\n");
        let e = instance_body(
            &c,
            &InsertSpec {
                node_type: "w",
                kind: NodeKind::Worker,
                name: "n",
                request_id: None,
                boot_script: None,
            },
        )
        .expect_err("refused")
        .to_string();
        assert!(
            e.starts_with("available_node_types.w.node_config.canIpForward:"),
            "{e}"
        );
    }

    #[test]
    fn instances_read_back() {
        let c = cfg("  Cpu.Small: {resources: {CPU: 1}, node_config: {machineType: n1}}\n");
        let types = types_by_label(&c).expect("types");
        let i: model::Instance = serde_json::from_value(json!({
            "name": "ray-demo-worker-1-compute", "id": "18446744073709551615",
            "status": "STAGING",
            "labels": {"ray-node-type": "worker", "ray-user-node-type": "cpu-small",
                       "ray-launch-request": "lr-1"},
            "networkInterfaces": [{"networkIP": "10.0.0.7",
                "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "natIP": "34.1.2.3"}]}]
        }))
        .expect("instance JSON");
        let ci = cloud_instance(&i, &types).expect("a Ray node");
        assert_eq!(ci.node_type, "Cpu.Small");
        assert_eq!(ci.state, CloudInstanceState::Pending);
        assert_eq!(ci.private_ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(
            ci.public_ip.as_deref(),
            Some("34.1.2.3"),
            "Ray's external_ip"
        );
        assert_eq!(ci.request_id.as_deref(), Some("lr-1"));
        assert_eq!(i.id, Some(u64::MAX), "uint64 ids are decimal strings");
    }

    #[test]
    fn the_filter() {
        assert_eq!(
            list_filter(
                "Demo",
                &["RUNNING", "STAGING"],
                &[("ray-launch-request", "lr-1")]
            ),
            "(labels.ray-cluster-name = demo) AND (NOT labels.tpu_cores:*) AND \
             (labels.ray-launch-request = lr-1) AND ((status = RUNNING) OR (status = STAGING))"
        );
    }
}
