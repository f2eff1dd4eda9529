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
//!    instances, RAY_STOP_REQUESTED for nodes to stop, with the cause, TERMINATING for
//!    pending ones),
//!    termination of stopped/failed instances, paced launches (QUEUED -> REQUESTED), and,
//!    where the provider installs Ray, running ALLOCATED workers to RAY_INSTALLING.
//!
//! Side effects are never performed here: each active transition yields an [`Effect`]
//! (launch, drain, terminate) that the driver runs after the table has been stored. Their
//! results are observed in a later iteration. Time and new ids are the caller's.

mod autostop;
#[cfg(test)]
mod cloud_tests;
mod consolidate;
#[cfg(test)]
mod explain_tests;
pub mod gangs;
#[cfg(test)]
mod gangs_tests;
mod hosts;
#[cfg(test)]
mod hosts_tests;
mod limits;
#[cfg(test)]
mod limits_tests;
mod pacing;
mod preempt;
#[cfg(test)]
mod preempt_tests;
#[cfg(test)]
mod scale_down_tests;
mod step;
mod sync;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use foldhash::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::CoreError;
use crate::availability::{Availability, Unavailable};
use crate::config::ClusterConfig;
use crate::expander::ExpanderChain;
use crate::explain::{Explanation, Hold, Holds};
use crate::instance::{Instance, InstanceManager, InstanceStorage, InstanceUpdateEvent};
use crate::model::{
    ClusterConstraint, ClusterResourceState, GangRequest, InstanceStatus, NodeStatus,
    ResourceRequest,
};
use crate::preemption::{DrainedOutside, Notice};
use crate::provider::{
    CloudInstance, CloudInstanceState, LaunchRequest, ProviderError, ProviderOp,
};
use crate::scheduler::request::{HEAD_MARKER, RecordRef, build_request_with_hexes};
use crate::scheduler::{Decision, NodeFate, TerminationCause, schedule_with_placements};

pub use autostop::{AUTOSTOP_WARNING_S, AutostopSaid, AutostopView};

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
    /// ALLOCATION_FAILED records are reported (and count for the backoff) this long.
    pub failed_report_s: i64,
    /// After a launch failure, a type waits this long before the next launch, doubling
    /// with each failure in the report window.
    pub launch_backoff_s: i64,
    /// The longest launch backoff.
    pub max_launch_backoff_s: i64,
    /// After a failed termination, an instance waits this long before the next try,
    /// doubling with each retry.
    pub terminate_backoff_s: i64,
    /// The longest termination backoff.
    pub max_terminate_backoff_s: i64,
    /// The provider installs Ray (`CloudInstanceProvider::installs_ray`): running
    /// ALLOCATED workers go to RAY_INSTALLING with an [`Effect::InstallRay`].
    pub install_ray: bool,
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
            failed_report_s: 600,
            launch_backoff_s: 5,
            max_launch_backoff_s: 300,
            terminate_backoff_s: 5,
            max_terminate_backoff_s: 300,
            install_ray: false,
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

/// A drain or stop the GCS refused, or that failed (Ray's `RayStopError`).
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
    /// Preemption notices the workers' watchers left (read for draining nodes only).
    pub notices: &'a [Notice],
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
    /// Stop Ray on a node, as Ray's `RayStopper` does: an idle node is drained
    /// (`DRAIN_NODE_REASON_IDLE_TERMINATION`, deadline 0, which the node may reject when
    /// it got work meanwhile); any other (cut for `max_workers`, outdated, of a removed
    /// type) is stopped at once through the GCS's node-drain call. A refusal or failure
    /// comes back as a [`DrainRejection`].
    Drain {
        /// The instance.
        instance_id: String,
        /// Its Ray node (hex).
        node_id_hex: String,
        /// The instance's other hosts' Ray nodes (hex), drained the same way before
        /// `node_id_hex`: a multi-host instance is stopped whole. Empty for one host.
        siblings: Vec<String>,
        /// Why.
        reason: String,
        /// Idle termination (a rejectable drain) rather than a stop.
        idle: bool,
        /// A drain Ray does not refuse, with this deadline (ns since the epoch): the
        /// node takes no new work, what runs on it runs on (consolidation).
        deadline_ns: Option<i64>,
    },
    /// Install Ray on a running worker (Ray's node updater); the provider reports a
    /// failure through `poll_errors`, success is the node joining the GCS.
    InstallRay {
        /// The instance.
        instance_id: String,
        /// Its cloud instance.
        cloud_instance_id: String,
        /// Its node type.
        node_type: String,
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
    /// Node types made unavailable by capacity errors, and why.
    pub unavailable_types: Vec<Unavailable>,
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
    /// Nodes Ray drains without rayscale having asked (preempted, or an operator's
    /// drain), while they last; with `rayscale.preemption.enabled` only.
    pub drained_outside: Vec<DrainedOutside>,
    /// Why: the iteration's reasons for pending demand and for each worker node (none
    /// when scaling was skipped).
    pub explanation: Option<Explanation>,
    /// Autostop's view, with `rayscale.autostop_minutes` (none when scaling was skipped).
    pub autostop: Option<AutostopView>,
    /// Atomic gangs released or set aside this iteration (`rayscale.gangs: atomic`), one
    /// line each, for the event log.
    pub gang_lines: Vec<String>,
}

