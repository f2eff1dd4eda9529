//! The KubeRay provider's reads per iteration on a 1,000-worker-pod RayCluster, against
//! the fake API server (`tests/fakes/kube.rs`): requests and response bytes of one
//! rayscale iteration (the config read from the RayCluster, then the list), beside the
//! reads Ray 2.60's KubeRay autoscaler makes per iteration, replayed on the same server
//! with the same client (`autoscaling_config.py` GETs the RayCluster; the provider's
//! `_sync_with_api_server` GETs it again, GETs the head pod, and lists the pods in one
//! response). The fake answers at once: the times are the client's and rayscale's.
//!
//! Run: `cargo bench -p rayscale-tests --bench kuberay_fake`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, VersionMatch};
use rayscale_core::provider::CloudInstanceProvider;
use rayscale_provider_kuberay::{KubeRayConfig, KubeRayProvider};
use rayscale_tests::fakes::kube::{Calls, KubeFake, OperatorTiming, raycluster};

const PODS: u64 = 1000;
const ROUNDS: u64 = 10;

fn snapshot(c: &Calls) -> (u64, u64) {
    (c.total(), c.bytes.load(Ordering::Relaxed))
}

async fn run() -> Result<(), String> {
    rayscale_tests::install_crypto_provider();
    let fake = KubeFake::start("ray").await;
    fake.put_cluster(raycluster("bench", &[("cpu", PODS, PODS, 4)]));
    let instant = OperatorTiming {
        boot: Duration::ZERO,
        delete: Duration::ZERO,
    };
    fake.operator_step("127.0.0.1:6379", &instant);
    fake.operator_step("127.0.0.1:6379", &instant);
    let client = fake.client().await;
    let provider = |watch: bool| -> Result<KubeRayProvider, String> {
        let mut cfg = KubeRayConfig::new("bench", "ray").map_err(|e| e.to_string())?;
        cfg.head_pod_name = Some("bench-head".into());
        cfg.watch_pods = watch;
        Ok(KubeRayProvider::new(client.clone(), cfg))
    };
    let pace = Duration::from_secs(1);

    // rayscale: one iteration = the config poll (a fresh GET of the RayCluster) and the
    // list, at the loop's pace (one a second). With the watch: the first list, then
    // changes only; without: every pod at every iteration (the head pod's version, the
    // pods 500 a page), as Ray.
    let mut rows = Vec::new();
    for watch in [true, false] {
        let p = provider(watch)?;
        let listed = p.list().await.map_err(|e| e.to_string())?.len();
        if listed as u64 != PODS + 1 {
            return Err(format!("listed {listed}, want {}", PODS + 1));
        }
        let (c0, b0) = snapshot(fake.calls());
        let mut busy = Duration::ZERO;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            p.cluster_config(None).await.map_err(|e| e.to_string())?;
            let n = p.list().await.map_err(|e| e.to_string())?.len();
            busy += t.elapsed();
            if n as u64 != PODS + 1 {
                return Err(format!("listed {n}, want {}", PODS + 1));
            }
            tokio::time::sleep(pace).await;
        }
        let (c1, b1) = snapshot(fake.calls());
        rows.push((
            if watch {
                "rayscale (watch)"
            } else {
                "rayscale (list every iteration)"
            },
            c1 - c0,
            b1 - b0,
            busy / ROUNDS as u32,
        ));
    }

    // Ray's reads, replayed.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "ray",
        &rayscale_provider_kuberay::client::raycluster_resource(),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ray");
    let (c1, b1) = snapshot(fake.calls());
    let mut busy = Duration::ZERO;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        clusters.get("bench").await.map_err(|e| e.to_string())?;
        clusters.get("bench").await.map_err(|e| e.to_string())?;
        let head = pods.get("bench-head").await.map_err(|e| e.to_string())?;
        let rv = head.metadata.resource_version.unwrap_or_default();
        let lp = ListParams::default()
            .labels("ray.io/cluster=bench")
            .at(&rv)
            .matching(VersionMatch::NotOlderThan);
        pods.list(&lp).await.map_err(|e| e.to_string())?;
        busy += t.elapsed();
        tokio::time::sleep(pace).await;
    }
    let (c2, b2) = snapshot(fake.calls());
    rows.push((
        "Ray 2.60 (same reads replayed)",
        c2 - c1,
        b2 - b1,
        busy / ROUNDS as u32,
    ));
    let per = |c: u64| c as f64 / ROUNDS as f64;
    println!("kuberay_fake: {PODS} worker pods + head, {ROUNDS} iterations a second apart");
    for (name, calls, bytes, busy) in rows {
        println!(
            "  {name}: {:.1} requests, {:.1} KB, {:.1} ms per iteration",
            per(calls),
            per(bytes) / 1024.0,
            busy.as_secs_f64() * 1e3
        );
    }
    Ok(())
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
        eprintln!("kuberay_fake: {e}");
        std::process::exit(1);
    }
}
