//! [`BootSimulator`]: a cloud's data plane on one machine. It watches the cloud's API (an
//! emulator or fake, through a [`DataPlane`]) for running instances and turns each into
//! local processes running the instance's boot payload (EC2 user data, a GCE startup
//! script, ...), with a stand-in for the instance metadata service that tells each its
//! own id; when an instance stops running in the API, its processes are killed. With it a
//! whole scale-up and scale-down runs against a real Ray cluster on one machine.
//!
//! The metadata stand-in serves EC2's IMDSv2 paths under a per-instance prefix
//! (`PUT /<id>/latest/api/token`, `GET /<id>/latest/meta-data/instance-id`,
//! `.../local-ipv4`, which is loopback: every node is on this machine) and the GCE
//! metadata server's (`GET /<id>/computeMetadata/v1/instance/name`,
//! `.../network-interfaces/0/ip`; for a Cloud TPU VM, whose id is its TPU node's name
//! (ending in `-tpu`) for worker 0 and `<node>@w<worker>` for a multi-host slice's other
//! hosts, the VM's own `t1v-n-<hex>-w-<worker>` name, its TPU node's name in
//! `.../attributes/instance-id` and its worker number in `.../attributes/agent-worker-number`,
//! as Cloud TPU sets them on every host) and
//! Azure's IMDS (`GET
//! /<id>/metadata/instance/compute/name`, `.../network/interface/0/ipv4/ipAddress/0/
//! privateIpAddress`, query strings ignored); each
//! instance's processes get `RAYSCALE_METADATA_URL=http://127.0.0.1:<port>/<id>`, which
//! rayscale's boot scripts read in place of `http://169.254.169.254`.
//!
//! It also serves each cloud's preemption notice endpoints, as the clouds document them:
//! EC2's `latest/meta-data/spot/instance-action` (404 until a notice, then `{"action":
//! "terminate", "time": "..."}`) and `.../events/recommendations/rebalance`, GCE's
//! `computeMetadata/v1/instance/preempted` (`FALSE`, then `TRUE`) and
//! `.../maintenance-event` (`NONE`), Azure's `metadata/scheduledevents` (no events, then
//! a `Preempt` event naming the VM, `NotBefore` the deadline). A test posts a notice for
//! an instance ([`BootSimulator::post_notice`]); at the deadline the simulator kills
//! the instance's processes, as the cloud would (the instance stays in the API: taking
//! it away is the control plane's, which rayscale then does).
//!
//! Like cloud-init, the first boot of an instance runs its payload: a MIME multi-part
//! payload (as rayscale sends a user's `UserData` beside its boot script) runs its
//! shell-script parts in order; other parts (`#cloud-config`) are skipped. A later boot
//! (a stopped instance started again) runs the scripts in the instance's per-boot
//! directory (`RAYSCALE_PER_BOOT_DIR`, cloud-init's `scripts/per-boot`) instead, except
//! on a cloud that runs its payload at every boot ([`DataPlane::reruns_payload`]). Each
//! instance has its own `HOME` (`<dir>/<id>/home`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The cloud's API as the simulator reads it.
#[async_trait::async_trait]
pub trait DataPlane: Send + Sync {
    /// Running instances of the cluster and their boot payloads (plain text).
    async fn running(&self) -> Result<Vec<(String, String)>, String>;
    /// Whether the cloud runs the payload at every boot (a GCE `startup-script`), not
    /// once (cloud-init user data, whose later boots run the per-boot scripts).
    fn reruns_payload(&self) -> bool {
        false
    }
}

/// What the simulator did, for tests to read.
#[derive(Debug, Default)]
struct Sim {
    live: BTreeMap<String, Child>,
    ever: Vec<String>,
    killed: Vec<String>,
    /// Instances the cloud took back at a notice's deadline: never booted again.
    reclaimed: Vec<String>,
}

/// A cloud's preemption notice (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// An EC2 spot interruption notice (`instance-action`, `terminate`).
    AwsSpot,
    /// An EC2 rebalance recommendation (no deadline: nothing is killed).
    AwsRebalance,
    /// A GCE preemption (`preempted` is `TRUE`).
    GcePreempted,
    /// An Azure Spot eviction (a Scheduled Events `Preempt` event).
    AzurePreempt,
}

/// Metadata paths answered per instance, beyond the fixed ones: `id -> path -> body`.
type Served = Arc<Mutex<BTreeMap<String, BTreeMap<String, String>>>>;

