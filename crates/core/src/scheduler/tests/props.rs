//! Property tests of the scheduler: invariants, dense against sparse trials, names.

use super::*;
use proptest::prelude::*;

fn arb_request() -> impl Strategy<Value = SchedulingRequest> {
    let types = prop::collection::vec((1u8..5, 0u8..2, 0u64..3, 1u64..6), 1..4);
    let demand = prop::collection::vec((1u8..9, 0u8..2, 1u64..20), 0..5);
    let nodes = prop::collection::vec((0usize..3, 0u8..5, 0i64..1_000_000), 0..6);
    (types, demand, nodes, prop::option::of(1u64..12)).prop_map(|(types, demand, nodes, max)| {
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
        r.max_num_nodes = max.map(|m| m + 1 + tys.iter().map(|t| t.min_workers).sum::<u64>());
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
    })
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
            live.len() as u64 <= m.max(1 + r.node_types.iter().map(|t| t.min_workers).sum::<u64>())
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
