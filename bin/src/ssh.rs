//! The head over SSH, as Ray's node updater reaches it from the machine that runs
//! `ray up`: `rayscale up` waits until the head's SSH answers (`uptime`, as Ray's
//! `wait_ready`, for `AUTOSCALER_NODE_START_WAIT_S`, 900 s by default, as Ray), copies
//! each `file_mounts` entry with rsync (`-avz`, Ray's `--exclude`/`--filter dir-merge`
//! arguments, a directory's contents into the directory), and then leaves the mark the
//! head's boot waits for before its `initialization_commands`
//! ([`COPIED_MARK`](rayscale_core::config::mounts::COPIED_MARK)).
//!
//! The SSH options are Ray's (`SSHOptions`): the cluster's key, no host key checking and
//! no known-hosts file (a new node may reuse an address), `IdentitiesOnly`, keep-alives,
//! a connect timeout, and `auth.ssh_proxy_command` as `ProxyCommand`. Unlike Ray, no
//! connection sharing (`ControlMaster`): `up` makes a handful of calls.
//!
//! What to copy is read and checked ([`plan`]) before the head is launched, so a missing
//! local path or `auth.ssh_user` launches nothing.
//!
//! Over the same channel `up` pushes a changed cluster config to a running head
//! ([`Push`]), as `ray up` rewrites the head's `~/ray_bootstrap_config.yaml`; the head's
//! rayscale reads that file again on every pass.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rayscale_core::config::ClusterConfig;
use rayscale_core::config::mounts::{copied_mark, expand_home, head_copies, head_location};
use rayscale_core::provider::boot::{PUSHED_MARK, head_mounts_prefix};
use serde_json::Value;

/// How often the head's SSH is tried (Ray's `READY_CHECK_INTERVAL`).
const READY_CHECK: Duration = Duration::from_secs(5);

/// One copy to the head: a local path and where it goes there (a directory's both end
/// in `/`, so rsync puts its contents into the remote directory, as Ray's updater does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    /// The path on this machine (`~` expanded).
    pub local: String,
    /// The path on the head (`~` its SSH user's home; under Ray's host mount location
    /// when the head's Ray runs in a container).
    pub remote: String,
}

/// What `up` copies to the head and how it reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The copies, in the order of their remote paths.
    pub copies: Vec<Copy>,
    /// `auth.ssh_user`.
    pub user: String,
    /// `auth.ssh_private_key` (`~` expanded), if given.
    pub key: Option<PathBuf>,
    /// `auth.ssh_proxy_command`, if given.
    pub proxy: Option<String>,
    /// rsync's arguments for `rsync_exclude` and `rsync_filter`, as Ray gives them.
    pub filters: Vec<String>,
    /// Where the mark the head's boot waits for goes (`config::mounts::copied_mark`).
    pub mark: String,
}

/// Whether every node type names its own Azure `publicKey` (then `up`'s bootstrap makes
/// no key); the Azure provider's own rule, false in a build without it.
fn azure_types_name_their_keys(raw: &Value) -> bool {
    #[cfg(feature = "azure")]
    return rayscale_provider_azure::bootstrap::names::every_type_has_key(raw);
    #[cfg(not(feature = "azure"))]
    {
        let _ = raw;
        false
    }
}

/// What `up` will copy to the head of `config` (`None`: no `file_mounts`), checked: each
/// local path exists (`~` is `home`, a relative path is from the working directory, as
/// for `ray up`), and `auth.ssh_user` is given. Errors name the key.
pub fn plan(config: &ClusterConfig, home: &Path) -> Result<Option<Plan>> {
    build(config, home, false)
}

/// How `up` reaches the head of `config` over SSH to push its config ([`Push`]), with
/// the file mounts' copies (none without `file_mounts`), checked as [`plan`] checks
/// them: `None` when the YAML gives no `auth.ssh_user` (and has no `file_mounts`).
pub fn reach(config: &ClusterConfig, home: &Path) -> Result<Option<Plan>> {
    build(config, home, true)
}

