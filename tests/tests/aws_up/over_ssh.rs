//! The head over SSH (a module of `aws_up`): Ray's own CLI (`exec`, `rsync`, `submit`,
//! `ray up`) on a head `rayscale up` launched and `rayscale up` on a head `ray up`
//! launched, and `up` pushing an edited YAML to its running head. SSH and rsync are
//! `tests/fakes/ray_up/{ssh,rsync}`, which act on a directory standing for the head's home.

use super::*;

/// A fresh directory `rayscale-aws-<name>-<pid>` with a cluster YAML for Ray's CLI on a
/// fake head (no setup commands to run; `extra` lines added) and the head's home: the
/// directory, the YAML's path and the home.
fn ray_cli_cluster(
    name: &str,
    extra: &str,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("rayscale-aws-{name}-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let head_home = dir.join("head");
    std::fs::create_dir_all(&head_home).unwrap();
    let path = dir.join("cluster.yaml");
    std::fs::write(
        &path,
        format!(
            "cluster_name: {name}{pid}\nprovider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
             auth: {{ssh_user: ubuntu}}\nhead_node_type: head\nmax_workers: 2\n\
             setup_commands: []\nhead_setup_commands: []\n{extra}\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n  \
             cpu: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {{InstanceType: m5.large, ImageId: {AMI}}}}}\n"
        ),
    )
    .unwrap();
    (dir, path, head_home)
}

