//! `impl CloudInstanceProvider` for EC2: list (every page, or an error), launch
//! (idempotent by request id: instances tagged with it are counted first, the
//! `ClientToken` derives from it, stopped workers are restarted before new ones are
//! made), terminate (batched; gone is success; stopped instead when workers are cached).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types as ec2;
use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, LaunchOutcome, LaunchRequest, NodeKind, ProviderError,
    ProviderErrorKind, ProviderOp, cloud, idempotency_token, tags,
};

use crate::AwsError;
use crate::client::{no_retries, sdk_error};
use crate::config::AwsConfig;
use crate::errors::{Class, classify, missing_instance_ids};
use crate::mapping::{self, Placement};
use crate::passthrough;

mod launch;

/// `provider.type` of this provider.
pub const PROVIDER_TYPE: &str = "aws";

/// EC2's limit of instance ids per Terminate/Stop/Start call (Ray's
/// `max_terminate_nodes`).
pub const MAX_IDS_PER_CALL: usize = 1000;

/// How often a throttled RunInstances/StartInstances is tried in all (the SDK's own
/// retries are off for them).
const THROTTLE_TRIES: u32 = 4;

/// EC2 API calls made, by action (for benchmarks and tests: calls grow with batches, not
/// with nodes).
#[derive(Debug, Default)]
pub struct CallCounts {
    /// DescribeInstances pages.
    pub describe: AtomicU64,
    /// RunInstances.
    pub run: AtomicU64,
    /// StartInstances.
    pub start: AtomicU64,
    /// StopInstances.
    pub stop: AtomicU64,
    /// TerminateInstances.
    pub terminate: AtomicU64,
    /// CreateTags.
    pub create_tags: AtomicU64,
}

impl CallCounts {
    /// `(action, count)` for every action, in a stable order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        [
            ("DescribeInstances", &self.describe),
            ("RunInstances", &self.run),
            ("StartInstances", &self.start),
            ("StopInstances", &self.stop),
            ("TerminateInstances", &self.terminate),
            ("CreateTags", &self.create_tags),
        ]
        .into_iter()
        .map(|(n, c)| (n, c.load(Ordering::Relaxed)))
        .collect()
    }
}

/// Ray worker nodes (and the head) as EC2 instances.
pub struct AwsProvider {
    client: Client,
    state: RwLock<Arc<State>>,
    /// The head's address for workers' boot scripts; `None`: workers get only the
    /// user's `UserData` (tests of the API alone).
    head_ip: Option<String>,
    calls: CallCounts,
}

/// What one config load gives: the AWS view and each worker type's boot script.
struct State {
    cfg: AwsConfig,
    boot: BTreeMap<String, String>,
}

impl AwsProvider {
    /// A provider for `config` on `client`. Every node type's `node_config` is mapped
    /// once here, so a bad one fails at load, naming its path. With `head_ip`, every
    /// worker boots with rayscale's boot script (joining the head at `head_ip`); without,
    /// workers get only the user's `UserData`.
    pub fn new(
        client: Client,
        config: &ClusterConfig,
        head_ip: Option<&str>,
    ) -> Result<Self, AwsError> {
        let state = load(config, head_ip)?;
        Ok(AwsProvider {
            client,
            state: RwLock::new(Arc::new(state)),
            head_ip: head_ip.map(str::to_string),
            calls: CallCounts::default(),
        })
    }

    /// A provider whose client comes from the standard AWS chain (`provider.region`
    /// overriding the region); see [`new`](Self::new) for `head_ip`.
    pub async fn from_environment(
        config: &ClusterConfig,
        head_ip: Option<&str>,
    ) -> Result<Self, AwsError> {
        let state = load(config, head_ip)?;
        let client = crate::client::from_environment(
            state.cfg.region.as_deref(),
            state.cfg.credentials.as_ref(),
        )
        .await?;
        Ok(AwsProvider {
            client,
            state: RwLock::new(Arc::new(state)),
            head_ip: head_ip.map(str::to_string),
            calls: CallCounts::default(),
        })
    }

    /// The EC2 calls made so far.
    pub fn calls(&self) -> &CallCounts {
        &self.calls
    }

