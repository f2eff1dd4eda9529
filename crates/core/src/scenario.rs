//! `rayscale plan` scenarios: joining a snapshot into a [`SchedulingRequest`], and the
//! canonical decision JSON (see `docs/src/reference/scenario.md`).

use serde_json::Value;

use crate::CoreError;
use crate::config::ClusterConfig;
use crate::config::schema::{describe, join};
use crate::model::InstanceStatus;
use crate::model::resources::{ResourceMap, to_f64};
pub use crate::scheduler::request::{
    AvailabilityInputs, HEAD_MARKER, InstanceRecord, build_request,
};
use crate::scheduler::{Decision, SchedulingRequest};

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

pub use crate::config::canonical_json::{python_float, python_json};

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
