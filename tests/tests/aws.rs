//! The AWS provider on moto's EC2 server (behind rayscale's fault switch,
//! `tests/fakes/moto_ec2.py`): the provider conformance suite, then what only EC2 has
//! (cached stopped workers, subnet rotation on capacity errors, replayed launches).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstanceProvider, CloudInstanceState, LaunchRequest, ProviderErrorKind,
};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::conformance::{Provoke, Subject, run_all};
use rayscale_tests::fakes::aws::{MotoEc2, REGION};

/// A moto AMI (moto 5.2.5 ships it).
const AMI: &str = "ami-12c6146b";

fn config(cluster: &str, provider_extra: &str, worker: &str) -> ClusterConfig {
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {{type: aws, region: {REGION}{provider_extra}}}\n\
         head_node_type: head\nmax_workers: 100\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n  \
         cpu: {{resources: {{CPU: 2}}, max_workers: 100, node_config: {worker}}}\n"
    );
    ClusterConfig::from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn worker_config() -> String {
    format!("{{InstanceType: m5.large, ImageId: {AMI}}}")
}

/// A head instance of `cluster` made the way `ray up` tags one.
async fn make_head(moto: &MotoEc2, cluster: &str) -> String {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
    let out = moto
        .client()
        .run_instances()
        .image_id(AMI)
        .instance_type("m5.large".into())
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(tag("ray-cluster-name", cluster))
                .tags(tag("ray-node-type", "head"))
                .tags(tag("ray-user-node-type", "head"))
                .tags(tag("ray-node-status", "uninitialized"))
                .tags(tag("Name", &format!("ray-{cluster}-head")))
                .build(),
        )
        .send()
        .await
        .unwrap();
    out.instances()[0].instance_id().unwrap().to_string()
}

struct MotoProvoke(Arc<MotoEc2>);

