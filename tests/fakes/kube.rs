//! [`KubeFake`]: a stateful fake of the Kubernetes API server on wiremock, for what
//! rayscale's KubeRay provider calls, with a mini KubeRay operator that turns a
//! RayCluster's `replicas` and `workersToDelete` into pods. No API server can be
//! installed here; this one follows the public API reference and API concepts
//! (kubernetes.io/docs/reference/using-api/api-concepts/), not the client's code:
//!
//! - `GET /apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}` — the RayCluster (404
//!   `NotFound` Status when absent).
//! - `PATCH` of the same path with `Content-Type: application/json-patch+json` (RFC 6902;
//!   "Patch operations" in the API concepts; other patch types answer 415): applied
//!   atomically to the stored object. A failed operation (a `test` among them) answers 422
//!   `Invalid` with the server's generic message; a patched object whose
//!   `metadata.resourceVersion` is not the stored one answers 409 `Conflict` ("the object
//!   has been modified"), the server's optimistic-concurrency precondition. A success
//!   bumps `metadata.resourceVersion` (and `generation` when the spec changed), and
//!   answers the object. A patch may not change the name, namespace or uid.
//! - `GET /api/v1/namespaces/{ns}/pods` — a `PodList` with `labelSelector` (equality
//!   `k=v`, `k==v`, `k!=v`, existence `k`, comma = AND), `limit` and `continue`
//!   ("Retrieving large results sets in chunks"), and `resourceVersion` with
//!   `resourceVersionMatch=NotOlderThan` ("Semantics for get and list": a version newer
//!   than the server has seen answers 504 `Timeout` "Too large resource version";
//!   `resourceVersionMatch` without `resourceVersion` answers 400).
//! - `GET /api/v1/namespaces/{ns}/pods/{name}` — one pod.
//!
//! Every object change takes the next resourceVersion (one counter, as etcd's revision).
//! Pods deleted by the operator get `metadata.deletionTimestamp` first and go after
//! [`OperatorTiming::delete`] (graceful termination). [`Faults`] injects answers; [`Calls`]
//! counts requests and response bytes by kind.
//!
//! The operator ([`KubeFake::start_operator`]) follows KubeRay's `reconcilePods` (ray-project/
//! kuberay, `ray-operator/controllers/ray/raycluster_controller.go`) for autoscaled
//! clusters: a head pod; per worker group, the pods named in `workersToDelete` deleted,
//! then pods created up to `replicas` x `numOfHosts`, never deleted at random (autoscaling
//! on); a new pod `Pending` for [`OperatorTiming::boot`], then `Running` with its Ray
//! container running. Each pod runs `ray start --address=<head> <rayStartParams> --block`
//! with `RAY_CLOUD_INSTANCE_ID` = its name and `RAY_NODE_TYPE_NAME` = its group, as
//! KubeRay's pods do.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// How long the operator's pods take.
#[derive(Debug, Clone, Copy)]
pub struct OperatorTiming {
    /// From creation to running.
    pub boot: Duration,
    /// From `deletionTimestamp` to gone.
    pub delete: Duration,
}

impl Default for OperatorTiming {
    fn default() -> Self {
        OperatorTiming {
            boot: Duration::from_millis(300),
            delete: Duration::from_millis(300),
        }
    }
}

/// Answers to inject, each used by one request.
#[derive(Debug, Default)]
pub struct Faults {
    /// Statuses answered to the next RayCluster patches.
    pub patch: VecDeque<u16>,
    /// Before each of the next this many patches, another writer edits the RayCluster
    /// (an annotation), so the patch's `test` of the version read fails.
    pub concurrent_edits: u32,
    /// Statuses answered to the next pod lists.
    pub list: VecDeque<u16>,
}

