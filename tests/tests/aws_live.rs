//! AWS end to end on one machine, the way a user runs it: `rayscale up` with a Ray AWS
//! cluster YAML against moto's EC2 server launches the head instance; the boot simulator,
//! playing EC2's data plane, runs each running instance's user data (rayscale's boot
//! scripts) as local processes: the head's starts a real Ray 2.60 head without Ray's
//! monitor and `rayscale run` beside it, which launches workers for the demand; theirs
//! join the head with their EC2 instance ids. The tasks finish, the idle workers are
//! terminated in EC2; an edited YAML is pushed to the head, and `rayscale down` terminates
//! the head, then the worker its `min_workers` keeps.
//!
//! And the other way in: Ray's own `ray up` (its AWS bootstrap against moto, its node
//! updater over a fake `ssh` that runs the head's commands on this machine,
//! `tests/fakes/ray_up/`) with rayscale's wheel installed by `head_setup_commands` and
//! Ray's monitor replaced by `rayscale run` in `head_start_ray_commands`, as the docs
//! shows; then `ray down`.
//!
//! The two tests take turns (each runs a Ray cluster; together they would starve a
//! 2-core machine).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rayscale_tests::boot_sim::{BootSimulator, DataPlane, Ec2Plane, Notice};
use rayscale_tests::e2e::{
    Cloud, GangCloud, SpotCloud, finish, gang_whole_or_split, gcs_answers, preempt_and_replace,
    workload,
};
use rayscale_tests::fakes::aws::{FakeSshHead, MotoEc2, REGION};
use rayscale_tests::mounts::{assert_mounts, head_session, mounts_yaml, user_files};
use rayscale_tests::ray_head::{alive_workers_at, free_ports};
use rayscale_tests::sshd::{Sshd, login_user};
use rayscale_tests::wait_until;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Instances of `cluster` in moto in `states`.
fn instances(moto: &MotoEc2, cluster: &str, states: &[&str]) -> Vec<String> {
    instances_tagged(moto, cluster, states, &[])
}

/// Instances of `cluster` in moto in `states` carrying each of `tags` (key, value).
fn instances_tagged(
    moto: &MotoEc2,
    cluster: &str,
    states: &[&str],
    tags: &[(&str, &str)],
) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use aws_sdk_ec2::types::Filter;
        let mut req = moto
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
            );
        for (k, v) in tags {
            req = req.filters(
                Filter::builder()
                    .name(format!("tag:{k}"))
                    .values(*v)
                    .build(),
            );
        }
        let out = req.send().await.expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect()
    })
}