#[async_trait::async_trait]
impl Provoke for MotoProvoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        let fault = match kind {
            ProviderErrorKind::Capacity { .. } => r#"{"capacity": {"m5.large": 0}}"#.to_string(),
            ProviderErrorKind::Quota => {
                r#"{"error_next": {"code": "VcpuLimitExceeded", "status": 400}}"#.into()
            }
            // The provider tries a throttled RunInstances 4 times.
            ProviderErrorKind::Throttled => {
                r#"{"throttle_next": 4, "throttle_action": "RunInstances"}"#.into()
            }
            ProviderErrorKind::InvalidConfig => {
                r#"{"error_next": {"code": "InvalidAMIID.NotFound", "status": 400}}"#.into()
            }
            ProviderErrorKind::Auth => {
                r#"{"error_next": {"code": "UnauthorizedOperation", "status": 403}}"#.into()
            }
            ProviderErrorKind::Transient => {
                r#"{"error_next": {"code": "InternalError", "status": 500}}"#.into()
            }
            // A launch has nothing to be "not found" (an unknown AMI or subnet is a
            // config error).
            ProviderErrorKind::NotFound => return None,
        };
        self.0.faults(&fault);
        Some(LaunchRequest {
            request_id: request_id.into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
    }
    async fn limit_capacity(&self, _node_type: &str, n: u64) -> bool {
        self.0
            .faults(&format!(r#"{{"capacity": {{"m5.large": {n}}}}}"#));
        true
    }
    async fn unlimit_capacity(&self, _node_type: &str) {
        self.0.faults(r#"{"uncap": ["m5.large"]}"#);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_provider_conforms_on_moto() {
    let moto = Arc::new(MotoEc2::start());
    let head = make_head(&moto, "conf").await;
    // Workers are terminated, not cached, for the suite: a cached worker would be
    // restarted instead of a new one launched, which the suite does not expect.
    let cfg = config("conf", ", cache_stopped_nodes: false", &worker_config());
    let provider = Arc::new(AwsProvider::new(moto.client(), &cfg, None).unwrap());
    let subject = Subject {
        provider: provider.clone(),
        node_type: "cpu".into(),
        head_id: Some(head),
        head_type: Some("head".into()),
        settle: Duration::from_secs(5),
        all_or_nothing: true,
        provoke: Box::new(MotoProvoke(moto.clone())),
    };
    let report = run_all(&subject).await;
    report.print("aws");
    assert_eq!(report.skipped_names(), ["error_kind_not_found"]);
    // The head, the suite's launches of 2, 7, 3 and the all-or-nothing 3 (its replay
    // finds its instances by their tag), its launcher's head (sent twice, made once), and
    // the six errors (the throttled one tried 4 times): one RunInstances per request,
    // never one per instance.
    assert_eq!(moto.calls("RunInstances"), 1 + 4 + 1 + 5 + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_workers_are_stopped_then_restarted() {
    let moto = MotoEc2::start();
    let cfg = config("cache", "", &worker_config());
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    let req = |id: &str, n| LaunchRequest {
        request_id: id.into(),
        node_type: "cpu".into(),
        count: n,
        launch_config_hash: cfg.node_type("cpu").unwrap().launch_config_hash.clone(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    };
    let first = p.launch(&req("lr-1", 2)).await.unwrap();
    let mut ids: Vec<String> = first
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    ids.sort();
    assert_eq!(ids.len(), 2);
    p.terminate(&ids, "t-1").await.unwrap();
    assert_eq!(moto.calls("StopInstances"), 1);
    assert_eq!(
        moto.calls("TerminateInstances"),
        0,
        "cached, not terminated"
    );
    // Stopped instances are not listed.
    let listed = p.list().await.unwrap();
    assert!(
        listed
            .iter()
            .filter(|c| ids.contains(&c.cloud_instance_id))
            .all(|c| c.state == CloudInstanceState::Stopping),
        "{listed:?}"
    );
    // A new request takes the stopped workers back (plus one new instance).
    let second = p.launch(&req("lr-2", 3)).await.unwrap();
    assert!(second.shortfall.is_none());
    let mut again: Vec<String> = second
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    again.sort();
    assert_eq!(again.len(), 3);
    assert!(
        ids.iter().all(|i| again.contains(i)),
        "{ids:?} not in {again:?}"
    );
    assert_eq!(moto.calls("StartInstances"), 1);
    assert_eq!(
        moto.calls("RunInstances"),
        2,
        "one for lr-1, one for lr-2's third"
    );
    // They carry the new request id, so a replay of lr-2 makes nothing.
    let listed = p.list().await.unwrap();
    for id in &ids {
        let c = listed.iter().find(|c| &c.cloud_instance_id == id).unwrap();
        assert_eq!(c.request_id.as_deref(), Some("lr-2"));
    }
    let replay = p.launch(&req("lr-2", 3)).await.unwrap();
    assert_eq!(replay.instances.len(), 3);
    assert_eq!(moto.calls("RunInstances"), 2);
    assert_eq!(moto.calls("StartInstances"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_head_is_stopped_by_down_and_started_by_the_next_up() {
    let moto = MotoEc2::start();
    let cfg = config("cachehead", "", &worker_config());
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    let req = |id: &str| LaunchRequest {
        request_id: id.into(),
        node_type: "head".into(),
        count: 1,
        launch_config_hash: cfg.node_type("head").unwrap().launch_config_hash.clone(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    };
    // A worker type is not a head, and the head's type is not a worker.
    let e = p
        .launch_head(&LaunchRequest {
            node_type: "cpu".into(),
            ..req("x")
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::InvalidConfig, "{e}");
    let e = p.launch(&req("y")).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::InvalidConfig, "{e}");
    let made = p.launch_head(&req("up-1")).await.unwrap();
    let id = made.instances[0].cloud_instance_id.clone();
    assert!(made.instances[0].is_head());
    p.terminate_head(&id).await.unwrap();
    assert_eq!(moto.calls("StopInstances"), 1, "cached: stopped");
    assert_eq!(moto.calls("TerminateInstances"), 0);
    let again = p.launch_head(&req("up-2")).await.unwrap();
    assert_eq!(again.instances.len(), 1);
    assert_eq!(
        again.instances[0].cloud_instance_id, id,
        "the same head, started"
    );
    assert!(again.instances[0].is_head());
    assert_eq!(moto.calls("StartInstances"), 1);
    assert_eq!(moto.calls("RunInstances"), 1);
    // No worker is ever taken for a head, nor a head for a worker.
    let w = p
        .launch(&LaunchRequest {
            node_type: "cpu".into(),
            launch_config_hash: cfg.node_type("cpu").unwrap().launch_config_hash.clone(),
            ..req("w-1")
        })
        .await
        .unwrap();
    assert_ne!(w.instances[0].cloud_instance_id, id);
    assert!(
        p.terminate_head(&w.instances[0].cloud_instance_id)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_moves_to_the_next_subnet() {
    let moto = MotoEc2::start();
    let subnets = moto.default_subnets().await;
    assert!(subnets.len() >= 2, "{subnets:?}");
    let worker = format!(
        "{{InstanceType: m5.large, ImageId: {AMI}, SubnetIds: [{}, {}]}}",
        subnets[0], subnets[1]
    );
    let cfg = config("subnets", ", cache_stopped_nodes: false", &worker);
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    moto.faults(r#"{"error_next": {"code": "InsufficientInstanceCapacity", "status": 500}}"#);
    let o = p
        .launch(&LaunchRequest {
            request_id: "lr-s".into(),
            node_type: "cpu".into(),
            count: 2,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
        .await
        .unwrap();
    assert!(o.shortfall.is_none(), "{:?}", o.shortfall);
    assert_eq!(o.instances.len(), 2);
    assert_eq!(
        moto.calls("RunInstances"),
        2,
        "one refused, one in the next subnet"
    );
    let out = moto
        .client()
        .describe_instances()
        .set_instance_ids(Some(
            o.instances
                .iter()
                .map(|c| c.cloud_instance_id.clone())
                .collect(),
        ))
        .send()
        .await
        .unwrap();
    for r in out.reservations() {
        for i in r.instances() {
            assert_eq!(i.subnet_id(), Some(subnets[1].as_str()));
        }
    }
    // Every subnet out of capacity: a capacity error of the type, no zone, and nothing made.
    moto.faults(r#"{"capacity": {"m5.large": 0}}"#);
    let e = p
        .launch(&LaunchRequest {
            request_id: "lr-t".into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        ProviderErrorKind::Capacity {
            node_type: "cpu".into(),
            zone: None
        },
        "{e}"
    );
    assert_eq!(moto.calls("RunInstances"), 4);
    // Capacity back; the first subnet avoided (a preemption there): the launch goes to
    // the second, and with both avoided no call is made and the type is out.
    moto.faults(r#"{"uncap": ["m5.large"]}"#);
    let listed = p.list().await.unwrap();
    assert!(
        listed
            .iter()
            .all(|c| c.zone.as_deref() == Some(subnets[1].as_str())),
        "a subnet type's instances are placed by subnet: {listed:?}"
    );
    let o = p
        .launch(&LaunchRequest {
            request_id: "lr-u".into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: vec![subnets[0].clone()],
            all_or_nothing: false,
        })
        .await
        .unwrap();
    assert_eq!(o.instances.len(), 1);
    assert_eq!(
        o.instances[0].zone.as_deref(),
        Some(subnets[1].as_str()),
        "placed by subnet, as listed"
    );
    assert_eq!(
        moto.calls("RunInstances"),
        5,
        "one call, in the open subnet"
    );
    let e = p
        .launch(&LaunchRequest {
            request_id: "lr-v".into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: vec![subnets[0].clone(), subnets[1].clone()],
            all_or_nothing: false,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e.kind, ProviderErrorKind::Capacity { zone: None, .. }),
        "{e}"
    );
    assert_eq!(
        moto.calls("RunInstances"),
        5,
        "no call with every place avoided"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_after_the_launch_moved_to_the_next_subnet_launches_nothing_twice() {
    // The first send: the first subnet out of capacity, the second one made both. A
    // crash before the table knew; the replay's describe does not show them yet, and the
    // first subnet has capacity again. The replay's first attempt carries the request's
    // one token with another SubnetId: EC2 answers IdempotentParameterMismatch (the
    // request went through before), never a second launch.
    let moto = MotoEc2::start();
    let subnets = moto.default_subnets().await;
    assert!(subnets.len() >= 2, "{subnets:?}");
    let worker = format!(
        "{{InstanceType: m5.large, ImageId: {AMI}, SubnetIds: [{}, {}]}}",
        subnets[0], subnets[1]
    );
    let cfg = config("replay-subnets", ", cache_stopped_nodes: false", &worker);
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    let req = LaunchRequest {
        request_id: "lr-rs".into(),
        node_type: "cpu".into(),
        count: 2,
        launch_config_hash: String::new(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    };
    moto.faults(r#"{"error_next": {"code": "InsufficientInstanceCapacity", "status": 500}}"#);
    assert_eq!(p.launch(&req).await.unwrap().instances.len(), 2);
    assert_eq!(moto.stats()["instances_launched"], 2);
    moto.faults(r#"{"hide_last": 2}"#);
    let replay = p.launch(&req).await.unwrap();
    assert!(replay.shortfall.is_none(), "{:?}", replay.shortfall);
    assert_eq!(
        moto.stats()["instances_launched"],
        2,
        "nothing launched twice"
    );
    moto.faults(r#"{"unhide": true}"#);
    let workers = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| !c.is_head())
        .count();
    assert_eq!(workers, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_whose_describe_shows_part_of_the_launch_makes_nothing_more() {
    // DescribeInstances is eventually consistent: a replay of a request (a crash, a
    // requeue) may see only some of the instances the first call made. The replay must
    // be the same call, never a new one for the count it could not see.
    let moto = MotoEc2::start();
    let cfg = config("lag", "", &worker_config());
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    let req = LaunchRequest {
        request_id: "lr-lag".into(),
        node_type: "cpu".into(),
        count: 3,
        launch_config_hash: cfg.node_type("cpu").unwrap().launch_config_hash.clone(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    };
    assert_eq!(p.launch(&req).await.unwrap().instances.len(), 3);
    moto.faults(r#"{"hide_last": 2}"#);
    let workers = |l: Vec<rayscale_core::provider::CloudInstance>| {
        l.into_iter().filter(|c| !c.is_head()).count()
    };
    assert_eq!(workers(p.list().await.unwrap()), 1, "the describe lags");
    let replay = p.launch(&req).await.unwrap();
    assert!(replay.shortfall.is_none(), "{:?}", replay.shortfall);
    assert_eq!(
        moto.stats()["instances_launched"],
        3,
        "nothing launched twice"
    );
    moto.faults(r#"{"unhide": true}"#);
    assert_eq!(workers(p.list().await.unwrap()), 3);
    // The same with the whole launch hidden: the replay's call is the first one again,
    // and EC2 answers its reservation.
    moto.faults(r#"{"hide_last": 3}"#);
    p.launch(&req).await.unwrap();
    assert_eq!(moto.stats()["instances_launched"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_run_instances_with_the_same_token_makes_nothing_twice() {
    // The provider's own check (instances tagged with the request) hides the token; here
    // the token itself is exercised: the same RunInstances sent twice, as after a lost
    // answer, gives the same instances (EC2's idempotency, which the switch adds to moto).
    let moto = MotoEc2::start();
    let send = || async {
        moto.client()
            .run_instances()
            .image_id(AMI)
            .instance_type("m5.large".into())
            .min_count(1)
            .max_count(2)
            .client_token(rayscale_core::provider::idempotency_token("lr-x/0", 0))
            .send()
            .await
            .unwrap()
    };
    let a = send().await;
    let b = send().await;
    let ids = |o: &aws_sdk_ec2::operation::run_instances::RunInstancesOutput| {
        o.instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&a).len(), 2, "MaxCount honoured");
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(moto.stats()["instances_launched"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_node_config_fails_at_load_naming_its_path() {
    let moto = MotoEc2::start();
    let cfg = config(
        "bad",
        "",
        &format!("{{InstanceType: m5.large, ImageId: {AMI}, CpuOptions: {{CoreCount: many}}}}"),
    );
    let e = AwsProvider::new(moto.client(), &cfg, None)
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e.split(':').next(),
        Some("available_node_types.cpu.node_config.CpuOptions.CoreCount"),
        "{e}"
    );
    // And a reconfigure to it keeps the last good config.
    let good = config("bad", "", &worker_config());
    let p = AwsProvider::new(moto.client(), &good, None).unwrap();
    assert!(p.reconfigure(&cfg).await.is_err());
    let o = p
        .launch(&LaunchRequest {
            request_id: "lr-g".into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
        .await
        .unwrap();
    assert_eq!(o.instances.len(), 1);
}

#[test]
fn boot_script_prints_what_a_node_runs() {
    let bin = rayscale_tests::workspace_bin("rayscale");
    let yaml =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/aws/golden.yaml");
    let out = std::process::Command::new(&bin)
        .arg("boot-script")
        .arg(&yaml)
        .args(["cpu", "--head-ip", "10.1.2.3"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("#!/bin/bash"), "{text}");
    assert!(text.contains("export RAY_HEAD_IP='10.1.2.3'"), "{text}");
    assert!(
        text.contains("latest/meta-data/instance-id"),
        "IMDSv2: {text}"
    );
    assert!(
        text.contains(r#"RAY_OVERRIDE_RESOURCES='{"CPU":8}'"#),
        "{text}"
    );
    // The head's: Ray's head without Ray's monitor, rayscale beside it, its own address.
    let out = std::process::Command::new(&bin)
        .arg("boot-script")
        .arg(&yaml)
        .arg("head")
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(head.contains("ray start --head --no-monitor"), "{head}");
    assert!(
        head.contains("\"$RAYSCALE_BIN\" run --config ~/ray_bootstrap_config.yaml"),
        "{head}"
    );
    assert!(head.contains("latest/meta-data/local-ipv4"), "{head}");
    // An unknown type is a one-line error.
    let out = std::process::Command::new(&bin)
        .arg("boot-script")
        .arg(&yaml)
        .arg("nope")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.lines().count() == 1, "{err}");
}
