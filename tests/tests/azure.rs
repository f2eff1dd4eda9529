//! The Azure provider on the stateful ARM compute fake (`tests/fakes/azure.rs`): the
//! provider conformance suite, then what only Azure has (an allocation failure after
//! the 201 whose VM is deleted, paging by `nextLink`, replays as PUTs of the same VM,
//! cached deallocated workers, Ray's Azure YAML).

#![allow(clippy::unwrap_used)]

#[path = "shared/capacity_fallback.rs"]
mod capacity_fallback;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstanceProvider, CloudInstanceState, LaunchRequest, NodeKind, ProviderErrorKind,
};
use rayscale_provider_azure::{AzureProvider, Polling};
use rayscale_tests::conformance::{Provoke, Subject, run_all};
use rayscale_tests::fakes::azure::{ArmFake, Timing};

const SUB: &str = "0000-sub";
const RG: &str = "ray-rg";
const LOC: &str = "westus2";

fn subnet() -> String {
    format!(
        "/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
    )
}

fn params(size: &str, extra: &str) -> String {
    format!(
        "{{azure_arm_parameters: {{vmSize: {size}, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2, publicKey: ssh-ed25519 AAAA{extra}}}}}"
    )
}

fn provider_block(extra: &str) -> String {
    format!(
        "{{type: azure, location: {LOC}, resource_group: {RG}, subscription_id: {SUB}, subnet: {}{extra}}}",
        subnet()
    )
}

fn config(cluster: &str, provider_extra: &str) -> ClusterConfig {
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {}\nhead_node_type: head\nmax_workers: 100\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {}}}\n  \
         cpu: {{resources: {{CPU: 2}}, max_workers: 100, node_config: {}}}\n  \
         big: {{resources: {{CPU: 8}}, max_workers: 100, node_config: {}}}\n",
        provider_block(provider_extra),
        params("Standard_D4s_v3", ""),
        params(
            "Standard_D2s_v3",
            ", priority: Spot, billingProfile: {maxPrice: -1}"
        ),
        params("Standard_D8s_v3", ""),
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

fn provider_with(
    fake: &ArmFake,
    cfg: &ClusterConfig,
    head_ip: Option<&str>,
    polling: Polling,
) -> AzureProvider {
    let arm = rayscale_provider_azure::client::build(Some(&fake.url())).unwrap();
    AzureProvider::new(arm, cfg, head_ip, polling).unwrap()
}

fn provider(fake: &ArmFake, cfg: &ClusterConfig) -> AzureProvider {
    provider_with(fake, cfg, None, polling())
}

