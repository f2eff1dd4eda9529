//! The ARM fake's virtual-machine calls (learn.microsoft.com/rest/api/compute/
//! virtual-machines, api-version 2024-07-01): create or update, update (tags), delete,
//! deallocate, start and list, with the operations they start.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};
use wiremock::Request;

use super::super::record::Reply;
use super::body::check_body;
use super::json::vm_json;
use super::{Change, Op, Shared, Vm, World, error, lock, not_found, throttled};

/// Starts an operation; the headers of the answer that names it.
fn new_op(w: &mut World, error: Option<(String, String)>, base: &str) -> (String, String) {
    w.next += 1;
    let id = format!("{:08x}-0000-4000-8000-{:012x}", w.next, w.next);
    w.ops.insert(
        id.clone(),
        Op {
            start: Instant::now(),
            error,
        },
    );
    let url = format!(
        "{base}/subscriptions/{}/providers/Microsoft.Compute/locations/{}/operations/{id}?api-version=2024-07-01",
        w.sub, w.location
    );
    (id, url)
}

fn accepted(status: u16, op_url: &str, body: Option<Value>) -> Reply {
    let mut r = Reply::new(status)
        .insert_header("Azure-AsyncOperation", op_url)
        .insert_header("Retry-After", "10");
    if status == 202 {
        r = r.insert_header("Location", format!("{op_url}&monitor=true").as_str());
    }
    match body {
        Some(b) => r.set_body_json(b),
        None => r,
    }
}

pub(super) fn put(w: &mut World, s: &Shared, req: &Request, name: &str, base: &str) -> Reply {
    {
        let mut f = lock(&s.faults);
        if f.throttle_puts > 0 {
            f.throttle_puts -= 1;
            // As Compute throttles ("Troubleshooting API throttling errors"): 429 with
            // the top-level code `OperationNotAllowed` and the details naming the limit.
            return throttled();
        }
        if !f.put_errors.is_empty() {
            let (status, code) = f.put_errors.remove(0);
            return error(status, &code, &format!("{code} (injected)"), None);
        }
    }
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if !valid_name {
        return error(
            400,
            "InvalidParameter",
            &format!("The VM name '{name}' is invalid."),
            Some("vmName"),
        );
    }
    if let Some(v) = w.vms.get(name) {
        // The PUT of a VM that exists: an update; rayscale's replay changes nothing.
        let b = vm_json(w, name, v);
        return Reply::new(200).set_body_json(b);
    }
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                400,
                "InvalidRequestFormat",
                &format!("The body is not JSON: {e}"),
                None,
            );
        }
    };
    if let Err((target, message)) = check_body(&body, &w.location) {
        return error(400, "InvalidParameter", &message, Some(&target));
    }
    let size = body["properties"]["hardwareProfile"]["vmSize"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let zonal = body
        .get("zones")
        .and_then(Value::as_array)
        .is_some_and(|z| !z.is_empty());
    let alloc_error = {
        let mut f = lock(&s.faults);
        if f.sku_not_available.contains(&size) {
            return error(
                409,
                "SkuNotAvailable",
                &format!(
                    "The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {size}' is currently not available in location '{}'. Please try another size or deploy to a different location or different zone. See https://aka.ms/azureskunotavailable for details.",
                    w.location
                ),
                None,
            );
        }
        if f.quota.contains(&size) {
            return error(
                409,
                "OperationNotAllowed",
                &format!(
                    "Operation could not be completed as it results in exceeding approved {size} Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: {}, Current Limit: 0.",
                    w.location
                ),
                None,
            );
        }
        match f.capacity.get_mut(&size) {
            Some(0) => Some(if zonal {
                ("ZonalAllocationFailed".to_string(), "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone.".to_string())
            } else {
                ("AllocationFailed".to_string(), "Allocation failed. We do not have sufficient capacity for the requested VM size in this region.".to_string())
            }),
            Some(n) => {
                *n -= 1;
                None
            }
            None => None,
        }
    };
    *lock(&s.calls.by_size).entry(size).or_insert(0) += 1;
    let now = Instant::now();
    let t = s.timing;
    let failed = alloc_error.is_some();
    let (_, url) = new_op(w, alloc_error, base);
    w.next += 1;
    let vm_id = format!("{:08x}-1111-4000-8000-{:012x}", w.next, w.next);
    let next = if failed {
        vec![(now + t.operation, Change::Prov("Failed"))]
    } else {
        let mut n = vec![
            (now + t.operation.min(t.boot), Change::Power("starting")),
            (now + t.operation, Change::Prov("Succeeded")),
            (now + t.boot, Change::Power("running")),
        ];
        n.sort_by_key(|(at, _)| *at);
        n
    };
    let v = Vm {
        body: body.as_object().cloned().unwrap_or_default(),
        vm_id,
        prov: "Creating".into(),
        power: None,
        next,
    };
    let b = vm_json(w, name, &v);
    w.vms.insert(name.to_string(), v);
    accepted(201, &url, Some(b))
}

pub(super) fn patch(w: &mut World, _s: &Shared, req: &Request, name: &str, base: &str) -> Reply {
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                400,
                "InvalidRequestFormat",
                &format!("The body is not JSON: {e}"),
                None,
            );
        }
    };
    if !w.vms.contains_key(name) {
        return not_found(w, name);
    }
    let (_, url) = new_op(w, None, base);
    let Some(v) = w.vms.get_mut(name) else {
        return not_found(w, name);
    };
    if let Some(t) = body.get("tags") {
        v.body.insert("tags".into(), t.clone());
    }
    let b = {
        let v = v.clone();
        vm_json(w, name, &v)
    };
    accepted(200, &url, Some(b))
}

pub(super) fn act(w: &mut World, s: &Shared, name: &str, action: &str, base: &str) -> Reply {
    if !w.vms.contains_key(name) {
        return if action == "delete" {
            Reply::new(204)
        } else {
            not_found(w, name)
        };
    }
    let t = s.timing;
    let now = Instant::now();
    let (_, url) = new_op(w, None, base);
    let Some(v) = w.vms.get_mut(name) else {
        return not_found(w, name);
    };
    match action {
        "delete" => {
            v.prov = "Deleting".into();
            v.next = vec![(now + t.operation, Change::Gone)];
        }
        "deallocate" => {
            v.prov = "Updating".into();
            v.power = Some("deallocating");
            v.next = vec![
                (now + t.operation, Change::Power("deallocated")),
                (now + t.operation, Change::Prov("Succeeded")),
            ];
        }
        _ => {
            v.prov = "Updating".into();
            v.power = Some("starting");
            let mut n = vec![
                (now + t.operation, Change::Prov("Succeeded")),
                (now + t.boot, Change::Power("running")),
            ];
            n.sort_by_key(|(at, _)| *at);
            v.next = n;
        }
    }
    accepted(202, &url, None)
}

pub(super) fn list(w: &World, query: &BTreeMap<String, String>, base: &str, prefix: &str) -> Reply {
    let from: usize = query
        .get("$skiptoken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let all: Vec<(&String, &Vm)> = w.vms.iter().collect();
    let page: Vec<Value> = all
        .iter()
        .skip(from)
        .take(w.page_size)
        .map(|(n, v)| vm_json(w, n, v))
        .collect();
    let mut out = json!({ "value": page });
    if from + w.page_size < all.len() {
        out["nextLink"] = json!(format!(
            "{base}{prefix}?api-version=2024-07-01&$skiptoken={}",
            from + w.page_size
        ));
    }
    Reply::new(200).set_body_json(out)
}