#[test]
fn rayscale_up_runs_a_ray_aws_cluster_on_moto_and_down_removes_it() {
    let _turn = serial();
    let python = PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    let moto = Arc::new(MotoEc2::start());
    let ports = free_ports(2);
    let (port, mounts_port) = (ports[0], ports[1]);
    let gcs = format!("127.0.0.1:{port}");
    let cluster = format!("awse2e{}", std::process::id());
    let scratch = std::env::temp_dir().join(format!("rayscale-aws-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch");
    // What the user's machine ships with `file_mounts` (a code directory with what
    // rsync_exclude leaves out, a credentials file): `up` copies them to the head over
    // SSH (a real sshd, reached through `auth.ssh_proxy_command` as through a bastion,
    // whose sessions run in the simulated head's home), before the head's setup, and the
    // head serves them to the workers it boots.
    let local = scratch.join("local");
    user_files(&local);
    let (session, head_home_file) = head_session(&scratch);
    let sshd = Sshd::start(&scratch, Some(&session));
    let config = scratch.join("cluster.yaml");
    // The worker type's `resources: {}` is filled in by `up` from EC2's m5.large (2 CPUs),
    // as `ray up` does: without that fill-in no worker would ever be launched.
    // Ray's AWS YAML keys; the start commands add only what one machine needs: a loopback
    // node address, a temp dir per node (raylets sharing one collide), --block on workers
    // so the simulator owns their processes, and no `ray stop` (it would stop every Ray
    // on the machine).
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
             provider: {{type: aws, region: {REGION}, cache_stopped_nodes: false}}\n\
             auth: {{ssh_user: {user}, ssh_private_key: {key}, ssh_proxy_command: 'nc 127.0.0.2 {ssh_port}'}}\n\
             {mounts}file_mounts_sync_continuously: true\nhead_node_type: head\n\
             head_start_ray_commands:\n  - ray start --head --node-ip-address=127.0.0.1 --port={port} --num-cpus=0 --include-dashboard=false --disable-usage-stats --temp-dir=/tmp/rsh-$RAY_CLOUD_INSTANCE_ID\n\
             worker_start_ray_commands:\n  - ray start --address=$RAY_HEAD_IP:{port} --block --node-ip-address=127.0.0.1 --temp-dir=/tmp/rsw-$RAY_CLOUD_INSTANCE_ID --disable-usage-stats\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n  \
             worker: {{resources: {{}}, max_workers: 4, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n",
            user = login_user(),
            key = sshd.key.display(),
            ssh_port = sshd.port,
            mounts = mounts_yaml(&local),
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
    let mut env = moto.cli_env();
    env.push(("PATH".into(), path));
    env.push((
        "RAYSCALE_BIN".into(),
        rayscale_tests::workspace_bin("rayscale")
            .display()
            .to_string(),
    ));
    env.push(("RUST_LOG".into(), "info".into()));
    // The head's mounts server on a free port (one machine plays every node).
    env.push(("RAYSCALE_FILE_MOUNTS_PORT".into(), mounts_port.to_string()));
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

    // The sshd's sessions go to the head's home in the simulator once it runs.
    let finder = {
        let (moto, cluster, sim_dir, file) = (
            moto.clone(),
            cluster.clone(),
            scratch.join("sim"),
            head_home_file.clone(),
        );
        std::thread::spawn(move || {
            let mut head = Vec::new();
            wait_until(Duration::from_secs(60), || {
                head =
                    instances_tagged(&moto, &cluster, &["running"], &[("ray-node-type", "head")]);
                !head.is_empty()
            });
            if let Some(id) = head.first() {
                let home = sim_dir.join(id).join("home");
                std::fs::write(&file, home.display().to_string()).expect("head-home");
            }
        })
    };

    // `up`: the head instance, with the file mounts copied to it; found again by a second
    // `up`, which copies them again (as `ray up` does), a change included.
    let (ok, out) = moto.rayscale(&["up", &config_arg]);
    assert!(
        ok && out.contains("launched and running")
            && out.contains("copied 2 file mounts to the head"),
        "{out}\n{}",
        diag()
    );
    finder.join().expect("finder");
    let head_id = instances(&moto, &cluster, &["running"])
        .first()
        .cloned()
        .expect("a head instance");
    assert!(out.contains(&head_id), "{out}");
    let head_home = scratch.join("sim").join(&head_id).join("home");
    std::fs::write(local.join("code/a.py"), "print('a2')\n").expect("edit");
    let (ok, again) = moto.rayscale(&["up", &config_arg]);
    assert!(
        ok && again.contains("already running")
            && again.contains("copied 2 file mounts")
            && !again.contains("from another node_config"),
        "{again}"
    );
    assert_eq!(moto.calls("RunInstances"), 1, "one head, launched once");
    // The head boots Ray's head and rayscale, after the mounts came.
    let up = wait_until(Duration::from_secs(90), || gcs_answers(&gcs));
    assert!(up, "the head's GCS does not answer at {gcs}\n{}", diag());
    assert_mounts(&head_home, &head_id, "print('a2')\n");
    let mut head_log = String::new();
    wait_until(Duration::from_secs(30), || {
        head_log = sim.log(&head_id);
        head_log.contains("Ray runtime started")
    });
    let here = head_log.find("rayscale: the file mounts are here");
    let started = head_log.find("Ray runtime started");
    assert!(
        here.is_some() && started.is_some() && here < started,
        "the head's boot waits for its file mounts before its setup:\n{head_log}"
    );
    // The head's rayscale tags its head as Ray's node updater would once set up, so
    // Ray's rsync-up and submit find it (aws_up checks Ray's side).
    let tagged = wait_until(Duration::from_secs(30), || {
        instances_tagged(
            &moto,
            &cluster,
            &["running"],
            &[("ray-node-type", "head"), ("ray-node-status", "up-to-date")],
        ) == [head_id.clone()]
    });
    assert!(tagged, "the head is not tagged up-to-date\n{}", diag());
    let (ok, text) = workload(&python, &gcs);
    assert!(ok, "workload: {text}\n{}", diag());
    let booted = sim.ever_booted();
    let workers: Vec<String> = booted.iter().filter(|i| **i != head_id).cloned().collect();
    assert!(moto.calls("RunInstances") >= 2, "{}", diag());
    assert!(!workers.is_empty(), "{}", diag());
    // Each worker got the head's copies (the second `up`'s) at boot, and follows them
    // (`file_mounts_sync_continuously`; the change itself: bin/src/mounts.rs's test).
    for id in &workers {
        assert_mounts(
            &scratch.join("sim").join(id).join("home"),
            id,
            "print('a2')\n",
        );
        let log = sim.log(id);
        assert!(
            log.contains("the file mounts follow the head's copies"),
            "{id}: {log}"
        );
    }
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
    // Only the head left, in EC2 and in the simulator.
    let head_alone = |when: &str| {
        assert!(
            wait_until(Duration::from_secs(120), only_head),
            "instances still running {when}: {:?}\n{}",
            instances(&moto, &cluster, &["pending", "running"]),
            diag()
        );
        assert!(
            wait_until(Duration::from_secs(30), || sim.live() == [head_id.clone()]),
            "processes still running {when} for {:?}",
            sim.live()
        );
    };
    head_alone("once idle");

    // The YAML edited (the worker type keeps one worker up) and `up` run again: as
    // `ray up` rewrites the head's config, `up` pushes it over SSH; the head's rayscale
    // reads it at its next pass and launches the worker, with no workload asking.
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replace(
            "worker: {resources: {}, max_workers: 4,",
            "worker: {resources: {}, min_workers: 1, max_workers: 4,",
        ),
    )
    .expect("edit");
    let runs = moto.calls("RunInstances");
    let (ok, out) = moto.rayscale(&["up", &config_arg]);
    assert!(
        ok && out.contains("already running")
            && out.contains("pushed this YAML's cluster config to the head"),
        "{out}"
    );
    let head_has_min = || {
        std::fs::read_to_string(head_home.join("ray_bootstrap_config.yaml"))
            .unwrap_or_default()
            .contains("\"min_workers\": 1")
    };
    assert!(head_has_min(), "the head's config is the pushed one");
    let kept = wait_until(Duration::from_secs(120), || {
        alive_workers_at(&gcs).iter().any(|id| !booted.contains(id))
    });
    assert!(
        kept && moto.calls("RunInstances") > runs,
        "no worker for min_workers after the push: GCS workers {:?}\n{}",
        alive_workers_at(&gcs),
        diag()
    );
    // Back to the first YAML: pushed again (the head's tag says the edited one), and the
    // head's file is the first one again. Then the edit once more, so that `down` below
    // meets a head whose autoscaler keeps a worker up.
    let edited = std::fs::read_to_string(&config).expect("config");
    for (yaml, min) in [(&text, false), (&edited, true)] {
        std::fs::write(&config, yaml).expect("edit");
        let (ok, out) = moto.rayscale(&["up", &config_arg]);
        assert!(
            ok && out.contains("pushed this YAML's cluster config to the head"),
            "{out}"
        );
        assert_eq!(head_has_min(), min, "the head's config is the pushed one");
    }
    let booted = sim.ever_booted();
    let runs = moto.calls("RunInstances");

    // `down` with the worker up and `min_workers: 1` on the head: the head goes first,
    // and with it Ray's head and rayscale, then the worker (and whatever the head's
    // autoscaler launched as it went: nothing leaks).
    let (ok, out) = moto.rayscale(&["down", &config_arg]);
    assert!(ok && out.contains(&format!("head {head_id}")), "{out}");
    assert!(
        instances(
            &moto,
            &cluster,
            &["pending", "running", "stopping", "stopped", "shutting-down"]
        )
        .is_empty()
    );
    let terminated = instances(&moto, &cluster, &["terminated"]);
    assert!(
        booted.iter().all(|id| terminated.contains(id)),
        "every booted instance was terminated in EC2: booted {booted:?}, terminated \
         {terminated:?}"
    );
    eprintln!(
        "launches during down: {}",
        moto.calls("RunInstances").saturating_sub(runs)
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
    let booted = sim.ever_booted();
    drop(sim);
    for id in &booted {
        let _ = std::fs::remove_dir_all(format!("/tmp/rsw-{id}"));
        let _ = std::fs::remove_dir_all(format!("/tmp/rsh-{id}"));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Processes of the fake head of `ray up` (marked in their environment); killed on drop.
struct FakeHead(String);

impl FakeHead {
    fn pids(&self) -> Vec<u32> {
        rayscale_tests::processes_with_env(&format!("RAYSCALE_SIM_INSTANCE={}", self.0))
    }
}

impl Drop for FakeHead {
    fn drop(&mut self) {
        for sig in ["-TERM", "-KILL"] {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            let _ = Command::new("kill")
                .arg(sig)
                .args(pids.iter().map(u32::to_string))
                .status();
            wait_until(Duration::from_secs(3), || self.pids().is_empty());
        }
    }
}

#[test]
fn ray_up_with_rayscale_in_place_of_rays_monitor_scales_on_moto() {
    let _turn = serial();
    let python = PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
    let venv_bin = python.parent().expect("venv bin").to_path_buf();
    let wheels = rayscale_tests::e2e::wheel_dir().display().to_string();
    let version = env!("CARGO_PKG_VERSION");
    let moto = Arc::new(MotoEc2::start());
    let ports = free_ports(2);
    let (port, mounts_port) = (ports[0], ports[1]);
    let gcs = format!("127.0.0.1:{port}");
    let pid = std::process::id();
    let cluster = format!("rayup{pid}");
    let scratch = std::env::temp_dir().join(format!("rayscale-rayup-{pid}"));
    let _ = std::fs::remove_dir_all(&scratch);
    let (home, head_home, tmp) = (
        scratch.join("home"),
        scratch.join("head"),
        scratch.join("tmp"),
    );
    for d in [&home, &head_home, &tmp] {
        std::fs::create_dir_all(d).expect("scratch");
    }
    let head = FakeHead(format!("rayup-head-{pid}"));
    moto.make_rays_iam_role();
    let sim = BootSimulator::start(
        Arc::new(Ec2Plane::new(moto.client(), &cluster)),
        vec![(
            "PATH".into(),
            format!(
                "{}:{}",
                venv_bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )],
        scratch.join("sim"),
    );
    // The fake head's login environment (Ray's commands source ~/.bashrc): Ray on PATH
    // (no rayscale: head_setup_commands installs the wheel, pip offline), AWS pointed at
    // moto, the metadata stand-in, the head's marker.
    let mut bashrc = format!(
        "export PATH={}:/usr/local/bin:/usr/bin:/bin\nexport PIP_NO_INDEX=1\n\
         export RAYSCALE_METADATA_URL={}\nexport RAYSCALE_SIM_INSTANCE={}\n\
         export RUST_LOG=info\n",
        venv_bin.display(),
        sim.metadata_url("head"),
        head.0,
    );
    for (k, v) in moto.cli_env() {
        bashrc.push_str(&format!("export {k}={v}\n"));
    }
    std::fs::write(head_home.join(".bashrc"), bashrc).expect(".bashrc");
    // What the user's machine ships with `file_mounts` (a code directory with what
    // rsync_exclude leaves out, a credentials file); Ray's `ray up` copies them to the
    // head, rayscale's head serves them to the workers it boots.
    let local = scratch.join("local");
    user_files(&local);
    let config = scratch.join("cluster.yaml");
    // The docs' head_setup_commands (the wheel, from a local directory here) and
    // head_start_ray_commands, with what one machine needs (a loopback address, a temp
    // dir of its own, a free port, a short interval).
    std::fs::write(
        &config,
        format!(
            "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
             provider: {{type: aws, region: {REGION}, use_internal_ips: true, cache_stopped_nodes: false}}\n\
             auth: {{ssh_user: ubuntu}}\nhead_node_type: head\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n  \
             worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b}}}}\n\
             file_mounts: {{'~/code': '{code}', '~/cred.json': '{cred}'}}\n\
             cluster_synced_files: ['~/synced']\nrsync_exclude: ['**/.git', '**/.git/**', '*.pyc']\n\
             initialization_commands: []\nsetup_commands: []\nworker_setup_commands: []\n\
             head_setup_commands:\n  - pip install --quiet --upgrade --target ~/.rayscale --no-index --find-links {wheels} 'rayscale=={version}'\n  \
             - mkdir -p ~/synced && echo s > ~/synced/s.txt\n\
             head_start_ray_commands:\n  - ray stop\n  \
             - RAY_enable_autoscaler_v2=1 ray start --head --no-monitor --node-ip-address=127.0.0.1 --port={port} --num-cpus=0 --include-dashboard=false --disable-usage-stats --temp-dir=/tmp/rsu-{pid} --autoscaling-config=~/ray_bootstrap_config.yaml\n  \
             - nohup ~/.rayscale/bin/rayscale run --config ~/ray_bootstrap_config.yaml --gcs 127.0.0.1:{port} --head-ip auto --interval 2 --file-mounts-port {mounts_port} >> ~/rayscale.log 2>&1 < /dev/null &\n\
             worker_start_ray_commands:\n  - ray start --address=$RAY_HEAD_IP:{port} --block --node-ip-address=127.0.0.1 --temp-dir=/tmp/rsw-$RAY_CLOUD_INSTANCE_ID --disable-usage-stats\n",
            code = local.join("code").display(),
            cred = local.join("cred.json").display(),
        ),
    )
    .expect("config");
    let ssh_log = scratch.join("ssh.log");
    let fake_head = FakeSshHead {
        home: &head_home,
        path: format!("{}:/usr/bin:/bin", venv_bin.display()),
        marker: &head.0,
        ssh_log: &ssh_log,
    };
    let ray = |args: &[&str]| {
        let child = moto
            .ray_cli(&home, &fake_head)
            .args(args)
            .arg(&config)
            .env("TMPDIR", &tmp)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ray");
        finish(child, Duration::from_secs(180))
    };
    let rayscale_log =
        || std::fs::read_to_string(head_home.join("rayscale.log")).unwrap_or_default();

    let (ok, out) = ray(&["up", "-y", "--no-config-cache", "--disable-usage-stats"]);
    assert!(ok, "ray up: {out}");
    assert!(
        wait_until(Duration::from_secs(60), || gcs_answers(&gcs)),
        "no GCS at {gcs}: {out}"
    );
    let head_ids = instances(&moto, &cluster, &["running"]);
    assert_eq!(head_ids.len(), 1, "ray up made one head: {head_ids:?}");
    let (ok, text) = workload(&python, &gcs);
    assert!(
        ok,
        "workload: {text}\nrayscale on the head:\n{}",
        rayscale_log()
    );
    let booted = sim.ever_booted();
    assert!(!booted.is_empty(), "{}", rayscale_log());
    // Every worker got the file mounts from the head before Ray started: the directory
    // without what rsync_exclude leaves out, the file with its mode, and the head's own
    // cluster_synced_files.
    for id in &booted {
        let home = scratch.join("sim").join(id).join("home");
        assert_mounts(&home, id, "print('a')\n");
        let synced = std::fs::read_to_string(home.join("synced/s.txt")).unwrap_or_default();
        assert_eq!(synced, "s\n", "{id}: {}", sim.log(id));
        // (The start command blocks: Ray's own line says it started. A worker of the
        // same launch may still be starting Ray when the workload is done: wait for it.)
        wait_until(Duration::from_secs(90), || {
            sim.log(id).contains("Ray runtime started")
        });
        let log = sim.log(id);
        let fetched = log.find("file mount ~/code fetched from the head");
        let started = log.find("Ray runtime started");
        assert!(
            fetched.is_some() && started.is_some() && fetched < started,
            "{id}: {log}"
        );
    }
    let joined = alive_workers_at(&gcs);
    assert!(
        !joined.is_empty() && joined.iter().all(|id| booted.contains(id)),
        "GCS workers {joined:?}, booted {booted:?}"
    );
    // rayscale (on the head, reading the config Ray bootstrapped) made them; idle, they
    // go; Ray's head stays.
    assert!(
        wait_until(Duration::from_secs(120), || instances(
            &moto,
            &cluster,
            &["running", "pending"]
        ) == head_ids),
        "{:?}\n{}",
        instances(&moto, &cluster, &["running", "pending"]),
        rayscale_log()
    );
    let (ok, out) = ray(&["down", "-y"]);
    assert!(ok, "ray down: {out}");
    assert!(instances(&moto, &cluster, &["running", "pending"]).is_empty());
    assert!(
        wait_until(Duration::from_secs(10), || head.pids().is_empty()),
        "the head's processes (Ray's and rayscale) are gone after ray down: {:?}",
        head.pids()
    );
    drop(sim);
    for id in &booted {
        let _ = std::fs::remove_dir_all(format!("/tmp/rsw-{id}"));
    }
    let _ = std::fs::remove_dir_all(format!("/tmp/rsu-{pid}"));
    let _ = std::fs::remove_dir_all(&scratch);
}

/// moto as a [`Cloud`] with two zones (a test's own server: every instance is its
/// cluster's).
struct Moto(Arc<MotoEc2>);

impl Moto {
    fn describe(&self) -> Vec<aws_sdk_ec2::types::Instance> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let out = self
                .0
                .client()
                .describe_instances()
                .send()
                .await
                .expect("DescribeInstances");
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .cloned()
                .collect()
        })
    }

    fn with_state(&self, states: &[&str]) -> Vec<String> {
        self.describe()
            .iter()
            .filter(|i| {
                i.state()
                    .and_then(|s| s.name())
                    .is_some_and(|n| states.contains(&n.as_str()))
            })
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect()
    }
}

