//! KubeRay end to end on one machine: a real Ray 2.60 head (the head pod's Ray, started
//! without Ray's monitor), the fake API server with its mini operator, the boot simulator
//! as the kubelet (each running worker pod's `ray start` as local processes), and
//! `rayscale kuberay` as the sidecar, pointed at the fake by a kubeconfig. Demand ->
//! replicas patched -> pods -> Ray nodes join with their pod names -> tasks finish ->
//! idle -> workersToDelete -> pods gone -> lists cleared.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use rayscale_tests::boot_sim::{BootSimulator, KubePlane};
use rayscale_tests::e2e::workload;
use rayscale_tests::fakes::kube::{KubeFake, OperatorTiming, raycluster};
use rayscale_tests::ray_head::{RayHead, RayHeadOptions, alive_workers_at};
use rayscale_tests::wait_until;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_to_pods_to_nodes_and_back() {
    let python = PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    let cluster = format!("kr{}", std::process::id());
    let head_pod = format!("{cluster}-head");
    let mut opts = RayHeadOptions::external_autoscaler("headgroup");
    opts.env
        .push(("RAY_CLOUD_INSTANCE_ID".into(), head_pod.clone()));
    let head = RayHead::start_with(opts);
    let gcs = head.addr();

    let fake = KubeFake::start("ray").await;
    let mut rc = raycluster(&cluster, &[("cpu", 0, 4, 2)]);
    rc["spec"]["autoscalerOptions"]["idleTimeoutSeconds"] = json!(10);
    // One machine for every pod: each its own temp dir (a pod has its own /tmp), named
    // by the pod's suffix; the pod's shell expands it, as KubeRay's `bash -lc` does.
    rc["spec"]["workerGroupSpecs"][0]["rayStartParams"]["temp-dir"] =
        json!("/tmp/rsk-${RAY_CLOUD_INSTANCE_ID: -5}");
    fake.put_cluster(rc);
    fake.start_operator(
        &gcs,
        OperatorTiming {
            boot: Duration::from_millis(500),
            delete: Duration::from_secs(1),
        },
    );

    let scratch = std::env::temp_dir().join(format!("rayscale-kuberay-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let venv_bin = python.parent().unwrap().to_path_buf();
    let env = vec![
        (
            "PATH".to_string(),
            format!(
                "{}:{}",
                venv_bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        ),
        ("RAY_USAGE_STATS_ENABLED".to_string(), "0".to_string()),
    ];
    let sim = BootSimulator::start(
        std::sync::Arc::new(KubePlane::new(fake.clone())),
        env,
        scratch.join("sim"),
    );
    let kubeconfig = scratch.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let log = scratch.join("rayscale.log");
    let mut sidecar = Command::new(rayscale_tests::workspace_bin("rayscale"))
        .args([
            "kuberay",
            "--cluster-name",
            &cluster,
            "--cluster-namespace",
            "ray",
            "--gcs-address",
            &gcs,
            "--interval",
            "2",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let diag = || {
        format!(
            "pods {:?}\nreplicas {:?}\n--- rayscale:\n{}",
            fake.pods(),
            fake.replicas_history(),
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    };

    let (ok, text) = tokio::task::block_in_place(|| workload(&python, &gcs));
    assert!(ok, "workload: {text}\n{}", diag());
    let history = fake.replicas_history();
    assert!(
        history.iter().any(|(g, r)| g == "cpu" && *r > 0),
        "{}",
        diag()
    );
    // The workers joined with their pod names.
    let booted = sim.ever_booted();
    let joined = tokio::task::block_in_place(|| alive_workers_at(&gcs));
    assert!(
        !joined.is_empty()
            && joined
                .iter()
                .all(|id| id.starts_with(&format!("{cluster}-cpu-worker-")) && booted.contains(id)),
        "GCS workers {joined:?}, booted {booted:?}\n{}",
        diag()
    );
    // Idle: named in workersToDelete, deleted by the operator, the list cleared.
    let drained = || {
        let rc = fake.cluster(&cluster).unwrap();
        let g = &rc["spec"]["workerGroupSpecs"][0];
        let listed = g["scaleStrategy"]["workersToDelete"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        g["replicas"] == json!(0) && !listed && fake.pods().iter().all(|(n, ..)| *n == head_pod)
    };
    assert!(
        tokio::task::block_in_place(|| wait_until(Duration::from_secs(120), drained)),
        "{}",
        diag()
    );
    let named = fake.named_for_deletion();
    assert!(
        !named.is_empty() && named.iter().all(|n| booted.contains(n)),
        "named {named:?}, booted {booted:?}"
    );
    assert!(
        tokio::task::block_in_place(|| wait_until(Duration::from_secs(30), || sim
            .live()
            .is_empty())),
        "processes still running for {:?}",
        sim.live()
    );
    // SIGTERM (what Kubernetes sends) stops the sidecar cleanly.
    let _ = Command::new("kill").arg(sidecar.id().to_string()).status();
    let status = sidecar.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{status}\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    drop(sim);
    for id in &booted {
        let _ = std::fs::remove_dir_all(format!("/tmp/rsk-{}", &id[id.len() - 5..]));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