/// The data plane of a cloud, on this machine. Dropping it kills every process it started.
pub struct BootSimulator {
    stop: Arc<AtomicBool>,
    sim: Arc<Mutex<Sim>>,
    served: Served,
    dir: PathBuf,
    port: u16,
    threads: Vec<JoinHandle<()>>,
}

impl BootSimulator {
    /// Starts watching `plane`; each instance runs with `env` added to this process's
    /// environment, under `dir/<id>/` (its payload parts, `sim.log`, and the boot dir).
    pub fn start(plane: Arc<dyn DataPlane>, env: Vec<(String, String)>, dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).expect("simulator dir");
        let stop = Arc::new(AtomicBool::new(false));
        let sim = Arc::new(Mutex::new(Sim::default()));
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("metadata stand-in binds");
        let port = listener.local_addr().expect("address").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let mut threads = Vec::new();
        let served: Served = Arc::default();
        {
            let (stop, served) = (stop.clone(), served.clone());
            threads.push(std::thread::spawn(move || {
                metadata_server(listener, stop, served)
            }));
        }
        {
            let (stop, sim, dir) = (stop.clone(), sim.clone(), dir.clone());
            let rerun = plane.reruns_payload();
            threads.push(std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                while !stop.load(Ordering::Relaxed) {
                    match rt.block_on(plane.running()) {
                        Ok(running) => step(&sim, &running, &env, &dir, port, rerun),
                        Err(e) => eprintln!("boot simulator: reading the cloud: {e}"),
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            }));
        }
        BootSimulator {
            stop,
            sim,
            served,
            dir,
            port,
            threads,
        }
    }

    /// The metadata stand-in's address for instance `id` (what `RAYSCALE_METADATA_URL`
    /// is set to for the instances it boots; for a node it does not boot, as `ray up`'s
    /// head).
    pub fn metadata_url(&self, id: &str) -> String {
        format!("http://127.0.0.1:{}/{id}", self.port)
    }

    /// The cloud warns instance `id` that it takes it back in `deadline`: the notice is
    /// served on its metadata path from now on, and at the deadline its processes are
    /// killed (not for a rebalance recommendation, which has none).
    pub fn post_notice(&self, id: &str, notice: Notice, deadline: Duration) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let at = now + deadline.as_secs();
        let (path, body) = match notice {
            Notice::AwsSpot => (
                "latest/meta-data/spot/instance-action",
                format!(r#"{{"action": "terminate", "time": "{}"}}"#, rfc3339(at)),
            ),
            Notice::AwsRebalance => (
                "latest/meta-data/events/recommendations/rebalance",
                format!(r#"{{"noticeTime": "{}"}}"#, rfc3339(now)),
            ),
            Notice::GcePreempted => ("computeMetadata/v1/instance/preempted", "TRUE".into()),
            Notice::AzurePreempt => (
                "metadata/scheduledevents",
                format!(
                    r#"{{"DocumentIncarnation": 1, "Events": [{{"EventId": "sim-{id}", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["{id}"], "EventStatus": "Scheduled", "NotBefore": "{}", "Description": "Spot eviction", "EventSource": "Platform", "DurationInSeconds": -1}}]}}"#,
                    rfc1123(at)
                ),
            ),
        };
        lock(&self.served)
            .entry(id.to_string())
            .or_default()
            .insert(path.to_string(), body);
        if notice == Notice::AwsRebalance {
            return;
        }
        let (sim, id) = (self.sim.clone(), id.to_string());
        std::thread::spawn(move || {
            std::thread::sleep(deadline);
            let child = {
                let mut s = lock(&sim);
                s.reclaimed.push(id.clone());
                s.live.remove(&id)
            };
            if let Some(child) = child {
                kill_instance(&id, child);
                lock(&sim).killed.push(id);
            }
        });
    }

    /// Instances taken back at a notice's deadline.
    pub fn reclaimed(&self) -> Vec<String> {
        self.lock().reclaimed.clone()
    }

    /// Instances whose processes run now.
    pub fn live(&self) -> Vec<String> {
        self.lock().live.keys().cloned().collect()
    }

    /// Every instance ever booted, in boot order.
    pub fn ever_booted(&self) -> Vec<String> {
        self.lock().ever.clone()
    }

    /// Instances whose processes were killed because the cloud stopped running them.
    pub fn killed(&self) -> Vec<String> {
        self.lock().killed.clone()
    }

    /// The boot log of an instance (its payload's output, the boot script's log, and a
    /// head's rayscale log).
    pub fn log(&self, id: &str) -> String {
        let d = self.dir.join(id);
        let mut s = std::fs::read_to_string(d.join("sim.log")).unwrap_or_default();
        s.push_str(&std::fs::read_to_string(d.join("boot/boot.log")).unwrap_or_default());
        s.push_str(&std::fs::read_to_string(d.join("home/rayscale.log")).unwrap_or_default());
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sim> {
        lock(&self.sim)
    }
}

impl Drop for BootSimulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let mut sim = self.lock();
        let ids: Vec<String> = sim.live.keys().cloned().collect();
        for id in ids {
            if let Some(child) = sim.live.remove(&id) {
                kill_instance(&id, child);
            }
        }
    }
}

