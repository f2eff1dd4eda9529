//! AWS end to end on one machine, the way a user runs it: `rayscale up` with a Ray AWS
//! cluster YAML against moto's EC2 server launches the head instance; the boot simulator,
//! playing EC2's data plane, runs each running instance's user data (rayscale's boot
//! scripts) as local processes: the head's starts a real Ray 2.60 head without Ray's
//! monitor and `rayscale run` beside it, which launches workers for the demand; theirs
//! join the head with their EC2 instance ids. The tasks finish, the idle workers are
//! terminated in EC2, and `rayscale down` terminates the head.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rayscale_tests::boot_sim::{BootSimulator, Ec2Plane};
use rayscale_tests::fakes::aws::{MotoEc2, REGION};
use rayscale_tests::ray_head::{alive_workers_at, free_ports};
use rayscale_tests::wait_until;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Instances of `cluster` in moto in `states`.
fn instances(moto: &MotoEc2, cluster: &str, states: &[&str]) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use aws_sdk_ec2::types::Filter;
        let out = moto
            .client()
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag:ray-cluster-name")
                    .values(cluster)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(states.iter().map(|s| s.to_string()).collect()))
                    .build(),
            )
            .send()
            .await
            .expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect()
    })
}

/// `rayscale <args>` with the standard AWS chain pointed at moto.
fn rayscale(moto: &MotoEc2, args: &[&str]) -> (bool, String) {
    let out = Command::new(rayscale_tests::workspace_bin("rayscale"))
        .args(args)
        .envs(aws_env(moto))
        .env("RAYSCALE_LAUNCHER_POLL_S", "0.5")
        .stdin(Stdio::null())
        .output()
        .expect("rayscale runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The standard AWS chain, pointed at moto; no instance metadata lookups.
fn aws_env(moto: &MotoEc2) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", moto.endpoint()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("AWS_CONFIG_FILE", "/dev/null".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[test]
fn rayscale_up_runs_a_ray_aws_cluster_on_moto_and_down_removes_it() {
    let python = PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    let moto = Arc::new(MotoEc2::start());
    let port = free_ports(1)[0];
    let gcs = format!("127.0.0.1:{port}");
    let cluster = format!("awse2e{}", std::process::id());
    let scratch = std::env::temp_dir().join(format!("rayscale-aws-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch");
    let config = scratch.join("cluster.yaml");
    // Ray's AWS YAML keys; the start commands add only what one machine needs: a loopback
    // node address, a temp dir per node (raylets sharing one collide), --block on workers
    // so the simulator owns their processes, and no `ray stop` (it would stop every Ray
    // on the machine).
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
             provider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
             head_node_type: head\n\
             head_start_ray_commands:\n  - ray start --head --node-ip-address=127.0.0.1 --port={port} --num-cpus=0 --include-dashboard=false --disable-usage-stats --temp-dir=/tmp/rsh-$RAY_CLOUD_INSTANCE_ID\n\
             worker_start_ray_commands:\n  - ray start --address=$RAY_HEAD_IP:{port} --block --node-ip-address=127.0.0.1 --temp-dir=/tmp/rsw-$RAY_CLOUD_INSTANCE_ID --disable-usage-stats\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n  \
             worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n",
        ),
    )
    .expect("config");
    let config_arg = config.display().to_string();
    let venv_bin = python.parent().expect("venv bin").to_path_buf();
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env = aws_env(&moto);
    env.push(("PATH".into(), path));
    env.push((
        "RAYSCALE_BIN".into(),
        rayscale_tests::workspace_bin("rayscale")
            .display()
            .to_string(),
    ));
    env.push(("RUST_LOG".into(), "info".into()));
    let sim = BootSimulator::start(
        Arc::new(Ec2Plane::new(moto.client(), &cluster).with_heads()),
        env,
        scratch.join("sim"),
    );
    let diag = || {
        let booted = sim.ever_booted();
        let mut s = format!("booted {booted:?}\n");
        for id in booted.iter().take(2) {
            s.push_str(&format!("--- {id}:\n{}\n", sim.log(id)));
        }
        s
    };

    // `up`: the head instance, found again by a second `up`.
    let (ok, out) = rayscale(&moto, &["up", &config_arg]);
    assert!(
        ok && out.contains("launched and running"),
        "{out}\n{}",
        diag()
    );
    let head_id = instances(&moto, &cluster, &["running"])
        .first()
        .cloned()
        .expect("a head instance");
    assert!(out.contains(&head_id), "{out}");
    let (ok, again) = rayscale(&moto, &["up", &config_arg]);
    assert!(ok && again.contains("already running"), "{again}");
    assert_eq!(moto.calls("RunInstances"), 1, "one head, launched once");
    // The head boots Ray's head and rayscale.
    let up = wait_until(Duration::from_secs(90), || {
        Command::new(rayscale_tests::workspace_bin("rayscale"))
            .args(["status", "--gcs", &gcs])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(up, "the head's GCS does not answer at {gcs}\n{}", diag());

    // Demand: 4 tasks of 2 CPUs for 4 s; the head has no CPU.
    let w = Command::new(&python)
        .arg(root().join("tests/live/workload.py"))
        .arg(&gcs)
        .args(["tasks", "4", "2", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("workload");
    // A workload that never finishes fails the test, never hangs it.
    let pid = w.id();
    let finished = wait_until(Duration::from_secs(240), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    });
    if !finished {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .status();
    }
    let out = w.wait_with_output().expect("workload output");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("done 4"),
        "workload: {text}\n{}",
        diag()
    );
    let booted = sim.ever_booted();
    let workers: Vec<String> = booted.iter().filter(|i| **i != head_id).cloned().collect();
    assert!(moto.calls("RunInstances") >= 2, "{}", diag());
    assert!(!workers.is_empty(), "{}", diag());
    // The workers joined with their EC2 ids.
    let joined = alive_workers_at(&gcs);
    assert!(
        !joined.is_empty()
            && joined
                .iter()
                .all(|id| id.starts_with("i-") && workers.contains(id)),
        "GCS workers {joined:?}, booted {booted:?}\n{}",
        diag()
    );
    // Idle: the head's rayscale terminates the workers in EC2; their processes stop.
    let only_head = || instances(&moto, &cluster, &["pending", "running"]) == [head_id.clone()];
    assert!(
        wait_until(Duration::from_secs(120), only_head),
        "instances still running: {:?}\n{}",
        instances(&moto, &cluster, &["pending", "running"]),
        diag()
    );
    assert!(
        wait_until(Duration::from_secs(30), || sim.live() == [head_id.clone()]),
        "processes still running for {:?}",
        sim.live()
    );

    // `down`: the head goes, and with it Ray's head and rayscale.
    let (ok, out) = rayscale(&moto, &["down", &config_arg]);
    assert!(ok && out.contains(&format!("head {head_id}")), "{out}");
    assert!(instances(&moto, &cluster, &["pending", "running"]).is_empty());
    assert_eq!(
        instances(&moto, &cluster, &["terminated"]).len(),
        booted.len(),
        "every booted instance was terminated in EC2"
    );
    assert!(
        wait_until(Duration::from_secs(30), || sim.live().is_empty()),
        "processes still running for {:?}",
        sim.live()
    );
    assert!(
        rayscale_tests::processes_with_env(&format!("RAYSCALE_SIM_INSTANCE={head_id}")).is_empty(),
        "the head's processes are gone"
    );
    drop(sim);
    for id in &booted {
        let _ = std::fs::remove_dir_all(format!("/tmp/rsw-{id}"));
        let _ = std::fs::remove_dir_all(format!("/tmp/rsh-{id}"));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
