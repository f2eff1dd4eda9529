//! Expanders choosing new nodes in rounds.

use super::*;
use crate::expander::{ExpanderChain, ExpanderSettings, settings::parse_chain};

fn chain(names: &str, r: &SchedulingRequest, prices: &[(&str, f64)]) -> ExpanderChain {
    let s = ExpanderSettings {
        chain: parse_chain(names),
        prices: prices.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
        ..Default::default()
    };
    ExpanderChain::from_settings(&s, &r.node_types, None).expect("valid chain")
}

fn small_and_big(max_big: Option<u64>) -> SchedulingRequest {
    base(vec![
        ntype("small", &[("CPU", 2.0)], 0, None),
        ntype("big", &[("CPU", 8.0)], 0, max_big),
    ])
}

#[test]
fn each_expander_decides_the_new_nodes() {
    let mut r = small_and_big(None);
    r.resource_requests = vec![task(&[("CPU", 1.0)], 8)];
    let ray = schedule(&r);
    // Ray alternates identical scores; it picks big first (better utilisation at 8).
    assert_eq!(launch(&ray, "big"), 1);
    let d = schedule_with(&r, &mut chain("least-nodes", &r, &[]));
    assert_eq!(d.launch, vec![("big".to_string(), 1)]);
    let d = schedule_with(&r, &mut chain("price", &r, &[("small", 0.1), ("big", 1.0)]));
    assert_eq!(d.launch, vec![("small".to_string(), 4)]);
    // Tie on demands held (8 each): config order decides.
    let d = schedule_with(&r, &mut chain("most-demands", &r, &[]));
    assert_eq!(d.launch, vec![("small".to_string(), 4)]);
    assert!(d.infeasible_requests.is_empty());
}

#[test]
fn rounds_continue_with_what_the_pick_cannot_hold() {
    let mut r = small_and_big(Some(1));
    r.resource_requests = vec![task(&[("CPU", 1.0)], 16)];
    let mut c = chain("least-nodes", &r, &[]);
    let (d, views) = schedule_with_explained(&r, &mut c);
    // Round 1: big (1 node, its max) holds 8; round 2: only small is left, 4 nodes.
    assert_eq!(c.rounds(), 2);
    assert_eq!(
        d.launch,
        vec![("big".to_string(), 1), ("small".to_string(), 4)]
    );
    let placed: u64 = views
        .iter()
        .filter(|v| v.fate == NodeFate::Launch)
        .flat_map(|v| v.placed.iter().map(|(_, k)| *k))
        .sum();
    assert_eq!(placed, 16);
}

#[test]
fn least_waste_keeps_gpu_nodes_for_gpu_work_and_limits_hold() {
    let mut r = base(vec![
        ntype("cpu", &[("CPU", 4.0)], 0, None),
        ntype("gpu", &[("CPU", 4.0), ("GPU", 1.0)], 0, None),
    ]);
    r.resource_requests = vec![
        task(&[("CPU", 1.0)], 4),
        task(&[("CPU", 1.0), ("GPU", 1.0)], 1),
    ];
    let mut c = chain("least-waste", &r, &[]);
    let d = schedule_with(&r, &mut c);
    assert_eq!(
        d.launch,
        vec![("cpu".to_string(), 1), ("gpu".to_string(), 1)]
    );
    // A global cap of 2 nodes (head + 1) leaves room for one new node only.
    r.max_num_nodes = Some(2);
    let mut c = chain("least-waste", &r, &[]);
    let d = schedule_with(&r, &mut c);
    assert_eq!(d.launch.iter().map(|(_, k)| k).sum::<u64>(), 1);
    let infeasible: u64 = d.infeasible_requests.iter().map(|(_, k)| k).sum();
    assert!(infeasible >= 1);
}

#[test]
fn strict_spread_gangs_get_one_node_per_bundle() {
    let mut r = small_and_big(None);
    r.gang_requests = vec![gang(
        &[&[("CPU", 1.0)], &[("CPU", 1.0)], &[("CPU", 1.0)]],
        Some(PlacementConstraint::AntiAffinity {
            label_name: "_PG_x".into(),
            label_value: "x".into(),
        }),
    )];
    let d = schedule_with(&r, &mut chain("least-waste", &r, &[]));
    // small wastes 1 of 2 per node, big 7 of 8.
    assert_eq!(d.launch, vec![("small".to_string(), 3)]);
    assert!(d.infeasible_gang_requests.is_empty());
}

#[test]
fn existing_capacity_is_used_before_any_round() {
    let mut r = small_and_big(None);
    r.instances
        .push(running("w1", "big", &[("CPU", 8.0)], &[("CPU", 8.0)], 0));
    r.resource_requests = vec![task(&[("CPU", 1.0)], 8)];
    let mut c = chain("least-nodes", &r, &[]);
    let d = schedule_with(&r, &mut c);
    assert!(d.launch.is_empty());
    assert_eq!(c.rounds(), 0);
}
