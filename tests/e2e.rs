//! Helpers of the end-to-end tests that run a whole cluster on this machine (a cloud's
//! fake or emulator, the boot simulator, a real Ray): the workload, the GCS probe, and
//! child processes with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::wait_until;

/// Waits for a child process up to `timeout` (killed after it): its exit success and
/// output.
pub fn finish(mut child: std::process::Child, timeout: Duration) -> (bool, String) {
    let pid = child.id();
    if !wait_until(timeout, || crate::has_exited(pid)) {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `tests/live/workload.py` with `args` against the cluster at `gcs`, started with
/// `python` (its output piped, for [`finish`]).
pub fn start_workload(python: &Path, gcs: &str, args: &[&str]) -> std::process::Child {
    Command::new(python)
        .arg(root().join("tests/live/workload.py"))
        .arg(gcs)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("workload starts")
}

/// Runs the test workload (4 tasks of 2 CPUs for 4 s) against `gcs`: ok and its output.
pub fn workload(python: &Path, gcs: &str) -> (bool, String) {
    let w = start_workload(python, gcs, &["tasks", "4", "2", "4"]);
    let (ok, text) = finish(w, Duration::from_secs(240));
    (ok && text.contains("done 4"), text)
}

/// Whether a GCS answers at `gcs` (`rayscale status`).
pub fn gcs_answers(gcs: &str) -> bool {
    Command::new(crate::workspace_bin("rayscale"))
        .args(["status", "--gcs", gcs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A cloud's side of [`up_scale_down`]: its fake, how rayscale reaches it, its YAML and
/// its data plane.
pub trait Cloud {
    /// The environment that points rayscale at the fake (the endpoint variable).
    fn env(&self) -> Vec<(String, String)>;
    /// The environment `rayscale up`/`down` run with: [`Cloud::env`], plus what the CLI
    /// alone needs (a HOME of the test's own where `up` keeps a key pair it makes).
    fn cli_env(&self) -> Vec<(String, String)> {
        self.env()
    }
    /// The `provider:` flow mapping of the cluster YAML.
    fn provider(&self) -> String;
    /// The head's and the worker's `node_config` (flow mappings).
    fn node_configs(&self) -> (String, String);
    /// The data plane of `cluster`, heads included.
    fn plane(&self, cluster: &str) -> std::sync::Arc<dyn crate::boot_sim::DataPlane>;
    /// Instances that exist (any state).
    fn instances(&self) -> Vec<String>;
    /// Instances running.
    fn running(&self) -> Vec<String>;
    /// Instances created so far (each create call of a new instance).
    fn creates(&self) -> u64;
}

/// `rayscale <args>` with `env` (the launcher polling every 0.5 s): whether it succeeded,
/// and its stdout then stderr.
pub fn rayscale_with(env: &[(String, String)], args: &[&str]) -> (bool, String) {
    let out = Command::new(crate::workspace_bin("rayscale"))
        .args(args)
        .env("PATH", crate::loopback_ssh_path())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RAYSCALE_LAUNCHER_POLL_S", "0.5")
        .stdin(Stdio::null())
        .output()
        .expect("rayscale runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// What both scenarios set up: a scratch directory, the cluster YAML with the start
/// commands one machine needs, the environment of the booted instances, and the boot
/// simulator playing the cloud's data plane.
pub struct Stage {
    /// The Python with Ray.
    pub python: PathBuf,
    /// The head's GCS address.
    pub gcs: String,
    /// The cluster's name.
    pub cluster: String,
    /// The scratch directory.
    pub scratch: PathBuf,
    /// The cluster YAML's path, as the CLI takes it.
    pub config_arg: String,
    /// The boot simulator.
    pub sim: crate::boot_sim::BootSimulator,
}

impl Stage {
    /// `cluster_name` `<name><tag><pid>`; `extra` goes after `provider:` (top-level
    /// keys), `workers` after the head in `available_node_types` (indented entries).
    pub fn new(name: &str, tag: &str, cloud: &dyn Cloud, extra: &str, workers: &str) -> Stage {
        let python = PathBuf::from(std::env::var("RAYSCALE_PYTHON").expect("RAYSCALE_PYTHON"));
        let ports = crate::ray_head::free_ports(2);
        let (port, mounts_port) = (ports[0], ports[1]);
        let pid = std::process::id();
        let cluster = format!("{name}{tag}{pid}");
        let scratch = std::env::temp_dir().join(format!("rayscale-{name}-{tag}-{pid}"));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).expect("scratch");
        let config = scratch.join("cluster.yaml");
        let (head_nc, _) = cloud.node_configs();
        // The start commands add only what one machine needs (see aws_live.rs), the temp
        // dirs named by the instance name less `ray-<cluster>-` (Ray's socket paths must
        // stay under 108 bytes), and the host of a multi-host slice (the simulator's).
        std::fs::write(
            &config,
            format!(
                "cluster_name: {cluster}\nmax_workers: 4\nupscaling_speed: 100\nidle_timeout_minutes: 0.2\n\
                 provider: {}\n{extra}\
                 head_node_type: head\n\
                 head_start_ray_commands:\n  - ray start --head --node-ip-address=127.0.0.1 --port={port} --num-cpus=0 --include-dashboard=false --disable-usage-stats --temp-dir=/tmp/rsh-${{RAY_CLOUD_INSTANCE_ID#ray-*-}}\n\
                 worker_start_ray_commands:\n  - ray start --address=$RAY_HEAD_IP:{port} --block --node-ip-address=127.0.0.1 --temp-dir=/tmp/rsw-${{RAY_CLOUD_INSTANCE_ID#ray-*-}}${{RAYSCALE_SIM_HOST_SUFFIX:-}} --disable-usage-stats\n\
                 available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {head_nc}}}\n{workers}",
                cloud.provider()
            ),
        )
        .expect("config");
        let venv_bin = python.parent().expect("venv bin").to_path_buf();
        let path = format!(
            "{}:{}",
            venv_bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut env = cloud.env();
        env.push(("PATH".to_string(), path));
        if extra.contains("install:") {
            // The head gets rayscale from the wheel (`rayscale.install`), offline.
            env.push(("PIP_NO_INDEX".to_string(), "1".to_string()));
        } else {
            env.push((
                "RAYSCALE_BIN".to_string(),
                crate::workspace_bin("rayscale").display().to_string(),
            ));
        }
        env.push(("RUST_LOG".to_string(), "info".to_string()));
        // The head's mounts server on a free port (one machine plays every node).
        env.push((
            "RAYSCALE_FILE_MOUNTS_PORT".to_string(),
            mounts_port.to_string(),
        ));
        let sim =
            crate::boot_sim::BootSimulator::start(cloud.plane(&cluster), env, scratch.join("sim"));
        Stage {
            python,
            gcs: format!("127.0.0.1:{port}"),
            cluster,
            scratch,
            config_arg: config.display().to_string(),
            sim,
        }
    }

    /// `rayscale up` against `cloud`: the head instance, launched, with its GCS
    /// answering; `diag` says what went wrong.
    pub fn up_head(&self, cloud: &dyn Cloud, diag: impl Fn() -> String) -> String {
        let (ok, out) = rayscale_with(&cloud.cli_env(), &["up", &self.config_arg]);
        assert!(
            ok && out.contains("launched and running"),
            "{out}\n{}",
            diag()
        );
        let head_id = cloud.running().first().cloned().expect("a head instance");
        assert!(out.contains(&head_id), "{out}");
        assert!(
            wait_until(Duration::from_secs(90), || gcs_answers(&self.gcs)),
            "the head's GCS does not answer at {}\n{}",
            self.gcs,
            diag()
        );
        head_id
    }

    /// What the first two instances booted said (for a failure's message).
    pub fn diag(&self) -> String {
        let booted = self.sim.ever_booted();
        let mut s = format!("booted {booted:?}\n");
        for id in booted.iter().take(2) {
            s.push_str(&format!("--- {id}:\n{}\n", self.sim.log(id)));
        }
        s
    }

    /// Stops the simulator and removes what the instances `ids` and the stage left.
    pub fn clean(self, ids: &[String]) {
        drop(self.sim);
        for id in ids {
            let short = id.trim_start_matches(&format!("ray-{}-", self.cluster));
            let _ = std::fs::remove_dir_all(format!("/tmp/rsw-{short}"));
            let _ = std::fs::remove_dir_all(format!("/tmp/rsh-{short}"));
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A cloud end to end on one machine, the way a user runs it: `rayscale up` with the
/// cloud's cluster YAML against its fake makes the head; the boot simulator, playing the
/// cloud's data plane, runs each running instance's boot payload as local processes (the
/// head's starts a real Ray head without Ray's monitor and `rayscale run` beside it,
/// which makes workers for the demand; theirs join the head with their instance names);
/// the tasks finish, the idle workers go, and `rayscale down` removes the head.
pub fn up_scale_down(name: &str, cloud: &dyn Cloud) {
    let (_, worker_nc) = cloud.node_configs();
    let stage = Stage::new(
        name,
        "e2e",
        cloud,
        "",
        &format!("  worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {worker_nc}}}\n"),
    );
    let (python, gcs, cluster) = (
        stage.python.clone(),
        stage.gcs.clone(),
        stage.cluster.clone(),
    );
    let (config_arg, sim) = (stage.config_arg.clone(), &stage.sim);
    let diag = || stage.diag();

    // `up`: the head instance, which boots Ray's head and rayscale, found again by a
    // second `up`.
    let head_id = stage.up_head(cloud, diag);
    assert!(
        head_id.starts_with(&format!("ray-{cluster}-head-")),
        "{head_id}"
    );
    let (ok, again) = rayscale_with(&cloud.cli_env(), &["up", &config_arg]);
    assert!(ok && again.contains("already running"), "{again}");
    assert_eq!(cloud.creates(), 1, "one head, created once");
    let (ok, text) = workload(&python, &gcs);
    assert!(ok, "workload: {text}\n{}", diag());
    let booted = sim.ever_booted();
    let workers: Vec<String> = booted.iter().filter(|i| **i != head_id).cloned().collect();
    assert!(!workers.is_empty(), "{}", diag());
    // The workers joined with their instance names.
    let joined = crate::ray_head::alive_workers_at(&gcs);
    assert!(
        !joined.is_empty()
            && joined
                .iter()
                .all(|id| id.starts_with(&format!("ray-{cluster}-worker-")) && workers.contains(id)),
        "GCS workers {joined:?}, booted {booted:?}\n{}",
        diag()
    );
    // Idle: the head's rayscale removes the workers; their processes stop.
    let only_head = || cloud.instances() == [head_id.clone()];
    assert!(
        wait_until(Duration::from_secs(120), only_head),
        "instances still there: {:?}\n{}",
        cloud.instances(),
        diag()
    );
    assert!(
        wait_until(Duration::from_secs(30), || sim.live() == [head_id.clone()]),
        "processes still running for {:?}",
        sim.live()
    );

    // `down`: the head goes, and with it Ray's head and rayscale.
    let (ok, out) = rayscale_with(&cloud.cli_env(), &["down", &config_arg]);
    assert!(ok && out.contains(&format!("head {head_id}")), "{out}");
    assert!(
        wait_until(Duration::from_secs(10), || cloud.instances().is_empty()),
        "{:?}",
        cloud.instances()
    );
    assert!(
        wait_until(Duration::from_secs(30), || sim.live().is_empty()),
        "processes still running for {:?}",
        sim.live()
    );
    assert!(
        crate::processes_with_env(&format!("RAYSCALE_SIM_INSTANCE={head_id}")).is_empty(),
        "the head's processes are gone"
    );
    stage.clean(&booted);
}

/// The directory of the wheel `scripts/build-wheel.sh` made (`RAYSCALE_WHEEL_DIR`, set
/// by `scripts/test.sh`).
pub fn wheel_dir() -> PathBuf {
    let d = PathBuf::from(std::env::var("RAYSCALE_WHEEL_DIR").expect(
        "RAYSCALE_WHEEL_DIR: the directory of rayscale's wheel (scripts/build-wheel.sh; \
         scripts/test.sh sets it)",
    ));
    let has_wheel = std::fs::read_dir(&d)
        .map(|r| {
            r.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".whl"))
        })
        .unwrap_or(false);
    assert!(has_wheel, "no wheel in RAYSCALE_WHEEL_DIR={}", d.display());
    d
}

/// The wheel file in [`wheel_dir`] (an absolute path).
pub fn wheel_file() -> PathBuf {
    let d = wheel_dir();
    let f = std::fs::read_dir(&d)
        .expect("RAYSCALE_WHEEL_DIR")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("a wheel");
    std::fs::canonicalize(&f).expect("the wheel's path")
}

/// The head has no `rayscale`: its boot installs it itself, pip offline. First from a
/// local directory (`rayscale.install.find_links`, pip `--no-index`) with a version that is
/// not there: `rayscale up --wait` ends with pip's reason; then the exact wheel file with
/// a wrong `sha256`: the boot refuses it, and `up --wait` says so; then the same file,
/// its digest pinned by `rayscale up` (`rayscale.install.wheel` alone): `up --wait`
/// returns once rayscale runs on the head, which scales up for the workload and down.
pub fn up_scale_down_from_the_wheel(name: &str, cloud: &dyn Cloud) {
    let (_, worker_nc) = cloud.node_configs();
    let wheels = wheel_dir();
    let wheel = wheel_file();
    let workers =
        format!("  worker: {{resources: {{CPU: 2}}, max_workers: 4, node_config: {worker_nc}}}\n");
    let stage = Stage::new(
        name,
        "whl",
        cloud,
        &format!(
            "rayscale: {{install: {{pip: 'rayscale==0.0.1', find_links: '{}'}}}}\n",
            wheels.display()
        ),
        &workers,
    );
    let diag = || stage.diag();
    let install = |block: &str| {
        let text = std::fs::read_to_string(&stage.config_arg).expect("config");
        let at = text.find("rayscale: {install:").expect("the install line");
        let eol = at + text[at..].find('\n').expect("its end");
        std::fs::write(
            &stage.config_arg,
            format!(
                "{}rayscale: {{install: {block}}}{}",
                &text[..at],
                &text[eol..]
            ),
        )
        .expect("config");
    };
    // `up --wait`; the head's GCS listens on loopback here, not at its cloud address.
    let up_wait = || {
        rayscale_with(
            &cloud.cli_env(),
            &[
                "up",
                &stage.config_arg,
                "--wait",
                "120",
                "--gcs",
                &stage.gcs,
            ],
        )
    };
    let down = || {
        let (ok, out) = rayscale_with(&cloud.cli_env(), &["down", &stage.config_arg]);
        assert!(ok, "{out}");
        assert!(
            wait_until(Duration::from_secs(30), || stage.sim.live().is_empty()),
            "{:?}",
            stage.sim.live()
        );
    };
    let (ok, out) = up_wait();
    assert!(
        !ok && out.contains("rayscale is not running on the head of")
            && out.contains("install of rayscale==0.0.1 failed")
            && out.contains("No matching distribution found for rayscale==0.0.1"),
        "{out}\n{}",
        diag()
    );
    down();

    // The exact wheel, with a digest it does not have: refused before pip sees it.
    let wrong = "0".repeat(64);
    install(&format!(
        "{{wheel: '{}', sha256: '{wrong}'}}",
        wheel.display()
    ));
    let (ok, out) = up_wait();
    assert!(
        !ok && out.contains("rayscale is not running on the head of")
            && out.contains(&format!(
                "not the pinned {wrong} (rayscale.install.sha256): not installed"
            )),
        "{out}\n{}",
        diag()
    );
    down();

    // The same file, its digest pinned by `rayscale up`.
    install(&format!("{{wheel: '{}'}}", wheel.display()));
    let (ok, out) = up_wait();
    assert!(
        ok && out.contains("rayscale runs on the head"),
        "{out}\n{}",
        diag()
    );
    let head_id = cloud.running().first().cloned().expect("a head");
    let log = stage.sim.log(&head_id);
    assert!(
        log.contains(&format!(
            "rayscale: not on PATH: installing the wheel {} (sha256 ",
            wheel.display()
        )),
        "the head installed rayscale itself:\n{log}"
    );
    let (ok, text) = workload(&stage.python, &stage.gcs);
    assert!(ok, "workload: {text}\n{}", diag());
    assert!(
        stage
            .sim
            .ever_booted()
            .iter()
            .any(|i| *i != head_id && !i.contains("-head-")),
        "the installed rayscale launched workers\n{}",
        diag()
    );
    assert!(
        wait_until(Duration::from_secs(120), || cloud.instances()
            == [head_id.clone()]),
        "instances still there: {:?}\n{}",
        cloud.instances(),
        diag()
    );
    let (ok, out) = rayscale_with(&cloud.cli_env(), &["down", &stage.config_arg]);
    assert!(ok && out.contains(&format!("head {head_id}")), "{out}");
    assert!(
        wait_until(Duration::from_secs(30), || stage.sim.live().is_empty()),
        "processes still running for {:?}",
        stage.sim.live()
    );
    let booted = stage.sim.ever_booted();
    stage.clean(&booted);
}

/// A cloud with spot capacity, for [`preempt_and_replace`].
pub trait SpotCloud: Cloud {
    /// The spot worker's and the on-demand worker's `node_config` (flow mappings).
    fn spot_configs(&self) -> (String, String);
    /// The notice this cloud gives before it takes a spot instance back.
    fn notice(&self) -> crate::boot_sim::Notice;
    /// The node type (Ray's `ray-user-node-type` tag) and the zone of instance `id`.
    fn placement(&self, id: &str) -> (String, Option<String>);
}

/// Preemption end to end on one machine: a cluster with a spot type and an on-demand
/// type, `rayscale.preemption.enabled`; a task runs on a spot worker; the cloud posts a
/// notice for it (the boot simulator serves it on the instance's metadata path); the
/// worker's own watcher (from the rendered boot script) drains its Ray node; rayscale
/// launches the replacement before the deadline, away from the preempted (type, zone);
/// at the deadline the simulator kills the node's processes; the task is retried and
/// finishes on the replacement; the idle workers go and nothing is left but the head.
pub fn preempt_and_replace(name: &str, cloud: &dyn SpotCloud) {
    let (spot_nc, od_nc) = cloud.spot_configs();
    let stage = Stage::new(
        name,
        "pre",
        cloud,
        "rayscale: {preemption: {enabled: true, notice_poll_s: 1}}\n",
        &format!(
            "  spot: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {spot_nc}}}\n  \
             od: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {od_nc}}}\n"
        ),
    );
    let (python, gcs, scratch) = (
        stage.python.clone(),
        stage.gcs.clone(),
        stage.scratch.clone(),
    );
    let (config_arg, sim) = (stage.config_arg.clone(), &stage.sim);
    let diag = |extra: &[String]| {
        let booted = sim.ever_booted();
        let mut s = format!("booted {booted:?}\n");
        for id in booted.iter().take(1).chain(extra) {
            s.push_str(&format!("--- {id}:\n{}\n", sim.log(id)));
            let notice = scratch.join("sim").join(id).join("boot/notice.log");
            s.push_str(&std::fs::read_to_string(notice).unwrap_or_default());
        }
        s
    };

    let head_id = stage.up_head(cloud, || diag(&[]));
    // One task of 2 CPUs for 60 s (retried when its node dies, Ray's default).
    let job = start_workload(&python, &gcs, &["tasks", "1", "2", "60"]);
    let busy = || {
        crate::ray_head::workers_at(&gcs)
            .into_iter()
            .find(|w| w.busy && w.status == crate::ray_head::pb::NodeStatus::Running)
    };
    assert!(
        wait_until(Duration::from_secs(120), || busy().is_some()),
        "no busy worker\n{}",
        diag(&[])
    );
    let victim = busy().expect("busy").instance_id;
    // The head's demand report can lag the node that took the task by a moment, so Ray's
    // autoscaler, and rayscale with it, may launch one more worker just as the task starts
    // (CI saw it once); that worker goes idle and is removed after the idle timeout. Wait
    // for it to go, so that any instance launched after the notice is the notice's own.
    assert!(
        wait_until(Duration::from_secs(90), || cloud.instances().len() == 2),
        "more than the head and the busy worker: {:?}\n{}",
        cloud.instances(),
        diag(&[])
    );
    assert_eq!(
        busy().map(|w| w.instance_id).as_deref(),
        Some(victim.as_str()),
        "the task still runs on {victim}"
    );
    let (vtype, vzone) = cloud.placement(&victim);
    assert_eq!(vtype, "spot", "the spot type is Ray's first choice");
    let before: Vec<String> = cloud.instances();
    let deadline = Duration::from_secs(25);
    let t0 = std::time::Instant::now();
    sim.post_notice(&victim, cloud.notice(), deadline);
    // The worker's watcher drains its node.
    let draining = || {
        crate::ray_head::workers_at(&gcs).iter().any(|w| {
            w.instance_id == victim && w.status == crate::ray_head::pb::NodeStatus::Draining
        })
    };
    assert!(
        wait_until(Duration::from_secs(20), draining),
        "the node did not drain\n{}",
        diag(std::slice::from_ref(&victim))
    );
    let drained_after = t0.elapsed();
    // The replacement is asked for before the node dies.
    let new = || -> Vec<String> {
        cloud
            .instances()
            .into_iter()
            .filter(|i| !before.contains(i))
            .collect()
    };
    assert!(
        wait_until(deadline.saturating_sub(t0.elapsed()), || !new().is_empty()),
        "no replacement before the deadline\n{}",
        diag(std::slice::from_ref(&victim))
    );
    let replaced_after = t0.elapsed();
    eprintln!(
        "{name}: notice -> drained {drained_after:?}, -> replacement launched {replaced_after:?}"
    );
    let replacement = new();
    for r in &replacement {
        let p = cloud.placement(r);
        assert!(
            !(p.0 == "spot" && p.1 == vzone),
            "{r} is in the preempted offering {vtype}/{vzone:?}"
        );
    }
    // The task is retried after the node dies, and finishes.
    let (ok, text) = finish(job, Duration::from_secs(240));
    assert!(
        ok && text.contains("done 1"),
        "workload: {text}\n{}",
        diag(&replacement)
    );
    assert!(sim.reclaimed().contains(&victim));
    // Nothing launched twice: one replacement for one preempted node.
    assert_eq!(replacement.len(), 1, "{replacement:?}");
    // Idle: only the head is left.
    let only_head = || cloud.instances() == [head_id.clone()];
    assert!(
        wait_until(Duration::from_secs(150), only_head),
        "instances still there: {:?}\n{}",
        cloud.instances(),
        diag(&replacement)
    );
    let (ok, out) = rayscale_with(&cloud.cli_env(), &["down", &config_arg]);
    assert!(ok, "{out}");
    assert!(
        wait_until(Duration::from_secs(30), || sim.live().is_empty()),
        "processes still running for {:?}",
        sim.live()
    );
    let ids: Vec<String> = before.iter().chain(&replacement).cloned().collect();
    stage.clean(&ids);
}

/// Autostop end to end on one machine: `rayscale up` with `rayscale.autostop_minutes`
/// (half a minute) and a worker type with `min_workers: 1`; nothing is asked of the
/// cluster, so once every node is idle for the autostop time the head's rayscale stops
/// the worker, then asks the cloud to delete its own head (as `down` does): nothing of
/// the cluster is left, in the cloud or as processes.
pub fn autostop_stops_workers_then_head(name: &str, cloud: &dyn Cloud) {
    let (_, worker_nc) = cloud.node_configs();
    let stage = Stage::new(
        name,
        "as",
        cloud,
        "rayscale: {autostop_minutes: 0.5}\n",
        &format!(
            "  worker: {{resources: {{CPU: 2}}, min_workers: 1, max_workers: 2, \
             node_config: {worker_nc}}}\n"
        ),
    );
    let (gcs, sim) = (stage.gcs.clone(), &stage.sim);
    let diag = || stage.diag();
    let head_id = stage.up_head(cloud, diag);
    // min_workers: one worker joins.
    assert!(
        wait_until(Duration::from_secs(120), || {
            !crate::ray_head::alive_workers_at(&gcs).is_empty()
        }),
        "no worker joined\n{}",
        diag()
    );
    let t0 = std::time::Instant::now();
    // Quiet: the worker goes, then the head; nothing is left.
    assert!(
        wait_until(Duration::from_secs(240), || cloud.instances().is_empty()),
        "instances still there: {:?}\n{}",
        cloud.instances(),
        diag()
    );
    let took = t0.elapsed();
    eprintln!("{name}: worker joined -> cluster gone by autostop in {took:?}");
    assert!(took >= Duration::from_secs(25), "too soon: {took:?}");
    let log = sim.log(&head_id);
    assert!(
        log.contains("autostop: stopping the head"),
        "the head's rayscale says why it goes\n{log}"
    );
    assert!(
        wait_until(Duration::from_secs(60), || sim.live().is_empty()),
        "processes still running for {:?}",
        sim.live()
    );
    let booted = sim.ever_booted();
    // Stopped workers stay stopped: at most the one min_workers worker was launched.
    assert_eq!(booted.len(), 2, "{booted:?}");
    stage.clean(&booted);
}

/// A cloud whose first worker type can be capped, for [`gang_whole_or_split`].
pub trait GangCloud: SpotCloud {
    /// The capped type's and the other type's `node_config` (flow mappings; distinct
    /// machine types).
    fn gang_configs(&self) -> (String, String);
    /// From now on the capped type's machine type has room for `n` more instances (the
    /// fake's capacity fault).
    fn cap(&self, n: u32);
}

/// All-or-nothing gangs end to end on one machine: a `STRICT_SPREAD` placement group of
/// 3 bundles `{CPU: 1, A: 1}`; worker type `a` (Ray's first choice: it fits a bundle
/// exactly) has room for only 2 instances in the cloud, type `b` fits too. With
/// `rayscale.gangs: atomic` the gang on `a` is released whole (all or nothing, nothing
/// of `a` is left) and the group is placed on 3 nodes of `b`; without it (Ray's
/// behaviour), the 2 nodes of `a` the cloud made stay and hold 2 of the bundles (the
/// capacity error sets `a` aside, so the third goes to `b`).
pub fn gang_whole_or_split(name: &str, cloud: &dyn GangCloud, atomic: bool) {
    let (capped_nc, other_nc) = cloud.gang_configs();
    let stage = Stage::new(
        name,
        if atomic { "ga" } else { "gs" },
        cloud,
        if atomic {
            "rayscale: {gangs: atomic}\n"
        } else {
            ""
        },
        &format!(
            "  a: {{resources: {{CPU: 1, A: 1}}, max_workers: 3, node_config: {capped_nc}}}\n  \
             b: {{resources: {{CPU: 2, A: 1}}, max_workers: 3, node_config: {other_nc}}}\n"
        ),
    );
    let (python, gcs) = (stage.python.clone(), stage.gcs.clone());
    let (config_arg, sim) = (stage.config_arg.clone(), &stage.sim);
    let diag = || stage.diag();
    let head_id = stage.up_head(cloud, diag);
    cloud.cap(2);
    let job = start_workload(&python, &gcs, &["spread", "3", "A"]);
    let (ok, text) = finish(job, Duration::from_secs(240));
    let head_log = || sim.log(&head_id);
    assert!(
        ok && text.contains("spread 3 distinct nodes for 3 bundles"),
        "workload: {text}\n{}\n--- head:\n{}",
        diag(),
        head_log()
    );
    let workers_of = |t: &str| -> Vec<String> {
        cloud
            .instances()
            .into_iter()
            .filter(|i| *i != head_id && cloud.placement(i).0 == t)
            .collect()
    };
    let (a, b) = (workers_of("a"), workers_of("b"));
    if atomic {
        assert!(
            a.is_empty() && b.len() == 3,
            "a {a:?}, b {b:?}\n{}",
            head_log()
        );
        assert!(
            head_log().contains("retrying whole"),
            "the released gang is in the event log\n{}",
            head_log()
        );
    } else {
        assert!(
            a.len() == 2 && b.len() == 1,
            "a {a:?}, b {b:?}\n{}",
            head_log()
        );
    }
    eprintln!("{name}: atomic {atomic}: the group placed on a {a:?}, b {b:?}");
    let (ok, out) = rayscale_with(&cloud.cli_env(), &["down", &config_arg]);
    assert!(ok, "{out}");
    assert!(
        wait_until(Duration::from_secs(30), || cloud.instances().is_empty()
            && sim.live().is_empty()),
        "left: {:?}, processes {:?}",
        cloud.instances(),
        sim.live()
    );
    let booted = sim.ever_booted();
    stage.clean(&booted);
}
