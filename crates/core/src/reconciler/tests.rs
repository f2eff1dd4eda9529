//! Reconciler unit tests: an injected clock, fake ids, hand-made GCS and cloud views.

use super::*;
use crate::instance::InMemoryStorage;
use crate::model::{NodeState, ResourceRequestByCount};
use crate::provider::ProviderErrorKind;
use crate::testing::{demand, res};

pub(crate) const CONFIG: &str = r#"
cluster_name: t
max_workers: 10
idle_timeout_minutes: 1
upscaling_speed: 100
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  w: {resources: {CPU: 2}, max_workers: 4, node_config: {}}
"#;

pub(super) struct Ids(u32, u32);
impl IdSource for Ids {
    fn instance_id(&mut self) -> String {
        self.0 += 1;
        format!("i{}", self.0)
    }
    fn request_id(&mut self) -> String {
        self.1 += 1;
        format!("r{}", self.1)
    }
}

pub(super) struct World {
    pub(super) im: InstanceManager<InMemoryStorage>,
    pub(super) config: ClusterConfig,
    pub(super) settings: ReconcilerSettings,
    pub(super) chain: ExpanderChain,
    pub(super) ids: Ids,
    pub(super) ray: ClusterResourceState,
    pub(super) cloud: Vec<CloudInstance>,
    pub(super) errors: Vec<ProviderError>,
    pub(super) rejections: Vec<DrainRejection>,
    pub(super) avail: Availability,
    pub(super) now: i64,
    pub(super) notices: Vec<Notice>,
}

pub(super) fn node(
    id: u8,
    instance: &str,
    t: &str,
    total: &[(&str, f64)],
    avail: &[(&str, f64)],
) -> NodeState {
    NodeState {
        node_id: vec![id; 4],
        instance_id: instance.into(),
        ray_node_type_name: t.into(),
        total_resources: res(total),
        available_resources: res(avail),
        status: Some(NodeStatus::Running),
        ..Default::default()
    }
}

impl World {
    pub(super) fn new(config: &str) -> Self {
        let config = ClusterConfig::from_yaml_str(config, "test").expect("config");
        let settings = ReconcilerSettings::from_config(&config);
        let ttl = config.unavailable_type_ttl_s;
        World {
            im: InstanceManager::new(InMemoryStorage::new()),
            settings,
            config,
            chain: ExpanderChain::ray(),
            ids: Ids(0, 0),
            ray: ClusterResourceState {
                node_states: vec![node(
                    0,
                    "head-1",
                    "head",
                    &[("CPU", 0.0), (HEAD_MARKER, 1.0)],
                    &[("CPU", 0.0), (HEAD_MARKER, 1.0)],
                )],
                ..Default::default()
            },
            cloud: Vec::new(),
            errors: Vec::new(),
            rejections: Vec::new(),
            avail: Availability::new(ttl, 600.0),
            now: 1_000 * SEC,
            notices: Vec::new(),
        }
    }

    pub(super) fn tick(&mut self) -> Outcome {
        let obs = Observed {
            ray: &self.ray,
            cloud: &self.cloud,
            provider_errors: &self.errors,
            drain_rejections: &self.rejections,
            notices: &self.notices,
        };
        let out = reconcile(
            &mut self.im,
            &self.config,
            &mut self.chain,
            &self.settings,
            &mut self.avail,
            obs,
            self.now,
            &mut self.ids,
        )
        .expect("reconcile");
        self.errors.clear();
        self.rejections.clear();
        out
    }

    /// `n` ticks a second apart, none of which drains or terminates anything.
    pub(super) fn assert_quiet(&mut self, n: usize) {
        for _ in 0..n {
            self.now += SEC;
            let out = self.tick();
            assert!(
                !out.effects
                    .iter()
                    .any(|e| matches!(e, Effect::Terminate { .. } | Effect::Drain { .. })),
                "{:?}",
                out.effects
            );
        }
    }

    pub(super) fn statuses(&self) -> Vec<(String, InstanceStatus)> {
        let (_, mut all) = self.im.get_instances().expect("table");
        all.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        all.into_iter().map(|i| (i.instance_id, i.status)).collect()
    }

