//! The GCP provider on the stateful Compute Engine fake (`tests/fakes/gce.rs`): the
//! provider conformance suite, then what only Compute Engine has (operations that end
//! with an error, paging, replayed inserts by name and `requestId`, cached stopped
//! workers, Ray's GCP YAMLs).

#![allow(clippy::unwrap_used)]

#[path = "shared/capacity_fallback.rs"]
mod capacity_fallback;

use std::sync::Arc;
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstanceProvider, CloudInstanceState, LaunchRequest, NodeKind, ProviderErrorKind,
};
use rayscale_provider_gcp::{GcpProvider, Polling};
use rayscale_tests::conformance::{Provoke, Subject, run_all};
use rayscale_tests::fakes::gce::{GceFake, Timing};

const PROJECT: &str = "proj";
const ZONE: &str = "us-west1-a";

fn config(cluster: &str, provider_extra: &str) -> ClusterConfig {
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {{type: gcp, region: us-west1, availability_zone: {ZONE}, project_id: {PROJECT}{provider_extra}}}\n\
         head_node_type: head\nmax_workers: 100\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{machineType: n1-standard-4}}}}\n  \
         cpu: {{resources: {{CPU: 2}}, max_workers: 100, node_config: {{machineType: n1-standard-2, scheduling: [{{preemptible: true}}]}}}}\n  \
         big: {{resources: {{CPU: 8}}, max_workers: 100, node_config: {{machineType: n1-standard-8}}}}\n"
    );
    ClusterConfig::from_yaml_str(&yaml, "test.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn polling() -> Polling {
    Polling {
        initial: Duration::from_millis(100),
        maximum: Duration::from_millis(300),
        launch_wait: Duration::from_secs(10),
    }
}

async fn provider(fake: &GceFake, cfg: &ClusterConfig) -> GcpProvider {
    rayscale_tests::install_crypto_provider();
    let client = rayscale_provider_gcp::client::build(Some(&fake.url()), &polling(), None)
        .await
        .unwrap();
    GcpProvider::new(client, cfg, None, polling()).unwrap()
}

fn req(cfg: &ClusterConfig, id: &str, t: &str, n: u64) -> LaunchRequest {
    LaunchRequest {
        request_id: id.into(),
        node_type: t.into(),
        count: n,
        launch_config_hash: cfg.node_type(t).unwrap().launch_config_hash.clone(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    }
}

struct GceProvoke(Arc<GceFake>);

#[async_trait::async_trait]
impl Provoke for GceProvoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        self.unlimit_capacity("cpu").await;
        match kind {
            ProviderErrorKind::Capacity { .. } => self.0.faults(|f| {
                f.capacity.insert("n1-standard-2".into(), 0);
            }),
            ProviderErrorKind::Quota => self.0.faults(|f| {
                f.quota.insert("n1-standard-2".into());
            }),
            // The provider tries a throttled insert 4 times.
            ProviderErrorKind::Throttled => self.0.faults(|f| f.throttle_inserts = 4),
            ProviderErrorKind::InvalidConfig => self
                .0
                .faults(|f| f.insert_errors.push((400, "invalid".into()))),
            ProviderErrorKind::Auth => self
                .0
                .faults(|f| f.insert_errors.push((403, "forbidden".into()))),
            // A 503 insert is sent again (same requestId), 4 times in all.
            ProviderErrorKind::Transient => self.0.faults(|f| {
                f.insert_errors
                    .extend(std::iter::repeat_n((503, "backendError".into()), 4))
            }),
            // A launch has nothing to be "not found".
            ProviderErrorKind::NotFound => return None,
        }
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
        self.0.faults(|f| {
            f.capacity.insert("n1-standard-2".into(), n);
        });
        true
    }
    async fn unlimit_capacity(&self, _node_type: &str) {
        self.0.faults(|f| {
            f.capacity.remove("n1-standard-2");
            f.quota.clear();
        });
    }
}

