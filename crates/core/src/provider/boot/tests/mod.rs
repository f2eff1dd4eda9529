//! The boot scripts' tests: what they say, and that bash runs them.

use super::*;

mod docker;
mod install;
mod mounts;

/// A cluster whose SSH user exists on no machine: the scripts these tests run with bash
/// run as the test's own user (on a machine with an `ubuntu` user, `ubuntu` would make
/// them `sudo -u ubuntu`, with another HOME and without the test's environment).
fn cfg(extra: &str) -> ClusterConfig {
    let yaml = format!(
        "cluster_name: demo\nprovider: {{type: aws, region: us-west-2}}\nhead_node_type: h\n\
         auth: {{ssh_user: rayscale-no-such-user}}\n{extra}\
         available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n  \
         w: {{resources: {{CPU: 2, GPU: 1}}, labels: {{zone: a}}, node_config: {{}}}}\n"
    );
    ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn target() -> BootTarget<'static> {
    BootTarget {
        node_type: "w",
        head_ip: "10.0.0.1",
        instance_id_command: "echo i-123",
        per_boot: false,
        notices: None,
        host_index_command: None,
    }
}

#[test]
fn ray_keys_in_ray_order_with_ray_env() {
    let c = cfg(
        "initialization_commands: [echo init]\nsetup_commands: [echo common]\n\
         worker_setup_commands: [echo worker]\nworker_start_ray_commands: [ray stop, 'ray start --address=$RAY_HEAD_IP:6379']\n",
    );
    let s = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
    let at = |needle: &str| {
        s.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing:\n{s}"))
    };
    assert!(at("echo init") < at("echo common"));
    assert!(at("echo common") < at("echo worker"));
    assert!(at("echo worker") < at("ray start --address=$RAY_HEAD_IP:6379"));
    assert!(s.contains("export RAY_HEAD_IP='10.0.0.1'"));
    assert!(s.contains("export RAY_NODE_TYPE_NAME='w'"));
    assert!(
        s.contains(r#"export RAY_OVERRIDE_RESOURCES='{"CPU":2,"GPU":1}'"#),
        "{s}"
    );
    assert!(
        s.contains(r#"export RAY_OVERRIDE_LABELS='{"zone":"a"}'"#),
        "{s}"
    );
    assert!(s.contains("RAY_CLOUD_INSTANCE_ID=\"$(echo i-123)\""));
    assert!(s.contains("SSH_USER='rayscale-no-such-user'"));
    // A stand-in machine's override (the boot simulator's) comes after it.
    assert!(
        s.find("SSH_USER='rayscale-no-such-user'") < s.find("${RAYSCALE_SSH_USER+set}"),
        "{s}"
    );
    assert!(!s.contains("docker"), "no docker block, no docker");
}

#[test]
fn defaults_overrides_and_docker() {
    let c = cfg("worker_setup_commands: [echo cluster-wide]\n\
         docker: {image: 'rayproject/ray:2.60.0', container_name: rc, run_options: [--ulimit nofile=65536:65536]}\n");
    let s = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.contains(DEFAULT_WORKER_START[1]), "Ray's default start");
    assert!(
        s.contains("\"$DOCKER\" pull 'rayproject/ray:2.60.0'"),
        "{s}"
    );
    assert!(s.contains(
        "--ulimit nofile=65536:65536 $DOCKER_DETECTED --net=host 'rayproject/ray:2.60.0' bash"
    ));
    assert!(s.contains("\"$DOCKER\" exec -i \"$CONTAINER\""));
    // A node type's own commands replace the cluster's.
    let c2 = ClusterConfig::from_yaml_str(
        "cluster_name: d\nprovider: {type: aws}\nhead_node_type: h\n\
         worker_setup_commands: [echo cluster-wide]\n\
         available_node_types:\n  h: {resources: {}, node_config: {}}\n  \
         w: {resources: {}, node_config: {}, worker_setup_commands: [echo mine]}\n",
        "t.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s2 = render_worker(&c2, &target()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        s2.contains("echo mine") && !s2.contains("echo cluster-wide"),
        "{s2}"
    );
}

#[test]
fn bad_commands_name_their_path() {
    // Ray's schema refuses a command that is not a string when the config loads;
    // the renderer names the path too, for a value built another way.
    let e = commands(&serde_json::json!(["echo ok", 3]), "setup_commands")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("setup_commands[1]"), "{e}");
    let c = cfg("");
    let e = render_worker(
        &c,
        &BootTarget {
            node_type: "nope",
            ..target()
        },
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn the_script_runs() {
    // The rendered script, run by bash with a stand-in for `ray`: every step runs,
    // in order, with the environment.
    let dir = std::env::temp_dir().join(format!("rayscale-boot-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = cfg(
        "initialization_commands: ['echo init >> $RAYSCALE_TRACE']\n\
         setup_commands: ['echo setup $RAY_NODE_TYPE_NAME >> $RAYSCALE_TRACE']\n\
         worker_start_ray_commands: ['echo start $RAY_CLOUD_INSTANCE_ID $RAY_HEAD_IP >> $RAYSCALE_TRACE']\n",
    );
    let s = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
    let (ok, got, log) = run_traced(&s, &dir);
    assert!(ok, "{log}");
    assert_eq!(got, "init\nsetup w\nstart i-123 10.0.0.1\n", "{log}");
}

/// Runs script `s` with bash, its boot directory `dir` (removed after) and
/// `RAYSCALE_TRACE` a file there: whether it succeeded, the trace, and the boot log.
fn run_traced(s: &str, dir: &std::path::Path) -> (bool, String, String) {
    let trace = dir.join("trace");
    let out = std::process::Command::new("bash")
        .env("RAYSCALE_USER_WAIT_S", "0")
        .arg("-c")
        .arg(s)
        .env("RAYSCALE_BOOT_DIR", dir)
        .env("RAYSCALE_TRACE", &trace)
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let log = std::fs::read_to_string(dir.join("boot.log")).unwrap_or_default();
    let got = std::fs::read_to_string(&trace).unwrap_or_default();
    let _ = std::fs::remove_dir_all(dir);
    (out.status.success(), got, log)
}

#[test]
fn each_host_of_a_multi_host_type_starts_ray_and_only_the_first_keeps_its_own_resources() {
    let mut c =
        cfg("worker_start_ray_commands: ['echo \"$RAY_OVERRIDE_RESOURCES\" >> $RAYSCALE_TRACE']\n");
    let w = c.node_types.iter_mut().find(|t| t.name == "w").expect("w");
    w.resources = crate::model::resources::ResourceMap::from_f64_pairs([
        ("TPU", 4.0),
        ("TPU-v4-16-head", 1.0),
    ]);
    w.hosts = Some(crate::config::MultiHost {
        count: 2,
        first_host_only: vec!["TPU-v4-16-head".to_string()],
    });
    // A cloud that cannot tell hosts apart gets no script for it.
    let e = render_worker(&c, &target())
        .expect_err("refused")
        .to_string();
    assert!(e.starts_with("available_node_types.w:"), "{e}");
    let run = |index: &str| {
        let dir = std::env::temp_dir().join(format!(
            "rayscale-boot-hosts-{}-{}",
            std::process::id(),
            index.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let cmd = format!("echo {index}");
        let t = BootTarget {
            host_index_command: Some(&cmd),
            ..target()
        };
        let s = render_worker(&c, &t).unwrap_or_else(|e| panic!("{e}"));
        run_traced(&s, &dir)
    };
    let (ok, got, log) = run("0");
    assert!(ok, "{log}");
    assert_eq!(got, "{\"TPU\":4,\"TPU-v4-16-head\":1}\n", "{log}");
    let (ok, got, log) = run("1");
    assert!(ok, "{log}");
    assert_eq!(got, "{\"TPU\":4}\n", "{log}");
    // No index (the metadata service answered garbage): the boot stops before Ray.
    let (ok, got, log) = run("x1x");
    assert!(!ok && got.is_empty(), "{log}");
    assert!(log.contains("no host index"), "{log}");
}

fn wait_for(path: &std::path::Path, needle: &str) -> String {
    for _ in 0..100 {
        let got = std::fs::read_to_string(path).unwrap_or_default();
        if got.contains(needle) {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn the_head_script_starts_rays_head_without_its_monitor_and_rayscale_beside_it() {
    let dir = std::env::temp_dir().join(format!("rayscale-head-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let c = cfg("setup_commands: ['echo setup >> $RAYSCALE_TRACE']\n\
         head_setup_commands: ['echo head-setup >> $RAYSCALE_TRACE']\n\
         worker_setup_commands: ['echo worker-setup >> $RAYSCALE_TRACE']\n\
         head_start_ray_commands: ['echo v2=$RAY_enable_autoscaler_v2 ray start --head --port=7000 >> $RAYSCALE_TRACE']\n");
    let s = render_head(
        &c,
        &HeadBootTarget {
            node_type: "h",
            instance_id_command: "echo i-head",
            private_ip_command: "echo 10.9.8.7",
            per_boot: false,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let trace = dir.join("trace");
    let stub = dir.join("rayscale-stub");
    std::fs::write(
        &stub,
        "#!/bin/sh\necho \"rayscale $*\" >> \"$RAYSCALE_TRACE\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::process::Command::new("chmod")
        .arg("755")
        .arg(&stub)
        .status();
    let out = std::process::Command::new("bash")
        .env("RAYSCALE_USER_WAIT_S", "0")
        .arg("-c")
        .arg(&s)
        .env("RAYSCALE_BOOT_DIR", dir.join("boot"))
        .env("RAYSCALE_TRACE", &trace)
        .env("RAYSCALE_BIN", &stub)
        .env("HOME", &dir)
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let log = std::fs::read_to_string(dir.join("boot/boot.log")).unwrap_or_default();
    assert!(out.status.success(), "{log}");
    let got = wait_for(&trace, "rayscale run");
    let home = dir.display();
    assert_eq!(
        got,
        format!(
            "setup\nhead-setup\nv2=1 ray start --head --no-monitor --port=7000\n\
             rayscale run --config {home}/ray_bootstrap_config.yaml --gcs 127.0.0.1:7000 \
             --head-ip 10.9.8.7 --autostop-head\n"
        ),
        "{log}"
    );
    let written =
        std::fs::read_to_string(dir.join("ray_bootstrap_config.yaml")).unwrap_or_default();
    let back =
        ClusterConfig::from_yaml_str(&written, "bootstrap").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        back.raw, c.raw,
        "the head reads the cluster YAML it was given"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The credentials given to the machine running `up` never travel in the head's boot
/// script (user data or metadata the cloud shows); the rest of the provider does.
#[test]
fn local_credentials_stay_off_the_heads_boot_script() {
    let t = HeadBootTarget {
        node_type: "h",
        instance_id_command: "echo i",
        private_ip_command: "echo 10.0.0.2",
        per_boot: true,
    };
    for provider in [
        "{type: gcp, project_id: p-1, availability_zone: z-1, gcp_credentials: {type: credentials_token, credentials: s3cret-token}}",
        "{type: aws, region: r-1, aws_credentials: {aws_access_key_id: AKIAs3cret, aws_secret_access_key: s3cret}}",
    ] {
        let yaml = format!(
            "cluster_name: demo\nprovider: {provider}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
        );
        let c = ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
        let s = render_head(&c, &t).unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.contains("s3cret"), "{provider}:\n{s}");
        assert!(!s.contains("_credentials"), "{provider}:\n{s}");
        assert!(s.contains("-1"), "the rest of the provider travels:\n{s}");
    }
}

#[test]
fn head_defaults_port_and_role_checks() {
    let c = cfg("");
    let t = HeadBootTarget {
        node_type: "h",
        instance_id_command: "echo i",
        private_ip_command: "echo 10.0.0.2",
        per_boot: true,
    };
    let s = render_head(&c, &t).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        s.contains("ray start --head --no-monitor --port=6379 --object-manager-port=8076"),
        "Ray's default head start, without Ray's monitor:\n{s}"
    );
    assert!(s.contains("--gcs 127.0.0.1:6379"));
    assert_eq!(
        head_gcs_port(&["ray start --head --port 7001 --block".into()]).ok(),
        Some(7001)
    );
    assert_eq!(
        head_gcs_port(&["ray start --address=x:1".into()]).ok(),
        Some(6379)
    );
    let e = head_gcs_port(&["ray start --head --port=x".into()])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("head_start_ray_commands"), "{e}");
    assert_eq!(
        without_monitor("ray start --head --no-monitor"),
        "ray start --head --no-monitor"
    );
    assert_eq!(without_monitor("ray stop"), "ray stop");
    // Roles are not mixed up.
    assert!(
        render_worker(
            &c,
            &BootTarget {
                node_type: "h",
                ..target()
            }
        )
        .is_err()
    );
    assert!(
        render_head(
            &c,
            &HeadBootTarget {
                node_type: "w",
                ..t
            }
        )
        .is_err()
    );
}

#[test]
fn a_per_boot_script_installs_itself_once() {
    let dir = std::env::temp_dir().join(format!("rayscale-perboot-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let c = cfg("worker_start_ray_commands: ['echo start >> $RAYSCALE_TRACE']\n");
    let s = render_worker(
        &c,
        &BootTarget {
            per_boot: true,
            notices: None,
            host_index_command: None,
            ..target()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let first = dir.join("user-data.sh");
    std::fs::write(&first, &s).unwrap_or_else(|e| panic!("{e}"));
    let per_boot = dir.join("per-boot");
    let trace = dir.join("trace");
    let run = |script: &std::path::Path| {
        std::process::Command::new("bash")
            .env("RAYSCALE_USER_WAIT_S", "0")
            .arg(script)
            .env("RAYSCALE_BOOT_DIR", dir.join("boot"))
            .env("RAYSCALE_PER_BOOT_DIR", &per_boot)
            .env("RAYSCALE_TRACE", &trace)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    assert!(run(&first));
    let installed = per_boot.join("rayscale-boot.sh");
    assert_eq!(
        std::fs::read_to_string(&installed).ok().as_deref(),
        Some(s.as_str())
    );
    // A later boot runs the installed copy, which leaves itself alone.
    assert!(run(&installed));
    assert_eq!(
        std::fs::read_to_string(&trace).unwrap_or_default(),
        "start\nstart\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_notice_watcher_is_there_only_with_preemption_on_and_before_ray() {
    let t = BootTarget {
        notices: Some(NoticeCloud::Aws),
        host_index_command: None,
        ..target()
    };
    let start = "worker_start_ray_commands: ['ray start --block --address=$RAY_HEAD_IP:6380']\n";
    let off = render_worker(&cfg(start), &t).unwrap_or_else(|e| panic!("{e}"));
    assert!(!off.contains("notice-watch"), "off by default");
    let on = render_worker(
        &cfg(&format!(
            "{start}rayscale: {{preemption: {{enabled: true, on_rebalance: drain, notice_poll_s: 2}}}}\n"
        )),
        &t,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let at = |needle: &str| {
        on.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing:\n{on}"))
    };
    // Started in the background before a start command that may block.
    assert!(at("notice-watch.sh\" >>") < at("ray start --block"));
    assert!(on.contains("GCS=\"$RAY_HEAD_IP:6380\""));
    assert!(on.contains("KEY='notices/demo/'\"$RAY_CLOUD_INSTANCE_ID\""));
    assert!(on.contains("POLL=2") && on.contains("ON_REBALANCE=drain"));
    assert!(on.contains("latest/meta-data/spot/instance-action"));
    assert!(on.contains("--reason DRAIN_NODE_REASON_PREEMPTION"));
    let syntax = std::process::Command::new("bash")
        .env("RAYSCALE_USER_WAIT_S", "0")
        .arg("-n")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(on.as_bytes())?;
            c.wait_with_output()
        })
        .expect("bash");
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    // A head has none.
    let h = render_head(
        &cfg("rayscale: {preemption: {enabled: true}}\n"),
        &HeadBootTarget {
            node_type: "h",
            instance_id_command: "echo i",
            private_ip_command: "echo 10.0.0.1",
            per_boot: false,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!h.contains("notice-watch"));
}

/// The head script of `c`, or its error as text.
fn head_script(c: &ClusterConfig) -> Result<String, String> {
    render_head(
        c,
        &HeadBootTarget {
            node_type: "h",
            instance_id_command: "echo i",
            private_ip_command: "echo 10.0.0.2",
            per_boot: false,
        },
    )
    .map_err(|e| e.to_string())
}

#[test]
fn obvious_secrets_are_refused_before_they_go_into_user_data() {
    let key_id = format!("AKIA{}", "IOSFODNN7EXAMPLE");
    let pem = format!("-----BEGIN {}-----", "RSA PRIVATE KEY");
    for (extra, path, kind) in [
        (
            format!("setup_commands: [echo a, echo b, 'export AWS_ACCESS_KEY_ID={key_id}']\n"),
            "setup_commands[2]",
            "an AWS access key id",
        ),
        (
            format!("docker: {{image: img, run_options: ['-e K={key_id}']}}\n"),
            "docker.run_options[0]",
            "an AWS access key id",
        ),
        (
            format!("head_setup_commands: [\"echo '{pem}' > k\"]\n"),
            "head_setup_commands[0]",
            "a PEM private key",
        ),
    ] {
        let c = cfg(&extra);
        for e in [
            head_script(&c).expect_err("head refused"),
            render_worker(&c, &target())
                .expect_err("worker refused")
                .to_string(),
        ] {
            assert!(
                e.starts_with(&format!("{path}: holds what looks like {kind};"))
                    && e.contains("user data")
                    && !e.contains(&key_id)
                    && !e.contains(&pem)
                    && !e.contains('\n'),
                "{e}"
            );
        }
    }
    // A node type's own commands too.
    let slack = format!("xoxb-{}", "1234-5678-abcd");
    let c = ClusterConfig::from_yaml_str(
        &format!(
            "cluster_name: d\nprovider: {{type: aws}}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n  \
             w: {{resources: {{}}, node_config: {{}}, worker_setup_commands: [echo ok, 'T={slack}']}}\n"
        ),
        "t.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let e = render_worker(&c, &target())
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with(
            "available_node_types.w.worker_setup_commands[1]: holds what looks like a Slack token"
        ),
        "{e}"
    );
}

/// The commands of step `name` in script `s` (the lines of its heredoc).
fn step_commands(s: &str, name: &str) -> Vec<String> {
    let open = format!("cat >\"$BOOT_DIR/{name}.sh\" <<'{EOF_MARK}'\n");
    let Some(at) = s.find(&open) else {
        return Vec::new();
    };
    s[at + open.len()..]
        .lines()
        .take_while(|l| *l != EOF_MARK)
        .filter(|l| *l != "set -e")
        .map(str::to_string)
        .collect()
}

#[test]
fn a_worker_types_own_setup_commands_replace_the_clusters_as_rays_do() {
    // Ray 2.60: `merge_setup_commands` puts `setup_commands` before the role's list; v2's
    // `get_worker_setup_commands` takes a type's own `worker_setup_commands` instead of
    // both.
    let yaml = |own: &str| {
        format!(
            "cluster_name: d\nprovider: {{type: aws}}\nhead_node_type: h\n\
             setup_commands: [echo common]\nhead_setup_commands: [echo head]\n\
             worker_setup_commands: [echo cluster-worker]\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n  \
             w: {{resources: {{}}, node_config: {{}}{own}}}\n"
        )
    };
    let load = |own: &str| {
        ClusterConfig::from_yaml_str(&yaml(own), "t.yaml").unwrap_or_else(|e| panic!("{e}"))
    };
    let worker = |c: &ClusterConfig| {
        step_commands(
            &render_worker(c, &target()).unwrap_or_else(|e| panic!("{e}")),
            "setup",
        )
    };
    assert_eq!(worker(&load("")), ["echo common", "echo cluster-worker"]);
    let own = load(", worker_setup_commands: [echo mine]");
    assert_eq!(worker(&own), ["echo mine"]);
    // An empty list of its own: no setup at all, as in Ray.
    assert!(worker(&load(", worker_setup_commands: []")).is_empty());
    let head = head_script(&own).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(step_commands(&head, "setup"), ["echo common", "echo head"]);
}

/// Writes `stubs` (name, script body) into `bin` as executables, in place of what was
/// there.
fn write_stubs(bin: &std::path::Path, stubs: &[(&str, String)]) {
    let _ = std::fs::remove_dir_all(bin);
    std::fs::create_dir_all(bin).unwrap_or_else(|e| panic!("{e}"));
    for (name, body) in stubs {
        std::fs::write(bin.join(name), format!("#!/bin/sh\n{body}\n"))
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = std::process::Command::new("chmod")
            .arg("755")
            .arg(bin.join(name))
            .status();
    }
}

/// Runs the head script `s` as a boot would, with HOME `dir`, its boot directory in
/// `dir/boot` (emptied first), the stubs of `dir/bin` first on the PATH and `env` added;
/// the boot log (the boot must succeed).
fn boot_head(s: &str, dir: &std::path::Path, env: &[(&str, &str)]) -> String {
    let _ = std::fs::remove_dir_all(dir.join("boot"));
    let bin = dir.join("bin");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(s)
        .env("RAYSCALE_USER_WAIT_S", "0")
        .env("RAYSCALE_BOOT_DIR", dir.join("boot"))
        .env("RAYSCALE_BIN", bin.join("rayscale"))
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", dir)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let log = std::fs::read_to_string(dir.join("boot/boot.log")).unwrap_or_default();
    assert!(out.status.success(), "{log}");
    log
}

/// `ray` and `rayscale` that do nothing.
fn ray_stubs() -> Vec<(&'static str, String)> {
    vec![("ray", "exit 0".into()), ("rayscale", "exit 0".into())]
}

/// The head's boot writes [`head_config_text`] to `~/ray_bootstrap_config.yaml`, unless
/// `rayscale up` pushed one to this very instance since ([`PUSHED_MARK`] names it): that
/// one is newer and stays, at a reboot as when the push came before the boot's config
/// step. A mark naming another instance (an image made from a head) changes nothing.
#[test]
fn a_config_up_pushed_to_this_head_outlives_its_boot() {
    let dir = std::env::temp_dir().join(format!("rayscale-pushed-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".rayscale")).unwrap_or_else(|e| panic!("{e}"));
    let c = cfg("head_start_ray_commands: ['ray start --head --port=7000']\n");
    let s = head_script(&c).unwrap_or_else(|e| panic!("{e}"));
    write_stubs(&dir.join("bin"), &ray_stubs());
    let boot = || boot_head(&s, &dir, &[]);
    let config = dir.join("ray_bootstrap_config.yaml");
    let read = || std::fs::read_to_string(&config).unwrap_or_default();
    let own = format!(
        "{}\n",
        head_config_text(&c).unwrap_or_else(|e| panic!("{e}"))
    );
    boot();
    assert_eq!(read(), own, "a first boot writes its own");
    let pushed = "{\"cluster_name\": \"pushed\"}\n";
    std::fs::write(&config, pushed).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join(PUSHED_MARK), "i").unwrap_or_else(|e| panic!("{e}"));
    let log = boot();
    assert_eq!(read(), pushed, "a reboot keeps what up pushed to it");
    assert!(
        log.contains("keeping the cluster config rayscale up pushed"),
        "{log}"
    );
    std::fs::write(dir.join(PUSHED_MARK), "i-other").unwrap_or_else(|e| panic!("{e}"));
    boot();
    assert_eq!(read(), own, "a push to another instance is not this head's");
    // The digest leaves out what only the machine running `up` reads.
    let d = |auth: &str| {
        let yaml = format!(
            "cluster_name: demo\nprovider: {{type: aws, region: us-west-2}}\nhead_node_type: h\n\
             auth: {auth}\navailable_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
        );
        let c = ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
        head_config_digest(&head_config_text(&c).unwrap_or_else(|e| panic!("{e}")))
    };
    let base = d("{ssh_user: u, ssh_private_key: /home/a/.ssh/k.pem}");
    assert_eq!(base.len(), 52);
    assert_eq!(
        base,
        d("{ssh_user: u, ssh_private_key: /home/b/.ssh/k.pem}")
    );
    assert_ne!(
        base,
        d("{ssh_user: v, ssh_private_key: /home/a/.ssh/k.pem}")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_head_waits_for_its_ssh_user_and_says_when_it_never_comes() {
    let dir = std::env::temp_dir().join(format!("rayscale-user-wait-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let c = cfg("head_start_ray_commands: ['ray start --head --port=7000']\n");
    let s = head_script(&c).unwrap_or_else(|e| panic!("{e}"));
    let count = dir.join("id-calls");
    let mut stubs = ray_stubs();
    stubs.extend([
        ("chown", "exit 0".to_string()),
        // The user appears at the third look (a guest agent making it).
        (
            "id",
            format!(
                "case \"$1\" in -un) echo tester; exit 0 ;; -u) echo 1000; exit 0 ;; esac\n\
                 n=$(cat {c} 2>/dev/null || echo 0); n=$((n + 1)); echo $n >{c}\n\
                 [ \"$n\" -gt 2 ]",
                c = count.display()
            ),
        ),
        // Records who the step ran as, then runs it here (without a login shell).
        (
            "sudo",
            format!(
                "echo \"$1 $2\" >>{}\nshift 3; [ \"$1\" = bash ] && shift; [ \"$1\" = -l ] && shift\nexec bash \"$@\"",
                dir.join("sudo.log").display()
            ),
        ),
    ]);
    write_stubs(&dir.join("bin"), &stubs);
    let log = boot_head(&s, &dir, &[("RAYSCALE_USER_WAIT_S", "30")]);
    assert!(
        log.contains("waiting up to 30 s for the SSH user rayscale-no-such-user")
            && !log.contains("does not exist"),
        "{log}"
    );
    let sudo = std::fs::read_to_string(dir.join("sudo.log")).unwrap_or_default();
    assert!(
        sudo.lines().count() >= 3 && sudo.lines().all(|l| l == "-u rayscale-no-such-user"),
        "every step ran as the SSH user once it came: {sudo}"
    );
    // Never made: the head says where its config is, and goes on as itself.
    std::fs::remove_file(dir.join("ray_bootstrap_config.yaml")).unwrap_or_else(|e| panic!("{e}"));
    write_stubs(&dir.join("bin"), &ray_stubs());
    let log = boot_head(&s, &dir, &[("RAYSCALE_USER_WAIT_S", "1")]);
    assert!(
        log.contains(&format!(
            "the SSH user rayscale-no-such-user (auth.ssh_user) does not exist: the head's \
             steps run as {}, its config is {}/ray_bootstrap_config.yaml",
            String::from_utf8_lossy(
                &std::process::Command::new("id")
                    .arg("-un")
                    .output()
                    .unwrap_or_else(|e| panic!("id: {e}"))
                    .stdout
            )
            .trim(),
            dir.display()
        )),
        "{log}"
    );
    assert!(dir.join("ray_bootstrap_config.yaml").exists());
    // A cloud's boot may run without HOME: the wait says the home all the same (under
    // `set -u`, an unset HOME read as such would end the boot).
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail\nSSH_USER=rayscale-no-such-user\n{USER_WAIT}echo done"
        ))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("RAYSCALE_USER_WAIT_S", "0")
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("its config is /") && text.ends_with("done\n"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