/// Requests and response bytes, by kind.
#[derive(Debug, Default)]
pub struct Calls {
    /// RayCluster GETs.
    pub get_cluster: AtomicU64,
    /// RayCluster patches (answered with any status).
    pub patch_cluster: AtomicU64,
    /// Patches answered 409.
    pub conflicts: AtomicU64,
    /// Single-pod GETs.
    pub get_pod: AtomicU64,
    /// Pod list pages.
    pub list_pods: AtomicU64,
    /// Pod watch answers.
    pub watch_pods: AtomicU64,
    /// Bytes of every response body.
    pub bytes: AtomicU64,
}

impl Calls {
    /// Every request.
    pub fn total(&self) -> u64 {
        self.get_cluster.load(Ordering::Relaxed)
            + self.patch_cluster.load(Ordering::Relaxed)
            + self.get_pod.load(Ordering::Relaxed)
            + self.list_pods.load(Ordering::Relaxed)
            + self.watch_pods.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct PodRec {
    obj: Value,
    created: Instant,
    deleting_since: Option<Instant>,
}

#[derive(Debug, Default)]
struct World {
    rv: u64,
    namespace: String,
    clusters: BTreeMap<String, Value>,
    pods: BTreeMap<String, PodRec>,
    /// Most items one list page carries when a `limit` is asked (a server may answer
    /// fewer items than the limit, and a `continue` token).
    page_cap: usize,
    next_pod: u64,
    /// Every `spec.workerGroupSpecs` patched, in order: (group, replicas) for tests.
    replicas_history: Vec<(String, u64)>,
    /// Every pod name a patch added to a `workersToDelete`, in order.
    named_for_deletion: Vec<String>,
    /// Pod changes for watches, oldest first: (resourceVersion, type, object).
    events: VecDeque<(u64, &'static str, Value)>,
    /// Watches from a version older than this answer 410 (compacted).
    events_start: u64,
    /// How many pod changes are kept for watches.
    events_kept: usize,
}

fn emit(w: &mut World, kind: &'static str, obj: Value) {
    w.events.push_back((w.rv, kind, obj));
    while w.events.len() > w.events_kept {
        if let Some((rv, ..)) = w.events.pop_front() {
            w.events_start = rv;
        }
    }
}

struct Shared {
    world: Mutex<World>,
    faults: Mutex<Faults>,
    calls: Calls,
    stop: AtomicBool,
}

/// The fake API server. Dropping it stops its operator.
pub struct KubeFake {
    server: MockServer,
    shared: Arc<Shared>,
    operator: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn status(code: u16, reason: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }))
}

fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        504 => "Timeout",
        _ => "InternalError",
    }
}

impl KubeFake {
    /// A fake API server serving namespace `namespace`.
    pub async fn start(namespace: &str) -> Arc<Self> {
        let shared = Arc::new(Shared {
            world: Mutex::new(World {
                rv: 1000,
                namespace: namespace.to_string(),
                page_cap: 500,
                events_kept: 50_000,
                ..World::default()
            }),
            faults: Mutex::new(Faults::default()),
            calls: Calls::default(),
            stop: AtomicBool::new(false),
        });
        let server = MockServer::start().await;
        Mock::given(wiremock::matchers::any())
            .respond_with(Responder(shared.clone()))
            .mount(&server)
            .await;
        Arc::new(KubeFake {
            server,
            shared,
            operator: Mutex::new(None),
        })
    }

