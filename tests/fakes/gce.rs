//! [`GceFake`]: a stateful fake of the Compute Engine REST API (v1) on wiremock, for what
//! rayscale's GCP provider calls. No Compute Engine emulator exists; this one follows
//! Google's public REST reference (cloud.google.com/compute/docs/reference/rest/v1), not
//! the client's code:
//!
//! - `instances.insert` — `POST /compute/v1/projects/{project}/zones/{zone}/instances`
//!   with an `Instance` body and the `requestId` and `sourceInstanceTemplate` query
//!   parameters. Answers a zone `Operation`. A `requestId` seen before answers the same
//!   operation again ("the server ignores the second request", `requestId` in the
//!   reference); a name in use answers 409 `alreadyExists`; a name that is not RFC 1035
//!   or a missing `machineType` (without a template) answers 400 `invalid`.
//! - `instances.bulkInsert` — `POST .../instances/bulkInsert` with a
//!   `BulkInsertInstanceResource`: `count` instances named by `perInstanceProperties`'
//!   keys, from `instanceProperties` (its `machineType` a name, not a URL; 400 `invalid`
//!   otherwise) or a `sourceInstanceTemplate`; with fewer than `minCount` (default
//!   `count`) available none is made and the operation ends with the zone's error.
//! - `instances.list` — `GET .../instances` with `filter`, `maxResults` (at most 500) and
//!   `pageToken`; answers an `InstanceList` with `items` and `nextPageToken` while more
//!   remain. The `filter` grammar is the reference's: `field = value`, `field != value`,
//!   `field:*` (presence), `AND`, `OR`, `NOT`, parentheses; fields `status`, `name`,
//!   `labels.<key>`.
//! - `instances.get` / `delete` — `GET`/`DELETE .../instances/{instance}` (404 `notFound`
//!   when absent); `instances.stop` / `start` / `setLabels` — `POST .../{instance}/stop`,
//!   `/start`, `/setLabels` (`setLabels` checks `labelFingerprint`: 412 `conditionNotMet`
//!   on a stale one).
//! - `zoneOperations.get` — `GET .../operations/{operation}`.
//!
//! Operations go `PENDING` -> `RUNNING` -> `DONE` over [`Timing::operation`]; an
//! instance goes `PROVISIONING` -> `STAGING` -> `RUNNING` over [`Timing::boot`], a
//! stopped one `STOPPING` -> `TERMINATED` (and is started `STAGING` -> `RUNNING`), a
//! deleted one `STOPPING` -> gone. Ids are uint64 written as decimal strings; JSON is
//! camelCase. Errors are `{"error": {"code", "message", "errors": [{"reason", "domain",
//! "message"}], "status"}}` ("Handling API errors").
//!
//! The Cloud TPU API (v2alpha1 nodes and operations) is served on the same server
//! (`gce/tpu.rs`), as are the project-level APIs of `rayscale up` (`gce/project.rs`).
//!
//! The [`Faults`] switch injects what the provider must map: an insert whose operation
//! ends `DONE` with `ZONE_RESOURCE_POOL_EXHAUSTED` (by machine type, the instance never
//! appears), `QUOTA_EXCEEDED`, a 429 `rateLimitExceeded`, a 503 `backendError`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

mod filter;
mod insert;
mod project;
mod tpu;
use super::record::{self, Reply};
pub use filter::{Filter, parse_filter};
use insert::{bulk_insert, insert};
pub use project::ProjectApis;
pub use tpu::{TpuApi, backing_name as tpu_vm_name};

/// How long things take in the fake.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// From an operation's start to `DONE` (a third `PENDING`, the rest `RUNNING`).
    pub operation: Duration,
    /// From an insert (or start) to `RUNNING` (half `PROVISIONING`, half `STAGING`).
    pub boot: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            operation: Duration::from_millis(600),
            boot: Duration::from_millis(800),
        }
    }
}

