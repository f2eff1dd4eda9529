//! `instances.insert` in the fake (split out of `gce.rs`, behaviour unchanged): the
//! `requestId` replay, the injected throttling and errors, the name and machine-type
//! checks, and the capacity and quota faults.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Map, Value};
use wiremock::Request;

use super::{Inst, Phase, Shared, World, error, lock, new_op, op_json};
use crate::fakes::record::Reply;

pub(super) fn is_rfc1035(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !name.ends_with('-')
}

fn short(url_or_name: &str) -> &str {
    url_or_name.rsplit('/').next().unwrap_or(url_or_name)
}

pub(super) fn insert(
    w: &mut World,
    s: &Shared,
    req: &Request,
    query: &BTreeMap<String, String>,
) -> Reply {
    let body = match replay_or_body(w, s, req, query) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !is_rfc1035(&name) {
        return error(
            400,
            "invalid",
            &format!(
                "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
            ),
        );
    }
    let machine = body
        .get("machineType")
        .and_then(Value::as_str)
        .map(str::to_string);
    if machine.is_none() && !query.contains_key("sourceInstanceTemplate") {
        return error(
            400,
            "required",
            "Required field 'resource.machineType' not specified",
        );
    }
    if w.instances.contains_key(&name) {
        return error(
            409,
            "alreadyExists",
            &format!(
                "The resource 'projects/{}/zones/{}/instances/{name}' already exists",
                w.project, w.zone
            ),
        );
    }
    let machine = machine.map(|m| short(&m).to_string()).unwrap_or_default();
    *lock(&s.calls.by_machine)
        .entry(machine.clone())
        .or_default() += 1;
    let failure = take_capacity(w, s, &machine, 1, 1).err();
    if failure.is_none() {
        make(w, s, &name, body);
    }
    let op = new_op(w, "insert", &name, failure);
    if let Some(rid) = query.get("requestId") {
        w.by_request_id.insert(rid.clone(), op.name.clone());
    }
    Reply::new(200).set_body_json(op_json(&op, &s.timing, &w.project, &w.zone))
}

/// An insert's body, or the answer it gets first: the operation of a `requestId` seen
/// before, an injected throttle or error, or a body that is not an object.
fn replay_or_body(
    w: &World,
    s: &Shared,
    req: &Request,
    query: &BTreeMap<String, String>,
) -> Result<Map<String, Value>, Reply> {
    if let Some(rid) = query.get("requestId")
        && let Some(op) = w.by_request_id.get(rid).and_then(|n| w.ops.get(n))
    {
        return Err(Reply::new(200).set_body_json(op_json(op, &s.timing, &w.project, &w.zone)));
    }
    {
        let mut f = lock(&s.faults);
        if f.throttle_inserts > 0 {
            f.throttle_inserts -= 1;
            return Err(error(
                429,
                "rateLimitExceeded",
                "Rate Limit Exceeded (injected)",
            ));
        }
        if !f.insert_errors.is_empty() {
            let (code, reason) = f.insert_errors.remove(0);
            return Err(error(code, &reason, &format!("{reason} (injected)")));
        }
    }
    match req.body_json::<Value>() {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(error(400, "parseError", "the body is not a JSON object")),
    }
}

/// An operation's error: HTTP status, code, message.
type Failure = (u16, &'static str, String);

/// How many of `count` instances of `machine` the zone gives (all it has, up to `count`),
/// taken from the capacity fault; fewer than `min` gives none and is the zone's error.
fn take_capacity(
    w: &World,
    s: &Shared,
    machine: &str,
    count: u64,
    min: u64,
) -> Result<u64, Failure> {
    let mut f = lock(&s.faults);
    let give = f
        .capacity
        .get(machine)
        .map_or(count, |left| (*left).min(count));
    if give < min {
        return Err((
            503,
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            format!(
                "The zone 'projects/{}/zones/{}' does not have enough resources available to fulfill the request. Try a different zone, or try again later.",
                w.project, w.zone
            ),
        ));
    }
    if f.quota.contains(machine) {
        return Err((
            403,
            "QUOTA_EXCEEDED",
            format!("Quota 'CPUS' exceeded. Limit: 24.0 in region {}.", w.zone),
        ));
    }
    if let Some(left) = f.capacity.get_mut(machine) {
        *left -= give;
    }
    Ok(give)
}

/// A new instance `name` with `body`, provisioning.
fn make(w: &mut World, s: &Shared, name: &str, body: Map<String, Value>) {
    w.next_id += 1;
    let id = w.next_id;
    let now = Instant::now();
    let half = s.timing.boot / 2;
    w.instances.insert(
        name.to_string(),
        Inst {
            body,
            id,
            phase: Phase::Provisioning,
            next: vec![
                (now + half, Some(Phase::Staging)),
                (now + s.timing.boot, Some(Phase::Running)),
            ],
            fingerprint: id,
        },
    );
}

/// An int64 field of a request body (JSON writes it as a string, or a number).
fn int64(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::String(s) => s.parse().ok(),
        v => v.as_i64(),
    }
}

