//! [`NodeProviderAdapter`]: a v1 [`NodeProvider`] behind the
//! [`CloudInstanceProvider`] contract, with Ray 2.60's `NodeProviderAdapter` semantics and
//! the contract's idempotency.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use futures_util::StreamExt;
use rayscale_core::config::{ClusterConfig, NodeTypeConfig};
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, CloudInstanceState, LaunchOutcome, LaunchRequest,
    ProviderError, ProviderErrorKind, ProviderOp, tags,
};
use tokio::sync::oneshot;

use crate::config::AdapterConfig;
use crate::errors::AdapterError;
use crate::lock;
use crate::mapping::{Listed, labels_of, launch_tags, resources_of, to_instance};
use crate::v1::{NodeProvider, Tags};

/// Removes a launch request from `launching` when dropped (the launch returned early, its
/// caller gave up, or its task ended).
struct Launching {
    shared: Arc<Shared>,
    request_id: String,
}

impl Drop for Launching {
    fn drop(&mut self) {
        lock(&self.shared.launching).remove(&self.request_id);
    }
}

/// Shared with the background launches and installs.
#[derive(Default)]
struct Shared {
    /// Errors for `poll_errors`.
    errors: Mutex<Vec<ProviderError>>,
    /// Launch requests whose create calls are running.
    launching: Mutex<BTreeSet<String>>,
    /// Instances being installed.
    installing: Mutex<BTreeSet<String>>,
}

/// A v1 node provider as a [`CloudInstanceProvider`] (see the crate docs).
pub struct NodeProviderAdapter {
    v1: Arc<dyn NodeProvider>,
    cfg: AdapterConfig,
    node_types: RwLock<HashMap<String, NodeTypeConfig>>,
    shared: Arc<Shared>,
}

impl NodeProviderAdapter {
    /// An adapter over `v1` for `config`'s node types.
    pub fn new(v1: Arc<dyn NodeProvider>, cfg: AdapterConfig, config: &ClusterConfig) -> Self {
        NodeProviderAdapter {
            v1,
            cfg,
            node_types: RwLock::new(types_of(config)),
            shared: Arc::new(Shared::default()),
        }
    }

    /// The v1 provider.
    pub fn v1(&self) -> &Arc<dyn NodeProvider> {
        &self.v1
    }