/// The hand-off to Ray's own commands on a cluster `rayscale up` launched: `ray exec`
/// finds rayscale's head by Ray's tags and SSHes in with the key pair `up` made (Ray's
/// bootstrap finds the same key under the same HOME). SSH and rsync are
/// `tests/fakes/ray_up/{ssh,rsync}`, which act on a directory standing for the head's
/// home. Ray's `rsync-up`, `rsync-down` and `submit` want a head tagged `up-to-date`
/// (Ray's node updater tags it so after setup; rayscale's loop on the head does): refused
/// before the tag, working after it. Last, `ray up` over the cluster keeps rayscale's head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_exec_rsync_and_submit_reach_the_head_rayscale_up_launched() {
    let moto = MotoEc2::start();
    moto.make_rays_iam_role();
    let pid = std::process::id();
    let (dir, path, head_home) = ray_cli_cluster("exec", "");
    std::fs::write(head_home.join("marker.txt"), "hello from the head\n").unwrap();
    // Ray's `submit` runs `python` in a login shell after `source ~/.bashrc`: the head
    // has one, this machine may not.
    let venv = std::path::PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    std::fs::write(
        head_home.join(".bashrc"),
        format!("export PATH={}:$PATH\n", venv.parent().unwrap().display()),
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
    // `ray up` run over it finds the head up to date (its `ray-launch-config` tag is the
    // hash Ray computes of the same YAML after its own bootstrap): no relaunch, the same
    // head runs on (`--no-restart`: the fake head has no Ray to restart).
    let (ok, out) = ray(&["up", &arg, "-y", "--no-restart", "--no-config-cache"]);
    assert!(ok, "{out}");
    assert!(
        !out.contains("out-of-date") && !out.contains("Relaunching"),
        "ray up took the head rayscale up launched for an outdated one: {out}"
    );
    let heads: Vec<String> = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.is_head())
        .map(|c| c.cloud_instance_id)
        .collect();
    assert_eq!(heads, vec![head.cloud_instance_id.clone()]);
    // And `rayscale up` run again agrees: the head is neither relaunched nor stale.
    let (ok, again) = moto.rayscale(&["up", &arg]);
    assert!(
        ok && !again.contains("runs as it was launched") && !again.contains("pushed"),
        "{again}"
    );
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The other way round: a head Ray's own `ray up` launched (Ray's bootstrap, Ray's
/// `ray-launch-config` tag) is current for `rayscale up` on the same YAML: found, not
/// called outdated, and kept even with `-y` (which relaunches only an outdated head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayscale_up_keeps_the_head_rays_ray_up_launched() {
    let moto = MotoEc2::start();
    moto.make_rays_iam_role();
    let pid = std::process::id();
    // No start commands: the fake head has no Ray to start.
    let (dir, path, head_home) = ray_cli_cluster("rayup", "head_start_ray_commands: []\n");
    let arg = path.display().to_string();
    let ssh_log = dir.join("ssh.log");
    let marker = format!("no-such-head-{pid}");
    let fake_head = FakeSshHead {
        home: &head_home,
        path: "/usr/bin:/bin".into(),
        marker: &marker,
        ssh_log: &ssh_log,
    };
    let out = moto
        .ray_cli(moto.home(), &fake_head)
        .args(["up", &arg, "-y", "--no-restart", "--no-config-cache"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let cfg = ClusterConfig::from_yaml_str(&std::fs::read_to_string(&path).unwrap(), &arg).unwrap();
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    let heads = |all: Vec<rayscale_core::provider::CloudInstance>| -> Vec<String> {
        all.into_iter()
            .filter(|i| i.is_head() && i.state != CloudInstanceState::Stopping)
            .map(|i| i.cloud_instance_id)
            .collect()
    };
    let rays_head = heads(p.list().await.unwrap());
    assert_eq!(rays_head.len(), 1, "{rays_head:?}");
    assert_eq!(moto.calls("RunInstances"), 1);
    let (ok, out) = moto.rayscale(&["up", &arg, "-y"]);
    assert!(
        ok && out.contains("already running")
            && !out.contains("runs as it was launched")
            && !out.contains("relaunched")
            && out.contains("carries no rayscale-config tag"),
        "{out}"
    );
    assert_eq!(heads(p.list().await.unwrap()), rays_head);
    assert_eq!(moto.calls("RunInstances"), 1, "nothing launched");
    assert_eq!(moto.calls("TerminateInstances"), 0, "nothing terminated");
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// As `ray up` rewrites a running head's `~/ray_bootstrap_config.yaml`, `rayscale up`
/// pushes a changed YAML to the head it finds (over SSH: `tests/fakes/ray_up/{ssh,rsync}`
/// on a directory standing for the head's home) and tags the head with the new config's
/// digest; run again on the same YAML, it reaches for nothing. A YAML without the
/// `file_mounts` the head was launched with releases a head still waiting for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_pushes_a_changed_config_to_the_running_head_and_releases_its_mounts() {
    let moto = MotoEc2::start();
    let pid = std::process::id();
    let local = std::env::temp_dir().join(format!("rayscale-aws-push-local-{pid}"));
    std::fs::create_dir_all(local.join("code")).unwrap();
    std::fs::write(local.join("code/a.py"), "print('a')\n").unwrap();
    let mounts = format!(
        "file_mounts: {{'~/code': '{}'}}\n",
        local.join("code").display()
    );
    let (dir, path, head_home) = ray_cli_cluster("push", &mounts);
    let arg = path.display().to_string();
    let ssh_log = dir.join("ssh.log");
    let fake_env = FakeSshHead {
        home: &head_home,
        path: "/usr/bin:/bin".into(),
        marker: "no-such-head",
        ssh_log: &ssh_log,
    }
    .env(&std::env::var("PATH").unwrap_or_default());
    let env: Vec<(&str, &str)> = fake_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let up = |yaml: &std::path::Path| moto.rayscale_env(&["up", &yaml.display().to_string()], &env);
    let cfg = ClusterConfig::from_yaml_str(&std::fs::read_to_string(&path).unwrap(), &arg).unwrap();
    let p = AwsProvider::new(moto.client(), &cfg, None).unwrap();
    let head = || async {
        p.list()
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.is_head())
            .expect("a head")
    };
    let digest = |h: &rayscale_core::provider::CloudInstance| {
        h.labels
            .get(rayscale_core::provider::tags::RAYSCALE_CONFIG)
            .cloned()
            .unwrap_or_default()
    };
    let calls = || {
        std::fs::read_to_string(&ssh_log)
            .unwrap_or_default()
            .lines()
            .count()
    };

    // Launched: the head carries the digest of the config its boot writes; the mounts
    // were copied, and the mark its boot waits for left.
    let (ok, out) = up(&path);
    assert!(ok && out.contains("copied 1 file mounts"), "{out}");
    let launched = head().await;
    let first = digest(&launched);
    assert_eq!(first.len(), 52, "{:?}", launched.labels);
    let mark = head_home.join(".rayscale/file-mounts.copied");
    assert!(mark.exists() && head_home.join("code/a.py").exists());
    assert!(
        !head_home.join("ray_bootstrap_config.yaml").exists(),
        "nothing pushed"
    );
    // As if that copy had failed: the head waits for its mounts.
    std::fs::remove_file(&mark).unwrap();

    // Edited (another max_workers, the mounts dropped): pushed to the head, as `ray up`
    // rewrites it, and the head released.
    let edited = dir.join("edited.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &edited,
        text.replace(&mounts, "")
            .replace("max_workers: 2\n", "max_workers: 3\n"),
    )
    .unwrap();
    let (ok, out) = up(&edited);
    assert!(
        ok && out.contains("already running")
            && out.contains("pushed this YAML's cluster config to the head")
            && !out.contains("copied"),
        "{out}"
    );
    let pushed = std::fs::read_to_string(head_home.join("ray_bootstrap_config.yaml")).unwrap();
    let back = ClusterConfig::from_yaml_str(&pushed, "pushed").unwrap();
    assert_eq!(back.max_workers, Some(3), "{pushed}");
    assert!(back.raw.get("file_mounts").is_none(), "{pushed}");
    assert_eq!(
        std::fs::read_to_string(head_home.join(".rayscale/config.pushed")).unwrap(),
        launched.cloud_instance_id
    );
    assert!(mark.exists(), "the head waiting for its mounts goes on");
    let second = digest(&head().await);
    assert!(second.len() == 52 && second != first, "{first} {second}");

    // Again on the same YAML: the head runs it; no SSH at all.
    let before = calls();
    let (ok, out) = up(&edited);
    assert!(ok && !out.contains("pushed"), "{out}");
    assert_eq!(calls(), before, "up reached for the head");
    assert_eq!(digest(&head().await), second);
    assert_eq!(moto.calls("RunInstances"), 1, "one head, launched once");
    assert_eq!(moto.calls("TerminateInstances"), 0);
    let (ok, out) = moto.rayscale(&["down", &arg, "-y"]);
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&local);
}