    /// The server's base URL.
    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// A kubeconfig file naming this server (plain http on loopback, no credentials).
    pub fn write_kubeconfig(&self, path: &std::path::Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  \
             cluster: {{server: \"{}\"}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, \
             user: fake, namespace: {}}}\nusers:\n- name: fake\n  user: {{}}\n",
            self.uri(),
            lock(&self.shared.world).namespace
        );
        std::fs::write(path, text).expect("kubeconfig written");
    }

    /// A kube client of this server.
    pub async fn client(&self) -> ::kube::Client {
        crate::install_crypto_provider();
        let mut config = ::kube::Config::new(self.uri().parse().expect("uri"));
        config.default_namespace = lock(&self.shared.world).namespace.clone();
        config.default_retry = false;
        ::kube::Client::try_from(config).expect("client")
    }

    /// Creates (or replaces) a RayCluster from its JSON; returns its resourceVersion.
    pub fn put_cluster(&self, mut rc: Value) -> String {
        let mut w = lock(&self.shared.world);
        w.rv += 1;
        let rv = w.rv.to_string();
        let name = rc["metadata"]["name"]
            .as_str()
            .unwrap_or("raycluster")
            .to_string();
        rc["apiVersion"] = json!("ray.io/v1");
        rc["kind"] = json!("RayCluster");
        rc["metadata"]["namespace"] = json!(w.namespace);
        rc["metadata"]["resourceVersion"] = json!(rv);
        rc["metadata"]["uid"] = json!(format!("uid-{name}"));
        if rc["metadata"]["generation"].is_null() {
            rc["metadata"]["generation"] = json!(1);
        }
        w.clusters.insert(name, rc);
        rv
    }

    /// Edits a RayCluster as a user would (`kubectl edit`): bumps its version.
    pub fn edit_cluster(&self, name: &str, f: impl FnOnce(&mut Value)) {
        let mut w = lock(&self.shared.world);
        w.rv += 1;
        let rv = w.rv.to_string();
        if let Some(rc) = w.clusters.get_mut(name) {
            f(rc);
            rc["metadata"]["resourceVersion"] = json!(rv);
        }
    }

    /// The RayCluster as stored.
    pub fn cluster(&self, name: &str) -> Option<Value> {
        lock(&self.shared.world).clusters.get(name).cloned()
    }

    /// Pod names with their group, phase and whether they are being deleted.
    pub fn pods(&self) -> Vec<(String, String, String, bool)> {
        lock(&self.shared.world)
            .pods
            .iter()
            .map(|(n, p)| {
                (
                    n.clone(),
                    p.obj["metadata"]["labels"]["ray.io/group"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    p.obj["status"]["phase"].as_str().unwrap_or("").to_string(),
                    p.deleting_since.is_some(),
                )
            })
            .collect()
    }

    /// Running pods not being deleted, with their Ray command and environment as a
    /// shell script (what the kubelet would run), and whether each is a head.
    pub fn running_pods(&self) -> Vec<(String, String, bool)> {
        let w = lock(&self.shared.world);
        w.pods
            .iter()
            .filter(|(_, p)| p.deleting_since.is_none() && p.obj["status"]["phase"] == "Running")
            .map(|(n, p)| {
                let c = &p.obj["spec"]["containers"][0];
                let mut script = String::from("#!/bin/bash\n");
                for e in c["env"].as_array().into_iter().flatten() {
                    let value = if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" {
                        n.clone()
                    } else {
                        e["value"].as_str().unwrap_or("").to_string()
                    };
                    script.push_str(&format!(
                        "export {}='{}'\n",
                        e["name"].as_str().unwrap_or("X"),
                        value
                    ));
                }
                script.push_str(c["args"][0].as_str().unwrap_or("true"));
                script.push('\n');
                let head = p.obj["metadata"]["labels"]["ray.io/node-type"] == "head";
                (n.clone(), script, head)
            })
            .collect()
    }

    /// Every `replicas` value patched, in order, as (group, replicas).
    pub fn replicas_history(&self) -> Vec<(String, u64)> {
        lock(&self.shared.world).replicas_history.clone()
    }

    /// Every pod name ever added to a `workersToDelete`, in order.
    pub fn named_for_deletion(&self) -> Vec<String> {
        lock(&self.shared.world).named_for_deletion.clone()
    }

    /// How many pod changes are kept for watches (older versions answer 410).
    pub fn set_events_kept(&self, n: usize) {
        lock(&self.shared.world).events_kept = n.max(1);
    }

    /// The most items a list page carries.
    pub fn set_page_cap(&self, n: usize) {
        lock(&self.shared.world).page_cap = n.max(1);
    }

    /// The fault switch.
    pub fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        lock(&self.shared.faults)
    }

    /// The request counters.
    pub fn calls(&self) -> &Calls {
        &self.shared.calls
    }

