//! [`KubeRayProvider`]: the contract on a RayCluster. Launches raise a worker group's
//! `replicas`; terminations name pods in the group's `scaleStrategy.workersToDelete` and
//! lower `replicas`; KubeRay's operator makes and deletes the pods, and the next list
//! observes them. Every patch starts with a `test` of the `resourceVersion` read, so a
//! concurrent edit (a user, the operator) is never overwritten: it is read again and
//! tried again.

use std::sync::Mutex;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, LaunchOutcome, LaunchRequest, ProviderError,
    ProviderErrorKind, ProviderOp,
};
use serde_json::Value;
use tokio::time::Instant;

use crate::client::{KubeClient, PodCache};
use crate::config::KubeRayConfig;
use crate::errors::KubeRayError;
use crate::mapping::{self, LaunchPlan, Observed};

/// The `provider.type` this crate serves.
pub const PROVIDER_TYPE: &str = "kuberay";

/// What the last calls left behind.
#[derive(Default)]
struct State {
    /// The RayCluster as last read or patched, and when.
    cluster: Option<(Instant, Value)>,
    /// What the last list saw.
    observed: Observed,
    /// The head pod's name, learned from a list.
    head_pod: Option<String>,
}

/// Ray worker pods of one RayCluster.
pub struct KubeRayProvider {
    client: KubeClient,
    config: KubeRayConfig,
    state: Mutex<State>,
    cache: PodCache,
    /// One patch at a time: the loop runs effects concurrently, and patches computed from
    /// the same read would only conflict with each other.
    patching: tokio::sync::Mutex<()>,
}

impl KubeRayProvider {
    /// A provider on `client` for the RayCluster of `config`.
    pub fn new(client: kube::Client, config: KubeRayConfig) -> Self {
        KubeRayProvider {
            client: KubeClient::new(client, &config.namespace, &config.cluster_name),
            config,
            state: Mutex::new(State::default()),
            cache: PodCache::default(),
            patching: tokio::sync::Mutex::new(()),
        }
    }