/// [`plan`] (`always` false: `None` without file mounts) or [`reach`].
fn build(config: &ClusterConfig, home: &Path, always: bool) -> Result<Option<Plan>> {
    // The clouds whose head `up` launches and boots (elsewhere `up` says what it does).
    if !["aws", "gcp", "azure"].contains(&config.provider_type.as_str()) {
        return Ok(None);
    }
    let mounts = head_copies(&config.raw)?;
    if mounts.is_empty() && !always {
        return Ok(None);
    }
    let auth = config.raw.get("auth");
    let text = |k: &str| -> Result<Option<String>> {
        match auth.and_then(|a| a.get(k)) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(other) => bail!("auth.{k}: expected a non-empty string, got {other}"),
        }
    };
    let Some(user) = text("ssh_user")? else {
        if mounts.is_empty() {
            return Ok(None);
        }
        bail!(
            "auth.ssh_user: needed to copy file_mounts to the head over SSH (as ray up does); \
             give the image's login user (ubuntu on Ray's AMIs)"
        );
    };
    let key = text("ssh_private_key")?.map(|k| expand_home(&k, home));
    match (&key, config.provider_type.as_str()) {
        // On GCP, `up`'s bootstrap finds or makes Ray's key in the project's metadata.
        // As Ray's Azure config: the private half of auth.ssh_public_key, or of the
        // types' own publicKey (without any, up's bootstrap finds or makes Ray's key).
        (None, "azure")
            if auth
                .and_then(|a| a.get("ssh_public_key"))
                .is_some_and(|k| !k.is_null())
                || azure_types_name_their_keys(&config.raw) =>
        {
            bail!(
                "auth.ssh_private_key: needed on Azure to reach the head over SSH (file_mounts, a changed config) \
             (the private half of auth.ssh_public_key, or of the types' publicKey, as Ray's \
             Azure config asks)"
            )
        }
        (Some(k), _) if !k.is_file() => bail!(
            "auth.ssh_private_key: {}: no such file on this machine",
            k.display()
        ),
        _ => {}
    }
    let prefix = head_mounts_prefix(config)?;
    let mut copies = Vec::new();
    for (remote, local) in mounts {
        let local_path = expand_home(&local, home);
        let meta = std::fs::metadata(&local_path).with_context(|| {
            format!(
                "file_mounts.{remote}: {} on this machine (what rayscale up copies to the head)",
                local_path.display()
            )
        })?;
        let mut local = local_path.display().to_string();
        let mut remote = head_location(&remote, prefix.as_deref());
        if meta.is_dir() {
            for p in [&mut local, &mut remote] {
                if !p.ends_with('/') {
                    p.push('/');
                }
            }
        }
        copies.push(Copy { local, remote });
    }
    let filters = rayscale_core::config::rsync_filter::rsync_args(&config.raw);
    Ok(Some(Plan {
        copies,
        user,
        key,
        proxy: text("ssh_proxy_command")?,
        filters,
        mark: copied_mark(prefix.as_deref()),
    }))
}

impl Plan {
    /// Ray's SSH options, with a connect timeout of `timeout_s`.
    fn ssh_options(&self, timeout_s: u32) -> Vec<String> {
        let mut o = Vec::new();
        if let Some(k) = &self.key {
            o.extend(["-i".to_string(), k.display().to_string()]);
        }
        let mut set = vec![
            ("StrictHostKeyChecking", "no".to_string()),
            ("UserKnownHostsFile", "/dev/null".to_string()),
            ("IdentitiesOnly", "yes".to_string()),
            ("ExitOnForwardFailure", "yes".to_string()),
            ("ServerAliveInterval", "5".to_string()),
            ("ServerAliveCountMax", "3".to_string()),
            // Errors only (no "Permanently added ..." line before an error of rsync's).
            ("LogLevel", "ERROR".to_string()),
            ("ConnectTimeout", format!("{timeout_s}s")),
        ];
        if let Some(p) = &self.proxy {
            set.push(("ProxyCommand", p.clone()));
        }
        for (k, v) in set {
            o.extend(["-o".to_string(), format!("{k}={v}")]);
        }
        o
    }

    /// `ssh ... user@host <command>`.
    fn ssh(&self, host: &str, command: &str, timeout_s: u32) -> Vec<String> {
        let mut argv = vec!["ssh".to_string()];
        argv.extend(self.ssh_options(timeout_s));
        argv.push(format!("{}@{host}", self.user));
        argv.push(command.to_string());
        argv
    }

    /// `rsync --rsh "ssh ..." -avz <filters> <local> user@host:<remote>`, as Ray's
    /// `run_rsync_up`.
    fn rsync(&self, host: &str, copy: &Copy, filtered: bool) -> Result<Vec<String>> {
        let mut rsh = vec!["ssh".to_string()];
        rsh.extend(self.ssh_options(120));
        let mut argv = vec![
            "rsync".to_string(),
            "--rsh".to_string(),
            rsh_line(&rsh)?,
            "-avz".to_string(),
        ];
        if filtered {
            argv.extend(self.filters.iter().cloned());
        }
        argv.push(copy.local.clone());
        argv.push(format!("{}@{host}:{}", self.user, copy.remote));
        Ok(argv)
    }
}

