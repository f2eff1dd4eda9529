//! [`MotoEc2`]: moto's EC2 server behind rayscale's fault switch (`tests/fakes/moto_ec2.py`),
//! started on a free loopback port with the venv named by `RAYSCALE_PYTHON`, stopped (and
//! its process killed) on drop. Each test starts its own server, so tests never share
//! EC2 state; `reset` empties it within a test.
//!
//! The switch adds what moto cannot do (see the script): ClientToken idempotency, EC2's
//! MinCount/MaxCount semantics, per-type capacity (`InsufficientInstanceCapacity`),
//! throttling (`RequestLimitExceeded`) and any error for the next RunInstances.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::ray_head::ray_from_env;

/// A running moto EC2 server with its fault switch.
pub struct MotoEc2 {
    child: Child,
    // Held open: the server stops when its stdin closes (even if this process is killed).
    _stdin: Option<ChildStdin>,
    port: u16,
    /// The HOME [`MotoEc2::rayscale`] runs the CLI with: `rayscale up` writes the key
    /// pair it makes under `~/.ssh`, which must not be the user's. Removed on drop.
    home: PathBuf,
}

/// The "remote" head of `tests/fakes/ray_up`'s ssh and rsync ([`MotoEc2::ray_cli`]).
pub struct FakeSshHead<'a> {
    /// The head's home: `~` of every command and copy.
    pub home: &'a std::path::Path,
    /// The PATH its commands run with.
    pub path: String,
    /// The value of `RAYSCALE_SIM_INSTANCE` its processes carry (`ray stop` stops those).
    pub marker: &'a str,
    /// Where each ssh and rsync call is written down.
    pub ssh_log: &'a std::path::Path,
}

impl FakeSshHead<'_> {
    /// The environment that points a command's `ssh` and `rsync` at this head: `PATH`
    /// with `tests/fakes/ray_up` before `path_after`, and the fakes' `FAKE_*` settings.
    pub fn env(&self, path_after: &str) -> Vec<(&'static str, String)> {
        let fakes = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fakes/ray_up");
        vec![
            ("PATH", format!("{}:{path_after}", fakes.display())),
            ("FAKE_HEAD_HOME", self.home.display().to_string()),
            ("FAKE_HEAD_PATH", self.path.clone()),
            ("FAKE_HEAD_MARKER", self.marker.to_string()),
            ("FAKE_SSH_LOG", self.ssh_log.display().to_string()),
        ]
    }
}

/// The region every test uses (moto serves any).
pub const REGION: &str = "us-east-1";

