//! `instances.insert` in the fake (split out of `gce.rs`, behaviour unchanged): the
//! `requestId` replay, the injected throttling and errors, the name and machine-type
//! checks, and the capacity and quota faults.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Map, Value};
use wiremock::Request;

use super::{Inst, Phase, Shared, World, error, lock, new_op, op_json};
use crate::fakes::record::Reply;

fn is_rfc1035(name: &str) -> bool {
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
    if let Some(rid) = query.get("requestId")
        && let Some(op) = w.by_request_id.get(rid).and_then(|n| w.ops.get(n))
    {
        return Reply::new(200).set_body_json(op_json(op, &s.timing, &w.project, &w.zone));
    }
    {
        let mut f = lock(&s.faults);
        if f.throttle_inserts > 0 {
            f.throttle_inserts -= 1;
            return error(429, "rateLimitExceeded", "Rate Limit Exceeded (injected)");
        }
        if !f.insert_errors.is_empty() {
            let (code, reason) = f.insert_errors.remove(0);
            return error(code, &reason, &format!("{reason} (injected)"));
        }
    }
    let body: Map<String, Value> = match req.body_json::<Value>() {
        Ok(Value::Object(m)) => m,
        _ => return error(400, "parseError", "the body is not a JSON object"),
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
    let failure = {
        let mut f = lock(&s.faults);
        let exhausted = match f.capacity.get_mut(&machine) {
            Some(0) => true,
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        };
        if exhausted {
            Some((
                503,
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                format!(
                    "The zone 'projects/{}/zones/{}' does not have enough resources available to fulfill the request. Try a different zone, or try again later.",
                    w.project, w.zone
                ),
            ))
        } else if f.quota.contains(&machine) {
            Some((
                403,
                "QUOTA_EXCEEDED",
                format!("Quota 'CPUS' exceeded. Limit: 24.0 in region {}.", w.zone),
            ))
        } else {
            None
        }
    };
    w.next_id += 1;
    let id = w.next_id;
    let now = Instant::now();
    if failure.is_none() {
        let half = s.timing.boot / 2;
        w.instances.insert(
            name.clone(),
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
    let op = new_op(w, "insert", &name, failure);
    if let Some(rid) = query.get("requestId") {
        w.by_request_id.insert(rid.clone(), op.name.clone());
    }
    Reply::new(200).set_body_json(op_json(&op, &s.timing, &w.project, &w.zone))
}
