//! What `rayscale up` makes before the head, as Ray's `ray up` bootstrap makes it, on
//! moto's EC2 and IAM, each checked both ways against Ray's own bootstrap on the same
//! emulator (`scripts/ray_aws_up.py`): the subnets and security group, the key pair, and
//! the head's instance profile. The rest of `up` is in `aws_up.rs`.

#![allow(clippy::unwrap_used)]

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{MotoEc2, REGION};

/// A moto AMI (moto 5.2.5 ships it).
const AMI: &str = "ami-12c6146b";

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
    let theirs = moto.rays_up(&path, "bootstrap", Some(&dir)).unwrap();
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
    let theirs2 = moto.rays_up(&path2, "bootstrap", Some(&dir)).unwrap();
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
    let theirs = moto
        .rays_up(&yaml_file, "bootstrap", Some(&home("a")))
        .unwrap();
    assert_eq!(theirs["cpu"]["KeyName"], serde_json::json!(first));
    assert_eq!(moto.calls("CreateKeyPair"), 1, "Ray found rayscale's key");

    // Machine B has no private key for that name: Ray makes the next one there, and
    // rayscale on B finds Ray's.
    let theirs = moto
        .rays_up(&yaml_file, "bootstrap", Some(&home("b")))
        .unwrap();
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
    let theirs = moto.rays_up(&path, "iam", Some(&dir)).unwrap();
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

/// A CloudWatch role an interrupted `up` left with only some of Ray's policies (and its
/// profile without the role) gets the rest on the next `up`; a role with a policy of its
/// own is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_made_cloudwatch_role_gets_the_rest_of_rays_policies() {
    use rayscale_provider_aws::cloudwatch::{AGENT_POLICIES, MANAGED_POLICY, PROFILE, ROLE};
    use rayscale_provider_aws::iam::{POLICIES, assume_role_policy, configure_iam_role};
    use std::time::Duration;
    let moto = MotoEc2::start();
    let iam = moto.iam_client();
    let yaml = format!(
        "cluster_name: cwiam\nprovider: {{type: aws, region: {REGION}, cloudwatch: {{agent: {{config: a.json}}}}}}\n\
         head_node_type: head\nmax_workers: 0\n\
         available_node_types:\n  head: {{resources: {{CPU: 0}}, max_workers: 0, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
    );
    let cfg = ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap();
    // Ray's CloudWatch profile without a role, and the role.
    let half_made = |iam: &aws_sdk_iam::Client| {
        let iam = iam.clone();
        async move {
            iam.create_instance_profile()
                .instance_profile_name(PROFILE)
                .send()
                .await
                .unwrap();
            iam.create_role()
                .role_name(ROLE)
                .assume_role_policy_document(assume_role_policy())
                .send()
                .await
                .unwrap();
        }
    };
    // What an `up` that stopped after its first AttachRolePolicy leaves.
    half_made(&iam).await;
    iam.attach_role_policy()
        .role_name(ROLE)
        .policy_arn(POLICIES[0])
        .send()
        .await
        .unwrap();
    let (_, arn) = configure_iam_role(&iam, &cfg, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        arn.unwrap()
            .ends_with(&format!(":instance-profile/{PROFILE}"))
    );
    let attached = |iam: aws_sdk_iam::Client, role: &'static str| async move {
        let mut v: Vec<String> = iam
            .list_attached_role_policies()
            .role_name(role)
            .send()
            .await
            .unwrap()
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_arn().map(str::to_string))
            .collect();
        v.sort();
        v
    };
    let got = attached(iam.clone(), ROLE).await;
    assert_eq!(got.len(), 5, "{got:?}");
    for p in POLICIES.iter().chain(AGENT_POLICIES.iter()) {
        assert!(got.iter().any(|g| g == p), "{p} missing: {got:?}");
    }
    assert!(
        got.iter()
            .any(|g| g.ends_with(&format!(":policy/{MANAGED_POLICY}")))
    );
    // Each attached once: only the four missing were asked for.
    assert_eq!(moto.calls("AttachRolePolicy"), 1 + 4);

    // A role with a policy of its own keeps what it has.
    let moto = MotoEc2::start();
    let iam = moto.iam_client();
    half_made(&iam).await;
    let own = "arn:aws:iam::aws:policy/ReadOnlyAccess";
    iam.attach_role_policy()
        .role_name(ROLE)
        .policy_arn(own)
        .send()
        .await
        .unwrap();
    configure_iam_role(&iam, &cfg, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(attached(iam, ROLE).await, [own]);
}