/// Runs one iteration at `now_ns` (wall clock, ns since the epoch). `avail` carries what
/// is known about the cloud's capacity from one iteration to the next (Ray's
/// `CloudResourceMonitor` and rayscale's unavailable types); the caller keeps it.
#[allow(clippy::too_many_arguments)]
pub fn reconcile<S: InstanceStorage>(
    im: &mut InstanceManager<S>,
    config: &ClusterConfig,
    chain: &mut ExpanderChain,
    settings: &ReconcilerSettings,
    avail: &mut Availability,
    observed: Observed<'_>,
    now_ns: i64,
    ids: &mut dyn IdSource,
) -> Result<Outcome, CoreError> {
    avail.unavailable.expire(now_ns);
    // A cloud entry without an id can be no record's: it is skipped, said, and the rest
    // is reconciled (a provider answering garbage must not stop every iteration).
    let with_id: Vec<CloudInstance>;
    let mut skipped = Vec::new();
    let observed = if observed
        .cloud
        .iter()
        .any(|c| c.cloud_instance_id.is_empty())
    {
        with_id = observed
            .cloud
            .iter()
            .filter(|c| !c.cloud_instance_id.is_empty())
            .cloned()
            .collect();
        skipped.push(format!(
            "skipped {} cloud instance(s) listed without an id (node types: {})",
            observed.cloud.len() - with_id.len(),
            observed
                .cloud
                .iter()
                .filter(|c| c.cloud_instance_id.is_empty())
                .map(|c| format!("{:?}", c.node_type))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ")
        ));
        Observed {
            cloud: &with_id,
            ..observed
        }
    } else {
        observed
    };
    let hexes: Rc<[String]> = observed
        .ray
        .node_states
        .iter()
        .map(crate::model::NodeState::node_id_hex)
        .collect();
    let mut r = Run {
        hosts: hosts::Hosts::of(config, observed.ray, &hexes),
        im,
        avail,
        now_ns,
        to_terminate: Vec::new(),
        out: Outcome::default(),
        read: std::cell::RefCell::new(None),
        holds: Holds::new(),
        hexes,
    };
    r.out.warnings.extend(skipped);
    r.sync(config, observed, ids)?;
    r.step(config, chain, settings, observed, ids)?;
    r.out
        .report
        .pending_requests
        .sort_by(|a, b| a.node_type.cmp(&b.node_type));
    Ok(r.out)
}

/// `base_s * 2^n`, at most `max_s` (the launch and the termination backoffs).
fn backoff_s(base_s: i64, n: u32, max_s: i64) -> i64 {
    base_s.saturating_mul(1i64 << n.min(20)).min(max_s)
}

/// The start of the details of a TERMINATION_FAILED transition that is not retried.
pub const TERMINATION_GIVEN_UP: &str = "termination given up";

/// Whether `i`'s termination was given up (its last change says so): not retried by the
/// backoff, tried again at a restart.
pub(crate) fn termination_given_up(i: &Instance) -> bool {
    i.status == InstanceStatus::TerminationFailed
        && i.status_history
            .last()
            .is_some_and(|c| c.details.starts_with(TERMINATION_GIVEN_UP))
}

