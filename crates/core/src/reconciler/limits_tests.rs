//! The operator's limits in virtual time: the disruption budget, its blocked windows,
//! the delay after a launch, the minimum lifetime and the cost cap; each said in the
//! explanation.

use super::tests::{CONFIG, World, with_idle_workers};
use super::*;
use crate::explain::{DemandReason, NodeReason, StopHold};
use crate::testing::demand;

/// `CONFIG` with room for ten workers and `rayscale` as its `rayscale:` block.
fn config(rayscale: &str) -> String {
    let c = CONFIG.replace(
        "w: {resources: {CPU: 2}, max_workers: 4,",
        "w: {resources: {CPU: 2}, max_workers: 10,",
    );
    format!("{c}rayscale: {rayscale}\n")
}

/// `n` workers up and idle past their timeout, at `w.now`.
fn idle_workers(rayscale: &str, n: u64) -> World {
    let mut w = with_idle_workers(&config(rayscale), n);
    for node in w.ray.node_states.iter_mut().skip(1) {
        node.idle_duration_ms = 61_000;
    }
    w
}

fn held(out: &Outcome) -> Vec<(u64, StopHold)> {
    out.explanation
        .iter()
        .flat_map(|e| &e.nodes)
        .filter_map(|g| match &g.reason {
            NodeReason::StopHeld { hold, .. } => Some((g.count, hold.clone())),
            _ => None,
        })
        .collect()
}

fn draining(w: &World) -> usize {
    w.count(InstanceStatus::RayStopRequested) + w.count(InstanceStatus::RayStopping)
}

#[test]
fn ten_idle_nodes_under_a_budget_of_two_drain_two_at_a_time() {
    let mut w = idle_workers("{disruption_budget: {max_draining: 2}}", 10);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(draining(&w), 2);
    assert_eq!(
        held(&out),
        vec![(
            8,
            StopHold::Draining {
                node_type: None,
                draining: 2,
                max: 2
            }
        )]
    );
    // While the two drain (the GCS takes its time), no third starts.
    for _ in 0..5 {
        w.now += SEC;
        w.tick();
        assert_eq!(draining(&w), 2);
    }
    // The two stop and go: the next two start.
    let ids: Vec<String> = w
        .statuses()
        .into_iter()
        .filter(|(_, s)| *s == InstanceStatus::RayStopRequested)
        .map(|(i, _)| i)
        .collect();
    let gone: Vec<String> = ids
        .iter()
        .filter_map(|i| w.instance(i).cloud_instance_id)
        .collect();
    for n in w.ray.node_states.iter_mut() {
        if gone.contains(&n.instance_id) {
            n.status = Some(NodeStatus::Dead);
        }
    }
    w.now += SEC;
    w.tick();
    w.cloud.retain(|c| !gone.contains(&c.cloud_instance_id));
    w.now += SEC;
    w.tick();
    assert_eq!(draining(&w), 2, "{:?}", w.statuses());
    assert_eq!(w.count(InstanceStatus::RayRunning), 6);
    // Without the budget all ten go at once (Ray's behaviour).
    let mut w = idle_workers("{}", 10);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(draining(&w), 10);
    assert!(held(&out).is_empty());
}

#[test]
fn stops_per_window_and_blocked_windows_hold_voluntary_stops() {
    let mut w = idle_workers("{disruption_budget: {max_stops: 3, window_s: 600}}", 5);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(draining(&w), 3);
    assert!(matches!(
        &held(&out)[..],
        [(2, StopHold::Stops { max: 3, .. })]
    ));
    // Every day, all day: nothing starts.
    let mut w = idle_workers(
        "{disruption_budget: {blocked: [\"Mon-Sun 00:00-24:00\"]}}",
        2,
    );
    w.now += SEC;
    let out = w.tick();
    assert_eq!(draining(&w), 0);
    assert!(matches!(&held(&out)[..], [(2, StopHold::Blocked { .. })]));
}