impl Cloud for Moto {
    fn env(&self) -> Vec<(String, String)> {
        self.0.cli_env()
    }
    fn cli_env(&self) -> Vec<(String, String)> {
        let mut env = self.0.cli_env();
        env.push(("HOME".into(), self.0.home().display().to_string()));
        env
    }
    fn provider(&self) -> String {
        format!(
            "{{type: aws, region: {REGION}, availability_zone: '{REGION}a,{REGION}b', cache_stopped_nodes: false}}"
        )
    }
    fn node_configs(&self) -> (String, String) {
        let nc = "{InstanceType: m5.large, ImageId: ami-12c6146b}".to_string();
        (nc.clone(), nc)
    }
    fn plane(&self, cluster: &str) -> Arc<dyn DataPlane> {
        Arc::new(Ec2Plane::new(self.0.client(), cluster).with_heads())
    }
    fn instances(&self) -> Vec<String> {
        let mut v =
            self.with_state(&["pending", "running", "stopping", "stopped", "shutting-down"]);
        v.sort();
        v
    }
    fn running(&self) -> Vec<String> {
        self.with_state(&["running"])
    }
    fn creates(&self) -> u64 {
        self.0.calls("RunInstances")
    }
}

impl SpotCloud for Moto {
    fn spot_configs(&self) -> (String, String) {
        (
            "{InstanceType: m5.large, ImageId: ami-12c6146b, InstanceMarketOptions: {MarketType: spot}}".into(),
            "{InstanceType: m5.large, ImageId: ami-12c6146b}".into(),
        )
    }
    fn notice(&self) -> Notice {
        Notice::AwsSpot
    }
    fn placement(&self, id: &str) -> (String, Option<String>) {
        let all = self.describe();
        let Some(i) = all.iter().find(|i| i.instance_id() == Some(id)) else {
            return (String::new(), None);
        };
        let t = i
            .tags()
            .iter()
            .find(|t| t.key() == Some("ray-user-node-type"))
            .and_then(|t| t.value())
            .unwrap_or_default()
            .to_string();
        (
            t,
            i.placement()
                .and_then(|p| p.availability_zone())
                .map(str::to_string),
        )
    }
}

