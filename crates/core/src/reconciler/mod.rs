//! The reconciler: one pure iteration of the autoscaling loop (Ray 2.60's
//! `instance_manager/reconciler.py`, rewritten).
//!
//! [`reconcile`] takes what was observed (the GCS's cluster resource state, the cloud's
//! instances, provider errors, rejected drains), the clock value and the config, and
//! drives the instance table through the [`InstanceManager`]:
//!
//! 1. **Sync** (passive transitions only, mirroring the outside world): REQUESTED instances
//!    meet the cloud instances their launch request made (ALLOCATED); launch errors fail
//!    them (ALLOCATION_FAILED); vanished cloud instances are TERMINATED; termination
//!    errors give TERMINATION_FAILED; cloud instances no record knows are adopted; Ray node
//!    states move instances to RAY_RUNNING / RAY_STOPPING / RAY_STOPPED; a rejected drain
//!    puts RAY_STOP_REQUESTED back to RAY_RUNNING.
//! 2. **Step** (active transitions): Ray nodes missing from the GCS, stuck instances
//!    (timeouts, requeue with a retry limit), the scheduler's decision (new QUEUED
//!    instances, RAY_STOP_REQUESTED for idle nodes, TERMINATING for pending ones),
//!    termination of stopped/failed instances, and paced launches (QUEUED -> REQUESTED).
//!
//! Side effects are never performed here: each active transition yields an [`Effect`]
//! (launch, drain, terminate) that the driver runs after the table has been stored. Their
//! results are observed in a later iteration. Time and new ids are the caller's.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::CoreError;
use crate::config::ClusterConfig;
use crate::expander::ExpanderChain;
use crate::instance::{Instance, InstanceManager, InstanceStorage, InstanceUpdateEvent};
use crate::model::{
    ClusterConstraint, ClusterResourceState, GangRequest, InstanceStatus, NodeStatus,
    ResourceRequest,
};
use crate::provider::{CloudInstance, LaunchRequest, ProviderError, ProviderErrorKind};
use crate::scenario::{HEAD_MARKER, InstanceRecord, build_request};
use crate::scheduler::{Decision, schedule_with};

const SEC: i64 = 1_000_000_000;

/// Timeouts and pacing (Ray's `InstanceReconcileConfig` defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcilerSettings {
    /// REQUESTED longer than this is queued again (or failed after the retries).
    pub request_timeout_s: i64,
    /// How many times an instance may be requested before ALLOCATION_FAILED.
    pub max_request_retries: usize,
    /// ALLOCATED longer than this (Ray never started) is ALLOCATION_TIMEOUT.
    pub allocate_timeout_s: i64,
    /// RAY_INSTALLING longer than this is RAY_INSTALL_FAILED.
    pub install_timeout_s: i64,
    /// TERMINATING longer than this is TERMINATION_FAILED (and retried).
    pub terminating_timeout_s: i64,
    /// RAY_STOP_REQUESTED longer than this goes back to RAY_RUNNING.
    pub stop_requested_timeout_s: i64,
    /// Launches in flight (REQUESTED) at most.
    pub max_concurrent_launches: usize,
    /// Per type and iteration, launch up to `ceil(speed * max(running, 1))` (at least 1).
    pub upscaling_speed: f64,
    /// Deadline given to the GCS for draining an idle node.
    pub drain_deadline_s: i64,
    /// ALLOCATION_FAILED records are reported (and count for the backoff) this long.
    pub failed_report_s: i64,
    /// After a launch failure, a type waits this long before the next launch, doubling
    /// with each failure in the report window.
    pub launch_backoff_s: i64,
    /// The longest launch backoff.
    pub max_launch_backoff_s: i64,
}

impl Default for ReconcilerSettings {
    fn default() -> Self {
        ReconcilerSettings {
            request_timeout_s: 600,
            max_request_retries: 3,
            allocate_timeout_s: 3600,
            install_timeout_s: 1800,
            terminating_timeout_s: 300,
            stop_requested_timeout_s: 300,
            max_concurrent_launches: 10,
            upscaling_speed: 1.0,
            drain_deadline_s: 30,
            failed_report_s: 600,
            launch_backoff_s: 5,
            max_launch_backoff_s: 300,
        }
    }
}