#[test]
fn no_idle_stop_within_the_delay_after_a_launch_or_before_the_minimum_lifetime() {
    let mut w = idle_workers("{scale_down_delay_after_launch_s: 120}", 1);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(draining(&w), 0);
    assert!(matches!(
        &held(&out)[..],
        [(1, StopHold::DelayAfterLaunch { .. })]
    ));
    // 120 s after the launch request it goes.
    w.now += 120 * SEC;
    w.tick();
    assert_eq!(draining(&w), 1);

    let mut w = idle_workers("{min_node_lifetime_s: 300}", 1);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(draining(&w), 0);
    assert!(matches!(
        &held(&out)[..],
        [(1, StopHold::MinLifetime { .. })]
    ));
    w.now += 300 * SEC;
    w.tick();
    assert_eq!(draining(&w), 1);
}

#[test]
fn the_launch_that_would_pass_the_cost_cap_is_not_made_and_says_why() {
    let mut w = World::new(&config(
        "{max_hourly_cost: 2.5, expander: {prices: {head: 0.5, w: 1.0}}}",
    ));
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 3)];
    let out = w.tick();
    // Two workers (2.0) fit in 2.5; the third does not.
    assert_eq!(
        out.decision.as_ref().map(|d| d.launch.clone()),
        Some(vec![("w".to_string(), 2)])
    );
    let reasons: Vec<(DemandReason, u64)> = out
        .explanation
        .iter()
        .flat_map(|e| &e.demand)
        .map(|g| (g.reason.clone(), g.count))
        .collect();
    assert!(
        reasons.contains(&(
            DemandReason::CostCap {
                node_type: "w".into(),
                hourly_cost: 2.0,
                max_hourly_cost: 2.5
            },
            1
        )),
        "{reasons:?}"
    );
    assert_eq!(w.count(InstanceStatus::Requested), 2);
    // Next iteration the same: still two, still capped.
    w.now += SEC;
    let out = w.tick();
    assert!(out.decision.as_ref().is_some_and(|d| d.launch.is_empty()));
    assert_eq!(w.count(InstanceStatus::Requested), 2);
}

/// A placement group `pg` of three 2-CPU bundles on three nodes, as Ray's GCS reports it.
fn three_node_group(pg: &str) -> Vec<crate::model::GangRequest> {
    use crate::model::{GangRequest, PlacementConstraint, ResourceRequest};
    vec![GangRequest {
        requests: (0..3)
            .map(|_| ResourceRequest {
                resources: crate::testing::res(&[("CPU", 2.0)]),
                placement_constraints: vec![PlacementConstraint::AntiAffinity {
                    label_name: format!("_PG_{pg}"),
                    label_value: String::new(),
                }],
                ..Default::default()
            })
            .collect(),
        details: format!("{pg}:STRICT_SPREAD|PENDING"),
        ..Default::default()
    }]
}

#[test]
fn the_cost_cap_launches_a_gang_whole_or_not_at_all() {
    let mut w = World::new(&config(
        "{max_hourly_cost: 2.5, expander: {prices: {head: 0.5, w: 1.0}}}",
    ));
    // The group (3.0 an hour) and one task.
    w.ray.pending_gang_resource_requests = three_node_group("pg77");
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 1)];
    let out = w.tick();
    // Before: two of the group's three (2.0 within 2.5), a group that cannot be placed.
    // Now: the group does not fit whole and is not launched; the task's node is.
    assert_eq!(
        out.decision.as_ref().map(|d| d.launch.clone()),
        Some(vec![("w".to_string(), 1)])
    );
    assert_eq!(w.count(InstanceStatus::Requested), 1);
    // With room for the whole group, the group goes whole (first), the task within what
    // is left.
    let mut w = World::new(&config(
        "{max_hourly_cost: 3.5, expander: {prices: {head: 0.5, w: 1.0}}}",
    ));
    w.ray.pending_gang_resource_requests = three_node_group("pg78");
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 1)];
    let out = w.tick();
    assert_eq!(
        out.decision.as_ref().map(|d| d.launch.clone()),
        Some(vec![("w".to_string(), 3)])
    );
}
