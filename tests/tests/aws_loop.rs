//! The autoscaling loop over the AWS provider on moto (behind the fault switch), with
//! core's fake GCS for the demand: what a cloud's errors do to the loop's decisions.

#![allow(clippy::unwrap_used)]

#[path = "shared/capacity_fallback.rs"]
mod capacity_fallback;

use std::sync::Arc;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, CloudInstanceState};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{MotoEc2, REGION};

const AMI: &str = "ami-12c6146b";

/// Two worker types of the same shape (m5.2xlarge `big`, c5.2xlarge `alt`).
fn config(cluster: &str, ttl_s: u64) -> ClusterConfig {
    let nc = |t: &str| format!("{{InstanceType: {t}, ImageId: {AMI}}}");
    capacity_fallback::config(
        cluster,
        ttl_s,
        &format!("{{type: aws, region: {REGION}, cache_stopped_nodes: false}}"),
        &nc("m5.large"),
        &nc("m5.2xlarge"),
        &nc("c5.2xlarge"),
    )
}

struct Moto<'a>(&'a MotoEc2);

impl capacity_fallback::Capacity for Moto<'_> {
    fn exhaust_both(&self) {
        self.0
            .faults(r#"{"capacity": {"m5.2xlarge": 0, "c5.2xlarge": 0}}"#);
    }
    fn restore_big(&self) {
        self.0.faults(r#"{"uncap": ["m5.2xlarge"]}"#);
    }
    fn asks(&self) -> (u64, u64) {
        (self.0.runs_of("m5.2xlarge"), self.0.runs_of("c5.2xlarge"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_moves_the_demand_to_another_type_until_its_window_ends() {
    rayscale_tests::install_crypto_provider();
    let moto = MotoEc2::start();
    let ttl = 8;
    let cfg = config("capacity", ttl);
    let provider: Arc<dyn CloudInstanceProvider> =
        Arc::new(AwsProvider::new(moto.client(), &cfg, None).unwrap());
    capacity_fallback::a_capacity_error_moves_the_demand(&cfg, ttl, provider, &Moto(&moto)).await;
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
        avoid_zones: Vec::new(),
        all_or_nothing: false,
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
