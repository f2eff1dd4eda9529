//! Unit tests: one or more per rule of Ray's scheduler, plus property tests.

use super::*;
use crate::config::NodeTypeConfig;
use crate::model::{LabelConstraint, LabelOperator, LabelSelector, PlacementConstraint};
use crate::testing::{demand as task, res};

fn ntype(name: &str, r: &[(&str, f64)], min: u64, max: Option<u64>) -> NodeTypeConfig {
    crate::testing::node_type(name, r, min, max)
}

fn head_type() -> NodeTypeConfig {
    ntype("head", &[("CPU", 0.0)], 0, Some(0))
}

fn head_node() -> InstanceInput {
    InstanceInput {
        instance_id: "head".into(),
        node_type: "head".into(),
        status: InstanceStatus::RayRunning,
        is_head: true,
        launch_config_hash: "hash-head".into(),
        ray_node: Some(RayNodeInput {
            node_id_hex: "00".into(),
            total: res(&[("CPU", 0.0)]),
            available: res(&[("CPU", 0.0)]),
            labels: vec![],
            idle_duration_ms: 10_000_000,
        }),
    }
}

fn running(
    id: &str,
    t: &str,
    total: &[(&str, f64)],
    avail: &[(&str, f64)],
    idle_ms: i64,
) -> InstanceInput {
    InstanceInput {
        instance_id: id.into(),
        node_type: t.into(),
        status: InstanceStatus::RayRunning,
        is_head: false,
        launch_config_hash: format!("hash-{t}"),
        ray_node: Some(RayNodeInput {
            node_id_hex: format!("{id}-node"),
            total: res(total),
            available: res(avail),
            labels: vec![],
            idle_duration_ms: idle_ms,
        }),
    }
}

fn pending(id: &str, t: &str, status: InstanceStatus) -> InstanceInput {
    InstanceInput {
        instance_id: id.into(),
        node_type: t.into(),
        status,
        is_head: false,
        launch_config_hash: format!("hash-{t}"),
        ray_node: None,
    }
}

fn base(types: Vec<NodeTypeConfig>) -> SchedulingRequest {
    let mut all = vec![head_type()];
    all.extend(types);
    SchedulingRequest {
        node_types: all,
        head_node_type: Some("head".into()),
        max_num_nodes: None,
        idle_timeout_s: Some(300.0),
        disable_launch_config_check: true,
        instances: vec![head_node()],
        ..Default::default()
    }
}

fn launch(d: &Decision, t: &str) -> u64 {
    d.launch.iter().find(|(n, _)| n == t).map_or(0, |(_, c)| *c)
}

#[test]
fn min_workers_are_launched_as_distinct_nodes() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 3, Some(10))]);
    r.resource_requests = vec![task(&[("CPU", 4.0)], 3)];
    let d = schedule(&r);
    // Three min-worker nodes hold the three 4-CPU tasks: nothing more is launched.
    assert_eq!(launch(&d, "cpu"), 3);
    assert!(d.infeasible_requests.is_empty());
}

#[test]
fn global_max_cuts_only_the_excess_min_worker_nodes() {
    // Compatibility rule MIN_WORKERS_ALIASING: Ray would cut all three.
    let mut r = base(vec![
        ntype("a", &[("CPU", 1.0)], 0, Some(10)),
        ntype("b", &[("CPU", 2.0)], 3, Some(10)),
    ]);
    r.max_num_nodes = Some(4); // 3 workers + head
    r.instances
        .push(running("a1", "a", &[("CPU", 1.0)], &[("CPU", 0.0)], 0));
    let d = schedule(&r);
    assert_eq!(launch(&d, "b"), 2);
    assert!(d.terminate.is_empty());
}