/// Errors a terminate call meets again for the same id: the cloud refused this id (the
/// call was split down to it, `driver::effects`), not the call. Credentials (`Auth`: an
/// expired token, a failed token fetch) are not among them: they pass once renewed.
fn is_permanent(kind: &crate::provider::ProviderErrorKind) -> bool {
    use crate::provider::ProviderErrorKind as K;
    matches!(kind, K::InvalidConfig | K::NotFound)
}

/// How many tries in a row a terminate refused for good ([`is_permanent`]) gets before
/// it is given up (an unknown 4xx maps to `InvalidConfig` and may still pass).
pub const TERMINATE_PERMANENT_TRIES: u32 = 3;

/// One line for many alike (`what`: the count and the first few), so that a start or a
/// takeover at 10,000 nodes says one line per kind, not one per node; each is said at
/// debug level.
pub(crate) fn summarize(what: &str, items: &[String]) -> Option<String> {
    for i in items {
        tracing::debug!("{what}: {i}");
    }
    const SHOWN: usize = 3;
    match items.len() {
        0 => None,
        n if n <= SHOWN => Some(format!("{what}: {}", items.join("; "))),
        n => Some(format!(
            "{what}: {n} of them ({}; ...)",
            items[..SHOWN].join("; ")
        )),
    }
}

/// Whether an instance in `status` is on its way out (stopping or being terminated).
pub(crate) fn leaving(status: InstanceStatus) -> bool {
    matches!(
        status,
        InstanceStatus::RayStopRequested
            | InstanceStatus::RayStopping
            | InstanceStatus::RayStopped
            | InstanceStatus::Terminating
            | InstanceStatus::TerminationFailed
    )
}

/// The start of the details of RAY_STOPPING entered from RAY_RUNNING: Ray drains the node
/// and rayscale did not ask (a preemption notice, or an operator's drain).
pub const DRAINED_OUTSIDE: &str = "ray node is draining, not asked by rayscale";

/// The creation detail of a record adopted from a cloud instance no record knew.
pub const ADOPTED_UNKNOWN: &str = "adopted an unknown cloud instance";

/// The instances whose Ray node's row of the GCS reply could not be read: the node is
/// there, but nothing else about it is known, so its instance is kept exactly as it was
/// (never taken for gone, idle or free; no timeout, no stop, no terminate).
pub(crate) struct Unreadable {
    clouds: foldhash::HashSet<String>,
    nodes: foldhash::HashSet<String>,
}

impl Unreadable {
    fn of(ray: &ClusterResourceState) -> Self {
        Unreadable {
            clouds: ray
                .unreadable_nodes
                .iter()
                .filter(|n| !n.instance_id.is_empty())
                .map(|n| n.instance_id.clone())
                .collect(),
            nodes: ray
                .unreadable_nodes
                .iter()
                .map(crate::model::UnreadableNode::node_id_hex)
                .collect(),
        }
    }

    /// Whether `i` runs (or may run) a node whose row could not be read.
    fn holds(&self, i: &Instance) -> bool {
        i.cloud_instance_id
            .as_deref()
            .is_some_and(|c| self.clouds.contains(c))
            || i.node_id.as_deref().is_some_and(|n| self.nodes.contains(n))
    }
}

/// The GCS state with each unreadable node in it as a full node of its instance's type
/// (nothing available, never idle), so the scheduler counts it and places nothing on it;
/// `None` when every row was read.
fn with_unreadable(
    config: &ClusterConfig,
    ray: &ClusterResourceState,
    table: &[Arc<Instance>],
) -> Option<ClusterResourceState> {
    if ray.unreadable_nodes.is_empty() {
        return None;
    }
    let mut out = ray.clone();
    for u in &ray.unreadable_nodes {
        if u.status == Some(NodeStatus::Dead) {
            continue;
        }
        let node_type = table
            .iter()
            .find(|i| live(i) && i.cloud_instance_id.as_deref() == Some(u.instance_id.as_str()))
            .map_or(u.ray_node_type_name.as_str(), |i| i.node_type.as_str());
        let total = config
            .node_type(node_type)
            .map(|t| t.resources.clone())
            .unwrap_or_default();
        out.node_states.push(crate::model::NodeState {
            node_id: u.node_id.clone(),
            instance_id: u.instance_id.clone(),
            ray_node_type_name: node_type.to_string(),
            available_resources: Default::default(),
            total_resources: total,
            status: Some(NodeStatus::Running),
            ..Default::default()
        });
    }
    Some(out)
}

