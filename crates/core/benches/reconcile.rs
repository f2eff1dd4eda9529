//! One reconcile iteration of a large cluster: 1,000 running worker instances (each with
//! its cloud instance and Ray node), 10,000 pending demands of mixed shapes, fake GCS and
//! cloud views. Measures the whole pure iteration: sync, stuck-instance checks, the
//! scheduler, terminations, paced launches and the report.
//!
//! Run: `cargo bench -p rayscale-core --bench reconcile`.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rayscale_core::availability::Availability;
use rayscale_core::config::ClusterConfig;
use rayscale_core::expander::ExpanderChain;
use rayscale_core::instance::{InMemoryStorage, Instance, InstanceManager, StatusChange};
use rayscale_core::model::{ClusterResourceState, InstanceStatus, NodeState, NodeStatus};
use rayscale_core::provider::CloudInstance;
use rayscale_core::reconciler::{IdSource, Observed, ReconcilerSettings, reconcile};
use rayscale_core::testing::{demand, res};

const CONFIG: &str = r#"
cluster_name: bench
max_workers: 2000
upscaling_speed: 100
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  cpu8: {resources: {CPU: 8, memory: 32000000000}, max_workers: 1500, node_config: {}}
  cpu32: {resources: {CPU: 32, memory: 128000000000}, max_workers: 500, node_config: {}}
  gpu: {resources: {CPU: 16, GPU: 4, memory: 64000000000}, max_workers: 200, node_config: {}}
"#;

struct Ids(u64);
impl IdSource for Ids {
    fn instance_id(&mut self) -> String {
        self.0 += 1;
        format!("new-{}", self.0)
    }
    fn request_id(&mut self) -> String {
        self.0 += 1;
        format!("req-{}", self.0)
    }
}

fn world() -> (
    ClusterConfig,
    InMemoryStorage,
    ClusterResourceState,
    Vec<CloudInstance>,
) {
    let config = ClusterConfig::from_yaml_str(CONFIG, "bench").expect("config");
    let types = ["cpu8", "cpu32", "gpu"];
    let mut instances = Vec::new();
    let mut cloud = Vec::new();
    let mut nodes = vec![NodeState {
        node_id: vec![0; 28],
        instance_id: "head".into(),
        ray_node_type_name: "head".into(),
        total_resources: res(&[("CPU", 0.0), ("node:__internal_head__", 1.0)]),
        available_resources: res(&[("CPU", 0.0), ("node:__internal_head__", 1.0)]),
        status: Some(NodeStatus::Running),
        ..Default::default()
    }];
    for i in 0..1000usize {
        let t = types[i % 3];
        let hash = config
            .node_type(t)
            .map(|c| c.launch_config_hash.clone())
            .unwrap_or_default();
        let mut id = vec![0u8; 28];
        id[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        instances.push(Instance {
            instance_id: format!("im-{i}"),
            node_type: t.into(),
            status: InstanceStatus::RayRunning,
            version: 5,
            launch_request_id: format!("lr-{}", i / 10),
            launch_request_size: 10,
            cloud_instance_id: Some(format!("c-{i}")),
            node_id: Some(hex),
            launch_config_hash: hash,
            is_head: false,
            status_history: vec![StatusChange {
                status: InstanceStatus::RayRunning,
                timestamp_ns: 0,
                details: String::new(),
            }],
            launch_retries: 0,
            termination_retries: 0,
            last_error: None,
            stop_cause: None,
            drain_deadline_ns: None,
            gang: None,
        });
        cloud.push(CloudInstance::worker(
            format!("c-{i}"),
            t,
            Some(&format!("lr-{}", i / 10)),
        ));
        type Pairs<'a> = Vec<(&'a str, f64)>;
        let (total, avail): (Pairs, Pairs) = match t {
            "cpu8" => (
                vec![("CPU", 8.0), ("memory", 32e9)],
                vec![("CPU", (i % 3) as f64), ("memory", 8e9)],
            ),
            "cpu32" => (
                vec![("CPU", 32.0), ("memory", 128e9)],
                vec![("CPU", (i % 5) as f64), ("memory", 16e9)],
            ),
            _ => (
                vec![("CPU", 16.0), ("GPU", 4.0), ("memory", 64e9)],
                vec![("CPU", 2.0), ("GPU", (i % 2) as f64), ("memory", 8e9)],
            ),
        };
        nodes.push(NodeState {
            node_id: id,
            instance_id: format!("c-{i}"),
            ray_node_type_name: t.into(),
            total_resources: res(&total),
            available_resources: res(&avail),
            status: Some(NodeStatus::Running),
            ..Default::default()
        });
    }
    let mut pending = Vec::new();
    for s in 0..20u32 {
        let cpu = 0.5 * f64::from(1 + s % 8);
        let mem = f64::from(1 + s % 4) * 1e9;
        if s % 5 == 4 {
            pending.push(demand(&[("CPU", cpu), ("GPU", 1.0), ("memory", mem)], 500));
        } else {
            pending.push(demand(&[("CPU", cpu), ("memory", mem)], 500));
        }
    }
    let state = ClusterResourceState {
        node_states: nodes,
        pending_resource_requests: pending,
        ..Default::default()
    };
    (
        config,
        InMemoryStorage::with_instances(1, instances),
        state,
        cloud,
    )
}

fn bench(c: &mut Criterion) {
    let (config, storage, state, cloud) = world();
    let settings = ReconcilerSettings::from_config(&config);
    let iteration = |mut im: InstanceManager<InMemoryStorage>| {
        reconcile(
            &mut im,
            &config,
            &mut ExpanderChain::ray(),
            &settings,
            &mut Availability::default(),
            Observed {
                ray: &state,
                cloud: &cloud,
                provider_errors: &[],
                drain_rejections: &[],
                notices: &[],
            },
            3_600_000_000_000,
            &mut Ids(0),
        )
        .expect("reconcile")
    };
    let out = iteration(InstanceManager::new(storage.clone()));
    let launch: u64 = out
        .decision
        .as_ref()
        .map_or(0, |d| d.launch.iter().map(|(_, k)| k).sum());
    eprintln!(
        "one iteration: {} events, {} effects, scheduler launches {launch}, {} infeasible",
        out.events_applied,
        out.effects.len(),
        out.report.infeasible_requests.len()
    );
    assert!(launch > 0, "the benchmark must make the scheduler work");
    c.bench_function("reconcile_1000_instances_10000_demands", |b| {
        b.iter_batched(
            || InstanceManager::new(storage.clone()),
            |im| black_box(iteration(im)),
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