    /// Starts the mini operator: every 50 ms it reconciles every RayCluster's pods, each
    /// worker running `ray start --address=<head_address> ...`; the head pod is named
    /// `<cluster>-head` (its Ray runs outside, started by the test).
    pub fn start_operator(self: &Arc<Self>, head_address: &str, timing: OperatorTiming) {
        let shared = self.shared.clone();
        let head = head_address.to_string();
        let t = std::thread::spawn(move || {
            while !shared.stop.load(Ordering::Relaxed) {
                operator_step(&mut lock(&shared.world), &head, &timing);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        *lock(&self.operator) = Some(t);
    }

    /// One operator pass now (for tests without the thread).
    pub fn operator_step(&self, head_address: &str, timing: &OperatorTiming) {
        operator_step(&mut lock(&self.shared.world), head_address, timing);
    }
}

impl Drop for KubeFake {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = lock(&self.operator).take() {
            let _ = t.join();
        }
    }
}

fn now_rfc3339() -> String {
    // Seconds since the epoch are enough for the fake; the format is RFC 3339 as the
    // API's `Time` type.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

/// KubeRay's pod name suffix: 5 lowercase alphanumerics.
fn suffix(n: u64) -> String {
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
    (0..5)
        .map(|_| {
            let c = alphabet[(x % alphabet.len() as u64) as usize] as char;
            x /= alphabet.len() as u64;
            c
        })
        .collect()
}

fn make_pod(
    w: &mut World,
    cluster: &Value,
    group: &Value,
    name: &str,
    head: bool,
    head_address: &str,
) {
    w.rv += 1;
    let cname = cluster["metadata"]["name"].as_str().unwrap_or("");
    let gname = if head {
        "headgroup"
    } else {
        group["groupName"].as_str().unwrap_or("")
    };
    let tmpl = &group["template"]["spec"]["containers"][0];
    let mut args = format!("ulimit -n 65536; ray start --address={head_address}");
    if let Some(params) = group["rayStartParams"].as_object() {
        for (k, v) in params {
            let v = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            args.push_str(&format!(" --{k}={v}"));
        }
    }
    args.push_str(" --block");
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": w.namespace,
            "uid": format!("uid-{name}"),
            "resourceVersion": w.rv.to_string(),
            "creationTimestamp": now_rfc3339(),
            "labels": {
                "ray.io/cluster": cname,
                "ray.io/node-type": if head { "head" } else { "worker" },
                "ray.io/group": gname,
                "ray.io/is-ray-node": "yes",
                "app.kubernetes.io/created-by": "kuberay-operator",
            },
            "ownerReferences": [{
                "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cname,
                "uid": cluster["metadata"]["uid"], "controller": true,
            }],
        },
        "spec": {
            "containers": [{
                "name": tmpl["name"].as_str().unwrap_or(if head { "ray-head" } else { "ray-worker" }),
                "image": tmpl["image"].as_str().unwrap_or("rayproject/ray:2.60.0"),
                "command": ["/bin/bash", "-lc", "--"],
                "args": [args],
                "env": [
                    {"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "RAY_NODE_TYPE_NAME", "value": gname},
                ],
                "resources": tmpl["resources"].clone(),
            }],
        },
        "status": {"phase": "Pending", "conditions": []},
    });
    emit(w, "ADDED", pod.clone());
    w.pods.insert(
        name.to_string(),
        PodRec {
            obj: pod,
            created: Instant::now(),
            deleting_since: None,
        },
    );
}

fn operator_step(w: &mut World, head_address: &str, t: &OperatorTiming) {
    let clusters: Vec<Value> = w.clusters.values().cloned().collect();
    for rc in &clusters {
        let cname = rc["metadata"]["name"].as_str().unwrap_or("").to_string();
        let of_cluster =
            |p: &PodRec| p.obj["metadata"]["labels"]["ray.io/cluster"] == cname.as_str();
        // The head pod.
        let head_name = format!("{cname}-head");
        if !w.pods.contains_key(&head_name) {
            make_pod(
                w,
                rc,
                &rc["spec"]["headGroupSpec"],
                &head_name,
                true,
                head_address,
            );
        }
        for g in rc["spec"]["workerGroupSpecs"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let gname = g["groupName"].as_str().unwrap_or("");
            let in_group =
                |p: &PodRec| of_cluster(p) && p.obj["metadata"]["labels"]["ray.io/group"] == gname;
            // workersToDelete first.
            for victim in g["scaleStrategy"]["workersToDelete"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let Some(v) = victim.as_str() else { continue };
                let rv = w.rv + 1;
                let mut changed = None;
                if let Some(p) = w.pods.get_mut(v)
                    && in_group(p)
                    && p.deleting_since.is_none()
                {
                    p.deleting_since = Some(Instant::now());
                    p.obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                    p.obj["metadata"]["resourceVersion"] = json!(rv.to_string());
                    changed = Some(p.obj.clone());
                }
                if let Some(obj) = changed {
                    w.rv = rv;
                    emit(w, "MODIFIED", obj);
                }
            }
            let hosts = g["numOfHosts"].as_u64().unwrap_or(1).max(1);
            let want = g["replicas"].as_u64().unwrap_or(0) * hosts;
            let live = w
                .pods
                .values()
                .filter(|p| in_group(p) && p.deleting_since.is_none())
                .count() as u64;
            for _ in live..want {
                w.next_pod += 1;
                let name = format!("{cname}-{gname}-worker-{}", suffix(w.next_pod));
                make_pod(w, rc, g, &name, false, head_address);
            }
        }
    }
    // The operator writes the RayCluster's status as its pods change (which moves the
    // RayCluster's resourceVersion under a concurrent autoscaler, as KubeRay's does).
    let names: Vec<String> = w.clusters.keys().cloned().collect();
    for cname in names {
        let ready = w
            .pods
            .values()
            .filter(|p| {
                p.obj["metadata"]["labels"]["ray.io/cluster"] == cname.as_str()
                    && p.obj["metadata"]["labels"]["ray.io/node-type"] == "worker"
                    && p.deleting_since.is_none()
                    && p.obj["status"]["phase"] == "Running"
            })
            .count();
        let rv = w.rv + 1;
        if let Some(rc) = w.clusters.get_mut(&cname)
            && rc["status"]["readyWorkerReplicas"] != json!(ready)
        {
            rc["status"] = json!({"state": "ready", "readyWorkerReplicas": ready, "availableWorkerReplicas": ready});
            rc["metadata"]["resourceVersion"] = json!(rv.to_string());
            w.rv = rv;
        }
    }
    // Pods boot, and deleted ones go.
    let now = Instant::now();
    let mut gone = Vec::new();
    let mut bumped = Vec::new();
    for (n, p) in &w.pods {
        match p.deleting_since {
            Some(at) if now.duration_since(at) >= t.delete => gone.push(n.clone()),
            None if p.obj["status"]["phase"] == "Pending"
                && now.duration_since(p.created) >= t.boot =>
            {
                bumped.push(n.clone())
            }
            _ => {}
        }
    }
    for n in gone {
        w.rv += 1;
        if let Some(mut p) = w.pods.remove(&n) {
            p.obj["metadata"]["resourceVersion"] = json!(w.rv.to_string());
            emit(w, "DELETED", p.obj);
        }
    }
    for n in bumped {
        w.rv += 1;
        let rv = w.rv.to_string();
        if let Some(p) = w.pods.get_mut(&n) {
            let cname = p.obj["spec"]["containers"][0]["name"].clone();
            p.obj["status"] = json!({
                "phase": "Running",
                "podIP": "127.0.0.1",
                "containerStatuses": [{
                    "name": cname, "ready": true, "restartCount": 0,
                    "image": "rayproject/ray:2.60.0", "imageID": "", "started": true,
                    "state": {"running": {"startedAt": now_rfc3339()}},
                }],
            });
            p.obj["metadata"]["resourceVersion"] = json!(rv);
            let obj = p.obj.clone();
            emit(w, "MODIFIED", obj);
        }
    }
}

/// Whether a pod's labels match a selector (equality, inequality, existence; AND).
fn selects(selector: &str, labels: &Value) -> bool {
    selector
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .all(|term| {
            let term = term.trim();
            if let Some((k, v)) = term.split_once("!=") {
                labels[k.trim()].as_str() != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                labels[k.trim()].as_str() == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                labels[k.trim()].is_null()
            } else {
                !labels[term].is_null()
            }
        })
}

struct Responder(Arc<Shared>);

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        route(&self.0, req)
    }
}

