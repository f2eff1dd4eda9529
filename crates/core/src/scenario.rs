//! `rayscale plan` scenarios: joining a snapshot into a [`SchedulingRequest`], and the
//! canonical decision JSON (see `shared/spec/plan-scenario.md`).

use std::fmt::Write as _;

use serde_json::Value;

use crate::CoreError;
use crate::config::ClusterConfig;
use crate::config::schema::{describe, join};
use crate::model::resources::{ResourceMap, to_f64};
use crate::model::{ClusterResourceState, InstanceStatus, NodeStatus};
use crate::scheduler::{Decision, InstanceInput, RayNodeInput, SchedulingRequest};

/// The resource that marks Ray's head node.
pub const HEAD_MARKER: &str = "node:__internal_head__";

/// One entry of a scenario's `instances` list.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    /// Instance manager id.
    pub instance_id: String,
    /// Cloud instance id, if allocated.
    pub cloud_instance_id: Option<String>,
    /// Node type.
    pub node_type: String,
    /// Status.
    pub status: InstanceStatus,
    /// Launch config hash, if known.
    pub launch_config_hash: Option<String>,
}

/// Parses the `instances` list of a scenario.
pub fn parse_instances(v: Option<&Value>, path: &str) -> Result<Vec<InstanceRecord>, CoreError> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    if v.is_null() {
        return Ok(Vec::new());
    }
    let arr = v
        .as_array()
        .ok_or_else(|| CoreError::invalid(path, format!("expected a list, got {}", describe(v))))?;
    let mut out = Vec::with_capacity(arr.len());
    for (i, item) in arr.iter().enumerate() {
        let ipath = format!("{path}[{i}]");
        let obj = item.as_object().ok_or_else(|| {
            CoreError::invalid(
                &ipath,
                format!("expected a mapping, got {}", describe(item)),
            )
        })?;
        for k in obj.keys() {
            if !matches!(
                k.as_str(),
                "instance_id" | "cloud_instance_id" | "node_type" | "status" | "launch_config_hash"
            ) {
                return Err(CoreError::invalid(join(&ipath, k), "unknown key"));
            }
        }
        let string = |k: &str, required: bool| -> Result<Option<String>, CoreError> {
            match obj.get(k) {
                None | Some(Value::Null) if !required => Ok(None),
                None | Some(Value::Null) => Err(CoreError::invalid(
                    join(&ipath, k),
                    "required key is missing",
                )),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(CoreError::invalid(
                    join(&ipath, k),
                    format!("expected a string, got {}", describe(other)),
                )),
            }
        };
        let instance_id = string("instance_id", true)?.unwrap_or_default();
        let node_type = string("node_type", true)?.unwrap_or_default();
        let status_name = string("status", true)?.unwrap_or_default();
        let status = InstanceStatus::from_name(&status_name)
            .filter(|s| *s != InstanceStatus::Unknown)
            .ok_or_else(|| {
                CoreError::invalid(
                    join(&ipath, "status"),
                    format!("unknown instance status {status_name:?}"),
                )
            })?;
        out.push(InstanceRecord {
            instance_id,
            cloud_instance_id: string("cloud_instance_id", false)?,
            node_type,
            status,
            launch_config_hash: string("launch_config_hash", false)?,
        });
    }
    Ok(out)
}

