//! Pure mapping between KubeRay's objects and rayscale's: the RayCluster -> Ray's cluster
//! config (as Ray 2.60's `_private/kuberay/autoscaling_config.py` derives it), a pod ->
//! a [`CloudInstance`] (as `cloud_providers/kuberay/cloud_provider.py` reads it), and a
//! scale change -> the JSON patch of the RayCluster. No I/O here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use rayscale_core::provider::{CloudInstance, CloudInstanceState, NodeKind};
use serde_json::{Map, Value, json};

use crate::errors::KubeRayError;

mod scale;
pub use scale::{
    LaunchPlan, Ledger, Observed, guard, ledger, plan_clear, plan_delete, plan_launch,
    request_time_s,
};

/// The head's node type, as Ray names it.
pub const HEAD_GROUP: &str = "headgroup";
/// KubeRay's pod labels.
pub const LABEL_CLUSTER: &str = "ray.io/cluster";
/// `head` or `worker`.
pub const LABEL_KIND: &str = "ray.io/node-type";
/// The worker group (`headgroup` for the head).
pub const LABEL_GROUP: &str = "ray.io/group";
/// The RayCluster annotation holding the launch requests already applied (request id ->
/// replicas added), so a replayed launch (after a crash, a timeout) adds nothing twice.
/// Ray's KubeRay provider keeps this in memory only.
pub const LEDGER_ANNOTATION: &str = "rayscale.io/launch-ledger";
/// How many launch requests the ledger remembers (oldest dropped first). A request older
/// than the newest one dropped (its time is in its id, see [`request_time_s`]) is never
/// applied again, however late it is replayed: the ledger keeps the time of the newest
/// request it dropped (`floor`).
pub const LEDGER_KEEP: usize = 256;

/// Ray's default idle timeout for KubeRay clusters without `autoscalerOptions`.
pub const DEFAULT_IDLE_TIMEOUT_S: f64 = 60.0;

fn cfg_err(path: impl Into<String>, message: impl Into<String>) -> KubeRayError {
    KubeRayError::Config {
        path: path.into(),
        message: message.into(),
    }
}

/// Ray's cluster config (the `ray up` YAML shape) of a RayCluster object, as Ray derives
/// it; `rayscale` is the optional `rayscale:` block of a cluster YAML given beside it.
pub fn cluster_config_value(rc: &Value, rayscale: Option<&Value>) -> Result<Value, KubeRayError> {
    let name = rc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or_else(|| cfg_err("RayCluster.metadata.name", "missing"))?;
    let namespace = rc
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let spec = rc
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| cfg_err("RayCluster.spec", "missing"))?;
    let head = spec
        .get("headGroupSpec")
        .ok_or_else(|| cfg_err("RayCluster.spec.headGroupSpec", "missing"))?;
    let mut types = Map::new();
    types.insert(
        HEAD_GROUP.into(),
        node_type(head, "RayCluster.spec.headGroupSpec", true)?,
    );
    let mut global_max = 0u64;
    let groups = match spec.get("workerGroupSpecs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(cfg_err(
                "RayCluster.spec.workerGroupSpecs",
                "expected a list",
            ));
        }
    };
    for (i, g) in groups.iter().enumerate() {
        let path = format!("RayCluster.spec.workerGroupSpecs[{i}]");
        let gname = g
            .get("groupName")
            .and_then(Value::as_str)
            .ok_or_else(|| cfg_err(format!("{path}.groupName"), "missing"))?;
        if gname == HEAD_GROUP || types.contains_key(gname) {
            return Err(cfg_err(
                format!("{path}.groupName"),
                format!("{gname:?} is used twice (or is the head's name)"),
            ));
        }
        let t = node_type(g, &path, false)?;
        global_max += t.get("max_workers").and_then(Value::as_u64).unwrap_or(0);
        types.insert(gname.to_string(), t);
    }
    let options = spec.get("autoscalerOptions");
    let idle_s = match options.and_then(|o| o.get("idleTimeoutSeconds")) {
        None | Some(Value::Null) => DEFAULT_IDLE_TIMEOUT_S,
        Some(v) => v.as_f64().filter(|s| *s >= 0.0).ok_or_else(|| {
            cfg_err(
                "RayCluster.spec.autoscalerOptions.idleTimeoutSeconds",
                "expected a number of seconds >= 0",
            )
        })?,
    };
    // Ray: Conservative -> 1, Default / Aggressive / unset -> 1000 (no rate limit).
    let upscaling = match options
        .and_then(|o| o.get("upscalingMode"))
        .and_then(Value::as_str)
    {
        Some("Conservative") => 1.0,
        None | Some("Default" | "Aggressive") => 1000.0,
        Some(other) => {
            return Err(cfg_err(
                "RayCluster.spec.autoscalerOptions.upscalingMode",
                format!("{other:?} is not one of Default, Conservative, Aggressive"),
            ));
        }
    };
    let mut cfg = json!({
        "cluster_name": name,
        "provider": {
            "type": crate::PROVIDER_TYPE,
            "namespace": namespace,
            "disable_node_updaters": true,
            "disable_launch_config_check": true,
            "foreground_node_launch": true,
            "worker_liveness_check": false,
        },
        "head_node_type": HEAD_GROUP,
        "available_node_types": types,
        "max_workers": global_max,
        "idle_timeout_minutes": idle_s / 60.0,
        "upscaling_speed": upscaling,
    });
    if let (Some(r), Some(obj)) = (rayscale, cfg.as_object_mut()) {
        obj.insert("rayscale".into(), r.clone());
    }
    Ok(cfg)
}