fn step(
    sim: &Mutex<Sim>,
    running: &[(String, String)],
    env: &[(String, String)],
    dir: &std::path::Path,
    port: u16,
    rerun: bool,
) {
    let mut s = lock(sim);
    let now: BTreeMap<&str, &str> = running
        .iter()
        .map(|(i, p)| (i.as_str(), p.as_str()))
        .collect();
    // Gone from the API (stopped, terminated): its processes go too.
    let gone: Vec<String> = s
        .live
        .keys()
        .filter(|id| !now.contains_key(id.as_str()))
        .cloned()
        .collect();
    for id in gone {
        if let Some(child) = s.live.remove(&id) {
            kill_instance(&id, child);
            s.killed.push(id);
        }
    }
    for (id, payload) in now {
        if s.live.contains_key(id) || s.reclaimed.iter().any(|r| r == id) {
            continue;
        }
        let again = !rerun && s.ever.iter().any(|e| e == id);
        match boot(id, payload, env, dir, port, again) {
            Ok(child) => {
                s.live.insert(id.to_string(), child);
                s.ever.push(id.to_string());
            }
            Err(e) => eprintln!("boot simulator: booting {id}: {e}"),
        }
    }
}

/// The shell-script parts of a payload, in order.
pub fn shell_parts(payload: &str) -> Vec<String> {
    let first = payload.lines().next().unwrap_or("");
    if !first
        .to_ascii_lowercase()
        .starts_with("content-type: multipart/")
    {
        return if payload.trim_start().starts_with("#cloud-config") {
            Vec::new()
        } else {
            vec![payload.to_string()]
        };
    }
    let Some(b) = first.split("boundary=").nth(1) else {
        return Vec::new();
    };
    let boundary = format!("--{}", b.trim().trim_matches('"'));
    let mut out = Vec::new();
    for part in payload.split(&boundary).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let Some((headers, body)) = part.trim_start_matches(['\r', '\n']).split_once("\n\n") else {
            continue;
        };
        if headers
            .to_ascii_lowercase()
            .contains("content-type: text/x-shellscript")
        {
            out.push(body.trim_end_matches('\n').to_string() + "\n");
        }
    }
    out
}