    pub(super) fn count(&self, s: InstanceStatus) -> usize {
        self.statuses().iter().filter(|(_, x)| *x == s).count()
    }

    pub(super) fn instance(&self, id: &str) -> Instance {
        self.im.get_instance(id).expect("table").expect("instance")
    }

    /// The cloud runs every REQUESTED instance's launch.
    pub(super) fn cloud_fulfils(&mut self, out: &Outcome) {
        for e in &out.effects {
            if let Effect::Launch(l) = e {
                for k in 0..l.count {
                    self.cloud.push(CloudInstance::worker(
                        format!("c-{}-{k}", l.request_id),
                        l.node_type.clone(),
                        Some(&l.request_id),
                    ));
                }
            }
        }
    }

    /// Every cloud instance's raylet joined, idle.
    pub(super) fn ray_joins(&mut self) {
        for (k, c) in self.cloud.iter().enumerate() {
            if !self
                .ray
                .node_states
                .iter()
                .any(|n| n.instance_id == c.cloud_instance_id)
            {
                self.ray.node_states.push(node(
                    k as u8 + 1,
                    &c.cloud_instance_id,
                    &c.node_type,
                    &[("CPU", 2.0)],
                    &[("CPU", 2.0)],
                ));
            }
        }
    }
}

pub(super) fn cpu_demand(n: u64) -> Vec<ResourceRequestByCount> {
    vec![demand(&[("CPU", 1.0)], n)]
}

#[test]
fn scale_up_launches_all_paced_instances_in_one_iteration_then_joins_them() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(8);
    let out = w.tick();
    assert_eq!(w.count(InstanceStatus::Requested), 4);
    let launches: Vec<&LaunchRequest> = out
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Launch(l) => Some(l),
            _ => None,
        })
        .collect();
    assert_eq!(launches.len(), 1);
    assert_eq!(
        (launches[0].node_type.as_str(), launches[0].count),
        ("w", 4)
    );
    assert_eq!(out.report.pending_instances.len(), 4);
    // Same demand next iteration (nothing observed yet): nothing more is launched.
    w.now += SEC;
    let out = w.tick();
    assert!(out.effects.is_empty(), "{:?}", out.effects);
    // The cloud allocates, Ray joins: ALLOCATED then RAY_RUNNING with the node id.
    w.cloud_fulfils(&Outcome {
        effects: launches.into_iter().cloned().map(Effect::Launch).collect(),
        ..Default::default()
    });
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Allocated), 4);
    w.ray_joins();
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.count(InstanceStatus::RayRunning), 4);
    assert!(w.instance("i1").node_id.is_some());
    assert!(out.unknown_ray_nodes.is_empty());
}

#[test]
fn pacing_follows_upscaling_speed_and_max_concurrent_launches() {
    let slow = CONFIG.replace("upscaling_speed: 100", "upscaling_speed: 1");
    let mut w = World::new(&slow);
    w.ray.pending_resource_requests = cpu_demand(8);
    w.tick();
    assert_eq!(
        w.count(InstanceStatus::Requested),
        1,
        "max(1, ceil(1 * max(0, 1)))"
    );
    assert_eq!(w.count(InstanceStatus::Queued), 3);
    let mut w = World::new(CONFIG);
    w.settings.max_concurrent_launches = 2;
    w.ray.pending_resource_requests = cpu_demand(8);
    w.tick();
    assert_eq!(w.count(InstanceStatus::Requested), 2);
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Requested), 2, "still 2 in flight");
}