/// One `available_node_types` entry of a head or worker group spec.
fn node_type(g: &Value, path: &str, is_head: bool) -> Result<Value, KubeRayError> {
    let count = |key: &str| -> Result<u64, KubeRayError> {
        match g.get(key) {
            None | Some(Value::Null) if key == "numOfHosts" => Ok(1),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| cfg_err(format!("{path}.{key}"), "expected a whole number >= 0")),
            None => Err(cfg_err(format!("{path}.{key}"), "missing")),
        }
    };
    let (min, max) = if is_head {
        (0, 0)
    } else {
        let hosts = count("numOfHosts")?.max(1);
        let min = count("minReplicas")?;
        let max = count("maxReplicas")?;
        if min > max {
            return Err(cfg_err(
                format!("{path}.minReplicas"),
                format!("{min} is larger than maxReplicas {max}"),
            ));
        }
        (min * hosts, max * hosts)
    };
    let mut t = json!({
        "min_workers": min,
        "max_workers": max,
        "node_config": {},
        "resources": resources(g, path)?,
    });
    if let Some(labels) = g.get("labels").filter(|l| !l.is_null()) {
        let ok = labels
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string));
        if !ok {
            return Err(cfg_err(
                format!("{path}.labels"),
                "expected a mapping of strings",
            ));
        }
        t["labels"] = labels.clone();
    }
    if let Some(idle) = g.get("idleTimeoutSeconds").filter(|v| !v.is_null()) {
        let s = idle.as_f64().filter(|s| *s >= 0.0).ok_or_else(|| {
            cfg_err(
                format!("{path}.idleTimeoutSeconds"),
                "expected a number >= 0",
            )
        })?;
        t["idle_timeout_s"] = json!(s);
    }
    if let Some(p) = g.get("priority").filter(|v| !v.is_null()) {
        t["priority"] =
            json!(priority(p).ok_or_else(|| {
                cfg_err(format!("{path}.priority"), "expected a whole number")
            })?);
    }
    Ok(t)
}

