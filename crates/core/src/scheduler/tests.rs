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

mod props {
    use super::*;
    use proptest::prelude::*;

    fn arb_request() -> impl Strategy<Value = SchedulingRequest> {
        let types = prop::collection::vec((1u8..5, 0u8..2, 0u64..3, 1u64..6), 1..4);
        let demand = prop::collection::vec((1u8..9, 0u8..2, 1u64..20), 0..5);
        let nodes = prop::collection::vec((0usize..3, 0u8..5, 0i64..1_000_000), 0..6);
        (types, demand, nodes, prop::option::of(1u64..12)).prop_map(
            |(types, demand, nodes, max)| {
                let tys: Vec<NodeTypeConfig> = types
                    .iter()
                    .enumerate()
                    .map(|(i, (cpu, gpu, min, max))| {
                        ntype(
                            &format!("t{i}"),
                            &[("CPU", f64::from(*cpu) * 2.0), ("GPU", f64::from(*gpu))],
                            *min,
                            Some(*max),
                        )
                    })
                    .collect();
                let mut r = base(tys.clone());
                r.max_num_nodes =
                    max.map(|m| m + 1 + tys.iter().map(|t| t.min_workers).sum::<u64>());
                r.resource_requests = demand
                    .iter()
                    .map(|(cpu, gpu, n)| {
                        task(
                            &[("CPU", f64::from(*cpu) * 0.5), ("GPU", f64::from(*gpu))],
                            *n,
                        )
                    })
                    .collect();
                for (k, (ti, used, idle)) in nodes.iter().enumerate() {
                    let t = &tys[*ti % tys.len()];
                    let total: Vec<(&str, f64)> = t
                        .resources
                        .iter()
                        .map(|(n, v)| {
                            (
                                if n == "CPU" { "CPU" } else { "GPU" },
                                crate::model::resources::to_f64(v),
                            )
                        })
                        .collect();
                    let cpu = total[0].1;
                    let avail = [("CPU", (cpu - f64::from(*used)).max(0.0)), total[1]];
                    r.instances
                        .push(running(&format!("n{k}"), &t.name, &total, &avail, *idle));
                }
                r
            },
        )
    }

    /// Running nodes each with their own availability (CPU in quarters, memory, some GPU,
    /// some an implicit resource, used-up ones left out of the map), and demand of a few shapes, fractional ones among them.
    fn arb_distinct() -> impl Strategy<Value = SchedulingRequest> {
        let nodes = prop::collection::vec((0u8..17, 0u32..64, 0u8..2, 0u8..3), 1..40);
        let demand = prop::collection::vec((1u8..9, 0u32..9, 0u8..2, 0u8..2, 1u64..40), 1..6);
        let gang_first = prop::option::of((1u8..5, 0u8..2));
        (nodes, demand, gang_first).prop_map(|(nodes, demand, gang_first)| {
            let imp = "node:__internal_implicit_resource_x";
            let mut r = base(vec![
                ntype("c", &[("CPU", 4.0), ("memory", 64.0)], 0, Some(100)),
                ntype(
                    "g",
                    &[("CPU", 4.0), ("memory", 64.0), ("GPU", 1.0)],
                    0,
                    Some(100),
                ),
            ]);
            for (k, (cpu, mem, gpu, implicit)) in nodes.iter().enumerate() {
                let t = if *gpu == 1 { "g" } else { "c" };
                let mut total = vec![("CPU", 4.0), ("memory", 64.0)];
                // The GCS leaves a used-up resource out of the available map.
                let mut avail = vec![("CPU", f64::from(*cpu) * 0.25)];
                if *mem > 0 {
                    avail.push(("memory", f64::from(*mem)));
                }
                if *gpu == 1 {
                    total.push(("GPU", 1.0));
                    avail.push(("GPU", 1.0));
                }
                // 1: listed and free; 2: listed and used up (left out of the map).
                if *implicit > 0 {
                    total.push((imp, 1.0));
                }
                if *implicit == 1 {
                    avail.push((imp, 1.0));
                }
                // A resource only the gang asks for, on every third node.
                if k % 3 == 0 {
                    total.push(("accel", 2.0));
                    avail.push(("accel", 2.0));
                }
                let mut node = running(&format!("n{k}"), t, &total, &avail, 0);
                if let Some(ray) = node.ray_node.as_mut() {
                    let zone = if k % 2 == 0 { "a" } else { "b" };
                    ray.labels = vec![("zone".into(), zone.into())];
                }
                r.instances.push(node);
            }
            // A gang placed first (its bundles select a zone, some ask for `accel`), so the
            // demand's trials meet nodes with earlier placements the dense pass must read.
            if let Some((bundles, accel)) = gang_first {
                let mut shape = vec![("CPU", 0.25), ("memory", 1.0)];
                if accel == 1 {
                    shape.push(("accel", 1.0));
                }
                let mut g = gang(&vec![shape.as_slice(); usize::from(bundles)], None);
                for b in &mut g.requests {
                    b.label_selectors = vec![selector("zone", LabelOperator::In, &["a"])];
                }
                r.gang_requests = vec![g];
            }
            r.resource_requests = demand
                .iter()
                .map(|(cpu, mem, gpu, implicit, n)| {
                    let mut shape = vec![
                        ("CPU", f64::from(*cpu) * 0.125),
                        ("memory", f64::from(*mem)),
                    ];
                    if *gpu == 1 {
                        shape.push(("GPU", 0.5));
                    }
                    if *implicit == 1 {
                        shape.push((imp, 0.5));
                    }
                    task(&shape, *n)
                })
                .collect();
            r
        })
    }

