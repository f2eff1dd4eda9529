//! GCP end to end on one machine, the way a user runs it: `rayscale up` with a Ray GCP
//! cluster YAML against the stateful Compute Engine fake inserts the head instance; the
//! boot simulator, playing Compute Engine's data plane, runs each running instance's
//! `startup-script` (rayscale's boot scripts) as local processes: the head's starts a
//! real Ray 2.60 head without Ray's monitor and `rayscale run` beside it, which inserts
//! workers for the demand; theirs join the head with their instance names. The tasks
//! finish, the idle workers are deleted, and `rayscale down` deletes the head.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rayscale_tests::boot_sim::{BootSimulator, GcePlane};
use rayscale_tests::e2e::{gcs_answers, workload};
use rayscale_tests::fakes::gce::{GceFake, Timing};
use rayscale_tests::ray_head::{alive_workers_at, free_ports};
use rayscale_tests::wait_until;

/// `rayscale <args>` pointed at the fake.
fn rayscale(fake: &GceFake, args: &[&str]) -> (bool, String) {
    let out = Command::new(rayscale_tests::workspace_bin("rayscale"))
        .args(args)
        .env("RAYSCALE_GCP_ENDPOINT", fake.url())
        .env("RAYSCALE_LAUNCHER_POLL_S", "0.5")
        .stdin(Stdio::null())
        .output()
        .expect("rayscale runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Instances of the fake in `statuses`.
fn instances(fake: &GceFake, statuses: &[&str]) -> Vec<String> {
    fake.instances()
        .into_iter()
        .filter(|(_, s)| statuses.contains(&s.as_str()))
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn rayscale_up_runs_a_ray_gcp_cluster_on_the_fake_and_down_removes_it() {
    let python = PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = Arc::new(rt.block_on(GceFake::start("proj", "us-west1-a", Timing::default())));
    let port = free_ports(1)[0];
    let gcs = format!("127.0.0.1:{port}");
    let cluster = format!("gcpe2e{}", std::process::id());
    let scratch = std::env::temp_dir().join(format!("rayscale-gcp-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch");
    let config = scratch.join("cluster.yaml");
    // Ray's GCP YAML keys; the start commands add only what one machine needs (see
    // aws_live.rs), the temp dirs named by the instance name less `ray-<cluster>-` (Ray's
    // socket paths must stay under 108 bytes).
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
             provider: {{type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: proj}}\n\
             head_node_type: head\n\
             head_start_ray_commands:\n  - ray start --head --node-ip-address=127.0.0.1 --port={port} --num-cpus=0 --include-dashboard=false --disable-usage-stats --temp-dir=/tmp/rsh-${{RAY_CLOUD_INSTANCE_ID#ray-*-}}\n\
             worker_start_ray_commands:\n  - ray start --address=$RAY_HEAD_IP:{port} --block --node-ip-address=127.0.0.1 --temp-dir=/tmp/rsw-${{RAY_CLOUD_INSTANCE_ID#ray-*-}} --disable-usage-stats\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{machineType: n1-standard-2}}}}\n  \
             worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{machineType: n1-standard-2, scheduling: [{{preemptible: true}}]}}}}\n",
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
    let env = vec![
        ("PATH".to_string(), path),
        ("RAYSCALE_GCP_ENDPOINT".to_string(), fake.url()),
        (
            "RAYSCALE_BIN".to_string(),
            rayscale_tests::workspace_bin("rayscale")
                .display()
                .to_string(),
        ),
        ("RUST_LOG".to_string(), "info".to_string()),
    ];
    let sim = BootSimulator::start(
        Arc::new(GcePlane::new(fake.clone(), &cluster).with_heads()),
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
    let inserts = || {
        fake.calls()
            .insert
            .load(std::sync::atomic::Ordering::Relaxed)
    };

    // `up`: the head instance, found again by a second `up`.
    let (ok, out) = rayscale(&fake, &["up", &config_arg]);
    assert!(
        ok && out.contains("launched and running"),
        "{out}\n{}",
        diag()
    );
    let head_id = instances(&fake, &["RUNNING"])
        .first()
        .cloned()
        .expect("a head instance");
    assert!(
        head_id.starts_with(&format!("ray-{cluster}-head-")),
        "{head_id}"
    );
    assert!(out.contains(&head_id), "{out}");
    let (ok, again) = rayscale(&fake, &["up", &config_arg]);
    assert!(ok && again.contains("already running"), "{again}");
    assert_eq!(inserts(), 1, "one head, inserted once");
    // The head boots Ray's head and rayscale.
    let up = wait_until(Duration::from_secs(90), || gcs_answers(&gcs));
    assert!(up, "the head's GCS does not answer at {gcs}\n{}", diag());
    let (ok, text) = workload(&python, &gcs);
    assert!(ok, "workload: {text}\n{}", diag());
    let booted = sim.ever_booted();
    let workers: Vec<String> = booted.iter().filter(|i| **i != head_id).cloned().collect();
    assert!(!workers.is_empty(), "{}", diag());
    // The workers joined with their instance names.
    let joined = alive_workers_at(&gcs);
    assert!(
        !joined.is_empty()
            && joined
                .iter()
                .all(|id| id.starts_with(&format!("ray-{cluster}-worker-")) && workers.contains(id)),
        "GCS workers {joined:?}, booted {booted:?}\n{}",
        diag()
    );
    // Idle: the head's rayscale deletes the workers; their processes stop.
    let only_head = || fake.instances().into_keys().collect::<Vec<_>>() == [head_id.clone()];
    assert!(
        wait_until(Duration::from_secs(120), only_head),
        "instances still there: {:?}\n{}",
        fake.instances(),
        diag()
    );
    assert!(
        wait_until(Duration::from_secs(30), || sim.live() == [head_id.clone()]),
        "processes still running for {:?}",
        sim.live()
    );

    // `down`: the head goes, and with it Ray's head and rayscale.
    let (ok, out) = rayscale(&fake, &["down", &config_arg]);
    assert!(ok && out.contains(&format!("head {head_id}")), "{out}");
    assert!(
        wait_until(Duration::from_secs(10), || fake.instances().is_empty()),
        "{:?}",
        fake.instances()
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
        let short = id.trim_start_matches(&format!("ray-{cluster}-"));
        let _ = std::fs::remove_dir_all(format!("/tmp/rsw-{short}"));
        let _ = std::fs::remove_dir_all(format!("/tmp/rsh-{short}"));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