fn body_len(v: &Value) -> u64 {
    serde_json::to_vec(v).map(|b| b.len() as u64).unwrap_or(0)
}

fn ok(s: &Shared, v: Value) -> ResponseTemplate {
    s.calls.bytes.fetch_add(body_len(&v), Ordering::Relaxed);
    ResponseTemplate::new(200).set_body_json(v)
}

fn route(s: &Shared, req: &Request) -> ResponseTemplate {
    let path = req.url.path().to_string();
    let query: BTreeMap<String, String> = req.url.query_pairs().into_owned().collect();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method.as_str();
    let ns_ok = |ns: &str| lock(&s.world).namespace == ns;
    match (method, segs.as_slice()) {
        (
            "GET" | "PATCH",
            [
                "apis",
                "ray.io",
                "v1",
                "namespaces",
                ns,
                "rayclusters",
                name,
            ],
        ) if ns_ok(ns) => {
            if method == "PATCH" {
                s.calls.patch_cluster.fetch_add(1, Ordering::Relaxed);
                return patch_cluster(s, req, name);
            }
            s.calls.get_cluster.fetch_add(1, Ordering::Relaxed);
            match lock(&s.world).clusters.get(*name).cloned() {
                Some(rc) => ok(s, rc),
                None => status(
                    404,
                    "NotFound",
                    &format!("rayclusters.ray.io \"{name}\" not found"),
                ),
            }
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods"])
            if ns_ok(ns)
                && matches!(query.get("watch").map(String::as_str), Some("true" | "1")) =>
        {
            s.calls.watch_pods.fetch_add(1, Ordering::Relaxed);
            watch_pods(s, &query)
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods"]) if ns_ok(ns) => {
            s.calls.list_pods.fetch_add(1, Ordering::Relaxed);
            if let Some(code) = s.faults.lock().ok().and_then(|mut f| f.list.pop_front()) {
                return status(code, reason_of(code), "injected");
            }
            list_pods(s, &query)
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) if ns_ok(ns) => {
            s.calls.get_pod.fetch_add(1, Ordering::Relaxed);
            match lock(&s.world).pods.get(*name).map(|p| p.obj.clone()) {
                Some(p) => ok(s, p),
                None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
            }
        }
        _ => status(
            404,
            "NotFound",
            &format!("the server could not find the requested resource ({method} {path})"),
        ),
    }
}

fn patch_cluster(s: &Shared, req: &Request, name: &str) -> ResponseTemplate {
    let ctype = req
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ctype.starts_with("application/json-patch+json") {
        return status(
            415,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json (got {ctype:?})"
            ),
        );
    }
    {
        let mut f = lock(&s.faults);
        if let Some(code) = f.patch.pop_front() {
            return status(code, reason_of(code), "injected");
        }
        if f.concurrent_edits > 0 {
            f.concurrent_edits -= 1;
            drop(f);
            let mut w = lock(&s.world);
            w.rv += 1;
            let rv = w.rv.to_string();
            if let Some(rc) = w.clusters.get_mut(name) {
                if rc["metadata"]["annotations"].is_null() {
                    rc["metadata"]["annotations"] = json!({});
                }
                rc["metadata"]["annotations"]["someone-else"] = json!(rv);
                rc["metadata"]["resourceVersion"] = json!(rv);
            }
        }
    }
    let ops: json_patch::Patch = match serde_json::from_slice(&req.body) {
        Ok(p) => p,
        Err(e) => return status(400, "BadRequest", &format!("json patch: {e}")),
    };
    let mut w = lock(&s.world);
    let Some(current) = w.clusters.get(name).cloned() else {
        return status(
            404,
            "NotFound",
            &format!("rayclusters.ray.io \"{name}\" not found"),
        );
    };
    let mut doc = current.clone();
    // A failed operation (a `test` among them) answers 422 with the server's generic
    // message, which does not say which operation failed (apiserver `applyJSPatch`).
    if json_patch::patch(&mut doc, &ops).is_err() {
        return status(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
    }
    // A `resourceVersion` in the patched object is a precondition of the update
    // ("Concurrency control and consistency"): another version answers 409.
    if doc["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
        s.calls.conflicts.fetch_add(1, Ordering::Relaxed);
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on rayclusters.ray.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
    }
    for key in ["name", "namespace", "uid"] {
        if doc["metadata"][key] != current["metadata"][key] {
            return status(
                422,
                "Invalid",
                &format!("metadata.{key}: Invalid value: field is immutable"),
            );
        }
    }
    for (i, g) in doc["spec"]["workerGroupSpecs"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !(g["replicas"].is_null() || g["replicas"].is_u64()) {
            return status(
                422,
                "Invalid",
                &format!(
                    "spec.workerGroupSpecs[{i}].replicas: Invalid value: must be an integer >= 0"
                ),
            );
        }
    }
    let old_groups = current["spec"]["workerGroupSpecs"].clone();
    for (i, g) in doc["spec"]["workerGroupSpecs"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let old = &old_groups[i]["scaleStrategy"]["workersToDelete"];
        for n in g["scaleStrategy"]["workersToDelete"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let known = old.as_array().is_some_and(|o| o.contains(n));
            if let (false, Some(n)) = (known, n.as_str()) {
                w.named_for_deletion.push(n.to_string());
            }
        }
        if g["replicas"] != old_groups[i]["replicas"] {
            let entry = (
                g["groupName"].as_str().unwrap_or("").to_string(),
                g["replicas"].as_u64().unwrap_or(0),
            );
            w.replicas_history.push(entry);
        }
    }
    w.rv += 1;
    doc["metadata"]["resourceVersion"] = json!(w.rv.to_string());
    if doc["spec"] != current["spec"] {
        let g = doc["metadata"]["generation"].as_u64().unwrap_or(1) + 1;
        doc["metadata"]["generation"] = json!(g);
    }
    w.clusters.insert(name.to_string(), doc.clone());
    drop(w);
    ok(s, doc)
}

fn list_pods(s: &Shared, q: &BTreeMap<String, String>) -> ResponseTemplate {
    let w = lock(&s.world);
    let rv_match = q.get("resourceVersionMatch");
    match (q.get("resourceVersion"), rv_match) {
        (None, Some(_)) => {
            return status(
                400,
                "BadRequest",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            );
        }
        (Some(rv), Some(m)) if m == "NotOlderThan" => {
            let Ok(want) = rv.parse::<u64>() else {
                return status(
                    400,
                    "BadRequest",
                    &format!("invalid resourceVersion {rv:?}"),
                );
            };
            if want > w.rv {
                return status(
                    504,
                    "Timeout",
                    &format!("Too large resource version: {want}, current: {}", w.rv),
                );
            }
        }
        (_, Some(m)) if m != "NotOlderThan" && m != "Exact" => {
            return status(
                400,
                "BadRequest",
                &format!("unknown resourceVersionMatch {m:?}"),
            );
        }
        _ => {}
    }
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    let all: Vec<&Value> = w
        .pods
        .values()
        .map(|p| &p.obj)
        .filter(|p| selects(&selector, &p["metadata"]["labels"]))
        .collect();
    let start = match q.get("continue") {
        None => 0,
        Some(c) => match c.strip_prefix("c-").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => n,
            None => return status(400, "BadRequest", "invalid continue token"),
        },
    };
    // Without `limit` the whole list comes in one answer; with one, at most that many
    // (and at most the cap: a server may answer fewer, with a `continue` token).
    let limit = match q.get("limit").and_then(|l| l.parse::<usize>().ok()) {
        Some(l) if l > 0 => l.min(w.page_cap),
        _ => usize::MAX,
    };
    let end = (start + limit).min(all.len());
    let items: Vec<Value> = all
        .get(start..end)
        .unwrap_or(&[])
        .iter()
        .map(|v| (*v).clone())
        .collect();
    let mut meta = json!({"resourceVersion": w.rv.to_string()});
    if end < all.len() {
        meta["continue"] = json!(format!("c-{end}"));
        meta["remainingItemCount"] = json!(all.len() - end);
    }
    drop(w);
    ok(
        s,
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}),
    )
}