/// A head of `cluster` made the way `ray up` makes one (Ray's labels, Ray's name).
async fn make_head(p: &GcpProvider, cfg: &ClusterConfig) -> String {
    let out = p.launch_head(&req(cfg, "head-1", "head", 1)).await.unwrap();
    out.instances[0].cloud_instance_id.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp_provider_conforms_on_the_fake() {
    let fake = Arc::new(GceFake::start(PROJECT, ZONE, Timing::default()).await);
    let cfg = config("conf", "");
    let p = Arc::new(provider(&fake, &cfg).await);
    let head = make_head(&p, &cfg).await;
    let subject = Subject {
        provider: p.clone(),
        node_type: "cpu".into(),
        head_id: Some(head),
        head_type: Some("head".into()),
        settle: Duration::from_secs(5),
        all_or_nothing: true,
        provoke: Box::new(GceProvoke(fake.clone())),
    };
    let report = run_all(&subject).await;
    report.print("gcp");
    assert_eq!(report.skipped_names(), ["error_kind_not_found"]);
    // Every instance of a plain launch is one insert (an all-or-nothing gang's are one
    // bulkInsert, counted apart); a replay sends none for instances its request made.
    let inserts = fake
        .calls()
        .insert
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        p.calls().insert.load(std::sync::atomic::Ordering::Relaxed),
        inserts
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_that_ends_in_error_is_a_failure_and_nothing_is_left() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("opfail", "");
    let p = provider(&fake, &cfg).await;
    fake.faults(|f| {
        f.capacity.insert("n1-standard-8".into(), 1);
    });
    // Three asked, one had: a shortfall of two, of kind capacity, naming the type.
    let out = p.launch(&req(&cfg, "lr-1", "big", 3)).await.unwrap();
    assert_eq!(out.instances.len(), 1);
    let short = out.shortfall.expect("a shortfall");
    assert!(
        matches!(&short.kind, ProviderErrorKind::Capacity { node_type, zone } if node_type == "big" && zone.is_none()),
        "the cluster's one zone out is the type out: {short}"
    );
    assert!(
        short.to_string().contains(ZONE),
        "the message names the zone: {short}"
    );
    assert!(
        short.to_string().contains("ZONE_RESOURCE_POOL_EXHAUSTED"),
        "{short}"
    );
    assert_eq!(fake.instances().len(), 1, "failed inserts leave nothing");
    // The other type is still had (what the fallback does next).
    let other = p.launch(&req(&cfg, "lr-2", "cpu", 2)).await.unwrap();
    assert!(other.shortfall.is_none());
    assert_eq!(other.instances.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_insert_is_sent_again_and_a_replay_makes_nothing_twice() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("replay", "");
    let p = provider(&fake, &cfg).await;
    fake.faults(|f| f.throttle_inserts = 2);
    let out = p.launch(&req(&cfg, "lr-1", "cpu", 3)).await.unwrap();
    assert!(out.shortfall.is_none(), "{:?}", out.shortfall);
    assert_eq!(out.instances.len(), 3);
    let names: Vec<String> = out
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    for n in &names {
        assert!(
            n.starts_with("ray-replay-worker-") && n.ends_with("-compute"),
            "{n}"
        );
    }
    // A replay (a crash before the table was written) finds them by label: no insert.
    let before = p.calls().insert.load(std::sync::atomic::Ordering::Relaxed);
    let again = p.launch(&req(&cfg, "lr-1", "cpu", 3)).await.unwrap();
    assert_eq!(
        p.calls().insert.load(std::sync::atomic::Ordering::Relaxed),
        before
    );
    let mut a: Vec<String> = again
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    a.sort();
    let mut b = names.clone();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(fake.instances().len(), 3);
    // Each is Ray's: labels, the startup script absent without a head address.
    let body = fake.instance(&names[0]).unwrap();
    assert_eq!(body["labels"]["ray-cluster-name"], "replay");
    assert_eq!(body["labels"]["ray-node-type"], "worker");
    assert_eq!(body["labels"]["ray-user-node-type"], "cpu");
    assert_eq!(body["labels"]["ray-launch-request"], "lr-1");
    assert_eq!(
        body["machineType"],
        format!("zones/{ZONE}/machineTypes/n1-standard-2")
    );
    assert_eq!(body["scheduling"]["preemptible"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_is_listed() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("pages", "");
    let p = provider(&fake, &cfg).await;
    fake.seed(
        1203,
        "ray-pages-worker",
        serde_json::json!({"ray-cluster-name": "pages", "ray-node-type": "worker", "ray-user-node-type": "cpu"}),
    );
    fake.seed(
        5,
        "other",
        serde_json::json!({"ray-cluster-name": "other", "ray-node-type": "worker"}),
    );
    let l = p.list().await.unwrap();
    assert_eq!(l.len(), 1203);
    assert!(l.iter().all(|c| c.node_type == "cpu" && c.is_running()));
    assert_eq!(
        fake.calls().list.load(std::sync::atomic::Ordering::Relaxed),
        3,
        "500 a page"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_workers_are_stopped_then_started() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("cache", ", cache_stopped_nodes: true");
    let p = provider(&fake, &cfg).await;
    let first = p.launch(&req(&cfg, "lr-1", "cpu", 2)).await.unwrap();
    let ids: Vec<String> = first
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    p.terminate(&ids, "t-1").await.unwrap();
    let states = fake.instances();
    assert!(
        ids.iter()
            .all(|i| states.get(i).map(String::as_str) == Some("TERMINATED")),
        "{states:?}"
    );
    assert!(
        p.list().await.unwrap().is_empty(),
        "stopped ones are not listed"
    );
    let second = p.launch(&req(&cfg, "lr-2", "cpu", 3)).await.unwrap();
    assert!(second.shortfall.is_none(), "{:?}", second.shortfall);
    let again: Vec<String> = second
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    assert_eq!(again.len(), 3);
    assert!(ids.iter().all(|i| again.contains(i)), "{ids:?} {again:?}");
    assert_eq!(fake.instances().len(), 3, "two started, one new");
    // They carry the new request id: a replay of lr-2 makes nothing.
    let before = p.calls().insert.load(std::sync::atomic::Ordering::Relaxed);
    let replay = p.launch(&req(&cfg, "lr-2", "cpu", 3)).await.unwrap();
    assert_eq!(replay.instances.len(), 3);
    assert_eq!(
        p.calls().insert.load(std::sync::atomic::Ordering::Relaxed),
        before
    );
    assert!(
        p.list()
            .await
            .unwrap()
            .iter()
            .all(|c| c.state != CloudInstanceState::Stopping || !ids.contains(&c.cloud_instance_id))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_operation_is_checked_by_poll_errors() {
    // Operations take 3 s; launch waits 0.5 s.
    let fake = GceFake::start(
        PROJECT,
        ZONE,
        Timing {
            operation: Duration::from_secs(3),
            boot: Duration::from_secs(1),
        },
    )
    .await;
    let cfg = config("slow", "");
    rayscale_tests::install_crypto_provider();
    let polling = Polling {
        launch_wait: Duration::from_millis(500),
        ..polling()
    };
    let client = rayscale_provider_gcp::client::build(Some(&fake.url()), &polling, None)
        .await
        .unwrap();
    let p = GcpProvider::new(client, &cfg, None, polling).unwrap();
    fake.faults(|f| {
        f.capacity.insert("n1-standard-8".into(), 0);
    });
    let out = p.launch(&req(&cfg, "lr-1", "big", 1)).await.unwrap();
    assert!(out.shortfall.is_none(), "not known yet");
    assert!(p.poll_errors().await.is_empty(), "still running");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let errs = p.poll_errors().await;
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        matches!(&errs[0].kind, ProviderErrorKind::Capacity { node_type, .. } if node_type == "big")
    );
    assert!(p.poll_errors().await.is_empty(), "each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_boots_rayscale_and_workers_join_it() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("boot", "");
    rayscale_tests::install_crypto_provider();
    let client = rayscale_provider_gcp::client::build(Some(&fake.url()), &polling(), None)
        .await
        .unwrap();
    let p = GcpProvider::new(client, &cfg, Some("10.1.2.3"), polling()).unwrap();
    let head = p.launch_head(&req(&cfg, "h-1", "head", 1)).await.unwrap();
    assert_eq!(head.instances[0].kind, NodeKind::Head);
    let w = p.launch(&req(&cfg, "lr-1", "cpu", 1)).await.unwrap();
    let script = |name: &str| {
        let b = fake.instance(name).unwrap();
        b["metadata"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["key"] == "startup-script")
            .unwrap()["value"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let hs = script(&head.instances[0].cloud_instance_id);
    assert!(hs.contains("--no-monitor"), "{hs}");
    assert!(hs.contains("computeMetadata/v1/instance/network-interfaces/0/ip"));
    let ws = script(&w.instances[0].cloud_instance_id);
    assert!(ws.contains("10.1.2.3"));
    assert!(ws.contains("computeMetadata/v1/instance/name"));
    let hb = fake.instance(&head.instances[0].cloud_instance_id).unwrap();
    assert_eq!(hb["serviceAccounts"][0]["email"], "default");
}

/// Ray's GCP YAMLs in the wheel load (with the project a user must fill in), and so
/// does a multi-host TPU slice (`gcp_tpu.rs` has the TPU types' own tests).
#[test]
fn rays_gcp_yamls_and_a_multi_host_tpu_slice_load() {
    let dir = rayscale_tests::cluster_yamls::ray_autoscaler_dir().join("gcp");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("project_id: null", "project_id: my-project");
        let cfg = ClusterConfig::from_yaml_str(&text, &path.display().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let g = rayscale_provider_gcp::GcpConfig::from_cluster(&cfg)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for t in g.node_types.keys() {
            let kind = if cfg.head_node_type.as_deref() == Some(t.as_str()) {
                NodeKind::Head
            } else {
                NodeKind::Worker
            };
            rayscale_provider_gcp::mapping::instance_body(
                &g,
                &rayscale_provider_gcp::mapping::InsertSpec {
                    node_type: t,
                    kind,
                    name: "n",
                    request_id: Some("lr-1"),
                    boot_script: Some("echo"),
                },
            )
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        n += 1;
    }
    assert!(n >= 1, "no GCP YAML in {}", dir.display());
    let tpu = "cluster_name: t\nprovider: {type: gcp, region: us-central2, availability_zone: us-central2-b, project_id: p}\n\
               head_node_type: head\navailable_node_types:\n  head: {resources: {}, node_config: {machineType: n1-standard-2}}\n  \
               tpu: {resources: {TPU: 4}, node_config: {acceleratorType: v4-32, runtimeVersion: tpu-ubuntu2204-base}}\n";
    let cfg = ClusterConfig::from_yaml_str(tpu, "tpu.yaml").unwrap();
    let g = rayscale_provider_gcp::GcpConfig::from_cluster(&cfg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.node_types["tpu"].tpu.as_ref().map(|s| s.hosts), Some(4));
}

struct Gce<'a>(&'a GceFake);

impl capacity_fallback::Capacity for Gce<'_> {
    fn exhaust_both(&self) {
        self.0.faults(|f| {
            f.capacity.insert("n1-standard-8".into(), 0);
            f.capacity.insert("c2-standard-8".into(), 0);
        });
    }
    fn restore_big(&self) {
        self.0.faults(|f| {
            f.capacity.remove("n1-standard-8");
        });
    }
    fn asks(&self) -> (u64, u64) {
        (
            self.0.calls().inserts_of("n1-standard-8"),
            self.0.calls().inserts_of("c2-standard-8"),
        )
    }
}

/// The loop over the GCP provider: an insert whose operation ends with
/// `ZONE_RESOURCE_POOL_EXHAUSTED` moves the demand to the other type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_moves_the_demand_to_another_type_until_its_window_ends() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let ttl = 8;
    let nc = |m: &str| format!("{{machineType: {m}}}");
    let cfg = capacity_fallback::config(
        "capacity",
        ttl,
        &format!(
            "{{type: gcp, region: us-west1, availability_zone: {ZONE}, project_id: {PROJECT}}}"
        ),
        &nc("n1-standard-2"),
        &nc("n1-standard-8"),
        &nc("c2-standard-8"),
    );
    let p: Arc<dyn CloudInstanceProvider> = Arc::new(provider(&fake, &cfg).await);
    capacity_fallback::a_capacity_error_moves_the_demand(&cfg, ttl, p, &Gce(&fake)).await;
}

/// The client tries a GET three times on a 503: one 503 is absorbed, a lasting one is a
/// transient error of the list (never a partial list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_and_a_lasting_one_is_a_transient_error() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("unavail", "");
    let p = provider(&fake, &cfg).await;
    fake.seed(
        3,
        "ray-unavail-worker",
        serde_json::json!({"ray-cluster-name": "unavail", "ray-node-type": "worker", "ray-user-node-type": "cpu"}),
    );
    fake.faults(|f| f.unavailable = 1);
    assert_eq!(p.list().await.unwrap().len(), 3);
    fake.faults(|f| f.unavailable = 10);
    let e = p.list().await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Transient, "{e}");
    assert!(!e.message.contains('\n'), "{e}");
}

/// A name that is taken by another request's instance is not counted as made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_name_of_another_request_is_not_counted_as_made() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("taken", "");
    let p = provider(&fake, &cfg).await;
    let out = p.launch(&req(&cfg, "lr-1", "cpu", 1)).await.unwrap();
    let name = out.instances[0].cloud_instance_id.clone();
    // Another request took the instance over (a cached node restarted for it), and
    // Compute Engine no longer remembers the first insert's requestId.
    fake.set_label(&name, "ray-launch-request", "lr-9");
    fake.forget_request_ids();
    let e = p.launch(&req(&cfg, "lr-1", "cpu", 1)).await.unwrap_err();
    assert!(
        e.message
            .contains("is taken by an instance of another launch request"),
        "{e}"
    );
    assert_eq!(fake.instances().len(), 1, "nothing more made");
}

/// Ray's GCP YAMLs from the wheel and rayscale's SPOT, preemptible and GPU variants: every
/// node type is inserted on a fake of the YAML's own project and zone (the requests go to
/// the contract check, tests/contract). Ray's YAMLs leave the project to the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_yamls_and_the_spot_and_gpu_variants_launch_every_node_type() {
    let mut launched = 0;
    for (origin, mut v) in rayscale_tests::cluster_yamls::for_cloud("gcp") {
        if v["provider"]["project_id"].is_null() {
            v["provider"]["project_id"] = serde_json::json!("my-project");
        }
        let project = v["provider"]["project_id"].as_str().unwrap().to_string();
        // (A YAML without one gets rayscale's own error when it loads, below.)
        let zone = v["provider"]["availability_zone"]
            .as_str()
            .unwrap_or("us-west1-a")
            .to_string();
        let fake = GceFake::start(&project, &zone, Timing::default()).await;
        let cfg = ClusterConfig::from_value(&v, "").unwrap_or_else(|e| panic!("{origin}: {e}"));
        // As `rayscale run` has it: Ray's TPU resources filled in, the workers' boot
        // scripts rendered (a head address), the TPU API beside Compute Engine's.
        let cfg = rayscale_provider_gcp::tpu::fill_resources(&cfg)
            .unwrap_or_else(|e| panic!("{origin}: {e}"));
        rayscale_tests::install_crypto_provider();
        let client = rayscale_provider_gcp::client::build(Some(&fake.url()), &polling(), None)
            .await
            .unwrap();
        let tpu = rayscale_provider_gcp::rest::Rest::new(&fake.url(), "test", None)
            .await
            .unwrap();
        let p = GcpProvider::new(client, &cfg, Some("10.0.0.2"), polling())
            .unwrap_or_else(|e| panic!("{origin}: {e}"))
            .with_tpu_api(tpu);
        launched += rayscale_tests::cluster_yamls::launch_every_node_type(&p, &cfg, &origin).await;
        // Compute Engine instances and TPU nodes (not the VMs Cloud TPU keeps behind one).
        let made = || {
            fake.instances()
                .keys()
                .filter(|n| !n.starts_with("t1v-n-"))
                .count()
                + fake.tpu(|t| t.nodes().len())
        };
        assert!(
            rayscale_tests::wait_until(Duration::from_secs(10), || made()
                == rayscale_tests::cluster_yamls::node_types(&cfg.raw).len()),
            "{origin}: {:?}",
            fake.instances()
        );
    }
    assert!(launched >= 7, "{launched} node types launched");
}

/// A launch that must avoid the cluster's one zone (a preemption or a capacity error
/// there a short while ago) fails as the type's capacity error, without a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_avoiding_the_clusters_zone_makes_no_call() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("avoid", "");
    let p = provider(&fake, &cfg).await;
    let mut r = req(&cfg, "lr-1", "cpu", 2);
    r.avoid_zones = vec![ZONE.to_string()];
    let e = p.launch(&r).await.expect_err("nowhere to go");
    assert!(
        matches!(&e.kind, ProviderErrorKind::Capacity { zone: None, .. }),
        "{e}"
    );
    assert_eq!(
        fake.calls()
            .insert
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    r.avoid_zones = vec!["us-east1-b".to_string()];
    assert_eq!(
        p.launch(&r)
            .await
            .expect("another zone avoided")
            .instances
            .len(),
        2
    );
}
