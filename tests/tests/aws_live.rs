//! AWS end to end on one machine: a real Ray 2.60 head, `rayscale run` with a Ray AWS
//! cluster YAML against moto's EC2 server, and the boot simulator playing EC2's data
//! plane (each running instance's user data, rayscale's boot script, runs as local
//! processes and `ray start` joins the head with its EC2 instance id). Demand appears,
//! RunInstances is called, the workers boot and join, the tasks finish, the idle workers
//! are terminated in EC2 and their processes stop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rayscale_tests::boot_sim::{BootSimulator, Ec2Plane};
use rayscale_tests::fakes::aws::{MotoEc2, REGION};
use rayscale_tests::ray_head::{RayHead, RayHeadOptions};
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

#[test]
fn a_ray_aws_cluster_scales_up_and_down_on_moto() {
    let python = PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    let moto = Arc::new(MotoEc2::start());
    let head = RayHead::start_with(RayHeadOptions::external_autoscaler("head"));
    let cluster = format!("awse2e{}", std::process::id());
    let scratch = std::env::temp_dir().join(format!("rayscale-aws-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch");
    let config = scratch.join("cluster.yaml");
    // Ray's AWS YAML keys; the start command adds only what one machine needs: a loopback
    // node address, a temp dir per node (raylets sharing one collide), and --block so the
    // simulator owns the processes.
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
             provider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
             head_node_type: head\n\
             worker_start_ray_commands:\n  - ray start --address=$RAY_HEAD_IP:{port} --block --node-ip-address=127.0.0.1 --temp-dir=/tmp/rsw-$RAY_CLOUD_INSTANCE_ID --disable-usage-stats\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n  \
             worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n",
            port = head.port()
        ),
    )
    .expect("config");
    let venv_bin = python.parent().expect("venv bin").to_path_buf();
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let sim = BootSimulator::start(
        Arc::new(Ec2Plane::new(moto.client(), &cluster)),
        vec![("PATH".into(), path.clone())],
        scratch.join("sim"),
    );
    let log = scratch.join("rayscale.log");
    let mut rayscale = Command::new(rayscale_tests::workspace_bin("rayscale"))
        .args([
            "run",
            "--interval",
            "2",
            "--gcs",
            &head.addr(),
            "--head-ip",
            "127.0.0.1",
        ])
        .arg("--config")
        .arg(&config)
        // The standard AWS chain, pointed at moto; no instance metadata lookups.
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("rayscale run starts");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // Demand: 4 tasks of 2 CPUs for 4 s; the head has no CPU.
    let w = Command::new(&python)
        .arg(root().join("tests/live/workload.py"))
        .arg(head.addr())
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
    let booted = sim.ever_booted();
    let diag = || {
        format!(
            "rayscale log:\n{}\nbooted {:?}\nfirst boot log:\n{}",
            log_text(),
            sim.ever_booted(),
            sim.ever_booted()
                .first()
                .map(|i| sim.log(i))
                .unwrap_or_default()
        )
    };
    assert!(
        out.status.success() && text.contains("done 4"),
        "workload: {text}\n{}",
        diag()
    );
    assert!(moto.calls("RunInstances") >= 1, "{}", diag());
    assert!(!booted.is_empty(), "{}", diag());
    // The workers joined with their EC2 ids.
    let joined = head.alive_workers();
    assert!(
        !joined.is_empty()
            && joined
                .iter()
                .all(|id| id.starts_with("i-") && booted.contains(id)),
        "GCS workers {joined:?}, booted {booted:?}\n{}",
        diag()
    );
    // Idle: terminated in EC2, and their processes stop.
    assert!(
        wait_until(Duration::from_secs(120), || instances(
            &moto,
            &cluster,
            &["pending", "running"]
        )
        .is_empty()),
        "instances still running: {:?}\n{}",
        instances(&moto, &cluster, &["pending", "running"]),
        diag()
    );
    assert!(
        wait_until(Duration::from_secs(30), || sim.live().is_empty()),
        "processes still running for {:?}",
        sim.live()
    );
    assert!(
        wait_until(Duration::from_secs(30), || head.alive_workers().is_empty()),
        "{:?}",
        head.alive_workers()
    );
    assert_eq!(
        instances(&moto, &cluster, &["terminated"]).len(),
        booted.len(),
        "every booted instance was terminated in EC2"
    );
    let _ = rayscale.kill();
    let _ = rayscale.wait();
    drop(sim);
    for id in &booted {
        let _ = std::fs::remove_dir_all(format!("/tmp/rsw-{id}"));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