    fn node_type(&self, name: &str) -> Option<NodeTypeConfig> {
        self.node_types
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    fn error(&self, op: ProviderOp, e: &AdapterError, node_type: &str) -> ProviderError {
        ProviderError::new(
            op,
            e.kind(node_type),
            format!("{} provider: {e}", self.v1.provider_type()),
        )
    }

    async fn request_nodes(&self, request_id: &str) -> Result<usize, AdapterError> {
        let filter = Tags::from([(tags::LAUNCH_REQUEST.to_string(), request_id.to_string())]);
        Ok(self.v1.non_terminated_nodes(&filter).await?.len())
    }
}

fn types_of(config: &ClusterConfig) -> HashMap<String, NodeTypeConfig> {
    config
        .node_types
        .iter()
        .map(|t| (t.name.clone(), t.clone()))
        .collect()
}

/// What one create call made (the ids it reported, if any).
type Created = Result<Option<Vec<String>>, AdapterError>;

/// One launch's create calls, run in the background (see [`NodeProviderAdapter::launch`]).
struct Launch {
    v1: Arc<dyn NodeProvider>,
    request: LaunchRequest,
    node_type: NodeTypeConfig,
    tags: Tags,
    existing: usize,
    to_make: u64,
    batch: u64,
    concurrency: usize,
    provider_type: String,
}

impl Launch {
    async fn run(self) -> LaunchOutcome {
        let resources = resources_of(&self.node_type);
        let labels = labels_of(&self.node_type);
        let mut sizes = Vec::new();
        let mut left = self.to_make;
        while left > 0 {
            let n = left.min(self.batch.max(1));
            sizes.push(n);
            left -= n;
        }
        let node_config = self.node_type.node_config.clone();
        let results: Vec<Created> = futures_util::stream::iter(sizes.into_iter().map(|n| {
            let v1 = self.v1.clone();
            let (node_config, tags, resources, labels) =
                (&node_config, &self.tags, &resources, &labels);
            async move {
                v1.create_node_with_resources_and_labels(node_config, tags, n, resources, labels)
                    .await
            }
        }))
        .buffer_unordered(self.concurrency.max(1))
        .collect()
        .await;
        let t = &self.request.node_type;
        let mut reported: Vec<String> = Vec::new();
        let mut all_reported = true;
        let mut first_error: Option<AdapterError> = None;
        for r in results {
            match r {
                Ok(Some(ids)) => reported.extend(ids),
                Ok(None) => all_reported = false,
                Err(e) => {
                    tracing::warn!("launching {t} (request {}): {e}", self.request.request_id);
                    first_error.get_or_insert(e);
                }
            }
        }
        // What was made: the ids the provider returned, or, when a call returned none,
        // what the request's tag now counts.
        // A create that failed (a timeout, a killed child) may have made nodes all the
        // same: count by the tag then too.
        let made = if all_reported && first_error.is_none() {
            reported.len() as u64
        } else {
            let filter = Tags::from([(
                tags::LAUNCH_REQUEST.to_string(),
                self.request.request_id.clone(),
            )]);
            match self.v1.non_terminated_nodes(&filter).await {
                Ok(ids) => ids.len().saturating_sub(self.existing) as u64,
                // Unknown: claim nothing fell short; the reconciler's request timeout
                // requeues what never shows.
                Err(_) => self.to_make,
            }
        };
        let instances = reported
            .iter()
            .map(|id| {
                CloudInstance::worker(id.clone(), t.clone(), Some(&self.request.request_id))
                    .in_state(CloudInstanceState::Pending)
            })
            .collect();
        let short = self.to_make.saturating_sub(made);
        let shortfall = (short > 0).then(|| {
            let op = ProviderOp::Launch {
                request_id: self.request.request_id.clone(),
                node_type: t.clone(),
                count: short,
            };
            match &first_error {
                Some(e) => ProviderError::new(
                    op,
                    e.kind(t),
                    format!(
                        "{} provider: {short} of {} x {t} not made: {e}",
                        self.provider_type, self.to_make
                    ),
                ),
                // Ray's `local` provider makes fewer when no host is free, silently.
                None => ProviderError::new(
                    op,
                    ProviderErrorKind::Capacity {
                        node_type: t.clone(),
                        zone: None,
                    },
                    format!(
                        "{} provider made {made} of {} x {t}: no more nodes available",
                        self.provider_type, self.to_make
                    ),
                ),
            }
        });
        LaunchOutcome {
            instances,
            shortfall,
        }
    }
}

#[async_trait::async_trait]
impl CloudInstanceProvider for NodeProviderAdapter {
    fn provider_type(&self) -> &str {
        self.v1.provider_type()
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        let nodes = self
            .v1
            .describe(&Tags::new())
            .await
            .map_err(|e| self.error(ProviderOp::List, &e, ""))?;
        let mut out = Vec::with_capacity(nodes.len());
        for n in &nodes {
            match to_instance(n) {
                Listed::Node(c) => out.push(c),
                Listed::Unmanaged => {}
                Listed::Invalid(line) => tracing::warn!("{line}"),
            }
        }
        Ok(out)
    }

