//! Ray's provider keys that reach beyond EC2 on `rayscale up` (a module of `aws_up`):
//! `provider.cloudwatch`'s agent config and `provider.aws_credentials`, each checked on
//! moto against what `ray up` does with it.

use super::*;

/// Ray's `provider.cloudwatch` section loads and its agent is acted on as `ray up` acts
/// on it: the agent's config (its `{cluster_name}` and `{region}` put in) lands in Ray's
/// SSM parameter, every node's boot has the agent fetch it, and the head's default
/// profile and role are Ray's `ray-autoscaler-cloudwatch-v1` with the policies Ray's
/// `CloudwatchHelper` gives them (run as the oracle on the same emulator), which Ray's
/// own IAM step then finds. The dashboard and alarm, not acted on, are named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_cloudwatch_agent_config_reaches_ssm_and_every_nodes_boot() {
    use rayscale_provider_aws::cloudwatch;
    let moto = MotoEc2::start();
    let pid = std::process::id();
    let cluster = format!("cw{pid}");
    let dir = std::env::temp_dir().join(format!("rayscale-aws-cw-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("cloudwatch")).unwrap();
    let agent = dir.join("cloudwatch/agent.json");
    std::fs::write(
        &agent,
        r#"{"agent": {"metrics_collection_interval": 60, "region": "{region}"},
            "logs": {"logs_collected": {"files": {"collect_list": [
              {"file_path": "/tmp/ray/session_*/logs/**.out",
               "log_group_name": "{cluster_name}-ray_logs_out",
               "log_stream_name": "{instance_id}"}]}}}}"#,
    )
    .unwrap();
    let path = dir.join("cluster.yaml");
    let yaml = format!(
        "cluster_name: {cluster}\n\
         provider:\n  type: aws\n  region: {REGION}\n  cache_stopped_nodes: false\n  \
           cloudwatch:\n    agent:\n      config: {agent}\n      retryer: {{max_attempts: 7, delay_seconds: 3}}\n    \
             dashboard: {{name: dash, config: cloudwatch/dashboard.json}}\n    \
             alarm: {{config: cloudwatch/alarm.json}}\n\
         head_node_type: head\nmax_workers: 2\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n  \
           cpu: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {{InstanceType: m5.large, ImageId: {AMI}, \
             IamInstanceProfile: {{Name: {profile}}}}}}}\n",
        agent = agent.display(),
        profile = cloudwatch::PROFILE,
    );
    std::fs::write(&path, &yaml).unwrap();
    let arg = path.display().to_string();
    let (ok, out) = moto.rayscale(&["up", &arg]);
    assert!(ok, "{out}");
    assert!(
        out.contains("provider.cloudwatch.dashboard, provider.cloudwatch.alarm: not acted on"),
        "{out}"
    );
    let param = cloudwatch::parameter_name("agent", &cluster);
    assert!(out.contains(&param), "{out}");
    // The parameter: the file with the cluster's values in, each node's id left to the
    // agent.
    let ssm = rayscale_provider_aws::client::ssm_for_endpoint(&moto.endpoint(), REGION).unwrap();
    let stored = ssm.get_parameter().name(&param).send().await.unwrap();
    let stored: serde_json::Value =
        serde_json::from_str(stored.parameter().unwrap().value().unwrap()).unwrap();
    assert_eq!(stored["agent"]["region"], REGION);
    let file = &stored["logs"]["logs_collected"]["files"]["collect_list"][0];
    assert_eq!(file["log_group_name"], format!("{cluster}-ray_logs_out"));
    assert_eq!(file["log_stream_name"], "{instance_id}");
    // The head: Ray's CloudWatch profile, and the agent in its boot.
    let cfg = ClusterConfig::from_yaml_str(&yaml, &arg).unwrap();
    let p = AwsProvider::new(moto.client(), &cfg, Some("10.0.0.9")).unwrap();
    let head = p.list().await.unwrap();
    assert_eq!(head.len(), 1, "{head:?}");
    let head = &head[0].cloud_instance_id;
    let described = moto
        .client()
        .describe_instances()
        .instance_ids(head)
        .send()
        .await
        .unwrap();
    let arn = described.reservations()[0].instances()[0]
        .iam_instance_profile()
        .and_then(|p| p.arn())
        .unwrap()
        .to_string();
    assert!(
        arn.ends_with(&format!(":instance-profile/{}", cloudwatch::PROFILE)),
        "{arn}"
    );
    let fetch = format!("fetch-config -m ec2 -s -c ssm:'{param}'");
    let user_data = |id: String| {
        let c = moto.client();
        async move {
            let a = c
                .describe_instance_attribute()
                .instance_id(id)
                .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
                .send()
                .await
                .unwrap();
            let b64 = a.user_data().and_then(|u| u.value()).unwrap_or("");
            use base64::Engine as _;
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
            )
            .unwrap()
        }
    };
    let boot = user_data(head.clone()).await;
    assert!(boot.contains(&fetch), "{boot}");
    assert!(
        boot.contains("-ge 7 ]") && boot.contains("sleep 3"),
        "{boot}"
    );
    // A worker's boot too.
    let worker = p
        .launch(&LaunchRequest {
            request_id: "lr-cw".into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: cfg.node_type("cpu").unwrap().launch_config_hash.clone(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
        .await
        .unwrap()
        .instances[0]
        .cloud_instance_id
        .clone();
    assert!(user_data(worker).await.contains(&fetch));
    // The role's policies are the ones Ray's CloudwatchHelper gives a role it makes.
    let iam = moto.iam_client();
    let attached = iam
        .list_attached_role_policies()
        .role_name(cloudwatch::ROLE)
        .send()
        .await
        .unwrap();
    let mut ours: Vec<String> = attached
        .attached_policies()
        .iter()
        .filter_map(|p| p.policy_arn().map(str::to_string))
        .collect();
    ours.sort();
    let rays = moto.rays_up(&path, "cloudwatch_policies", None);
    // Ray makes `CloudwatchManagedPolicies` unconditionally, so on this account (where
    // rayscale made it) it fails: its answer is the refusal, and the names are checked
    // on a fresh emulator.
    assert!(
        rays.as_ref()
            .is_err_and(|e| e.contains("EntityAlreadyExists")),
        "{rays:?}"
    );
    let fresh = MotoEc2::start();
    let rays = fresh.rays_up(&path, "cloudwatch_policies", None).unwrap();
    let mut theirs: Vec<String> = rays["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    theirs.sort();
    assert_eq!(ours, theirs);
    assert_eq!(ours.len(), 5, "{ours:?}");
    assert_eq!(rays["profile"], cloudwatch::PROFILE);
    assert_eq!(rays["role"], cloudwatch::ROLE);
    // Ray's own IAM step finds the profile `up` made: nothing made, no wait.
    let found = moto.rays_up(&path, "iam", Some(&dir)).unwrap();
    assert_eq!(
        found["head_node"]["IamInstanceProfile"]["Arn"],
        arn.as_str()
    );
    assert!(found["seconds"].as_f64().unwrap() < 10.0, "{found}");
    // Run again with the agent's config changed: the parameter is overwritten, the
    // profile found.
    std::fs::write(&agent, r#"{"agent": {"metrics_collection_interval": 10}}"#).unwrap();
    let (ok, out) = moto.rayscale(&["up", &arg]);
    assert!(ok, "{out}");
    let stored = ssm.get_parameter().name(&param).send().await.unwrap();
    assert_eq!(
        stored.parameter().unwrap().value(),
        Some(r#"{"agent":{"metrics_collection_interval":10}}"#)
    );
    assert_eq!(moto.calls("CreateInstanceProfile"), 1);
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `provider.aws_credentials` as Ray reads it: the keys every call of `up` and `down`
/// takes, in place of the standard chain (here there is none: `up` without them fails
/// on credentials), and which never reach the head's user data (its copy of the config
/// leaves them out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_aws_credentials_are_the_launchers_and_stay_off_the_head() {
    use base64::Engine as _;
    let moto = MotoEc2::start();
    moto.make_rays_iam_role();
    let pid = std::process::id();
    let cluster = format!("keys{pid}");
    let dir = std::env::temp_dir().join(format!("rayscale-aws-keys-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = |credentials: &str| {
        format!(
            "cluster_name: {cluster}\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false{credentials}}}\n\
             head_node_type: head\nmax_workers: 1\n\
             available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
        )
    };
    // No credentials anywhere: the standard chain finds none.
    let no_chain = [
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
        ("AWS_SESSION_TOKEN", ""),
    ];
    let bare = dir.join("bare.yaml");
    std::fs::write(&bare, yaml("")).unwrap();
    let (ok, out) = moto.rayscale_env(&["up", &bare.display().to_string()], &no_chain);
    assert!(!ok && out.to_lowercase().contains("credentials"), "{out}");
    assert_eq!(moto.calls("RunInstances"), 0);
    // The YAML's: `up` works with them.
    // Shaped as real keys are, so that the check that refuses secrets in user data would
    // refuse them if they went there.
    let key_id = format!("AKIA{}", "YAMLKEYEXAMPLE01");
    let secret = format!("s3cret/{}", "K".repeat(33));
    let path = dir.join("cluster.yaml");
    std::fs::write(
        &path,
        yaml(&format!(
            ", aws_credentials: {{aws_access_key_id: {key_id}, aws_secret_access_key: '{secret}'}}"
        )),
    )
    .unwrap();
    let arg = path.display().to_string();
    let (ok, out) = moto.rayscale_env(&["up", &arg], &no_chain);
    assert!(ok, "{out}");
    assert!(
        out.contains("the head's copy of the config leaves them out"),
        "{out}"
    );
    let listed = moto.client().describe_instances().send().await.unwrap();
    let ids: Vec<String> = listed
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let a = moto
        .client()
        .describe_instance_attribute()
        .instance_id(&ids[0])
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let boot = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(a.user_data().and_then(|u| u.value()).unwrap_or(""))
            .unwrap(),
    )
    .unwrap();
    assert!(boot.contains("ray_bootstrap_config.yaml"), "{boot}");
    assert!(!boot.contains(&secret) && !boot.contains(&key_id), "{boot}");
    // The same key id anywhere else in the YAML is still refused.
    let leaky = dir.join("leaky.yaml");
    std::fs::write(
        &leaky,
        yaml("").replace(
            "max_workers: 1\n",
            &format!("max_workers: 1\nsetup_commands: ['export K={key_id}']\n"),
        ),
    )
    .unwrap();
    let (ok, out) = moto.rayscale(&["up", &leaky.display().to_string()]);
    assert!(!ok && out.contains("an AWS access key id"), "{out}");
    assert_eq!(moto.calls("RunInstances"), 1, "only the first head");
    let (ok, out) = moto.rayscale_env(&["down", &arg, "-y"], &no_chain);
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