fn merged_labels(a: &[(String, String)], b: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = a.to_vec();
    for (k, v) in b {
        match out.iter_mut().find(|(n, _)| n == k) {
            Some(e) => e.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}

/// Joins config, GCS state and instance records into a scheduling request, following the
/// spec's joining and ordering rules. `state_path` and `instances_path` prefix errors.
pub fn build_request(
    config: &ClusterConfig,
    state: &ClusterResourceState,
    instances: &[InstanceRecord],
    state_path: &str,
    instances_path: &str,
) -> Result<SchedulingRequest, CoreError> {
    if state.cluster_resource_constraints.len() > 1 {
        return Err(CoreError::invalid(
            join(state_path, "cluster_resource_constraints"),
            format!(
                "at most one constraint is supported, got {}",
                state.cluster_resource_constraints.len()
            ),
        ));
    }
    let known = |t: &str| config.node_type(t).is_some();
    let head_idx = state
        .node_states
        .iter()
        .position(|n| n.total_resources.get(HEAD_MARKER).is_some())
        .or_else(|| {
            config.head_node_type.as_ref().and_then(|h| {
                state
                    .node_states
                    .iter()
                    .position(|n| &n.ray_node_type_name == h)
            })
        });

    let mut joined = vec![false; instances.len()];
    // Instances by the id a node state names them with, in file order.
    let mut by_id: std::collections::HashMap<&str, std::collections::VecDeque<usize>> =
        std::collections::HashMap::new();
    for (ii, inst) in instances.iter().enumerate() {
        let id = inst
            .cloud_instance_id
            .as_deref()
            .unwrap_or(&inst.instance_id);
        by_id.entry(id).or_default().push_back(ii);
    }
    let mut out = Vec::new();
    for (ni, ns) in state.node_states.iter().enumerate() {
        let target = match ns.status.unwrap_or(NodeStatus::Running) {
            NodeStatus::Running | NodeStatus::Idle | NodeStatus::Unspecified => {
                InstanceStatus::RayRunning
            }
            NodeStatus::Draining => InstanceStatus::RayStopping,
            NodeStatus::Dead => InstanceStatus::RayStopped,
        };
        let found = by_id
            .get_mut(ns.instance_id.as_str())
            .and_then(|q| q.pop_front());
        let hex = ns.node_id_hex();
        let (instance_id, node_type, status, hash) = match found {
            Some(ii) => {
                joined[ii] = true;
                let inst = &instances[ii];
                let status = inst.status.advanced_to(target);
                if status.can_reach_ray_running() && !known(&inst.node_type) {
                    return Err(CoreError::invalid(
                        format!("{instances_path}[{ii}].node_type"),
                        format!("unknown node type {:?}", inst.node_type),
                    ));
                }
                (
                    inst.instance_id.clone(),
                    inst.node_type.clone(),
                    status,
                    inst.launch_config_hash.clone().unwrap_or_default(),
                )
            }
            None => {
                let t = &ns.ray_node_type_name;
                if target == InstanceStatus::RayRunning && !known(t) {
                    return Err(CoreError::invalid(
                        join(
                            &format!("{state_path}.node_states[{ni}]"),
                            "ray_node_type_name",
                        ),
                        format!("unknown node type {t:?}"),
                    ));
                }
                let id = if ns.instance_id.is_empty() {
                    hex.clone()
                } else {
                    ns.instance_id.clone()
                };
                let hash = config
                    .node_type(t)
                    .map(|c| c.launch_config_hash.clone())
                    .unwrap_or_default();
                (id, t.clone(), target, hash)
            }
        };
        out.push(InstanceInput {
            instance_id,
            node_type,
            status,
            is_head: head_idx == Some(ni),
            launch_config_hash: hash,
            ray_node: Some(RayNodeInput {
                node_id_hex: hex,
                total: ns.total_resources.clone(),
                available: ns.available_resources.clone(),
                labels: merged_labels(&ns.labels, &ns.dynamic_labels),
                idle_duration_ms: ns.idle_duration_ms,
            }),
        });
    }
    for (ii, inst) in instances.iter().enumerate() {
        if joined[ii] {
            continue;
        }
        if inst.status.can_reach_ray_running() && !known(&inst.node_type) {
            return Err(CoreError::invalid(
                format!("{instances_path}[{ii}].node_type"),
                format!("unknown node type {:?}", inst.node_type),
            ));
        }
        out.push(InstanceInput {
            instance_id: inst.instance_id.clone(),
            node_type: inst.node_type.clone(),
            status: inst.status,
            is_head: false,
            launch_config_hash: inst.launch_config_hash.clone().unwrap_or_default(),
            ray_node: None,
        });
    }
    Ok(SchedulingRequest {
        node_types: config.node_types.clone(),
        head_node_type: config.head_node_type.clone(),
        max_num_nodes: config.max_workers.map(|m| m + 1),
        idle_timeout_s: Some(config.idle_timeout_s()),
        disable_launch_config_check: config.disable_launch_config_check,
        resource_requests: state.pending_resource_requests.clone(),
        gang_requests: state.pending_gang_resource_requests.clone(),
        cluster_constraints: state.cluster_resource_constraints.clone(),
        instances: out,
        ..Default::default()
    })
}

/// The availability inputs of a scenario (see `plan-scenario.md`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AvailabilityInputs {
    /// Ray's `cloud_resource_availabilities`.
    pub cloud_resource_availabilities: Vec<(String, f64)>,
    /// Ray's `recoverable_resource_availabilities`.
    pub recoverable_resource_availabilities: Vec<(String, f64)>,
    /// rayscale's `unavailable_node_types`.
    pub unavailable_node_types: Vec<String>,
}

impl AvailabilityInputs {
    /// Parses the three optional keys (each value an absent/null key, or: a mapping of node
    /// type to a number in [0, 1]; a list of node types of the config).
    pub fn parse(
        cloud: Option<&Value>,
        recoverable: Option<&Value>,
        unavailable: Option<&Value>,
        config: &ClusterConfig,
    ) -> Result<Self, CoreError> {
        Ok(AvailabilityInputs {
            cloud_resource_availabilities: parse_scores(cloud, "cloud_resource_availabilities")?,
            recoverable_resource_availabilities: parse_scores(
                recoverable,
                "recoverable_resource_availabilities",
            )?,
            unavailable_node_types: parse_type_list(unavailable, "unavailable_node_types", config)?,
        })
    }

    /// Puts the inputs into `req`.
    pub fn apply(self, req: &mut SchedulingRequest) {
        req.cloud_resource_availabilities = self.cloud_resource_availabilities;
        req.recoverable_resource_availabilities = self.recoverable_resource_availabilities;
        req.unavailable_node_types = self.unavailable_node_types;
    }
}

fn parse_scores(v: Option<&Value>, path: &str) -> Result<Vec<(String, f64)>, CoreError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let obj = v.as_object().ok_or_else(|| {
        CoreError::invalid(path, format!("expected a mapping, got {}", describe(v)))
    })?;
    let mut out = Vec::with_capacity(obj.len());
    for (k, x) in obj {
        let f = x.as_f64().ok_or_else(|| {
            CoreError::invalid(
                join(path, k),
                format!("expected a number, got {}", describe(x)),
            )
        })?;
        if !(0.0..=1.0).contains(&f) {
            return Err(CoreError::invalid(
                join(path, k),
                format!("expected a number in [0, 1], got {f}"),
            ));
        }
        out.push((k.clone(), f));
    }
    Ok(out)
}

