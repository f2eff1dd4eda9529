//! The KubeRay provider on the fake API server with its mini operator
//! (`tests/fakes/kube.rs`): the provider conformance suite, then what only KubeRay has
//! (the config derived from the RayCluster and checked against Ray's own derivation,
//! the maxReplicas cap, a conflict retried, the per-group guard while a delete is slow,
//! lists cleared, a RayCluster edit picked up, a launch replayed by a new process).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use rayscale_core::provider::{
    CloudInstanceProvider, CloudInstanceState, LaunchRequest, NodeKind, ProviderErrorKind,
};
use rayscale_provider_kuberay::{KubeRayConfig, KubeRayProvider};
use rayscale_tests::conformance::{Provoke, Subject, run_all};
use rayscale_tests::fakes::kube::{KubeFake, OperatorTiming, raycluster};
use serde_json::{Value, json};

const NS: &str = "ray";
const HEAD_ADDR: &str = "127.0.0.1:1";

async fn provider(fake: &KubeFake, name: &str) -> KubeRayProvider {
    let mut cfg = KubeRayConfig::new(name, NS).unwrap();
    cfg.head_pod_name = None;
    KubeRayProvider::new(fake.client().await, cfg)
}

fn req(id: &str, t: &str, n: u64) -> LaunchRequest {
    LaunchRequest {
        request_id: id.into(),
        node_type: t.into(),
        count: n,
        launch_config_hash: String::new(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    }
}

fn replicas(fake: &KubeFake, cluster: &str, group: usize) -> u64 {
    fake.cluster(cluster).unwrap()["spec"]["workerGroupSpecs"][group]["replicas"]
        .as_u64()
        .unwrap()
}

fn to_delete(fake: &KubeFake, cluster: &str, group: usize) -> Vec<String> {
    fake.cluster(cluster).unwrap()["spec"]["workerGroupSpecs"][group]["scaleStrategy"]
        ["workersToDelete"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

async fn wait_for(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> bool) {
    let t = tokio::time::Instant::now();
    while !f().await {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn live_workers(p: &KubeRayProvider, t: &str) -> Vec<String> {
    p.list()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.kind == NodeKind::Worker && c.node_type == t)
        .map(|c| c.cloud_instance_id)
        .collect()
}

/// What the fake can be made to answer.
struct KubeProvoke(Arc<KubeFake>, String);

#[async_trait::async_trait]
impl Provoke for KubeProvoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        // A cap set for an earlier capacity error is lifted first.
        self.unlimit_capacity("cpu").await;
        let code = match kind {
            ProviderErrorKind::Capacity { .. } => {
                // The group at its maxReplicas.
                let now = replicas(&self.0, &self.1, 0);
                self.0.edit_cluster(&self.1, |rc| {
                    rc["spec"]["workerGroupSpecs"][0]["maxReplicas"] = json!(now)
                });
                return Some(req(request_id, "cpu", 1));
            }
            ProviderErrorKind::InvalidConfig => return Some(req(request_id, "no-such-group", 1)),
            // A ResourceQuota stops the operator's pod creation, not the patch: nothing
            // answers a launch with it.
            ProviderErrorKind::Quota => return None,
            ProviderErrorKind::Throttled => 429,
            ProviderErrorKind::Auth => 403,
            ProviderErrorKind::NotFound => 404,
            ProviderErrorKind::Transient => 503,
        };
        self.0.faults().patch.push_back(code);
        Some(req(request_id, "cpu", 1))
    }
    async fn limit_capacity(&self, _node_type: &str, n: u64) -> bool {
        let now = replicas(&self.0, &self.1, 0);
        self.0.edit_cluster(&self.1, |rc| {
            rc["spec"]["workerGroupSpecs"][0]["maxReplicas"] = json!(now + n)
        });
        true
    }
    async fn unlimit_capacity(&self, _node_type: &str) {
        self.0.edit_cluster(&self.1, |rc| {
            rc["spec"]["workerGroupSpecs"][0]["maxReplicas"] = json!(1000)
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_the_fake_api_server_with_the_pod_watch() {
    conformance(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_the_fake_api_server_listing_every_time() {
    conformance(false).await;
}

async fn conformance(watch: bool) {
    let fake = KubeFake::start(NS).await;
    // Small pages: every list crosses pages.
    fake.set_page_cap(3);
    fake.put_cluster(raycluster("conf", &[("cpu", 0, 1000, 2)]));
    // Pods go soon after they are marked: the suite launches again right after a
    // terminate, which the per-group guard holds back while the pod exists.
    fake.start_operator(
        HEAD_ADDR,
        OperatorTiming {
            boot: Duration::from_millis(300),
            delete: Duration::from_millis(50),
        },
    );
    let mut cfg = KubeRayConfig::new("conf", NS).unwrap();
    cfg.head_pod_name = None;
    cfg.watch_pods = watch;
    let p = Arc::new(KubeRayProvider::new(fake.client().await, cfg));
    wait_for("the head pod", Duration::from_secs(5), async || {
        p.list().await.unwrap().iter().any(|c| c.is_head())
    })
    .await;
    let subject = Subject {
        provider: p.clone(),
        node_type: "cpu".into(),
        head_id: Some("conf-head".into()),
        head_type: None,
        settle: Duration::from_secs(5),
        all_or_nothing: false,
        provoke: Box::new(KubeProvoke(fake.clone(), "conf".into())),
    };
    let report = run_all(&subject).await;
    report.print("kuberay");
    // Ray's CLI does not find KubeRay heads by a status tag: pods carry none.
    assert_eq!(
        report.skipped_names(),
        ["the_head_is_tagged_up_to_date", "error_kind_quota"]
    );
    // The head is listed as the head group's, running.
    let head = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.is_head())
        .unwrap();
    assert_eq!(
        (head.node_type.as_str(), head.state),
        ("headgroup", CloudInstanceState::Running)
    );
    // Paged lists guarded by the head pod's version; with the watch, one list and then
    // changes only.
    let calls = fake.calls();
    let lists = calls.list_pods.load(std::sync::atomic::Ordering::Relaxed);
    let watches = calls.watch_pods.load(std::sync::atomic::Ordering::Relaxed);
    let head_reads = calls.get_pod.load(std::sync::atomic::Ordering::Relaxed);
    if watch {
        assert!(watches > 0, "no watch");
        assert!(lists <= 5, "{lists} list pages with the watch on");
    } else {
        assert_eq!(watches, 0);
        assert!(lists > 20, "{lists}");
        assert!(
            head_reads > 0,
            "lists not guarded by the head pod's version"
        );
    }
}

/// The config derived from a RayCluster matches Ray 2.60's own derivation
/// (`_derive_autoscaling_config_from_ray_cr`) of the same object, run as the oracle.
#[test]
fn config_matches_rays_derivation() {
    let mut rc = raycluster(
        "oracle",
        &[
            ("cpu", 1, 5, 2),
            ("gpu", 0, 3, 8),
            ("tpu", 0, 2, 8),
            ("v6e", 0, 2, 8),
            ("tpunosel", 0, 1, 8),
        ],
    );
    rc["metadata"]["namespace"] = json!(NS);
    let g = &mut rc["spec"]["workerGroupSpecs"];
    // GPU from the container's limits, memory from rayStartParams, custom resources as
    // Ray's escaped string, idle timeout per group, two hosts per replica, labels.
    g[1]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("2");
    g[1]["rayStartParams"]["memory"] = json!("1000000000");
    g[1]["rayStartParams"]["resources"] = json!("\"{\\\"accel\\\": 4}\"");
    g[1]["numOfHosts"] = json!(2);
    g[1]["idleTimeoutSeconds"] = json!(30);
    // Group priorities as Ray reads them with `int()`: a number, a string of one.
    g[1]["priority"] = json!(5);
    g[2]["priority"] = json!("-2");
    g[0]["labels"] = json!({"zone": "a"});
    g[0]["rayStartParams"]
        .as_object_mut()
        .unwrap()
        .remove("num-cpus");
    g[0]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("1500m");
    // TPU groups as GKE runs them: a v4 slice of 2x2x2 chips over two hosts from the
    // container's limits (requests 0 first), a v6e slice whose chips come from
    // rayStartParams, and a TPU group without GKE's selectors (no head resource).
    let tpu = |limits: Value, selectors: Value| json!({"limits": limits, "requests": {"google.com/tpu": "0"}, "selectors": selectors});
    for (i, spec) in [
        (
            2,
            tpu(
                json!({"cpu": "8", "google.com/tpu": "4"}),
                json!({"cloud.google.com/gke-tpu-topology": "2x2x2",
                       "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice"}),
            ),
        ),
        (
            3,
            tpu(
                json!({"cpu": "8"}),
                json!({"cloud.google.com/gke-tpu-topology": "2x4",
                       "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}),
            ),
        ),
        (
            4,
            tpu(json!({"cpu": "8", "google.com/tpu": "4"}), json!({})),
        ),
    ] {
        let c = &mut g[i]["template"]["spec"]["containers"][0]["resources"];
        c["limits"] = spec["limits"].clone();
        c["requests"] = spec["requests"].clone();
        g[i]["template"]["spec"]["nodeSelector"] = spec["selectors"].clone();
    }
    g[2]["numOfHosts"] = json!(2);
    g[3]["rayStartParams"]["resources"] = json!("\"{\\\"TPU\\\": 8}\"");
    rc["spec"]["autoscalerOptions"] =
        json!({"idleTimeoutSeconds": 90, "upscalingMode": "Conservative"});

    let ours = rayscale_provider_kuberay::mapping::cluster_config_value(&rc, None).unwrap();
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(
            "import json,sys\n\
             from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr as d\n\
             print(json.dumps(d(json.loads(sys.argv[1]))))",
        )
        .arg(rc.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rays: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "cluster_name",
        "head_node_type",
        "max_workers",
        "idle_timeout_minutes",
        "upscaling_speed",
    ] {
        assert_eq!(
            ours[key]
                .as_f64()
                .map(|f| json!(f))
                .unwrap_or(ours[key].clone()),
            rays[key]
                .as_f64()
                .map(|f| json!(f))
                .unwrap_or(rays[key].clone()),
            "{key}"
        );
    }
    for t in ["headgroup", "cpu", "gpu", "tpu", "v6e", "tpunosel"] {
        for key in [
            "min_workers",
            "max_workers",
            "resources",
            "labels",
            "priority",
        ] {
            let (a, b) = (
                &ours["available_node_types"][t][key],
                &rays["available_node_types"][t][key],
            );
            let empty = |v: &Value| v.is_null() || v == &json!({});
            assert!(
                a == b || (empty(a) && empty(b)),
                "{t}.{key}: ours {a}, Ray's {b}"
            );
        }
        let (a, b) = (
            &ours["available_node_types"][t]["idle_timeout_s"],
            &rays["available_node_types"][t]["idle_timeout_s"],
        );
        assert_eq!(a.as_f64(), b.as_f64(), "{t}.idle_timeout_s");
    }
    assert_eq!(
        ours["available_node_types"]["gpu"]["resources"]["GPU"],
        json!(2)
    );
    assert_eq!(
        ours["available_node_types"]["cpu"]["resources"]["CPU"],
        json!(2)
    );
    let res = |t: &str| ours["available_node_types"][t]["resources"].clone();
    assert_eq!(ours["available_node_types"]["gpu"]["priority"], json!(5));
    assert_eq!(ours["available_node_types"]["tpu"]["priority"], json!(-2));
    assert_eq!(res("tpu")["TPU"], json!(4));
    assert_eq!(res("tpu")["TPU-v4-16-head"], json!(1));
    assert_eq!(res("v6e")["TPU"], json!(8));
    assert_eq!(res("v6e")["TPU-v6e-8-head"], json!(1));
    assert!(
        res("tpunosel")
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.ends_with("-head")),
        "{}",
        res("tpunosel")
    );

    // A broken RayCluster is one line naming where.
    let mut bad = rc.clone();
    bad["spec"]["workerGroupSpecs"][0]
        .as_object_mut()
        .unwrap()
        .remove("maxReplicas");
    let e = rayscale_provider_kuberay::mapping::cluster_config_value(&bad, None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "RayCluster.spec.workerGroupSpecs[0].maxReplicas: missing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_replicas_caps_a_launch_and_a_conflict_is_retried() {
    let fake = KubeFake::start(NS).await;
    fake.put_cluster(raycluster("cap", &[("cpu", 0, 3, 2)]));
    fake.start_operator(HEAD_ADDR, OperatorTiming::default());
    let p = provider(&fake, "cap").await;
    p.list().await.unwrap();
    // Another writer edits the RayCluster between our read and our patch: the patch's
    // test fails (409), the provider reads again and patches on top of the edit.
    fake.faults().concurrent_edits = 1;
    let o = p.launch(&req("lr-1", "cpu", 5)).await.unwrap();
    let short = o.shortfall.expect("over maxReplicas");
    assert_eq!(short.capacity().map(|c| c.0), Some("cpu"));
    assert!(
        matches!(
            short.op,
            rayscale_core::provider::ProviderOp::Launch { count: 2, .. }
        ),
        "{short:?}"
    );
    assert_eq!(replicas(&fake, "cap", 0), 3);
    let rc = fake.cluster("cap").unwrap();
    assert!(
        rc["metadata"]["annotations"]["someone-else"].is_string(),
        "the other edit kept"
    );
    assert_eq!(
        fake.calls()
            .conflicts
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    wait_for("3 workers", Duration::from_secs(5), async || {
        live_workers(&p, "cpu").await.len() == 3
    })
    .await;
    // At the cap: nothing is made, the whole request is a capacity error.
    let e = p.launch(&req("lr-2", "cpu", 1)).await.unwrap_err();
    assert_eq!(e.capacity().map(|c| c.0), Some("cpu"), "{e}");
    assert_eq!(replicas(&fake, "cap", 0), 3);
    // Conflicts without end give up after the retries, in one line.
    let before = fake
        .calls()
        .conflicts
        .load(std::sync::atomic::Ordering::Relaxed);
    fake.faults().concurrent_edits = 10;
    let e = p.launch(&req("lr-3", "cpu", 0)).await.unwrap_err();
    fake.faults().concurrent_edits = 0;
    assert_eq!(e.kind, ProviderErrorKind::Transient, "{e}");
    assert!(
        e.message.contains("409") && !e.message.contains('\n'),
        "{e}"
    );
    let after = fake
        .calls()
        .conflicts
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(after - before, 4, "the first try and 3 retries");
}

/// The pod watch: changes arrive without a list; a watch whose version was compacted
/// away (410) makes the next read list again, and the view is right after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_watch_follows_changes_and_lists_again_after_a_410() {
    let fake = KubeFake::start(NS).await;
    fake.put_cluster(raycluster("w", &[("cpu", 0, 50, 2)]));
    fake.start_operator(HEAD_ADDR, OperatorTiming::default());
    let p = provider(&fake, "w").await;
    wait_for("the head pod", Duration::from_secs(5), async || {
        p.list().await.unwrap().iter().any(|c| c.is_head())
    })
    .await;
    let lists = || {
        fake.calls()
            .list_pods
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let first = lists();
    let running = async |n: usize| {
        p.list()
            .await
            .unwrap()
            .iter()
            .filter(|c| !c.is_head() && c.is_running())
            .count()
            == n
    };
    p.launch(&req("w1", "cpu", 3)).await.unwrap();
    wait_for("3 running workers", Duration::from_secs(5), async || {
        running(3).await
    })
    .await;
    assert_eq!(lists(), first, "the watch brought the changes, no list");
    // Compaction: the watch falls behind 20 changes with 2 kept, is told 410, and the
    // next read lists again.
    fake.set_events_kept(2);
    p.launch(&req("w2", "cpu", 10)).await.unwrap();
    wait_for("13 running workers", Duration::from_secs(10), async || {
        running(13).await
    })
    .await;
    assert!(lists() > first, "listed again after the 410");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_delete_holds_back_only_its_own_group_and_lists_are_cleared() {
    let fake = KubeFake::start(NS).await;
    fake.put_cluster(raycluster("guard", &[("cpu", 0, 10, 2), ("big", 0, 10, 8)]));
    fake.start_operator(
        HEAD_ADDR,
        OperatorTiming {
            boot: Duration::from_millis(100),
            delete: Duration::from_secs(3),
        },
    );
    let p = provider(&fake, "guard").await;
    p.list().await.unwrap();
    p.launch(&req("a", "cpu", 2)).await.unwrap();
    wait_for("2 cpu workers", Duration::from_secs(5), async || {
        live_workers(&p, "cpu").await.len() == 2
    })
    .await;
    let victim = live_workers(&p, "cpu").await[0].clone();
    p.terminate(std::slice::from_ref(&victim), "t1")
        .await
        .unwrap();
    assert_eq!(replicas(&fake, "guard", 0), 1);
    assert_eq!(to_delete(&fake, "guard", 0), std::slice::from_ref(&victim));
    // The same terminate again (a replay) changes nothing.
    p.terminate(std::slice::from_ref(&victim), "t1")
        .await
        .unwrap();
    assert_eq!(replicas(&fake, "guard", 0), 1);
    wait_for(
        "the victim marked deleted",
        Duration::from_secs(3),
        async || !live_workers(&p, "cpu").await.contains(&victim),
    )
    .await;
    // While the victim's pod still exists, cpu may not grow; big may.
    let e = p.launch(&req("b", "cpu", 1)).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::Transient, "{e}");
    assert!(e.message.contains(&victim), "{e}");
    p.launch(&req("c", "big", 1)).await.unwrap();
    assert_eq!(replicas(&fake, "guard", 1), 1);
    // Once the pod is gone the list clears itself and cpu grows again.
    wait_for("the list cleared", Duration::from_secs(8), async || {
        p.list().await.unwrap();
        to_delete(&fake, "guard", 0).is_empty()
    })
    .await;
    p.launch(&req("d", "cpu", 1)).await.unwrap();
    assert_eq!(replicas(&fake, "guard", 0), 2);
    // The head is never deleted.
    let e = p
        .terminate(&["guard-head".to_string()], "t2")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::InvalidConfig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_is_picked_up_and_a_new_process_replays_nothing_twice() {
    let fake = KubeFake::start(NS).await;
    fake.put_cluster(raycluster("edit", &[("cpu", 0, 4, 2)]));
    fake.start_operator(HEAD_ADDR, OperatorTiming::default());
    let p = provider(&fake, "edit").await;
    let c = p.cluster_config(None).await.unwrap();
    assert_eq!(c.node_type("cpu").unwrap().max_workers, Some(4));
    assert_eq!(c.idle_timeout_s(), 60.0);
    fake.edit_cluster("edit", |rc| {
        rc["spec"]["workerGroupSpecs"][0]["maxReplicas"] = json!(8);
        let mut g = rc["spec"]["workerGroupSpecs"][0].clone();
        g["groupName"] = json!("mem");
        g["rayStartParams"]["num-cpus"] = json!("16");
        rc["spec"]["workerGroupSpecs"]
            .as_array_mut()
            .unwrap()
            .push(g);
    });
    let c = p.cluster_config(None).await.unwrap();
    assert_eq!(c.node_type("cpu").unwrap().max_workers, Some(8));
    assert_eq!(
        c.node_type("mem").unwrap().resources.get("CPU"),
        c.node_type("cpu")
            .unwrap()
            .resources
            .get("CPU")
            .map(|two| two * 8)
    );
    assert_eq!(c.max_workers, Some(16));
    // A `rayscale:` block from a cluster YAML rides along.
    let c = p
        .cluster_config(Some(&json!({"expander": {"chain": ["least-waste"]}})))
        .await
        .unwrap();
    assert_eq!(c.expander.chain, ["least-waste"]);

    p.list().await.unwrap();
    p.launch(&req("lr-x", "cpu", 2)).await.unwrap();
    assert_eq!(replicas(&fake, "edit", 0), 2);
    // A second process (after a crash) replays the same request: no new replicas.
    let p2 = provider(&fake, "edit").await;
    p2.list().await.unwrap();
    p2.launch(&req("lr-x", "cpu", 2)).await.unwrap();
    assert_eq!(replicas(&fake, "edit", 0), 2);
    assert_eq!(fake.replicas_history(), [("cpu".to_string(), 2)]);

    // A request replayed after 300 others (past what the ledger keeps) is not applied
    // again: its id carries its time, older than the newest request the ledger dropped.
    let t0 = 1_800_000_000u64;
    let old = format!("lr-{t0:08x}{:08x}", 7);
    p2.launch(&req(&old, "cpu", 1)).await.unwrap();
    assert_eq!(replicas(&fake, "edit", 0), 3);
    for k in 1..=300u64 {
        let id = format!("lr-{:08x}{k:08x}", t0 + k);
        p2.launch(&req(&id, "cpu", 0)).await.unwrap();
    }
    let e = p2.launch(&req(&old, "cpu", 1)).await.unwrap_err();
    assert!(e.message.contains("older than the launch ledger"), "{e}");
    assert_eq!(replicas(&fake, "edit", 0), 3);
    // A new request still goes through.
    let new = format!("lr-{:08x}{:08x}", t0 + 1000, 1);
    p2.launch(&req(&new, "cpu", 1)).await.unwrap();
    assert_eq!(replicas(&fake, "edit", 0), 4);
}

/// The example manifest in `deploy/kuberay/` is a RayCluster rayscale reads.
#[test]
fn the_example_manifest_loads() {
    let path = rayscale_tests::e2e::root().join("deploy/kuberay/raycluster.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let rc = rayscale_core::config::parse_yaml(&text, "raycluster.yaml").unwrap();
    let c = rayscale_provider_kuberay::config_of(&rc, None, "default/raycluster-rayscale").unwrap();
    assert_eq!(c.cluster_name, "raycluster-rayscale");
    assert_eq!(c.max_workers, Some(14));
    let gpu = c.node_type("gpu").unwrap();
    assert_eq!(
        gpu.resources.get("GPU"),
        Some(rayscale_core::model::resources::to_fixed(1.0))
    );
    assert_eq!(
        gpu.resources.get("CPU"),
        Some(rayscale_core::model::resources::to_fixed(8.0))
    );
    assert_eq!(c.idle_timeout_s(), 60.0);
}

/// The sidecar image (deploy/kuberay/Dockerfile) without a container runtime: its final
/// stage's layout is rebuilt in a scratch directory (the wheel pip-installed into a fresh
/// environment whose `bin` plays /usr/local/bin, the shim copied there as `ray`), then
/// KubeRay's own autoscaler container command line is run in it as the kubelet runs it:
/// Command `/bin/bash -lc --`, Args `ray kuberay-autoscaler --cluster-name
/// $(RAY_CLUSTER_NAME) --cluster-namespace $(RAY_CLUSTER_NAMESPACE)` (KubeRay's
/// `BuildAutoscalerContainer`, ray-operator/controllers/ray/common/pod.go), with the
/// `$(VAR)` references expanded from the container's env first, as the kubelet does.
#[test]
fn the_sidecar_image_runs_kuberays_autoscaler_command_as_rayscale_kuberay() {
    use std::process::Command;
    let root = rayscale_tests::e2e::root();
    let dockerfile = std::fs::read_to_string(root.join("deploy/kuberay/Dockerfile")).unwrap();
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    for line in [
        "pip install --no-cache-dir --no-index /tmp/dist/rayscale-*.whl",
        "COPY deploy/kuberay/ray-shim.sh /usr/local/bin/ray",
        "ENTRYPOINT [\"rayscale\"]",
    ] {
        assert!(
            last_stage.contains(line),
            "the image's last stage has {line:?}"
        );
    }
    let wheel = std::fs::read_dir(rayscale_tests::e2e::wheel_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .unwrap();
    let scratch = std::env::temp_dir().join(format!("rayscale-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let (usr_local, home, stub_dir) = (
        scratch.join("usr-local"),
        scratch.join("home"),
        scratch.join("stub"),
    );
    for d in [&home, &stub_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let ok = |c: &mut Command| {
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    ok(Command::new("python3").args(["-m", "venv"]).arg(&usr_local));
    ok(Command::new(usr_local.join("bin/pip"))
        .args(["install", "--quiet", "--no-cache-dir", "--no-index"])
        .arg(&wheel));
    let bin = usr_local.join("bin");
    std::fs::copy(root.join("deploy/kuberay/ray-shim.sh"), bin.join("ray")).unwrap();
    ok(Command::new("chmod").arg("0755").arg(bin.join("ray")));
    // The image's entry point: the wheel's binary.
    let v = Command::new(bin.join("rayscale"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("rayscale {}", env!("CARGO_PKG_VERSION"))
    );
    // The container's env (KubeRay's fieldRefs, resolved) and the kubelet's expansion of
    // $(VAR) in Args.
    let env = [
        ("RAY_CLUSTER_NAME", "raycluster-autoscaler"),
        ("RAY_CLUSTER_NAMESPACE", "team-a"),
        ("RAY_HEAD_POD_NAME", "raycluster-autoscaler-head-x7k2p"),
        ("KUBERAY_CRD_VER", "v1"),
    ];
    let mut args = "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) \
                    --cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
        .to_string();
    for (k, v) in env {
        args = args.replace(&format!("$({k})"), v);
    }
    // `bash -l` reads the image's profile: /usr/local/bin on PATH (here its stand-in,
    // through ~/.bash_profile); `first` goes before it.
    let kubelet = |first: Option<&std::path::Path>, args: &str| {
        let path = match first {
            Some(f) => format!("{}:{}", f.display(), bin.display()),
            None => bin.display().to_string(),
        };
        std::fs::write(
            home.join(".bash_profile"),
            format!("export PATH={path}:/usr/bin:/bin\n"),
        )
        .unwrap();
        Command::new("/bin/bash")
            .args(["-lc", "--", args])
            .env_clear()
            .env("HOME", &home)
            .envs(env)
            .output()
            .unwrap()
    };
    // The shim runs `rayscale kuberay` with exactly KubeRay's flags (a stub rayscale
    // before the real one writes its argv)...
    std::fs::write(
        stub_dir.join("rayscale"),
        "#!/bin/bash\nprintf '%s\\n' \"$@\"\n",
    )
    .unwrap();
    ok(Command::new("chmod")
        .arg("0755")
        .arg(stub_dir.join("rayscale")));
    let o = kubelet(Some(&stub_dir), &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "kuberay\n--cluster-name\nraycluster-autoscaler\n--cluster-namespace\nteam-a\n"
    );
    // ... which the wheel's binary takes (clap refuses an unknown flag with status 2).
    let o = kubelet(None, &format!("{args} --help"));
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success()
            && help.contains("--cluster-name")
            && help.contains("--cluster-namespace"),
        "{help}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = kubelet(
        None,
        "ray kuberay-autoscaler --cluster-name a --no-such-flag",
    );
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Anything but the autoscaler is refused: the image has no Ray.
    let o = kubelet(None, "ray status");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("runs rayscale only: 'ray status'"));
    let _ = std::fs::remove_dir_all(&scratch);
}