impl ReconcilerSettings {
    /// Defaults with the config's `upscaling_speed` (Ray: 0 means "one at a time").
    pub fn from_config(config: &ClusterConfig) -> Self {
        ReconcilerSettings {
            upscaling_speed: config.upscaling_speed.unwrap_or(1.0),
            ..Default::default()
        }
    }
}

/// A drain the GCS refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainRejection {
    /// The instance.
    pub instance_id: String,
    /// The GCS's reason.
    pub reason: String,
}

/// What the driver observed before this iteration.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The GCS's cluster resource state.
    pub ray: &'a ClusterResourceState,
    /// The cloud's non-terminated instances.
    pub cloud: &'a [CloudInstance],
    /// Errors of earlier provider calls.
    pub provider_errors: &'a [ProviderError],
    /// Drains the GCS rejected.
    pub drain_rejections: &'a [DrainRejection],
}

/// Source of new ids (injected so that iterations are deterministic in tests).
pub trait IdSource {
    /// A new instance id.
    fn instance_id(&mut self) -> String;
    /// A new launch request id.
    fn request_id(&mut self) -> String;
}

/// A side effect to perform after the table is stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Ask the cloud for instances.
    Launch(LaunchRequest),
    /// Ask the GCS to drain a node (reason: idle termination).
    Drain {
        /// The instance.
        instance_id: String,
        /// Its Ray node (hex).
        node_id_hex: String,
        /// Why.
        reason: String,
        /// Wall-clock deadline for the drain, in ms since the epoch.
        deadline_ms: i64,
    },
    /// Ask the cloud to terminate instances.
    Terminate {
        /// Cloud instance ids.
        cloud_instance_ids: Vec<String>,
        /// Idempotency key.
        request_id: String,
    },
}

/// One pending launch request type (for `ray status`).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingRequest {
    /// Node type.
    pub node_type: String,
    /// Instances of it waiting in QUEUED.
    pub count: u64,
    /// When the oldest was queued (s since the epoch).
    pub request_ts_s: i64,
}

/// An instance on its way up.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingInstance {
    /// Instance id.
    pub instance_id: String,
    /// Node type.
    pub node_type: String,
    /// Status and details.
    pub details: String,
}

/// Failed launches of one type.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedRequest {
    /// Node type.
    pub node_type: String,
    /// How many.
    pub count: u64,
    /// The error.
    pub reason: String,
    /// When it was queued (s).
    pub start_ts_s: i64,
    /// When it failed (s).
    pub failed_ts_s: i64,
}

/// What `ray status` shows about the autoscaler (Ray's `AutoscalingState`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AutoscalingReport {
    /// Queued launches per type.
    pub pending_requests: Vec<PendingRequest>,
    /// Requested, allocated and installing instances.
    pub pending_instances: Vec<PendingInstance>,
    /// Recent failed launches.
    pub failed_requests: Vec<FailedRequest>,
    /// Task/actor demand nothing can hold.
    pub infeasible_requests: Vec<ResourceRequest>,
    /// Placement groups nothing can hold.
    pub infeasible_gangs: Vec<GangRequest>,
    /// `request_resources` constraints nothing can hold.
    pub infeasible_constraints: Vec<ClusterConstraint>,
}

/// The outcome of one iteration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Side effects to perform, in order.
    pub effects: Vec<Effect>,
    /// The scheduler's decision (none when scaling was skipped: no head yet).
    pub decision: Option<Decision>,
    /// For `ray status`.
    pub report: AutoscalingReport,
    /// Ray nodes (hex ids) that no instance accounts for (the head excluded).
    pub unknown_ray_nodes: Vec<String>,
    /// Number of instance events applied.
    pub events_applied: usize,
    /// Things worth a log line.
    pub warnings: Vec<String>,
}