/// rsync's `--rsh` value: the words joined by spaces, a word with a space or a quote in
/// single quotes (or double quotes when it has a single one; rsync splits on spaces and
/// honours both quotes, not backslashes).
fn rsh_line(words: &[String]) -> Result<String> {
    let quoted: Result<Vec<String>> = words
        .iter()
        .map(|w| {
            if !w.is_empty() && !w.contains([' ', '\'', '"']) {
                Ok(w.clone())
            } else if !w.contains('\'') {
                Ok(format!("'{w}'"))
            } else if !w.contains('"') {
                Ok(format!("\"{w}\""))
            } else {
                bail!("{w:?}: rsync cannot be given an ssh option with both kinds of quote")
            }
        })
        .collect();
    Ok(quoted?.join(" "))
}

/// `path` for the head's shell: a leading `~/` left for the shell to expand, the rest
/// quoted.
fn remote_path(path: &str) -> String {
    match path.strip_prefix("~/") {
        Some(rest) => format!("~/{}", quote(rest)),
        None if path == "~" => "~".to_string(),
        None => quote(path),
    }
}

/// `s` single-quoted for a POSIX shell unless it needs no quotes.
pub fn quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./+@%=:,".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The directory Ray's updater makes before a copy (`mkdir -p dirname(remote)`, the
/// remote path with its trailing `/` when a directory): `None` when there is none.
fn parent_of(remote: &str) -> Option<&str> {
    remote
        .rfind('/')
        .map(|i| &remote[..i])
        .filter(|p| !p.is_empty())
}

/// The head's shell command that makes the directory of `path` and then runs `write`
/// followed by `path` (`touch `, `printf ... >`).
fn write_on_head(path: &str, write: &str) -> String {
    match parent_of(path) {
        Some(dir) => format!(
            "mkdir -p {} && {write}{}",
            remote_path(dir),
            remote_path(path)
        ),
        None => format!("{write}{}", remote_path(path)),
    }
}

