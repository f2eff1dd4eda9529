//! The Cloud TPU API of [`super::GceFake`] (v2alpha1, the version Ray's GCP provider
//! calls), on the same loopback server (its paths, `/v2alpha1/...`, meet none of
//! Compute's). It follows Google's public REST reference
//! (cloud.google.com/tpu/docs/reference/rest/v2alpha1/projects.locations.nodes and the
//! API's discovery document, tpu.googleapis.com/$discovery/rest?version=v2alpha1):
//!
//! - `nodes.create` — `POST /v2alpha1/projects/{p}/locations/{zone}/nodes?nodeId=&requestId=`
//!   with a `Node` body; answers a long-running `Operation` (`name`
//!   `projects/{p}/locations/{zone}/operations/operation-{n}`, `done` false). A
//!   `requestId` seen before answers the same operation; a `nodeId` in use answers 409
//!   `ALREADY_EXISTS`; a missing or malformed `nodeId`, a field `Node` does not have, an
//!   output-only field, both or neither of `acceleratorType` / `acceleratorConfig`, no
//!   `runtimeVersion`, or `metadata`/`labels` values that are not strings answer 400
//!   `INVALID_ARGUMENT` (the JSON mapping of proto3 refuses unknown names).
//! - `nodes.list` — `GET .../nodes?pageSize=&pageToken=`: `{nodes, nextPageToken}` (no
//!   filter: the API has none).
//! - `nodes.get` / `nodes.delete` — `GET`/`DELETE .../nodes/{node}` (404 `NOT_FOUND`).
//! - `operations.get` — `GET /v2alpha1/projects/{p}/locations/{zone}/operations/{op}`:
//!   `done` once the operation's time is up, then with `error` (`google.rpc.Status`:
//!   `code` 8 `RESOURCE_EXHAUSTED` for a stockout) or `response` (the node).
//!
//! A node is `CREATING`, then `READY` with its `networkEndpoints` (one per host, worker
//! 0 first: a single-host slice has one, a `v4-16` two; hosts per slice from Google's
//! "TPU versions" pages: 4 chips per host, but up to 8 on v5e/v6e slices of at most 8
//! chips; 2 TensorCores per chip before v5e, 1 on v5e/v6e) after
//! [`super::Timing::boot`]; deleted, `DELETING` then gone. While a node is `READY`, the
//! Compute Engine VMs behind it exist among the instances (`t1v-n-<hex>-w-<worker>`,
//! the node's labels and `tpu_cores`), as Cloud TPU makes one per host. Errors are `{"error": {"code", "message", "status"}}` (AIP-193, no `errors[]`
//! for this API). Faults: stockouts by accelerator type, throttled creates (429
//! `RESOURCE_EXHAUSTED`), preemption (`PREEMPTED`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use wiremock::Request;

use super::record::Reply;
use super::{Inst, Phase, Timing, World};

/// The label Cloud TPU puts on the Compute Engine VM behind a TPU node.
pub const TPU_VM_LABEL: &str = "tpu_cores";