/// A spot interruption in one zone: the replacement is a spot instance in the other.
#[test]
fn a_preempted_spot_worker_is_replaced_in_the_other_zone_before_it_dies() {
    let _turn = serial();
    preempt_and_replace("aws", &Moto(Arc::new(MotoEc2::start())));
}

impl GangCloud for Moto {
    fn gang_configs(&self) -> (String, String) {
        (
            "{InstanceType: m5.large, ImageId: ami-12c6146b}".into(),
            "{InstanceType: m5.xlarge, ImageId: ami-12c6146b}".into(),
        )
    }
    fn cap(&self, n: u32) {
        self.0
            .faults(&format!(r#"{{"capacity": {{"m5.large": {n}}}}}"#));
    }
}

/// A placement group of 3 on a type EC2 has 2 of: with `gangs: atomic`, RunInstances
/// with MinCount = MaxCount makes none, and the group goes whole to the other type.
#[test]
fn an_atomic_gang_goes_whole_to_the_type_that_fits() {
    let _turn = serial();
    gang_whole_or_split("aws", &Moto(Arc::new(MotoEc2::start())), true);
}

/// The same group without the option (Ray's behaviour): the 2 nodes EC2 made stay.
#[test]
fn without_atomic_gangs_the_partial_gang_stays() {
    let _turn = serial();
    gang_whole_or_split("aws", &Moto(Arc::new(MotoEc2::start())), false);
}