#[test]
fn requested_timeout_requeues_then_fails_after_the_retry_limit() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(2);
    w.tick();
    assert_eq!(w.count(InstanceStatus::Requested), 1);
    let first_rid = w.instance("i1").launch_request_id.clone();
    for round in 1..=3 {
        w.now += 600 * SEC;
        let out = w.tick();
        // Requeued and requested again in the same iteration, keeping its request id: the
        // request is sent again as it was, so a late first launch is not doubled.
        assert_eq!(
            w.instance("i1").status,
            InstanceStatus::Requested,
            "round {round}"
        );
        assert_eq!(w.instance("i1").launch_request_id, first_rid);
        assert_eq!(
            w.instance("i1").times_entered(InstanceStatus::Requested),
            round + 1
        );
        assert!(out.effects.iter().any(|e| matches!(e,
            Effect::Launch(l) if l.request_id == first_rid && l.count == 1 && l.node_type == "w")));
    }
    w.now += 600 * SEC;
    let out = w.tick();
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::AllocationFailed);
    assert!(
        i1.last_error
            .unwrap_or_default()
            .contains("after 4 requests")
    );
    assert_eq!(out.report.failed_requests.len(), 1);
    assert_eq!(out.report.failed_requests[0].node_type, "w");
}

#[test]
fn launch_errors_fail_the_request_and_are_reported() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(2);
    let out = w.tick();
    let Some(Effect::Launch(l)) = out.effects.first() else {
        panic!("a launch");
    };
    w.errors.push(ProviderError::new(
        ProviderOp::Launch {
            request_id: l.request_id.clone(),
            node_type: "w".into(),
            count: 1,
        },
        ProviderErrorKind::Transient,
        "InsufficientInstanceCapacity",
    ));
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::AllocationFailed);
    assert_eq!(
        out.report.failed_requests[0].reason,
        "InsufficientInstanceCapacity"
    );
}

#[test]
fn launch_failures_back_off_exponentially() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(1);
    let fail = |w: &mut World, out: &Outcome| {
        let Some(Effect::Launch(l)) = out.effects.iter().find(|e| matches!(e, Effect::Launch(_)))
        else {
            panic!("a launch: {:?}", out.effects);
        };
        w.errors.push(ProviderError::new(
            ProviderOp::Launch {
                request_id: l.request_id.clone(),
                node_type: "w".into(),
                count: 1,
            },
            ProviderErrorKind::Transient,
            "boom",
        ));
    };
    let out = w.tick();
    fail(&mut w, &out);
    w.now += SEC;
    let out = w.tick();
    // Failed; a new instance is queued but waits 5 s.
    assert_eq!(w.count(InstanceStatus::AllocationFailed), 1);
    assert_eq!(w.count(InstanceStatus::Queued), 1);
    assert!(!out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
    w.now += 4 * SEC;
    let out = w.tick();
    assert!(!out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
    w.now += SEC;
    let out = w.tick();
    fail(&mut w, &out);
    // Second failure: 10 s.
    w.now += SEC;
    w.tick();
    w.now += 8 * SEC;
    let out = w.tick();
    assert!(!out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
    w.now += 2 * SEC; // 10 s after the second failure
    let out = w.tick();
    assert!(out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
    assert_eq!(w.count(InstanceStatus::AllocationFailed), 2);
}

#[test]
fn a_worker_dying_before_ray_runs_is_a_failed_launch() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(1);
    let out = w.tick();
    w.cloud_fulfils(&out);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Allocated);
    // The process exits at once: gone from the cloud, with a launch error.
    let rid = w.instance("i1").launch_request_id.clone();
    w.cloud.clear();
    w.errors.push(ProviderError::new(
        ProviderOp::Launch {
            request_id: rid,
            node_type: "w".into(),
            count: 1,
        },
        ProviderErrorKind::Transient,
        "ray start exited (exit status: 1)",
    ));
    w.now += SEC;
    let out = w.tick();
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::Terminated);
    assert_eq!(
        i1.last_error.as_deref(),
        Some("ray start exited (exit status: 1)")
    );
    assert_eq!(out.report.failed_requests.len(), 1);
    // The replacement waits for the backoff.
    assert!(!out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
    assert_eq!(w.count(InstanceStatus::Queued), 1);
}

/// A world with one idle running worker `i1` on cloud instance `c-r1-0`.
/// `n` workers of `config` launched, joined and idle (not yet for long).
pub(super) fn with_idle_workers(config: &str, n: u64) -> World {
    let mut w = World::new(config);
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], n)];
    let out = w.tick();
    w.cloud_fulfils(&out);
    w.ray_joins();
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::RayRunning), n as usize);
    w
}

