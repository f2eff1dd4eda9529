//! `rayscale up`, `down` and the other launcher commands on moto's EC2 server, side by
//! side with what Ray's own `ray up` does on the same emulator (`scripts/ray_aws_up.py`):
//! Ray's YAMLs launching unchanged, resources filled in from DescribeInstanceTypes, and
//! Ray's CLI habits (`get-head-ip`,
//! `down --workers-only`). The provider's own behaviour is in `aws.rs`.

#![allow(clippy::unwrap_used)]

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest, ProviderErrorKind};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{MotoEc2, REGION};

/// A moto AMI (moto 5.2.5 ships it).
const AMI: &str = "ami-12c6146b";

/// Ray's AWS YAMLs from the wheel and rayscale's spot and GPU variants: every node type
/// launches on moto (the requests go to the contract check, tests/contract). The region is
/// the emulator's; zones named for another region are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_yamls_and_the_spot_and_gpu_variants_launch_every_node_type() {
    let moto = MotoEc2::start();
    let mut launched = 0;
    for (origin, mut v) in rayscale_tests::cluster_yamls::for_cloud("aws") {
        v["provider"]["region"] = serde_json::json!(REGION);
        if let Some(p) = v["provider"].as_object_mut() {
            p.remove("availability_zone");
        }
        let cfg = ClusterConfig::from_value(&v, "").unwrap_or_else(|e| panic!("{origin}: {e}"));
        let p =
            AwsProvider::new(moto.client(), &cfg, None).unwrap_or_else(|e| panic!("{origin}: {e}"));
        launched +=
            rayscale_tests::cluster_yamls::launch_every_node_type(&p, &cfg, &v, &origin).await;
    }
    assert!(launched >= 6, "{launched} node types launched");
}