    /// Counts the request's nodes (its tag) and makes only the rest, in batches of
    /// `batch`, `concurrent_batches` at once; waits up to `launch_wait` for them and
    /// reports the outcome, else returns and reports a shortfall later through
    /// `poll_errors`. A request whose creates still run is not sent again.
    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        let op = || ProviderOp::Launch {
            request_id: request.request_id.clone(),
            node_type: request.node_type.clone(),
            count: request.count,
        };
        let Some(node_type) = self.node_type(&request.node_type) else {
            return Err(ProviderError::new(
                op(),
                ProviderErrorKind::InvalidConfig,
                format!("node type {:?} is not in the config", request.node_type),
            ));
        };
        if !lock(&self.shared.launching).insert(request.request_id.clone()) {
            return Ok(LaunchOutcome::accepted());
        }
        let guard = Launching {
            shared: self.shared.clone(),
            request_id: request.request_id.clone(),
        };
        let existing = self
            .request_nodes(&request.request_id)
            .await
            .map_err(|e| self.error(op(), &e, &request.node_type))?;
        let to_make = request.count.saturating_sub(existing as u64);
        if to_make == 0 {
            return Ok(LaunchOutcome::accepted());
        }
        let launch = Launch {
            v1: self.v1.clone(),
            tags: launch_tags(
                &self.cfg.cluster_name,
                &request.node_type,
                &request.request_id,
                &request.launch_config_hash,
            ),
            request: request.clone(),
            node_type,
            existing,
            to_make,
            batch: self.cfg.batch,
            concurrency: self.cfg.concurrent_batches,
            provider_type: self.v1.provider_type().to_string(),
        };
        let (tx, rx) = oneshot::channel::<LaunchOutcome>();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let outcome = launch.run().await;
            drop(guard);
            // Nobody waits any more (the wait ran out, or the caller gave up): the
            // shortfall, if any, comes back from poll_errors.
            if let Err(outcome) = tx.send(outcome)
                && let Some(short) = outcome.shortfall
            {
                lock(&shared.errors).push(short);
            }
        });
        let mut rx = rx;
        match tokio::time::timeout(self.cfg.launch_wait, &mut rx).await {
            Ok(Ok(outcome)) => Ok(outcome),
            // The task ended without an answer (it panicked): the reconciler's request
            // timeout requeues what never shows.
            Ok(Err(_)) => Ok(LaunchOutcome::accepted()),
            Err(_) => {
                // Closed first, so an outcome is either taken here or refused to the task
                // (which then hands its shortfall to poll_errors), never lost between.
                rx.close();
                Ok(rx.try_recv().unwrap_or_else(|_| LaunchOutcome::accepted()))
            }
        }
    }

    async fn terminate(
        &self,
        cloud_instance_ids: &[String],
        request_id: &str,
    ) -> Result<(), ProviderError> {
        let _ = request_id;
        let first = cloud_instance_ids.first().cloned().unwrap_or_default();
        let nodes = self.v1.describe(&Tags::new()).await.map_err(|e| {
            self.error(
                ProviderOp::Terminate {
                    cloud_instance_id: first.clone(),
                },
                &e,
                "",
            )
        })?;
        let heads: BTreeSet<&str> = nodes
            .iter()
            .filter(|n| {
                n.tags.get(tags::NODE_KIND).map(String::as_str) == Some(tags::NODE_KIND_HEAD)
            })
            .map(|n| n.id.as_str())
            .collect();
        if let Some(h) = cloud_instance_ids
            .iter()
            .find(|id| heads.contains(id.as_str()))
        {
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: h.clone(),
                },
                ProviderErrorKind::InvalidConfig,
                format!("{h} is the head: the autoscaler never terminates it"),
            ));
        }
        let alive: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        let ids: Vec<String> = cloud_instance_ids
            .iter()
            .filter(|id| alive.contains(id.as_str()))
            .cloned()
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.v1.terminate_nodes(&ids).await.map_err(|e| {
            self.error(
                ProviderOp::Terminate {
                    cloud_instance_id: ids[0].clone(),
                },
                &e,
                "",
            )
        })
    }

    async fn poll_errors(&self) -> Vec<ProviderError> {
        std::mem::take(&mut *lock(&self.shared.errors))
    }

    fn installs_ray(&self) -> bool {
        self.cfg.installs_ray
    }

    /// Runs Ray's node updater for the instance in the background: up to
    /// `install_attempts` attempts, `install_retry_interval` apart and doubling (Ray's
    /// `ThreadedRayInstaller`); the last failure goes to `poll_errors`.
    async fn install_ray(
        &self,
        cloud_instance_id: &str,
        node_type: &str,
    ) -> Result<(), ProviderError> {
        if !self.cfg.installs_ray {
            return Err(ProviderError::new(
                ProviderOp::InstallRay {
                    cloud_instance_id: cloud_instance_id.to_string(),
                },
                ProviderErrorKind::InvalidConfig,
                "provider.disable_node_updaters is set: nodes start Ray themselves",
            ));
        }
        if !lock(&self.shared.installing).insert(cloud_instance_id.to_string()) {
            return Ok(());
        }
        let v1 = self.v1.clone();
        let shared = self.shared.clone();
        let (id, t) = (cloud_instance_id.to_string(), node_type.to_string());
        let head_ip = self.cfg.head_ip.clone();
        let attempts = self.cfg.install_attempts.max(1);
        let mut wait = self.cfg.install_retry_interval;
        let provider_type = self.v1.provider_type().to_string();
        tokio::spawn(async move {
            let mut last = None;
            for attempt in 1..=attempts {
                match v1.install_ray(&id, &t, &head_ip).await {
                    Ok(()) => {
                        tracing::info!("ray installed on {id} ({t})");
                        last = None;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(
                            "installing ray on {id}: attempt {attempt} of {attempts} failed: {e}"
                        );
                        // An attempt that timed out may still run in the child (a thread
                        // cannot be stopped): a second updater on the node would race it.
                        let last_try = matches!(
                            e,
                            AdapterError::Unsupported { .. } | AdapterError::Timeout { .. }
                        );
                        last = Some(e);
                        if last_try || attempt == attempts {
                            break;
                        }
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                }
            }
            lock(&shared.installing).remove(&id);
            if let Some(e) = last {
                lock(&shared.errors).push(ProviderError::new(
                    ProviderOp::InstallRay {
                        cloud_instance_id: id.clone(),
                    },
                    e.kind(&t),
                    format!("{provider_type} provider: installing ray on {id} failed: {e}"),
                ));
            }
        });
        Ok(())
    }

    async fn reconfigure(&self, config: &ClusterConfig) -> Result<(), ProviderError> {
        *self.node_types.write().unwrap_or_else(|p| p.into_inner()) = types_of(config);
        Ok(())
    }
}
