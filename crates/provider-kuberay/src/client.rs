//! The Kubernetes client: configured as every Kubernetes client is (in a pod, the service
//! account's token, refreshed from its file, and CA; elsewhere the kubeconfig of
//! `KUBECONFIG` or `~/.kube/config`), the calls the provider makes, and [`PodCache`], the
//! cluster's pods kept by one list and a watch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{WatchEvent, WatchParams};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, VersionMatch};
use kube::{Client, Config};
use serde_json::Value;

use crate::errors::KubeRayError;

/// The RayCluster resource (`ray.io/v1`).
pub fn raycluster_resource() -> ApiResource {
    ApiResource {
        group: "ray.io".into(),
        version: "v1".into(),
        api_version: "ray.io/v1".into(),
        kind: "RayCluster".into(),
        plural: "rayclusters".into(),
    }
}

/// How many pods one list page carries.
pub const PAGE: u32 = 500;

/// A client configured from the environment: in-cluster when `KUBERNETES_SERVICE_HOST`
/// is set (a pod), else the kubeconfig. Plain `http://` is accepted only to loopback (a
/// local fake API server).
pub async fn from_environment() -> Result<Client, KubeRayError> {
    let mut config = if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        Config::incluster().map_err(|e| KubeRayError::Client(format!("in-cluster config: {e}")))?
    } else {
        Config::from_kubeconfig(&kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| {
                KubeRayError::Client(format!(
                    "no in-cluster service account and no usable kubeconfig (KUBECONFIG or ~/.kube/config): {e}"
                ))
            })?
    };
    let url = config.cluster_url.to_string();
    if url.starts_with("http://") && !rayscale_core::provider::is_loopback_http(&url) {
        return Err(KubeRayError::Client(format!(
            "refusing plain http to {url}: only loopback may be reached without TLS"
        )));
    }
    config.connect_timeout = Some(Duration::from_secs(10));
    // Longer than a watch lasts (290 s, ended by the server): a quiet watch is not cut.
    // Calls are bounded by the loop's deadlines.
    config.read_timeout = Some(Duration::from_secs(300));
    // No retries inside the client (its default backs off up to 15 times, minutes in
    // all): the loop retries every iteration, and a throttled or failed call is said.
    config.default_retry = false;
    Client::try_from(config).map_err(|e| KubeRayError::Client(e.to_string().replace('\n', " ")))
}

/// The calls on one RayCluster and its pods.
#[derive(Clone)]
pub struct KubeClient {
    clusters: Api<DynamicObject>,
    pods: Api<Pod>,
    namespace: String,
    name: String,
}

impl KubeClient {
    /// Calls on RayCluster `name` in `namespace`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        KubeClient {
            clusters: Api::namespaced_with(client.clone(), namespace, &raycluster_resource()),
            pods: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// `namespace/name`.
    pub fn cluster_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// GET the RayCluster, as JSON.
    pub async fn get_cluster(&self) -> Result<Value, KubeRayError> {
        let obj =
            self.clusters.get(&self.name).await.map_err(|e| {
                KubeRayError::call(format!("get RayCluster {}", self.cluster_ref()), e)
            })?;
        serde_json::to_value(&obj).map_err(|e| KubeRayError::Config {
            path: format!("RayCluster {}", self.cluster_ref()),
            message: format!("cannot be read as JSON: {e}"),
        })
    }

    /// JSON-patch the RayCluster; returns it as patched.
    pub async fn patch_cluster(&self, ops: Vec<Value>) -> Result<Value, KubeRayError> {
        let patch: json_patch::Patch =
            serde_json::from_value(Value::Array(ops)).map_err(|e| KubeRayError::Config {
                path: "patch".into(),
                message: format!("not a JSON patch: {e}"),
            })?;
        let obj = self
            .clusters
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
            .map_err(|e| {
                KubeRayError::call(format!("patch RayCluster {}", self.cluster_ref()), e)
            })?;
        serde_json::to_value(&obj).map_err(|e| KubeRayError::Config {
            path: format!("RayCluster {}", self.cluster_ref()),
            message: format!("cannot be read as JSON: {e}"),
        })
    }

    /// GET one pod's `resourceVersion` (a quorum read: the list after it is at least as
    /// new, as Ray's provider reads its head pod).
    pub async fn pod_resource_version(&self, pod: &str) -> Result<Option<String>, KubeRayError> {
        match self.pods.get_opt(pod).await {
            Ok(m) => Ok(m.and_then(|m| m.metadata.resource_version)),
            Err(e) => Err(KubeRayError::call(
                format!("get pod {}/{pod}", self.namespace),
                e,
            )),
        }
    }

    /// The label selector of the cluster's pods.
    pub fn selector(&self) -> String {
        format!("{}={}", crate::mapping::LABEL_CLUSTER, self.name)
    }

    /// Every pod of the cluster (`ray.io/cluster=<name>`), every page, at least as new as
    /// `not_older_than` when given.
    pub async fn list_pods(&self, not_older_than: Option<&str>) -> Result<Vec<Pod>, KubeRayError> {
        Ok(self.list_pods_at(not_older_than).await?.0)
    }

