//! The boot script: what a new node runs at first boot to join the cluster, rendered by
//! one function for every cloud (EC2 `UserData`, GCE `startup-script`, Azure
//! `customData`). Each cloud decides only where the script goes and how the instance
//! learns its own id ([`BootTarget::instance_id_command`]).
//!
//! Ray starts a worker over SSH from the head (its NodeUpdater); rayscale starts it at
//! boot instead, with the same YAML keys and the same environment Ray's updater sets:
//!
//! 1. `initialization_commands` (the node type's own, else the cluster's), on the host;
//! 2. `setup_commands` then `worker_setup_commands` (the node type's own, else the
//!    cluster's), as Ray's `merge_setup_commands` joins them;
//! 3. `worker_start_ray_commands`;
//!
//! each step's commands as `auth.ssh_user` (when that user exists, which a head waits
//! up to 60 s for, `RAYSCALE_USER_WAIT_S`; else as the user the script runs as;
//! `RAYSCALE_SSH_USER` in the script's environment overrides it, empty for the user the
//! script runs as: the tests' boot simulator sets it so), under `set -e`, with
//! `RAY_HEAD_IP`, `RAY_CLOUD_INSTANCE_ID`, `RAY_NODE_TYPE_NAME`, and the type's resources and labels as `RAY_OVERRIDE_RESOURCES`
//! / `RAY_OVERRIDE_LABELS` (Ray's `ray_installer.py` and `updater.py`). With a `docker:`
//! block, steps 2 and 3 run inside the container, started as Ray's `DockerCommandRunner`
//! starts it (`docker run -d ... --net=host <image> bash`, with the role's image and run
//! options, `/dev/shm` sized and the NVIDIA runtime added as Ray detects them, `podman`
//! with `use_podman`), and step 1 on the host.
//!
//! Where the YAML has no `worker_start_ray_commands`, Ray's AWS defaults apply
//! (`ray stop`, then `ray start --address=$RAY_HEAD_IP:6379 --object-manager-port=8076`
//! under `ulimit -n 65536`). No default setup command is added: Ray's default installs a
//! nightly wheel, and an image with Ray in it is what production clusters use.
//!
//! # The head ([`render_head`])
//! The launcher's head runs the same steps with the head's keys (`head_setup_commands`,
//! `head_start_ray_commands`, Ray's defaults when absent), learns its own private address
//! from the metadata service (`RAY_HEAD_IP`), writes the cluster YAML where Ray's head
//! keeps it (`~/ray_bootstrap_config.yaml`), and starts Ray's head as the head of an
//! external autoscaler: `RAY_enable_autoscaler_v2=1` and `--no-monitor` added to every
//! `ray start --head` that lacks it (Ray's own monitor would act on the cluster too).
//! Then it starts `rayscale run` in the background (with `--autostop-head`: autostop,
//! when `rayscale.autostop_minutes` is set now or in a config `up` pushes later, stops
//! the head of a cluster `up` launched too), as the SSH user, on the
//! host (with a `docker:` block too), logging to `~/rayscale.log`. `RAYSCALE_BIN` names
//! the binary; else `rayscale` on the user's `PATH` (an image with it, or a
//! `head_setup_commands` that installs it); else the boot installs the `rayscale` wheel
//! with the Python beside `ray` into `~/.rayscale` from where `rayscale.install` says
//! (the exact wheel file, checked against its pinned sha256; a `find_links` with pip's
//! `--no-index`; the package index only with `index: true`), and a failed install stops
//! the boot, saying why. Without `rayscale.install` nothing is installed from anywhere:
//! a head without `rayscale` stops its boot, saying how to give it.
//!
//! # Secrets
//! A string of the cluster YAML that holds an obvious secret (an AWS key, a private key,
//! a GitHub, Slack or Google token) is refused before any script is rendered: the
//! script goes into user data, readable through the metadata service (`secrets.rs`).
//!
//! # Every boot
//! On clouds whose images run the script once per instance (cloud-init's `scripts-user`:
//! EC2, Azure), a stopped and restarted node must run it again (a cached worker, Ray's
//! `cache_stopped_nodes`). With [`BootTarget::per_boot`] the script installs itself in
//! cloud-init's per-boot directory (`RAYSCALE_PER_BOOT_DIR`, by default
//! `/var/lib/cloud/scripts/per-boot`), which cloud-init runs at every later boot.

