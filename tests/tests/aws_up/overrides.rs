//! Ray's command-line overrides of the YAML (`ray up -n NAME --max-workers N`, `ray down
//! -n`, `ray get-head-ip -n`) and `ray up`'s other flags, on moto, with Ray's own
//! `get-head-ip -n` as the oracle.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_overrides_name_the_cluster_and_the_refused_flags_make_nothing() {
    let moto = MotoEc2::start();
    let (yaml_name, name) = (
        format!("ovy{}", std::process::id()),
        format!("ovn{}", std::process::id()),
    );
    let (dir, path, yaml) = small_cluster("ov", &yaml_name, "");
    let arg = path.display().to_string();
    let provider_of = |cluster: &str| {
        let cfg = ClusterConfig::from_yaml_str(&yaml.replace(&yaml_name, cluster), &arg).unwrap();
        AwsProvider::new(moto.client(), &cfg, None).unwrap()
    };

    // What rayscale cannot honour is refused, naming the flag, before anything is made.
    for (flag, why) in [
        ("--restart-only", "never restarts Ray on a running head"),
        ("--use-normal-shells", "not over SSH"),
        ("--disable-usage-stats", "to the `ray start` lines"),
    ] {
        let (ok, out) = moto.rayscale(&["up", &arg, flag]);
        assert!(!ok && out.contains(flag) && out.contains(why), "{out}");
    }
    assert_eq!(moto.calls("RunInstances"), 0);

    // `-n` and `--max-workers` apply as Ray applies them; the flags that change nothing
    // here are taken.
    let up = [
        "up",
        &arg,
        "-n",
        &name,
        "--max-workers",
        "3",
        "--no-config-cache",
        "--no-restart",
        "--redirect-command-output",
        "--log-style",
        "record",
        "-v",
    ];
    let (ok, out) = moto.rayscale(&up);
    assert!(
        ok && out.contains(&format!("cluster {name}: head instance"))
            && out.contains(&format!(
                "`rayscale up {arg} --max-workers 3 -n {name} --wait`"
            ))
            && out.contains(&format!("Stop it: rayscale down {arg} -n {name}\n")),
        "{out}"
    );
    let heads = provider_of(&name).list().await.unwrap();
    assert_eq!(heads.iter().filter(|i| i.is_head()).count(), 1, "{heads:?}");
    assert!(provider_of(&yaml_name).list().await.unwrap().is_empty());
    // The head's config has the overrides: the same command finds it current (no push,
    // so no SSH), and the YAML's own max_workers differs from it (a push, which the
    // tests' loopback guard refuses: said, non-zero).
    let (ok, out) = moto.rayscale(&up);
    assert!(
        ok && out.contains("already running") && !out.contains("pushed"),
        "{out}"
    );
    let (ok, out) = moto.rayscale_env(
        &["up", &arg, "-n", &name],
        &[("AUTOSCALER_NODE_START_WAIT_S", "0")],
    );
    assert!(
        !ok && out.contains("the head keeps its config (this one was not pushed)"),
        "{out}"
    );
    assert_eq!(moto.calls("RunInstances"), 1, "one head, launched once");

    // `get-head-ip -n` finds it, as Ray's own does; without `-n`, the YAML's cluster has
    // no head.
    let head_id = heads.iter().find(|i| i.is_head()).unwrap();
    provider_of(&name)
        .mark_head_up_to_date(&head_id.cloud_instance_id)
        .await
        .unwrap();
    let (ok, ours) = moto.rayscale(&["get-head-ip", &arg, "-n", &name]);
    assert!(ok, "{ours}");
    let ssh_log = dir.join("ssh.log");
    let no_ssh = FakeSshHead {
        home: &dir,
        path: "/usr/bin:/bin".into(),
        marker: "no-head",
        ssh_log: &ssh_log,
    };
    let rays = moto
        .ray_cli(moto.home(), &no_ssh)
        .args(["get-head-ip", &arg, "-n", &name])
        .output()
        .unwrap();
    assert_eq!(ip_lines(&ours).len(), 1, "{ours}");
    assert_eq!(
        ip_lines(&ours),
        ip_lines(&String::from_utf8_lossy(&rays.stdout))
    );
    let (ok, out) = moto.rayscale(&["get-head-ip", &arg]);
    assert!(!ok && out.contains("has no running head"), "{out}");

    // `down -n` removes it.
    let (ok, out) = moto.rayscale(&["down", &arg, "-n", &name, "-y", "--log-color", "false"]);
    assert!(
        ok && out.contains(&format!("cluster {name} is down")),
        "{out}"
    );
    assert!(provider_of(&name).list().await.unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