fn parse_type_list(
    v: Option<&Value>,
    path: &str,
    config: &ClusterConfig,
) -> Result<Vec<String>, CoreError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let arr = v
        .as_array()
        .ok_or_else(|| CoreError::invalid(path, format!("expected a list, got {}", describe(v))))?;
    let mut out = Vec::with_capacity(arr.len());
    for (i, x) in arr.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = x.as_str().ok_or_else(|| {
            CoreError::invalid(&p, format!("expected a string, got {}", describe(x)))
        })?;
        if config.node_type(name).is_none() {
            return Err(CoreError::invalid(
                p,
                format!("unknown node type {name:?} (not in available_node_types)"),
            ));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

// ---------------------------------------------------------------------- canonical JSON

/// Writes `f` as Python's `repr(float)` does (shortest round trip; exponent form below
/// 1e-4 and from 1e16).
pub fn python_float(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if f == 0.0 {
        out.push_str(if f.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    let sci = format!("{f:e}"); // e.g. "-1.25e-7", shortest digits
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.push_str(&"0".repeat(int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

fn python_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7f => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes `v` as Python's `json.dumps(v, sort_keys=True, separators=(",", ":"))` does.
pub fn python_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                python_float(n.as_f64().unwrap_or(0.0), out);
            }
        }
        Value::String(s) => python_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                python_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                python_string(k, out);
                out.push(':');
                python_json(&m[k.as_str()], out);
            }
            out.push('}');
        }
    }
}