mod docker;
mod install;
mod mounts;
mod notice;
mod secrets;

use serde_json::Value;

use docker::docker_settings;
use install::install_lines;

use mounts::wait_for_copies;

pub use mounts::{head_mounts_prefix, worker_mount_commands};
pub use notice::{NOTICE_PY, NoticeCloud, Watcher, worker_gcs_address};

use crate::CoreError;
use crate::config::ClusterConfig;
use crate::config::install::InstallSettings;

/// The YAML path of the install settings, for errors.
const INSTALL_PATH: &str = "rayscale.install";

/// Where a worker's boot script will run and how it finds out who it is.
#[derive(Debug, Clone, PartialEq)]
pub struct BootTarget<'a> {
    /// The node type (a key of `available_node_types`).
    pub node_type: &'a str,
    /// The head's address as workers reach it (`RAY_HEAD_IP`).
    pub head_ip: &'a str,
    /// A shell command that prints the instance's cloud id (the cloud's metadata
    /// service); it may read `RAYSCALE_METADATA_URL` (a stand-in's address in tests).
    pub instance_id_command: &'a str,
    /// Whether the cloud runs the script once per instance (cloud-init's user scripts),
    /// so the script installs itself to run at every later boot (see the module docs).
    pub per_boot: bool,
    /// Whose notice endpoints the worker's watcher polls, with
    /// `rayscale.preemption.enabled` (see [`notice`]); `None`: no watcher.
    pub notices: Option<NoticeCloud>,
    /// A shell command that prints which host of its cloud instance this is (0 for the
    /// first), for a node type whose instances are several hosts
    /// ([`MultiHost`](crate::config::MultiHost)): the hosts but the first start Ray
    /// without the type's first-host-only resources. `None` on a cloud of one host per
    /// instance (a multi-host type there is refused).
    pub host_index_command: Option<&'a str>,
}

/// Where the head's boot script will run (the launcher's head).
#[derive(Debug, Clone, PartialEq)]
pub struct HeadBootTarget<'a> {
    /// The head's node type.
    pub node_type: &'a str,
    /// A shell command that prints the instance's cloud id.
    pub instance_id_command: &'a str,
    /// A shell command that prints the instance's private address (what workers join).
    pub private_ip_command: &'a str,
    /// As [`BootTarget::per_boot`].
    pub per_boot: bool,
}

/// Ray's default head start commands (its AWS `defaults.yaml`), when the YAML has none.
pub const DEFAULT_HEAD_START: &[&str] = &[
    "ray stop",
    "ulimit -n 65536; ray start --head --port=6379 --object-manager-port=8076 --autoscaling-config=~/ray_bootstrap_config.yaml --dashboard-host=0.0.0.0",
];

/// The GCS port of `ray start --head` when its command names none (Ray's default).
pub const DEFAULT_GCS_PORT: u16 = 6379;

/// Which node a script boots.
#[derive(Clone, Copy)]
enum Role<'a> {
    Worker {
        head_ip: &'a str,
        notices: Option<NoticeCloud>,
        host_index_command: Option<&'a str>,
    },
    Head {
        private_ip_command: &'a str,
    },
}

/// Ray's default worker start commands (its AWS `defaults.yaml`), when the YAML has none.
pub const DEFAULT_WORKER_START: &[&str] = &[
    "ray stop",
    "ulimit -n 65536; ray start --address=$RAY_HEAD_IP:6379 --object-manager-port=8076",
];

/// The marker ending each embedded file in the script (never inside a command: checked).
const EOF_MARK: &str = "RAYSCALE_BOOT_EOF";
/// The marker ending the head's cluster YAML, inside a step file (checked likewise).
const CONFIG_MARK: &str = "RAYSCALE_CONFIG_EOF";

/// Where, under the SSH user's home on the head, `rayscale up` writes the id of the
/// instance it pushed the cluster config to ([`head_config_text`]): the head's boot
/// then keeps that config rather than write its own again (at a reboot, or when the
/// push came before the boot's config step).
pub const PUSHED_MARK: &str = ".rayscale/config.pushed";