#[test]
fn per_type_max_terminates_least_useful_and_never_the_head() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 0, Some(1))]);
    r.instances
        .push(running("busy", "cpu", &[("CPU", 4.0)], &[("CPU", 0.0)], 0));
    r.instances.push(running(
        "idle",
        "cpu",
        &[("CPU", 4.0)],
        &[("CPU", 4.0)],
        5_000,
    ));
    r.instances
        .push(pending("queued", "cpu", InstanceStatus::Queued));
    let d = schedule(&r);
    let mut ids: Vec<_> = d
        .terminate
        .iter()
        .map(|t| (t.instance_id.as_str(), t.cause))
        .collect();
    ids.sort();
    // Pending first (no Ray), then the longest idle.
    assert_eq!(
        ids,
        [
            ("idle", TerminationCause::MaxNumNodePerType),
            ("queued", TerminationCause::MaxNumNodePerType)
        ]
    );
}

#[test]
fn head_type_counts_its_head_against_max_plus_one() {
    let mut r = base(vec![]);
    r.node_types[0] = ntype("head", &[("CPU", 2.0)], 0, Some(0));
    r.resource_requests = vec![task(&[("CPU", 2.0)], 1)];
    if let Some(n) = r.instances[0].ray_node.as_mut() {
        n.total = res(&[("CPU", 2.0)]);
        n.available = res(&[("CPU", 0.0)]);
    }
    let d = schedule(&r);
    assert!(d.launch.is_empty(), "no head-type workers allowed");
    assert_eq!(d.infeasible_requests.len(), 1);
    assert!(d.terminate.is_empty());
}

#[test]
fn outdated_nodes_only_when_the_check_is_enabled() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 0, Some(10))]);
    let mut old = running("old", "cpu", &[("CPU", 4.0)], &[("CPU", 0.0)], 0);
    old.launch_config_hash = "stale".into();
    r.instances.push(old);
    let mut q = pending("q", "cpu", InstanceStatus::Queued);
    q.launch_config_hash = "hash-cpu".into();
    r.instances.push(q);
    assert!(schedule(&r).terminate.is_empty());
    r.disable_launch_config_check = false;
    let d = schedule(&r);
    // The pending instance keeps its (current) hash: compatibility rule PENDING_LAUNCH_HASH.
    assert_eq!(d.terminate.len(), 1);
    assert_eq!(d.terminate[0].instance_id, "old");
    assert_eq!(d.terminate[0].cause, TerminationCause::Outdated);
}

#[test]
fn gpu_nodes_are_avoided_for_cpu_work() {
    let r0 = base(vec![
        ntype("gpu", &[("CPU", 8.0), ("GPU", 1.0)], 0, Some(10)),
        ntype("cpu", &[("CPU", 8.0)], 0, Some(10)),
    ]);
    let mut r = r0.clone();
    r.resource_requests = vec![task(&[("CPU", 1.0)], 4)];
    let d = schedule(&r);
    assert_eq!(d.launch, vec![("cpu".to_string(), 1)]);
    let mut r = r0;
    r.resource_requests = vec![task(&[("CPU", 1.0), ("GPU", 1.0)], 1)];
    assert_eq!(schedule(&r).launch, vec![("gpu".to_string(), 1)]);
}

#[test]
fn more_matching_resource_types_then_utilisation_win() {
    let mut r = base(vec![
        ntype("big", &[("CPU", 16.0)], 0, Some(10)),
        ntype("small", &[("CPU", 2.0)], 0, Some(10)),
        ntype("mem", &[("CPU", 2.0), ("memory", 8.0)], 0, Some(10)),
    ]);
    r.resource_requests = vec![task(&[("CPU", 2.0), ("memory", 8.0)], 1)];
    assert_eq!(schedule(&r).launch, vec![("mem".to_string(), 1)]);
    r.resource_requests = vec![task(&[("CPU", 2.0)], 1)];
    // `small` is fully used (min utilisation 2*1^3 = 2) vs `big` (16*(1/8)^3).
    assert_eq!(schedule(&r).launch, vec![("small".to_string(), 1)]);
}

#[test]
fn exact_ties_alternate_between_identical_types_like_ray() {
    let mut r = base(vec![
        ntype("a", &[("CPU", 1.0)], 0, Some(10)),
        ntype("b", &[("CPU", 1.0)], 0, Some(10)),
    ]);
    r.resource_requests = vec![task(&[("CPU", 1.0)], 3)];
    // Ray re-appends the chosen type at the end of its candidate list.
    let d = schedule(&r);
    assert_eq!(launch(&d, "a"), 2);
    assert_eq!(launch(&d, "b"), 1);
}

