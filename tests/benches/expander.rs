//! What the gRPC expander costs: one scheduling pass over 100,000 pending demands and 10
//! node types with `ray` (Ray's node-by-node choice), with `grpc,ray` against a tonic
//! server on 127.0.0.1 that picks the option with the fewest nodes, and with the built-in
//! `least-nodes` (the same choice without the RPC). Prints the RPCs per pass.
//!
//! Run: `cargo bench -p rayscale-tests --bench expander`.

use std::net::SocketAddr;

use criterion::{Criterion, criterion_group, criterion_main};
use rayscale_core::expander::{
    Expander, ExpanderChain, ExpanderSettings, GrpcExpanderSettings, settings::parse_chain,
};
use rayscale_core::scheduler::{SchedulingRequest, schedule_with};
use rayscale_core::testing::{demand, node_type};
use rayscale_gcs_client::expander::GrpcExpander;
use rayscale_tests::expander_server::{Mode, TestServer};

/// 10 CPU/memory node types, 100,000 demands of 20 shapes that every type can hold.
fn request() -> SchedulingRequest {
    let node_types = (0..10)
        .map(|i| {
            let cpu = f64::from(8 * (1 + i % 4));
            let mem = f64::from(32 * (1 + (i * 7) % 5)) * 1e9;
            node_type(&format!("t{i}"), &[("CPU", cpu), ("memory", mem)], 0, None)
        })
        .collect();
    let resource_requests = (0..20)
        .map(|s| {
            let cpu = 0.5 * f64::from(1 + s % 8);
            let mem = f64::from(1 + (s * 3) % 7) * 1e9;
            demand(&[("CPU", cpu), ("memory", mem)], 5_000)
        })
        .collect();
    SchedulingRequest {
        node_types,
        resource_requests,
        ..Default::default()
    }
}

fn grpc_chain(addr: SocketAddr, r: &SchedulingRequest) -> ExpanderChain {
    let g = GrpcExpanderSettings {
        url: format!("http://{addr}"),
        cert: None,
        insecure: true,
        timeout_s: 5.0,
    };
    let grpc: Box<dyn Expander> =
        Box::new(GrpcExpander::new(&g, &r.node_types, &[]).expect("client"));
    let s = ExpanderSettings {
        chain: parse_chain("grpc,ray"),
        ..Default::default()
    };
    ExpanderChain::from_settings(&s, &r.node_types, Some(grpc)).expect("chain")
}

fn bench(c: &mut Criterion) {
    let r = request();
    let server = TestServer::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        Mode::FewestNodes,
        None,
    )
    .expect("server");
    let mut ray = ExpanderChain::ray();
    let mut grpc = grpc_chain(server.addr, &r);
    // One pass to connect and to count RPCs.
    let before = server.calls();
    let d = schedule_with(&r, &mut grpc);
    let rpcs = server.calls() - before;
    let nodes: u64 = d.launch.iter().map(|(_, k)| k).sum();
    eprintln!(
        "grpc,ray: {rpcs} RPC(s) and {} round(s) for one pass; {nodes} nodes launched; fallbacks {:?}",
        grpc.rounds(),
        grpc.fallbacks()
    );
    assert!(rpcs <= 1, "more than one RPC in a one-round pass");
    let mut ln = ExpanderChain::from_settings(
        &ExpanderSettings {
            chain: parse_chain("least-nodes"),
            ..Default::default()
        },
        &r.node_types,
        None,
    )
    .expect("chain");
    assert_eq!(
        schedule_with(&r, &mut ln),
        d,
        "the server and least-nodes agree"
    );
    let dr = schedule_with(&r, &mut ray);
    eprintln!(
        "ray launches {} nodes of {} types",
        dr.launch.iter().map(|(_, k)| k).sum::<u64>(),
        dr.launch.len()
    );
    let mut g = c.benchmark_group("expander_100k_demands_10_types");
    g.sample_size(20);
    g.bench_function("ray", |b| b.iter(|| schedule_with(&r, &mut ray)));
    g.bench_function("grpc_loopback", |b| b.iter(|| schedule_with(&r, &mut grpc)));
    g.bench_function("least_nodes", |b| b.iter(|| schedule_with(&r, &mut ln)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