/// A group's `priority`, read as Ray's `int()` reads it: a whole number, or a string of
/// one (a float is cut toward zero as Python's `int` cuts it).
fn priority(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && f.abs() < 9.0e18)
                .map(|f| f.trunc() as i64)
        }),
        // `int("1_000")` is 1000: underscores between digits.
        Value::String(s) => {
            let t = s.trim();
            let digits = t.trim_start_matches(['+', '-']);
            let ok = !digits.starts_with('_') && !digits.ends_with('_') && !t.contains("__");
            ok.then(|| t.replace('_', "").parse().ok()).flatten()
        }
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// A group's Ray resources: the group's `resources` field first, then `rayStartParams`
/// (num-cpus, num-gpus, memory, resources), then the Ray container's limits, then its
/// requests; CPU is required.
fn resources(g: &Value, path: &str) -> Result<Value, KubeRayError> {
    let group: &Map<String, Value> = match g.get("resources") {
        Some(Value::Object(m)) => m,
        _ => &Map::new(),
    };
    let params: &Map<String, Value> = match g.get("rayStartParams") {
        Some(Value::Object(m)) => m,
        _ => &Map::new(),
    };
    let container = g
        .pointer("/template/spec/containers/0")
        .ok_or_else(|| cfg_err(format!("{path}.template.spec.containers"), "missing"))?;
    let limits = container.pointer("/resources/limits");
    let requests = container.pointer("/resources/requests");
    let k8s = |key: &str| {
        limits
            .and_then(|l| l.get(key))
            .or_else(|| requests.and_then(|r| r.get(key)))
    };
    let param = |key: &str| -> Result<Option<u64>, KubeRayError> {
        match params.get(key) {
            None => Ok(None),
            Some(v) => {
                let s = v
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string());
                s.trim_matches('"').parse::<u64>().map(Some).map_err(|_| {
                    cfg_err(
                        format!("{path}.rayStartParams.{key}"),
                        format!("expected a whole number, got {s:?}"),
                    )
                })
            }
        }
    };
    let qty = |v: &Value, at: String| -> Result<u64, KubeRayError> {
        let s = v
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string());
        quantity_ceil(&s).ok_or_else(|| cfg_err(at, format!("{s:?} is not a Kubernetes quantity")))
    };
    let mut out = Map::new();
    let cpu = if let Some(v) = group.get("CPU") {
        qty(v, format!("{path}.resources.CPU"))?
    } else if let Some(n) = param("num-cpus")? {
        n
    } else if let Some(v) = k8s("cpu") {
        qty(
            v,
            format!("{path}.template.spec.containers[0].resources.cpu"),
        )?
    } else {
        return Err(cfg_err(
            path,
            "no CPU count: set rayStartParams num-cpus or the Ray container's CPU limit",
        ));
    };
    out.insert("CPU".into(), json!(cpu));
    let gpu = if let Some(v) = group.get("GPU") {
        Some(qty(v, format!("{path}.resources.GPU"))?)
    } else if let Some(n) = param("num-gpus")? {
        Some(n)
    } else {
        let mut found = None;
        for m in [limits, requests].into_iter().flatten() {
            if let Some(obj) = m.as_object() {
                for (k, v) in obj {
                    if k.ends_with("gpu") {
                        let n = qty(
                            v,
                            format!("{path}.template.spec.containers[0].resources.{k}"),
                        )?;
                        if n > 0 && found.is_none() {
                            found = Some(n);
                        }
                    }
                }
            }
        }
        found
    };
    if let Some(n) = gpu {
        out.insert("GPU".into(), json!(n));
    }
    let memory = if let Some(v) = group.get("memory") {
        Some(qty(v, format!("{path}.resources.memory"))?)
    } else if let Some(n) = param("memory")? {
        Some(n)
    } else if let Some(v) = k8s("memory") {
        Some(qty(
            v,
            format!("{path}.template.spec.containers[0].resources.memory"),
        )?)
    } else {
        None
    };
    if let Some(n) = memory {
        out.insert("memory".into(), json!(n));
    }
    // Custom resources: the group's field alone when it has any, else rayStartParams'
    // `resources` (a JSON object in a quoted, escaped string: '"{\"A\": 1}"').
    let mut custom = BTreeMap::new();
    if !group.is_empty() {
        for (k, v) in group {
            if !matches!(k.as_str(), "CPU" | "GPU" | "TPU" | "memory") {
                custom.insert(k.clone(), qty(v, format!("{path}.resources.{k}"))?);
            }
        }
    } else if let Some(v) = params.get("resources") {
        let at = format!("{path}.rayStartParams.resources");
        let s = v
            .as_str()
            .ok_or_else(|| cfg_err(&at, "expected a string"))?;
        let inner = s
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .replace('\\', "");
        let parsed: Map<String, Value> = serde_json::from_str(&inner)
            .map_err(|e| cfg_err(&at, format!("not a JSON object of counts: {e}")))?;
        for (k, v) in parsed {
            let n = v
                .as_u64()
                .ok_or_else(|| cfg_err(format!("{at}.{k}"), "expected a whole number"))?;
            custom.insert(k, n);
        }
    }
    // TPU chips: the group's field, else a custom `TPU` (inserted with the custom
    // resources below), else the first of the container's limits and requests above 0
    // (read only then, as Ray's `_get_num_tpus`).
    let tpu = if let Some(v) = group.get("TPU") {
        Some(qty(v, format!("{path}.resources.TPU"))?)
    } else if custom.contains_key("TPU") {
        None
    } else {
        let mut found = None;
        for (m, at) in [(limits, "limits"), (requests, "requests")] {
            if let Some(v) = m.and_then(|m| m.get("google.com/tpu")) {
                let at =
                    format!("{path}.template.spec.containers[0].resources.{at}.google.com/tpu");
                let n = qty(v, at)?;
                if n > 0 {
                    found = Some(n);
                    break;
                }
            }
        }
        found
    };
    if let Some(n) = tpu {
        out.insert("TPU".into(), json!(n));
    }
    if tpu.is_some() || custom.contains_key("TPU") {
        // One `TPU-<slice type>-head` per replica (its worker 0), from GKE's node
        // selectors, as Ray's autoscaling config: a multi-host slice is scaled by it.
        match tpu_head_resource(g, path)? {
            Some(head) => {
                out.insert(head, json!(1));
            }
            None => tracing::warn!(
                "{path}: a TPU group without both the {TPU_TOPOLOGY} and {TPU_ACCELERATOR} \
                 node selectors gets no TPU-<type>-head resource (as in Ray)"
            ),
        }
    }
    for (k, n) in custom {
        out.insert(k, json!(n));
    }
    Ok(Value::Object(out))
}