#[test]
fn priority_breaks_exact_ties_only() {
    let mut a = ntype("a", &[("CPU", 1.0)], 0, Some(10));
    let mut b = ntype("b", &[("CPU", 1.0)], 0, Some(10));
    a.priority = 0;
    b.priority = 5;
    let mut r = base(vec![a, b]);
    r.resource_requests = vec![task(&[("CPU", 1.0)], 1)];
    assert_eq!(schedule(&r).launch, vec![("b".to_string(), 1)]);
}

fn selector(key: &str, op: LabelOperator, values: &[&str]) -> LabelSelector {
    LabelSelector {
        constraints: vec![LabelConstraint {
            key: key.into(),
            operator: op,
            values: values.iter().map(|s| s.to_string()).collect(),
        }],
    }
}

#[test]
fn label_selectors_and_fallbacks() {
    let mut za = ntype("za", &[("CPU", 4.0)], 0, Some(10));
    za.labels = vec![("zone".into(), "a".into())];
    let mut zb = ntype("zb", &[("CPU", 4.0)], 0, Some(10));
    zb.labels = vec![("zone".into(), "b".into())];
    let mut r = base(vec![za, zb]);
    let mut t = task(&[("CPU", 1.0)], 1);
    t.request.label_selectors = vec![selector("zone", LabelOperator::In, &["b"])];
    r.resource_requests = vec![t.clone()];
    assert_eq!(schedule(&r).launch, vec![("zb".to_string(), 1)]);
    // First choice zone c (no such type), fallback zone a.
    t.request.label_selectors = vec![
        selector("zone", LabelOperator::In, &["c"]),
        selector("zone", LabelOperator::In, &["a"]),
    ];
    r.resource_requests = vec![t.clone()];
    assert_eq!(schedule(&r).launch, vec![("za".to_string(), 1)]);
    t.request.label_selectors = vec![selector("zone", LabelOperator::NotIn, &["a"])];
    r.resource_requests = vec![t.clone()];
    assert_eq!(schedule(&r).launch, vec![("zb".to_string(), 1)]);
    t.request.label_selectors = vec![selector("zone", LabelOperator::Unspecified, &["a"])];
    r.resource_requests = vec![t];
    let d = schedule(&r);
    assert!(d.launch.is_empty());
    assert_eq!(d.infeasible_requests.len(), 1);
}

fn gang(bundles: &[&[(&str, f64)]], constraint: Option<PlacementConstraint>) -> GangRequest {
    GangRequest {
        requests: bundles
            .iter()
            .map(|b| ResourceRequest {
                resources: res(b),
                placement_constraints: constraint.clone().into_iter().collect(),
                label_selectors: vec![],
            })
            .collect(),
        details: "pg".into(),
        first_bundle_selector: None,
    }
}

#[test]
fn strict_spread_uses_distinct_nodes() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 8.0)], 0, Some(10))]);
    r.gang_requests = vec![gang(
        &[&[("CPU", 1.0)], &[("CPU", 1.0)], &[("CPU", 1.0)]],
        Some(PlacementConstraint::AntiAffinity {
            label_name: "_PG_1".into(),
            label_value: "".into(),
        }),
    )];
    let d = schedule(&r);
    assert_eq!(d.launch, vec![("cpu".to_string(), 3)]);
}

#[test]
fn strict_pack_lands_on_one_node_or_is_infeasible() {
    let aff = Some(PlacementConstraint::Affinity {
        label_name: "_PG_2".into(),
        label_value: "".into(),
    });
    let mut r = base(vec![ntype("cpu", &[("CPU", 8.0)], 0, Some(10))]);
    r.gang_requests = vec![gang(&[&[("CPU", 4.0)], &[("CPU", 4.0)]], aff.clone())];
    assert_eq!(schedule(&r).launch, vec![("cpu".to_string(), 1)]);
    r.gang_requests = vec![gang(&[&[("CPU", 4.0)], &[("CPU", 5.0)]], aff)];
    let d = schedule(&r);
    assert!(d.launch.is_empty());
    assert_eq!(d.infeasible_gang_requests, vec![0]);
}