/// Ray's fill-in (`scripts/ray_aws_fillout.py`) of `yaml` on `moto`: each type's
/// resources, or Ray's error.
fn rays_fillout(moto: &MotoEc2, yaml: &std::path::Path) -> Result<serde_json::Value, String> {
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ray_aws_fillout.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(["--endpoint", &moto.endpoint(), "--config"])
        .arg(yaml)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    // Ray logs to stdout before the answer: the answer is the last line.
    Ok(serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_filled_in_from_ec2_as_rays_ray_up_fills_them() {
    use rayscale_provider_aws::resources::InstanceTypes;
    let moto = MotoEc2::start();
    let yaml =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/aws/fillout.yaml");
    let theirs = rays_fillout(&moto, &yaml).unwrap_or_else(|e| panic!("Ray's fill-in: {e}"));
    let config =
        ClusterConfig::from_yaml_str(&std::fs::read_to_string(&yaml).unwrap(), "fillout").unwrap();
    let types = InstanceTypes::new(moto.client(), REGION);
    let before = moto.calls("DescribeInstanceTypes");
    let filled = types.fill(&config).await.unwrap_or_else(|e| panic!("{e}"));
    let ours: serde_json::Map<String, serde_json::Value> = filled.raw["available_node_types"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(t, v)| (t.clone(), v["resources"].clone()))
        .collect();
    assert_eq!(serde_json::Value::Object(ours), theirs);
    assert_eq!(theirs.as_object().map(|m| m.len()), Some(7));
    // The scheduler's view is the filled one: a g5.xlarge worker has its GPU.
    let g5 = filled.node_type("g5").unwrap();
    assert_eq!(
        g5.resources
            .get("GPU")
            .map(rayscale_core::model::resources::to_f64),
        Some(1.0)
    );
    assert_eq!(
        moto.calls("DescribeInstanceTypes") - before,
        1,
        "one call for 7 types"
    );
    // Every type is known now: a reload asks EC2 nothing.
    types.fill(&config).await.unwrap();
    assert_eq!(moto.calls("DescribeInstanceTypes") - before, 1);

    // An instance type EC2 does not offer fails in both, naming the type.
    let bad_yaml =
        std::env::temp_dir().join(format!("rayscale-fillout-{}.yaml", std::process::id()));
    std::fs::write(
        &bad_yaml,
        std::fs::read_to_string(&yaml)
            .unwrap()
            .replace("c5.large", "c5.gigantic"),
    )
    .unwrap();
    let rays = rays_fillout(&moto, &bad_yaml);
    assert!(rays.is_err(), "Ray refuses it too: {rays:?}");
    let bad =
        ClusterConfig::from_yaml_str(&std::fs::read_to_string(&bad_yaml).unwrap(), "bad").unwrap();
    let _ = std::fs::remove_file(&bad_yaml);
    let e = InstanceTypes::new(moto.client(), REGION)
        .fill(&bad)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("c5.gigantic"), "{e}");

    // EC2 throttling every try: an error, nothing filled in (the caller keeps the YAML's).
    moto.faults(r#"{"throttle_next": 10, "throttle_action": "DescribeInstanceTypes"}"#);
    let e = InstanceTypes::new(moto.client(), REGION)
        .fill(&config)
        .await;
    assert!(
        e.as_ref()
            .is_err_and(|e| e.kind() == ProviderErrorKind::Throttled),
        "{:?}",
        e.map(|_| ())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_ips_and_down_workers_only_keep_the_head_and_each_types_min_workers() {
    let moto = MotoEc2::start();
    let cluster = format!("ips{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("rayscale-aws-ips-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cluster.yaml");
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
         head_node_type: head\nmax_workers: 10\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n  \
         cpu: {{resources: {{CPU: 2}}, min_workers: 1, max_workers: 10, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
    );
    std::fs::write(&path, &yaml).unwrap();
    let arg = path.display().to_string();
    let cfg = ClusterConfig::from_yaml_str(&yaml, &arg).unwrap();
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();

    // No head yet: get-head-ip fails, saying how to start one.
    let (ok, out) = moto.rayscale(&["get-head-ip", &arg]);
    assert!(
        !ok && out.contains("has no running head") && out.contains("rayscale up"),
        "{out}"
    );
    let (ok, out) = moto.rayscale(&["up", &arg]);
    assert!(ok, "{out}");
    p.launch(&LaunchRequest {
        request_id: "lr-ips".into(),
        node_type: "cpu".into(),
        count: 3,
        launch_config_hash: cfg.node_type("cpu").unwrap().launch_config_hash.clone(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    })
    .await
    .unwrap();
    let listed = p.list().await.unwrap();
    let ip_of = |head: bool| {
        let mut v: Vec<String> = listed
            .iter()
            .filter(|i| i.is_head() == head)
            .filter_map(|i| i.private_ip.clone())
            .collect();
        v.sort();
        v
    };
    let (ok, out) = moto.rayscale(&["get-head-ip", &arg]);
    assert!(ok, "{out}");
    assert_eq!(vec![out.trim().to_string()], ip_of(true));
    let (ok, out) = moto.rayscale(&["get-worker-ips", &arg]);
    assert!(ok, "{out}");
    let mut got: Vec<String> = out.lines().map(str::to_string).collect();
    got.sort();
    assert_eq!(got, ip_of(false));
    assert_eq!(got.len(), 3);

    // --keep-min-workers needs --workers-only (it would orphan workers without a head).
    let (ok, out) = moto.rayscale(&["down", &arg, "--keep-min-workers"]);
    assert!(!ok && out.contains("--workers-only"), "{out}");
    // Two of three go; the head and the type's one minimum stay.
    let (ok, out) = moto.rayscale(&["down", &arg, "--workers-only", "--keep-min-workers", "-y"]);
    assert!(
        ok && out.contains("2 workers terminated, the head left running"),
        "{out}"
    );
    let live = p.list().await.unwrap();
    assert_eq!(live.iter().filter(|i| i.is_head()).count(), 1, "{live:?}");
    assert_eq!(live.iter().filter(|i| !i.is_head()).count(), 1, "{live:?}");
    let (ok, out) = moto.rayscale(&["down", &arg, "--workers-only"]);
    assert!(ok && out.contains("1 workers terminated"), "{out}");
    let (ok, out) = moto.rayscale(&["get-worker-ips", &arg]);
    assert!(ok && out.trim().is_empty(), "{out}");
    assert_eq!(
        moto.calls("TerminateInstances"),
        2,
        "the head was never asked to go"
    );
    // Then the whole cluster.
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok, "{out}");
    assert!(p.list().await.unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
