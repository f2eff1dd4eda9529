//! Criterion benchmarks of the scheduler on the shapes of Ray's known slow cases.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use rayscale_core::config::NodeTypeConfig;
use rayscale_core::model::InstanceStatus;
use rayscale_core::scheduler::{InstanceInput, RayNodeInput, SchedulingRequest, schedule};
use rayscale_core::testing::{demand, node_type, res};

fn ntype(name: &str, r: &[(&str, f64)], max: u64) -> NodeTypeConfig {
    node_type(name, r, 0, Some(max))
}

fn node(
    i: usize,
    t: &str,
    total: &[(&str, f64)],
    avail: &[(&str, f64)],
    head: bool,
) -> InstanceInput {
    let ip = format!("node:10.0.{}.{}", i / 256, i % 256);
    let mut tot = total.to_vec();
    let mut av = avail.to_vec();
    tot.push((ip.as_str(), 1.0));
    av.push((ip.as_str(), 1.0));
    InstanceInput {
        instance_id: format!("i-{i}"),
        node_type: t.into(),
        status: InstanceStatus::RayRunning,
        is_head: head,
        launch_config_hash: String::new(),
        ray_node: Some(RayNodeInput {
            node_id_hex: format!("{i:056x}"),
            total: res(&tot),
            available: res(&av),
            labels: vec![],
            idle_duration_ms: 0,
        }),
    }
}

/// (a) Ray PR #61374: 4,000 identical {CPU: 1} tasks on a one-node cluster.
fn case_a() -> SchedulingRequest {
    SchedulingRequest {
        node_types: vec![
            ntype("head", &[("CPU", 0.0)], 0),
            ntype("cpu8", &[("CPU", 8.0)], 1000),
        ],
        head_node_type: Some("head".into()),
        max_num_nodes: Some(1001),
        idle_timeout_s: Some(300.0),
        disable_launch_config_check: true,
        resource_requests: vec![demand(&[("CPU", 1.0)], 4000)],
        instances: vec![node(0, "head", &[("CPU", 0.0)], &[("CPU", 0.0)], true)],
        ..Default::default()
    }
}

/// (b) Ray PR #64175's report: 1,337 busy nodes, 13,315 pending {CPU: 2} demands.
fn case_b() -> SchedulingRequest {
    let mut instances = vec![node(0, "head", &[("CPU", 0.0)], &[("CPU", 0.0)], true)];
    for i in 1..=1337 {
        instances.push(node(
            i,
            "cpu16",
            &[("CPU", 16.0), ("memory", 64e9)],
            &[("CPU", 0.0), ("memory", 8e9)],
            false,
        ));
    }
    SchedulingRequest {
        node_types: vec![
            ntype("head", &[("CPU", 0.0)], 0),
            ntype("cpu16", &[("CPU", 16.0), ("memory", 64e9)], 5000),
        ],
        head_node_type: Some("head".into()),
        max_num_nodes: Some(5001),
        idle_timeout_s: Some(300.0),
        disable_launch_config_check: true,
        resource_requests: vec![demand(&[("CPU", 2.0)], 13_315)],
        instances,
        ..Default::default()
    }
}

/// Partially busy nodes of several types with mixed demand (a smaller cousin of (c)-(e)).
fn case_mixed(nodes: usize, demands: u64) -> SchedulingRequest {
    let types: Vec<NodeTypeConfig> = (0..10)
        .map(|t| {
            let cpu = f64::from(4u32 << (t % 4));
            if t % 3 == 0 {
                ntype(
                    &format!("gpu{t}"),
                    &[("CPU", cpu), ("GPU", 4.0), ("memory", 256e9)],
                    100_000,
                )
            } else {
                ntype(
                    &format!("cpu{t}"),
                    &[("CPU", cpu), ("memory", cpu * 4e9)],
                    100_000,
                )
            }
        })
        .collect();
    let mut instances = vec![node(0, "head", &[("CPU", 0.0)], &[("CPU", 0.0)], true)];
    for i in 1..=nodes {
        let t = &types[i % types.len()];
        let total: Vec<(String, f64)> = t
            .resources
            .iter()
            .map(|(k, v)| (k.to_string(), v as f64 / 1e4))
            .collect();
        let used = (i % 5) as f64 / 4.0;
        let avail: Vec<(String, f64)> = total
            .iter()
            .map(|(k, v)| (k.clone(), (v * (1.0 - used)).floor()))
            .collect();
        let tr: Vec<(&str, f64)> = total.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let ar: Vec<(&str, f64)> = avail.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        instances.push(node(i, &t.name, &tr, &ar, false));
    }
    let mut all_types = vec![ntype("head", &[("CPU", 0.0)], 0)];
    all_types.extend(types);
    let shapes: Vec<Vec<(&str, f64)>> = vec![
        vec![("CPU", 1.0)],
        vec![("CPU", 2.0)],
        vec![("CPU", 0.5)],
        vec![("CPU", 4.0), ("memory", 8e9)],
        vec![("GPU", 1.0)],
        vec![("CPU", 1.0), ("GPU", 1.0)],
        vec![("CPU", 8.0)],
        vec![("memory", 2e9)],
        vec![("CPU", 16.0), ("memory", 32e9)],
        vec![("CPU", 2.0), ("GPU", 2.0)],
    ];
    let per = demands / shapes.len() as u64;
    SchedulingRequest {
        node_types: all_types,
        head_node_type: Some("head".into()),
        max_num_nodes: None,
        idle_timeout_s: Some(300.0),
        disable_launch_config_check: true,
        resource_requests: shapes.iter().map(|s| demand(s, per)).collect(),
        instances,
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let a = case_a();
    c.bench_function("a_4000_cpu1_one_node", |b| {
        b.iter(|| schedule(black_box(&a)))
    });
    let b_ = case_b();
    c.bench_function("b_1337_busy_nodes_13315_cpu2", |b| {
        b.iter(|| schedule(black_box(&b_)))
    });
    let m = case_mixed(1000, 100_000);
    let mut g = c.benchmark_group("large");
    g.sample_size(10);
    g.bench_function("mixed_1000_nodes_100k_demands", |b| {
        b.iter(|| schedule(black_box(&m)))
    });
    let e = case_mixed(10_000, 1_000_000);
    g.bench_function("mixed_10000_nodes_1m_demands", |b| {
        b.iter(|| schedule(black_box(&e)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