#[test]
fn pending_instances_count_as_capacity() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 0, Some(10))]);
    r.instances
        .push(pending("q", "cpu", InstanceStatus::Requested));
    r.resource_requests = vec![task(&[("CPU", 1.0)], 6)];
    let d = schedule(&r);
    assert_eq!(
        launch(&d, "cpu"),
        1,
        "4 on the pending node, 2 on one new node"
    );
}

#[test]
fn idle_termination_respects_timeouts_min_workers_and_demand() {
    let mut t = ntype("cpu", &[("CPU", 4.0)], 1, Some(10));
    t.idle_timeout_s = Some(60.0);
    let mut r = base(vec![t]);
    for (id, idle) in [("i1", 61_000), ("i2", 120_000), ("i3", 59_000)] {
        r.instances
            .push(running(id, "cpu", &[("CPU", 4.0)], &[("CPU", 4.0)], idle));
    }
    let d = schedule(&r);
    let mut ids: Vec<_> = d.terminate.iter().map(|t| t.instance_id.as_str()).collect();
    ids.sort();
    // i3 is under the timeout and already satisfies min_workers, so both others go.
    assert_eq!(ids, ["i1", "i2"]);
    let mut r2 = r.clone();
    r2.instances.retain(|i| i.instance_id != "i3");
    let d2 = schedule(&r2);
    let ids: Vec<_> = d2
        .terminate
        .iter()
        .map(|t| t.instance_id.as_str())
        .collect();
    // Without i3, the longest idle goes first and one node stays for min_workers.
    assert_eq!(ids, ["i2"]);
    assert!(
        d.terminate
            .iter()
            .all(|t| t.cause == TerminationCause::Idle)
    );
    // Demand keeps idle nodes alive.
    r.resource_requests = vec![task(&[("CPU", 4.0)], 2)];
    assert!(schedule(&r).terminate.is_empty());
}

#[test]
fn cluster_constraint_keeps_nodes_and_reports_infeasible() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 0, Some(2))]);
    r.instances.push(running(
        "i1",
        "cpu",
        &[("CPU", 4.0)],
        &[("CPU", 4.0)],
        1_000_000,
    ));
    r.cluster_constraints = vec![ClusterConstraint {
        resource_requests: vec![task(&[("CPU", 4.0)], 2)],
    }];
    let d = schedule(&r);
    assert_eq!(launch(&d, "cpu"), 1);
    assert!(d.terminate.is_empty(), "needed by the constraint");
    r.cluster_constraints[0].resource_requests = vec![task(&[("CPU", 4.0)], 3)];
    let d = schedule(&r);
    assert_eq!(d.infeasible_constraints, vec![0]);
    assert!(d.launch.is_empty());
}

#[test]
fn infeasible_requests_are_reported_with_counts() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 0, Some(10))]);
    r.resource_requests = vec![task(&[("GPU", 8.0)], 2), task(&[("CPU", 1.0)], 1)];
    let d = schedule(&r);
    assert_eq!(d.infeasible_requests.len(), 1);
    assert_eq!(d.infeasible_requests[0].1, 2);
    assert_eq!(launch(&d, "cpu"), 1);
}

#[test]
fn existing_nodes_are_filled_before_new_ones() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 0, Some(10))]);
    r.instances
        .push(running("i1", "cpu", &[("CPU", 4.0)], &[("CPU", 3.0)], 0));
    r.resource_requests = vec![task(&[("CPU", 1.0)], 3)];
    assert!(schedule(&r).launch.is_empty());
}

mod props;

mod expander_rounds;

// ---------------------------------------------------------------------- availability

fn twins() -> SchedulingRequest {
    base(vec![
        ntype("a", &[("CPU", 2.0)], 0, Some(10)),
        ntype("b", &[("CPU", 2.0)], 0, Some(10)),
    ])
}