/// Faults to inject; each counter is used up by the calls it fails.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Instances each machine type (short name) may still get; an insert beyond ends
    /// with `ZONE_RESOURCE_POOL_EXHAUSTED`. Types not named are unlimited.
    pub capacity: BTreeMap<String, u64>,
    /// Machine types whose inserts end with `QUOTA_EXCEEDED`.
    pub quota: BTreeSet<String>,
    /// The next this-many inserts answer 429 `rateLimitExceeded`.
    pub throttle_inserts: u32,
    /// The next this-many calls of any kind answer 503 `backendError`.
    pub unavailable: u32,
    /// The next inserts answer these (HTTP status, reason), in order.
    pub insert_errors: Vec<(u16, String)>,
}

/// Calls the fake answered, by method.
#[derive(Debug, Default)]
pub struct Calls {
    /// `instances.insert`.
    pub insert: AtomicU64,
    /// `instances.bulkInsert`.
    pub bulk_insert: AtomicU64,
    /// `instances.list` pages.
    pub list: AtomicU64,
    /// `zoneOperations.get`.
    pub get_operation: AtomicU64,
    /// `instances.delete`, `stop`, `start`, `setLabels`, `get`.
    pub other: AtomicU64,
    /// Instances asked for by machine type (short name), by inserts and bulk inserts,
    /// replays of a `requestId` excluded.
    by_machine: Mutex<BTreeMap<String, u64>>,
}

impl Calls {
    /// How many inserts named `machine_type` (a replay of a `requestId` is not one).
    pub fn inserts_of(&self, machine_type: &str) -> u64 {
        lock(&self.by_machine)
            .get(machine_type)
            .copied()
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Provisioning,
    Staging,
    Running,
    Stopping,
    Terminated,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Provisioning => "PROVISIONING",
            Phase::Staging => "STAGING",
            Phase::Running => "RUNNING",
            Phase::Stopping => "STOPPING",
            Phase::Terminated => "TERMINATED",
        }
    }
}

#[derive(Debug, Clone)]
struct Inst {
    body: Map<String, Value>,
    id: u64,
    phase: Phase,
    /// Later phases and when they begin; `None` = the instance is gone.
    next: Vec<(Instant, Option<Phase>)>,
    fingerprint: u64,
}

#[derive(Debug, Clone)]
struct Op {
    id: u64,
    name: String,
    kind: &'static str,
    target: String,
    start: Instant,
    error: Option<(u16, &'static str, String)>,
}

#[derive(Debug, Default)]
struct World {
    project: String,
    zone: String,
    instances: BTreeMap<String, Inst>,
    ops: BTreeMap<String, Op>,
    by_request_id: BTreeMap<String, String>,
    next_id: u64,
    /// Resource Manager, IAM and Compute's project calls (`project.rs`).
    project_apis: ProjectApis,
    /// The Cloud TPU API (`tpu.rs`).
    tpu: TpuApi,
}

/// The fake's shared state.
struct Shared {
    world: Mutex<World>,
    faults: Mutex<Faults>,
    timing: Timing,
    calls: Calls,
    /// The test that started this fake (its thread's name), for the contract record.
    test: String,
}

/// A Compute Engine on a loopback port for one project and zone.
pub struct GceFake {
    server: MockServer,
    shared: Arc<Shared>,
}

impl GceFake {
    /// Starts the fake for `project` / `zone`.
    pub async fn start(project: &str, zone: &str, timing: Timing) -> Self {
        let shared = Arc::new(Shared {
            world: Mutex::new(World {
                project: project.to_string(),
                zone: zone.to_string(),
                next_id: 1_000_000_000_000_000_000,
                ..World::default()
            }),
            faults: Mutex::new(Faults::default()),
            timing,
            calls: Calls::default(),
            test: record::test_name(),
        });
        let server = MockServer::start().await;
        Mock::given(wiremock::matchers::any())
            .respond_with(Responder(shared.clone()))
            .mount(&server)
            .await;
        GceFake { server, shared }
    }