/// The GCS state as the scheduler can take it, when it needs fixing (else `None`): a head
/// started without `RAY_NODE_TYPE_NAME` gets the config's head type, and live Ray nodes of
/// no instance whose type the config does not know are left out (with a warning) instead
/// of failing the iteration.
fn schedulable_state(
    config: &ClusterConfig,
    ray: &ClusterResourceState,
    table: &[Arc<Instance>],
    warnings: &mut Vec<String>,
) -> Option<ClusterResourceState> {
    let cloud: foldhash::HashSet<&str> = table
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
    avail: &'m mut Availability,
    now_ns: i64,
    /// Cloud instances moved to TERMINATING this iteration (one terminate call at the end).
    to_terminate: Vec<String>,
    out: Outcome,
    /// The table as last read, with the number of events applied then: the phases read
    /// it many times, and it changes only when events are applied. (Every write of a
    /// reconcile goes through `apply`; a write that did not would leave this stale.)
    read: std::cell::RefCell<Option<(usize, Table)>>,
    /// Pacing's launch holds, by node type (for the explanation).
    holds: Holds,
    /// Each readable Ray node's id in hex, in the GCS reply's order (computed once).
    hexes: Rc<[String]>,
    /// The live Ray nodes of each instance of a multi-host type, by cloud id (empty
    /// when no type has several hosts).
    hosts: hosts::Hosts,
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

/// The table as one iteration reads it: shared records, sorted by id.
type Table = Rc<Vec<Arc<Instance>>>;

impl<S: InstanceStorage> Run<'_, S> {
    /// The table sorted by id, read again only when events were applied since the last
    /// read.
    fn table(&self) -> Result<Table, CoreError> {
        if let Some((at, t)) = self.read.borrow().as_ref()
            && *at == self.out.events_applied
        {
            return Ok(t.clone());
        }
        let (_, mut all) = self.im.get_instances_shared()?;
        all.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        let t = Rc::new(all);
        *self.read.borrow_mut() = Some((self.out.events_applied, t.clone()));
        Ok(t)
    }

    fn apply(&mut self, events: Vec<InstanceUpdateEvent>) -> Result<(), CoreError> {
        if events.is_empty() {
            return Ok(());
        }
        self.out.events_applied += events.len();
        let applied = self.im.update(&events, self.now_ns)?;
        let by_id: HashMap<&str, &Instance> = applied
            .instances
            .iter()
            .map(|i| (i.instance_id.as_str(), i))
            .collect();
        // The side effects follow from the transitions (Ray's subscribers): RAY_STOP_REQUESTED
        // drains the node, TERMINATING terminates the cloud instance.
        for e in &events {
            let Some(&i) = by_id.get(e.instance_id.as_str()) else {
                continue;
            };
            // Ray's CloudResourceMonitor subscribes to the same transitions.
            self.avail
                .monitor
                .notify(&i.node_type, e.new_status, self.now_ns);
            match e.new_status {
                InstanceStatus::RayStopRequested => self.out.effects.push(Effect::Drain {
                    instance_id: i.instance_id.clone(),
                    node_id_hex: i.node_id.clone().unwrap_or_default(),
                    siblings: hosts::siblings(&self.hosts, i),
                    reason: e.details.clone(),
                    idle: i.idle_stop(),
                    deadline_ns: i.drain_deadline_ns,
                }),
                InstanceStatus::Terminating => {
                    self.to_terminate.extend(i.cloud_instance_id.clone());
                }
                // Ray's ThreadedRayInstaller subscribes to RAY_INSTALLING.
                InstanceStatus::RayInstalling => {
                    if let Some(cid) = &i.cloud_instance_id {
                        self.out.effects.push(Effect::InstallRay {
                            instance_id: i.instance_id.clone(),
                            cloud_instance_id: cid.clone(),
                            node_type: i.node_type.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn ev(i: &Instance, to: InstanceStatus, details: impl Into<String>) -> InstanceUpdateEvent {
        InstanceUpdateEvent::transition(i.instance_id.clone(), i.version, to).with_details(details)
    }
}