/// The boot script of a worker of `target.node_type`, a bash script.
pub fn render_worker(config: &ClusterConfig, target: &BootTarget<'_>) -> Result<String, CoreError> {
    if config.head_node_type.as_deref() == Some(target.node_type) {
        return Err(CoreError::invalid(
            format!("available_node_types.{}", target.node_type),
            "is the head's type; a worker boot script is for worker types",
        ));
    }
    render(
        config,
        target.node_type,
        target.instance_id_command,
        target.per_boot,
        Role::Worker {
            head_ip: target.head_ip,
            notices: target.notices.filter(|_| config.preemption.enabled),
            host_index_command: target.host_index_command,
        },
    )
}

/// The boot script of the launcher's head (see the module docs), a bash script.
pub fn render_head(
    config: &ClusterConfig,
    target: &HeadBootTarget<'_>,
) -> Result<String, CoreError> {
    if config.head_node_type.as_deref() != Some(target.node_type) {
        return Err(CoreError::invalid(
            "head_node_type",
            format!("is {:?}, not {:?}", config.head_node_type, target.node_type),
        ));
    }
    render(
        config,
        target.node_type,
        target.instance_id_command,
        target.per_boot,
        Role::Head {
            private_ip_command: target.private_ip_command,
        },
    )
}

/// Whether `command` starts Ray's head (`ray start ... --head ...`).
fn starts_head(command: &str) -> bool {
    command.contains("ray start") && command.split_whitespace().any(|w| w == "--head")
}

/// `command` with `--no-monitor` added when it starts Ray's head without it.
fn without_monitor(command: &str) -> String {
    if starts_head(command) && !command.contains("--no-monitor") {
        // After the `--head` flag, so a trailing `&& ...` or `; ...` keeps its place.
        command.replacen("--head", "--head --no-monitor", 1)
    } else {
        command.to_string()
    }
}

/// The GCS port the head's start commands give `ray start --head` (`--port=N` or
/// `--port N`), else Ray's default.
pub fn head_gcs_port(start_commands: &[String]) -> Result<u16, CoreError> {
    for c in start_commands {
        if !starts_head(c) {
            continue;
        }
        let words: Vec<&str> = c.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let v = if let Some(v) = w.strip_prefix("--port=") {
                Some(v)
            } else if *w == "--port" {
                words.get(i + 1).copied()
            } else {
                None
            };
            if let Some(v) = v {
                return v.trim_matches(['"', '\'', ';']).parse().map_err(|_| {
                    CoreError::invalid(
                        "head_start_ray_commands",
                        format!("ray start --head --port {v:?}: not a port number"),
                    )
                });
            }
        }
    }
    Ok(DEFAULT_GCS_PORT)
}

/// The GCS port of the head `config` describes (its `head_start_ray_commands`, else
/// Ray's default), for telling users where to connect.
pub fn head_port(config: &ClusterConfig) -> Result<u16, CoreError> {
    match config.raw.get("head_start_ray_commands") {
        Some(v) => head_gcs_port(&commands(v, "head_start_ray_commands")?),
        None => Ok(DEFAULT_GCS_PORT),
    }
}

/// The cluster YAML the head's boot writes to `~/ray_bootstrap_config.yaml` for its
/// rayscale (what [`render_head`] embeds, and what `rayscale up` pushes to a running head
/// whose config differs): the YAML as loaded, without what stays on the machine running
/// `up`, with the wheel's digest pinned.
pub fn head_config_text(config: &ClusterConfig) -> Result<String, CoreError> {
    let shipped = shipped(&config.raw);
    secrets::refuse(&shipped, "")?;
    let sha = config.install.pinned_sha256(INSTALL_PATH)?;
    bootstrap_text(&shipped, &config.install, sha.as_deref())
}

/// The head's [`tags::RAYSCALE_CONFIG`](super::tags::RAYSCALE_CONFIG) value for a head
/// config text ([`head_config_text`]): the SHA-256, in lower-case base32hex (52
/// characters, a valid GCE label value), of that config without what only the machine
/// running `up` reads (`auth.ssh_private_key`, a path there, which `up`'s bootstrap
/// writes under that machine's HOME; `rayscale.install.sha256`, pinned there from a
/// local wheel, which a head that booted never reads again): two users, or a rebuilt
/// wheel, do not make a head's config "changed".
pub fn head_config_digest(text: &str) -> String {
    use sha2::Digest as _;
    let hashed = match serde_json::from_str::<Value>(text) {
        Ok(mut v) => {
            if let Some(a) = v.get_mut("auth").and_then(Value::as_object_mut) {
                a.remove("ssh_private_key");
            }
            if let Some(i) = v
                .get_mut("rayscale")
                .and_then(|r| r.get_mut("install"))
                .and_then(Value::as_object_mut)
            {
                i.remove("sha256");
            }
            serde_json::to_string(&v).unwrap_or_else(|_| text.to_string())
        }
        Err(_) => text.to_string(),
    };
    crate::config::base32hex_lower(&sha2::Sha256::digest(hashed.as_bytes()))
}