pub(super) fn with_idle_worker() -> World {
    let w = with_idle_workers(CONFIG, 1);
    assert_eq!(w.instance("i1").status, InstanceStatus::RayRunning);
    w
}

#[test]
fn idle_nodes_are_drained_then_terminated_after_ray_stops() {
    let mut w = with_idle_worker();
    w.ray.node_states[1].idle_duration_ms = 61_000;
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopRequested);
    let drain = out
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Drain {
                instance_id,
                node_id_hex,
                idle,
                ..
            } => Some((instance_id.clone(), node_id_hex.clone(), *idle)),
            _ => None,
        })
        .expect("a drain");
    assert_eq!(drain.0, "i1");
    assert_eq!(drain.1, "01010101");
    // Idle: a rejectable IDLE_TERMINATION drain, not a stop.
    assert!(drain.2);
    assert_eq!(w.instance("i1").stop_cause.as_deref(), Some("IDLE"));
    // The GCS drains it, then the node dies: RAY_STOPPING, RAY_STOPPED -> TERMINATING.
    w.ray.node_states[1].status = Some(NodeStatus::Draining);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopping);
    w.ray.node_states[1].status = Some(NodeStatus::Dead);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    assert!(out.effects.iter().any(|e| matches!(e,
        Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids == &vec!["c-r1-0".to_string()])));
    // The cloud instance disappears: TERMINATED.
    w.cloud.clear();
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminated);
}

#[test]
fn a_rejected_drain_goes_back_to_running() {
    let mut w = with_idle_worker();
    w.ray.node_states[1].idle_duration_ms = 61_000;
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopRequested);
    w.rejections.push(DrainRejection {
        instance_id: "i1".into(),
        reason: "node is busy".into(),
    });
    w.ray.node_states[1].idle_duration_ms = 0;
    w.now += SEC;
    w.tick();
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::RayRunning);
    assert_eq!(i1.last_error.as_deref(), Some("node is busy"));
}

#[test]
fn a_missing_ray_node_stops_and_terminates_the_instance() {
    let mut w = with_idle_worker();
    w.ray.node_states.truncate(1);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::Terminate { .. }))
    );
}

#[test]
fn terminating_timeout_fails_and_retries_termination() {
    let mut w = with_idle_worker();
    w.ray.node_states.truncate(1);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    // The cloud instance stays: after the timeout, TERMINATION_FAILED, then, after the
    // backoff (5 s for the first retry), TERMINATING again.
    w.now += 300 * SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::TerminationFailed);
    assert!(
        !out.effects
            .iter()
            .any(|e| matches!(e, Effect::Terminate { .. }))
    );
    w.now += 5 * SEC;
    let out = w.tick();
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::Terminating);
    assert_eq!(i1.termination_retries, 1);
    assert_eq!(i1.times_entered(InstanceStatus::TerminationFailed), 1);
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::Terminate { .. }))
    );
    // A termination error from the provider fails it at once, and the retry waits twice
    // as long (10 s).
    w.errors.push(ProviderError::new(
        ProviderOp::Terminate {
            cloud_instance_id: "c-r1-0".into(),
        },
        ProviderErrorKind::Transient,
        "throttled",
    ));
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::TerminationFailed);
    w.now += 9 * SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::TerminationFailed);
    w.now += SEC;
    w.tick();
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::Terminating);
    assert_eq!(i1.termination_retries, 2);
    assert_eq!(i1.last_error.as_deref(), Some("throttled"));
}

#[test]
fn allocated_and_installing_timeouts() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(1);
    let out = w.tick();
    w.cloud_fulfils(&out);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Allocated);
    w.now += 3600 * SEC;
    let out = w.tick();
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::Terminating);
    assert_eq!(i1.times_entered(InstanceStatus::AllocationTimeout), 1);
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::Terminate { .. }))
    );
}