    /// [`Self::list_pods`] and the list's resourceVersion (where a watch starts).
    pub async fn list_pods_at(
        &self,
        not_older_than: Option<&str>,
    ) -> Result<(Vec<Pod>, String), KubeRayError> {
        let selector = self.selector();
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        if let Some(rv) = not_older_than {
            params = params.at(rv).matching(VersionMatch::NotOlderThan);
        }
        let mut out = Vec::new();
        let mut rv = String::new();
        loop {
            let page = self.pods.list(&params).await.map_err(|e| {
                KubeRayError::call(format!("list pods {}/{selector}", self.namespace), e)
            })?;
            out.extend(page.items);
            if rv.is_empty() {
                rv = page.metadata.resource_version.unwrap_or_default();
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok((out, rv)),
            }
        }
    }
}

/// The cluster's pods kept current by a watch (one list, then only the changes), so an
/// iteration reads no pod it has seen before. A watch delivers changes in order, so the
/// view never goes back in time (what Ray's not-older-than-the-head-pod list guards
/// against). A watch that ends is resumed from the last version seen; when it cannot be
/// (410: the version is too old; or the call fails), the next read lists again.
#[derive(Default)]
pub struct PodCache {
    state: Arc<Mutex<CacheState>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// One re-list at a time.
    relist: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct CacheState {
    pods: BTreeMap<String, Pod>,
    /// The watch runs and the map is complete.
    synced: bool,
    /// Which list the running watch follows; a watch of an older one writes nothing.
    epoch: u64,
    /// Why the last watch ended, said once by the next read.
    ended: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl PodCache {
    /// The pods: from the watched map, or (first, and after a watch failed) a full list
    /// at least as new as `not_older_than`, from which a new watch starts.
    pub async fn pods(
        &self,
        client: &KubeClient,
        not_older_than: Option<&str>,
    ) -> Result<Vec<Pod>, KubeRayError> {
        if let Some(p) = self.synced_pods() {
            return Ok(p);
        }
        let _one = self.relist.lock().await;
        // Another caller may have listed meanwhile.
        if let Some(p) = self.synced_pods() {
            return Ok(p);
        }
        if let Some(why) = lock(&self.state).ended.take() {
            tracing::info!("pod watch ended ({why}); listing again");
        }
        if let Some(t) = lock(&self.task).take() {
            t.abort();
        }
        let (pods, rv) = client.list_pods_at(not_older_than).await?;
        let epoch = {
            let mut s = lock(&self.state);
            s.pods = pods
                .iter()
                .filter_map(|p| p.metadata.name.clone().map(|n| (n, p.clone())))
                .collect();
            s.synced = true;
            s.epoch += 1;
            s.epoch
        };
        let state = self.state.clone();
        let api = client.pods.clone();
        let selector = client.selector();
        *lock(&self.task) = Some(tokio::spawn(watch(api, selector, rv, state, epoch)));
        Ok(pods)
    }

    fn synced_pods(&self) -> Option<Vec<Pod>> {
        let s = lock(&self.state);
        s.synced.then(|| s.pods.values().cloned().collect())
    }

    /// Whether the watched map is in use.
    pub fn synced(&self) -> bool {
        lock(&self.state).synced
    }
}

impl Drop for PodCache {
    fn drop(&mut self) {
        if let Some(t) = lock(&self.task).take() {
            t.abort();
        }
    }
}

/// Follows the pods from `rv` for list `epoch`: each watch that ends (the server's
/// timeout, a dropped connection) is followed by the next from the last version seen;
/// a 410 or a failed call ends it, and the next read lists again.
async fn watch(
    api: Api<Pod>,
    selector: String,
    mut rv: String,
    state: Arc<Mutex<CacheState>>,
    epoch: u64,
) {
    let params = WatchParams::default().labels(&selector).timeout(290);
    let mut dropped = 0u32;
    let why = loop {
        let mut stream = match api.watch(&params, &rv).await {
            Ok(s) => Box::pin(s),
            Err(e) => break e.to_string(),
        };
        let mut failed = None;
        while let Some(ev) = stream.next().await {
            let mut s = lock(&state);
            if s.epoch != epoch {
                return;
            }
            match ev {
                Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) => {
                    if let Some(v) = &p.metadata.resource_version {
                        rv = v.clone();
                    }
                    if let Some(n) = p.metadata.name.clone() {
                        s.pods.insert(n, p);
                    }
                }
                Ok(WatchEvent::Deleted(p)) => {
                    if let Some(v) = &p.metadata.resource_version {
                        rv = v.clone();
                    }
                    if let Some(n) = &p.metadata.name {
                        s.pods.remove(n);
                    }
                }
                Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                Ok(WatchEvent::Error(st)) => {
                    failed = Some(format!("{} {}: {}", st.code, st.reason, st.message));
                    break;
                }
                Err(e) => {
                    // A broken stream: resume from the last version, a few times.
                    dropped += 1;
                    if dropped > 3 {
                        failed = Some(e.to_string());
                    }
                    break;
                }
            }
            dropped = 0;
        }
        if let Some(f) = failed {
            break f;
        }
    };
    let mut s = lock(&state);
    if s.epoch == epoch {
        s.synced = false;
        s.ended = Some(why.replace('\n', " "));
    }
}