/// `instances.bulkInsert` (`POST .../instances/bulkInsert`, a
/// `BulkInsertInstanceResource`): `count` instances named by the keys of
/// `perInstanceProperties` (`namePattern` is not supported here), from
/// `instanceProperties` (whose `machineType` is a name, not a URL) or a
/// `sourceInstanceTemplate`; `minCount` (default `count`): "if minCount instances cannot
/// be created, then no instances will be created". Answers one zone `Operation`
/// (`bulkInsert`), which ends with the zone's error when fewer than `minCount` fit.
pub(super) fn bulk_insert(
    w: &mut World,
    s: &Shared,
    req: &Request,
    query: &BTreeMap<String, String>,
) -> Reply {
    let body = match replay_or_body(w, s, req, query) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(count) = int64(body.get("count")).filter(|c| *c >= 1) else {
        return error(400, "invalid", "Invalid value for field 'resource.count'");
    };
    let min = int64(body.get("minCount")).unwrap_or(count);
    if !(1..=count).contains(&min) {
        return error(
            400,
            "invalid",
            &format!("Invalid value for field 'resource.minCount': '{min}'"),
        );
    }
    if body.contains_key("namePattern") {
        return error(400, "invalid", "namePattern is not supported by this fake");
    }
    let names: Vec<String> = body
        .get("perInstanceProperties")
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if names.len() as i64 != count {
        return error(
            400,
            "invalid",
            &format!(
                "Invalid value for field 'resource.perInstanceProperties': {} names for a count of {count}",
                names.len()
            ),
        );
    }
    let props: Map<String, Value> = match body.get("instanceProperties") {
        Some(Value::Object(m)) => m.clone(),
        None if body.contains_key("sourceInstanceTemplate") => Map::new(),
        _ => {
            return error(
                400,
                "required",
                "Required field 'resource.instanceProperties' not specified",
            );
        }
    };
    let machine = props.get("machineType").and_then(Value::as_str);
    if machine.is_some_and(|m| m.contains('/')) {
        return error(
            400,
            "invalid",
            "Invalid value for field 'resource.instanceProperties.machineType': a name is expected, not a URL",
        );
    }
    if machine.is_none() && !body.contains_key("sourceInstanceTemplate") {
        return error(
            400,
            "required",
            "Required field 'resource.instanceProperties.machineType' not specified",
        );
    }
    let machine = machine.unwrap_or_default().to_string();
    for n in &names {
        if !is_rfc1035(n) {
            return error(
                400,
                "invalid",
                &format!("Invalid value for field 'resource.perInstanceProperties': '{n}'"),
            );
        }
        if w.instances.contains_key(n) {
            return error(
                409,
                "alreadyExists",
                &format!(
                    "The resource 'projects/{}/zones/{}/instances/{n}' already exists",
                    w.project, w.zone
                ),
            );
        }
    }
    *lock(&s.calls.by_machine)
        .entry(machine.clone())
        .or_default() += names.len() as u64;
    let failure = match take_capacity(w, s, &machine, names.len() as u64, min as u64) {
        Ok(give) => {
            for n in names.iter().take(give as usize) {
                let mut b = props.clone();
                b.insert("name".into(), Value::String(n.clone()));
                if !machine.is_empty() {
                    b.insert(
                        "machineType".into(),
                        Value::String(format!("zones/{}/machineTypes/{machine}", w.zone)),
                    );
                }
                make(w, s, n, b);
            }
            None
        }
        Err(f) => Some(f),
    };
    let op = new_op(w, "bulkInsert", &names[0], failure);
    if let Some(rid) = query.get("requestId") {
        w.by_request_id.insert(rid.clone(), op.name.clone());
    }
    Reply::new(200).set_body_json(op_json(&op, &s.timing, &w.project, &w.zone))
}
