//! Explanations in virtual time: one test per reason the reconciler gives for pending
//! demand and for a worker node, and the reason going away with its cause.

use super::tests::{CONFIG, World, cpu_demand, with_idle_worker};
use super::*;
use crate::explain::{DemandKind, DemandReason, Explanation, Hold, NodeReason};
use crate::provider::ProviderErrorKind;
use crate::testing::demand;

fn why(out: &Outcome) -> &Explanation {
    out.explanation.as_ref().expect("an explanation")
}

/// The demand groups' (reason, count).
fn pending(out: &Outcome) -> Vec<(DemandReason, u64)> {
    why(out)
        .demand
        .iter()
        .map(|g| (g.reason.clone(), g.count))
        .collect()
}

/// The node groups' (type, reason, count).
fn kept(out: &Outcome) -> Vec<(String, NodeReason, u64)> {
    why(out)
        .nodes
        .iter()
        .map(|g| (g.node_type.clone(), g.reason.clone(), g.count))
        .collect()
}

#[test]
fn a_shape_no_type_has_names_the_missing_resource_on_the_closest_type() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = vec![demand(&[("GPU", 1.0), ("CPU", 1.0)], 3)];
    let out = w.tick();
    assert_eq!(
        pending(&out),
        vec![(
            DemandReason::NoTypeFits {
                closest: Some("w".into()),
                missing: vec![("GPU".into(), 1.0, 0.0)],
            },
            3
        )]
    );
    let g = &why(&out).demand[0];
    assert_eq!(g.kind, DemandKind::Task);
    assert_eq!(g.shapes[0].count, 3);
    assert!(
        why(&out).lines()[1].contains("the closest, w, lacks GPU 1 (it has 0)"),
        "{:?}",
        why(&out).lines()
    );
}

#[test]
fn demand_past_a_types_max_waits_for_the_max_and_the_rest_for_the_launch() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 10)];
    let out = w.tick();
    assert_eq!(
        pending(&out),
        vec![
            (
                DemandReason::TypeAtMax {
                    node_type: "w".into(),
                    max_workers: 4
                },
                6
            ),
            (
                DemandReason::WaitingForLaunch {
                    node_type: "w".into(),
                    nodes: 4
                },
                4
            ),
        ]
    );
    assert_eq!(
        kept(&out),
        vec![(
            "w".into(),
            NodeReason::Launching {
                status: "REQUESTED".into()
            },
            4
        )]
    );
}

#[test]
fn demand_past_the_clusters_max_says_so() {
    let mut w = World::new(&CONFIG.replace("max_workers: 10", "max_workers: 2"));
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 3)];
    let out = w.tick();
    assert!(
        pending(&out).contains(&(DemandReason::ClusterAtMax { max_workers: 2 }, 1)),
        "{:?}",
        pending(&out)
    );
}

#[test]
fn an_unavailable_type_is_named_with_its_error_until_it_expires() {
    let mut w = World::new(CONFIG);
    w.avail
        .unavailable
        .mark("w", None, "InsufficientInstanceCapacity", w.now);
    w.ray.pending_resource_requests = cpu_demand(2);
    let out = w.tick();
    let until = w.now + w.config.unavailable_type_ttl_s * SEC;
    assert_eq!(
        pending(&out),
        vec![(
            DemandReason::Unavailable {
                node_type: "w".into(),
                until_ns: until,
                error: "InsufficientInstanceCapacity".into()
            },
            2
        )]
    );
    // Past the window the type is tried again: the reason is now the launch.
    w.now = until + SEC;
    let out = w.tick();
    assert!(
        matches!(
            pending(&out)[..],
            [(DemandReason::WaitingForLaunch { .. }, 2)]
        ),
        "{:?}",
        pending(&out)
    );
}

#[test]
fn launches_held_by_upscaling_speed_or_concurrency_are_paced() {
    let mut w = World::new(&CONFIG.replace("upscaling_speed: 100", "upscaling_speed: 1"));
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 4)];
    let out = w.tick();
    assert_eq!(
        pending(&out),
        vec![(
            DemandReason::Paced {
                node_type: "w".into(),
                queued: 3,
                hold: Hold::Speed {
                    per_iteration: 1,
                    upscaling_speed: 1.0
                }
            },
            4
        )]
    );
    let mut w = World::new(CONFIG);
    w.settings.max_concurrent_launches = 2;
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 4)];
    let out = w.tick();
    assert_eq!(
        pending(&out),
        vec![(
            DemandReason::Paced {
                node_type: "w".into(),
                queued: 2,
                hold: Hold::Concurrency {
                    in_flight: 2,
                    max: 2
                }
            },
            4
        )]
    );
}

#[test]
fn a_type_that_failed_to_launch_is_paced_by_its_backoff() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 2.0)], 1)];
    let out = w.tick();
    let request_id = out
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Launch(l) => Some(l.request_id.clone()),
            _ => None,
        })
        .expect("a launch");
    w.errors.push(ProviderError::new(
        ProviderOp::Launch {
            request_id,
            node_type: "w".into(),
            count: 1,
        },
        ProviderErrorKind::Transient,
        "boom",
    ));
    // Failed; a new instance is queued and waits 5 s.
    w.now += SEC;
    let out = w.tick();
    assert!(
        matches!(
            &pending(&out)[..],
            [(
                DemandReason::Paced {
                    hold: Hold::Backoff { failures: 1, .. },
                    ..
                },
                1
            )]
        ),
        "{:?}",
        pending(&out)
    );
}

