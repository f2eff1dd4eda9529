//! [`ArmFake`]: a stateful fake of Azure Resource Manager's compute API (virtual
//! machines, api-version 2024-07-01) on wiremock, for what rayscale's Azure provider
//! calls. No Azure emulator exists; this one follows Microsoft's public REST reference
//! (learn.microsoft.com/rest/api/compute/virtual-machines, api-version 2024-07-01) and
//! the ARM async-operation contract (learn.microsoft.com/azure/azure-resource-manager/
//! management/async-operations; github.com/Azure/azure-resource-manager-rpc,
//! `async-api-reference.md`), not the client's code:
//!
//! - `Virtual Machines - Create Or Update` — `PUT .../virtualMachines/{vm}`: a new VM
//!   answers 201 with the VM (`provisioningState: Creating`, a `vmId`) and an
//!   `Azure-AsyncOperation` header (absolute URL of the operation status, as Compute
//!   gives: `.../providers/Microsoft.Compute/locations/{location}/operations/{id}`) and
//!   `Retry-After`; the PUT of an existing VM answers 200 with it as it is (a replay
//!   makes nothing twice). The body is checked: `location`, `hardwareProfile.vmSize`, an
//!   image, `osProfile` with an SSH key, VM-level `networkInterfaceConfigurations` only
//!   with `networkApiVersion`, each with `ipConfigurations` on a subnet, `customData`
//!   base64 of at most 65535 bytes (400 `InvalidParameter` with its `target`).
//!   `SkuNotAvailable` and quota (`OperationNotAllowed`) answer 409 synchronously, as
//!   Compute does; allocation failures (`AllocationFailed`, `ZonalAllocationFailed`)
//!   end the operation `Failed` after the 201, and the VM stays, `provisioningState:
//!   Failed`, until deleted ("a failed create is still visible", ARM RPC).
//! - `Update` — `PATCH .../{vm}` (tags): 200 and an operation.
//! - `Get` / `Instance View` — `GET .../{vm}` (404 `ResourceNotFound`) and
//!   `GET .../{vm}/instanceView` (`statuses`: `ProvisioningState/<state>`,
//!   `PowerState/<state>`).
//! - `List` — `GET .../virtualMachines`: `{"value": [...], "nextLink"}`, the link an
//!   absolute URL on this server with a `$skiptoken` (paging, `x-ms-pageable`).
//! - `Delete` — `DELETE .../{vm}`: 202 with `Azure-AsyncOperation` and `Location`; a
//!   missing VM 204 (RPC: "resource does not exist"). `Deallocate` / `Start` —
//!   `POST .../{vm}/deallocate`, `/start`: 202 with an operation.
//! - `Network Interfaces - Get` (learn.microsoft.com/rest/api/virtualnetwork/
//!   network-interfaces/get) — `GET .../Microsoft.Network/networkInterfaces/{nic}`: the
//!   NIC a VM-level configuration made (named by it, listed in the VM's
//!   `networkProfile.networkInterfaces`), its `privateIPAddress` loopback (every node is
//!   on this machine).
//! - The operation status — `GET .../locations/{location}/operations/{id}`: 200
//!   `{"name", "status": InProgress|Succeeded|Failed, "startTime", "endTime", "error"}`.
//!
//! Every call needs `api-version` (400 `MissingApiVersionParameter`, or
//! `InvalidApiVersionParameter` for one Compute does not serve); errors are
//! `{"error": {"code", "message", "target"}}`. Operations take [`Timing::operation`];
//! a VM runs [`Timing::boot`] after its create (`PowerState/starting` ->
//! `running`), deallocates over an operation (`deallocating` -> `deallocated`).
//!
//! The [`Faults`] switch injects what the provider must map: capacity by VM size (the
//! operation ends `AllocationFailed`, or `ZonalAllocationFailed` for a zonal VM), a size
//! not offered (409 `SkuNotAvailable`), a quota (409 `OperationNotAllowed`), 429 as
//! Compute throttles (`OperationNotAllowed` with details `TooManyRequests`) with
//! `Retry-After`, 503, and any status and code on the next PUTs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Map, Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

mod body;
mod bootstrap;
mod json;
mod network;
mod vm;
use super::record::{self, Reply};
use json::{instance_view, op_json, vm_json};
use vm::{act, list, patch, put};