async fn fake(timing: Timing) -> ArmFake {
    ArmFake::start(SUB, RG, LOC, timing).await
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

struct ArmProvoke(Arc<ArmFake>);

#[async_trait::async_trait]
impl Provoke for ArmProvoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        self.unlimit_capacity("cpu").await;
        match kind {
            ProviderErrorKind::Capacity { .. } => self.0.faults(|f| {
                f.capacity.insert("Standard_D2s_v3".into(), 0);
            }),
            ProviderErrorKind::Quota => self.0.faults(|f| {
                f.quota.insert("Standard_D2s_v3".into());
            }),
            // The client tries a 429 four times in all.
            ProviderErrorKind::Throttled => self.0.faults(|f| f.throttle_puts = 4),
            ProviderErrorKind::InvalidConfig => self
                .0
                .faults(|f| f.put_errors.push((400, "InvalidParameter".into()))),
            ProviderErrorKind::Auth => self
                .0
                .faults(|f| f.put_errors.push((403, "AuthorizationFailed".into()))),
            // A 503 is tried four times in all.
            ProviderErrorKind::Transient => self.0.faults(|f| {
                f.put_errors
                    .extend(std::iter::repeat_n((503, "ServerTimeout".into()), 4))
            }),
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
            f.capacity.insert("Standard_D2s_v3".into(), n);
        });
        true
    }
    async fn unlimit_capacity(&self, _node_type: &str) {
        self.0.faults(|f| {
            f.capacity.remove("Standard_D2s_v3");
            f.quota.clear();
            f.put_errors.clear();
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_provider_conforms_on_the_fake() {
    let fake = Arc::new(fake(Timing::default()).await);
    // Deleting, not deallocating: the suite checks that a terminated worker goes.
    let cfg = config("conf", ", cache_stopped_nodes: false");
    let p = Arc::new(provider(&fake, &cfg));
    let head = p
        .launch_head(&req(&cfg, "head-1", "head", 1))
        .await
        .unwrap()
        .instances[0]
        .cloud_instance_id
        .clone();
    let subject = Subject {
        provider: p.clone(),
        node_type: "cpu".into(),
        head_id: Some(head),
        head_type: Some("head".into()),
        settle: Duration::from_secs(5),
        all_or_nothing: false,
        provoke: Box::new(ArmProvoke(fake.clone())),
    };
    let report = run_all(&subject).await;
    report.print("azure");
    assert_eq!(report.skipped_names(), ["error_kind_not_found"]);
    // Nothing is left in Failed: each failed create was deleted.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = p.poll_errors().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let failed: Vec<_> = fake
        .vms()
        .into_iter()
        .filter(|(_, (ps, _))| ps == "Failed")
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_failure_after_the_201_is_a_capacity_error_and_its_vm_is_deleted() {
    let fake = fake(Timing::default()).await;
    let cfg = config("alloc", "");
    let p = provider(&fake, &cfg);
    fake.faults(|f| {
        f.capacity.insert("Standard_D8s_v3".into(), 1);
    });
    let out = p.launch(&req(&cfg, "lr-1", "big", 3)).await.unwrap();
    assert_eq!(out.instances.len(), 1);
    let short = out.shortfall.expect("a shortfall");
    assert!(
        matches!(&short.kind, ProviderErrorKind::Capacity { node_type, .. } if node_type == "big"),
        "{short}"
    );
    assert!(short.to_string().contains("AllocationFailed"), "{short}");
    // The two failed VMs were made (201), failed, and are being deleted.
    assert_eq!(fake.calls().creates_of("Standard_D8s_v3"), 3);
    assert!(
        rayscale_tests::wait_until(Duration::from_secs(5), || fake.vms().len() == 1),
        "failed VMs deleted: {:?}",
        fake.vms()
    );
    // The other type is still had (what the fallback does next).
    let other = p.launch(&req(&cfg, "lr-2", "cpu", 2)).await.unwrap();
    assert!(other.shortfall.is_none());
    assert_eq!(other.instances.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_errors_map_and_a_replay_makes_nothing_twice() {
    let fake = fake(Timing::default()).await;
    let cfg = config("replay", "");
    let p = provider(&fake, &cfg);
    fake.faults(|f| {
        f.sku_not_available.insert("Standard_D8s_v3".into());
    });
    let e = p.launch(&req(&cfg, "lr-0", "big", 1)).await.unwrap_err();
    assert!(matches!(e.kind, ProviderErrorKind::Capacity { .. }), "{e}");
    assert!(e.message.contains("SkuNotAvailable"), "{e}");
    fake.faults(|f| f.throttle_puts = 2);
    let out = p.launch(&req(&cfg, "lr-1", "cpu", 3)).await.unwrap();
    assert!(out.shortfall.is_none(), "{:?}", out.shortfall);
    let names: Vec<String> = out
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with("ray-replay-worker-")),
        "{names:?}"
    );
    // A replay (a crash before the table was written) finds them by tag: no PUT.
    let puts = fake.calls().put.load(Ordering::Relaxed);
    let again = p.launch(&req(&cfg, "lr-1", "cpu", 3)).await.unwrap();
    assert_eq!(fake.calls().put.load(Ordering::Relaxed), puts);
    let mut a: Vec<String> = again
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    a.sort();
    let mut b = names.clone();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(fake.vms().len(), 3);
    // Each is Ray's: tags, the VM-level NIC, Spot.
    let vm = fake.vm(&names[0]).unwrap();
    assert_eq!(vm["tags"]["ray-cluster-name"], "replay");
    assert_eq!(vm["tags"]["ray-node-type"], "worker");
    assert_eq!(vm["tags"]["ray-user-node-type"], "cpu");
    assert_eq!(vm["tags"]["ray-launch-request"], "lr-1");
    assert_eq!(vm["properties"]["priority"], "Spot");
    assert_eq!(
        vm["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]["deleteOption"],
        "Delete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_is_listed_and_power_is_read_once() {
    let fake = fake(Timing::default()).await;
    let cfg = config("pages", "");
    let p = provider(&fake, &cfg);
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
    assert_eq!(fake.calls().list.load(Ordering::Relaxed), 13, "100 a page");
    let views = p.calls().get.load(Ordering::Relaxed);
    assert_eq!(views, 1203, "each VM's power read once");
    // The next list reads no instance view: nothing changed.
    assert_eq!(p.list().await.unwrap().len(), 1203);
    assert_eq!(p.calls().get.load(Ordering::Relaxed), views);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_workers_are_deallocated_then_started() {
    let fake = fake(Timing::default()).await;
    let cfg = config("cache", "");
    let p = provider(&fake, &cfg);
    let first = p.launch(&req(&cfg, "lr-1", "cpu", 2)).await.unwrap();
    let ids: Vec<String> = first
        .instances
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    p.terminate(&ids, "t-1").await.unwrap();
    let vms = fake.vms();
    assert!(
        ids.iter()
            .all(|i| vms.get(i).map(|v| v.1.as_str()) == Some("deallocated")),
        "{vms:?}"
    );
    assert!(
        p.list().await.unwrap().is_empty(),
        "deallocated ones are not listed"
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
    assert_eq!(fake.vms().len(), 3, "two started, one new");
    // They carry the new request id: a replay of lr-2 makes nothing.
    let puts = fake.calls().put.load(Ordering::Relaxed);
    let replay = p.launch(&req(&cfg, "lr-2", "cpu", 3)).await.unwrap();
    assert_eq!(replay.instances.len(), 3);
    assert_eq!(fake.calls().put.load(Ordering::Relaxed), puts);
    assert!(rayscale_tests::wait_until(Duration::from_secs(5), || {
        fake.vms().values().all(|v| v.1 == "running")
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_operation_is_checked_by_poll_errors() {
    // Operations take 3 s; launch waits 0.5 s.
    let fake = fake(Timing {
        operation: Duration::from_secs(3),
        boot: Duration::from_secs(1),
    })
    .await;
    let cfg = config("slow", "");
    let p = provider_with(
        &fake,
        &cfg,
        None,
        Polling {
            launch_wait: Duration::from_millis(500),
            ..polling()
        },
    );
    fake.faults(|f| {
        f.capacity.insert("Standard_D8s_v3".into(), 0);
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
    assert!(
        rayscale_tests::wait_until(Duration::from_secs(6), || fake.vms().is_empty()),
        "the failed VM is deleted: {:?}",
        fake.vms()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_boots_rayscale_and_workers_join_it() {
    let fake = fake(Timing::default()).await;
    let cfg = config("boot", ", nsg: /nsg/1, msi: /msi/1");
    let p = provider_with(&fake, &cfg, Some("10.1.2.3"), polling());
    let head = p.launch_head(&req(&cfg, "h-1", "head", 1)).await.unwrap();
    assert_eq!(head.instances[0].kind, NodeKind::Head);
    let w = p.launch(&req(&cfg, "lr-1", "cpu", 1)).await.unwrap();
    let data = |name: &str| {
        fake.running_with_custom_data(("ray-cluster-name", "boot"))
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, d, _)| d)
    };
    assert!(rayscale_tests::wait_until(Duration::from_secs(5), || {
        data(&w.instances[0].cloud_instance_id).is_some()
    }));
    let hs = data(&head.instances[0].cloud_instance_id).unwrap();
    assert!(hs.contains("--no-monitor"), "{hs}");
    assert!(hs.contains("metadata/instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress"));
    let ws = data(&w.instances[0].cloud_instance_id).unwrap();
    assert!(ws.contains("10.1.2.3"));
    assert!(ws.contains("metadata/instance/compute/name"));
    let hv = fake.vm(&head.instances[0].cloud_instance_id).unwrap();
    assert_eq!(
        hv["identity"]["userAssignedIdentities"]["/msi/1"],
        serde_json::json!({})
    );
    assert_eq!(
        hv["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]["networkSecurityGroup"]
            ["id"],
        "/nsg/1"
    );
    assert!(
        hv["properties"]["osProfile"].get("customData").is_none(),
        "not returned"
    );
    // A running head's addresses, read from its NIC and its public address resource (as
    // Ray's Azure provider reads them); a worker's are not read by the autoscaler's
    // provider, only by the launcher's (`get-worker-ips`).
    let head_id = head.instances[0].cloud_instance_id.clone();
    let mut listed = Vec::new();
    for _ in 0..50 {
        listed = p.list().await.unwrap();
        if listed
            .iter()
            .any(|i| i.cloud_instance_id == head_id && i.public_ip.is_some())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let h = listed
        .iter()
        .find(|i| i.cloud_instance_id == head_id)
        .unwrap();
    assert_eq!(h.private_ip.as_deref(), Some("127.0.0.1"), "{listed:?}");
    assert!(
        h.public_ip
            .as_deref()
            .is_some_and(|a| a.starts_with("203.0.113.")),
        "{listed:?}"
    );
    let wk = listed
        .iter()
        .find(|i| i.cloud_instance_id == w.instances[0].cloud_instance_id)
        .unwrap();
    assert_eq!(
        (wk.private_ip.as_deref(), wk.public_ip.as_deref()),
        (None, None)
    );
    let launcher = provider_with(&fake, &cfg, None, polling()).with_worker_addresses();
    let worker_id = w.instances[0].cloud_instance_id.clone();
    let mut wk = None;
    for _ in 0..50 {
        wk = launcher
            .list()
            .await
            .unwrap()
            .into_iter()
            .find(|i| i.cloud_instance_id == worker_id && i.public_ip.is_some());
        if wk.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wk = wk.expect("the worker's addresses");
    assert!(wk.private_ip.is_some(), "{wk:?}");
    assert!(
        wk.public_ip
            .as_deref()
            .is_some_and(|a| a.starts_with("203.0.113.")),
        "{wk:?}"
    );
}

/// What Ray's Azure bootstrap writes into a cluster YAML: the subnet, the subscription and
/// each type's SSH key.
fn as_rays_bootstrap_leaves_it(v: &mut serde_json::Value, subnet: &str) {
    v["provider"]["subnet"] = serde_json::json!(subnet);
    v["provider"]["subscription_id"] = serde_json::json!(SUB);
    // Ray's bootstrap runs on the config with its defaults filled in.
    if let Some(filled) = rayscale_core::config::ray_defaults::fill(v, "") {
        *v = filled;
    }
    if let Some(types) = v
        .get_mut("available_node_types")
        .and_then(|t| t.as_object_mut())
    {
        for t in types.values_mut() {
            t["node_config"]["azure_arm_parameters"]["publicKey"] =
                serde_json::json!("ssh-rsa AAAA");
        }
    }
}

/// Ray's Azure YAMLs in the wheel: each gives a one-line error naming what it lacks
/// (the subnet Ray's bootstrap makes) and loads once the bootstrap's keys are added.
#[test]
fn rays_azure_yamls_load_once_bootstrapped() {
    let dir = rayscale_tests::cluster_yamls::ray_autoscaler_dir().join("azure");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg = ClusterConfig::from_yaml_str(&text, &path.display().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let err = rayscale_provider_azure::AzureConfig::from_cluster(&cfg, Some("sub"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("provider.subnet: is required"),
            "{}: {err}",
            path.display()
        );
        assert!(!err.contains('\n'));
        let mut v = rayscale_core::config::parse_yaml(&text, "azure.yaml").unwrap();
        as_rays_bootstrap_leaves_it(&mut v, &subnet());
        let cfg =
            ClusterConfig::from_value(&v, "").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let a = rayscale_provider_azure::AzureConfig::from_cluster(&cfg, None)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for t in a.node_types.keys() {
            let kind = if cfg.head_node_type.as_deref() == Some(t.as_str()) {
                NodeKind::Head
            } else {
                NodeKind::Worker
            };
            rayscale_provider_azure::mapping::vm_body(
                &a,
                &rayscale_provider_azure::mapping::CreateSpec {
                    node_type: t,
                    kind,
                    name: "n",
                    request_id: Some("lr-1"),
                    boot_script: Some("echo"),
                    avoid_zones: &[],
                },
            )
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        n += 1;
    }
    assert!(n >= 1, "no Azure YAML in {}", dir.display());
}

struct Arm<'a>(&'a ArmFake);

impl capacity_fallback::Capacity for Arm<'_> {
    fn exhaust_both(&self) {
        self.0.faults(|f| {
            f.capacity.insert("Standard_D8s_v3".into(), 0);
            f.capacity.insert("Standard_F8s_v2".into(), 0);
        });
    }
    fn restore_big(&self) {
        self.0.faults(|f| {
            f.capacity.remove("Standard_D8s_v3");
        });
    }
    fn asks(&self) -> (u64, u64) {
        (
            self.0.calls().creates_of("Standard_D8s_v3"),
            self.0.calls().creates_of("Standard_F8s_v2"),
        )
    }
}

/// The loop over the Azure provider: a create that ends `AllocationFailed` moves the
/// demand to the other type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_moves_the_demand_to_another_type_until_its_window_ends() {
    // Operations as quick as the GCE fake's polls see them end (the check counts
    // iterations until the demand moves).
    let fake = fake(Timing {
        operation: Duration::from_millis(250),
        boot: Duration::from_millis(800),
    })
    .await;
    let ttl = 8;
    let cfg = capacity_fallback::config(
        "capacity",
        ttl,
        &provider_block(""),
        &params("Standard_D2s_v3", ""),
        &params("Standard_D8s_v3", ""),
        &params("Standard_F8s_v2", ""),
    );
    let p: Arc<dyn CloudInstanceProvider> = Arc::new(provider(&fake, &cfg));
    capacity_fallback::a_capacity_error_moves_the_demand(&cfg, ttl, p, &Arm(&fake)).await;
}

/// A 503 is retried; a lasting one is a transient error of the list (never a partial
/// list); a missing api-version would be a 400 (every call carries one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_and_a_lasting_one_is_a_transient_error() {
    let fake = fake(Timing::default()).await;
    let cfg = config("unavail", "");
    let p = provider(&fake, &cfg);
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

/// An evicted Spot VM (deallocated by Azure) is seen once its power is read again, and
/// is not counted as running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_change_is_seen() {
    let fake = fake(Timing::default()).await;
    let cfg = config("evict", ", cache_stopped_nodes: false");
    let p = provider(&fake, &cfg);
    let out = p.launch(&req(&cfg, "lr-1", "cpu", 1)).await.unwrap();
    let id = out.instances[0].cloud_instance_id.clone();
    assert!(rayscale_tests::wait_until(Duration::from_secs(5), || {
        fake.vms().get(&id).is_some_and(|v| v.1 == "running")
    }));
    let l = p.list().await.unwrap();
    assert_eq!(
        l.iter()
            .find(|c| c.cloud_instance_id == id)
            .map(|c| c.state),
        Some(CloudInstanceState::Running)
    );
    // Terminated: gone from the list once deleted.
    p.terminate(std::slice::from_ref(&id), "t").await.unwrap();
    assert!(
        p.list()
            .await
            .unwrap()
            .iter()
            .all(|c| c.cloud_instance_id != id)
    );
}

/// Ray's Azure YAMLs from the wheel (with what Ray's bootstrap writes: the subnet, the
/// subscription, each type's SSH key) and rayscale's Spot, Low-priority and GPU variants:
/// every node type is created on a fake of the YAML's own location and resource group (the
/// requests go to the contract check, tests/contract).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_yamls_and_the_spot_and_gpu_variants_launch_every_node_type() {
    let mut launched = 0;
    for (origin, mut v) in rayscale_tests::cluster_yamls::for_cloud("azure") {
        // (A YAML without them gets rayscale's own error when it loads, below.)
        let rg = v["provider"]["resource_group"]
            .as_str()
            .unwrap_or("ray-cluster")
            .to_string();
        let loc = v["provider"]["location"]
            .as_str()
            .unwrap_or("westus2")
            .to_string();
        if v["provider"]["subnet"].is_null() {
            let subnet = format!(
                "/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
            );
            as_rays_bootstrap_leaves_it(&mut v, &subnet);
        }
        let sub = v["provider"]["subscription_id"]
            .as_str()
            .unwrap()
            .to_string();
        let fake = ArmFake::start(&sub, &rg, &loc, Timing::default()).await;
        let cfg = ClusterConfig::from_value(&v, "").unwrap_or_else(|e| panic!("{origin}: {e}"));
        let p = provider_with(&fake, &cfg, Some("127.0.0.1"), polling());
        launched += rayscale_tests::cluster_yamls::launch_every_node_type(&p, &cfg, &origin).await;
        assert_eq!(
            fake.vms().len(),
            rayscale_tests::cluster_yamls::node_types(&cfg.raw).len(),
            "{origin}: {:?}",
            fake.vms()
        );
    }
    assert!(launched >= 6, "{launched} node types launched");
}