/// GKE's node selector naming a TPU slice's topology (`2x2x2`).
pub const TPU_TOPOLOGY: &str = "cloud.google.com/gke-tpu-topology";
/// GKE's node selector naming a TPU slice's accelerator (`tpu-v4-podslice`).
pub const TPU_ACCELERATOR: &str = "cloud.google.com/gke-tpu-accelerator";

/// GKE's TPU accelerators and the generation Ray names them by (GKE's TPU guide; the
/// same table as Ray 2.60's KubeRay utilities).
const GKE_TPU_GENERATIONS: &[(&str, &str)] = &[
    ("tpu-v4-podslice", "v4"),
    ("tpu-v5-lite-device", "v5litepod"),
    ("tpu-v5-lite-podslice", "v5litepod"),
    ("tpu-v5p-slice", "v5p"),
    ("tpu-v6e-slice", "v6e"),
    ("tpu7x", "v7x"),
];

/// The Ray resource a TPU group's replica carries once, on its worker 0:
/// `TPU-<generation>-<cores>-head`, with cores = chips in the topology x cores per chip
/// (1 on v5litepod and v6e, else 2). `None` without both selectors or for an accelerator
/// GKE's table does not name (Ray adds none then either).
fn tpu_head_resource(g: &Value, path: &str) -> Result<Option<String>, KubeRayError> {
    let selectors = g.pointer("/template/spec/nodeSelector");
    let get = |k: &str| selectors.and_then(|s| s.get(k)).and_then(Value::as_str);
    let (Some(topology), Some(accelerator)) = (get(TPU_TOPOLOGY), get(TPU_ACCELERATOR)) else {
        return Ok(None);
    };
    if topology.is_empty() || accelerator.is_empty() {
        return Ok(None);
    }
    let Some((_, generation)) = GKE_TPU_GENERATIONS.iter().find(|(a, _)| *a == accelerator) else {
        return Ok(None);
    };
    let at = || format!("{path}.template.spec.nodeSelector.{TPU_TOPOLOGY}");
    let mut chips: u64 = 1;
    for dim in topology.trim().to_ascii_lowercase().split('x') {
        let n: u64 = dim
            .trim()
            .parse()
            .map_err(|_| cfg_err(at(), format!("{topology:?} is not a topology like 2x2x2")))?;
        chips = chips
            .checked_mul(n)
            .ok_or_else(|| cfg_err(at(), format!("{topology:?} is too large")))?;
    }
    let per_chip = if matches!(*generation, "v5litepod" | "v6e") {
        1
    } else {
        2
    };
    let cores = chips
        .checked_mul(per_chip)
        .ok_or_else(|| cfg_err(at(), format!("{topology:?} is too large")))?;
    Ok(Some(format!("TPU-{generation}-{cores}-head")))
}

