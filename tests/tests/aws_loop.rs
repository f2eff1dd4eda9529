//! The autoscaling loop over the AWS provider on moto (behind the fault switch), with
//! core's fake GCS for the demand: what a cloud's errors do to the loop's decisions.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rayscale_core::config::ClusterConfig;
use rayscale_core::driver::{ConfigSource, Driver, DriverOptions, Reloaded, TokioClock};
use rayscale_core::expander::ExpanderChain;
use rayscale_core::provider::{CloudInstanceProvider, CloudInstanceState};
use rayscale_core::testing::{FakeGcs, demand};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{MotoEc2, REGION};

const AMI: &str = "ami-12c6146b";

/// The config once (it never changes).
struct Fixed(Option<ClusterConfig>);

impl ConfigSource for Fixed {
    fn poll(&mut self) -> Result<Option<Reloaded>, String> {
        let Some(config) = self.0.take() else {
            return Ok(None);
        };
        let chain = ExpanderChain::from_settings(&config.expander, &config.node_types, None)
            .map_err(|e| e.to_string())?;
        Ok(Some(Reloaded { config, chain }))
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Two worker types of the same shape; the priority expander prefers `big`.
fn config(cluster: &str, ttl_s: u64) -> ClusterConfig {
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
         head_node_type: head\nmax_workers: 10\nupscaling_speed: 100\n\
         rayscale: {{unavailable_type_ttl_s: {ttl_s}, expander: {{chain: [priority], priorities: {{10: [big], 1: [alt]}}}}}}\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n  \
         big: {{resources: {{CPU: 8}}, max_workers: 5, node_config: {{InstanceType: m5.2xlarge, ImageId: {AMI}}}}}\n  \
         alt: {{resources: {{CPU: 8}}, max_workers: 5, node_config: {{InstanceType: c5.2xlarge, ImageId: {AMI}}}}}\n"
    );
    ClusterConfig::from_yaml_str(&yaml, "loop.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn driver(
    cluster: &str,
    cfg: &ClusterConfig,
    gcs: &FakeGcs,
    provider: Arc<dyn CloudInstanceProvider>,
) -> Driver<FakeGcs, TokioClock> {
    Driver::new(
        cluster,
        Arc::new(gcs.clone()),
        provider,
        TokioClock::new(now_ns()),
        Box::new(Fixed(Some(cfg.clone()))),
        DriverOptions {
            interval: Duration::from_millis(200),
            watch: Duration::from_millis(100),
            ..Default::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_moves_the_demand_to_another_type_until_its_window_ends() {
    rayscale_tests::install_crypto_provider();
    let moto = MotoEc2::start();
    let ttl = 8;
    let cfg = config("capacity", ttl);
    let provider: Arc<dyn CloudInstanceProvider> =
        Arc::new(AwsProvider::new(moto.client(), &cfg, None).unwrap());
    // Neither type has capacity; one worker of 8 CPUs is wanted.
    moto.faults(r#"{"capacity": {"m5.2xlarge": 0, "c5.2xlarge": 0}}"#);
    let gcs = FakeGcs::new();
    gcs.set_demand(vec![demand(&[("CPU", 8.0)], 1)]);
    let mut d = driver("capacity", &cfg, &gcs, provider.clone());
    let runs = || (moto.runs_of("m5.2xlarge"), moto.runs_of("c5.2xlarge"));
    // Each reconciled step, what EC2 was asked for so far.
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) && runs().1 == 0 {
        if d.step().await.reconciled {
            seen.push(runs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_alt = seen
        .iter()
        .position(|r| r.1 == 1)
        .unwrap_or_else(|| panic!("alt never asked for: {seen:?}"));
    let first_big = seen.iter().position(|r| r.0 == 1).unwrap();
    assert_eq!(seen[first_alt].0, 1, "big asked once before alt: {seen:?}");
    assert!(
        first_alt > first_big && first_alt - first_big <= 2,
        "the demand moves to alt within the next iterations: {seen:?}"
    );
    eprintln!("reconciled steps, (big, alt) RunInstances so far: {seen:?}");
    let refused_at = Instant::now();
    // Within the window: neither refused type is asked again, though the demand stays.
    moto.faults(r#"{"uncap": ["m5.2xlarge"]}"#);
    while refused_at.elapsed() < Duration::from_secs(ttl - 3) {
        d.step().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(runs(), (1, 1), "no call for a type inside its window");
    // After it: big is tried again, and made.
    let mut made = false;
    while refused_at.elapsed() < Duration::from_secs(ttl + 10) && !made {
        d.step().await;
        made = provider
            .list()
            .await
            .unwrap()
            .iter()
            .any(|i| i.node_type == "big");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(made, "big made after its window; runs {:?}", runs());
    assert_eq!(runs().0, 2, "big asked once more, after its window");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_ec2_keeps_pending_is_listed_pending_until_it_runs() {
    rayscale_tests::install_crypto_provider();
    let moto = MotoEc2::start();
    let cfg = config("linger", 60);
    let provider = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    moto.faults(r#"{"linger": ["m5.2xlarge"]}"#);
    let req = |id: &str, t: &str| rayscale_core::provider::LaunchRequest {
        request_id: id.into(),
        node_type: t.into(),
        count: 2,
        launch_config_hash: "h".into(),
    };
    provider.launch(&req("slow", "big")).await.unwrap();
    provider.launch(&req("fast", "alt")).await.unwrap();
    let states = |l: &[rayscale_core::provider::CloudInstance], t: &str| {
        l.iter()
            .filter(|i| i.node_type == t)
            .map(|i| i.state)
            .collect::<Vec<_>>()
    };
    let l = provider.list().await.unwrap();
    assert_eq!(
        states(&l, "big"),
        [CloudInstanceState::Pending, CloudInstanceState::Pending]
    );
    assert_eq!(
        states(&l, "alt"),
        [CloudInstanceState::Running, CloudInstanceState::Running]
    );
    assert!(
        l.iter()
            .filter(|i| i.node_type == "big")
            .all(|i| !i.is_running())
    );
    // EC2 finishes provisioning: running.
    moto.faults(r#"{"release": ["m5.2xlarge"]}"#);
    let l = provider.list().await.unwrap();
    assert_eq!(
        states(&l, "big"),
        [CloudInstanceState::Running, CloudInstanceState::Running]
    );
}