#[test]
fn exact_ties_follow_ray_tie_breaks_recoverable_then_priority_then_availability() {
    let mut r = twins();
    r.resource_requests = vec![task(&[("CPU", 2.0)], 1)];
    assert_eq!(schedule(&r).launch, [("a".to_string(), 1)], "config order");
    // Lower cloud availability loses the tie.
    r.cloud_resource_availabilities = vec![("a".into(), 0.5)];
    assert_eq!(schedule(&r).launch, [("b".to_string(), 1)]);
    // Priority outranks cloud availability...
    r.node_types[1].priority = 1;
    assert_eq!(schedule(&r).launch, [("a".to_string(), 1)]);
    // ...and recoverable availability outranks priority.
    r.recoverable_resource_availabilities = vec![("a".into(), 0.1), ("b".into(), 0.2)];
    assert_eq!(schedule(&r).launch, [("b".to_string(), 1)]);
    // A type absent from a map counts 1.0.
    r.recoverable_resource_availabilities = vec![("b".into(), 0.9)];
    assert_eq!(schedule(&r).launch, [("a".to_string(), 1)]);
}

#[test]
fn the_utilisation_score_outranks_availability() {
    let mut r = base(vec![
        ntype("small", &[("CPU", 2.0)], 0, Some(10)),
        ntype("big", &[("CPU", 8.0)], 0, Some(10)),
    ]);
    r.resource_requests = vec![task(&[("CPU", 2.0)], 1)];
    r.recoverable_resource_availabilities = vec![("small".into(), 0.0)];
    r.cloud_resource_availabilities = vec![("small".into(), 0.0)];
    assert_eq!(schedule(&r).launch, [("small".to_string(), 1)]);
}

#[test]
fn unavailable_types_get_no_new_nodes_but_keep_their_existing_ones() {
    let mut r = twins();
    r.node_types[1].min_workers = 1;
    r.unavailable_node_types = vec!["a".into(), "b".into()];
    r.instances
        .push(running("a1", "a", &[("CPU", 2.0)], &[("CPU", 2.0)], 0));
    r.resource_requests = vec![task(&[("CPU", 2.0)], 3)];
    let d = schedule(&r);
    // min_workers of b is not launched, the existing a node takes one task, two are left.
    assert!(d.launch.is_empty(), "{:?}", d.launch);
    assert_eq!(d.infeasible_requests.iter().map(|(_, n)| n).sum::<u64>(), 2);
    // Only a unavailable: b takes the rest.
    r.unavailable_node_types = vec!["a".into()];
    let d = schedule(&r);
    assert_eq!(d.launch, [("b".to_string(), 2)]);
    assert!(d.infeasible_requests.is_empty());
}

#[test]
fn unavailable_types_are_not_offered_to_expanders() {
    let mut r = twins();
    r.resource_requests = vec![task(&[("CPU", 2.0)], 2)];
    r.unavailable_node_types = vec!["a".into()];
    let mut chain = crate::expander::ExpanderChain::new(
        vec![Box::new(crate::expander::LeastWaste)],
        Vec::new(),
    );
    assert_eq!(schedule_with(&r, &mut chain).launch, [("b".to_string(), 2)]);
}

#[test]
fn cluster_resources_count_launches_and_leave_out_terminations() {
    let mut r = base(vec![ntype("cpu", &[("CPU", 4.0)], 0, Some(1))]);
    r.instances
        .push(running("busy", "cpu", &[("CPU", 4.0)], &[("CPU", 0.0)], 0));
    r.instances.push(running(
        "idle",
        "cpu",
        &[("CPU", 4.0)],
        &[("CPU", 4.0)],
        5_000,
    ));
    let d = schedule(&r);
    assert_eq!(d.terminate.len(), 1);
    // The head's 0 CPUs and the busy node's 4; the terminated node is left out.
    assert_eq!(d.cluster_resources, res(&[("CPU", 4.0)]));

    let mut r = base(vec![ntype(
        "gpu",
        &[("CPU", 8.0), ("GPU", 1.0)],
        0,
        Some(5),
    )]);
    r.resource_requests = vec![task(&[("GPU", 1.0)], 3)];
    let d = schedule(&r);
    assert_eq!(launch(&d, "gpu"), 3);
    assert_eq!(d.cluster_resources, res(&[("CPU", 24.0), ("GPU", 3.0)]));
}