/// A Kubernetes quantity (`500m`, `2Gi`, `1e3`, `1.5`) rounded up to a whole number, in
/// exact decimal arithmetic (as Ray's `parse_quantity` with `ROUND_UP`); `None` when it
/// is not a quantity.
pub fn quantity_ceil(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    if num.is_empty() || num.starts_with('-') {
        return None;
    }
    let num = num.trim_start_matches('+');
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let digits = format!("{int}{frac}");
    let significant = digits.trim_start_matches('0');
    let mantissa: u128 = if significant.is_empty() {
        0
    } else {
        significant.parse().ok()?
    };
    // value = mantissa * mul / 10^(frac.len() + div10)
    let mut div10 = frac.len() as u32;
    let mut mul: u128 = 1;
    match suffix {
        "" => {}
        "Ki" => mul = 1 << 10,
        "Mi" => mul = 1 << 20,
        "Gi" => mul = 1 << 30,
        "Ti" => mul = 1 << 40,
        "Pi" => mul = 1 << 50,
        "Ei" => mul = 1 << 60,
        "n" => div10 += 9,
        "u" => div10 += 6,
        "m" => div10 += 3,
        "k" => mul = 10u128.pow(3),
        "M" => mul = 10u128.pow(6),
        "G" => mul = 10u128.pow(9),
        "T" => mul = 10u128.pow(12),
        "P" => mul = 10u128.pow(15),
        "E" => mul = 10u128.pow(18),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            if exp >= 0 {
                mul = 10u128.checked_pow(u32::try_from(exp).ok()?)?;
            } else {
                div10 += exp.unsigned_abs();
            }
        }
        _ => return None,
    }
    let top = mantissa.checked_mul(mul)?;
    let den = 10u128.checked_pow(div10)?;
    let v = top.div_ceil(den);
    u64::try_from(v).ok()
}

/// A pod as the provider sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// The pod's name (the cloud instance id, and Ray's `RAY_CLOUD_INSTANCE_ID`).
    pub name: String,
    /// Head or worker; `None` for pods KubeRay makes that are not Ray nodes.
    pub kind: Option<NodeKind>,
    /// `ray.io/group`.
    pub group: String,
    /// Marked for deletion (`metadata.deletionTimestamp`).
    pub deleting: bool,
    /// The instance, for pods that are Ray nodes and not being deleted.
    pub instance: Option<CloudInstance>,
}

/// Reads a pod: kind from `ray.io/node-type`, type from `ray.io/group`, id = name,
/// running when the Ray container (the first of the spec, matched by name in the
/// statuses; Ray reads the first status, whose order Kubernetes does not promise) runs.
pub fn pod_view(pod: &Pod) -> Option<PodView> {
    let name = pod.metadata.name.clone()?;
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let kind = match labels.get(LABEL_KIND).map(String::as_str) {
        Some("head") => Some(NodeKind::Head),
        Some("worker") => Some(NodeKind::Worker),
        _ => None,
    };
    let group = match kind {
        Some(NodeKind::Head) => HEAD_GROUP.to_string(),
        _ => labels.get(LABEL_GROUP).cloned().unwrap_or_default(),
    };
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let instance = match kind {
        Some(k) if !deleting => {
            let status = pod.status.as_ref();
            let ray_container = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .map(|c| c.name.as_str());
            let statuses = status.and_then(|s| s.container_statuses.as_ref());
            let cs = statuses.and_then(|all| {
                all.iter()
                    .find(|c| Some(c.name.as_str()) == ray_container)
                    .or_else(|| all.first())
            });
            let running = cs
                .and_then(|c| c.state.as_ref())
                .is_some_and(|s| s.running.is_some());
            let phase = status.and_then(|s| s.phase.as_deref());
            let state = if matches!(phase, Some("Failed" | "Succeeded")) {
                CloudInstanceState::Stopping
            } else if running {
                CloudInstanceState::Running
            } else {
                CloudInstanceState::Pending
            };
            Some(CloudInstance {
                cloud_instance_id: name.clone(),
                node_type: group.clone(),
                kind: k,
                request_id: None,
                state,
                private_ip: status.and_then(|s| s.pod_ip.clone()),
                public_ip: None,
                launch_config_hash: None,
                labels: labels.into_iter().collect(),
                zone: None,
            })
        }
        _ => None,
    };
    Some(PodView {
        name,
        kind,
        group,
        deleting,
        instance,
    })
}

/// A worker group of the RayCluster, as scaling reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its index in `spec.workerGroupSpecs` (the JSON patch path).
    pub index: usize,
    /// `groupName`.
    pub name: String,
    /// `replicas` (0 when unset).
    pub replicas: u64,
    /// `minReplicas`.
    pub min_replicas: u64,
    /// `maxReplicas`, when set.
    pub max_replicas: Option<u64>,
    /// `numOfHosts` (pods per replica, 1 by default).
    pub hosts: u64,
    /// `scaleStrategy.workersToDelete`.
    pub to_delete: Vec<String>,
}