    proptest! {
        /// Trials on dense availability decide and place exactly as trials on the
        /// nodes' own maps (in tests each dense trial is also checked against its
        /// node's).
        #[test]
        fn dense_trials_decide_as_sparse_ones(r in arb_distinct()) {
            let dense = schedule_explained(&r);
            let sparse = schedule_explained_sparse(&r);
            prop_assert_eq!(dense, sparse);
        }
    }

    /// Amounts beyond `i64` in fixed point (memory of petabytes) leave the pass to the
    /// sparse trial, which decides as it always did (a dense trial that cut them to `i64`
    /// would place differently).
    #[test]
    fn amounts_beyond_i64_decide_as_sparse_trials() {
        let huge = 1.2e15; // bytes: 1.2e19 in fixed point, beyond i64
        let mut r = base(vec![ntype(
            "c",
            &[("CPU", 4.0), ("memory", huge)],
            0,
            Some(100),
        )]);
        for (k, (cpu, mem)) in [(4.0, huge), (2.0, huge * 0.5), (3.0, 1e12), (1.0, huge)]
            .into_iter()
            .enumerate()
        {
            r.instances.push(running(
                &format!("n{k}"),
                "c",
                &[("CPU", 4.0), ("memory", huge)],
                &[("CPU", cpu), ("memory", mem)],
                0,
            ));
        }
        r.resource_requests = vec![
            task(&[("CPU", 1.0), ("memory", 2.5e14)], 6),
            task(&[("CPU", 0.5), ("memory", 1e11)], 5),
        ];
        let dense = schedule_explained(&r);
        let sparse = schedule_explained_sparse(&r);
        assert_eq!(dense, sparse);
    }

    /// Nodes whose maps share their names (one `Name` per text, as the GCS reader hands
    /// them out) decide as nodes with a copy of each name, with more distinct names than
    /// the pass remembers by pointer and in differing orders.
    #[test]
    fn shared_names_decide_as_copied_ones() {
        let extra: Vec<String> = (0..12).map(|k| format!("acc{k}")).collect();
        let mut r = base(vec![ntype(
            "c",
            &[("CPU", 8.0), ("memory", 64.0)],
            0,
            Some(100),
        )]);
        for k in 0..24usize {
            let mut total = vec![("CPU", 8.0), ("memory", 64.0)];
            let mut avail = vec![("memory", 32.0), ("CPU", (k % 8) as f64)];
            // Each node its own few of the extra resources, in its own order.
            for j in 0..3 {
                let e = extra[(k * 5 + j * 7) % extra.len()].as_str();
                total.push((e, 2.0));
                avail.insert(j % 2, (e, (j % 3) as f64));
            }
            r.instances
                .push(running(&format!("n{k}"), "c", &total, &avail, 0));
        }
        r.resource_requests = vec![
            task(&[("CPU", 1.0), ("acc3", 1.0)], 9),
            task(&[("CPU", 2.0), ("memory", 4.0)], 7),
            task(&[("acc7", 1.0)], 5),
        ];
        let copied = schedule_explained(&r);
        let mut shared: std::collections::HashMap<String, crate::model::Name> =
            std::collections::HashMap::new();
        let mut one = |m: &mut crate::model::ResourceMap| {
            for (k, _) in &mut m.0 {
                *k = shared
                    .entry(k.to_string())
                    .or_insert_with(|| k.clone())
                    .clone();
            }
        };
        for i in &mut r.instances {
            if let Some(ray) = i.ray_node.as_mut() {
                one(&mut ray.total);
                one(&mut ray.available);
            }
        }
        let (decision, views) = schedule_explained(&r);
        assert_eq!((&decision, &views), (&copied.0, &copied.1));
        assert_eq!(schedule_explained_sparse(&r), copied);
        // Each node's total, as the pass read it, is the node's own.
        let sorted = |m: &crate::model::ResourceMap| {
            let mut v: Vec<(String, i128)> = m.0.iter().map(|(k, x)| (k.to_string(), *x)).collect();
            v.sort();
            v
        };
        for v in &views {
            if let Some(i) = v.instance
                && let Some(ray) = &r.instances[i].ray_node
            {
                assert_eq!(sorted(&v.total), sorted(&ray.total), "node {i}");
            }
        }
    }