    /// The base URL (`RAYSCALE_GCP_ENDPOINT`).
    pub fn url(&self) -> String {
        self.server.uri()
    }

    /// Each request so far, as `(method path, its Authorization header)`, in order.
    pub async fn authorizations(&self) -> Vec<(String, Option<String>)> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| {
                (
                    format!("{} {}", r.method, r.url.path()),
                    r.headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string),
                )
            })
            .collect()
    }

    /// The environment `rayscale up`/`down` run with against this fake: Compute, IAM and
    /// Resource Manager all here, and `HOME` = `home` (where `up` keeps the project SSH
    /// key it makes, never the user's own `~/.ssh`).
    pub fn cli_env(&self, home: &std::path::Path) -> Vec<(String, String)> {
        let url = self.url();
        vec![
            ("RAYSCALE_GCP_ENDPOINT".into(), url.clone()),
            ("RAYSCALE_GCP_IAM_ENDPOINT".into(), url.clone()),
            ("RAYSCALE_GCP_CRM_ENDPOINT".into(), url),
            ("HOME".into(), home.display().to_string()),
        ]
    }

    /// Reads or changes the project's own state (its metadata, IAM policy, service
    /// accounts, subnetworks) and those APIs' faults.
    pub fn project<R>(&self, f: impl FnOnce(&mut ProjectApis) -> R) -> R {
        f(&mut lock(&self.shared.world).project_apis)
    }

    /// Reads or changes the TPU API's nodes and faults.
    pub fn tpu<R>(&self, f: impl FnOnce(&mut TpuApi) -> R) -> R {
        let mut w = lock(&self.shared.world);
        tpu::advance(&mut w.tpu);
        f(&mut w.tpu)
    }

    /// Changes the faults.
    pub fn faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut lock(&self.shared.faults));
    }

    /// The calls answered so far.
    pub fn calls(&self) -> &Calls {
        &self.shared.calls
    }

    /// Instances that exist now (any status), by name, with their status.
    pub fn instances(&self) -> BTreeMap<String, String> {
        let mut w = lock(&self.shared.world);
        advance(&mut w, &self.shared.timing);
        w.instances
            .iter()
            .map(|(n, i)| (n.clone(), i.phase.name().to_string()))
            .collect()
    }

    /// Running instances whose labels hold `label` (`key`, `value`), with their
    /// `startup-script` metadata and whether each is a head (the boot simulator's view
    /// of the data plane).
    pub fn running_with_startup_script(&self, label: (&str, &str)) -> Vec<(String, String, bool)> {
        let mut w = lock(&self.shared.world);
        advance(&mut w, &self.shared.timing);
        w.instances
            .iter()
            .filter(|(_, i)| i.phase == Phase::Running)
            // The VM behind a TPU node runs its node's script (`TpuApi`), not its own.
            .filter(|(_, i)| {
                i.body
                    .get("labels")
                    .and_then(|l| l.get(tpu::TPU_VM_LABEL))
                    .is_none()
            })
            .filter(|(_, i)| {
                i.body
                    .get("labels")
                    .and_then(|l| l.get(label.0))
                    .and_then(Value::as_str)
                    == Some(label.1)
            })
            .map(|(n, i)| {
                let script = i
                    .body
                    .get("metadata")
                    .and_then(|m| m.get("items"))
                    .and_then(Value::as_array)
                    .and_then(|items| {
                        items.iter().find(|it| {
                            it.get("key").and_then(Value::as_str) == Some("startup-script")
                        })
                    })
                    .and_then(|it| it.get("value"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let head = i
                    .body
                    .get("labels")
                    .and_then(|l| l.get("ray-node-type"))
                    .and_then(Value::as_str)
                    == Some("head");
                (n.clone(), script, head)
            })
            .collect()
    }

    /// Makes `n` running instances with `labels` at once (no operations): a large
    /// cluster for list tests.
    pub fn seed(&self, n: usize, prefix: &str, labels: Value) {
        let mut w = lock(&self.shared.world);
        for k in 0..n {
            w.next_id += 1;
            let id = w.next_id;
            w.instances.insert(
                format!("{prefix}-{k:05}"),
                Inst {
                    body: json!({"machineType": "zones/z/machineTypes/n1-standard-2", "labels": labels.clone()})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    id,
                    phase: Phase::Running,
                    next: Vec::new(),
                    fingerprint: id,
                },
            );
        }
    }

    /// Forgets every `requestId` seen (Compute Engine keeps them for a while, then
    /// answers a replay as a new request).
    pub fn forget_request_ids(&self) {
        lock(&self.shared.world).by_request_id.clear();
    }

    /// Sets label `key` of instance `name` (what another client's `setLabels` does).
    pub fn set_label(&self, name: &str, key: &str, value: &str) {
        let mut w = lock(&self.shared.world);
        if let Some(i) = w.instances.get_mut(name) {
            let labels = i.body.entry("labels").or_insert_with(|| json!({}));
            if let Value::Object(l) = labels {
                l.insert(key.to_string(), json!(value));
            }
            i.fingerprint += 1;
        }
    }

    /// The stored body of an instance (as the API would return it), if it exists.
    pub fn instance(&self, name: &str) -> Option<Value> {
        let mut w = lock(&self.shared.world);
        advance(&mut w, &self.shared.timing);
        let (project, zone) = (w.project.clone(), w.zone.clone());
        w.instances
            .get(name)
            .map(|i| instance_json(name, i, &project, &zone))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

struct Responder(Arc<Shared>);

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        record::answer("gcp", &self.0.test, req, self.reply(req))
    }
}

impl Responder {
    fn reply(&self, req: &Request) -> Reply {
        let s = &self.0;
        {
            let mut f = lock(&s.faults);
            if f.unavailable > 0 {
                f.unavailable -= 1;
                return error(503, "backendError", "Backend Error (injected)");
            }
        }
        let mut w = lock(&s.world);
        advance(&mut w, &s.timing);
        if let Some(r) = tpu::reply(&mut w, req, &s.timing) {
            return r;
        }
        if let Some(r) = project::reply(&mut w, req, s.timing.operation) {
            return r;
        }
        let path = req.url.path().to_string();
        let prefix = format!("/compute/v1/projects/{}/zones/{}/", w.project, w.zone);
        let Some(rest) = path.strip_prefix(&prefix) else {
            return error(
                404,
                "notFound",
                &format!("The resource '{path}' was not found (project or zone)"),
            );
        };
        let query: BTreeMap<String, String> = req.url.query_pairs().into_owned().collect();
        let segs: Vec<&str> = rest.split('/').collect();
        let method = req.method.as_str();
        match (method, segs.as_slice()) {
            ("POST", ["instances"]) => {
                s.calls.insert.fetch_add(1, Ordering::Relaxed);
                insert(&mut w, s, req, &query)
            }
            ("POST", ["instances", "bulkInsert"]) => {
                s.calls.bulk_insert.fetch_add(1, Ordering::Relaxed);
                bulk_insert(&mut w, s, req, &query)
            }
            ("GET", ["instances"]) => {
                s.calls.list.fetch_add(1, Ordering::Relaxed);
                list(&w, &query)
            }
            ("GET", ["instances", name]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                let (project, zone) = (w.project.clone(), w.zone.clone());
                match w.instances.get(*name) {
                    Some(i) => {
                        Reply::new(200).set_body_json(instance_json(name, i, &project, &zone))
                    }
                    None => not_found(name),
                }
            }
            ("DELETE", ["instances", name]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                change(&mut w, s, name, "delete")
            }
            ("POST", ["instances", name, action @ ("stop" | "start")]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                change(&mut w, s, name, action)
            }
            ("POST", ["instances", name, "setLabels"]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                set_labels(&mut w, req, name)
            }
            ("GET", ["operations", name]) => {
                s.calls.get_operation.fetch_add(1, Ordering::Relaxed);
                let (project, zone) = (w.project.clone(), w.zone.clone());
                match w.ops.get(*name) {
                    Some(op) => {
                        Reply::new(200).set_body_json(op_json(op, &s.timing, &project, &zone))
                    }
                    None => not_found(name),
                }
            }
            _ => error(404, "notFound", &format!("no such method: {method} {path}")),
        }
    }
}

/// Applies every scheduled phase change that is due.
fn advance(w: &mut World, _t: &Timing) {
    let now = Instant::now();
    let mut gone = Vec::new();
    for (name, i) in w.instances.iter_mut() {
        while let Some((at, next)) = i.next.first().copied() {
            if at > now {
                break;
            }
            i.next.remove(0);
            match next {
                Some(p) => i.phase = p,
                None => {
                    gone.push(name.clone());
                    break;
                }
            }
        }
    }
    for n in gone {
        w.instances.remove(&n);
    }
    tpu::advance(&mut w.tpu);
    tpu::sync_backing(w);
}

fn new_op(
    w: &mut World,
    kind: &'static str,
    target: &str,
    error: Option<(u16, &'static str, String)>,
) -> Op {
    w.next_id += 1;
    let op = Op {
        id: w.next_id,
        name: format!("operation-{}-{}", w.next_id, kind.to_ascii_lowercase()),
        kind,
        target: target.to_string(),
        start: Instant::now(),
        error,
    };
    w.ops.insert(op.name.clone(), op.clone());
    op
}

fn change(w: &mut World, s: &Shared, name: &str, action: &str) -> Reply {
    let now = Instant::now();
    let t = s.timing;
    let Some(i) = w.instances.get_mut(name) else {
        return not_found(name);
    };
    let kind: &'static str = match action {
        "delete" => {
            i.phase = Phase::Stopping;
            i.next = vec![(now + t.operation, None)];
            "delete"
        }
        "stop" => {
            if i.phase != Phase::Terminated {
                i.phase = Phase::Stopping;
                i.next = vec![(now + t.operation, Some(Phase::Terminated))];
            }
            "stop"
        }
        _ => {
            if i.phase == Phase::Terminated {
                i.phase = Phase::Staging;
                i.next = vec![(now + t.boot, Some(Phase::Running))];
            }
            "start"
        }
    };
    let op = new_op(w, kind, name, None);
    Reply::new(200).set_body_json(op_json(&op, &s.timing, &w.project, &w.zone))
}

fn set_labels(w: &mut World, req: &Request, name: &str) -> Reply {
    let body: Value = req.body_json().unwrap_or(Value::Null);
    let Some(i) = w.instances.get_mut(name) else {
        return not_found(name);
    };
    let want = fingerprint(i.fingerprint);
    if body.get("labelFingerprint").and_then(Value::as_str) != Some(want.as_str()) {
        return error(
            412,
            "conditionNotMet",
            "Labels fingerprint either invalid or resource labels have changed",
        );
    }
    let labels = body.get("labels").cloned().unwrap_or(json!({}));
    i.body.insert("labels".into(), labels);
    i.fingerprint += 1;
    let op = new_op(w, "setLabels", name, None);
    // setLabels is done at once.
    if let Some(o) = w.ops.get_mut(&op.name) {
        o.start = Instant::now() - Duration::from_secs(3600);
    }
    let op = w.ops[&op.name].clone();
    Reply::new(200).set_body_json(op_json(&op, &Timing::default(), &w.project, &w.zone))
}

/// The label fingerprint: bytes in URL-safe base64, as the API writes them.
fn fingerprint(n: u64) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE.encode(n.to_be_bytes())
}