/// Runs one iteration at `now_ns` (wall clock, ns since the epoch).
#[allow(clippy::too_many_arguments)]
pub fn reconcile<S: InstanceStorage>(
    im: &mut InstanceManager<S>,
    config: &ClusterConfig,
    chain: &mut ExpanderChain,
    settings: &ReconcilerSettings,
    observed: Observed<'_>,
    now_ns: i64,
    ids: &mut dyn IdSource,
) -> Result<Outcome, CoreError> {
    let mut r = Run {
        im,
        now_ns,
        drain_deadline_ms: now_ns / 1_000_000 + settings.drain_deadline_s * 1000,
        to_terminate: Vec::new(),
        out: Outcome::default(),
    };
    r.sync(config, observed, ids)?;
    r.step(config, chain, settings, observed, ids)?;
    r.out
        .report
        .pending_requests
        .sort_by(|a, b| a.node_type.cmp(&b.node_type));
    Ok(r.out)
}

/// The GCS state as the scheduler can take it, when it needs fixing (else `None`): a head
/// started without `RAY_NODE_TYPE_NAME` gets the config's head type, and live Ray nodes of
/// no instance whose type the config does not know are left out (with a warning) instead
/// of failing the iteration.
fn schedulable_state(
    config: &ClusterConfig,
    ray: &ClusterResourceState,
    table: &[Instance],
    warnings: &mut Vec<String>,
) -> Option<ClusterResourceState> {
    let cloud: BTreeSet<&str> = table
        .iter()
        .filter(|i| live(i) && config.node_type(&i.node_type).is_some())
        .filter_map(|i| i.cloud_instance_id.as_deref())
        .collect();
    let needs_fix = |n: &crate::model::NodeState| {
        !cloud.contains(n.instance_id.as_str()) && config.node_type(&n.ray_node_type_name).is_none()
    };
    if !ray.node_states.iter().any(needs_fix) {
        return None;
    }
    let mut fixed = ray.clone();
    fixed.node_states.retain_mut(|n| {
        if !needs_fix(n) {
            return true;
        }
        if n.total_resources.get(HEAD_MARKER).is_some()
            && let Some(h) = &config.head_node_type
        {
            n.ray_node_type_name.clone_from(h);
            return true;
        }
        if n.status != Some(NodeStatus::Dead) {
            warnings.push(format!(
                "ray node {} has node type {:?}, which the config does not know: not scheduled",
                n.node_id_hex(),
                n.ray_node_type_name
            ));
        }
        false
    });
    Some(fixed)
}

struct Run<'m, S: InstanceStorage> {
    im: &'m mut InstanceManager<S>,
    now_ns: i64,
    /// Wall-clock deadline given with every drain of this iteration.
    drain_deadline_ms: i64,
    /// Cloud instances moved to TERMINATING this iteration (one terminate call at the end).
    to_terminate: Vec<String>,
    out: Outcome,
}

/// When `i` failed to launch: ALLOCATION_FAILED, or gone with a launch error before Ray
/// ever ran on it.
fn launch_failed_at(i: &Instance) -> Option<i64> {
    match i.status {
        InstanceStatus::AllocationFailed => i.status_since(InstanceStatus::AllocationFailed),
        InstanceStatus::Terminated
            if i.last_error.is_some() && i.times_entered(InstanceStatus::RayRunning) == 0 =>
        {
            i.status_since(InstanceStatus::Terminated)
        }
        _ => None,
    }
}

fn live(i: &Instance) -> bool {
    !matches!(
        i.status,
        InstanceStatus::Terminated | InstanceStatus::AllocationFailed
    )
}

