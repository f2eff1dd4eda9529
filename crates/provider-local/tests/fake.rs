//! The local-process provider against fake `ray` binaries (shell scripts that record their
//! arguments and environment, start a child in their process group and a stray in a
//! session of its own, the way Ray 2.60's raylet puts each worker in its own group).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, is_live, my_zombies, node_types, read_proc, tagged, wait_until};
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, LaunchRequest, ProviderErrorKind, ProviderOp,
};
use rayscale_provider_local::{
    LocalProcessConfig, LocalProcessProvider, LocalProviderError, ray_start_args, worker_temp_dir,
};

/// Records what it was started with, writes into its `--temp-dir` as Ray does (a
/// session), starts `sleep 300 &` (same process group) and `setsid sleep 301 &` (a group
/// and session of its own), then sleeps.
const SLEEPER: &str = r#"#!/bin/sh
rec="$FAKE_RAY_DIR/$RAY_CLOUD_INSTANCE_ID"
echo start >> "$rec.starts"
for a in "$@"; do
  case "$a" in
    --temp-dir=*) d="${a#--temp-dir=}"; mkdir -p "$d/session_1/logs" && echo x > "$d/session_1/logs/raylet.out" ;;
  esac
done
sleep 300 &
child=$!
setsid sleep 301 &
stray=$!
{
  for a in "$@"; do printf 'ARG %s\n' "$a"; done
  printf 'ENV RAY_CLOUD_INSTANCE_ID=%s\n' "$RAY_CLOUD_INSTANCE_ID"
  printf 'ENV RAY_NODE_TYPE_NAME=%s\n' "$RAY_NODE_TYPE_NAME"
  printf 'ENV RAYSCALE_CLUSTER=%s\n' "$RAYSCALE_CLUSTER"
  printf 'ENV RAYSCALE_LAUNCH_REQUEST_ID=%s\n' "$RAYSCALE_LAUNCH_REQUEST_ID"
  printf 'PID %s\nCHILD %s\nSTRAY %s\n' "$$" "$child" "$stray"
} > "$rec.tmp"
mv "$rec.tmp" "$rec.rec"
echo "fake ray started"
sleep 300
"#;

/// Fails at once, like `ray start` that cannot reach the GCS.
const FAILING: &str = r#"#!/bin/sh
echo start >> "$FAKE_RAY_DIR/$RAY_CLOUD_INSTANCE_ID.starts"
echo "fake ray: cannot reach the GCS at $2" >&2
exit 1
"#;

struct Fixture {
    // Dropped first: kills whatever a failing test left running.
    _kill: KillOnDrop,
    dir: TempDir,
    cluster: String,
    ray: PathBuf,
}

impl Fixture {
    fn new(name: &str, script: &str) -> Fixture {
        let cluster = format!("t{}-{name}", std::process::id());
        let dir = TempDir::new(name);
        let ray = dir.path().join("ray");
        common::write_script(&ray, script);
        Fixture {
            _kill: KillOnDrop(cluster.clone()),
            dir,
            cluster,
            ray,
        }
    }

    fn config(&self, grace: Duration) -> LocalProcessConfig {
        let mut c = LocalProcessConfig::new(&self.cluster, "127.0.0.1:1", &self.ray, node_types());
        c.grace_period = grace;
        c.log_dir = self.dir.path().join("logs");
        c.extra_env = vec![("FAKE_RAY_DIR".into(), self.dir.path().display().to_string())];
        c
    }

    fn provider(&self, grace: Duration) -> LocalProcessProvider {
        LocalProcessProvider::new(self.config(grace)).unwrap()
    }

    /// The record of an instance, once its script has written it.
    async fn record(&self, id: &str) -> Record {
        let path = self.dir.path().join(format!("{id}.rec"));
        assert!(
            wait_until(Duration::from_secs(10), || path.exists()).await,
            "{id} did not start"
        );
        Record::parse(&std::fs::read_to_string(path).unwrap())
    }

    fn starts(&self, id: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join(format!("{id}.starts")))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Leaders (pid == pgid) of the cluster's instances.
    fn leaders(&self) -> Vec<i32> {
        tagged(&self.cluster, None)
            .into_iter()
            .filter(|p| p.pid == p.pgid && p.cmdline.contains("--block"))
            .map(|p| p.pid)
            .collect()
    }
}

#[derive(Debug)]
struct Record {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    pid: i32,
    child: i32,
    stray: i32,
}