/// Runs `argv`, for at most `limit` when given (then it is killed); an error is its
/// failure with the last three lines it wrote to stderr, on one line (rsync's last line
/// alone is its exit code, after the cause).
async fn run(argv: &[String], limit: Option<Duration>) -> Result<()> {
    let (program, args) = argv.split_first().context("an empty command")?;
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match limit {
        Some(l) => tokio::time::timeout(l, child)
            .await
            .map_err(|_| anyhow::anyhow!("{program} did not end within {} s", l.as_secs()))?,
        None => child.await,
    }
    .with_context(|| format!("cannot run {program} (is it installed?)"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let mut last: Vec<&str> = err
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(3)
        .collect();
    last.reverse();
    let last = if last.is_empty() {
        "no error output".to_string()
    } else {
        last.join(" / ")
    };
    bail!("{program} failed ({}): {last}", out.status)
}

/// Pushes `p` to the head at `host`: first the mark naming the instance (so that a boot
/// reaching its config step from now on keeps what is pushed, never the other way
/// round), then the file, replaced whole (rsync writes a temporary file and renames
/// it), mode 0600 as the boot writes it, without the mounts' filters.
async fn push_config(plan: &Plan, host: &str, p: &Push<'_>) -> Result<()> {
    let mark = write_on_head(
        &format!("~/{PUSHED_MARK}"),
        &format!("printf '%s' {} >", quote(p.instance_id)),
    );
    run(&plan.ssh(host, &mark, 120), Some(Duration::from_secs(300)))
        .await
        .context("marking the head's config as pushed")?;
    let dir = std::env::temp_dir().join(format!(
        "rayscale-push-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let result = async {
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("making {}", dir.display()))?;
        let file = dir.join("ray_bootstrap_config.yaml");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)
            .with_context(|| format!("writing {}", file.display()))?;
        f.write_all(p.text.as_bytes())
            .and_then(|()| f.write_all(b"\n"))
            .with_context(|| format!("writing {}", file.display()))?;
        let copy = Copy {
            local: file.display().to_string(),
            remote: "~/ray_bootstrap_config.yaml".to_string(),
        };
        run(
            &plan.rsync(host, &copy, false)?,
            Some(Duration::from_secs(300)),
        )
        .await
        .context("pushing the cluster config to the head's ~/ray_bootstrap_config.yaml")
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// How long the head's SSH is waited for: Ray's `AUTOSCALER_NODE_START_WAIT_S` (900 s).
pub fn ssh_wait() -> Duration {
    std::env::var("AUTOSCALER_NODE_START_WAIT_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(Duration::from_secs(900), Duration::from_secs)
}

/// A cluster config for a running head (`up` over a head whose config differs).
pub struct Push<'a> {
    /// The text its boot would write ([`rayscale_core::provider::boot::head_config_text`]).
    pub text: &'a str,
    /// The head's cloud instance id (written beside it: the head's boot keeps the pushed
    /// config of its own instance, [`PUSHED_MARK`]).
    pub instance_id: &'a str,
}

/// Waits for the head's SSH at `host`, copies the mounts there, pushes `push` to the
/// head's `~/ray_bootstrap_config.yaml` (its rayscale reads it again on its next pass),
/// and leaves the mark its boot waits for (with no mounts too: a head launched with
/// some that a later YAML dropped goes on). Returns how many mounts were copied. Between
/// tries `head_gone` is asked whether the cloud shows the head gone (`Some(what)`, only
/// on the cloud's word): then it stops waiting.
pub async fn copy_to_head(
    plan: &Plan,
    host: &str,
    wait: Duration,
    head_gone: impl AsyncFn() -> Option<String>,
    push: Option<&Push<'_>>,
) -> Result<usize> {
    let started = Instant::now();
    loop {
        // Each try bounded: a stuck proxy command or session is not waited for.
        match run(&plan.ssh(host, "uptime", 10), Some(Duration::from_secs(30))).await {
            Ok(()) => break,
            Err(e) if started.elapsed() >= wait => {
                let waits = match (plan.copies.is_empty(), push.is_some()) {
                    (true, _) => "the head keeps its config (this one was not pushed)",
                    (false, false) => "the head waits for its file mounts",
                    (false, true) => {
                        "the head waits for its file mounts and keeps its config (this one \
                         was not pushed)"
                    }
                };
                bail!(
                    "the head's SSH at {}@{host} did not answer within {} s (last: {e:#}); \
                     {waits}: run rayscale up again once it answers, or rayscale down",
                    plan.user,
                    wait.as_secs()
                )
            }
            Err(e) => tracing::info!("waiting for the head's SSH at {host}: {e:#}"),
        }
        // A head the cloud took away will never answer: say so now, not after `wait`.
        if let Some(why) = head_gone().await {
            bail!(
                "the head {why} while up waited for its SSH at {host}; nothing was copied: \
                 rayscale up again launches a new one"
            );
        }
        tokio::time::sleep(READY_CHECK).await;
    }
    for c in &plan.copies {
        if let Some(dir) = parent_of(&c.remote) {
            run(
                &plan.ssh(host, &format!("mkdir -p {}", remote_path(dir)), 120),
                Some(Duration::from_secs(300)),
            )
            .await
            .with_context(|| format!("making {dir} on the head"))?;
        }
        // No bound: a large mount takes what it takes (keep-alives end a dead link).
        run(&plan.rsync(host, c, true)?, None)
            .await
            .with_context(|| format!("copying {} to {} on the head", c.local, c.remote))?;
        tracing::info!(
            "file mount {} copied to the head from {}",
            c.remote,
            c.local
        );
    }
    if let Some(p) = push {
        push_config(plan, host, p).await?;
    }
    let mark = write_on_head(&plan.mark, "touch ");
    run(&plan.ssh(host, &mark, 120), Some(Duration::from_secs(300)))
        .await
        .context("leaving the mark the head's boot waits for (its file mounts copied)")?;
    Ok(plan.copies.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> ClusterConfig {
        ClusterConfig::from_yaml_str(
            &format!(
                "cluster_name: c\nprovider: {{type: aws, region: us-east-1}}\nhead_node_type: h\n\
                 available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n{extra}"
            ),
            "c.yaml",
        )
        .expect("loads")
    }

    /// A directory of the test `name`'s own (tests run at once).
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rayscale-ssh-{name}-{}", std::process::id()));
        std::fs::create_dir_all(d.join("code")).expect("scratch");
        std::fs::write(d.join("cred.json"), "{}").expect("scratch");
        std::fs::write(d.join("k.pem"), "key").expect("scratch");
        d
    }

    /// Without `file_mounts` `up` copies nothing, but reaches a head with
    /// `auth.ssh_user` to push a changed config (leaving the mark the head may wait for,
    /// and the config without the mounts' filters).
    #[test]
    fn a_head_is_reached_to_push_its_config_with_or_without_mounts() {
        let home = scratch("reach");
        let with_user = config(
            "auth: {ssh_user: ubuntu, ssh_private_key: ~/k.pem}
rsync_exclude: ['*.yaml']
",
        );
        assert_eq!(plan(&with_user, &home).expect("plan"), None);
        let p = reach(&with_user, &home).expect("reach").expect("a user");
        assert!(p.copies.is_empty());
        assert_eq!(p.mark, copied_mark(None));
        let copy = Copy {
            local: "/tmp/x/ray_bootstrap_config.yaml".into(),
            remote: "~/ray_bootstrap_config.yaml".into(),
        };
        let argv = p.rsync("10.0.0.5", &copy, false).expect("argv");
        assert!(!argv.iter().any(|a| a.contains("*.yaml")), "{argv:?}");
        assert!(
            p.rsync("10.0.0.5", &copy, true)
                .expect("argv")
                .iter()
                .any(|a| a == "*.yaml")
        );
        // Ray's defaults give `auth.ssh_user: ubuntu` to a YAML without `auth`; an
        // `auth` without a user reaches nothing.
        assert!(reach(&config(""), &home).expect("reach").is_some());
        assert_eq!(reach(&config("auth: {}\n"), &home).expect("reach"), None);
        let missing = config(
            "auth: {ssh_user: ubuntu, ssh_private_key: ~/nope.pem}
",
        );
        let e = reach(&missing, &home).expect_err("no key file").to_string();
        assert!(e.contains("nope.pem: no such file"), "{e}");
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn the_plan_is_rays_copy_with_rays_options() {
        let home = scratch("rays");
        let c = config(
            "auth: {ssh_user: ubuntu, ssh_private_key: ~/k.pem, ssh_proxy_command: 'nc %h 22'}\n\
             file_mounts: {'~/code': '~/code', '/etc/cred.json': '~/cred.json'}\n\
             rsync_exclude: ['**/.git']\nrsync_filter: [.gitignore]\n",
        );
        let p = plan(&c, &home).expect("plan").expect("mounts");
        let h = home.display();
        assert_eq!(
            p.copies,
            [
                Copy {
                    local: format!("{h}/cred.json"),
                    remote: "/etc/cred.json".into()
                },
                Copy {
                    local: format!("{h}/code/"),
                    remote: "~/code/".into()
                },
            ]
        );
        let argv = p.rsync("10.0.0.5", &p.copies[1], true).expect("argv");
        assert_eq!(argv[0], "rsync");
        assert_eq!(argv[1], "--rsh");
        assert!(
            argv[2].starts_with(&format!("ssh -i {h}/k.pem -o StrictHostKeyChecking=no "))
                && argv[2].contains("-o ConnectTimeout=120s")
                && argv[2].ends_with("-o 'ProxyCommand=nc %h 22'"),
            "{}",
            argv[2]
        );
        assert_eq!(
            argv[3..],
            [
                "-avz",
                "--exclude",
                "**/.git",
                "--filter",
                "dir-merge,- .gitignore",
                &format!("{h}/code/"),
                "ubuntu@10.0.0.5:~/code/"
            ]
        );
        let ssh = p.ssh("10.0.0.5", "uptime", 10);
        assert_eq!(ssh[ssh.len() - 2..], ["ubuntu@10.0.0.5", "uptime"]);
        assert!(
            ssh.contains(&"ProxyCommand=nc %h 22".to_string()),
            "{ssh:?}"
        );
        assert!(ssh.contains(&"ConnectTimeout=10s".to_string()), "{ssh:?}");
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn a_docker_head_gets_them_under_rays_host_mount_location() {
        let home = scratch("docker");
        let c = config(
            "auth: {ssh_user: ubuntu}\nfile_mounts: {'~/code': '~/code'}\n\
             docker: {image: rayproject/ray, container_name: ray_container}\n",
        );
        let p = plan(&c, &home).expect("plan").expect("mounts");
        assert_eq!(p.copies[0].remote, "/tmp/ray_tmp_mount/c/~/code/");
        // The mark beside the copies: a head whose /tmp was emptied waits for `up` again.
        assert_eq!(p.mark, "/tmp/ray_tmp_mount/c/.rayscale-file-mounts.copied");
        assert_eq!(p.key, None);
        assert!(!p.ssh("h", "uptime", 10).contains(&"-i".to_string()));
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn what_cannot_be_copied_is_said_before_anything_is_launched() {
        let home = scratch("refused");
        assert_eq!(plan(&config(""), &home).expect("plan"), None);
        assert_eq!(
            plan(&config("file_mounts: {}\n"), &home).expect("plan"),
            None
        );
        // Without `auth`, Ray's default user for the cloud; with an `auth` naming none, an
        // error before anything is launched.
        let p = plan(&config("file_mounts: {'~/code': '~/code'}\n"), &home)
            .expect("plan")
            .expect("mounts");
        assert_eq!(p.user, "ubuntu");
        let e = plan(
            &config("auth: {}\nfile_mounts: {'~/code': '~/code'}\n"),
            &home,
        )
        .expect_err("no user");
        assert!(e.to_string().starts_with("auth.ssh_user: needed"), "{e}");
        let gcp = ClusterConfig::from_yaml_str(
            "cluster_name: c\nprovider: {type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: p}\n\
             head_node_type: h\nauth: {ssh_user: u}\nfile_mounts: {'~/code': '~/code'}\n\
             available_node_types:\n  h: {resources: {}, node_config: {machineType: n1-standard-2}}\n",
            "g.yaml",
        )
        .expect("loads");
        // On GCP no key is needed here: up's bootstrap finds or makes Ray's.
        let p = plan(&gcp, &home).expect("plan").expect("mounts");
        assert_eq!((p.user.as_str(), p.key), ("u", None));
        // On Azure neither: the same (Ray's key); the public half alone: its private one.
        let azure = |auth: &str| {
            ClusterConfig::from_yaml_str(
                &format!(
                    "cluster_name: c\nprovider: {{type: azure, location: westus2, resource_group: rg}}\n\
                     head_node_type: h\nauth: {{ssh_user: u{auth}}}\nfile_mounts: {{'~/code': '~/code'}}\n\
                     available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
                ),
                "a.yaml",
            )
            .expect("loads")
        };
        let p = plan(&azure(""), &home).expect("plan").expect("mounts");
        assert_eq!(p.key, None);
        let e = plan(&azure(", ssh_public_key: ~/k.pub"), &home).expect_err("no private key");
        assert!(
            e.to_string()
                .starts_with("auth.ssh_private_key: needed on Azure"),
            "{e}"
        );
        let own = ClusterConfig::from_value(
            &{
                let mut v = azure("").raw;
                v["available_node_types"]["h"]["node_config"] =
                    serde_json::json!({"azure_arm_parameters": {"publicKey": "ssh-rsa AAAA"}});
                v
            },
            "a.yaml",
        )
        .expect("loads");
        let e = plan(&own, &home).expect_err("the types' own key, no private half");
        assert!(
            e.to_string()
                .starts_with("auth.ssh_private_key: needed on Azure"),
            "{e}"
        );
        let e = plan(
            &config("auth: {ssh_user: u, ssh_private_key: ~/none.pem}\nfile_mounts: {'~/code': '~/code'}\n"),
            &home,
        )
        .expect_err("no key file");
        assert!(
            e.to_string().starts_with("auth.ssh_private_key: ")
                && e.to_string().contains("none.pem"),
            "{e}"
        );
        let e = plan(
            &config("auth: {ssh_user: u}\nfile_mounts: {'~/x': '~/missing'}\n"),
            &home,
        )
        .expect_err("missing");
        assert!(
            format!("{e:#}").starts_with("file_mounts.~/x: ")
                && format!("{e:#}").contains("missing"),
            "{e:#}"
        );
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn shells_and_rsync_get_their_quoting() {
        assert_eq!(remote_path("~/my code"), "~/'my code'");
        assert_eq!(remote_path("~"), "~");
        assert_eq!(remote_path("/etc/a"), "/etc/a");
        assert_eq!(remote_path("/x/it's"), r"'/x/it'\''s'");
        assert_eq!(parent_of("~/code/"), Some("~/code"));
        assert_eq!(parent_of("~/cred.json"), Some("~"));
        assert_eq!(parent_of("/etc"), None);
        assert_eq!(parent_of("x"), None);
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            rsh_line(&w(&["ssh", "-o", "ProxyCommand=nc %h 22"])).expect("line"),
            "ssh -o 'ProxyCommand=nc %h 22'"
        );
        assert_eq!(
            rsh_line(&w(&["-o", "ProxyCommand=sh -c 'nc %h 22'"])).expect("line"),
            "-o \"ProxyCommand=sh -c 'nc %h 22'\""
        );
        assert!(rsh_line(&w(&["a'\""])).is_err());
    }
}
