//! The GCP provider against the stateful Compute Engine fake (`tests/fakes/gce.rs`): the
//! time and API calls to launch 500 workers in one launch request (one insert per
//! instance: Compute Engine has no batch insert of named instances), the operation polls
//! that costs per insert, for operations that take 0.6 s and 5 s, and the time and pages
//! to list a 10,000-instance cluster. The fake answers at once; the times are rayscale's,
//! the client's and the fake's bookkeeping, not Google's.
//!
//! Run: `cargo bench -p rayscale-tests --bench gcp_fake`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest};
use rayscale_provider_gcp::{GcpProvider, Polling};
use rayscale_tests::fakes::gce::{GceFake, Timing};

fn config() -> ClusterConfig {
    let yaml = "cluster_name: bench\nprovider: {type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: proj}\n\
         head_node_type: head\nmax_workers: 20000\n\
         available_node_types:\n  head: {resources: {}, node_config: {machineType: n1-standard-2}}\n  \
         a: {resources: {CPU: 2}, node_config: {machineType: n1-standard-2}}\n";
    ClusterConfig::from_yaml_str(yaml, "bench.yaml").unwrap_or_else(|e| panic!("{e}"))
}

async fn provider(fake: &GceFake) -> Result<GcpProvider, String> {
    let polling = Polling::default();
    let client = rayscale_provider_gcp::client::build(Some(&fake.url()), &polling, None)
        .await
        .map_err(|e| e.to_string())?;
    GcpProvider::new(client, &config(), None, polling).map_err(|e| e.to_string())
}

async fn launch(op: Duration, n: u64) -> Result<(), String> {
    let fake = GceFake::start(
        "proj",
        "us-west1-a",
        Timing {
            operation: op,
            boot: op,
        },
    )
    .await;
    let p = provider(&fake).await?;
    let t = Instant::now();
    let out = p
        .launch(&LaunchRequest {
            request_id: "bench-1".into(),
            node_type: "a".into(),
            count: n,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
        .await
        .map_err(|e| e.to_string())?;
    let took = t.elapsed();
    let polls = fake.calls().get_operation.load(Ordering::Relaxed);
    let inserts = fake.calls().insert.load(Ordering::Relaxed);
    // What the launch left running is asked for by poll_errors at the next iterations.
    let before = fake.calls().get_operation.load(Ordering::Relaxed);
    let errors = p.poll_errors().await;
    let left = fake.calls().get_operation.load(Ordering::Relaxed) - before;
    println!(
        "| {n} | {:.1} s | {:.2} s | {inserts} | {polls} | {:.2} | {} | {left} |",
        op.as_secs_f64(),
        took.as_secs_f64(),
        polls as f64 / inserts.max(1) as f64,
        out.instances.len(),
    );
    if !errors.is_empty() || out.shortfall.is_some() {
        return Err(format!("errors: {errors:?} {:?}", out.shortfall));
    }
    Ok(())
}

async fn list(n: usize) -> Result<(), String> {
    let fake = GceFake::start("proj", "us-west1-a", Timing::default()).await;
    fake.seed(
        n,
        "ray-bench-worker",
        serde_json::json!({"ray-cluster-name": "bench", "ray-node-type": "worker", "ray-user-node-type": "a"}),
    );
    let p = provider(&fake).await?;
    let t = Instant::now();
    let l = p.list().await.map_err(|e| e.to_string())?;
    let took = t.elapsed();
    println!(
        "list {} instances: {:.3} s, {} pages",
        l.len(),
        took.as_secs_f64(),
        fake.calls().list.load(Ordering::Relaxed)
    );
    Ok(())
}

async fn run() -> Result<(), String> {
    rayscale_tests::install_crypto_provider();
    println!(
        "| workers | operation takes | launch returned after | inserts | operation polls | polls per insert | made | asked again by poll_errors |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    launch(Duration::from_millis(600), 500).await?;
    launch(Duration::from_secs(5), 500).await?;
    list(10_000).await
}

fn main() {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    if let Err(e) = rt.block_on(run()) {
        eprintln!("gcp_fake: {e}");
        std::process::exit(1);
    }
}