    fn state(&self) -> Arc<State> {
        match self.state.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Every instance of the cluster in `states`, with `extra` filters, across every page.
    async fn describe(
        &self,
        cfg: &AwsConfig,
        states: &[&str],
        extra: Vec<ec2::Filter>,
    ) -> Result<Vec<ec2::Instance>, AwsError> {
        let mut req = self
            .client
            .describe_instances()
            .filters(filter(
                &format!("tag:{}", tags::CLUSTER_NAME),
                [cfg.cluster_name.as_str()],
            ))
            .filters(filter("instance-state-name", states.iter().copied()));
        for f in extra {
            req = req.filters(f);
        }
        let mut pages = req.into_paginator().page_size(1000).send();
        let mut out = Vec::new();
        loop {
            self.calls.describe.fetch_add(1, Ordering::Relaxed);
            match pages.next().await {
                None => break,
                Some(Ok(page)) => {
                    for r in page.reservations() {
                        out.extend(r.instances().iter().cloned());
                    }
                }
                Some(Err(e)) => return Err(sdk_error("DescribeInstances", e, "", None)),
            }
        }
        // The last poll found no page: it was not a call.
        self.calls.describe.fetch_sub(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Stops (cached, non-spot) or terminates `ids`: workers, or with `head` the head
    /// alone. Ids not of the cluster, or gone, are left alone (gone is success).
    async fn terminate_inner(&self, ids: &[String], head: bool) -> Result<(), ProviderError> {
        if ids.is_empty() {
            return Ok(());
        }
        let state = self.state();
        let cfg = &state.cfg;
        let first = ProviderOp::Terminate {
            cloud_instance_id: ids[0].clone(),
        };
        // What the cluster has of these (an id of another cluster, or gone, is left
        // alone: gone is success).
        let mut known: BTreeMap<String, ec2::Instance> = BTreeMap::new();
        for chunk in ids.chunks(200) {
            let found = self
                .describe(
                    cfg,
                    &["pending", "running", "stopping", "stopped"],
                    vec![filter("instance-id", chunk.iter().map(String::as_str))],
                )
                .await
                .map_err(|e| e.into_provider(first.clone()))?;
            for i in found {
                if let Some(id) = i.instance_id() {
                    known.insert(id.to_string(), i);
                }
            }
        }
        let want = if head {
            NodeKind::Head
        } else {
            NodeKind::Worker
        };
        if let Some((id, _)) = known
            .iter()
            .find(|(_, i)| mapping::cloud_instance(i).is_none_or(|c| c.kind != want))
        {
            return Err(cloud::refuse_terminate(id, head));
        }
        let mut stop = Vec::new();
        let mut terminate = Vec::new();
        for (id, i) in &known {
            if cfg.cache_stopped_nodes && !mapping::is_spot(i) {
                if i.state().and_then(|s| s.name()) != Some(&ec2::InstanceStateName::Stopped) {
                    stop.push(id.clone());
                }
            } else {
                terminate.push(id.clone());
            }
        }
        for chunk in terminate.chunks(MAX_IDS_PER_CALL) {
            self.stop_or_terminate(chunk, false)
                .await
                .map_err(|e| e.into_provider(op_for(chunk)))?;
        }
        for chunk in stop.chunks(MAX_IDS_PER_CALL) {
            self.stop_or_terminate(chunk, true)
                .await
                .map_err(|e| e.into_provider(op_for(chunk)))?;
        }
        Ok(())
    }

    /// One Stop or Terminate call; ids EC2 says do not exist are dropped and the rest
    /// sent again (EC2 fails the whole call for one unknown id).
    async fn stop_or_terminate(&self, ids: &[String], stop: bool) -> Result<(), AwsError> {
        let mut ids = ids.to_vec();
        for _ in 0..3 {
            if ids.is_empty() {
                return Ok(());
            }
            let r = if stop {
                self.calls.stop.fetch_add(1, Ordering::Relaxed);
                self.client
                    .stop_instances()
                    .set_instance_ids(Some(ids.clone()))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| sdk_error("StopInstances", e, "", None))
            } else {
                self.calls.terminate.fetch_add(1, Ordering::Relaxed);
                self.client
                    .terminate_instances()
                    .set_instance_ids(Some(ids.clone()))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| sdk_error("TerminateInstances", e, "", None))
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ProviderErrorKind::NotFound => {
                    let gone = match &e {
                        AwsError::Call { message, .. } => missing_instance_ids(message),
                        AwsError::Config { .. } => Vec::new(),
                    };
                    if gone.is_empty() {
                        // Not said which: none of them can be acted on.
                        return Ok(());
                    }
                    ids.retain(|i| !gone.contains(i));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// `call`, tried again with doubling backoff (from 250 ms) while EC2 throttles, at most
/// [`THROTTLE_TRIES`] times in all: for the calls whose SDK retries are off.
async fn retry_throttled<T, F, Fut>(mut call: F) -> Result<T, AwsError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, AwsError>>,
{
    let mut delay = Duration::from_millis(250);
    let mut tries = 1;
    loop {
        match call().await {
            Err(e) if e.kind() == ProviderErrorKind::Throttled && tries < THROTTLE_TRIES => {
                tokio::time::sleep(delay).await;
                delay *= 2;
                tries += 1;
            }
            r => return r,
        }
    }
}

fn op_for(chunk: &[String]) -> ProviderOp {
    ProviderOp::Terminate {
        cloud_instance_id: chunk.first().cloned().unwrap_or_default(),
    }
}

fn load(config: &ClusterConfig, head_ip: Option<&str>) -> Result<State, AwsError> {
    let cfg = AwsConfig::from_cluster(config)?;
    let mut boot = cloud::boot_scripts(config, head_ip, &mapping::METADATA)
        .map_err(|e| AwsError::config("boot script", e.to_string()))?;
    if let Some(cw) = &cfg.cloudwatch {
        let snippet = crate::cloudwatch::boot_snippet(cw, &cfg.cluster_name);
        for script in boot.values_mut() {
            *script = crate::cloudwatch::with_snippet(script, &snippet);
        }
    }
    // Map each type once, so a value EC2's model does not know fails now.
    for (t, nc) in &cfg.node_types {
        let user_data =
            mapping::user_data(nc.user_data.as_deref(), boot.get(t).map(String::as_str));
        if let Some(u) = &user_data
            && u.len() > mapping::MAX_USER_DATA
        {
            return Err(AwsError::config(
                format!("available_node_types.{t}.node_config.UserData"),
                format!(
                    "with rayscale's boot script the user data is {} bytes; EC2 takes at most {}",
                    u.len(),
                    mapping::MAX_USER_DATA
                ),
            ));
        }
        mapping::run_instances_input(
            &cfg,
            t,
            NodeKind::Worker,
            None,
            1,
            false,
            &Placement {
                subnet: None,
                zone: None,
            },
            None,
            "check",
        )?;
    }
    Ok(State { cfg, boot })
}

/// The instance as core sees it, its zone named as the launch attempts name places: the
/// subnet for a type that launches into subnets, else the availability zone.
fn placed(cfg: &AwsConfig, i: &ec2::Instance) -> Option<CloudInstance> {
    let mut c = mapping::cloud_instance(i)?;
    if let Some(subnet) = i.subnet_id()
        && cfg
            .node_types
            .get(&c.node_type)
            .is_some_and(|nc| !nc.subnets().is_empty())
    {
        c.zone = Some(subnet.to_string());
    }
    Some(c)
}

fn filter<'a>(name: &str, values: impl IntoIterator<Item = &'a str>) -> ec2::Filter {
    ec2::Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(str::to_string).collect()))
        .build()
}

fn tag(k: &str, v: &str) -> ec2::Tag {
    ec2::Tag::builder().key(k).value(v).build()
}

#[async_trait::async_trait]
impl CloudInstanceProvider for AwsProvider {
    fn provider_type(&self) -> &str {
        PROVIDER_TYPE
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        let state = self.state();
        let all = self
            .describe(&state.cfg, &["pending", "running", "stopping"], Vec::new())
            .await
            .map_err(|e| e.into_provider(ProviderOp::List))?;
        Ok(all.iter().filter_map(|i| placed(&state.cfg, i)).collect())
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.launch_inner(request, NodeKind::Worker).await
    }

    async fn terminate(
        &self,
        cloud_instance_ids: &[String],
        _request_id: &str,
    ) -> Result<(), ProviderError> {
        self.terminate_inner(cloud_instance_ids, false).await
    }

    async fn launch_head(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.launch_inner(request, NodeKind::Head).await
    }

    async fn terminate_head(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
        self.terminate_inner(&[cloud_instance_id.to_string()], true)
            .await
    }

    async fn poll_errors(&self) -> Vec<ProviderError> {
        Vec::new()
    }

    /// `CreateTags` (one key; the others stay), after a look that `cloud_instance_id`
    /// is the cluster's running head.
    fn tags_heads(&self) -> bool {
        true
    }

    async fn tag_head(
        &self,
        cloud_instance_id: &str,
        changes: &[(&str, String)],
    ) -> Result<(), ProviderError> {
        let state = self.state();
        let found = self
            .describe(
                &state.cfg,
                &["running"],
                vec![filter("instance-id", [cloud_instance_id])],
            )
            .await
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        if !found
            .iter()
            .filter_map(mapping::cloud_instance)
            .any(|c| c.is_head() && c.cloud_instance_id == cloud_instance_id)
        {
            return Err(cloud::refuse_mark(cloud_instance_id));
        }
        self.calls.create_tags.fetch_add(1, Ordering::Relaxed);
        self.client
            .create_tags()
            .resources(cloud_instance_id)
            .set_tags(Some(changes.iter().map(|(k, v)| tag(k, v)).collect()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| sdk_error("CreateTags", e, "", None).into_provider(ProviderOp::Other))
    }

    async fn reconfigure(&self, config: &ClusterConfig) -> Result<(), ProviderError> {
        let state = load(config, self.head_ip.as_deref())
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        let old = self.state();
        // The client is of one region, and the instances made so far carry the cluster's
        // name: either change would lose them (as GCP and Azure refuse).
        cloud::refuse_moves(&[
            (
                "provider.region",
                old.cfg.region.as_deref().unwrap_or_default(),
                state.cfg.region.as_deref().unwrap_or_default(),
            ),
            (
                "cluster_name",
                old.cfg.cluster_name.as_str(),
                state.cfg.cluster_name.as_str(),
            ),
        ])?;
        match self.state.write() {
            Ok(mut c) => *c = Arc::new(state),
            Err(p) => *p.into_inner() = Arc::new(state),
        }
        Ok(())
    }
}