fn boot(
    id: &str,
    payload: &str,
    env: &[(String, String)],
    dir: &std::path::Path,
    port: u16,
    again: bool,
) -> std::io::Result<Child> {
    let d = dir.join(id);
    std::fs::create_dir_all(d.join("boot"))?;
    std::fs::create_dir_all(d.join("home"))?;
    let per_boot = d.join("per-boot");
    let mut files = Vec::new();
    if again {
        // cloud-init's per-boot scripts, in name order.
        let mut found: Vec<PathBuf> = std::fs::read_dir(&per_boot)
            .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        found.sort();
        files = found;
    } else {
        for (n, p) in shell_parts(payload).iter().enumerate() {
            let f = d.join(format!("part-{n}.sh"));
            std::fs::write(&f, p)?;
            files.push(f);
        }
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(d.join("sim.log"))?;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg("for f in \"$@\"; do bash \"$f\" || exit $?; done")
        .arg("boot")
        .args(&files)
        .env(
            "RAYSCALE_METADATA_URL",
            format!("http://127.0.0.1:{port}/{id}"),
        )
        .env("RAYSCALE_BOOT_DIR", d.join("boot"))
        .env("RAYSCALE_PER_BOOT_DIR", &per_boot)
        .env("HOME", d.join("home"))
        .env("RAYSCALE_SIM_INSTANCE", id)
        // What tells a multi-host slice's hosts apart on this one machine (`@w1`, ...;
        // empty for worker 0 and every other instance): the hosts share their instance's
        // id, so a test's per-node paths (Ray's temp dir) add it.
        .env(
            "RAYSCALE_SIM_HOST_SUFFIX",
            id.find('@').map_or("", |at| &id[at..]),
        )
        // Every step as this process's user, even where a user named as the YAML's
        // `auth.ssh_user` (ubuntu) exists: a simulated node has no other user.
        .env("RAYSCALE_SSH_USER", "")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    cmd.spawn()
}

/// Kills an instance's processes: its process group, then anything else carrying its
/// marker in the environment (Ray's own daemons), SIGTERM first, SIGKILL after 2 s.
fn kill_instance(id: &str, mut child: Child) {
    let pgid = child.id();
    let marked = || marked_processes(id);
    for sig in ["-TERM", "-KILL"] {
        let _ = Command::new("kill")
            .arg(sig)
            .arg("--")
            .arg(format!("-{pgid}"))
            .stderr(Stdio::null())
            .status();
        let pids = marked();
        if !pids.is_empty() {
            let _ = Command::new("kill")
                .arg(sig)
                .args(pids.iter().map(u32::to_string))
                .stderr(Stdio::null())
                .status();
        }
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(2) && !marked().is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn marked_processes(id: &str) -> Vec<u32> {
    crate::processes_with_env(&format!("RAYSCALE_SIM_INSTANCE={id}"))
}

/// EC2's IMDSv2 paths under `/<instance id>/`: a token for a PUT, the id and the
/// (loopback) private address for GETs.
fn metadata_server(listener: TcpListener, stop: Arc<AtomicBool>, served: Served) {
    while !stop.load(Ordering::Relaxed) {
        let (mut s, _) = match listener.accept() {
            Ok(c) => c,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut reader = BufReader::new(match s.try_clone() {
            Ok(c) => c,
            Err(_) => continue,
        });
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        // Skip the headers.
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).map(|n| n == 0).unwrap_or(true) || h == "\r\n" || h == "\n"
            {
                break;
            }
        }
        let mut it = line.split_whitespace();
        let (method, path) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
        let path = path.split('?').next().unwrap_or("");
        let mut segs = path.trim_start_matches('/').splitn(2, '/');
        let (id, rest) = (segs.next().unwrap_or(""), segs.next().unwrap_or(""));
        let posted = lock(&served).get(id).and_then(|m| m.get(rest)).cloned();
        let (status, body) = match (method, rest) {
            ("GET", _) if posted.is_some() => ("200 OK", posted.unwrap_or_default()),
            // Before any notice, as each cloud answers.
            ("GET", "computeMetadata/v1/instance/preempted") => ("200 OK", "FALSE".into()),
            ("GET", "computeMetadata/v1/instance/maintenance-event") => ("200 OK", "NONE".into()),
            ("GET", "metadata/scheduledevents") => (
                "200 OK",
                r#"{"DocumentIncarnation": 0, "Events": []}"#.to_string(),
            ),
            ("PUT", "latest/api/token") => ("200 OK", "rayscale-sim-token".to_string()),
            ("GET", "latest/meta-data/instance-id") => ("200 OK", id.to_string()),
            ("GET", "latest/meta-data/local-ipv4") => ("200 OK", "127.0.0.1".to_string()),
            // The GCE metadata server's (`Metadata-Flavor: Google`).
            // A TPU VM is a Compute Engine VM of Cloud TPU's own name; its TPU node's
            // name is the `instance-id` attribute.
            ("GET", "computeMetadata/v1/instance/name") if tpu_host(id).is_some() => {
                let (node, worker) = tpu_host(id).unwrap_or_default();
                ("200 OK", crate::fakes::gce::tpu_vm_name(node, worker))
            }
            ("GET", "computeMetadata/v1/instance/attributes/instance-id")
                if tpu_host(id).is_some() =>
            {
                ("200 OK", tpu_host(id).unwrap_or_default().0.to_string())
            }
            ("GET", "computeMetadata/v1/instance/attributes/agent-worker-number")
                if tpu_host(id).is_some() =>
            {
                ("200 OK", tpu_host(id).unwrap_or_default().1.to_string())
            }
            ("GET", "computeMetadata/v1/instance/name") => ("200 OK", id.to_string()),
            ("GET", "computeMetadata/v1/instance/network-interfaces/0/ip") => {
                ("200 OK", "127.0.0.1".to_string())
            }
            // Azure's IMDS (`Metadata: true`, `format=text`).
            ("GET", "metadata/instance/compute/name") => ("200 OK", id.to_string()),
            ("GET", "metadata/instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress") => {
                ("200 OK", "127.0.0.1".to_string())
            }
            _ => ("404 Not Found", String::new()),
        };
        let _ = write!(
            s,
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// The TPU node and worker number of a simulated TPU VM's id (see the module docs), or
/// `None` for another cloud's instance.
fn tpu_host(id: &str) -> Option<(&str, usize)> {
    let (node, worker) = match id.split_once("@w") {
        Some((node, w)) => (node, w.parse().ok()?),
        None => (id, 0),
    };
    node.ends_with("-tpu").then_some((node, worker))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// `(year, month, day, hour, minute, second, weekday 0 = Thursday)` of `secs` since the
/// epoch (UTC; Howard Hinnant's days-to-civil).
fn civil(secs: u64) -> (u64, u64, u64, u64, u64, u64, u64) {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y as u64,
        m as u64,
        d as u64,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        days % 7,
    )
}

/// `2026-12-02T12:03:10Z`.
fn rfc3339(secs: u64) -> String {
    let (y, mo, d, h, mi, s, _) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `Wed, 02 Dec 2026 12:03:10 GMT`.
fn rfc1123(secs: u64) -> String {
    let (y, mo, d, h, mi, s, wd) = civil(secs);
    let day = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][wd as usize];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(mo - 1) as usize];
    format!("{day}, {d:02} {month} {y} {h:02}:{mi:02}:{s:02} GMT")
}

#[cfg(test)]
mod time_tests {
    #[test]
    fn dates_as_the_clouds_write_them() {
        assert_eq!(super::rfc3339(1_796_212_990), "2026-12-02T12:03:10Z");
        assert_eq!(
            super::rfc1123(1_796_212_990),
            "Wed, 02 Dec 2026 12:03:10 GMT"
        );
        assert_eq!(super::rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}

/// EC2's data plane: running instances of a cluster (by its `ray-cluster-name` tag) and
/// their `UserData`, read through the EC2 API (moto in tests).
pub struct Ec2Plane {
    /// The EC2 client.
    pub client: aws_sdk_ec2::Client,
    /// The cluster name.
    pub cluster: String,
    /// Whether heads boot too (else the test runs the head).
    heads: bool,
    cache: Mutex<BTreeMap<String, String>>,
}

impl Ec2Plane {
    /// The data plane of `cluster`'s workers behind `client`.
    pub fn new(client: aws_sdk_ec2::Client, cluster: &str) -> Self {
        Ec2Plane {
            client,
            cluster: cluster.to_string(),
            heads: false,
            cache: Mutex::new(BTreeMap::new()),
        }
    }

    /// The head boots too (a launcher's head).
    pub fn with_heads(mut self) -> Self {
        self.heads = true;
        self
    }
}

#[async_trait::async_trait]
impl DataPlane for Ec2Plane {
    async fn running(&self) -> Result<Vec<(String, String)>, String> {
        use aws_sdk_ec2::types::Filter;
        use base64::Engine as _;
        let out = self
            .client
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag:ray-cluster-name")
                    .values(&self.cluster)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .values("running")
                    .build(),
            )
            .send()
            .await
            .map_err(|e| format!("DescribeInstances: {e}"))?;
        let ids: Vec<String> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| {
                self.heads
                    || !i
                        .tags()
                        .iter()
                        .any(|t| t.key() == Some("ray-node-type") && t.value() == Some("head"))
            })
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        let mut res = Vec::new();
        for id in ids {
            let cached = self
                .cache
                .lock()
                .map(|c| c.get(&id).cloned())
                .unwrap_or(None);
            let payload = match cached {
                Some(p) => p,
                None => {
                    let a = self
                        .client
                        .describe_instance_attribute()
                        .instance_id(&id)
                        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
                        .send()
                        .await
                        .map_err(|e| format!("DescribeInstanceAttribute {id}: {e}"))?;
                    let b64 = a.user_data().and_then(|u| u.value()).unwrap_or("");
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .map_err(|e| format!("{id}: user data is not base64: {e}"))?;
                    let p = String::from_utf8_lossy(&bytes).into_owned();
                    if let Ok(mut c) = self.cache.lock() {
                        c.insert(id.clone(), p.clone());
                    }
                    p
                }
            };
            res.push((id, payload));
        }
        Ok(res)
    }
}

/// Compute Engine's data plane: running instances of a cluster (by its
/// `ray-cluster-name` label) and their `startup-script`, read from the fake's state;
/// the script runs at every boot.
pub struct GcePlane {
    fake: Arc<crate::fakes::gce::GceFake>,
    cluster_label: String,
    heads: bool,
}

impl GcePlane {
    /// The data plane of `cluster`'s workers in `fake`.
    pub fn new(fake: Arc<crate::fakes::gce::GceFake>, cluster: &str) -> Self {
        GcePlane {
            fake,
            cluster_label: rayscale_provider_gcp::mapping::label_value(cluster),
            heads: false,
        }
    }

    /// The head boots too (a launcher's head).
    pub fn with_heads(mut self) -> Self {
        self.heads = true;
        self
    }
}

#[async_trait::async_trait]
impl DataPlane for GcePlane {
    async fn running(&self) -> Result<Vec<(String, String)>, String> {
        let label = ("ray-cluster-name", self.cluster_label.as_str());
        let mut out: Vec<(String, String)> = self
            .fake
            .running_with_startup_script(label)
            .into_iter()
            .filter(|(_, _, head)| self.heads || !head)
            .map(|(n, s, _)| (n, s))
            .collect();
        // Every host of a Cloud TPU node runs the node's startup-script (worker 0 under
        // the node's name, the others as `<node>@w<worker>`).
        for (n, s, ips) in self.fake.tpu(|t| t.ready_with_startup_script(label)) {
            for w in 0..ips.len() {
                let id = if w == 0 {
                    n.clone()
                } else {
                    format!("{n}@w{w}")
                };
                out.push((id, s.clone()));
            }
        }
        Ok(out)
    }

    fn reruns_payload(&self) -> bool {
        true
    }
}

/// Azure's data plane: running VMs of a cluster (by its `ray-cluster-name` tag) and
/// their `customData`, read from the fake's state; cloud-init runs it once per VM.
pub struct AzurePlane {
    fake: Arc<crate::fakes::azure::ArmFake>,
    cluster: String,
    heads: bool,
}

impl AzurePlane {
    /// The data plane of `cluster`'s workers in `fake`.
    pub fn new(fake: Arc<crate::fakes::azure::ArmFake>, cluster: &str) -> Self {
        AzurePlane {
            fake,
            cluster: cluster.to_string(),
            heads: false,
        }
    }

    /// The head boots too (a launcher's head).
    pub fn with_heads(mut self) -> Self {
        self.heads = true;
        self
    }
}

#[async_trait::async_trait]
impl DataPlane for AzurePlane {
    async fn running(&self) -> Result<Vec<(String, String)>, String> {
        Ok(self
            .fake
            .running_with_custom_data(("ray-cluster-name", &self.cluster))
            .into_iter()
            .filter(|(_, _, head)| self.heads || !head)
            .map(|(n, s, _)| (n, s))
            .collect())
    }
}

/// Kubernetes' data plane (the kubelet): running pods of the fake API server, not being
/// deleted, each running its Ray container's command with its environment.
pub struct KubePlane {
    fake: Arc<crate::fakes::kube::KubeFake>,
    heads: bool,
}

impl KubePlane {
    /// The worker pods of `fake`.
    pub fn new(fake: Arc<crate::fakes::kube::KubeFake>) -> Self {
        KubePlane { fake, heads: false }
    }
}

#[async_trait::async_trait]
impl DataPlane for KubePlane {
    async fn running(&self) -> Result<Vec<(String, String)>, String> {
        Ok(self
            .fake
            .running_pods()
            .into_iter()
            .filter(|(_, _, head)| self.heads || !head)
            .map(|(n, s, _)| (n, s))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mime_parts_in_order() {
        let p = "Content-Type: multipart/mixed; boundary=\"==B==\"\nMIME-Version: 1.0\n\n\
                 --==B==\nContent-Type: text/cloud-config\n\n#cloud-config\nx: 1\n\
                 --==B==\nContent-Type: text/x-shellscript\n\necho one\n\
                 --==B==\nContent-Type: text/x-shellscript\n\necho two\n--==B==--\n";
        assert_eq!(shell_parts(p), ["echo one\n", "echo two\n"]);
        assert_eq!(shell_parts("#!/bin/sh\necho x\n"), ["#!/bin/sh\necho x\n"]);
        assert!(shell_parts("#cloud-config\n").is_empty());
        // What the AWS provider sends for a user's script beside the boot script.
        let both = rayscale_provider_aws::mapping::user_data(
            Some("#!/bin/sh\necho user"),
            Some("#!/bin/bash\necho boot"),
        )
        .unwrap_or_default();
        assert_eq!(
            shell_parts(&both),
            ["#!/bin/sh\necho user\n", "#!/bin/bash\necho boot\n"]
        );
    }
}
