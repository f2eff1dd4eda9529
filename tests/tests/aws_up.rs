//! `rayscale up`, `down` and the other launcher commands on moto's EC2 server, side by
//! side with what Ray's own `ray up` does on the same emulator (`scripts/ray_aws_up.py`):
//! Ray's YAMLs launching unchanged, resources filled in from DescribeInstanceTypes, and
//! Ray's CLI habits (`get-head-ip`, `down --workers-only`, `-n`, and Ray's own `exec`, `rsync`
//! and `submit` on a cluster `up` launched). The provider's own behaviour is in `aws.rs`;
//! what Ray's bootstrap makes (subnets, security group, key pair, instance profile) in
//! `aws_bootstrap.rs`; Ray's CloudWatch and credentials keys in `aws_up/provider_keys.rs`.

#![allow(clippy::unwrap_used)]

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstanceProvider, CloudInstanceState, LaunchRequest, ProviderErrorKind,
};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{FakeSshHead, MotoEc2, REGION};

/// The addresses among `out`'s lines, sorted (what `get-head-ip` and `get-worker-ips`
/// print, Ray's or rayscale's, after any log lines).
fn ip_lines(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .map(str::trim)
        .filter(|l| l.parse::<std::net::IpAddr>().is_ok())
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// A moto AMI (moto 5.2.5 ships it).
const AMI: &str = "ami-12c6146b";

/// A cluster YAML of a head and a `cpu` type (m5.large, `cache_stopped_nodes: false`;
/// `cpu_min` goes before the type's `max_workers`), written to
/// `<tmp>/rayscale-aws-<tag>-<pid>/cluster.yaml`: that directory, the path and the text.
fn small_cluster(
    tag: &str,
    cluster: &str,
    cpu_min: &str,
) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("rayscale-aws-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cluster.yaml");
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
         head_node_type: head\nmax_workers: 10\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n  \
         cpu: {{resources: {{CPU: 2}}, {cpu_min}max_workers: 10, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
    );
    std::fs::write(&path, &yaml).unwrap();
    (dir, path, yaml)
}

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
        launched += rayscale_tests::cluster_yamls::launch_every_node_type(&p, &cfg, &origin).await;
    }
    assert!(launched >= 6, "{launched} node types launched");
}