/// A RayCluster as a user writes it (`ray.io/v1`): an autoscaled head group with no CPUs
/// and one worker group per `(name, minReplicas, maxReplicas, num-cpus)`, each pod joining
/// on loopback.
pub fn raycluster(name: &str, groups: &[(&str, u64, u64, u64)]) -> Value {
    let workers: Vec<Value> = groups
        .iter()
        .map(|(g, min, max, cpus)| {
            json!({
                "groupName": g,
                "replicas": min,
                "minReplicas": min,
                "maxReplicas": max,
                "rayStartParams": {"num-cpus": cpus.to_string(), "node-ip-address": "127.0.0.1"},
                "template": {"spec": {"containers": [{
                    "name": "ray-worker",
                    "image": "rayproject/ray:2.60.0",
                    "resources": {"limits": {"cpu": cpus.to_string(), "memory": "2Gi"}},
                }]}},
            })
        })
        .collect();
    json!({
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "rayVersion": "2.60.0",
            "enableInTreeAutoscaling": true,
            "autoscalerOptions": {"idleTimeoutSeconds": 60, "upscalingMode": "Default"},
            "headGroupSpec": {
                "rayStartParams": {"num-cpus": "0"},
                "template": {"spec": {"containers": [{
                    "name": "ray-head",
                    "image": "rayproject/ray:2.60.0",
                    "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
                }]}},
            },
            "workerGroupSpecs": workers,
        },
    })
}

