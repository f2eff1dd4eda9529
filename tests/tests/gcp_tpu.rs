//! Cloud TPU VMs through the GCP provider, on the TPU API of the stateful Compute Engine
//! fake (`tests/fakes/gce/tpu.rs`): the provider conformance suite on a TPU node type,
//! then the body Ray would send (Ray's rewrites of the node config), Ray's
//! `TPU-<type>-head` resource, the one-line refusals, and what only TPU nodes have
//! (their own operations, a replayed create, preemption, listing).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstanceProvider, CloudInstanceState, LaunchRequest, ProviderErrorKind,
};
use rayscale_provider_gcp::{GcpProvider, Polling};
use rayscale_tests::conformance::{Provoke, Subject, run_all};
use rayscale_tests::fakes::gce::{GceFake, Timing};

const PROJECT: &str = "proj";
const ZONE: &str = "us-central2-b";

/// A cluster whose workers are TPU VMs: a v4-8 (by type), a v5e slice (by config) and
/// a two-host v4-16 slice.
fn config(cluster: &str) -> ClusterConfig {
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {{type: gcp, region: us-central2, availability_zone: {ZONE}, project_id: {PROJECT}}}\n\
         head_node_type: head\nmax_workers: 10\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{machineType: n1-standard-4}}}}\n  \
         tpu: {{resources: {{TPU: 4}}, max_workers: 10, node_config: {{acceleratorType: v4-8, runtimeVersion: tpu-ubuntu2204-base, \
         schedulingConfig: {{preemptible: true}}, labels: {{team: ml}}, metadata: {{startup-script: 'echo user'}}, \
         serviceAccounts: [{{email: sa@proj.iam.gserviceaccount.com, scopes: ['https://www.googleapis.com/auth/cloud-platform']}}], \
         networkInterfaces: [{{network: global/networks/default}}]}}}}\n  \
         v5e: {{resources: {{TPU: 8}}, max_workers: 10, node_config: {{acceleratorConfig: {{type: V5LITE_POD, topology: 2x4}}, \
         runtimeVersion: v2-alpha-tpuv5-lite}}}}\n  \
         pod: {{resources: {{TPU: 4}}, max_workers: 2, node_config: {{acceleratorType: v4-16, runtimeVersion: tpu-vm-v4-base}}}}\n  \
         cpu: {{resources: {{CPU: 2}}, max_workers: 10, node_config: {{machineType: n1-standard-2}}}}\n"
    );
    ClusterConfig::from_yaml_str(&yaml, "tpu.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn polling() -> Polling {
    Polling {
        initial: Duration::from_millis(100),
        maximum: Duration::from_millis(300),
        launch_wait: Duration::from_secs(10),
    }
}

async fn provider_with(fake: &GceFake, cfg: &ClusterConfig, polling: Polling) -> GcpProvider {
    rayscale_tests::install_crypto_provider();
    let client = rayscale_provider_gcp::client::build(Some(&fake.url()), &polling, None)
        .await
        .unwrap();
    let tpu = rayscale_provider_gcp::rest::Rest::new(&fake.url(), "test", None)
        .await
        .unwrap();
    GcpProvider::new(client, cfg, Some("10.0.0.2"), polling)
        .unwrap()
        .with_tpu_api(tpu)
}