fn instance_json(name: &str, i: &Inst, project: &str, zone: &str) -> Value {
    let mut b = i.body.clone();
    let zone_url = format!("https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}");
    b.insert("kind".into(), json!("compute#instance"));
    b.insert("id".into(), json!(i.id.to_string()));
    b.insert("name".into(), json!(name));
    b.insert("status".into(), json!(i.phase.name()));
    b.insert("zone".into(), json!(zone_url));
    b.insert(
        "selfLink".into(),
        json!(format!("{zone_url}/instances/{name}")),
    );
    b.insert("labelFingerprint".into(), json!(fingerprint(i.fingerprint)));
    b.insert(
        "creationTimestamp".into(),
        json!("2026-12-01T00:00:00.000-08:00"),
    );
    let ip = format!(
        "10.{}.{}.{}",
        (i.id >> 16) & 0xff,
        (i.id >> 8) & 0xff,
        i.id & 0xff
    );
    let mut nics = b
        .get("networkInterfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| vec![json!({})]);
    if let Some(Value::Object(n)) = nics.first_mut() {
        n.insert("networkIP".into(), json!(ip));
        n.insert("name".into(), json!("nic0"));
    }
    b.insert("networkInterfaces".into(), Value::Array(nics));
    Value::Object(b)
}

fn op_json(op: &Op, t: &Timing, project: &str, zone: &str) -> Value {
    let e = op.start.elapsed();
    let status = if e >= t.operation {
        "DONE"
    } else if e >= t.operation / 3 {
        "RUNNING"
    } else {
        "PENDING"
    };
    let zone_url = format!("https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}");
    let mut j = json!({
        "kind": "compute#operation",
        "id": op.id.to_string(),
        "name": op.name,
        "zone": zone_url,
        "operationType": op.kind,
        "targetLink": format!("{zone_url}/instances/{}", op.target),
        "status": status,
        "progress": if status == "DONE" { 100 } else { 0 },
        "insertTime": "2026-12-01T00:00:00.000-08:00",
        "selfLink": format!("{zone_url}/operations/{}", op.name),
    });
    if status == "DONE"
        && let Some((code, reason, message)) = &op.error
    {
        j["error"] = json!({"errors": [{"code": reason, "message": message}]});
        j["httpErrorStatusCode"] = json!(code);
        j["httpErrorMessage"] = json!(if *code == 503 {
            "SERVICE UNAVAILABLE"
        } else {
            "FORBIDDEN"
        });
    }
    j
}

fn list(w: &World, query: &BTreeMap<String, String>) -> Reply {
    let filter = match query.get("filter").map(|f| parse_filter(f)) {
        None => None,
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            return error(
                400,
                "invalid",
                &format!("Invalid list filter expression: {e}"),
            );
        }
    };
    let max = query
        .get("maxResults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(500)
        .clamp(1, 500);
    let start = query
        .get("pageToken")
        .and_then(|t| t.strip_prefix("page-"))
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(0);
    let matching: Vec<Value> = w
        .instances
        .iter()
        .map(|(n, i)| instance_json(n, i, &w.project, &w.zone))
        .filter(|j| filter.as_ref().is_none_or(|f| f.eval(j)))
        .collect();
    let page: Vec<Value> = matching.iter().skip(start).take(max).cloned().collect();
    let mut out = json!({
        "kind": "compute#instanceList",
        "id": format!("projects/{}/zones/{}/instances", w.project, w.zone),
        "items": page,
        "selfLink": format!("https://www.googleapis.com/compute/v1/projects/{}/zones/{}/instances", w.project, w.zone),
    });
    if start + max < matching.len() {
        out["nextPageToken"] = json!(format!("page-{}", start + max));
    }
    Reply::new(200).set_body_json(out)
}

fn error(code: u16, reason: &str, message: &str) -> Reply {
    let status = match code {
        400 => "INVALID_ARGUMENT",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ALREADY_EXISTS",
        412 => "FAILED_PRECONDITION",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "UNKNOWN",
    };
    Reply::new(code).set_body_json(json!({
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
            "status": status,
        }
    }))
}

fn not_found(name: &str) -> Reply {
    error(
        404,
        "notFound",
        &format!("The resource '{name}' was not found"),
    )
}