/// The worker groups of a RayCluster.
pub fn groups(rc: &Value) -> Vec<Group> {
    let Some(specs) = rc
        .pointer("/spec/workerGroupSpecs")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    specs
        .iter()
        .enumerate()
        .map(|(index, g)| Group {
            index,
            name: g
                .get("groupName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            replicas: g.get("replicas").and_then(Value::as_u64).unwrap_or(0),
            min_replicas: g.get("minReplicas").and_then(Value::as_u64).unwrap_or(0),
            max_replicas: g.get("maxReplicas").and_then(Value::as_u64),
            hosts: g
                .get("numOfHosts")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1),
            to_delete: g
                .pointer("/scaleStrategy/workersToDelete")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_up_exactly() {
        assert_eq!(quantity_ceil("500m"), Some(1));
        assert_eq!(quantity_ceil("2"), Some(2));
        assert_eq!(quantity_ceil("1.5"), Some(2));
        assert_eq!(quantity_ceil("2Gi"), Some(2 << 30));
        assert_eq!(quantity_ceil("0.3k"), Some(300));
        assert_eq!(quantity_ceil("1e3"), Some(1000));
        assert_eq!(quantity_ceil("100M"), Some(100_000_000));
        assert_eq!(quantity_ceil("1500u"), Some(1));
        assert_eq!(quantity_ceil("abc"), None);
        assert_eq!(quantity_ceil("-1"), None);
        assert_eq!(quantity_ceil("1Xi"), None);
        assert_eq!(quantity_ceil("0.000"), Some(0));
        assert_eq!(quantity_ceil(&"9".repeat(60)), None);
    }

    #[test]
    fn a_tpu_slice_is_named_as_ray_names_it() {
        let group = |topology: &str, accelerator: &str| {
            json!({"template": {"spec": {"nodeSelector": {
                TPU_TOPOLOGY: topology, TPU_ACCELERATOR: accelerator}}}})
        };
        let head = |t: &str, a: &str| tpu_head_resource(&group(t, a), "g");
        assert_eq!(
            head("2x2x4", "tpu-v4-podslice").expect("ok").as_deref(),
            Some("TPU-v4-32-head")
        );
        assert_eq!(
            head("2x4", "tpu-v5-lite-podslice").expect("ok").as_deref(),
            Some("TPU-v5litepod-8-head")
        );
        assert_eq!(
            head("4x4", "tpu-v6e-slice").expect("ok").as_deref(),
            Some("TPU-v6e-16-head")
        );
        assert_eq!(
            head("2x2x1", "tpu7x").expect("ok").as_deref(),
            Some("TPU-v7x-8-head")
        );
        assert_eq!(head("2x2", "tpu-v9-new").expect("ok"), None);
        assert_eq!(head("", "tpu-v4-podslice").expect("ok"), None);
        let e = head("2xa", "tpu-v4-podslice")
            .expect_err("refused")
            .to_string();
        assert!(
            e.starts_with("g.template.spec.nodeSelector.cloud.google.com/gke-tpu-topology:"),
            "{e}"
        );
        let huge = format!("{0}x{0}", u64::MAX);
        assert!(head(&huge, "tpu-v4-podslice").is_err());
    }

    #[test]
    fn a_group_priority_is_read_as_rays_int() {
        assert_eq!(priority(&json!(3)), Some(3));
        assert_eq!(priority(&json!(-4)), Some(-4));
        assert_eq!(priority(&json!(2.9)), Some(2));
        assert_eq!(priority(&json!(" 7 ")), Some(7));
        assert_eq!(priority(&json!("high")), None);
        assert_eq!(priority(&json!("1_000")), Some(1000));
        assert_eq!(priority(&json!("_1")), None);
        assert_eq!(priority(&json!(true)), Some(1));
        assert_eq!(priority(&json!(1e300)), None);
        assert_eq!(priority(&json!([1])), None);
        let group = json!({"minReplicas": 0, "maxReplicas": 1, "priority": "high",
            "template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}}});
        let e = node_type(&group, "g", false)
            .expect_err("refused")
            .to_string();
        assert!(e.starts_with("g.priority: "), "{e}");
    }
}