#[test]
fn unknown_cloud_instances_are_adopted_and_unknown_ray_nodes_reported() {
    let mut w = World::new(CONFIG);
    w.cloud
        .push(CloudInstance::worker("stray", "w", Some("old")));
    w.ray
        .node_states
        .push(node(9, "by-hand", "w", &[("CPU", 2.0)], &[("CPU", 2.0)]));
    // A node with no instance id is no one's to adopt: it is reported.
    w.ray
        .node_states
        .push(node(8, "", "w", &[("CPU", 2.0)], &[("CPU", 2.0)]));
    let out = w.tick();
    let adopted = w.instance("i1");
    assert_eq!(adopted.status, InstanceStatus::Allocated);
    assert_eq!(adopted.cloud_instance_id.as_deref(), Some("stray"));
    assert_eq!(adopted.launch_request_id, "old");
    // A Ray node naming a cloud instance no record holds is adopted (Ray's rule), and
    // runs: it counts, and can be scaled down.
    let by_hand = w.instance("i2");
    assert_eq!(by_hand.status, InstanceStatus::RayRunning);
    assert_eq!(by_hand.cloud_instance_id.as_deref(), Some("by-hand"));
    assert_eq!(by_hand.node_id.as_deref(), Some("09090909"));
    assert_eq!(out.unknown_ray_nodes, vec!["08080808".to_string()]);
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("adopted cloud instances that no record knew: stray (w)"))
    );
}

#[test]
fn infeasible_demand_launches_nothing_and_is_reported() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = vec![demand(&[("GPU", 8.0)], 1)];
    let out = w.tick();
    assert!(out.effects.is_empty());
    assert!(w.statuses().is_empty());
    assert_eq!(out.report.infeasible_requests.len(), 1);
}

#[test]
fn a_head_without_a_type_name_and_strange_nodes_do_not_stop_the_loop() {
    let mut w = World::new(CONFIG);
    w.ray.node_states[0].ray_node_type_name = String::new();
    w.ray
        .node_states
        .push(node(7, "", "mystery", &[("CPU", 8.0)], &[("CPU", 8.0)]));
    w.ray.pending_resource_requests = cpu_demand(2);
    let out = w.tick();
    assert_eq!(w.count(InstanceStatus::Requested), 1);
    assert!(
        out.warnings.iter().any(|m| m.contains("\"mystery\"")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn two_types_launched_together_get_distinct_request_ids() {
    let two = CONFIG.replace(
        "  w: {resources: {CPU: 2}, max_workers: 4, node_config: {}}",
        "  w: {resources: {CPU: 2}, max_workers: 4, node_config: {}}\n  g: {resources: {GPU: 1}, max_workers: 2, node_config: {}}",
    );
    let mut w = World::new(&two);
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 1.0)], 1), demand(&[("GPU", 1.0)], 1)];
    let out = w.tick();
    let ids: Vec<&str> = out
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Launch(l) => Some(l.request_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2, "{:?}", out.effects);
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn records_of_a_removed_node_type_are_terminated_and_do_not_stall_the_loop() {
    let mut w = with_idle_worker();
    // The config loses type `w` (renamed) while i1 runs on it.
    let renamed = CONFIG.replace("  w: {", "  w2: {");
    w.config = ClusterConfig::from_yaml_str(&renamed, "test").expect("config");
    w.ray.pending_resource_requests = cpu_demand(1);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopRequested);
    // A node of a removed type is stopped at once (Ray's `_stop_ray_node`), not drained
    // as idle (which a busy node would reject).
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::Drain { idle: false, .. }))
    );
    // Scheduling went on: the demand gets a w2 worker.
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::Launch(l) if l.node_type == "w2"))
    );
    // A stray cloud instance of an unknown (or no) type is adopted to be terminated.
    w.cloud.push(CloudInstance::worker("stray", "", None));
    w.now += SEC;
    let out = w.tick();
    assert!(out.effects.iter().any(|e| matches!(e,
        Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids.contains(&"stray".to_string()))));
}