impl<S: InstanceStorage> Run<'_, S> {
    fn table(&self) -> Result<Vec<Instance>, CoreError> {
        let (_, mut all) = self.im.get_instances()?;
        all.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        Ok(all)
    }

    fn apply(&mut self, events: Vec<InstanceUpdateEvent>) -> Result<(), CoreError> {
        if events.is_empty() {
            return Ok(());
        }
        self.out.events_applied += events.len();
        let applied = self.im.update(&events, self.now_ns)?;
        // The side effects follow from the transitions (Ray's subscribers): RAY_STOP_REQUESTED
        // drains the node, TERMINATING terminates the cloud instance.
        for e in &events {
            let Some(i) = applied
                .instances
                .iter()
                .find(|i| i.instance_id == e.instance_id)
            else {
                continue;
            };
            match e.new_status {
                InstanceStatus::RayStopRequested => self.out.effects.push(Effect::Drain {
                    instance_id: i.instance_id.clone(),
                    node_id_hex: i.node_id.clone().unwrap_or_default(),
                    reason: e.details.clone(),
                    deadline_ms: self.drain_deadline_ms,
                }),
                InstanceStatus::Terminating => {
                    self.to_terminate.extend(i.cloud_instance_id.clone());
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn ev(i: &Instance, to: InstanceStatus, details: impl Into<String>) -> InstanceUpdateEvent {
        InstanceUpdateEvent::transition(i.instance_id.clone(), i.version, to).with_details(details)
    }

    // ------------------------------------------------------------------ sync

    fn sync(
        &mut self,
        config: &ClusterConfig,
        obs: Observed<'_>,
        ids: &mut dyn IdSource,
    ) -> Result<(), CoreError> {
        let cloud_ids: BTreeSet<&str> = obs
            .cloud
            .iter()
            .map(|c| c.cloud_instance_id.as_str())
            .collect();

        // 1. REQUESTED meets the cloud instances of its launch request.
        let table = self.table()?;
        let mut held: BTreeSet<String> = table
            .iter()
            .filter(|i| live(i))
            .filter_map(|i| i.cloud_instance_id.clone())
            .collect();
        let mut events = Vec::new();
        let mut allocated: BTreeSet<String> = BTreeSet::new();
        for i in table
            .iter()
            .filter(|i| i.status == InstanceStatus::Requested)
        {
            if let Some(c) = obs.cloud.iter().find(|c| {
                !held.contains(&c.cloud_instance_id)
                    && c.request_id == i.launch_request_id
                    && c.node_type == i.node_type
            }) {
                held.insert(c.cloud_instance_id.clone());
                allocated.insert(i.instance_id.clone());
                events.push(
                    Self::ev(i, InstanceStatus::Allocated, "cloud instance allocated")
                        .with_cloud_instance_id(c.cloud_instance_id.clone()),
                );
            }
        }
        // 2. Launch errors fail the instances their request still owes.
        let mut owed: HashMap<(String, String), u64> = HashMap::new();
        for e in obs.provider_errors {
            if let ProviderErrorKind::Launch {
                request_id,
                node_type,
                count,
            } = &e.kind
            {
                *owed
                    .entry((request_id.clone(), node_type.clone()))
                    .or_default() += count;
            }
        }
        for i in table.iter().filter(|i| {
            i.status == InstanceStatus::Requested && !allocated.contains(&i.instance_id)
        }) {
            let key = (i.launch_request_id.clone(), i.node_type.clone());
            if let Some(n) = owed.get_mut(&key)
                && *n > 0
            {
                *n -= 1;
                let why = obs
                    .provider_errors
                    .iter()
                    .find(|e| {
                        matches!(&e.kind, ProviderErrorKind::Launch { request_id, .. } if *request_id == key.0)
                    })
                    .map(|e| e.message.clone())
                    .unwrap_or_default();
                events.push(
                    Self::ev(i, InstanceStatus::AllocationFailed, "launch failed").with_error(why),
                );
            }
        }
        // 3. Cloud instances that are gone; 4. termination errors.
        let term_errors: BTreeMap<&str, &str> = obs
            .provider_errors
            .iter()
            .filter_map(|e| match &e.kind {
                ProviderErrorKind::Terminate { cloud_instance_id } => {
                    Some((cloud_instance_id.as_str(), e.message.as_str()))
                }
                _ => None,
            })
            .collect();
        for i in table.iter().filter(|i| live(i)) {
            let Some(cid) = i.cloud_instance_id.as_deref() else {
                continue;
            };
            if matches!(i.status, InstanceStatus::Queued | InstanceStatus::Requested) {
                continue;
            }
            if !cloud_ids.contains(cid) {
                let mut e = Self::ev(i, InstanceStatus::Terminated, "cloud instance is gone");
                // Died before Ray ran on it, with a launch error: a failed launch.
                if i.times_entered(InstanceStatus::RayRunning) == 0
                    && let Some(err) = obs.provider_errors.iter().find(|e| {
                        matches!(&e.kind, ProviderErrorKind::Launch { request_id, .. }
                            if *request_id == i.launch_request_id)
                    })
                {
                    e = e.with_error(err.message.clone());
                }
                events.push(e);
            } else if i.status == InstanceStatus::Terminating
                && let Some(msg) = term_errors.get(cid)
            {
                events.push(
                    Self::ev(i, InstanceStatus::TerminationFailed, "termination failed")
                        .with_error(*msg),
                );
            }
        }
        self.apply(events)?;

        // 5. Adopt cloud instances no record knows (e.g. launched just before a crash
        //    whose REQUESTED record was lost, or started by hand with our tags).
        let mut events = Vec::new();
        for c in obs.cloud {
            if held.contains(&c.cloud_instance_id) {
                continue;
            }
            // A node type the config does not know is adopted to be terminated.
            let known = config.node_type(&c.node_type).is_some();
            let status = if c.is_running && known {
                InstanceStatus::Allocated
            } else {
                InstanceStatus::Terminating
            };
            let node_type = if c.node_type.is_empty() {
                "unknown".to_string()
            } else {
                c.node_type.clone()
            };
            let mut e = InstanceUpdateEvent::create(ids.instance_id(), node_type, status)
                .with_cloud_instance_id(c.cloud_instance_id.clone())
                .with_details("adopted an unknown cloud instance");
            if !c.request_id.is_empty() {
                e = e.with_launch_request_id(c.request_id.clone());
            }
            self.out.warnings.push(format!(
                "adopted cloud instance {} ({}) that no record knew",
                c.cloud_instance_id, c.node_type
            ));
            events.push(e);
        }
        self.apply(events)?;

        // 6. Ray node states; 7. rejected drains.
        let table = self.table()?;
        let by_cloud: HashMap<&str, &Instance> = table
            .iter()
            .filter(|i| live(i))
            .filter_map(|i| i.cloud_instance_id.as_deref().map(|c| (c, i)))
            .collect();
        let mut events = Vec::new();
        let mut moved: BTreeSet<&str> = BTreeSet::new();
        for ns in &obs.ray.node_states {
            let hex = ns.node_id_hex();
            let Some(i) = by_cloud.get(ns.instance_id.as_str()) else {
                let is_head = ns.total_resources.get(HEAD_MARKER).is_some();
                if !is_head && ns.status != Some(NodeStatus::Dead) {
                    self.out.unknown_ray_nodes.push(hex);
                }
                continue;
            };
            let (target, why) = match ns.status.unwrap_or(NodeStatus::Running) {
                NodeStatus::Running | NodeStatus::Idle | NodeStatus::Unspecified => {
                    (InstanceStatus::RayRunning, "ray node is running")
                }
                NodeStatus::Draining => (InstanceStatus::RayStopping, "ray node is draining"),
                NodeStatus::Dead => (InstanceStatus::RayStopped, "ray node is dead"),
            };
            // Back to RAY_RUNNING only through a rejected drain, never from a node state.
            let passive_ok = match target {
                InstanceStatus::RayRunning => matches!(
                    i.status,
                    InstanceStatus::Allocated | InstanceStatus::RayInstalling
                ),
                _ => true,
            };
            // A node of an earlier life of this cloud id (the GCS keeps dead nodes) is not
            // this instance's; and one event per instance per batch.
            let other_node = i.node_id.as_ref().is_some_and(|n| *n != hex);
            if i.status != target
                && passive_ok
                && !other_node
                && crate::instance::is_valid_transition(i.status, target)
                && moved.insert(i.instance_id.as_str())
            {
                events.push(Self::ev(i, target, why).with_node_id(hex));
            }
        }
        for rej in obs.drain_rejections {
            if let Some(i) = table.iter().find(|i| {
                i.instance_id == rej.instance_id && i.status == InstanceStatus::RayStopRequested
            }) && !events.iter().any(|e| e.instance_id == i.instance_id)
            {
                events.push(
                    Self::ev(i, InstanceStatus::RayRunning, "drain rejected")
                        .with_error(rej.reason.clone()),
                );
            }
        }
        self.apply(events)
    }

    // ------------------------------------------------------------------ step

    fn step(
        &mut self,
        config: &ClusterConfig,
        chain: &mut ExpanderChain,
        s: &ReconcilerSettings,
        obs: Observed<'_>,
        ids: &mut dyn IdSource,
    ) -> Result<(), CoreError> {
        let now = self.now_ns;
        // 1. Ray nodes missing from the GCS.
        let ray_ids: BTreeSet<String> = obs
            .ray
            .node_states
            .iter()
            .map(|n| n.node_id_hex())
            .collect();
        let table = self.table()?;
        let mut events = Vec::new();
        for i in &table {
            if !i.is_head
                && matches!(
                    i.status,
                    InstanceStatus::RayRunning
                        | InstanceStatus::RayStopRequested
                        | InstanceStatus::RayStopping
                )
                && let Some(node) = &i.node_id
                && !ray_ids.contains(node)
            {
                events.push(Self::ev(
                    i,
                    InstanceStatus::RayStopped,
                    "ray node no longer in the GCS",
                ));
            }
        }
        self.apply(events)?;

        // 2. Stuck instances.
        let table = self.table()?;
        let mut events = Vec::new();
        let over = |i: &Instance, limit_s: i64| {
            i.status_since(i.status)
                .is_some_and(|t| now.saturating_sub(t) >= limit_s.saturating_mul(SEC))
        };
        for i in &table {
            let e = match i.status {
                InstanceStatus::Requested if over(i, s.request_timeout_s) => {
                    let tries = i.times_entered(InstanceStatus::Requested);
                    Some(if tries > s.max_request_retries {
                        Self::ev(
                            i,
                            InstanceStatus::AllocationFailed,
                            format!("no cloud instance after {tries} requests"),
                        )
                        .with_error(format!("no cloud instance after {tries} requests"))
                    } else {
                        Self::ev(
                            i,
                            InstanceStatus::Queued,
                            format!("requeued after {}s", s.request_timeout_s),
                        )
                        .bump_launch_retries()
                    })
                }
                InstanceStatus::Allocated if over(i, s.allocate_timeout_s) => Some(Self::ev(
                    i,
                    InstanceStatus::AllocationTimeout,
                    format!("ray not running after {}s", s.allocate_timeout_s),
                )),
                InstanceStatus::RayInstalling if over(i, s.install_timeout_s) => Some(Self::ev(
                    i,
                    InstanceStatus::RayInstallFailed,
                    format!("ray not installed after {}s", s.install_timeout_s),
                )),
                InstanceStatus::Terminating if over(i, s.terminating_timeout_s) => Some(Self::ev(
                    i,
                    InstanceStatus::TerminationFailed,
                    format!("still there after {}s", s.terminating_timeout_s),
                )),
                InstanceStatus::RayStopRequested if over(i, s.stop_requested_timeout_s) => {
                    Some(Self::ev(
                        i,
                        InstanceStatus::RayRunning,
                        format!("not drained after {}s", s.stop_requested_timeout_s),
                    ))
                }
                _ => None,
            };
            events.extend(e);
        }
        self.apply(events)?;

        // 3. Scale: the scheduler's decision.
        let table = self.table()?;
        let head_running = obs.ray.node_states.iter().any(|n| {
            n.total_resources.get(HEAD_MARKER).is_some() && n.status != Some(NodeStatus::Dead)
        });
        // Records whose type the config no longer knows are not scheduled: they are
        // terminated (drained first when Ray runs on them).
        let unknown_type = |i: &Instance| config.node_type(&i.node_type).is_none();
        let mut events = Vec::new();
        for i in table.iter().filter(|i| live(i) && unknown_type(i)) {
            let why = format!("node type {:?} is not in the config", i.node_type);
            let e = match i.status {
                InstanceStatus::Queued => Self::ev(i, InstanceStatus::Terminated, why),
                InstanceStatus::Allocated | InstanceStatus::RayInstalling => {
                    Self::ev(i, InstanceStatus::Terminating, why)
                }
                InstanceStatus::RayRunning => Self::ev(i, InstanceStatus::RayStopRequested, why),
                _ => continue,
            };
            self.out
                .warnings
                .push(format!("terminating {}: {}", i.instance_id, e.details));
            events.push(e);
        }
        self.apply(events)?;
        let table = self.table()?;
        let records: Vec<InstanceRecord> = table
            .iter()
            .filter(|i| live(i) && !unknown_type(i))
            .map(|i| InstanceRecord {
                instance_id: i.instance_id.clone(),
                cloud_instance_id: i.cloud_instance_id.clone(),
                node_type: i.node_type.clone(),
                status: i.status,
                launch_config_hash: Some(i.launch_config_hash.clone()),
            })
            .collect();
        let fixed = schedulable_state(config, obs.ray, &table, &mut self.out.warnings);
        let request = build_request(
            config,
            fixed.as_ref().unwrap_or(obs.ray),
            &records,
            "gcs",
            "instance table",
        )?;
        let decision = schedule_with(&request, chain);
        self.out.warnings.extend(chain.take_warnings());
        for (r, _) in &decision.infeasible_requests {
            self.out.report.infeasible_requests.push(r.clone());
        }
        for &g in &decision.infeasible_gang_requests {
            if let Some(x) = request.gang_requests.get(g) {
                self.out.report.infeasible_gangs.push(x.clone());
            }
        }
        for &c in &decision.infeasible_constraints {
            if let Some(x) = request.cluster_constraints.get(c) {
                self.out.report.infeasible_constraints.push(x.clone());
            }
        }
        if head_running {
            let by_id: HashMap<&str, &Instance> =
                table.iter().map(|i| (i.instance_id.as_str(), i)).collect();
            let mut events = Vec::new();
            for t in &decision.terminate {
                let Some(i) = by_id.get(t.instance_id.as_str()) else {
                    self.out.warnings.push(format!(
                        "cannot terminate ray node {} ({}): no instance of this cluster runs it",
                        t.ray_node_id,
                        t.cause.name()
                    ));
                    continue;
                };
                let why = format!("{} ({})", t.cause.name(), t.node_type);
                let e = match i.status {
                    InstanceStatus::Queued => {
                        Self::ev(i, InstanceStatus::Terminated, format!("canceled: {why}"))
                    }
                    InstanceStatus::Allocated | InstanceStatus::RayInstalling => Self::ev(
                        i,
                        InstanceStatus::Terminating,
                        format!("terminating: {why}"),
                    ),
                    InstanceStatus::RayRunning => Self::ev(
                        i,
                        InstanceStatus::RayStopRequested,
                        format!("draining: {why}"),
                    ),
                    _ => continue,
                };
                events.push(e);
            }
            for (node_type, count) in &decision.launch {
                let hash = config
                    .node_type(node_type)
                    .map(|t| t.launch_config_hash.clone())
                    .unwrap_or_default();
                for _ in 0..*count {
                    events.push(
                        InstanceUpdateEvent::create(
                            ids.instance_id(),
                            node_type.clone(),
                            InstanceStatus::Queued,
                        )
                        .with_launch_config_hash(hash.clone())
                        .with_details("queued by the scheduler"),
                    );
                }
            }
            self.apply(events)?;
        }
        self.out.decision = Some(decision);

        // 4. Terminate what is stopped, timed out or failed.
        let table = self.table()?;
        let mut events = Vec::new();
        for i in &table {
            if matches!(
                i.status,
                InstanceStatus::RayStopped
                    | InstanceStatus::AllocationTimeout
                    | InstanceStatus::RayInstallFailed
                    | InstanceStatus::TerminationFailed
            ) {
                let mut e = Self::ev(
                    i,
                    InstanceStatus::Terminating,
                    format!("terminating after {}", i.status.name()),
                );
                if i.status == InstanceStatus::TerminationFailed {
                    e = e.bump_termination_retries();
                }
                events.push(e);
            }
        }
        self.apply(events)?;
        let mut to_terminate = std::mem::take(&mut self.to_terminate);
        if !to_terminate.is_empty() {
            to_terminate.sort();
            to_terminate.dedup();
            self.out.effects.push(Effect::Terminate {
                cloud_instance_ids: to_terminate,
                request_id: ids.request_id(),
            });
        }

        // 5. Paced launches: QUEUED -> REQUESTED.
        let table = self.table()?;
        let requested = table
            .iter()
            .filter(|i| i.status == InstanceStatus::Requested)
            .count();
        let mut queued: BTreeMap<&str, Vec<&Instance>> = BTreeMap::new();
        let mut running: BTreeMap<&str, usize> = BTreeMap::new();
        // Launch failures per type within the failure window: (count, latest).
        let mut failures: BTreeMap<&str, (u32, i64)> = BTreeMap::new();
        for i in &table {
            match i.status {
                InstanceStatus::Queued => queued.entry(&i.node_type).or_default().push(i),
                InstanceStatus::RayRunning => *running.entry(&i.node_type).or_default() += 1,
                _ => {
                    if let Some(at) = launch_failed_at(i)
                        && now.saturating_sub(at) < s.failed_report_s.saturating_mul(SEC)
                    {
                        let e = failures.entry(&i.node_type).or_insert((0, at));
                        e.0 += 1;
                        e.1 = e.1.max(at);
                    }
                }
            }
        }
        // After launch failures a type waits before it is launched again:
        // `launch_backoff_s * 2^(failures - 1)`, at most `max_launch_backoff_s`.
        queued.retain(|t, _| match failures.get(t) {
            None => true,
            Some(&(n, latest)) => {
                let wait_s = s
                    .launch_backoff_s
                    .saturating_mul(1i64 << n.saturating_sub(1).min(20))
                    .min(s.max_launch_backoff_s);
                now.saturating_sub(latest) >= wait_s.saturating_mul(SEC)
            }
        });
        let mut budget = s.max_concurrent_launches.saturating_sub(requested);
        let mut events = Vec::new();
        let mut launches: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (t, mut list) in queued {
            // A fresh request id per type and iteration: providers number a request's
            // instances, so two types (or a retry) must never share one.
            let rid = ids.request_id();
            let base = running.get(t).copied().unwrap_or(0).max(1) as f64;
            let desired = ((s.upscaling_speed * base).ceil() as usize).max(1);
            let n = desired.min(budget).min(list.len());
            list.sort_by_key(|i| {
                (
                    i.status_since(InstanceStatus::Queued).unwrap_or(0),
                    i.instance_id.clone(),
                )
            });
            for i in list.into_iter().take(n) {
                *launches.entry((rid.clone(), t.to_string())).or_default() += 1;
                events.push(
                    Self::ev(
                        i,
                        InstanceStatus::Requested,
                        format!("launch requested ({rid})"),
                    )
                    .with_launch_request_id(rid.clone()),
                );
            }
            budget -= n;
        }
        self.apply(events)?;
        for ((request_id, node_type), count) in launches {
            self.out.effects.push(Effect::Launch(LaunchRequest {
                request_id,
                node_type,
                count,
            }));
        }

        // The report.
        let table = self.table()?;
        let mut pending: BTreeMap<&str, (u64, i64)> = BTreeMap::new();
        let mut failed: BTreeMap<(String, String), FailedRequest> = BTreeMap::new();
        for i in &table {
            match i.status {
                InstanceStatus::Queued => {
                    let e = pending.entry(&i.node_type).or_insert((0, i64::MAX));
                    e.0 += 1;
                    e.1 =
                        e.1.min(i.status_since(InstanceStatus::Queued).unwrap_or(now) / SEC);
                }
                InstanceStatus::Requested
                | InstanceStatus::Allocated
                | InstanceStatus::RayInstalling => {
                    self.out.report.pending_instances.push(PendingInstance {
                        instance_id: i.instance_id.clone(),
                        node_type: i.node_type.clone(),
                        details: i.status.name().to_string(),
                    });
                }
                _ => {
                    let Some(at) = launch_failed_at(i) else {
                        continue;
                    };
                    if now.saturating_sub(at) > s.failed_report_s.saturating_mul(SEC) {
                        continue;
                    }
                    let reason = i
                        .last_error
                        .clone()
                        .unwrap_or_else(|| "launch failed".into());
                    let start = i.status_history.first().map_or(at, |c| c.timestamp_ns);
                    let e = failed
                        .entry((i.node_type.clone(), reason.clone()))
                        .or_insert(FailedRequest {
                            node_type: i.node_type.clone(),
                            count: 0,
                            reason,
                            start_ts_s: start / SEC,
                            failed_ts_s: at / SEC,
                        });
                    e.count += 1;
                }
            }
        }
        self.out.report.pending_requests = pending
            .into_iter()
            .map(|(t, (count, ts))| PendingRequest {
                node_type: t.to_string(),
                count,
                request_ts_s: ts,
            })
            .collect();
        self.out.report.failed_requests = failed.into_values().collect();
        Ok(())
    }
}