    /// A provider with a client configured from the environment (in-cluster or
    /// kubeconfig). Nothing is read yet: the first [`Self::cluster_config`] fails in one
    /// line on a wrong name or a missing permission.
    pub async fn from_environment(config: KubeRayConfig) -> Result<Self, KubeRayError> {
        let client = crate::client::from_environment().await?;
        Ok(KubeRayProvider::new(client, config))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn remember(&self, rc: &Value) {
        self.lock().cluster = Some((Instant::now(), rc.clone()));
    }

    /// The RayCluster, read now.
    pub async fn cluster(&self) -> Result<Value, KubeRayError> {
        let rc = self.client.get_cluster().await?;
        self.remember(&rc);
        Ok(rc)
    }

    /// The RayCluster read within the reuse window, or read now.
    async fn recent_cluster(&self) -> Result<Value, KubeRayError> {
        let cached =
            self.lock().cluster.as_ref().and_then(|(at, rc)| {
                (at.elapsed() <= self.config.reuse_window).then(|| rc.clone())
            });
        match cached {
            Some(rc) => Ok(rc),
            None => self.cluster().await,
        }
    }

    /// Ray's cluster config of the RayCluster as it is now (read every iteration, as
    /// Ray's autoscaler does), with the optional `rayscale:` block of a cluster YAML.
    pub async fn cluster_config(
        &self,
        rayscale: Option<&Value>,
    ) -> Result<ClusterConfig, KubeRayError> {
        let rc = self.cluster().await?;
        config_of(&rc, rayscale, &self.client.cluster_ref())
    }

    /// Patches with up to `conflict_retries` re-reads; `plan` makes the patch from the
    /// RayCluster and the last list, or decides there is none (its `Err` is returned).
    async fn patch_with_retries<T>(
        &self,
        mut plan: impl FnMut(&Value, &Observed) -> Result<(Option<Vec<Value>>, T), KubeRayError>,
    ) -> Result<T, KubeRayError> {
        let _one_at_a_time = self.patching.lock().await;
        let mut attempt = 0;
        loop {
            let rc = if attempt == 0 {
                self.recent_cluster().await?
            } else {
                self.cluster().await?
            };
            let obs = self.lock().observed.clone();
            let (patch, out) = match plan(&rc, &obs) {
                Ok(p) => p,
                // A refusal is decided on a fresh read, never on a reused one.
                Err(_) if attempt == 0 => {
                    attempt += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Some(patch) = patch else {
                return Ok(out);
            };
            match self.client.patch_cluster(patch).await {
                Ok(rc) => {
                    self.remember(&rc);
                    return Ok(out);
                }
                Err(e) if e.is_conflict() && attempt < self.config.conflict_retries => {
                    tracing::info!(
                        "RayCluster {} changed since it was read; reading it again",
                        self.client.cluster_ref()
                    );
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Ray's config of a RayCluster object.
pub fn config_of(
    rc: &Value,
    rayscale: Option<&Value>,
    origin: &str,
) -> Result<ClusterConfig, KubeRayError> {
    let v = mapping::cluster_config_value(rc, rayscale)?;
    ClusterConfig::from_value(&v, "").map_err(|e| KubeRayError::Config {
        path: format!("RayCluster {origin}"),
        message: format!("as a Ray config: {e}"),
    })
}

/// A group at `maxReplicas` gives no more nodes now: a capacity error of its type, so
/// the type is unavailable for a while and the expander falls back to other groups (Ray
/// fails such launches, and its reconciler marks the type unavailable alike).
fn capped(node_type: &str) -> ProviderErrorKind {
    ProviderErrorKind::Capacity {
        node_type: node_type.to_string(),
        zone: None,
    }
}

fn launch_op(r: &LaunchRequest, count: u64) -> ProviderOp {
    ProviderOp::Launch {
        request_id: r.request_id.clone(),
        node_type: r.node_type.clone(),
        count,
    }
}

#[async_trait::async_trait]
impl CloudInstanceProvider for KubeRayProvider {
    fn provider_type(&self) -> &str {
        PROVIDER_TYPE
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        let rc = self
            .recent_cluster()
            .await
            .map_err(|e| e.into_provider(ProviderOp::List))?;
        // A list (every time, or the watch's first) is at least as new as the head pod,
        // as Ray's; a watch after it never goes back in time.
        let rv = if self.config.watch_pods && self.cache.synced() {
            None
        } else {
            let head = self
                .config
                .head_pod_name
                .clone()
                .or_else(|| self.lock().head_pod.clone());
            match head {
                Some(h) => self
                    .client
                    .pod_resource_version(&h)
                    .await
                    .map_err(|e| e.into_provider(ProviderOp::List))?,
                None => None,
            }
        };
        let pods = if self.config.watch_pods {
            self.cache.pods(&self.client, rv.as_deref()).await
        } else {
            self.client.list_pods(rv.as_deref()).await
        }
        .map_err(|e| e.into_provider(ProviderOp::List))?;
        let views: Vec<_> = pods.iter().filter_map(mapping::pod_view).collect();
        let observed = Observed::from_views(&views);
        let instances: Vec<CloudInstance> = views.into_iter().filter_map(|v| v.instance).collect();
        {
            let mut s = self.lock();
            s.head_pod = observed.heads.iter().next().cloned();
            s.observed = observed.clone();
        }
        // Groups whose `workersToDelete` pods are all gone get their list cleared (one
        // guarded patch; a conflict waits for the next list).
        if let Some(patch) = mapping::plan_clear(&rc, &observed) {
            let _one_at_a_time = self.patching.lock().await;
            match self.client.patch_cluster(patch).await {
                Ok(rc) => {
                    self.remember(&rc);
                    tracing::info!("cleared workersToDelete of groups whose pods are gone");
                }
                Err(e) if e.is_conflict() => {}
                Err(e) => tracing::warn!("clearing workersToDelete: {e}"),
            }
        }
        Ok(instances)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        let r = request;
        // A delete the last list saw pending may be over by now: look again before the
        // guard refuses.
        let pending = {
            let s = self.lock();
            let rc = s.cluster.as_ref().map(|(_, rc)| rc.clone());
            rc.is_some_and(|rc| {
                mapping::groups(&rc)
                    .iter()
                    .any(|g| g.name == r.node_type && !s.observed.pending_deletes(g).is_empty())
            })
        };
        if pending {
            self.list()
                .await
                .map_err(|e| e.for_op(launch_op(r, r.count)))?;
        }
        let rejected = self
            .patch_with_retries(|rc, obs| {
                let group = mapping::groups(rc)
                    .into_iter()
                    .find(|g| g.name == r.node_type)
                    .ok_or_else(|| KubeRayError::Config {
                        path: format!("RayCluster {}", self.client.cluster_ref()),
                        message: format!("has no worker group {:?}", r.node_type),
                    })?;
                let pending = obs.pending_deletes(&group);
                if !pending.is_empty() {
                    return Err(KubeRayError::Call {
                        call: format!("scale up worker group {:?}", group.name),
                        status: None,
                        kind: ProviderErrorKind::Transient,
                        message: format!(
                            "waiting for {} pod(s) named in its workersToDelete to go ({})",
                            pending.len(),
                            pending.join(", ")
                        ),
                        source: None,
                    });
                }
                match mapping::plan_launch(rc, obs, &group, &r.request_id, r.count) {
                    LaunchPlan::Replayed => Ok((None, 0)),
                    LaunchPlan::Expired => Err(KubeRayError::Call {
                        call: format!("scale up worker group {:?}", group.name),
                        status: None,
                        kind: ProviderErrorKind::Transient,
                        message: format!(
                            "launch request {} is older than the launch ledger remembers: it \
                             may have been applied, so it is not applied again",
                            r.request_id
                        ),
                        source: None,
                    }),
                    LaunchPlan::Capped => Err(KubeRayError::Call {
                        call: format!("scale up worker group {:?}", group.name),
                        status: None,
                        kind: capped(&r.node_type),
                        message: format!(
                            "at maxReplicas ({}): {} node(s) rejected",
                            group.max_replicas.unwrap_or_default(),
                            r.count
                        ),
                        source: None,
                    }),
                    LaunchPlan::Patch {
                        patch, rejected, ..
                    } => Ok((Some(patch), rejected)),
                }
            })
            .await
            .map_err(|e| e.into_provider(launch_op(r, r.count)))?;
        let mut out = LaunchOutcome::accepted();
        if rejected > 0 {
            out.shortfall = Some(ProviderError::new(
                launch_op(r, rejected),
                capped(&r.node_type),
                format!(
                    "worker group {:?}: {rejected} node(s) over maxReplicas left out",
                    r.node_type
                ),
            ));
        }
        Ok(out)
    }

    async fn terminate(&self, ids: &[String], request_id: &str) -> Result<(), ProviderError> {
        // Pods this process has not listed yet: list first (the pods' groups come from
        // their labels).
        let unknown = {
            let s = self.lock();
            ids.iter().any(|i| !s.observed.existing.contains(i))
        };
        if unknown {
            self.list().await.map_err(|e| {
                e.for_op(ProviderOp::Terminate {
                    cloud_instance_id: ids.first().cloned().unwrap_or_default(),
                })
            })?;
        }
        let heads: Vec<String> = {
            let s = self.lock();
            ids.iter()
                .filter(|i| s.observed.heads.contains(*i))
                .cloned()
                .collect()
        };
        if let Some(h) = heads.first() {
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: h.clone(),
                },
                ProviderErrorKind::InvalidConfig,
                format!(
                    "{h} is the head pod: KubeRay's operator owns it, rayscale never deletes it"
                ),
            ));
        }
        tracing::debug!("terminate request {request_id}: {ids:?}");
        let first = ids.first().cloned().unwrap_or_default();
        self.patch_with_retries(|rc, obs| {
            let mut patch = vec![mapping::guard(rc)];
            for g in mapping::groups(rc) {
                if let Some(ops) = mapping::plan_delete(rc, obs, &g, ids) {
                    patch.extend(ops.into_iter().skip(1));
                }
            }
            Ok(((patch.len() > 1).then_some(patch), ()))
        })
        .await
        .map_err(|e| {
            e.into_provider(ProviderOp::Terminate {
                cloud_instance_id: first,
            })
        })
    }

    async fn poll_errors(&self) -> Vec<ProviderError> {
        // Every call reports its own failure; pods that fail show in the list.
        Vec::new()
    }
}