/// A watch ("Efficient detection of changes"): the pod changes after `resourceVersion`
/// matching the selector, one JSON event per line. wiremock cannot hold a stream open, so
/// each answer ends at once, as a watch ends at its `timeoutSeconds`, and the client
/// watches again from the last version it saw; an answer with no change is a BOOKMARK of
/// the current version sent after 200 ms. A version older than the kept changes answers
/// an ERROR event with a 410 `Expired` Status, as the server does.
fn watch_pods(s: &Shared, q: &BTreeMap<String, String>) -> ResponseTemplate {
    let w = lock(&s.world);
    let from = match q.get("resourceVersion").map(|v| v.parse::<u64>()) {
        None => w.rv,
        Some(Ok(v)) => v,
        Some(Err(_)) => return status(400, "BadRequest", "invalid resourceVersion"),
    };
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    let mut lines: Vec<Value> = Vec::new();
    if from < w.events_start {
        lines.push(json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {from} ({})", w.events_start),
            "reason": "Expired", "code": 410,
        }}));
    } else {
        for (rv, kind, obj) in &w.events {
            if *rv > from && selects(&selector, &obj["metadata"]["labels"]) {
                lines.push(json!({"type": kind, "object": obj}));
            }
        }
    }
    let idle = lines.is_empty();
    if idle && q.get("allowWatchBookmarks").map(String::as_str) == Some("true") {
        lines.push(json!({"type": "BOOKMARK", "object": {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"resourceVersion": w.rv.to_string()},
        }}));
    }
    drop(w);
    let mut body = String::new();
    for l in &lines {
        body.push_str(&l.to_string());
        body.push('\n');
    }
    s.calls
        .bytes
        .fetch_add(body.len() as u64, Ordering::Relaxed);
    let r = ResponseTemplate::new(200).set_body_raw(body, "application/json");
    if idle {
        r.set_delay(Duration::from_millis(200))
    } else {
        r
    }
}