#[test]
fn a_running_worker_is_busy_idle_kept_or_stopping_as_its_idle_time_says() {
    let mut w = with_idle_worker();
    // Busy: resources in use.
    w.ray.node_states[1].available_resources = crate::testing::res(&[("CPU", 0.5)]);
    w.now += SEC;
    let out = w.tick();
    let mut in_use = BTreeMap::new();
    in_use.insert("CPU".to_string(), 1.5);
    assert_eq!(
        kept(&out),
        vec![("w".into(), NodeReason::Busy { in_use }, 1)]
    );
    // Idle for 40 s of 60.
    w.ray.node_states[1].available_resources = crate::testing::res(&[("CPU", 2.0)]);
    w.ray.node_states[1].idle_duration_ms = 40_000;
    w.now += SEC;
    let out = w.tick();
    assert_eq!(
        kept(&out),
        vec![(
            "w".into(),
            NodeReason::Idle {
                longest_s: 40,
                timeout_s: 60
            },
            1
        )]
    );
    // Past the timeout with demand placed on it: kept, and the demand has room.
    w.ray.node_states[1].idle_duration_ms = 61_000;
    w.ray.pending_resource_requests = cpu_demand(1);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(kept(&out), vec![("w".into(), NodeReason::KeptForDemand, 1)]);
    assert_eq!(pending(&out), vec![(DemandReason::FitsRunningNodes, 1)]);
    // The demand gone: it stops, as Ray's scheduler says.
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    let out = w.tick();
    assert_eq!(
        kept(&out),
        vec![(
            "w".into(),
            NodeReason::Stopping {
                cause: "IDLE".into()
            },
            1
        )]
    );
    // Ray refuses the drain: said for that iteration.
    w.rejections.push(DrainRejection {
        instance_id: "i1".into(),
        reason: "node is busy".into(),
    });
    w.ray.node_states[1].idle_duration_ms = 0;
    w.now += SEC;
    let out = w.tick();
    assert_eq!(
        kept(&out),
        vec![(
            "w".into(),
            NodeReason::DrainRejected {
                why: "node is busy".into()
            },
            1
        )]
    );
}

#[test]
fn an_idle_worker_past_its_timeout_is_kept_for_min_workers() {
    let mut w = World::new(&CONFIG.replace(
        "w: {resources: {CPU: 2}, max_workers: 4,",
        "w: {resources: {CPU: 2}, min_workers: 1, max_workers: 4,",
    ));
    let out = w.tick();
    w.cloud_fulfils(&out);
    w.ray_joins();
    w.now += SEC;
    w.tick();
    w.ray.node_states[1].idle_duration_ms = 600_000;
    w.now += SEC;
    let out = w.tick();
    assert_eq!(
        kept(&out),
        vec![(
            "w".into(),
            NodeReason::KeptForMinWorkers { min_workers: 1 },
            1
        )]
    );
    assert!(
        why(&out)
            .lines()
            .iter()
            .any(|l| l.contains("1 w: idle, kept for min_workers (1) [i1]")),
        "{:?}",
        why(&out).lines()
    );
}

/// Busy workers of two types met in turn: one group per type, with its count, its first
/// ids in the table's order and its resources in use summed over its nodes; an idle one
/// and the head are not among them.
#[test]
fn busy_workers_are_summed_per_type_in_table_order() {
    // Two interchangeable types, the second capped at 3 (so the first has more busy
    // nodes than a group keeps examples of).
    let two = super::cloud_tests::TWO_TYPES.replace(
        "b: {resources: {CPU: 2}, max_workers: 8",
        "b: {resources: {CPU: 2}, max_workers: 3",
    );
    assert_ne!(two, super::cloud_tests::TWO_TYPES);
    let mut w = super::tests::with_idle_workers(&two, 10);
    // Each worker its own use; the last one idle.
    let workers = w.ray.node_states.len() - 1;
    for k in 1..=workers {
        let n = &mut w.ray.node_states[k];
        if k == workers {
            n.idle_duration_ms = 1_000;
            continue;
        }
        n.available_resources = crate::testing::res(&[("CPU", 0.125 * k as f64)]);
    }
    w.now += SEC;
    let out = w.tick();
    // What each type's group must hold, from the records in the table's order.
    let mut want: BTreeMap<String, (u64, Vec<String>, f64)> = BTreeMap::new();
    let mut records = w.statuses();
    records.sort();
    for (id, _) in &records {
        let i = w.instance(id);
        let Some(n) = w
            .ray
            .node_states
            .iter()
            .find(|n| Some(&n.instance_id) == i.cloud_instance_id.as_ref())
        else {
            continue;
        };
        if i.is_head || n.idle_duration_ms > 0 {
            continue;
        }
        let free = n
            .available_resources
            .get("CPU")
            .map_or(0.0, crate::model::resources::to_f64);
        let e = want.entry(i.node_type.clone()).or_default();
        e.0 += 1;
        if e.1.len() < crate::explain::MAX_EXAMPLES {
            e.1.push(id.clone());
        }
        e.2 += 2.0 - free;
    }
    assert_eq!(want.len(), 2, "both types busy: {want:?}");
    assert!(
        want.values().any(|(c, _, _)| *c > 5),
        "a type past the examples kept"
    );
    let mut got: BTreeMap<String, (u64, Vec<String>, f64)> = BTreeMap::new();
    for g in &why(&out).nodes {
        if let NodeReason::Busy { in_use } = &g.reason {
            got.insert(
                g.node_type.clone(),
                (g.count, g.examples.clone(), in_use["CPU"]),
            );
        }
    }
    assert_eq!(got, want);
}