/// The api-versions this fake serves (a subset of Compute's, where the provider uses
/// 2024-07-01, and the network API's 2024-05-01).
const API_VERSIONS: &[&str] = &[
    "2023-09-01",
    "2024-03-01",
    "2024-05-01",
    "2024-07-01",
    "2024-11-01",
    "2024-11-30",
    "2022-04-01",
];

/// How long things take in the fake.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// From a call to its operation's end.
    pub operation: Duration,
    /// From a create (or start) to `PowerState/running`.
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
    /// VMs each size may still get; a create beyond fails after its 201
    /// (`AllocationFailed`, `ZonalAllocationFailed` when zonal). Sizes not named are
    /// unlimited.
    pub capacity: BTreeMap<String, u64>,
    /// Sizes the region does not offer now: 409 `SkuNotAvailable` on the PUT.
    pub sku_not_available: BTreeSet<String>,
    /// Sizes whose family quota is used up: 409 `OperationNotAllowed` (quota).
    pub quota: BTreeSet<String>,
    /// The next this-many PUTs answer 429 with `Retry-After: 0`.
    pub throttle_puts: u32,
    /// The next this-many calls of any kind answer 503.
    pub unavailable: u32,
    /// The next PUTs answer these (HTTP status, code), in order.
    pub put_errors: Vec<(u16, String)>,
    /// The next this-many role-assignment creates answer 400 `PrincipalNotFound` (a new
    /// identity's principal spreading through Entra ID).
    pub principal_spread: u32,
    /// Role-assignment creates answer 403 `AuthorizationFailed` (credentials that may
    /// not assign roles).
    pub role_forbidden: bool,
}

/// Calls the fake answered, by kind.
#[derive(Debug, Default)]
pub struct Calls {
    /// PUTs of a VM (new or not).
    pub put: AtomicU64,
    /// List pages.
    pub list: AtomicU64,
    /// Operation status GETs.
    pub operation: AtomicU64,
    /// Every other call.
    pub other: AtomicU64,
    /// PUTs and DELETEs of the bootstrap's resources (groups, network, identities, roles).
    pub bootstrap_writes: AtomicU64,
    /// Creates by VM size (PUTs of an existing VM excluded).
    by_size: Mutex<BTreeMap<String, u64>>,
}