/// [`head_config_text`] of the `shipped` YAML, the wheel's `sha256` written in when the
/// YAML gives a wheel without one (so that the head's rayscale need not read it).
fn bootstrap_text(
    shipped: &Value,
    install: &InstallSettings,
    wheel_sha256: Option<&str>,
) -> Result<String, CoreError> {
    let pinned;
    let out = match (install, wheel_sha256) {
        (InstallSettings::Wheel { sha256: None, .. }, Some(sha)) => {
            let mut r = shipped.clone();
            if let Some(i) = r
                .get_mut("rayscale")
                .and_then(|r| r.get_mut("install"))
                .and_then(Value::as_object_mut)
            {
                i.insert("sha256".into(), Value::String(sha.to_string()));
            }
            pinned = r;
            &pinned
        }
        _ => shipped,
    };
    // JSON is YAML.
    serde_json::to_string_pretty(out)
        .map_err(|e| CoreError::invalid("cluster config", format!("cannot be written out: {e}")))
}

fn render(
    config: &ClusterConfig,
    node_type: &str,
    instance_id_command: &str,
    per_boot: bool,
    role: Role<'_>,
) -> Result<String, CoreError> {
    let t = config.node_type(node_type).ok_or_else(|| {
        CoreError::invalid(
            "available_node_types",
            format!("no node type {node_type:?}"),
        )
    })?;
    // Everything below comes from the YAML and goes into user data, but for what stays
    // on the machine running `up` (see `shipped`).
    let shipped = shipped(&config.raw);
    secrets::refuse(&shipped, "")?;
    let is_head = matches!(role, Role::Head { .. });
    let (setup_key, start_key, default_start) = if is_head {
        (
            "head_setup_commands",
            "head_start_ray_commands",
            DEFAULT_HEAD_START,
        )
    } else {
        (
            "worker_setup_commands",
            "worker_start_ray_commands",
            DEFAULT_WORKER_START,
        )
    };
    let raw = &config.raw;
    let type_raw = raw
        .get("available_node_types")
        .and_then(|n| n.get(node_type));
    let type_path = format!("available_node_types.{node_type}");
    // A key of the node type overrides the cluster's (Ray's per-type lookups).
    let pick = |key: &str| -> Result<Vec<String>, CoreError> {
        match type_raw.and_then(|v| v.get(key)) {
            Some(v) => commands(v, &format!("{type_path}.{key}")),
            None => commands(raw.get(key).unwrap_or(&Value::Null), key),
        }
    };
    let init = pick("initialization_commands")?;
    // Ray's merge (`merge_setup_commands`, and v2's `get_worker_setup_commands`): the
    // cluster's `setup_commands`, then the role's; a worker type's own
    // `worker_setup_commands` replaces both.
    let setup = match type_raw.and_then(|v| v.get(setup_key)) {
        Some(own) if !is_head => commands(own, &format!("{type_path}.{setup_key}"))?,
        _ => {
            let mut setup = commands(
                raw.get("setup_commands").unwrap_or(&Value::Null),
                "setup_commands",
            )?;
            setup.extend(pick(setup_key)?);
            setup
        }
    };
    let mut start = commands(raw.get(start_key).unwrap_or(&Value::Null), start_key)?;
    if raw.get(start_key).is_none() {
        start = default_start.iter().map(|s| s.to_string()).collect();
    }
    let gcs_port = head_gcs_port(&start)?;
    if is_head {
        start = start.iter().map(|c| without_monitor(c)).collect();
    }
    // The wheel's digest, pinned here when the YAML gives a path without one (and
    // written into the head's copy of the YAML, so that its rayscale need not read it).
    let wheel_sha256 = if is_head {
        config.install.pinned_sha256(INSTALL_PATH)?
    } else {
        None
    };
    let bootstrap = bootstrap_text(&shipped, &config.install, wheel_sha256.as_deref())?;
    let user = raw
        .get("auth")
        .and_then(|a| a.get("ssh_user"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut docker = docker_settings(
        raw.get("docker"),
        type_raw.and_then(|v| v.get("docker")),
        is_head,
    )?;
    // A worker fetches the head's copies of the file mounts first (see `config::mounts`);
    // with a container, to the host directory Ray bind-mounts them from.
    let host_prefix = docker
        .as_ref()
        .map(|_| docker::host_mount_prefix(&config.cluster_name));
    let fetch = match (&role, &config.mounts_source) {
        (Role::Worker { .. }, Some(src)) => {
            worker_mount_commands(&config.raw, src, host_prefix.as_deref())
        }
        // The head waits for `rayscale up` to copy them from the user's machine.
        (Role::Head { .. }, _) if !crate::config::mounts::head_copies(raw)?.is_empty() => {
            wait_for_copies(host_prefix.as_deref())
        }
        _ => Vec::new(),
    };
    if let (Some(d), Some(prefix)) = (docker.as_mut(), &host_prefix)
        && !fetch.is_empty()
    {
        // Ray does not bind-mount its bootstrap files (it copies them in); a head mounts
        // what `up` copied (its `cluster_synced_files` are its own, as in Ray).
        let paths = if is_head {
            crate::config::mounts::head_copies(raw)?
                .into_iter()
                .map(|(remote, _)| remote)
                .collect()
        } else {
            crate::config::mounts::mount_paths(raw)
        };
        d.mounts = paths
            .into_iter()
            .filter(|p| !crate::config::mounts::RAY_BOOTSTRAP_FILES.contains(&p.as_str()))
            .map(|p| (format!("{prefix}/{p}"), p))
            .collect();
    }
    for (what, cmds) in [
        ("file mount", &fetch),
        ("initialization", &init),
        ("setup", &setup),
        ("start", &start),
    ] {
        if cmds.iter().any(|c| c.contains(EOF_MARK)) {
            return Err(CoreError::invalid(
                format!("{what} commands"),
                format!("a command contains {EOF_MARK}, which the boot script reserves"),
            ));
        }
    }
    if is_head
        && let Some(m) = [EOF_MARK, CONFIG_MARK]
            .into_iter()
            .find(|m| bootstrap.contains(m))
    {
        return Err(CoreError::invalid(
            "cluster config",
            format!("contains {m}, which the boot script reserves"),
        ));
    }
    let resources: serde_json::Map<String, Value> = t
        .resources
        .iter()
        .map(|(k, v)| {
            let f = crate::model::resources::to_f64(v);
            // Whole amounts as integers, as Ray's YAML writes them.
            let n = if f.fract() == 0.0 && f.abs() < 1e15 {
                Value::from(f as i64)
            } else {
                Value::from(f)
            };
            (k.to_string(), n)
        })
        .collect();
    // The resources of a multi-host type's other hosts: without the first host's own.
    let other_hosts = match (&t.hosts, &role) {
        (None, _) => None,
        (
            Some(h),
            Role::Worker {
                host_index_command: Some(cmd),
                ..
            },
        ) => {
            let mut rest = resources.clone();
            rest.retain(|k, _| !h.first_host_only.contains(k));
            Some((*cmd, Value::Object(rest).to_string()))
        }
        (Some(_), _) => {
            return Err(CoreError::invalid(
                format!("available_node_types.{node_type}"),
                if is_head {
                    "a head's instance is one host; a multi-host slice is a worker type"
                } else {
                    "its instances are several hosts, and this cloud's boot cannot tell them apart"
                },
            ));
        }
    };
    let labels: serde_json::Map<String, Value> = t
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();

    let mut s = String::new();
    s.push_str("#!/bin/bash\n");
    s.push_str(&format!(
        "# rayscale boot script: cluster {}, node type {} ({}).\n",
        one_line(&config.cluster_name),
        one_line(node_type),
        if is_head { "head" } else { "worker" }
    ));
    s.push_str("# Print it with `rayscale boot-script CLUSTER.yaml TYPE`.\n");
    s.push_str("set -euo pipefail\n");
    s.push_str("BOOT_DIR=\"${RAYSCALE_BOOT_DIR:-/var/lib/rayscale}\"\n");
    // What this script writes there (the head's steps carry every setup command) is
    // readable by its owner only: the directory is 0700 (no global umask: the user's own
    // setup commands keep theirs).
    s.push_str("mkdir -p \"$BOOT_DIR\" && chmod 700 \"$BOOT_DIR\"\n");
    s.push_str("exec >>\"$BOOT_DIR/boot.log\" 2>&1\n");
    if per_boot {
        // cloud-init runs user data once per instance; this copy runs at every later boot.
        s.push_str(concat!(
            "PER_BOOT=\"${RAYSCALE_PER_BOOT_DIR:-/var/lib/cloud/scripts/per-boot}\"\n",
            "if [ -f \"$0\" ] && ! [ \"$0\" -ef \"$PER_BOOT/rayscale-boot.sh\" ]; then\n",
            "  mkdir -p \"$PER_BOOT\" && cp \"$0\" \"$PER_BOOT/rayscale-boot.sh\" && chmod 700 \"$PER_BOOT/rayscale-boot.sh\"\n",
            "fi\n",
        ));
    }
    s.push_str(&format!(
        "RAY_CLOUD_INSTANCE_ID=\"$({instance_id_command})\"\n"
    ));
    s.push_str("[ -n \"$RAY_CLOUD_INSTANCE_ID\" ] || { echo 'rayscale: no instance id from the metadata service' >&2; exit 1; }\n");
    let head_ip = match role {
        Role::Worker { head_ip, .. } => head_ip.to_string(),
        Role::Head { private_ip_command } => {
            s.push_str(&format!("RAY_HEAD_IP=\"$({private_ip_command})\"\n"));
            s.push_str("[ -n \"$RAY_HEAD_IP\" ] || { echo 'rayscale: no private address from the metadata service' >&2; exit 1; }\n");
            String::new()
        }
    };
    // The environment every step sees (Ray's updater sets the same).
    s.push_str(&format!("cat >\"$BOOT_DIR/env.sh\" <<'{EOF_MARK}'\n"));
    let mut env = vec![
        ("RAY_NODE_TYPE_NAME", node_type.to_string()),
        (
            "RAY_OVERRIDE_RESOURCES",
            Value::Object(resources).to_string(),
        ),
    ];
    if is_head {
        // The head of an external autoscaler (see the module docs).
        env.push(("RAY_enable_autoscaler_v2", "1".to_string()));
    } else {
        env.insert(0, ("RAY_HEAD_IP", head_ip));
    }
    for (k, v) in env {
        s.push_str(&format!("export {k}={}\n", quote(&v)));
    }
    if !labels.is_empty() {
        s.push_str(&format!(
            "export RAY_OVERRIDE_LABELS={}\n",
            quote(&Value::Object(labels).to_string())
        ));
    }
    s.push_str(&format!("{EOF_MARK}\n"));
    s.push_str("printf 'export RAY_CLOUD_INSTANCE_ID=%q\\n' \"$RAY_CLOUD_INSTANCE_ID\" >>\"$BOOT_DIR/env.sh\"\n");
    if let Some((cmd, rest)) = &other_hosts {
        // Every host of the instance runs this script; only the first keeps the type's
        // first-host-only resources (Ray's `TPU-<type>-head` on worker 0).
        s.push_str(&format!("RAYSCALE_HOST_INDEX=\"$({cmd})\"\n"));
        s.push_str("case \"$RAYSCALE_HOST_INDEX\" in ''|*[!0-9]*) echo \"rayscale: no host index from the metadata service (got '$RAYSCALE_HOST_INDEX')\" >&2; exit 1 ;; esac\n");
        s.push_str("echo \"rayscale: host $RAYSCALE_HOST_INDEX of its instance\"\n");
        s.push_str(&format!(
            "if [ \"$RAYSCALE_HOST_INDEX\" != 0 ]; then printf 'export RAY_OVERRIDE_RESOURCES=%s\\n' {} >>\"$BOOT_DIR/env.sh\"; fi\n",
            quote(&quote(rest))
        ));
    }
    if is_head {
        s.push_str("printf 'export RAY_HEAD_IP=%q\\n' \"$RAY_HEAD_IP\" >>\"$BOOT_DIR/env.sh\"\n");
    }
    // Each step as a file, run as the SSH user when it exists.
    let step = |s: &mut String, name: &str, cmds: &[String], in_docker: bool| {
        s.push_str(&format!("cat >\"$BOOT_DIR/{name}.sh\" <<'{EOF_MARK}'\n"));
        s.push_str("set -e\n");
        for c in cmds {
            s.push_str(c);
            s.push('\n');
        }
        s.push_str(&format!("{EOF_MARK}\n"));
        if in_docker {
            s.push_str(&format!(
                "\"$DOCKER\" exec -i \"$CONTAINER\" bash -l -c \"$(cat \"$BOOT_DIR/env.sh\" \"$BOOT_DIR/{name}.sh\")\"\n"
            ));
        } else {
            s.push_str(&format!("run_as_user \"$BOOT_DIR/{name}.sh\"\n"));
        }
    };
    s.push_str(&format!(
        "SSH_USER={}\n",
        quote(user.as_deref().unwrap_or(""))
    ));
    // A stand-in machine (the tests' boot simulator) runs every step as its own user.
    s.push_str(
        "if [ -n \"${RAYSCALE_SSH_USER+set}\" ]; then SSH_USER=\"$RAYSCALE_SSH_USER\"; fi\n",
    );
    s.push_str(concat!(
        "run_as_user() {\n",
        "  if [ -n \"$SSH_USER\" ] && [ \"$(id -un)\" != \"$SSH_USER\" ] && id \"$SSH_USER\" >/dev/null 2>&1; then\n",
        "    chown -R \"$SSH_USER\" \"$BOOT_DIR\"\n",
        "    sudo -u \"$SSH_USER\" -H bash -l -c \". '$BOOT_DIR/env.sh'; . '$1'\"\n",
        "  else\n",
        "    bash -c \". '$BOOT_DIR/env.sh'; . '$1'\"\n",
        "  fi\n",
        "}\n",
    ));
    if is_head {
        s.push_str(USER_WAIT);
    }
    if is_head && !fetch.is_empty() {
        // As root, reading the SSH user's home on each pass: a cloud's agent may make the
        // user only once `up`'s key reaches it.
        s.push_str(&format!(
            "cat >\"$BOOT_DIR/file-mounts.sh\" <<'{EOF_MARK}'\nset -e\n{}\n{EOF_MARK}\n",
            fetch.join("\n")
        ));
        s.push_str("SSH_USER=\"$SSH_USER\" bash \"$BOOT_DIR/file-mounts.sh\"\n");
    } else if !fetch.is_empty() {
        step(&mut s, "file-mounts", &fetch, false);
    }
    if !init.is_empty() {
        step(&mut s, "initialization", &init, false);
    }
    if let Some(d) = &docker {
        s.push_str(&d.start());
    }
    if !setup.is_empty() {
        step(&mut s, "setup", &setup, docker.is_some());
    }
    if is_head {
        // Where Ray's head keeps the cluster YAML; rayscale reads it there. A config
        // `rayscale up` pushed to this instance since (`PUSHED_MARK` names the instance)
        // is newer than this one, and stays across reboots.
        let write = vec![
            "umask 077".to_string(),
            format!(
                "if [ \"$(cat ~/{PUSHED_MARK} 2>/dev/null)\" = \"$RAY_CLOUD_INSTANCE_ID\" ] && [ -s ~/ray_bootstrap_config.yaml ]; then\n\
                 echo \"rayscale: keeping the cluster config rayscale up pushed to this head\"\n\
                 else\n\
                 cat >~/ray_bootstrap_config.yaml <<'{CONFIG_MARK}'\n{bootstrap}\n{CONFIG_MARK}\n\
                 fi"
            ),
            "chmod 600 ~/ray_bootstrap_config.yaml".to_string(),
        ];
        step(&mut s, "config", &write, false);
    }
    if let Role::Worker {
        notices: Some(cloud),
        ..
    } = role
    {
        // The notice watcher, in the background where Ray runs (see `notice`), started
        // before Ray (a start command may block): it waits for the node to notice.
        let w = notice::render(&Watcher {
            cloud,
            settings: config.preemption,
            key_prefix: crate::preemption::notice_key(&config.cluster_name, ""),
            gcs: &notice::worker_gcs_address(&start),
        });
        s.push_str(&format!(
            "cat >\"$BOOT_DIR/notice-watch.sh\" <<'{EOF_MARK}'\n{w}{EOF_MARK}\n"
        ));
        if docker.is_some() {
            s.push_str("\"$DOCKER\" exec -d \"$CONTAINER\" bash -l -c \"$(cat \"$BOOT_DIR/env.sh\" \"$BOOT_DIR/notice-watch.sh\")\"\n");
        } else {
            s.push_str("run_as_user \"$BOOT_DIR/notice-watch.sh\" >>\"$BOOT_DIR/notice.log\" 2>&1 </dev/null &\n");
        }
    }
    step(&mut s, "start", &start, docker.is_some());
    if is_head {
        // Autostop stops the head of a cluster `up` launched, set now or in a config `up`
        // pushes later (without `rayscale.autostop_minutes` the flag does nothing).
        let mut run = install_lines(config, gcs_port, wheel_sha256.as_deref());
        run.push(format!(
                "nohup \"$RAYSCALE_BIN\" run --config ~/ray_bootstrap_config.yaml --gcs 127.0.0.1:{gcs_port} --head-ip \"$RAY_HEAD_IP\" --autostop-head >>~/rayscale.log 2>&1 </dev/null &"
            ));
        step(&mut s, "autoscaler", &run, false);
    }
    s.push_str("echo \"rayscale: node $RAY_CLOUD_INSTANCE_ID started\"\n");
    Ok(s)
}

/// A head's wait for `$SSH_USER`: a cloud's agent may make the user after the boot
/// starts (GCE's guest agent, from the `ssh-keys` metadata), and `up` pushes a changed
/// config to that user's home, so the head waits a while for it and says so when it never
/// came (with the home its steps then use: `HOME` may be unset in a cloud's boot).
const USER_WAIT: &str = concat!(
    "if [ -n \"$SSH_USER\" ] && [ \"$(id -un)\" != \"$SSH_USER\" ] && ! id \"$SSH_USER\" >/dev/null 2>&1; then\n",
    "  USER_WAIT=\"${RAYSCALE_USER_WAIT_S:-60}\"\n",
    "  case \"$USER_WAIT\" in ''|*[!0-9]*) USER_WAIT=60 ;; esac\n",
    "  echo \"rayscale: waiting up to $USER_WAIT s for the SSH user $SSH_USER (auth.ssh_user) to exist\"\n",
    "  WAITED=0\n",
    "  while [ \"$WAITED\" -lt \"$USER_WAIT\" ] && ! id \"$SSH_USER\" >/dev/null 2>&1; do sleep 1; WAITED=$((WAITED + 1)); done\n",
    "  if ! id \"$SSH_USER\" >/dev/null 2>&1; then\n",
    "    echo \"rayscale: the SSH user $SSH_USER (auth.ssh_user) does not exist: the head's steps run as $(id -un), its config is $(cd ~ && pwd)/ray_bootstrap_config.yaml, and a config rayscale up pushes to $SSH_USER's home is not read\"\n",
    "  fi\n",
    "fi\n",
);

/// The KV key (namespace `__rayscale`) where a head's boot says what stopped it before
/// `rayscale run` started (today: a failed install); `rayscale up --wait` reads it.
pub fn boot_status_key(cluster: &str) -> String {
    format!("boot/{cluster}")
}

/// A list of shell commands at `path`.
fn commands(v: &Value, path: &str) -> Result<Vec<String>, CoreError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Value::String(s) => Ok(s.clone()),
                other => Err(CoreError::invalid(
                    format!("{path}[{i}]"),
                    format!("must be a string command, got {other}"),
                )),
            })
            .collect(),
        other => Err(CoreError::invalid(
            path,
            format!("must be a list of commands, got {other}"),
        )),
    }
}

/// `v` single-quoted for the shell.
pub(super) fn quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', "'\\''"))
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// The cluster YAML as it may travel in a node's boot script: without the credentials
/// given to the machine running `up` (`provider.aws_credentials`, Ray's
/// `provider.gcp_credentials`): a boot script is the instance's user data or metadata,
/// which its metadata server and the cloud's API show. The head calls its cloud with its
/// own role or service account.
fn shipped(raw: &Value) -> std::borrow::Cow<'_, Value> {
    const LOCAL_ONLY: [&str; 2] = ["aws_credentials", "gcp_credentials"];
    let provider = raw.get("provider").and_then(Value::as_object);
    if !provider.is_some_and(|p| LOCAL_ONLY.iter().any(|k| p.contains_key(*k))) {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut r = raw.clone();
    if let Some(p) = r.get_mut("provider").and_then(Value::as_object_mut) {
        for k in LOCAL_ONLY {
            p.remove(k);
        }
    }
    std::borrow::Cow::Owned(r)
}

#[cfg(test)]
mod tests;
