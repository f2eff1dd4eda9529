//! `rayscale up`, `down` and the other launcher commands on moto's EC2 server, side by
//! side with what Ray's own `ray up` does on the same emulator (`scripts/ray_aws_up.py`):
//! Ray's YAMLs launching unchanged, resources filled in from DescribeInstanceTypes, the
//! subnets and security group of Ray's bootstrap, and Ray's CLI habits (`get-head-ip`,
//! `down --workers-only`). The provider's own behaviour is in `aws.rs`.

#![allow(clippy::unwrap_used)]

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest, ProviderErrorKind};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{FakeSshHead, MotoEc2, REGION};

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

/// Ray's fill-in (`scripts/ray_aws_up.py`) of `yaml` on `moto`: each type's resources,
/// or Ray's error.
fn rays_fillout(moto: &MotoEc2, yaml: &std::path::Path) -> Result<serde_json::Value, String> {
    rays_up(moto, yaml, "fillout", None)
}

/// What Ray's `ray up` computes (`scripts/ray_aws_up.py --what <what>`) for `yaml` on
/// `moto` (`home`: the HOME it runs with, where Ray writes a key pair it makes).
fn rays_up(
    moto: &MotoEc2,
    yaml: &std::path::Path,
    what: &str,
    home: Option<&std::path::Path>,
) -> Result<serde_json::Value, String> {
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ray_aws_up.py");
    let mut cmd = std::process::Command::new(&python);
    if let Some(h) = home {
        cmd.env("HOME", h);
    }
    let out = cmd
        .arg(&script)
        .args(["--endpoint", &moto.endpoint(), "--what", what, "--config"])
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

/// The inbound rules of security group `id` as EC2 describes them, its own id written
/// `<self>`, sorted: two clusters' groups compare equal when made alike.
async fn rules_of(moto: &MotoEc2, id: &str) -> Vec<String> {
    let out = moto
        .client()
        .describe_security_groups()
        .group_ids(id)
        .send()
        .await
        .unwrap();
    let g = &out.security_groups()[0];
    let mut rules: Vec<String> = g
        .ip_permissions()
        .iter()
        .map(|p| {
            let mut groups: Vec<String> = p
                .user_id_group_pairs()
                .iter()
                .map(|u| u.group_id().unwrap_or_default().replace(id, "<self>"))
                .collect();
            groups.sort();
            let ranges: Vec<&str> = p.ip_ranges().iter().filter_map(|r| r.cidr_ip()).collect();
            format!(
                "{} {:?}-{:?} groups {groups:?} ranges {ranges:?}",
                p.ip_protocol().unwrap_or_default(),
                p.from_port(),
                p.to_port()
            )
        })
        .collect();
    rules.sort();
    rules
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_picks_subnets_and_makes_the_security_group_as_rays_bootstrap_does() {
    use rayscale_provider_aws::bootstrap::bootstrap;
    let moto = MotoEc2::start();
    let dir = std::env::temp_dir().join(format!("rayscale-aws-boot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Ray's IAM step is skipped by naming the head's profile; its key pair step makes one
    // in moto and writes it under `dir`.
    let yaml = |cluster: &str| {
        format!(
            "cluster_name: {cluster}\n\
             provider: {{type: aws, region: {REGION}, availability_zone: 'us-east-1b,us-east-1a',\n  \
               security_group: {{IpPermissions: [{{IpProtocol: tcp, FromPort: 8265, ToPort: 8265, IpRanges: [{{CidrIp: 10.0.0.0/8}}]}}]}}}}\n\
             head_node_type: head\nmax_workers: 4\n\
             available_node_types:\n  \
               head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}, \
                 IamInstanceProfile: {{Arn: 'arn:aws:iam::123456789012:instance-profile/ray-head'}}}}}}\n  \
               cpu: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
        )
    };
    let cluster = "bootgold";
    let cfg = ClusterConfig::from_yaml_str(&yaml(cluster), "t.yaml").unwrap();
    // rayscale first: it picks the subnets and makes the group.
    let ours = bootstrap(&moto.client(), &cfg).await.unwrap();
    assert_eq!(moto.calls("CreateSecurityGroup"), 1);
    assert_eq!(moto.calls("AuthorizeSecurityGroupIngress"), 1);
    // Run again, it finds the same group and adds nothing.
    let again = bootstrap(&moto.client(), &cfg).await.unwrap();
    assert_eq!(again.raw, ours.raw);
    assert_eq!(
        moto.calls("CreateSecurityGroup"),
        1,
        "found, not made twice"
    );
    assert_eq!(moto.calls("AuthorizeSecurityGroupIngress"), 1);
    // Ray's bootstrap of the same YAML on the same account picks the same subnets and
    // finds rayscale's group as its own.
    let path = dir.join("c.yaml");
    std::fs::write(&path, yaml(cluster)).unwrap();
    let theirs = rays_up(&moto, &path, "bootstrap", Some(&dir)).unwrap();
    assert_eq!(
        moto.calls("CreateSecurityGroup"),
        1,
        "Ray found rayscale's group"
    );
    for t in ["head", "cpu"] {
        let nc = &ours.raw["available_node_types"][t]["node_config"];
        assert_eq!(nc["SubnetIds"], theirs[t]["SubnetIds"], "{t}: subnets");
        assert_eq!(
            nc["SecurityGroupIds"], theirs[t]["SecurityGroupIds"],
            "{t}: group"
        );
        assert!(
            nc["SubnetIds"].as_array().map(Vec::len).unwrap_or(0) >= 2,
            "{nc}"
        );
    }
    // The group is Ray's in name, tags and rules: Ray makes a second cluster's group, and
    // the two groups' rules match.
    let group = ours.raw["available_node_types"]["cpu"]["node_config"]["SecurityGroupIds"][0]
        .as_str()
        .unwrap()
        .to_string();
    let desc = moto
        .client()
        .describe_security_groups()
        .group_ids(&group)
        .send()
        .await
        .unwrap();
    let g = &desc.security_groups()[0];
    assert_eq!(g.group_name(), Some("ray-autoscaler-bootgold"));
    assert!(
        g.tags()
            .iter()
            .any(|t| t.key() == Some("ray-cluster-name") && t.value() == Some(cluster)),
        "{g:?}"
    );
    let path2 = dir.join("c2.yaml");
    std::fs::write(&path2, yaml("bootgold2")).unwrap();
    let theirs2 = rays_up(&moto, &path2, "bootstrap", Some(&dir)).unwrap();
    let rays_group = theirs2["cpu"]["SecurityGroupIds"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(rays_group, group);
    let ours_rules = rules_of(&moto, &group).await;
    assert_eq!(ours_rules.len(), 3, "{ours_rules:?}");
    assert_eq!(ours_rules, rules_of(&moto, &rays_group).await);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The key pair `rayscale up` finds or makes is the one `ray up` finds or makes: the same
/// names in the same order, the private key under `~/.ssh` with mode 0600, so a cluster
/// either launched is reached with the same `ssh -i`. Machines A, B and C are three HOMEs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_pair_is_found_or_made_as_rays_bootstrap_does_with_its_key_under_ssh() {
    use rayscale_provider_aws::keypair::configure_key_pair;
    let moto = MotoEc2::start();
    let base = std::env::temp_dir().join(format!("rayscale-aws-kp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let home = |m: &str| base.join(m);
    for m in ["a", "b", "c"] {
        std::fs::create_dir_all(home(m)).unwrap();
    }
    let yaml = |provider_extra: &str, auth_extra: &str, cpu_extra: &str| {
        format!(
            "cluster_name: kp\n\
             provider: {{type: aws, region: {REGION}{provider_extra}}}\n\
             auth: {{ssh_user: ubuntu{auth_extra}}}\n\
             head_node_type: head\nmax_workers: 4\n\
             available_node_types:\n  \
               head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}, \
                 IamInstanceProfile: {{Arn: 'arn:aws:iam::123456789012:instance-profile/ray-head'}}}}}}\n  \
               cpu: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{InstanceType: m5.large, ImageId: {AMI}{cpu_extra}}}}}\n"
        )
    };
    let yaml_file = base.join("kp.yaml");
    std::fs::write(&yaml_file, yaml("", "", "")).unwrap();
    let cfg = ClusterConfig::from_yaml_str(&yaml("", "", ""), "kp.yaml").unwrap();
    let ours = |m: &str| {
        let cfg = cfg.clone();
        let ssh = home(m).join(".ssh");
        let client = moto.client();
        async move {
            configure_key_pair(&client, &cfg, REGION, Some(&ssh))
                .await
                .unwrap()
        }
    };
    let key_of = |v: &serde_json::Value, t: &str| {
        v["available_node_types"][t]["node_config"]["KeyName"]
            .as_str()
            .unwrap_or("-")
            .to_string()
    };
    let first = format!("ray-autoscaler_{REGION}");

    // Machine A, rayscale first: Ray's first name, made, its private key written 0600.
    let (on_a, key) = ours("a").await;
    let (name, path) = key.unwrap();
    assert_eq!(name, first);
    assert_eq!(path, home("a").join(format!(".ssh/{first}.pem")));
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("PRIVATE KEY")
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    assert_eq!(key_of(&on_a.raw, "head"), first);
    assert_eq!(key_of(&on_a.raw, "cpu"), first);
    assert_eq!(moto.calls("CreateKeyPair"), 1);
    // Again on A: found, nothing made.
    let (again, _) = ours("a").await;
    assert_eq!(again.raw, on_a.raw);
    assert_eq!(moto.calls("CreateKeyPair"), 1);
    // Ray's bootstrap on A uses rayscale's key.
    let theirs = rays_up(&moto, &yaml_file, "bootstrap", Some(&home("a"))).unwrap();
    assert_eq!(theirs["cpu"]["KeyName"], serde_json::json!(first));
    assert_eq!(moto.calls("CreateKeyPair"), 1, "Ray found rayscale's key");

    // Machine B has no private key for that name: Ray makes the next one there, and
    // rayscale on B finds Ray's.
    let theirs = rays_up(&moto, &yaml_file, "bootstrap", Some(&home("b"))).unwrap();
    let second = format!("ray-autoscaler_1_{REGION}");
    assert_eq!(theirs["cpu"]["KeyName"], serde_json::json!(second));
    assert_eq!(moto.calls("CreateKeyPair"), 2);
    let (on_b, key) = ours("b").await;
    assert_eq!(key.map(|k| k.0), Some(second.clone()));
    assert_eq!(key_of(&on_b.raw, "cpu"), second);
    assert_eq!(moto.calls("CreateKeyPair"), 2, "rayscale found Ray's key");

    // Machine C, rayscale first: the third name, made there.
    let (on_c, _) = ours("c").await;
    assert_eq!(
        key_of(&on_c.raw, "cpu"),
        format!("ray-autoscaler_2_{REGION}")
    );
    assert_eq!(moto.calls("CreateKeyPair"), 3);

    // provider.key_pair.key_name names it; a type's own KeyName is kept.
    let named = ClusterConfig::from_yaml_str(
        &yaml(", key_pair: {key_name: mine}", "", ", KeyName: theirs"),
        "kp.yaml",
    )
    .unwrap();
    let (named, key) = configure_key_pair(
        &moto.client(),
        &named,
        REGION,
        Some(&home("a").join(".ssh")),
    )
    .await
    .unwrap();
    assert_eq!(key.map(|k| k.0).as_deref(), Some("mine"));
    assert_eq!(key_of(&named.raw, "head"), "mine");
    assert_eq!(key_of(&named.raw, "cpu"), "theirs");
    assert!(home("a").join(".ssh/mine.pem").exists());
    // With auth.ssh_private_key the user manages keys: nothing asked, nothing set.
    let described = moto.calls("DescribeKeyPairs");
    let own = ClusterConfig::from_yaml_str(
        &yaml("", ", ssh_private_key: ~/.ssh/own.pem", ""),
        "kp.yaml",
    )
    .unwrap();
    let (same, key) = configure_key_pair(&moto.client(), &own, REGION, None)
        .await
        .unwrap();
    assert!(key.is_none());
    assert_eq!(same.raw, own.raw);
    assert_eq!(moto.calls("DescribeKeyPairs"), described);
    let _ = std::fs::remove_dir_all(&base);
}

/// The hand-off to Ray's own commands on a cluster `rayscale up` launched: `ray exec`
/// finds rayscale's head by Ray's tags and SSHes in with the key pair `up` made (Ray's
/// bootstrap finds the same key under the same HOME). SSH and rsync are
/// `tests/fakes/ray_up/{ssh,rsync}`, which act on a directory standing for the head's
/// home. Ray's `rsync-up`, `rsync-down` and `submit` want a head tagged `up-to-date`
/// (Ray's node updater tags it so after setup; rayscale's loop on the head does): refused
/// before the tag, working after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_exec_rsync_and_submit_reach_the_head_rayscale_up_launched() {
    let moto = MotoEc2::start();
    moto.make_rays_iam_role();
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("rayscale-aws-exec-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let head_home = dir.join("head");
    std::fs::create_dir_all(&head_home).unwrap();
    std::fs::write(head_home.join("marker.txt"), "hello from the head\n").unwrap();
    // Ray's `submit` runs `python` in a login shell after `source ~/.bashrc`: the head
    // has one, this machine may not.
    let venv = std::path::PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    std::fs::write(
        head_home.join(".bashrc"),
        format!("export PATH={}:$PATH\n", venv.parent().unwrap().display()),
    )
    .unwrap();
    let path = dir.join("cluster.yaml");
    std::fs::write(
        &path,
        format!(
            "cluster_name: exec{pid}\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
             auth: {{ssh_user: ubuntu}}\nhead_node_type: head\nmax_workers: 2\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n  \
             cpu: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
        ),
    )
    .unwrap();
    let arg = path.display().to_string();
    let (ok, up_out) = moto.rayscale(&["up", &arg]);
    assert!(ok, "{up_out}");
    let ssh_log = dir.join("ssh.log");
    let marker = format!("no-such-head-{pid}");
    let fake_head = FakeSshHead {
        home: &head_home,
        path: "/usr/bin:/bin".into(),
        marker: &marker,
        ssh_log: &ssh_log,
    };
    let ray = |args: &[&str]| {
        let out = moto
            .ray_cli(moto.home(), &fake_head)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, out) = ray(&["exec", &arg, "cat ~/marker.txt"]);
    assert!(ok && out.contains("hello from the head"), "{out}");
    let key = moto
        .home()
        .join(format!(".ssh/ray-autoscaler_{REGION}.pem"));
    let ssh = std::fs::read_to_string(&ssh_log).unwrap_or_default();
    assert!(
        ssh.contains(&format!("-i {}", key.display())) && ssh.contains("ubuntu@"),
        "{ssh}"
    );
    // Ray's rsync-up, rsync-down and submit act only on a head tagged `up-to-date`: not
    // before the tag...
    let up = dir.join("up.txt");
    std::fs::write(&up, "up\n").unwrap();
    let up_arg = up.display().to_string();
    let (ok, out) = ray(&["rsync-up", &arg, &up_arg, "~/up.txt"]);
    assert!(!ok && out.contains("not found"), "{out}");
    // ... and after it. The head's own `rayscale run` makes this call once its GCS
    // answers (`rayscale_up_runs_a_ray_aws_cluster_on_moto_and_down_removes_it` in
    // aws_live checks that it does); this head has no Ray, so the test makes it.
    let cfg = ClusterConfig::from_yaml_str(&std::fs::read_to_string(&path).unwrap(), &arg).unwrap();
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    let head = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.is_head())
        .unwrap();
    // `up` gave the head Ray's instance profile (the one Ray made here).
    let described = moto
        .client()
        .describe_instances()
        .instance_ids(&head.cloud_instance_id)
        .send()
        .await
        .unwrap();
    let profile = described.reservations()[0].instances()[0]
        .iam_instance_profile()
        .and_then(|p| p.arn())
        .unwrap_or_default()
        .to_string();
    assert!(
        profile.ends_with("instance-profile/ray-autoscaler-v1"),
        "{profile}"
    );
    assert!(up_out.contains(&profile), "{up_out}");
    p.mark_head_up_to_date(&head.cloud_instance_id)
        .await
        .unwrap();
    let (ok, out) = ray(&["rsync-up", &arg, &up_arg, "~/up.txt"]);
    assert!(ok, "{out}");
    assert_eq!(
        std::fs::read_to_string(head_home.join("up.txt")).unwrap(),
        "up\n"
    );
    let down = dir.join("down.txt");
    let (ok, out) = ray(&[
        "rsync-down",
        &arg,
        "~/marker.txt",
        &down.display().to_string(),
    ]);
    assert!(ok, "{out}");
    assert_eq!(
        std::fs::read_to_string(&down).unwrap(),
        "hello from the head\n"
    );
    let script = dir.join("job.py");
    std::fs::write(&script, "print('submitted', 6 * 7)\n").unwrap();
    let (ok, out) = ray(&["submit", &arg, &script.display().to_string()]);
    assert!(ok && out.contains("submitted 42"), "{out}");
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The head's instance profile `rayscale up` finds or makes is the one `ray up` finds or
/// makes: Ray's names, Ray's trust policy and policies, found again rather than made twice,
/// and found by Ray's own `_configure_iam_role` (which then makes nothing and does not
/// wait); one Ray made is used as it is. Only the head's launch takes it, not the
/// workers'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heads_instance_profile_is_found_or_made_as_rays_bootstrap_does() {
    use rayscale_provider_aws::iam::{POLICIES, PROFILE, ROLE, configure_iam_role};
    use std::time::Duration;
    let dir = std::env::temp_dir().join(format!("rayscale-aws-iam-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = |head_extra: &str| {
        format!(
            "cluster_name: iamgold\nprovider: {{type: aws, region: {REGION}}}\n\
             head_node_type: head\nmax_workers: 2\n\
             available_node_types:\n  \
               head: {{resources: {{CPU: 0}}, max_workers: 2, node_config: {{InstanceType: m5.large, ImageId: {AMI}{head_extra}}}}}\n  \
               cpu: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
        )
    };
    let moto = MotoEc2::start();
    let iam = moto.iam_client();
    let cfg = ClusterConfig::from_yaml_str(&yaml(""), "t.yaml").unwrap();
    // rayscale first, on an account without them: it makes both.
    let (ours, arn) = configure_iam_role(&iam, &cfg, Duration::ZERO)
        .await
        .unwrap();
    let arn = arn.expect("the head gets Ray's profile");
    assert!(
        arn.ends_with(&format!(":instance-profile/{PROFILE}")),
        "{arn}"
    );
    assert_eq!(ours.head_node["IamInstanceProfile"]["Arn"], arn.as_str());
    assert_eq!(ours.raw, cfg.raw, "the YAML the head gets is unchanged");
    let profile = iam
        .get_instance_profile()
        .instance_profile_name(PROFILE)
        .send()
        .await
        .unwrap();
    let roles: Vec<&str> = profile
        .instance_profile()
        .unwrap()
        .roles()
        .iter()
        .map(|r| r.role_name())
        .collect();
    assert_eq!(roles, [ROLE]);
    let role = iam.get_role().role_name(ROLE).send().await.unwrap();
    let trust = role.role().unwrap().assume_role_policy_document().unwrap();
    let trust = percent_decode(trust);
    assert!(
        trust.contains("ec2.amazonaws.com") && trust.contains("sts:AssumeRole"),
        "{trust}"
    );
    let attached = iam
        .list_attached_role_policies()
        .role_name(ROLE)
        .send()
        .await
        .unwrap();
    let mut arns: Vec<&str> = attached
        .attached_policies()
        .iter()
        .filter_map(|p| p.policy_arn())
        .collect();
    arns.sort_unstable();
    assert_eq!(arns, POLICIES);
    // Run again: found, nothing made.
    let (again, arn2) = configure_iam_role(&iam, &cfg, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(arn2.as_deref(), Some(arn.as_str()));
    assert_eq!(again.head_node, ours.head_node);
    for call in [
        "CreateInstanceProfile",
        "CreateRole",
        "AddRoleToInstanceProfile",
    ] {
        assert_eq!(moto.calls(call), 1, "{call}");
    }
    assert_eq!(moto.calls("AttachRolePolicy"), 2);
    // Ray's own step finds rayscale's profile: the same ARN, nothing made, no wait.
    let path = dir.join("c.yaml");
    std::fs::write(&path, yaml("")).unwrap();
    let theirs = rays_up(&moto, &path, "iam", Some(&dir)).unwrap();
    assert_eq!(
        theirs["head_node"]["IamInstanceProfile"]["Arn"],
        arn.as_str()
    );
    assert!(theirs["seconds"].as_f64().unwrap() < 10.0, "{theirs}");
    assert_eq!(moto.calls("CreateInstanceProfile"), 1);
    assert_eq!(moto.calls("CreateRole"), 1);
    // A head type naming its own profile is left as it is.
    let own = ClusterConfig::from_yaml_str(
        &yaml(", IamInstanceProfile: {Name: my-profile}"),
        "own.yaml",
    )
    .unwrap();
    let (kept, none) = configure_iam_role(&iam, &own, Duration::ZERO)
        .await
        .unwrap();
    assert!(none.is_none() && kept.head_node.is_empty());
    // Only the head's launch takes it (rayscale launches no worker of the head's type).
    let provider = AwsProvider::new(moto.client(), &ours, None).unwrap();
    let req = |id: &str, t: &str| LaunchRequest {
        request_id: id.into(),
        node_type: t.into(),
        count: 1,
        launch_config_hash: String::new(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    };
    let head = provider
        .launch_head(&req("h-1", "head"))
        .await
        .unwrap()
        .instances[0]
        .cloud_instance_id
        .clone();
    let worker = provider.launch(&req("w-1", "cpu")).await.unwrap().instances[0]
        .cloud_instance_id
        .clone();
    let profile_of = |id: String| {
        let c = moto.client();
        async move {
            c.describe_instances()
                .instance_ids(id)
                .send()
                .await
                .unwrap()
                .reservations()[0]
                .instances()[0]
                .iam_instance_profile()
                .and_then(|p| p.arn())
                .map(str::to_string)
        }
    };
    assert_eq!(profile_of(head).await.as_deref(), Some(arn.as_str()));
    assert_eq!(profile_of(worker).await, None);

    // An account where Ray made them (as `ray up` makes them): used as they are.
    let moto2 = MotoEc2::start();
    moto2.make_rays_iam_role();
    let (_, arn) = configure_iam_role(&moto2.iam_client(), &cfg, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        arn.unwrap()
            .ends_with(&format!(":instance-profile/{PROFILE}"))
    );
    for call in [
        "CreateInstanceProfile",
        "CreateRole",
        "AddRoleToInstanceProfile",
    ] {
        assert_eq!(moto2.calls(call), 1, "{call}: only Ray's");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// IAM answers policy documents URL-encoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