async fn provider(fake: &GceFake, cfg: &ClusterConfig) -> GcpProvider {
    provider_with(fake, cfg, polling()).await
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

/// The fake's faults for node type `.1` of [`config`] (its accelerator type, `.2`).
struct TpuProvoke(Arc<GceFake>, &'static str, &'static str);

#[async_trait::async_trait]
impl Provoke for TpuProvoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        self.unlimit_capacity(self.1).await;
        self.0.tpu(|t| match kind {
            ProviderErrorKind::Capacity { .. } => {
                t.capacity.insert(self.2.into(), 0);
            }
            ProviderErrorKind::Quota => {
                t.quota.insert(self.2.into());
            }
            // The provider tries a throttled create 4 times.
            ProviderErrorKind::Throttled => t.throttle_creates = 4,
            ProviderErrorKind::InvalidConfig => t.create_errors.push((400, "INVALID_ARGUMENT")),
            ProviderErrorKind::Auth => t.create_errors.push((403, "PERMISSION_DENIED")),
            ProviderErrorKind::Transient => t
                .create_errors
                .extend(std::iter::repeat_n((503, "UNAVAILABLE"), 4)),
            ProviderErrorKind::NotFound => {}
        });
        if *kind == ProviderErrorKind::NotFound {
            return None;
        }
        Some(LaunchRequest {
            request_id: request_id.into(),
            node_type: self.1.into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
    }
    async fn limit_capacity(&self, _node_type: &str, n: u64) -> bool {
        self.0.tpu(|t| {
            t.capacity.insert(self.2.into(), n);
        });
        true
    }
    async fn unlimit_capacity(&self, _node_type: &str) {
        self.0.tpu(|t| {
            t.capacity.remove(self.2);
            t.quota.clear();
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tpu_node_type_conforms_on_the_tpu_api_fake() {
    // A one-host slice, and a multi-host slice (one TPU node of two hosts).
    for (node_type, accelerator) in [("tpu", "v4-8"), ("pod", "v4-16")] {
        let fake = Arc::new(GceFake::start(PROJECT, ZONE, Timing::default()).await);
        let cfg = config("tconf");
        let p = Arc::new(provider(&fake, &cfg).await);
        let head = p
            .launch_head(&req(&cfg, "head-1", "head", 1))
            .await
            .unwrap()
            .instances[0]
            .cloud_instance_id
            .clone();
        let subject = Subject {
            provider: p.clone(),
            node_type: node_type.into(),
            head_id: Some(head),
            head_type: Some("head".into()),
            settle: Duration::from_secs(5),
            all_or_nothing: false,
            provoke: Box::new(TpuProvoke(fake.clone(), node_type, accelerator)),
        };
        let report = run_all(&subject).await;
        report.print(&format!("gcp-{node_type}"));
        assert!(
            report
                .skipped_names()
                .iter()
                .all(|n| n.contains("not_found") || n.contains("all_or_nothing")),
            "{:?}",
            report.skipped
        );
        // Every TPU create the provider sent reached the TPU API, and no Compute Engine
        // instance was made for a TPU type.
        let creates = fake.tpu(|t| t.calls.get("nodes.create").copied().unwrap_or(0));
        assert_eq!(
            p.calls()
                .tpu_create
                .load(std::sync::atomic::Ordering::Relaxed),
            creates
        );
        assert!(
            fake.instances()
                .keys()
                .all(|n| n.ends_with("-compute") || n.starts_with("t1v-n-")),
            "{:?}",
            fake.instances()
        );
    }
}

/// The node body is what Ray's `GCPTPU.create_instance` sends: `networkInterfaces`
/// dropped, `serviceAccounts[0]` as `serviceAccount` with `scope`, external addresses on,
/// Ray's labels over the user's, and rayscale's boot script after the user's own
/// `startup-script`; the TPU VM's boot script reads its TPU node name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_is_rays_and_the_node_reads_back() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("tbody");
    let p = provider(&fake, &cfg).await;
    let out = p.launch(&req(&cfg, "lr-1", "tpu", 1)).await.unwrap();
    assert!(out.shortfall.is_none(), "{out:?}");
    let name = out.instances[0].cloud_instance_id.clone();
    assert!(
        name.starts_with("ray-tbody-worker-") && name.ends_with("-tpu"),
        "{name}"
    );
    let body = fake.tpu(|t| t.body(&name)).unwrap();
    assert!(body.get("networkInterfaces").is_none(), "{body}");
    assert!(body.get("serviceAccounts").is_none(), "{body}");
    assert_eq!(
        body["serviceAccount"],
        serde_json::json!({"email": "sa@proj.iam.gserviceaccount.com",
                           "scope": ["https://www.googleapis.com/auth/cloud-platform"]})
    );
    assert_eq!(body["networkConfig"]["enableExternalIps"], true);
    assert_eq!(body["labels"]["team"], "ml");
    assert_eq!(body["labels"]["ray-cluster-name"], "tbody");
    assert_eq!(body["labels"]["ray-node-type"], "worker");
    assert_eq!(body["labels"]["ray-user-node-type"], "tpu");
    assert_eq!(body["labels"]["ray-launch-request"], "lr-1");
    assert_eq!(body["schedulingConfig"]["preemptible"], true);
    let script = body["metadata"]["startup-script"].as_str().unwrap();
    let (user, boot) = (
        script.find("echo user").unwrap(),
        script.find("ray start").unwrap(),
    );
    assert!(user < boot, "{script}");
    assert!(
        script.contains("instance/attributes/instance-id"),
        "{script}"
    );
    // The v5e type by acceleratorConfig is sent as configured.
    let out = p.launch(&req(&cfg, "lr-2", "v5e", 1)).await.unwrap();
    let v5 = fake
        .tpu(|t| t.body(&out.instances[0].cloud_instance_id))
        .unwrap();
    assert_eq!(v5["acceleratorConfig"]["topology"], "2x4");
    // Listed pending, then running with the first endpoint's addresses.
    let ready = wait_until_async(Duration::from_secs(10), || async {
        p.list()
            .await
            .unwrap()
            .iter()
            .any(|c| c.cloud_instance_id == name && c.state == CloudInstanceState::Running)
    })
    .await;
    assert!(ready);
    let listed = p.list().await.unwrap();
    // Cloud TPU's own Compute Engine VM behind the node carries the cluster's labels;
    // the instance list leaves it out (it is not a Ray node of rayscale's).
    assert!(
        fake.instances().keys().any(|n| n.starts_with("t1v-n-")),
        "{:?}",
        fake.instances()
    );
    assert!(
        listed
            .iter()
            .all(|c| !c.cloud_instance_id.starts_with("t1v-n-")),
        "{listed:?}"
    );
    let c = listed.iter().find(|c| c.cloud_instance_id == name).unwrap();
    assert!(
        c.private_ip.as_deref().unwrap().starts_with("10.130."),
        "{c:?}"
    );
    assert!(c.public_ip.is_some(), "{c:?}");
    assert_eq!(c.node_type, "tpu");
    assert_eq!(c.zone.as_deref(), Some(ZONE));
}

/// A replayed launch (same request) makes nothing twice; a stockout that ends after the
/// launch returned is reported once by `poll_errors`, naming the type; a preempted node
/// is not listed; delete makes it gone, and deleting it again is success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_late_stockouts_preemption_and_deletes() {
    let fake = GceFake::start(
        PROJECT,
        ZONE,
        Timing {
            operation: Duration::from_millis(1500),
            boot: Duration::from_millis(1500),
        },
    )
    .await;
    let cfg = config("tlife");
    let short = Polling {
        launch_wait: Duration::from_millis(200),
        ..polling()
    };
    let p = provider_with(&fake, &cfg, short).await;
    let a = p.launch(&req(&cfg, "lr-1", "tpu", 2)).await.unwrap();
    let b = p.launch(&req(&cfg, "lr-1", "tpu", 2)).await.unwrap();
    let ids = |o: &rayscale_core::provider::LaunchOutcome| {
        let mut v: Vec<String> = o
            .instances
            .iter()
            .map(|c| c.cloud_instance_id.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(fake.tpu(|t| t.created.len()), 2);
    // A stockout the operation tells after the launch returned.
    fake.tpu(|t| {
        t.capacity.insert("v4-8".into(), 0);
    });
    let c = p.launch(&req(&cfg, "lr-2", "tpu", 1)).await.unwrap();
    assert!(c.shortfall.is_none(), "not known yet: {c:?}");
    let errors = poll_until_some(Duration::from_secs(10), || async {
        let e = p.poll_errors().await;
        (!e.is_empty()).then_some(e)
    })
    .await
    .expect("the stockout is reported");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].kind,
        ProviderErrorKind::Capacity {
            node_type: "tpu".into(),
            zone: None
        },
        "{errors:?}"
    );
    assert!(
        errors[0].message.contains("no more capacity"),
        "{}",
        errors[0].message
    );
    assert!(p.poll_errors().await.is_empty(), "reported once");
    // Preempted: still listed (stopping), never taken as gone while it exists; deleted
    // when asked, with a Compute Engine worker in the same call.
    let first = ids(&a)[0].clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    fake.tpu(|t| t.preempt(&first));
    let listed = p.list().await.unwrap();
    let c = listed.iter().find(|c| c.cloud_instance_id == first);
    assert_eq!(
        c.map(|c| c.state),
        Some(CloudInstanceState::Stopping),
        "{listed:?}"
    );
    let cpu = p.launch(&req(&cfg, "lr-cpu", "cpu", 1)).await.unwrap();
    let cpu = cpu.instances[0].cloud_instance_id.clone();
    let deletes = || fake.tpu(|t| t.calls.get("nodes.delete").copied().unwrap_or(0));
    let before = deletes();
    p.terminate(&[first.clone(), cpu.clone()], "t-1")
        .await
        .unwrap();
    assert_eq!(deletes(), before + 1);
    let gone = wait_until_async(Duration::from_secs(10), || async {
        !fake.tpu(|t| t.nodes()).contains_key(&first) && !fake.instances().contains_key(&cpu)
    })
    .await;
    assert!(gone, "{:?} {:?}", fake.tpu(|t| t.nodes()), fake.instances());
    // Again: nothing of it is listed, so no delete is sent, and it is success.
    p.terminate(std::slice::from_ref(&first), "t-2")
        .await
        .unwrap();
    assert_eq!(deletes(), before + 1);
}

/// Ray's `TPU-<type>-head` is filled in on TPU types (over the YAML's, as Ray), a
/// multi-host slice loads marked with its hosts, and what Ray refuses and a TPU head are
/// one-line errors naming the key.
#[test]
fn the_head_resource_is_filled_and_refusals_name_their_key() {
    let cfg = config("tfill");
    let filled = rayscale_provider_gcp::tpu::fill_resources(&cfg).unwrap();
    let res = |t: &str, k: &str| {
        filled
            .node_type(t)
            .unwrap()
            .resources
            .get(k)
            .map(rayscale_core::model::resources::to_f64)
    };
    assert_eq!(res("tpu", "TPU-v4-8-head"), Some(1.0));
    assert_eq!(res("tpu", "TPU"), Some(4.0));
    assert_eq!(res("v5e", "TPU-v5litepod-8-head"), Some(1.0));
    assert!(
        filled
            .node_type("head")
            .unwrap()
            .resources
            .iter()
            .all(|(k, _)| !k.starts_with("TPU"))
    );
    let base = "cluster_name: t\nprovider: {type: gcp, region: us-central2, availability_zone: us-central2-b, project_id: p}\n\
                head_node_type: head\navailable_node_types:\n";
    let pod = ClusterConfig::from_yaml_str(
        &format!(
            "{base}  head: {{resources: {{}}, node_config: {{machineType: n1-standard-2}}}}\n  \
             pod: {{resources: {{}}, node_config: {{acceleratorType: v4-32, runtimeVersion: r}}}}\n"
        ),
        "t.yaml",
    )
    .unwrap();
    let pod = rayscale_provider_gcp::tpu::fill_resources(&pod).unwrap();
    assert_eq!(
        pod.node_type("pod")
            .and_then(|t| t.hosts.as_ref())
            .map(|h| h.count),
        Some(4),
        "a v4-32 is four hosts"
    );
    for (types, want) in [
        (
            "  head: {resources: {}, node_config: {acceleratorType: v4-8, runtimeVersion: r}}\n",
            "available_node_types.head.node_config: the head is a Compute Engine instance",
        ),
        (
            "  head: {resources: {}, node_config: {machineType: n1-standard-2}}\n  \
             t: {resources: {}, node_config: {acceleratorType: v4-8}}\n",
            "available_node_types.t.node_config.runtimeVersion: is required",
        ),
    ] {
        let cfg = ClusterConfig::from_yaml_str(&format!("{base}{types}"), "t.yaml").unwrap();
        let e = rayscale_provider_gcp::GcpConfig::from_cluster(&cfg)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(want), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

/// A cluster in the shape of Ray's TPU example (python/ray/autoscaler/gcp/tpu.yaml in
/// Ray's repository: a Compute Engine head, `v2-8` TPU workers with a runtime version
/// and only a `TPU` resource, `min_workers` set) loads, gets its head resource, and its
/// TPU workers launch on the fake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_shaped_as_rays_tpu_example_launches_its_tpu_workers() {
    let text = format!(
        "cluster_name: tpuex\nmax_workers: 3\n\
         provider: {{type: gcp, region: us-central1, availability_zone: us-central1-f, project_id: {PROJECT}}}\n\
         head_node_type: ray_head_default\n\
         available_node_types:\n  \
         ray_head_default:\n    resources: {{CPU: 2}}\n    node_config:\n      machineType: n2-standard-2\n      \
         disks: [{{boot: true, autoDelete: true, type: PERSISTENT, initializeParams: {{diskSizeGb: 50, \
         sourceImage: projects/deeplearning-platform-release/global/images/family/common-cpu}}}}]\n  \
         ray_tpu:\n    min_workers: 2\n    resources: {{TPU: 1}}\n    node_config: {{acceleratorType: v2-8, runtimeVersion: tpu-vm-base}}\n"
    );
    let cfg = ClusterConfig::from_yaml_str(&text, "tpuex.yaml").unwrap();
    let fake = GceFake::start(PROJECT, "us-central1-f", Timing::default()).await;
    let cfg = rayscale_provider_gcp::tpu::fill_resources(&cfg).unwrap();
    let t = cfg.node_type("ray_tpu").unwrap();
    assert_eq!(
        t.resources
            .get("TPU-v2-8-head")
            .map(rayscale_core::model::resources::to_f64),
        Some(1.0)
    );
    let p = provider(&fake, &cfg).await;
    let out = p.launch(&req(&cfg, "lr-min", "ray_tpu", 2)).await.unwrap();
    assert!(out.shortfall.is_none(), "{out:?}");
    assert_eq!(fake.tpu(|t| t.nodes()).len(), 2);
    // (Cloud TPU's own VMs behind the nodes are not instances rayscale made.)
    assert!(
        fake.instances().keys().all(|n| n.starts_with("t1v-n-")),
        "no Compute Engine instance for a TPU type: {:?}",
        fake.instances()
    );
}

async fn wait_until_async<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn poll_until_some<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() > end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `down` with a preempted TPU node (listed as stopping, and staying so until deleted):
/// the launcher asks it once it lingers, and the cluster is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_deletes_a_preempted_tpu_node() {
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let cfg = config("tdown");
    let p = provider(&fake, &cfg).await;
    let out = p.launch(&req(&cfg, "lr-1", "tpu", 1)).await.unwrap();
    let id = out.instances[0].cloud_instance_id.clone();
    let ready = wait_until_async(Duration::from_secs(10), || async {
        fake.tpu(|t| t.nodes()).get(&id).map(String::as_str) == Some("READY")
    })
    .await;
    assert!(ready);
    fake.tpu(|t| t.preempt(&id));
    let settings = rayscale_core::launcher::LauncherSettings {
        poll: Duration::from_millis(200),
        head_timeout: Duration::from_secs(10),
        down_timeout: Duration::from_secs(8),
        relaunch_outdated: false,
    };
    let r = rayscale_core::launcher::down(&p, &settings)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.workers, std::slice::from_ref(&id));
    assert!(
        fake.tpu(|t| t.nodes()).is_empty(),
        "{:?}",
        fake.tpu(|t| t.nodes())
    );
}

/// `rayscale boot-script` prints what a TPU VM runs: its TPU node's name from the
/// `instance-id` attribute, Ray's head resource, and on a multi-host type the host's
/// worker number, which leaves the head resource off the hosts but worker 0.
#[test]
fn boot_script_prints_what_each_host_of_a_slice_runs() {
    let dir = std::env::temp_dir().join(format!("rayscale-tpu-bootscript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = dir.join("c.yaml");
    // JSON is YAML.
    std::fs::write(&yaml, serde_json::to_string(&config("tboot").raw).unwrap()).unwrap();
    let script = |t: &str| {
        let out = std::process::Command::new(rayscale_tests::workspace_bin("rayscale"))
            .arg("boot-script")
            .arg(&yaml)
            .args([t, "--head-ip", "10.1.2.3"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let pod = script("pod");
    assert!(pod.contains("instance/attributes/instance-id"), "{pod}");
    assert!(
        pod.contains("instance/attributes/agent-worker-number"),
        "{pod}"
    );
    assert!(
        pod.contains(r#"RAY_OVERRIDE_RESOURCES='{"TPU":4,"TPU-v4-16-head":1}'"#),
        "{pod}"
    );
    assert!(pod.contains(r#"'{"TPU":4}'"#), "{pod}");
    let one = script("tpu");
    assert!(one.contains("instance/attributes/instance-id"), "{one}");
    assert!(!one.contains("agent-worker-number"), "{one}");
    let _ = std::fs::remove_dir_all(&dir);
}
