//! The AWS provider against moto's EC2 server (behind the fault switch): the time and EC2
//! calls to launch 1,000 workers of 3 types, in launch requests of 10, 50 and 334 (the
//! reconciler sends one request per type and iteration, its size set by the upscaling
//! speed), and to list a cluster of N instances. The target: calls grow with requests
//! and pages, not with instances.
//!
//! Run: `cargo bench -p rayscale-tests --bench aws_moto` (`-- 10000` lists a 10,000
//! instance cluster on moto too, which takes minutes and may pass the SDK's 180 s call
//! timeout as moto slows with size; `-- list-only` skips the launch table). Listing 10,000
//! instances is measured on a canned EC2 (`tests/fakes/ec2_pages.rs`), which costs nothing
//! per instance on the server side: the time is rayscale's and the SDK's.
//! Needs `RAYSCALE_PYTHON` (a venv with moto[server], as scripts/setup-python.sh makes).

use std::time::Instant;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{MotoEc2, REGION};

fn config() -> ClusterConfig {
    let yaml = format!(
        "cluster_name: bench\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
         head_node_type: head\nmax_workers: 20000\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n  \
         a: {{resources: {{CPU: 2}}, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n  \
         b: {{resources: {{CPU: 4}}, node_config: {{InstanceType: m5.xlarge, ImageId: ami-12c6146b}}}}\n  \
         c: {{resources: {{CPU: 8}}, node_config: {{InstanceType: m5.2xlarge, ImageId: ami-12c6146b}}}}\n"
    );
    ClusterConfig::from_yaml_str(&yaml, "bench.yaml").unwrap_or_else(|e| panic!("{e}"))
}

async fn launch_all(p: &AwsProvider, total: u64, per_request: u64) -> Result<u64, String> {
    let mut made = 0;
    let mut n = 0;
    while made < total {
        for t in ["a", "b", "c"] {
            if made >= total {
                break;
            }
            let count = per_request.min(total - made);
            let o = p
                .launch(&LaunchRequest {
                    request_id: format!("bench-{per_request}-{n}"),
                    node_type: t.into(),
                    count,
                    launch_config_hash: String::new(),
                    avoid_zones: Vec::new(),
                    all_or_nothing: false,
                })
                .await
                .map_err(|e| e.to_string())?;
            made += o.instances.len() as u64;
            n += 1;
        }
    }
    Ok(made)
}

fn calls(p: &AwsProvider) -> String {
    p.calls()
        .snapshot()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(a, n)| format!("{a} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn run(list_size: Option<u64>, list_only: bool) -> Result<(), String> {
    let cfg = config();
    println!("| launch 1,000 workers of 3 types | time | EC2 calls |");
    println!("|---|---|---|");
    let sizes: &[u64] = if list_only { &[] } else { &[10, 50, 334] };
    for &per_request in sizes {
        let moto = MotoEc2::start();
        let p = AwsProvider::new(moto.client(), &cfg, None).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let made = launch_all(&p, 1000, per_request).await?;
        println!(
            "| requests of {per_request} ({made} made) | {:.1} s | {} |",
            t0.elapsed().as_secs_f64(),
            calls(&p)
        );
        let t0 = Instant::now();
        let before = p.calls().snapshot();
        let listed = p.list().await.map_err(|e| e.to_string())?.len();
        let pages = p.calls().snapshot()[0].1 - before[0].1;
        println!(
            "| list {listed} instances | {:.2} s | DescribeInstances {pages} |",
            t0.elapsed().as_secs_f64()
        );
    }
    println!("| canned EC2 (server cost ~0) | time | DescribeInstances calls |");
    println!("|---|---|---|");
    for n in [1_000, 10_000] {
        let ec2 = rayscale_tests::fakes::ec2_pages::Ec2Pages::start(n, "bench").await;
        let p = AwsProvider::new(ec2.client(), &cfg, None).map_err(|e| e.to_string())?;
        let mut best = f64::MAX;
        let mut listed = 0;
        for _ in 0..5 {
            let t0 = Instant::now();
            listed = p.list().await.map_err(|e| e.to_string())?.len();
            best = best.min(t0.elapsed().as_secs_f64());
        }
        println!(
            "| list {listed} instances (best of 5) | {:.3} s | {} per list |",
            best,
            ec2.calls() / 5
        );
    }
    if let Some(n) = list_size {
        let moto = MotoEc2::start();
        let p = AwsProvider::new(moto.client(), &cfg, None).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        launch_all(&p, n, 1000).await?;
        println!(
            "| launch {n} in requests of 1000 | {:.1} s | {} |",
            t0.elapsed().as_secs_f64(),
            calls(&p)
        );
        let t0 = Instant::now();
        let before = p.calls().snapshot()[0].1;
        let listed = p.list().await.map_err(|e| e.to_string())?.len();
        println!(
            "| list {listed} instances | {:.2} s | DescribeInstances {} |",
            t0.elapsed().as_secs_f64(),
            p.calls().snapshot()[0].1 - before
        );
    }
    Ok(())
}

fn main() {
    let list_size = std::env::args().skip(1).find_map(|a| a.parse::<u64>().ok());
    let list_only = std::env::args().any(|a| a == "list-only");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    if let Err(e) = rt.block_on(run(list_size, list_only)) {
        eprintln!("aws_moto: {e}");
        std::process::exit(1);
    }
}