/// Ray's fill-in (`scripts/ray_aws_up.py`) of `yaml` on `moto`: each type's resources,
/// or Ray's error.
fn rays_fillout(moto: &MotoEc2, yaml: &std::path::Path) -> Result<serde_json::Value, String> {
    moto.rays_up(yaml, "fillout", None)
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

    // An instance type EC2 does not offer fails in both, naming the type. A retired one,
    // so the request itself is valid against botocore's model (the contract check judges
    // it; a made-up name is refused there as outside the InstanceType enum).
    let bad_yaml =
        std::env::temp_dir().join(format!("rayscale-fillout-{}.yaml", std::process::id()));
    std::fs::write(
        &bad_yaml,
        std::fs::read_to_string(&yaml)
            .unwrap()
            .replace("c5.large", "cc2.8xlarge"),
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
    assert!(e.contains("cc2.8xlarge"), "{e}");

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
    let (dir, path, yaml) = small_cluster("ips", &cluster, "min_workers: 1, ");
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
    // Run again on the same YAML, `up` finds the head as launched from it (the hash its
    // bootstrap tagged is the YAML's); with the head's node_config changed, it says the
    // head runs as it was launched, and launches nothing.
    let stale = "from another node_config";
    let (ok, out) = moto.rayscale(&["up", &arg]);
    assert!(
        ok && out.contains("already running") && !out.contains(stale),
        "{out}"
    );
    // Another max_workers: the head's config differs (its rayscale-config tag says so),
    // and `up` pushes it over SSH as `ray up` would (with Ray's default
    // `auth.ssh_user`); an SSH that does not answer (here the tests' loopback guard
    // refuses moto's address) is said, non-zero, and nothing changes.
    let bigger = path.with_file_name("bigger.yaml");
    std::fs::write(
        &bigger,
        yaml.replacen("max_workers: 10\n", "max_workers: 11\n", 1),
    )
    .unwrap();
    let (ok, out) = moto.rayscale_env(
        &["up", &bigger.display().to_string()],
        &[("AUTOSCALER_NODE_START_WAIT_S", "0")],
    );
    assert!(
        !ok && out.contains("loopback ssh guard: refused")
            && out.contains("the head keeps its config (this one was not pushed)"),
        "{out}"
    );
    let edited = path.with_file_name("edited.yaml");
    std::fs::write(
        &edited,
        yaml.replacen("InstanceType: m5.large", "InstanceType: m5.xlarge", 1),
    )
    .unwrap();
    let edited_arg = edited.display().to_string();
    let (ok, out) = moto.rayscale(&["up", &edited_arg]);
    assert!(
        ok && out.contains(stale)
            && out.contains(&format!(
                "rayscale down {edited_arg}, then rayscale up {edited_arg}"
            )),
        "{out}"
    );
    assert_eq!(moto.calls("RunInstances"), 1, "one head, launched once");
    // As `ray up`, `up` put the head in the cluster's own security group, made for it.
    let groups = moto
        .client()
        .describe_security_groups()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("group-name")
                .values(format!("ray-autoscaler-{cluster}"))
                .build(),
        )
        .send()
        .await
        .unwrap();
    let group = groups.security_groups()[0].group_id().unwrap().to_string();
    let head = p.list().await.unwrap();
    let described = moto
        .client()
        .describe_instances()
        .instance_ids(&head[0].cloud_instance_id)
        .send()
        .await
        .unwrap();
    let head_groups: Vec<&str> = described.reservations()[0].instances()[0]
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id())
        .collect();
    assert_eq!(head_groups, [group.as_str()]);
    // And gave it Ray's key pair, its private key under the HOME `up` ran with, and said
    // how to use it.
    let key = format!("ray-autoscaler_{REGION}");
    assert_eq!(
        described.reservations()[0].instances()[0].key_name(),
        Some(key.as_str())
    );
    let pem = moto.home().join(format!(".ssh/{key}.pem"));
    assert!(pem.exists(), "{}", pem.display());
    assert!(out.contains(&format!("ssh -i {}", pem.display())), "{out}");
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
    let ip_of = |head: bool, public: bool| {
        let mut v: Vec<String> = listed
            .iter()
            .filter(|i| i.is_head() == head)
            .filter_map(|i| {
                if public {
                    i.public_ip.clone()
                } else {
                    i.private_ip.clone()
                }
            })
            .collect();
        v.sort();
        v
    };
    // Ray's own `ray get-head-ip`/`get-worker-ips` on the same cluster are the oracle
    // (Ray wants its head `up-to-date`, which the head's rayscale sets once it runs).
    p.mark_head_up_to_date(
        &listed
            .iter()
            .find(|i| i.is_head())
            .unwrap()
            .cloud_instance_id,
    )
    .await
    .unwrap();
    let ssh_log = dir.join("ssh.log");
    let no_ssh = FakeSshHead {
        home: &dir,
        path: "/usr/bin:/bin".into(),
        marker: "no-head",
        ssh_log: &ssh_log,
    };
    let rays = |args: &[&str]| {
        let out = moto
            .ray_cli(moto.home(), &no_ssh)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ray {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ip_lines(&String::from_utf8_lossy(&out.stdout))
    };
    let (ok, out) = moto.rayscale(&["get-head-ip", &arg]);
    assert!(ok, "{out}");
    assert_eq!(ip_lines(&out), ip_of(true, true), "public, as Ray's");
    assert_eq!(ip_lines(&out), rays(&["get-head-ip", &arg]));
    let (ok, out) = moto.rayscale(&["get-worker-ips", &arg]);
    assert!(ok, "{out}");
    let got = ip_lines(&out);
    assert_eq!(got, ip_of(false, true));
    assert_eq!(got, rays(&["get-worker-ips", &arg]));
    assert_eq!(got.len(), 3);
    // With use_internal_ips, the private ones, as Ray's.
    let internal = dir.join("internal.yaml");
    std::fs::write(
        &internal,
        yaml.replace(
            "cache_stopped_nodes: false",
            "cache_stopped_nodes: false, use_internal_ips: true",
        ),
    )
    .unwrap();
    let iarg = internal.display().to_string();
    let (ok, out) = moto.rayscale(&["get-head-ip", &iarg]);
    assert!(ok, "{out}");
    assert_eq!(ip_lines(&out), ip_of(true, false));
    assert_eq!(ip_lines(&out), rays(&["get-head-ip", &iarg]));
    let (ok, out) = moto.rayscale(&["get-worker-ips", &iarg]);
    assert!(ok, "{out}");
    assert_eq!(ip_lines(&out), ip_of(false, false));
    assert_eq!(ip_lines(&out), rays(&["get-worker-ips", &iarg]));

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
    // `up -y` on the edited YAML relaunches the outdated head, as `ray up -y` does: the
    // old one terminated, a new one launched from the edited node_config, and found
    // current by the next `up`.
    let old_head = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.is_head())
        .unwrap();
    let (ok, out) = moto.rayscale(&["up", &edited.display().to_string(), "-y"]);
    assert!(
        ok && out.contains(&format!(
            "relaunched the head: {} was outdated",
            old_head.cloud_instance_id
        )),
        "{out}"
    );
    let heads: Vec<_> = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.is_head() && i.state != CloudInstanceState::Stopping)
        .collect();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_ne!(heads[0].cloud_instance_id, old_head.cloud_instance_id);
    let described = moto
        .client()
        .describe_instances()
        .instance_ids(&heads[0].cloud_instance_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        described.reservations()[0].instances()[0]
            .instance_type()
            .map(|t| t.as_str().to_string()),
        Some("m5.xlarge".to_string())
    );
    assert_eq!(
        moto.calls("RunInstances"),
        3,
        "the head twice, the worker once"
    );
    let (ok, out) = moto.rayscale(&["up", &edited.display().to_string(), "-y"]);
    assert!(
        ok && out.contains("already running")
            && !out.contains(stale)
            && !out.contains("relaunched"),
        "{out}"
    );
    // Then the whole cluster.
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok, "{out}");
    assert!(p.list().await.unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `up` with `file_mounts` it cannot copy: a missing local path or no `auth.ssh_user`
/// launches nothing (one line naming the key); a head whose SSH never answers fails `up`
/// loudly, saying the head waits and how to go on, and `down` ends it.
#[test]
fn file_mounts_that_cannot_be_copied_fail_up_loudly_and_leak_nothing() {
    let moto = MotoEc2::start();
    let cluster = format!("mounts{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("rayscale-aws-mounts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("code")).unwrap();
    let path = dir.join("cluster.yaml");
    let arg = path.display().to_string();
    let write = |auth: &str, local: &str| {
        std::fs::write(
            &path,
            format!(
                "cluster_name: {cluster}\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
                 {auth}file_mounts: {{'~/code': '{local}'}}\nhead_node_type: head\n\
                 available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
            ),
        )
        .unwrap();
    };
    let code = dir.join("code").display().to_string();
    let missing = dir.join("missing").display().to_string();

    write("auth: {ssh_user: ubuntu}\n", &missing);
    let (ok, out) = moto.rayscale(&["up", &arg]);
    assert!(
        !ok && out.contains("file_mounts.~/code: ") && out.contains("missing"),
        "{out}"
    );
    write("auth: {}\n", &code);
    let (ok, out) = moto.rayscale(&["up", &arg]);
    assert!(
        !ok && out.contains("auth.ssh_user: needed to copy file_mounts"),
        "{out}"
    );
    assert_eq!(moto.calls("RunInstances"), 0, "nothing launched");

    // SSH that never answers (the proxy fails at once); no waiting here.
    write(
        "auth: {ssh_user: ubuntu, ssh_proxy_command: 'false'}\n",
        &code,
    );
    let (ok, out) = moto.rayscale_env(&["up", &arg], &[("AUTOSCALER_NODE_START_WAIT_S", "0")]);
    assert!(
        !ok && out.contains("trying to copy the file mounts on the head i-")
            && out.contains("did not answer within 0 s")
            && out.contains("rayscale up again"),
        "{out}"
    );
    assert_eq!(moto.calls("RunInstances"), 1, "the head was launched once");
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok && out.contains("head i-"), "{out}");

    // The cloud takes the head away while `up` waits for its SSH (up to 600 s here), at
    // `up`'s first failed SSH try (so after `up` saw it run): `up` says so at its next
    // try instead of waiting it out.
    let mut taken = String::new();
    let (ok, out) = moto.rayscale_at(
        &["up", &arg],
        &[("AUTOSCALER_NODE_START_WAIT_S", "600")],
        "waiting for the head's SSH",
        || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            taken = rt.block_on(async {
                let client = moto.client();
                let out = client
                    .describe_instances()
                    .filters(
                        aws_sdk_ec2::types::Filter::builder()
                            .name("tag:ray-cluster-name")
                            .values(&cluster)
                            .build(),
                    )
                    .filters(
                        aws_sdk_ec2::types::Filter::builder()
                            .name("instance-state-name")
                            .values("running")
                            .build(),
                    )
                    .send()
                    .await
                    .unwrap();
                let id = out
                    .reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .find_map(|i| i.instance_id().map(str::to_string))
                    .expect("the head runs while up waits for its SSH");
                client
                    .terminate_instances()
                    .instance_ids(&id)
                    .send()
                    .await
                    .unwrap();
                id
            });
        },
    );
    assert!(
        !ok && !taken.is_empty()
            && out.contains(&format!("the head {taken} "))
            && out.contains("rayscale up again launches a new one")
            && !out.contains("did not answer within"),
        "{out}"
    );
    assert_eq!(
        moto.calls("RunInstances"),
        2,
        "one head more, none after it went"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[path = "aws_up/provider_keys.rs"]
mod provider_keys;

#[path = "aws_up/over_ssh.rs"]
mod over_ssh;

#[path = "aws_up/overrides.rs"]
mod overrides;
