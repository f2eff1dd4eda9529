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
        let client = crate::client::from_environment(state.cfg.region.as_deref()).await?;
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

    /// RunInstances, tried again (with backoff) while EC2 throttles; `extra` (the node
    /// type's passed-through members, as form pairs) is appended to the request's body
    /// before it is signed.
    async fn run_instances(
        &self,
        input: aws_sdk_ec2::operation::run_instances::RunInstancesInput,
        extra: &[(String, String)],
        node_type: &str,
        zone: Option<&str>,
    ) -> Result<Vec<ec2::Instance>, AwsError> {
        let extra = Arc::new(extra.to_vec());
        retry_throttled(|| async {
            self.calls.run.fetch_add(1, Ordering::Relaxed);
            let i = input.clone();
            let extra = extra.clone();
            self.client
                .run_instances()
                .set_block_device_mappings(i.block_device_mappings)
                .set_image_id(i.image_id)
                .set_instance_type(i.instance_type)
                .set_key_name(i.key_name)
                .set_max_count(i.max_count)
                .set_min_count(i.min_count)
                .set_placement(i.placement)
                .set_security_group_ids(i.security_group_ids)
                .set_subnet_id(i.subnet_id)
                .set_user_data(i.user_data)
                .set_tag_specifications(i.tag_specifications)
                .set_launch_template(i.launch_template)
                .set_instance_market_options(i.instance_market_options)
                .set_capacity_reservation_specification(i.capacity_reservation_specification)
                .set_metadata_options(i.metadata_options)
                .set_client_token(i.client_token)
                .set_network_interfaces(i.network_interfaces)
                .set_iam_instance_profile(i.iam_instance_profile)
                .set_ebs_optimized(i.ebs_optimized)
                .customize()
                .config_override(no_retries())
                .mutate_request(move |r| {
                    if extra.is_empty() {
                        return;
                    }
                    if let Some(body) = r.body().bytes() {
                        let body = passthrough::append_form(body, &extra);
                        r.headers_mut()
                            .insert("content-length", body.len().to_string());
                        *r.body_mut() = body.into();
                    } else {
                        // A Query request's body is always in memory.
                        tracing::warn!("RunInstances: a streamed body; node_config's passed-through keys not sent");
                    }
                })
                .send()
                .await
                .map(|out| out.instances().to_vec())
                .map_err(|e| sdk_error("RunInstances", e, node_type, zone))
        })
        .await
    }

    /// Restarts `ids` (stopped workers being reused), tagging them with the request
    /// first, so a replay counts them.
    async fn restart(
        &self,
        ids: &[String],
        request_id: &str,
        node_type: &str,
    ) -> Result<(), AwsError> {
        self.calls.create_tags.fetch_add(1, Ordering::Relaxed);
        self.client
            .create_tags()
            .set_resources(Some(ids.to_vec()))
            .tags(tag(tags::LAUNCH_REQUEST, request_id))
            .tags(tag(tags::NODE_STATUS, mapping::STATUS_UNINITIALIZED))
            .send()
            .await
            .map_err(|e| sdk_error("CreateTags", e, node_type, None))?;
        retry_throttled(|| async {
            self.calls.start.fetch_add(1, Ordering::Relaxed);
            self.client
                .start_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .customize()
                .config_override(no_retries())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| sdk_error("StartInstances", e, node_type, None))
        })
        .await
    }

    async fn launch_inner(
        &self,
        req: &LaunchRequest,
        kind: NodeKind,
    ) -> Result<LaunchOutcome, ProviderError> {
        let state = self.state();
        let cfg = &state.cfg;
        let t = req.node_type.as_str();
        let launch_op = |count: u64| ProviderOp::Launch {
            request_id: req.request_id.clone(),
            node_type: req.node_type.clone(),
            count,
        };
        cloud::check_launch(
            cfg.head_node_type.as_deref(),
            cfg.node_types.contains_key(t),
            req,
            kind,
        )?;
        let Some(nc) = cfg.node_types.get(t) else {
            return Err(ProviderError::new(
                launch_op(req.count),
                ProviderErrorKind::InvalidConfig,
                format!("launch {}: unknown node type {t:?}", req.request_id),
            ));
        };
        // 1. What this request already made (a replay after a crash, a retry).
        let ours = self
            .describe(
                cfg,
                &["pending", "running", "stopping", "stopped"],
                vec![
                    filter(
                        &format!("tag:{}", tags::LAUNCH_REQUEST),
                        [req.request_id.as_str()],
                    ),
                    filter(&format!("tag:{}", tags::USER_NODE_TYPE), [t]),
                ],
            )
            .await
            .map_err(|e| e.into_provider(launch_op(req.count)))?;
        let mut made: Vec<CloudInstance> = Vec::new();
        let mut stopped_ours = Vec::new();
        for i in &ours {
            match i.state().and_then(|s| s.name()) {
                Some(ec2::InstanceStateName::Stopped) => {
                    if let Some(id) = i.instance_id() {
                        stopped_ours.push(id.to_string());
                    }
                }
                _ => made.extend(placed(cfg, i)),
            }
        }
        let mut remaining = req.count.saturating_sub(made.len() as u64);
        // 2. Cached nodes: stopped instances of this kind, type and launch config,
        //    restarted (ours from an interrupted restart first); their boot script runs
        //    again at boot (it installed itself to).
        //    Not for an all-or-nothing launch: restarted nodes and a RunInstances that
        //    fails would leave part of the gang.
        let mut reuse: Vec<String> = stopped_ours;
        if cfg.cache_stopped_nodes && !req.all_or_nothing && remaining > reuse.len() as u64 {
            let hash = cfg.launch_hashes.get(t).cloned().unwrap_or_default();
            let stopped = self
                .describe(
                    cfg,
                    &["stopped"],
                    vec![
                        filter(&format!("tag:{}", tags::NODE_KIND), [kind.tag_value()]),
                        filter(&format!("tag:{}", tags::USER_NODE_TYPE), [t]),
                        filter(&format!("tag:{}", tags::LAUNCH_CONFIG), [hash.as_str()]),
                    ],
                )
                .await
                .map_err(|e| e.into_provider(launch_op(req.count)))?;
            let mut ids: Vec<String> = stopped
                .iter()
                .filter_map(|i| i.instance_id().map(str::to_string))
                .filter(|id| !reuse.contains(id))
                .collect();
            ids.sort();
            reuse.extend(ids);
        }
        reuse.truncate(usize::try_from(remaining).unwrap_or(usize::MAX));
        let mut shortfall: Option<AwsError> = None;
        for chunk in reuse.chunks(MAX_IDS_PER_CALL) {
            match self.restart(chunk, &req.request_id, t).await {
                Ok(()) => {
                    remaining -= chunk.len() as u64;
                    made.extend(chunk.iter().map(|id| {
                        let mut c = CloudInstance::worker(id.clone(), t, Some(&req.request_id));
                        c.kind = kind;
                        c.state = rayscale_core::provider::CloudInstanceState::Pending;
                        c.launch_config_hash = cfg.launch_hashes.get(t).cloned();
                        c
                    }));
                }
                Err(e) => {
                    tracing::warn!("restarting stopped workers of {t}: {e}");
                    // New instances may still be had.
                    shortfall = Some(e);
                    break;
                }
            }
        }
        // 3. New instances: one RunInstances per subnet (or zone) tried, the next one on
        //    a capacity error, as Ray rotates its SubnetIds.
        if remaining > 0 {
            let subnets = nc.subnets();
            let user_zone = nc
                .placement
                .as_ref()
                .and_then(|p| p.availability_zone.as_deref());
            let attempts: Vec<Placement<'_>> = if !subnets.is_empty() {
                subnets
                    .iter()
                    .map(|s| Placement {
                        subnet: Some(s.as_str()),
                        zone: None,
                    })
                    .collect()
            } else if nc.network_interfaces.is_none()
                && user_zone.is_none()
                && !cfg.availability_zones.is_empty()
            {
                cfg.availability_zones
                    .iter()
                    .map(|z| Placement {
                        subnet: None,
                        zone: Some(z.as_str()),
                    })
                    .collect()
            } else {
                vec![Placement {
                    subnet: None,
                    zone: None,
                }]
            };
            let user_data = mapping::user_data(
                nc.user_data.as_deref(),
                state.boot.get(t).map(String::as_str),
            );
            // Places that ran out or took an instance back a short while ago are
            // skipped; with none left the type is out, and no call is made.
            let open: Vec<&Placement<'_>> = attempts
                .iter()
                .filter(|at| !at.avoided(&req.avoid_zones))
                .collect();
            if open.is_empty() {
                let e = AwsError::Call {
                    call: "RunInstances",
                    code: None,
                    status: None,
                    kind: Class::Capacity.kind(t, None),
                    message: format!(
                        "every place of {t} is avoided for now ({}): not launched",
                        req.avoid_zones.join(", ")
                    ),
                };
                return Err(e.into_provider(launch_op(req.count)));
            }
            let tried = open.len();
            let mut out_of_capacity = 0;
            for at in open {
                // One token for the whole request, every place it tries: EC2 remembers a
                // token once a call with it succeeded, and answers a later call with it
                // by that call's reservation when every parameter is the same, or
                // IdempotentParameterMismatch when one differs (the SubnetId of another
                // attempt, a count computed from an eventually consistent describe). A
                // replay whose first call went through in any place thus launches nothing
                // twice; a call that failed (out of capacity) consumed nothing, and the
                // next place may use the token. Never a count in the token: a replay that
                // sees part of its instances would make a new one, and launch again.
                let token = idempotency_token(&req.request_id, 0);
                let input = mapping::run_instances_input(
                    cfg,
                    t,
                    kind,
                    Some(&req.request_id),
                    remaining,
                    req.all_or_nothing,
                    at,
                    user_data.as_deref(),
                    &token,
                )
                .map_err(|e| e.into_provider(launch_op(req.count)))?;
                let zone = at.zone.or(at.subnet).or(user_zone);
                let extra = cfg
                    .node_types
                    .get(t)
                    .map(|n| n.passthrough.as_slice())
                    .unwrap_or_default();
                match self.run_instances(input, extra, t, zone).await {
                    Ok(instances) => {
                        let got = instances.len() as u64;
                        made.extend(instances.iter().filter_map(|i| placed(cfg, i)));
                        if got < remaining {
                            shortfall = Some(AwsError::Call {
                                call: "RunInstances",
                                code: None,
                                status: None,
                                kind: Class::Capacity.kind(t, zone),
                                message: format!(
                                    "made {got} of {remaining} {t} instances (EC2 had no more)"
                                ),
                            });
                        } else {
                            shortfall = None;
                        }
                        remaining -= got.min(remaining);
                        break;
                    }
                    Err(e) if e.code() == Some("IdempotentParameterMismatch") => {
                        // The request went through before, in this place or another (a
                        // replay that saw none or part of what it made): its instances come
                        // with the next lists, joined by the request's tag.
                        tracing::info!(
                            "launch {} of {t} at {at:?} was made before: nothing new is \
                             launched ({} not listed yet)",
                            req.request_id,
                            remaining
                        );
                        shortfall = None;
                        remaining = 0;
                        break;
                    }
                    Err(e) => {
                        if matches!(e.kind(), ProviderErrorKind::Capacity { .. }) {
                            out_of_capacity += 1;
                        }
                        let next = classify(e.code(), None).next_subnet_may_help()
                            || matches!(e.kind(), ProviderErrorKind::Capacity { .. });
                        tracing::info!("launch {} of {t} at {at:?}: {e}", req.request_id);
                        shortfall = Some(e);
                        if !next {
                            break;
                        }
                    }
                }
            }
            // Every place tried was out of capacity: the type is, not one zone (a single
            // place that is out is the type out too: there is nowhere else to go).
            if out_of_capacity == tried
                && let Some(AwsError::Call {
                    kind: ProviderErrorKind::Capacity { zone, .. },
                    ..
                }) = &mut shortfall
            {
                *zone = None;
            }
        }
        match shortfall {
            None => Ok(LaunchOutcome {
                instances: made,
                shortfall: None,
            }),
            Some(e) if made.is_empty() => Err(e.into_provider(launch_op(req.count))),
            Some(e) => Ok(LaunchOutcome {
                instances: made,
                shortfall: Some(e.into_provider(launch_op(remaining))),
            }),
        }
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
    let boot = cloud::boot_scripts(config, head_ip, &mapping::METADATA)
        .map_err(|e| AwsError::config("boot script", e.to_string()))?;
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

    async fn mark_head_up_to_date(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
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
            .tags(tag(tags::NODE_STATUS, tags::STATUS_UP_TO_DATE))
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