#[test]
fn a_dead_node_of_an_earlier_life_does_not_stop_a_new_instance() {
    let mut w = with_idle_worker();
    // The GCS still lists a dead node with the same cloud instance id.
    let mut dead = w.ray.node_states[1].clone();
    dead.node_id = vec![0xee; 4];
    dead.status = Some(NodeStatus::Dead);
    w.ray.node_states.insert(1, dead);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayRunning);
}

#[test]
fn nothing_is_scaled_before_the_head_runs() {
    let mut w = World::new(CONFIG);
    w.ray.node_states.clear();
    w.ray.pending_resource_requests = cpu_demand(4);
    let out = w.tick();
    assert!(out.effects.is_empty());
    assert!(out.decision.is_some());
}

#[test]
fn a_queued_instance_no_longer_needed_is_canceled() {
    let slow = CONFIG.replace("upscaling_speed: 100", "upscaling_speed: 1");
    let mut w = World::new(&slow);
    w.ray.pending_resource_requests = cpu_demand(8);
    w.tick();
    assert_eq!(w.count(InstanceStatus::Queued), 3);
    // Demand vanishes; idle pending instances are kept (no pending idle timeout, as Ray),
    // but the scheduler still sees them as capacity and queues nothing new.
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    let out = w.tick();
    assert_eq!(
        w.count(InstanceStatus::Queued) + w.count(InstanceStatus::Requested),
        4
    );
    assert!(out.decision.expect("decision").launch.is_empty());
}

#[test]
fn busy_nodes_over_a_lowered_max_workers_are_stopped_not_idle_drained() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(6);
    let out = w.tick();
    w.cloud_fulfils(&out);
    w.ray_joins();
    for n in &mut w.ray.node_states[1..] {
        n.available_resources = res(&[("CPU", 0.0)]);
    }
    w.now += SEC;
    w.tick();
    let running = w.count(InstanceStatus::RayRunning);
    assert!(running >= 2, "{running} running");
    // Every node is busy; the user lowers the type's max to 1.
    w.config = ClusterConfig::from_yaml_str(
        &CONFIG.replace("max_workers: 4, node_config", "max_workers: 1, node_config"),
        "test",
    )
    .expect("config");
    w.now += SEC;
    let out = w.tick();
    let stops: Vec<bool> = out
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Drain { idle, .. } => Some(*idle),
            _ => None,
        })
        .collect();
    assert_eq!(stops.len(), running - 1, "{:?}", out.effects);
    assert!(stops.iter().all(|idle| !idle), "{stops:?}");
    let (_, all) = w.im.get_instances().expect("table");
    let stopped = all
        .iter()
        .find(|i| i.status == InstanceStatus::RayStopRequested)
        .expect("a stopped instance");
    assert_eq!(stopped.stop_cause.as_deref(), Some("MAX_NUM_NODE_PER_TYPE"));
}

#[test]
fn an_adopted_node_of_a_type_the_config_lost_is_drained_only_once_idle() {
    let mut w = World::new(CONFIG);
    w.cloud.push(CloudInstance::worker("stray", "gone", None));
    // Busy: one of its two CPUs in use.
    w.ray
        .node_states
        .push(node(9, "stray", "gone", &[("CPU", 2.0)], &[("CPU", 1.0)]));
    for _ in 0..3 {
        w.tick();
    }
    let i = w.instance("i1");
    assert_eq!(i.node_type, "gone");
    assert_eq!(i.status, InstanceStatus::RayRunning);
    // Idle, by the GCS's word: drained as an idle node.
    let n = w.ray.node_states.last_mut().expect("the stray node");
    n.available_resources = n.total_resources.clone();
    n.status = Some(NodeStatus::Idle);
    n.idle_duration_ms = 1_000;
    let out = w.tick();
    let i = w.instance("i1");
    assert_eq!(i.status, InstanceStatus::RayStopRequested);
    assert!(
        out.warnings
            .iter()
            .any(|m| m.contains("terminating i1: node type \"gone\" is not in the config")),
        "{:?}",
        out.warnings
    );
}