impl Calls {
    /// How many VMs of `size` were created (a replayed PUT is not one).
    pub fn creates_of(&self, size: &str) -> u64 {
        lock(&self.by_size).get(size).copied().unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
struct Vm {
    body: Map<String, Value>,
    vm_id: String,
    prov: String,
    power: Option<&'static str>,
    /// Later changes and when they happen.
    next: Vec<(Instant, Change)>,
}

#[derive(Debug, Clone)]
enum Change {
    Prov(&'static str),
    Power(&'static str),
    Gone,
}

#[derive(Debug, Clone)]
struct Op {
    start: Instant,
    error: Option<(String, String)>,
}

#[derive(Debug, Default)]
struct World {
    sub: String,
    rg: String,
    location: String,
    vms: BTreeMap<String, Vm>,
    ops: BTreeMap<String, Op>,
    /// Resource groups that exist (lower-cased name -> `{location, tags}`).
    groups: BTreeMap<String, Value>,
    /// The bootstrap's resources by lower-cased id.
    resources: BTreeMap<String, bootstrap::Stored>,
    next: u64,
    page_size: usize,
}

struct Shared {
    world: Mutex<World>,
    faults: Mutex<Faults>,
    timing: Timing,
    calls: Calls,
    /// The test that started this fake (its thread's name), for the contract record.
    test: String,
    base: Mutex<String>,
}

/// Azure Resource Manager's compute API on a loopback port, for one subscription,
/// resource group and location.
pub struct ArmFake {
    server: MockServer,
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl ArmFake {
    /// Starts the fake.
    pub async fn start(sub: &str, rg: &str, location: &str, timing: Timing) -> Self {
        let shared = Arc::new(Shared {
            world: Mutex::new(World {
                sub: sub.into(),
                rg: rg.into(),
                location: location.into(),
                groups: [(rg.to_ascii_lowercase(), json!({"location": location}))].into(),
                page_size: 100,
                ..World::default()
            }),
            faults: Mutex::new(Faults::default()),
            timing,
            calls: Calls::default(),
            test: record::test_name(),
            base: Mutex::new(String::new()),
        });
        let server = MockServer::start().await;
        *lock(&shared.base) = server.uri();
        Mock::given(wiremock::matchers::any())
            .respond_with(Responder(shared.clone()))
            .mount(&server)
            .await;
        ArmFake { server, shared }
    }

    /// The base URL (`RAYSCALE_AZURE_ENDPOINT`).
    pub fn url(&self) -> String {
        self.server.uri()
    }

    /// Changes the faults.
    pub fn faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut lock(&self.shared.faults));
    }

    /// VMs per list page.
    pub fn set_page_size(&self, n: usize) {
        lock(&self.shared.world).page_size = n.max(1);
    }

    /// The calls answered so far.
    pub fn calls(&self) -> &Calls {
        &self.shared.calls
    }

    /// VMs that exist now: name -> (provisioning state, power state).
    pub fn vms(&self) -> BTreeMap<String, (String, String)> {
        let mut w = lock(&self.shared.world);
        advance(&mut w);
        w.vms
            .iter()
            .map(|(n, v)| {
                (
                    n.clone(),
                    (v.prov.clone(), v.power.unwrap_or("").to_string()),
                )
            })
            .collect()
    }

    /// The stored VM (as `GET` answers it), if it exists.
    pub fn vm(&self, name: &str) -> Option<Value> {
        let mut w = lock(&self.shared.world);
        advance(&mut w);
        let w = &*w;
        w.vms.get(name).map(|v| vm_json(w, name, v))
    }

    /// Running VMs whose tags hold `tag` (`key`, `value`), with their `customData`
    /// decoded and whether each is a head (the boot simulator's view of the data plane).
    pub fn running_with_custom_data(&self, tag: (&str, &str)) -> Vec<(String, String, bool)> {
        let mut w = lock(&self.shared.world);
        advance(&mut w);
        w.vms
            .iter()
            .filter(|(_, v)| v.power == Some("running"))
            .filter(|(_, v)| tag_of(v, tag.0) == Some(tag.1))
            .map(|(n, v)| {
                let data = v
                    .body
                    .get("properties")
                    .and_then(|p| p.get("osProfile"))
                    .and_then(|o| o.get("customData"))
                    .and_then(Value::as_str)
                    .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                (n.clone(), data, tag_of(v, "ray-node-type") == Some("head"))
            })
            .collect()
    }

    /// Makes `n` running VMs with `tags` at once (no operations): a large resource group
    /// for list tests.
    pub fn seed(&self, n: usize, prefix: &str, tags: Value) {
        let mut w = lock(&self.shared.world);
        let location = w.location.clone();
        for k in 0..n {
            w.next += 1;
            let id = w.next;
            w.vms.insert(
                format!("{prefix}-{k:05}"),
                Vm {
                    body: json!({"location": location, "tags": tags.clone(),
                        "properties": {"hardwareProfile": {"vmSize": "Standard_D2s_v3"}}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                    vm_id: format!("00000000-0000-4000-8000-{id:012}"),
                    prov: "Succeeded".into(),
                    power: Some("running"),
                    next: Vec::new(),
                },
            );
        }
    }

    /// Removes the resource group the fake started with (it must be made first).
    pub fn without_group(&self) {
        let mut w = lock(&self.shared.world);
        let rg = w.rg.to_ascii_lowercase();
        w.groups.remove(&rg);
    }

    /// Resource group `name` (`{location, tags}`), if it exists.
    pub fn group(&self, name: &str) -> Option<Value> {
        lock(&self.shared.world)
            .groups
            .get(&name.to_ascii_lowercase())
            .cloned()
    }

    /// Makes resource group `name` in the fake's location.
    pub fn add_group(&self, name: &str) {
        let mut w = lock(&self.shared.world);
        let location = w.location.clone();
        w.groups
            .insert(name.to_ascii_lowercase(), json!({"location": location}));
    }

    /// The bootstrap's resources of `rtype` (`Microsoft.Network/virtualNetworks`, ...),
    /// as stored.
    pub fn resources_of(&self, rtype: &str) -> Vec<Value> {
        lock(&self.shared.world)
            .resources
            .values()
            .filter(|r| r.body["type"] == json!(rtype))
            .map(|r| r.body.clone())
            .collect()
    }

    /// Stores `body` as the bootstrap's resource `id`, ready (someone else made it).
    pub fn put_resource(&self, id: &str, body: Value) {
        lock(&self.shared.world).resources.insert(
            id.to_ascii_lowercase(),
            bootstrap::Stored {
                body,
                ready: Instant::now(),
            },
        );
    }

    /// Removes the bootstrap's resource `id` (someone deleted it).
    pub fn remove_resource(&self, id: &str) {
        lock(&self.shared.world)
            .resources
            .remove(&id.to_ascii_lowercase());
    }

    /// Makes user-assigned identity `name` in group `rg` (someone else's).
    pub fn seed_identity(&self, rg: &str, name: &str) {
        let mut w = lock(&self.shared.world);
        let id = format!(
            "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{name}",
            w.sub
        );
        let location = w.location.clone();
        bootstrap::seed_identity(&mut w, &id, name, &location);
    }

    /// Deallocates VM `name` at once (what a Spot eviction with `Deallocate` does).
    pub fn evict(&self, name: &str) {
        let mut w = lock(&self.shared.world);
        if let Some(v) = w.vms.get_mut(name) {
            v.power = Some("deallocated");
            v.next.clear();
        }
    }
}

fn tag_of<'a>(v: &'a Vm, key: &str) -> Option<&'a str> {
    v.body
        .get("tags")
        .and_then(|t| t.get(key))
        .and_then(Value::as_str)
}

/// Applies every scheduled change that is due.
fn advance(w: &mut World) {
    let now = Instant::now();
    let mut gone = Vec::new();
    for (name, v) in w.vms.iter_mut() {
        while let Some((at, _)) = v.next.first() {
            if *at > now {
                break;
            }
            let (_, c) = v.next.remove(0);
            match c {
                Change::Prov(p) => v.prov = p.to_string(),
                Change::Power(p) => v.power = Some(p),
                Change::Gone => {
                    gone.push(name.clone());
                    break;
                }
            }
        }
    }
    for n in gone {
        w.vms.remove(&n);
    }
}

fn error(status: u16, code: &str, message: &str, target: Option<&str>) -> Reply {
    let mut e = json!({"code": code, "message": message});
    if let Some(t) = target {
        e["target"] = json!(t);
    }
    Reply::new(status)
        .insert_header("x-ms-error-code", code)
        .set_body_json(json!({ "error": e }))
}

/// Compute's 429: `OperationNotAllowed`, `details[].code` `TooManyRequests`, and
/// `Retry-After`.
fn throttled() -> Reply {
    Reply::new(429)
        .insert_header("x-ms-error-code", "OperationNotAllowed")
        .insert_header("Retry-After", "0")
        .set_body_json(json!({"error": {
            "code": "OperationNotAllowed",
            "message": "The server rejected the request because too many requests have been received for this subscription. (injected)",
            "details": [{
                "code": "TooManyRequests",
                "target": "PutVM3Min",
                "message": "{\"operationGroup\":\"PutVM3Min\",\"startTime\":\"2024-01-01T00:00:00+00:00\",\"endTime\":\"2024-01-01T00:03:00+00:00\",\"allowedRequestCount\":300,\"measuredRequestCount\":301}"
            }]
        }}))
}

fn not_found(w: &World, name: &str) -> Reply {
    error(
        404,
        "ResourceNotFound",
        &format!(
            "The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource group '{}' was not found.",
            w.rg
        ),
        None,
    )
}

/// An operation's status (`GET .../locations/{l}/operations/{id}`).
fn operation_status(w: &World, s: &Shared, id: &str) -> Reply {
    s.calls.operation.fetch_add(1, Ordering::Relaxed);
    match w.ops.get(id) {
        Some(op) => Reply::new(200).set_body_json(op_json(id, op, &s.timing)),
        None => error(
            404,
            "NotFound",
            &format!("The operation '{id}' was not found."),
            None,
        ),
    }
}

/// Starts a network operation that succeeds; its id and status URL.
fn new_network_op(w: &mut World, base: &str) -> (String, String) {
    w.next += 1;
    let id = format!("{:08x}-0000-4000-9000-{:012x}", w.next, w.next);
    w.ops.insert(
        id.clone(),
        Op {
            start: Instant::now(),
            error: None,
        },
    );
    let url = format!(
        "{base}/subscriptions/{}/providers/Microsoft.Network/locations/{}/operations/{id}?api-version=2024-05-01",
        w.sub, w.location
    );
    (id, url)
}

struct Responder(Arc<Shared>);

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        record::answer("azure", &self.0.test, req, self.reply(req))
    }
}

impl Responder {
    fn reply(&self, req: &Request) -> Reply {
        let s = &self.0;
        {
            let mut f = lock(&s.faults);
            if f.unavailable > 0 {
                f.unavailable -= 1;
                // ARM's 503s carry codes such as `ServerTimeout` (seen from ARM:
                // microsoft/MLOS#950); no list documents one.
                return error(
                    503,
                    "ServerTimeout",
                    "The request timed out (injected).",
                    None,
                );
            }
        }
        let query: BTreeMap<String, String> = req.url.query_pairs().into_owned().collect();
        match query.get("api-version") {
            None => {
                return error(
                    400,
                    "MissingApiVersionParameter",
                    "The api-version query parameter (?api-version=) is required for all requests.",
                    None,
                );
            }
            Some(v) if !API_VERSIONS.contains(&v.as_str()) => {
                return error(
                    400,
                    "InvalidApiVersionParameter",
                    &format!(
                        "The api-version '{v}' is invalid. The supported versions are '{}'.",
                        API_VERSIONS.join(",")
                    ),
                    None,
                );
            }
            Some(_) => {}
        }
        let mut w = lock(&s.world);
        advance(&mut w);
        let base = lock(&s.base).clone();
        let path = req.url.path().to_string();
        let ops_prefix = format!(
            "/subscriptions/{}/providers/Microsoft.Compute/locations/{}/operations/",
            w.sub, w.location
        );
        if let Some(id) = path.strip_prefix(&ops_prefix) {
            return operation_status(&w, s, id);
        }
        let api = query.get("api-version").cloned().unwrap_or_default();
        if let Some(r) = bootstrap::answer(&mut w, s, req, &path, &api, &base) {
            s.calls.other.fetch_add(1, Ordering::Relaxed);
            if matches!(req.method.as_str(), "PUT" | "DELETE") {
                s.calls.bootstrap_writes.fetch_add(1, Ordering::Relaxed);
            }
            return r;
        }
        if !w.groups.contains_key(&w.rg.to_ascii_lowercase()) {
            return error(
                404,
                "ResourceGroupNotFound",
                &format!("Resource group '{}' could not be found.", w.rg),
                None,
            );
        }
        if let Some(r) = network::answer(&w, &path) {
            s.calls.other.fetch_add(1, Ordering::Relaxed);
            return r;
        }
        let prefix = format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachines",
            w.sub, w.rg
        );
        let Some(rest) = path.strip_prefix(&prefix) else {
            return error(
                404,
                "ResourceGroupNotFound",
                &format!("Resource group or subscription of '{path}' could not be found."),
                None,
            );
        };
        let segs: Vec<&str> = rest
            .trim_start_matches('/')
            .split('/')
            .filter(|x| !x.is_empty())
            .collect();
        let method = req.method.as_str();
        match (method, segs.as_slice()) {
            ("GET", []) => {
                s.calls.list.fetch_add(1, Ordering::Relaxed);
                list(&w, &query, &base, &prefix)
            }
            ("PUT", [name]) => {
                s.calls.put.fetch_add(1, Ordering::Relaxed);
                put(&mut w, s, req, name, &base)
            }
            ("PATCH", [name]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                patch(&mut w, s, req, name, &base)
            }
            ("GET", [name]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                let w = &*w;
                match w.vms.get(*name) {
                    Some(v) => {
                        let mut b = vm_json(w, name, v);
                        if query.get("$expand").map(String::as_str) == Some("instanceView") {
                            b["properties"]["instanceView"] = instance_view(v);
                        }
                        Reply::new(200).set_body_json(b)
                    }
                    None => not_found(w, name),
                }
            }
            ("GET", [name, "instanceView"]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                match w.vms.get(*name) {
                    Some(v) => Reply::new(200).set_body_json(instance_view(v)),
                    None => not_found(&w, name),
                }
            }
            ("DELETE", [name]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                act(&mut w, s, name, "delete", &base)
            }
            ("POST", [name, action @ ("deallocate" | "start")]) => {
                s.calls.other.fetch_add(1, Ordering::Relaxed);
                act(&mut w, s, name, action, &base)
            }
            _ => error(
                400,
                "InvalidRequestFormat",
                &format!("no such call: {method} {path}"),
                None,
            ),
        }
    }
}
