//! The Kubernetes client: configured as every Kubernetes client is (in a pod, the service
//! account's token, refreshed from its file, and CA; elsewhere the kubeconfig of
//! `KUBECONFIG` or `~/.kube/config`), and the four calls the provider makes.

use std::time::Duration;

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
    config.read_timeout = Some(Duration::from_secs(60));
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

    /// Every pod of the cluster (`ray.io/cluster=<name>`), every page, at least as new as
    /// `not_older_than` when given.
    pub async fn list_pods(&self, not_older_than: Option<&str>) -> Result<Vec<Pod>, KubeRayError> {
        let selector = format!("{}={}", crate::mapping::LABEL_CLUSTER, self.name);
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        if let Some(rv) = not_older_than {
            params = params.at(rv).matching(VersionMatch::NotOlderThan);
        }
        let mut out = Vec::new();
        loop {
            let page = self.pods.list(&params).await.map_err(|e| {
                KubeRayError::call(format!("list pods {}/{selector}", self.namespace), e)
            })?;
            out.extend(page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(out),
            }
        }
    }
}