/// A canonical number: integral values as integers, others as floats.
fn number(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

fn resources_json(m: &ResourceMap) -> Value {
    let mut o = serde_json::Map::new();
    for (k, v) in m.iter() {
        o.insert(k.to_string(), number(to_f64(v)));
    }
    Value::Object(o)
}

fn canonical_string(v: &Value) -> String {
    let mut s = String::new();
    python_json(v, &mut s);
    s
}

fn sort_canonical(items: &mut [Value]) {
    items.sort_by_cached_key(canonical_string);
}

/// The decision as the spec's canonical JSON text.
pub fn decision_json(d: &Decision, req: &SchedulingRequest) -> String {
    let mut launch = serde_json::Map::new();
    for (t, n) in &d.launch {
        if *n > 0 {
            launch.insert(t.clone(), Value::from(*n));
        }
    }
    let mut terminate: Vec<&crate::scheduler::Termination> = d.terminate.iter().collect();
    terminate.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let terminate: Vec<Value> = terminate
        .into_iter()
        .map(|t| {
            serde_json::json!({
                "instance_id": t.instance_id,
                "ray_node_id": t.ray_node_id,
                "node_type": t.node_type,
                "cause": t.cause.name(),
            })
        })
        .collect();
    // Infeasible requests grouped by resources only.
    let mut grouped: Vec<(String, Value, u64)> = Vec::new();
    for (r, n) in &d.infeasible_requests {
        let res = resources_json(&r.resources);
        let key = canonical_string(&res);
        match grouped.iter_mut().find(|(k, _, _)| *k == key) {
            Some(e) => e.2 += n,
            None => grouped.push((key, res, *n)),
        }
    }
    let mut infeasible: Vec<Value> = grouped
        .into_iter()
        .map(|(_, res, n)| serde_json::json!({"resources": res, "count": n}))
        .collect();
    sort_canonical(&mut infeasible);
    let mut gangs: Vec<Value> = d
        .infeasible_gang_requests
        .iter()
        .map(|&i| {
            let g = &req.gang_requests[i];
            serde_json::json!({
                "details": g.details,
                "bundles": g.requests.iter().map(|r| resources_json(&r.resources)).collect::<Vec<_>>(),
            })
        })
        .collect();
    sort_canonical(&mut gangs);
    let mut constraints: Vec<Value> = Vec::new();
    for &i in &d.infeasible_constraints {
        for rc in &req.cluster_constraints[i].resource_requests {
            constraints.push(serde_json::json!({
                "resources": resources_json(&rc.request.resources),
                "count": rc.count,
            }));
        }
    }
    sort_canonical(&mut constraints);
    let out = serde_json::json!({
        "launch": launch,
        "terminate": terminate,
        "infeasible_requests": infeasible,
        "infeasible_gang_requests": gangs,
        "infeasible_constraints": constraints,
    });
    canonical_string(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr() {
        let cases = [
            (0.5, "0.5"),
            (1.0, "1.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e16, "1.5e+16"),
            (1e16, "1e+16"),
            (123456.789, "123456.789"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
        ];
        for (f, want) in cases {
            let mut s = String::new();
            python_float(f, &mut s);
            assert_eq!(s, want, "{f}");
        }
    }

    #[test]
    fn python_json_sorts_and_escapes() {
        let v: Value = serde_json::json!({"b": [1, 2.5], "a": "é\n", "c": null});
        let mut s = String::new();
        python_json(&v, &mut s);
        assert_eq!(s, r#"{"a":"\u00e9\n","b":[1,2.5],"c":null}"#);
    }
}