    fn sum(maps: &[(ResourceRequest, u64)], name: &str) -> i128 {
        maps.iter()
            .map(|(r, c)| r.resources.get(name).unwrap_or(0) * i128::from(*c))
            .sum()
    }

    fn check_invariants(
        r: &SchedulingRequest,
        d: &Decision,
        views: &[NodeView],
    ) -> Result<(), TestCaseError> {
        // Never more than a type's or the cluster's max.
        let live: Vec<&NodeView> = views
            .iter()
            .filter(|v| v.fate != NodeFate::Terminate)
            .collect();
        for t in &r.node_types {
            let n = live.iter().filter(|v| v.node_type == t.name).count() as u64;
            let cap = t.max_workers.unwrap_or(u64::MAX) + u64::from(t.name == "head");
            prop_assert!(
                n <= cap.max(t.min_workers),
                "type {} has {} > {}",
                t.name,
                n,
                cap
            );
        }
        if let Some(m) = r.max_num_nodes {
            prop_assert!(
                live.len() as u64
                    <= m.max(1 + r.node_types.iter().map(|t| t.min_workers).sum::<u64>())
            );
        }
        // Never a node packed past its resources.
        for v in views {
            for (_, a) in v.available.iter() {
                prop_assert!(a >= 0, "negative availability on {:?}", v);
            }
            for name in ["CPU", "GPU"] {
                let total = v.total.get(name).unwrap_or(0);
                prop_assert!(sum(&v.placed, name) <= total);
            }
        }
        // Every request not reported infeasible is placed on a node of the result.
        for rc in &r.resource_requests {
            let placed: u64 = views
                .iter()
                .filter(|v| v.fate != NodeFate::Terminate)
                .flat_map(|v| v.placed.iter())
                .filter(|(q, _)| q.resources == rc.request.resources)
                .map(|(_, c)| *c)
                .sum();
            let infeasible: u64 = d
                .infeasible_requests
                .iter()
                .filter(|(q, _)| q.resources == rc.request.resources)
                .map(|(_, c)| *c)
                .sum();
            let wanted: u64 = r
                .resource_requests
                .iter()
                .filter(|q| q.request.resources == rc.request.resources)
                .map(|q| q.count)
                .sum();
            prop_assert_eq!(placed + infeasible, wanted);
        }
        // Launch counts agree with the views.
        let launched = views.iter().filter(|v| v.fate == NodeFate::Launch).count() as u64;
        prop_assert_eq!(launched, d.launch.iter().map(|(_, c)| c).sum::<u64>());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn invariants_hold(r in arb_request()) {
            let (d, views) = schedule_explained(&r);
            check_invariants(&r, &d, &views)?;
        }

        #[test]
        fn invariants_hold_with_every_expander(r in arb_request(), seed in 0u64..1000) {
            for chain in ["least-waste", "random", "least-nodes,most-demands", "priority,ray", "weighted,least-waste"] {
                let settings = crate::expander::ExpanderSettings {
                    chain: crate::expander::settings::parse_chain(chain),
                    seed,
                    weights: vec![("t0".into(), 3.0), ("t1".into(), 1.0)],
                    ..Default::default()
                };
                let mut c = crate::expander::ExpanderChain::from_settings(&settings, &r.node_types, None)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (d, views) = schedule_with_explained(&r, &mut c);
                check_invariants(&r, &d, &views)?;
            }
        }

        #[test]
        fn ray_chain_is_exactly_schedule(r in arb_request()) {
            let mut c = crate::expander::ExpanderChain::ray();
            prop_assert_eq!(schedule_with(&r, &mut c), schedule(&r));
        }

        #[test]
        fn deterministic(r in arb_request()) {
            prop_assert_eq!(schedule(&r), schedule(&r));
        }
    }
}

mod expander_rounds {
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
}

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