impl Record {
    fn parse(text: &str) -> Record {
        let mut r = Record {
            args: Vec::new(),
            env: BTreeMap::new(),
            pid: 0,
            child: 0,
            stray: 0,
        };
        for line in text.lines() {
            let (tag, rest) = line.split_once(' ').unwrap();
            match tag {
                "ARG" => r.args.push(rest.to_string()),
                "ENV" => {
                    let (k, v) = rest.split_once('=').unwrap();
                    r.env.insert(k.into(), v.into());
                }
                "PID" => r.pid = rest.parse().unwrap(),
                "CHILD" => r.child = rest.parse().unwrap(),
                "STRAY" => r.stray = rest.parse().unwrap(),
                _ => panic!("bad record line {line}"),
            }
        }
        r
    }
}

fn request(id: &str, node_type: &str, count: u64) -> LaunchRequest {
    LaunchRequest {
        request_id: id.into(),
        node_type: node_type.into(),
        count,
        launch_config_hash: String::new(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    }
}

fn running(id: &str, node_type: &str, request_id: &str) -> CloudInstance {
    let mut c = CloudInstance::worker(id, node_type, Some(request_id));
    c.private_ip = Some("127.0.0.1".into());
    c
}

fn ids(list: &[CloudInstance]) -> Vec<&str> {
    list.iter().map(|c| c.cloud_instance_id.as_str()).collect()
}

/// Terminates everything and waits until nothing of the cluster is alive.
async fn terminate_all(f: &Fixture, p: &LocalProcessProvider) {
    let all: Vec<String> = p
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.cloud_instance_id)
        .collect();
    p.terminate(&all, "cleanup").await.unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || tagged(&f.cluster, None)
            .is_empty())
        .await,
        "processes left: {:?}",
        tagged(&f.cluster, None)
    );
    assert!(wait_until(Duration::from_secs(5), || my_zombies().is_empty()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_spawns_tagged_ray_start_in_its_own_group() {
    let f = Fixture::new("args", SLEEPER);
    let p = f.provider(Duration::from_secs(5));
    p.launch(&request("r1", "cpu2", 2)).await.unwrap();
    let cpu2 = node_types().into_iter().find(|t| t.name == "cpu2").unwrap();
    let expected = ray_start_args(&cpu2, "127.0.0.1:1", "127.0.0.1");
    assert_eq!(
        expected,
        [
            "start",
            "--address=127.0.0.1:1",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--num-gpus=0",
            "--memory=1000000000",
            r#"--resources={"custom":3}"#,
            "--labels=zone=z1",
        ]
    );
    for k in 0..2 {
        let id = format!("local-r1-{k}");
        let rec = f.record(&id).await;
        // Plus a temp dir of its own (workers sharing the head's session dir race on
        // socket names).
        let mut want = expected.clone();
        want.push(format!(
            "--temp-dir={}",
            rayscale_provider_local::worker_temp_dir(&f.cluster, &id).display()
        ));
        assert_eq!(rec.args, want);
        let env: Vec<(&str, &str)> = rec
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("RAYSCALE_CLUSTER", f.cluster.as_str()),
                ("RAYSCALE_LAUNCH_REQUEST_ID", "r1"),
                ("RAY_CLOUD_INSTANCE_ID", id.as_str()),
                ("RAY_NODE_TYPE_NAME", "cpu2"),
            ]
        );
        // Its own process group, a child of this process, stdin from /dev/null, output
        // into the log file (not a pipe).
        let leader = read_proc(rec.pid).unwrap();
        assert_eq!(leader.pgid, rec.pid);
        assert_eq!(leader.ppid, std::process::id() as i32);
        assert_eq!(read_proc(rec.child).unwrap().pgid, rec.pid);
        assert_ne!(read_proc(rec.stray).unwrap().pgid, rec.pid);
        let fd = |n: u32| std::fs::read_link(format!("/proc/{}/fd/{n}", rec.pid)).unwrap();
        assert_eq!(fd(0), PathBuf::from("/dev/null"));
        assert_eq!(fd(1), p.log_path(&id));
        assert_eq!(fd(2), p.log_path(&id));
        assert!(
            wait_until(Duration::from_secs(5), || {
                std::fs::read_to_string(p.log_path(&id))
                    .is_ok_and(|s| s.contains("fake ray started"))
            })
            .await
        );
    }
    terminate_all(&f, &p).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_is_idempotent_by_request_id() {
    let f = Fixture::new("idem", SLEEPER);
    let p = f.provider(Duration::from_secs(5));
    p.launch(&request("r1", "cpu2", 2)).await.unwrap();
    f.record("local-r1-0").await;
    f.record("local-r1-1").await;
    // A retry, two concurrent launches of another request, and a retry by a new provider
    // object (a restarted rayscale).
    p.launch(&request("r1", "cpu2", 2)).await.unwrap();
    let r2 = request("r2", "cpu2", 1);
    let (a, b) = tokio::join!(p.launch(&r2), p.launch(&r2));
    a.unwrap();
    b.unwrap();
    f.record("local-r2-0").await;
    let restarted = f.provider(Duration::from_secs(5));
    restarted.launch(&request("r1", "cpu2", 2)).await.unwrap();
    restarted.launch(&request("r2", "cpu2", 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in ["local-r1-0", "local-r1-1", "local-r2-0"] {
        assert_eq!(f.starts(id), 1, "{id}");
    }
    assert_eq!(f.leaders().len(), 3);
    assert_eq!(
        ids(&p.list().await.unwrap()),
        ["local-r1-0", "local-r1-1", "local-r2-0"]
    );
    terminate_all(&f, &p).await;
    // Once terminated, a replay of the same request by the same object starts nothing.
    p.launch(&request("r1", "cpu2", 2)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.starts("local-r1-0"), 1);
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finds_instances_and_a_restarted_provider_sees_them() {
    let f = Fixture::new("list", SLEEPER);
    let p = f.provider(Duration::from_secs(5));
    p.launch(&request("r1", "cpu2", 1)).await.unwrap();
    p.launch(&request("r2", "head", 2)).await.unwrap();
    for id in ["local-r1-0", "local-r2-0", "local-r2-1"] {
        f.record(id).await;
    }
    let listed = p.list().await.unwrap();
    let expected = vec![
        running("local-r1-0", "cpu2", "r1"),
        running("local-r2-0", "head", "r2"),
        running("local-r2-1", "head", "r2"),
    ];
    assert_eq!(listed, expected);
    // A new provider object knows nothing but /proc.
    let restarted = f.provider(Duration::from_secs(5));
    assert_eq!(restarted.list().await.unwrap(), expected);
    // Another cluster on the same host sees none of them.
    let mut other = f.config(Duration::from_secs(5));
    other.cluster_name = format!("{}-other", f.cluster);
    let other = LocalProcessProvider::new(other).unwrap();
    assert!(other.list().await.unwrap().is_empty());
    // The restarted provider can stop what the first one started.
    terminate_all(&f, &restarted).await;
    assert!(restarted.list().await.unwrap().is_empty());
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_stops_the_group_and_strays_and_reaps() {
    let grace = Duration::from_secs(5);
    let f = Fixture::new("term", SLEEPER);
    let p = f.provider(grace);
    p.launch(&request("r1", "cpu2", 1)).await.unwrap();
    let rec = f.record("local-r1-0").await;
    let temp = worker_temp_dir(&f.cluster, "local-r1-0");
    let log = p.log_path("local-r1-0");
    assert!(temp.join("session_1/logs/raylet.out").exists() && log.exists());
    let t0 = Instant::now();
    p.terminate(&["local-r1-0".into(), "local-never-0".into()], "t1")
        .await
        .unwrap();
    // While it is stopping it is listed as not running (or already gone).
    let listed = p.list().await.unwrap();
    assert!(listed.iter().all(|c| !c.is_running()), "{listed:?}");
    let all_dead = || !is_live(rec.pid) && !is_live(rec.child) && !is_live(rec.stray);
    assert!(wait_until(Duration::from_secs(4), all_dead).await);
    // SIGTERM was enough: nobody waited for the grace period.
    assert!(t0.elapsed() < grace, "{:?}", t0.elapsed());
    // The leader was reaped by the provider: no zombie left behind.
    assert!(
        wait_until(Duration::from_secs(2), || read_proc(rec.pid).is_none()).await,
        "{:?}",
        read_proc(rec.pid)
    );
    assert!(wait_until(Duration::from_secs(2), || my_zombies().is_empty()).await);
    assert!(tagged(&f.cluster, None).is_empty());
    assert!(p.list().await.unwrap().is_empty());
    // What it left on disk went with it.
    assert!(
        wait_until(Duration::from_secs(2), || !temp.exists() && !log.exists()).await,
        "{} or {} is still there",
        temp.display(),
        log.display()
    );
    // A requested stop is no error; terminating again (gone) succeeds.
    assert!(p.poll_errors().await.is_empty());
    p.terminate(&["local-r1-0".into()], "t2").await.unwrap();
    assert!(p.poll_errors().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn term_ignoring_instance_is_killed_after_the_grace_period() {
    let grace = Duration::from_millis(1500);
    let script = SLEEPER.replacen("#!/bin/sh\n", "#!/bin/sh\ntrap '' TERM\n", 1);
    let f = Fixture::new("stubborn", &script);
    let p = f.provider(grace);
    p.launch(&request("r1", "cpu2", 1)).await.unwrap();
    let rec = f.record("local-r1-0").await;
    let t0 = Instant::now();
    p.terminate(&["local-r1-0".into()], "t1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(is_live(rec.pid) && is_live(rec.child) && is_live(rec.stray));
    let listed = p.list().await.unwrap();
    assert_eq!(ids(&listed), ["local-r1-0"]);
    assert!(!listed[0].is_running());
    let all_dead = || !is_live(rec.pid) && !is_live(rec.child) && !is_live(rec.stray);
    assert!(wait_until(Duration::from_secs(6), all_dead).await);
    assert!(t0.elapsed() >= grace, "{:?}", t0.elapsed());
    assert!(wait_until(Duration::from_secs(2), || read_proc(rec.pid).is_none()).await);
    assert!(wait_until(Duration::from_secs(2), || my_zombies().is_empty()).await);
    assert!(p.list().await.unwrap().is_empty());
    assert!(p.poll_errors().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_ray_start_is_reported_once() {
    let f = Fixture::new("fail", FAILING);
    let p = f.provider(Duration::from_secs(5));
    p.launch(&request("r-fail", "cpu2", 1)).await.unwrap();
    let mut errors = Vec::new();
    for _ in 0..100 {
        errors.extend(p.poll_errors().await);
        if !errors.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!(
        e.op,
        ProviderOp::Instance {
            cloud_instance_id: "local-r-fail-0".into(),
            request_id: Some("r-fail".into()),
            node_type: "cpu2".into(),
        }
    );
    assert!(e.retryable());
    assert_eq!(e.kind, ProviderErrorKind::Transient);
    assert!(!e.message.contains('\n'), "{}", e.message);
    assert!(e.message.contains("local-r-fail-0"), "{}", e.message);
    assert!(e.message.contains("exit status: 1"), "{}", e.message);
    assert!(
        e.message
            .ends_with("fake ray: cannot reach the GCS at --address=127.0.0.1:1"),
        "{}",
        e.message
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(p.poll_errors().await.is_empty());
    assert!(p.list().await.unwrap().is_empty());
    // The error names the log of a worker that died on its own: it is kept, even once
    // the autoscaler terminates what is left of the instance.
    p.terminate(&["local-r-fail-0".into()], "t1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(p.log_path("local-r-fail-0").exists());
    // A replay of the failed request starts nothing more (the reconciler makes a new one).
    p.launch(&request("r-fail", "cpu2", 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.starts("local-r-fail-0"), 1);
    assert!(p.poll_errors().await.is_empty());
    assert!(wait_until(Duration::from_secs(2), || my_zombies().is_empty()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_killed_from_outside_is_reported_and_its_remnants_stopped() {
    let f = Fixture::new("crash", SLEEPER);
    let p = f.provider(Duration::from_secs(5));
    p.launch(&request("r1", "cpu2", 1)).await.unwrap();
    let rec = f.record("local-r1-0").await;
    // Only the leader dies (as if OOM-killed): its child and the stray remain.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(rec.pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let mut errors = Vec::new();
    for _ in 0..100 {
        errors.extend(p.poll_errors().await);
        if !errors.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].message.contains("signal: 9"),
        "{}",
        errors[0].message
    );
    let all_dead = || !is_live(rec.child) && !is_live(rec.stray);
    assert!(wait_until(Duration::from_secs(4), all_dead).await);
    assert!(p.list().await.unwrap().is_empty());
    assert!(tagged(&f.cluster, None).is_empty());
    assert!(wait_until(Duration::from_secs(2), || my_zombies().is_empty()).await);
}

/// rayscale crashes (its runtime and provider vanish), then a worker's `ray start` dies:
/// a new provider finds the leaderless remains, lists them as not running and stops them.
#[test]
fn a_restarted_provider_stops_the_remains_of_a_dead_instance() {
    let f = Fixture::new("remains", SLEEPER);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rec = rt.block_on(async {
        let p = f.provider(Duration::from_secs(5));
        p.launch(&request("r1", "cpu2", 1)).await.unwrap();
        f.record("local-r1-0").await
    });
    drop(rt);
    let pid = rustix::process::Pid::from_raw(rec.pid).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    // Reap it here, as init would for a dead rayscale (unless tokio's queue of dropped
    // children, served by another test's runtime, got there first).
    match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
        Ok(_) | Err(rustix::io::Errno::CHILD) => {}
        Err(e) => panic!("waitpid: {e}"),
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let p = f.provider(Duration::from_secs(5));
        let listed = p.list().await.unwrap();
        assert_eq!(ids(&listed), ["local-r1-0"]);
        assert!(!listed[0].is_running());
        let all_dead = || !is_live(rec.child) && !is_live(rec.stray);
        assert!(wait_until(Duration::from_secs(4), all_dead).await);
        assert!(p.list().await.unwrap().is_empty());
        assert!(p.poll_errors().await.is_empty());
    });
}

#[tokio::test]
async fn bad_launch_requests_fail_at_once() {
    let f = Fixture::new("badreq", SLEEPER);
    let p = f.provider(Duration::from_secs(5));
    let e = p.launch(&request("r1", "gpu8", 2)).await.unwrap_err();
    assert_eq!(e.message, "unknown node type \"gpu8\"");
    assert!(!e.retryable());
    assert_eq!(e.kind, ProviderErrorKind::InvalidConfig);
    assert_eq!(
        e.op,
        ProviderOp::Launch {
            request_id: "r1".into(),
            node_type: "gpu8".into(),
            count: 2
        }
    );
    let e = p.launch(&request("", "cpu2", 1)).await.unwrap_err();
    assert_eq!(e.message, "launch request id \"\" is invalid: it is empty");
    p.launch(&request("r0", "cpu2", 0)).await.unwrap();
    assert!(p.list().await.unwrap().is_empty());
}

#[test]
fn a_missing_or_unusable_ray_binary_is_a_one_line_error() {
    let f = Fixture::new("nobin", SLEEPER);
    let err = |ray: PathBuf| {
        let mut c = f.config(Duration::from_secs(1));
        c.ray_binary = ray;
        LocalProcessProvider::new(c).unwrap_err().to_string()
    };
    assert_eq!(
        err("/nonexistent/dir/ray".into()),
        "ray binary /nonexistent/dir/ray not found"
    );
    assert_eq!(
        err("rayscale-no-such-ray-binary".into()),
        "ray binary rayscale-no-such-ray-binary not found"
    );
    let plain = f.dir.path().join("not-executable");
    std::fs::write(&plain, "x").unwrap();
    assert_eq!(
        err(plain.clone()),
        format!("ray binary {} is not an executable file", plain.display())
    );
    assert_eq!(
        err(f.dir.path().to_path_buf()),
        format!(
            "ray binary {} is not an executable file",
            f.dir.path().display()
        )
    );
    // A bare name is found on PATH.
    let mut c = f.config(Duration::from_secs(1));
    c.ray_binary = "sh".into();
    let p = LocalProcessProvider::new(c).unwrap();
    assert!(p.config().ray_binary.is_absolute());
    // A node type `ray start` cannot express.
    let mut c = f.config(Duration::from_secs(1));
    c.node_types[1].resources.0[0].1 = 5_000; // CPU 0.5
    let e = LocalProcessProvider::new(c).unwrap_err();
    assert!(matches!(e, LocalProviderError::InvalidNodeType { .. }));
    assert_eq!(
        e.to_string(),
        "node type \"cpu2\": CPU must be a whole number for `ray start`, got 0.5"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_config_changes_what_is_launched_and_a_bad_one_changes_nothing() {
    let f = Fixture::new("reconf", SLEEPER);
    let p = f.provider(Duration::from_secs(1));
    let yaml = |cpus: u32| {
        format!(
            "cluster_name: {}\nprovider: {{type: local_processes}}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n  \
             big: {{resources: {{CPU: {cpus}}}, node_config: {{}}}}\n",
            f.cluster
        )
    };
    let config = |cpus: u32| {
        rayscale_core::config::ClusterConfig::from_yaml_str(&yaml(cpus), "cluster.yaml").unwrap()
    };
    // Before the reload, `big` is unknown: the launch is refused.
    let e = p.launch(&request("r1", "big", 1)).await.unwrap_err();
    assert_eq!(e.kind, ProviderErrorKind::InvalidConfig, "{e}");
    // A type `ray start` cannot express is refused, and nothing changes.
    let mut bad = config(8);
    bad.node_types[1].labels.push(("zone".into(), "a,b".into()));
    assert!(p.reconfigure(&bad).await.is_err());
    assert!(p.node_types().iter().all(|t| t.name != "big"));
    p.reconfigure(&config(8)).await.unwrap();
    assert_eq!(
        p.node_types()
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["h", "big"]
    );
    p.launch(&request("r2", "big", 1)).await.unwrap();
    let rec = f.record("local-r2-0").await;
    assert!(
        rec.args.iter().any(|a| a == "--num-cpus=8"),
        "{:?}",
        rec.args
    );
    terminate_all(&f, &p).await;
}