/// Writable fields of the v2alpha1 `Node`.
const WRITABLE: &[&str] = &[
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

/// Output-only fields of the v2alpha1 `Node`.
const OUTPUT_ONLY: &[&str] = &[
    "apiVersion",
    "createTime",
    "healthDescription",
    "id",
    "multisliceNode",
    "name",
    "networkEndpoints",
    "queuedResource",
    "state",
    "symptoms",
    "upcomingMaintenance",
];

/// The TPU API's state and faults.
#[derive(Debug, Default)]
pub struct TpuApi {
    nodes: BTreeMap<String, Node>,
    ops: BTreeMap<String, TpuOp>,
    by_request_id: BTreeMap<String, String>,
    /// Nodes each accelerator type may still get; a create beyond ends its operation with
    /// a stockout (code 8) and no node. Types not named are unlimited.
    pub capacity: BTreeMap<String, u64>,
    /// Accelerator types whose creates end with a quota error (code 8, "Quota limit").
    pub quota: BTreeSet<String>,
    /// The next this-many creates answer 429 `RESOURCE_EXHAUSTED`.
    pub throttle_creates: u32,
    /// The next creates answer these (HTTP status, canonical status), in order.
    pub create_errors: Vec<(u16, &'static str)>,
    /// Calls answered, by method (`nodes.create`, ...).
    pub calls: BTreeMap<&'static str, u64>,
    /// Node names ever created (replays of a `requestId` excluded).
    pub created: BTreeSet<String>,
}

#[derive(Debug, Clone)]
struct Node {
    body: Map<String, Value>,
    state: &'static str,
    /// When the next state begins, and which (`None`: gone).
    next: Option<(Instant, Option<&'static str>)>,
    /// One private address per host, worker 0 first.
    ips: Vec<String>,
}

#[derive(Debug, Clone)]
struct TpuOp {
    node: String,
    done_at: Instant,
    /// (code, message) of a failed operation.
    error: Option<(i64, String)>,
}

impl TpuApi {
    /// TPU nodes that exist now, by short name, with their state.
    pub fn nodes(&self) -> BTreeMap<String, String> {
        self.nodes
            .iter()
            .map(|(n, node)| (n.clone(), node.state.to_string()))
            .collect()
    }

    /// The stored body of node `name` (what `create` was sent, with Ray's and rayscale's
    /// labels), if it exists.
    pub fn body(&self, name: &str) -> Option<Value> {
        self.nodes.get(name).map(|n| Value::Object(n.body.clone()))
    }

    /// Preempts node `name` (a Spot or preemptible TPU taken back): `PREEMPTED`, and it
    /// stays until deleted.
    pub fn preempt(&mut self, name: &str) {
        if let Some(n) = self.nodes.get_mut(name) {
            n.state = "PREEMPTED";
            n.next = None;
        }
    }

    /// Running (`READY`) nodes whose labels hold `label`, with their `startup-script`
    /// metadata and their hosts' private addresses, worker 0 first (the boot simulator's
    /// view: every host runs the script).
    pub fn ready_with_startup_script(
        &self,
        label: (&str, &str),
    ) -> Vec<(String, String, Vec<String>)> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.state == "READY")
            .filter(|(_, n)| {
                n.body
                    .get("labels")
                    .and_then(|l| l.get(label.0))
                    .and_then(Value::as_str)
                    == Some(label.1)
            })
            .map(|(name, n)| {
                let script = n
                    .body
                    .get("metadata")
                    .and_then(|m| m.get("startup-script"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                (name.clone(), script, n.ips.clone())
            })
            .collect()
    }
}

/// Applies the state changes that are due.
pub fn advance(api: &mut TpuApi) {
    let now = Instant::now();
    let mut gone = Vec::new();
    for (name, n) in api.nodes.iter_mut() {
        if let Some((at, next)) = n.next
            && at <= now
        {
            match next {
                Some(s) => {
                    n.state = s;
                    n.next = None;
                }
                None => gone.push(name.clone()),
            }
        }
    }
    for n in gone {
        api.nodes.remove(&n);
    }
}

fn error(code: u16, status: &str, message: &str) -> Reply {
    Reply::new(code).set_body_json(json!({
        "error": {"code": code, "message": message, "status": status}
    }))
}

fn bad(message: &str) -> Reply {
    error(400, "INVALID_ARGUMENT", message)
}

/// The answer to a TPU API call, or `None` for a path of another API.
pub fn reply(w: &mut World, req: &Request, timing: &Timing) -> Option<Reply> {
    let path = req.url.path().to_string();
    let rest = path.strip_prefix("/v2alpha1/")?;
    let parent = format!("projects/{}/locations/{}", w.project, w.zone);
    let Some(tail) = rest.strip_prefix(&format!("{parent}/")) else {
        return Some(error(
            404,
            "NOT_FOUND",
            &format!("Resource '{rest}' was not found (project or location)"),
        ));
    };
    advance(&mut w.tpu);
    let query: BTreeMap<String, String> = req.url.query_pairs().into_owned().collect();
    let segs: Vec<&str> = tail.split('/').collect();
    let count = |w: &mut World, m: &'static str| *w.tpu.calls.entry(m).or_default() += 1;
    Some(match (req.method.as_str(), segs.as_slice()) {
        ("POST", ["nodes"]) => {
            count(w, "nodes.create");
            create(w, req, &query, &parent, timing)
        }
        ("GET", ["nodes"]) => {
            count(w, "nodes.list");
            list(w, &query, &parent)
        }
        ("GET", ["nodes", name]) => {
            count(w, "nodes.get");
            match w.tpu.nodes.get(*name) {
                Some(n) => Reply::new(200).set_body_json(node_json(name, n, &parent)),
                None => not_found(&parent, name),
            }
        }
        ("DELETE", ["nodes", name]) => {
            count(w, "nodes.delete");
            let Some(n) = w.tpu.nodes.get_mut(*name) else {
                return Some(not_found(&parent, name));
            };
            n.state = "DELETING";
            n.next = Some((Instant::now() + timing.operation, None));
            let op = new_op(w, name, timing.operation, None);
            Reply::new(200).set_body_json(op_json(&w.tpu, &op, &parent))
        }
        ("GET", ["operations", op]) => {
            count(w, "operations.get");
            if w.tpu.ops.contains_key(*op) {
                Reply::new(200).set_body_json(op_json(&w.tpu, op, &parent))
            } else {
                error(
                    404,
                    "NOT_FOUND",
                    &format!("Operation '{parent}/operations/{op}' was not found"),
                )
            }
        }
        (m, _) => error(404, "NOT_FOUND", &format!("no such method: {m} {path}")),
    })
}

fn not_found(parent: &str, name: &str) -> Reply {
    error(
        404,
        "NOT_FOUND",
        &format!("Resource '{parent}/nodes/{name}' was not found"),
    )
}

fn create(
    w: &mut World,
    req: &Request,
    query: &BTreeMap<String, String>,
    parent: &str,
    timing: &Timing,
) -> Reply {
    if let Some(r) = query.get("requestId")
        && let Some(op) = w.tpu.by_request_id.get(r)
    {
        let op = op.clone();
        return Reply::new(200).set_body_json(op_json(&w.tpu, &op, parent));
    }
    if !w.tpu.create_errors.is_empty() {
        let (code, status) = w.tpu.create_errors.remove(0);
        return error(code, status, &format!("{status} (injected)"));
    }
    if w.tpu.throttle_creates > 0 {
        w.tpu.throttle_creates -= 1;
        return error(
            429,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded for quota metric 'Node create requests' (injected)",
        );
    }
    let Some(name) = query.get("nodeId").cloned() else {
        return bad("nodeId is required");
    };
    if !super::insert::is_rfc1035(&name) {
        return bad(&format!("Invalid value for field 'nodeId': '{name}'"));
    }
    let Ok(Value::Object(body)) = req.body_json::<Value>() else {
        return bad("Invalid JSON payload received: not a Node");
    };
    for k in body.keys() {
        if OUTPUT_ONLY.contains(&k.as_str()) {
            return bad(&format!(
                "Invalid JSON payload received. '{k}' is output only"
            ));
        }
        if !WRITABLE.contains(&k.as_str()) {
            return bad(&format!(
                "Invalid JSON payload received. Unknown name \"{k}\" at 'node': Cannot find field."
            ));
        }
    }
    let accel = match (body.get("acceleratorType"), body.get("acceleratorConfig")) {
        (Some(Value::String(t)), None) => t.clone(),
        (None, Some(Value::Object(c))) => format!(
            "{}-{}",
            c.get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_ascii_lowercase(),
            c.get("topology").and_then(Value::as_str).unwrap_or("")
        ),
        _ => return bad("exactly one of acceleratorType and acceleratorConfig is required"),
    };
    if !matches!(body.get("runtimeVersion"), Some(Value::String(s)) if !s.is_empty()) {
        return bad("runtimeVersion is required");
    }
    for field in ["metadata", "labels"] {
        if let Some(v) = body.get(field)
            && !v
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        {
            return bad(&format!(
                "Invalid value at 'node.{field}': a map of strings"
            ));
        }
    }
    if w.tpu.nodes.contains_key(&name) {
        return error(
            409,
            "ALREADY_EXISTS",
            &format!("Resource '{parent}/nodes/{name}' already exists"),
        );
    }
    w.tpu.created.insert(name.clone());
    let out = w.tpu.capacity.get_mut(&accel).map(|left| {
        if *left == 0 {
            true
        } else {
            *left -= 1;
            false
        }
    });
    let ips = (0..hosts_of(&accel))
        .map(|_| {
            w.next_id += 1;
            format!("10.130.{}.{}", (w.next_id / 250) % 250, w.next_id % 250 + 2)
        })
        .collect();
    let now = Instant::now();
    let (node_next, error) = if w.tpu.quota.contains(&accel) {
        (
            Some((now + timing.operation, None)),
            Some((
                8,
                format!(
                    "Quota limit 'TPUV4PodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone {}.",
                    w.zone
                ),
            )),
        )
    } else if out == Some(true) {
        (
            Some((now + timing.operation, None)),
            Some((
                8,
                format!(
                    "There is no more capacity in the zone \"{}\"; you can try in another zone \
                     where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1]",
                    w.zone
                ),
            )),
        )
    } else {
        (Some((now + timing.boot, Some("READY"))), None)
    };
    w.tpu.nodes.insert(
        name.clone(),
        Node {
            body,
            state: "CREATING",
            next: node_next,
            ips,
        },
    );
    let wait = if error.is_some() {
        timing.operation
    } else {
        timing.boot
    };
    let op = new_op(w, &name, wait, error);
    if let Some(r) = query.get("requestId") {
        w.tpu.by_request_id.insert(r.clone(), op.clone());
    }
    Reply::new(200).set_body_json(op_json(&w.tpu, &op, parent))
}

fn new_op(w: &mut World, node: &str, wait: Duration, error: Option<(i64, String)>) -> String {
    w.next_id += 1;
    let name = format!("operation-{}", w.next_id);
    w.tpu.ops.insert(
        name.clone(),
        TpuOp {
            node: node.to_string(),
            done_at: Instant::now() + wait,
            error,
        },
    );
    name
}

fn op_json(api: &TpuApi, op: &str, parent: &str) -> Value {
    let Some(o) = api.ops.get(op) else {
        return json!({});
    };
    let mut v = json!({
        "name": format!("{parent}/operations/{op}"),
        "metadata": {
            "@type": "type.googleapis.com/google.cloud.tpu.v2alpha1.OperationMetadata",
            "target": format!("{parent}/nodes/{}", o.node),
            "apiVersion": "v2alpha1",
        },
        "done": false,
    });
    if Instant::now() >= o.done_at {
        v["done"] = json!(true);
        match &o.error {
            Some((code, message)) => v["error"] = json!({"code": code, "message": message}),
            None => {
                v["response"] = match api.nodes.get(&o.node) {
                    Some(n) => node_json(&o.node, n, parent),
                    None => json!({"@type": "type.googleapis.com/google.protobuf.Empty"}),
                };
            }
        }
    }
    v
}

fn node_json(name: &str, n: &Node, parent: &str) -> Value {
    let mut v = Value::Object(n.body.clone());
    v["name"] = json!(format!("{parent}/nodes/{name}"));
    v["state"] = json!(n.state);
    v["apiVersion"] = json!("V2_ALPHA1");
    if n.state == "READY" {
        let external = n
            .body
            .get("networkConfig")
            .and_then(|c| c.get("enableExternalIps"))
            .and_then(Value::as_bool)
            == Some(true);
        let eps: Vec<Value> = n
            .ips
            .iter()
            .map(|ip| {
                let mut ep = json!({"ipAddress": ip, "port": 8470});
                if external {
                    ep["accessConfig"] = json!({"externalIp": format!("34.{}", &ip[3..])});
                }
                ep
            })
            .collect();
        v["networkEndpoints"] = json!(eps);
    }
    v
}

/// Hosts of a slice named `<generation>-<cores>` (`acceleratorType`) or
/// `<generation>-<topology>` (`acceleratorConfig`, lowercased): Google's "TPU versions"
/// chips per host and TensorCores per chip (see the module docs).
fn hosts_of(accel: &str) -> usize {
    let (generation, size) = accel.split_once('-').unwrap_or((accel, ""));
    let small_hosts = generation.starts_with("v5lite") || generation.starts_with("v6e");
    let chips: usize = if size.contains('x') {
        size.split('x')
            .map(|d| d.parse::<usize>().unwrap_or(1))
            .product()
    } else {
        let cores: usize = size.parse().unwrap_or(1);
        if small_hosts { cores } else { cores / 2 }
    };
    let per_host = if small_hosts && chips <= 8 {
        chips.max(1)
    } else {
        4
    };
    chips.div_ceil(per_host).max(1)
}

fn list(w: &World, query: &BTreeMap<String, String>, parent: &str) -> Reply {
    let size: usize = query
        .get("pageSize")
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(50)
        .min(1000);
    let start: usize = match query.get("pageToken").map(String::as_str) {
        None | Some("") => 0,
        Some(t) => match t.strip_prefix("tpu-page-").and_then(|n| n.parse().ok()) {
            Some(n) => n,
            None => return bad(&format!("Invalid page token: {t}")),
        },
    };
    let all: Vec<Value> = w
        .tpu
        .nodes
        .iter()
        .map(|(n, node)| node_json(n, node, parent))
        .collect();
    let mut out = json!({"nodes": all.iter().skip(start).take(size).cloned().collect::<Vec<_>>()});
    if start + size < all.len() {
        out["nextPageToken"] = json!(format!("tpu-page-{}", start + size));
    }
    Reply::new(200).set_body_json(out)
}

/// The name of the Compute Engine VM behind host `worker` of TPU node `node` (Cloud
/// TPU's `t1v-n-<hex>-w-<worker>`): the fake's instance and the boot simulator's
/// `instance/name` of that VM.
pub fn backing_name(node: &str, worker: usize) -> String {
    let h = node.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("t1v-n-{h:08x}-w-{worker}")
}

/// Makes the instances Cloud TPU keeps behind each `READY` node (its labels and
/// `tpu_cores`), and removes those whose node is gone or no longer ready.
pub fn sync_backing(w: &mut World) {
    let want: BTreeMap<String, Value> = w
        .tpu
        .nodes
        .iter()
        .filter(|(_, n)| n.state == "READY")
        .flat_map(|(name, n)| {
            let mut labels = n.body.get("labels").cloned().unwrap_or_else(|| json!({}));
            labels[TPU_VM_LABEL] = json!("8");
            (0..n.ips.len()).map(move |i| (backing_name(name, i), labels.clone()))
        })
        .collect();
    w.instances
        .retain(|k, _| !k.starts_with("t1v-n-") || want.contains_key(k));
    for (name, labels) in want {
        if w.instances.contains_key(&name) {
            continue;
        }
        w.next_id += 1;
        let id = w.next_id;
        let body = json!({"machineType": format!("zones/{}/machineTypes/tpu-vm", w.zone), "labels": labels});
        w.instances.insert(
            name,
            Inst {
                body: body.as_object().cloned().unwrap_or_default(),
                id,
                phase: Phase::Running,
                next: Vec::new(),
                fingerprint: id,
            },
        );
    }
}