impl MotoEc2 {
    /// Starts a server; panics with the reason if it cannot (no moto in the venv, ...).
    pub fn start() -> MotoEc2 {
        let (python, _) = ray_from_env();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fakes/moto_ec2.py");
        let mut child = Command::new(&python)
            .arg(&script)
            .env("RAYSCALE_CONTRACT_TEST", super::record::test_name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} {}: {e}", python.display(), script.display()));
        let stdin = child.stdin.take();
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut reader = BufReader::new(stdout);
        if reader.read_line(&mut line).is_err() || !line.starts_with("PORT ") {
            let _ = child.kill();
            panic!(
                "moto's EC2 server did not start (is moto[server]==5.2.5 in the venv? \
                 scripts/setup-python.sh installs it); it said {line:?}"
            );
        }
        let port = line[5..].trim().parse().expect("a port number");
        let home =
            std::env::temp_dir().join(format!("rayscale-moto-home-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("a temporary HOME");
        MotoEc2 {
            child,
            _stdin: stdin,
            port,
            home,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An EC2 client for this server (fixed test credentials, region [`REGION`]).
    pub fn client(&self) -> aws_sdk_ec2::Client {
        rayscale_provider_aws::client::for_endpoint(&self.endpoint(), REGION)
            .expect("a loopback endpoint")
    }

    /// The standard AWS chain's variables, pointed at this server: test credentials, no
    /// instance metadata lookups, no profile files. (No HOME: [`MotoEc2::rayscale`] and
    /// the tests that run `rayscale up` themselves give [`MotoEc2::home`].)
    pub fn cli_env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("AWS_CONFIG_FILE", "/dev/null".into()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
            // Nothing made in moto's IAM needs time to spread.
            ("RAYSCALE_IAM_WAIT_S", "0".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// What Ray's `ray up` computes (`scripts/ray_aws_up.py --what <what>`) for `yaml` on
    /// this server (`home`: the HOME it runs with, where Ray writes a key pair it makes).
    pub fn rays_up(
        &self,
        yaml: &std::path::Path,
        what: &str,
        home: Option<&std::path::Path>,
    ) -> Result<serde_json::Value, String> {
        let (python, _) = crate::ray_head::ray_from_env();
        let script =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ray_aws_up.py");
        let mut cmd = std::process::Command::new(&python);
        if let Some(h) = home {
            cmd.env("HOME", h);
        }
        let out = cmd
            .arg(&script)
            .args(["--endpoint", &self.endpoint(), "--what", what, "--config"])
            .arg(yaml)
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        // Ray logs to stdout before the answer: the answer is the last line.
        let last = stdout.lines().last().unwrap_or("");
        serde_json::from_str(last).map_err(|e| format!("Ray's answer {last:?}: {e}"))
    }

    /// An IAM client against this server (moto serves IAM beside EC2).
    pub fn iam_client(&self) -> aws_sdk_iam::Client {
        rayscale_provider_aws::client::iam_for_endpoint(&self.endpoint(), REGION)
            .expect("loopback endpoint")
    }

    /// Ray's IAM role and instance profile (`ray-autoscaler-v1`), made with boto3 as
    /// `ray up` makes them: Ray's bootstrap makes them unless they exist, then sleeps 30 s
    /// "for propagation", so a test that runs Ray's CLI makes them first, as an account
    /// that ran `ray up` before has them. Panics with boto3's error.
    pub fn make_rays_iam_role(&self) {
        let (python, _) = ray_from_env();
        let out = Command::new(&python)
            .arg("-c")
            .arg(concat!(
                "import boto3, json\n",
                "iam = boto3.client('iam')\n",
                "doc = {'Statement': [{'Effect': 'Allow', 'Principal': {'Service': 'ec2.amazonaws.com'}, 'Action': 'sts:AssumeRole'}]}\n",
                "iam.create_role(RoleName='ray-autoscaler-v1', AssumeRolePolicyDocument=json.dumps(doc))\n",
                "iam.attach_role_policy(RoleName='ray-autoscaler-v1', PolicyArn='arn:aws:iam::aws:policy/AmazonEC2FullAccess')\n",
                "iam.create_instance_profile(InstanceProfileName='ray-autoscaler-v1')\n",
                "iam.add_role_to_instance_profile(InstanceProfileName='ray-autoscaler-v1', RoleName='ray-autoscaler-v1')\n",
            ))
            .envs(self.cli_env())
            .env("AWS_DEFAULT_REGION", REGION)
            .output()
            .expect("python");
        assert!(
            out.status.success(),
            "making Ray's IAM role: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Ray's own CLI (`ray`, from the venv) pointed at this server, with HOME `home` and
    /// SSH and rsync played by `tests/fakes/ray_up` against `head` (its "remote" side).
    /// Add the arguments and run it.
    pub fn ray_cli(&self, home: &std::path::Path, head: &FakeSshHead<'_>) -> Command {
        let (python, _) = ray_from_env();
        let venv_bin = python.parent().map(PathBuf::from).unwrap_or_default();
        let mut cmd = Command::new(venv_bin.join("ray"));
        cmd.envs(self.cli_env())
            .env("HOME", home)
            .env("AWS_DEFAULT_REGION", REGION)
            .envs(head.env(&format!(
                "{}:{}",
                venv_bin.display(),
                std::env::var("PATH").unwrap_or_default()
            )))
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .stdin(Stdio::null());
        cmd
    }

    /// A HOME for `rayscale up` against this server (a fresh directory per server).
    pub fn home(&self) -> &std::path::Path {
        &self.home
    }

    /// Runs the workspace's `rayscale` with `args` against this server (the launcher
    /// polling every 0.5 s): whether it succeeded, and its stdout then stderr.
    pub fn rayscale(&self, args: &[&str]) -> (bool, String) {
        self.rayscale_env(args, &[])
    }

    /// The workspace's `rayscale` with `args` against this server, with more `env`.
    fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(crate::workspace_bin("rayscale"));
        c.args(args)
            .env("PATH", crate::loopback_ssh_path())
            .envs(self.cli_env())
            .envs(env.iter().copied())
            .env("HOME", &self.home)
            .env("RAYSCALE_LAUNCHER_POLL_S", "0.5")
            .stdin(Stdio::null());
        c
    }

    /// [`MotoEc2::rayscale`] with more environment.
    pub fn rayscale_env(&self, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
        let out = self.cli(args, env).output().expect("rayscale runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    /// [`Self::rayscale_env`], calling `at_line` once, while the CLI still runs, on the
    /// first line of its log (stderr) that contains `marker`: a test acts at a known
    /// point of the CLI's work instead of racing it.
    pub fn rayscale_at(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        marker: &str,
        at_line: impl FnOnce(),
    ) -> (bool, String) {
        let mut child = self
            .cli(args, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rayscale runs");
        let mut stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let mut log = String::new();
        let mut at_line = Some(at_line);
        for line in BufReader::new(child.stderr.take().expect("piped")).lines() {
            let Ok(line) = line else { break };
            if line.contains(marker)
                && let Some(f) = at_line.take()
            {
                f();
            }
            log.push_str(&line);
            log.push('\n');
        }
        let status = child.wait().expect("rayscale exits");
        let out = reader.join().expect("the stdout reader");
        (status.success(), out + &log)
    }

    /// Empties moto (instances, VPCs recreated with new ids) and the switch.
    pub fn reset(&self) {
        self.post("/moto-api/reset", "{}");
    }

    /// Sets faults: `{"capacity": {"m5.large": 0}, "uncap": [..], "throttle_next": 2,
    /// "error_next": {"code": "VcpuLimitExceeded", "status": 400}, "linger": [..],
    /// "release": [..]}` (see `moto_ec2.py`).
    pub fn faults(&self, json: &str) {
        self.post("/_rayscale/faults", json);
    }

    /// Calls the server saw, by EC2 action (`{"calls": {...}, "instances_launched": n}`).
    pub fn stats(&self) -> serde_json::Value {
        let body = self.request("GET", "/_rayscale/stats", "");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("stats {body:?}: {e}"))
    }

    /// How many RunInstances calls named `instance_type`.
    pub fn runs_of(&self, instance_type: &str) -> u64 {
        self.stats()["run_by_type"][instance_type]
            .as_u64()
            .unwrap_or(0)
    }

    /// How many calls of `action` the server saw.
    pub fn calls(&self, action: &str) -> u64 {
        self.stats()["calls"][action].as_u64().unwrap_or(0)
    }

    fn post(&self, path: &str, body: &str) {
        self.request("POST", path, body);
    }

    fn request(&self, method: &str, path: &str, body: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("connecting to moto: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).expect("write to moto");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read from moto");
        let (head, rest) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        assert!(
            head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
            "{method} {path}: {head}"
        );
        rest.to_string()
    }

    /// The ids of moto's default subnets (they change with every reset), sorted.
    pub async fn default_subnets(&self) -> Vec<String> {
        let out = self
            .client()
            .describe_subnets()
            .send()
            .await
            .unwrap_or_else(|e| panic!("DescribeSubnets: {e}"));
        let mut ids: Vec<String> = out
            .subnets()
            .iter()
            .filter_map(|s| s.subnet_id().map(str::to_string))
            .collect();
        ids.sort();
        ids
    }
}

impl Drop for MotoEc2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}
