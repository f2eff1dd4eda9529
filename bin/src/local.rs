//! `up`, `down` and `run`: the live loop with the local-process provider (worker nodes as
//! local `ray start --block` processes), the embedded default.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use rayscale_core::config::ClusterConfig;
use rayscale_core::model::resources::to_f64;
use rayscale_core::provider::CloudInstanceProvider;
use rayscale_gcs_client::client::GcsClient;

use crate::cluster::gcs_client;

use crate::driver::{FileConfig, run_loop};
use crate::expander::ExpanderArgs;
use crate::ops::OpsArgs;
use crate::providers::ProviderEnv;
use rayscale_core::driver::DriverOptions;

/// The provider type of the local-process provider.
pub const LOCAL: &str = "local_processes";

fn load_config(path: &Path) -> Result<ClusterConfig> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {origin}"))?;
    Ok(ClusterConfig::from_yaml_str(&text, &origin)?)
}

/// Finds the `ray` binary: the flag, else `$PATH`.
fn find_ray(flag: Option<&PathBuf>) -> Result<PathBuf> {
    if let Some(p) = flag {
        if p.is_file() {
            return Ok(p.clone());
        }
        bail!("ray binary {} not found", p.display());
    }
    crate::providers::find_ray_on_path()
}

/// The local-process provider for `up` and `down` on this host.
async fn local_provider(
    config: &ClusterConfig,
    gcs: &str,
    ray: &Path,
) -> Result<Arc<dyn CloudInstanceProvider>> {
    if config.provider_type != LOCAL {
        bail!(
            "provider.type {:?}: `up` and `down` run a cluster on this host (provider.type \
             {LOCAL}); for a cluster elsewhere, start the head as the cloud does and use \
             `rayscale run`",
            config.provider_type
        );
    }
    crate::providers::build(
        config,
        &ProviderEnv {
            gcs_address: gcs.to_string(),
            ray_binary: Some(ray.to_path_buf()),
            head_ip: None,
        },
    )
    .await
}

/// The head's temporary directory (Ray's `--temp-dir`): it names every head process, so
/// `down` stops exactly this cluster's head. Short (Ray puts unix sockets under it), and
/// distinct for distinct names: a name reduced or cut to fit gets a hash of the whole.
fn head_temp_dir(config: &ClusterConfig) -> PathBuf {
    let name = &config.cluster_name;
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == *name && safe.len() <= 24 {
        return PathBuf::from(format!("/tmp/rayscale-{safe}-head"));
    }
    // FNV-1a: stable across builds and platforms.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let short: String = safe.chars().take(15).collect();
    PathBuf::from(format!("/tmp/rayscale-{short}-{:08x}-head", hash as u32))
}

/// Whether a command line names `dir` itself or something inside it (not a longer name
/// that starts the same, as `/tmp/rayscale-foo-head-head` for `/tmp/rayscale-foo-head`).
fn mentions_dir(cmdline: &str, dir: &str) -> bool {
    cmdline.match_indices(dir).any(|(i, _)| {
        matches!(
            cmdline[i + dir.len()..].chars().next(),
            None | Some('/' | '\0' | ' ' | '"' | '\'' | ',' | ':' | ';')
        )
    })
}

/// Whether a GCS answers at `addr` (one call; nothing listening fails at once, a slow GCS
/// has 10 s).
pub(crate) async fn gcs_answers(addr: &str) -> bool {
    gcs_probe(addr).await.is_ok()
}

async fn gcs_probe(addr: &str) -> Result<()> {
    let c = gcs_client(addr, 10, 1)?;
    c.get_cluster_resource_state(0).await?;
    Ok(())
}

/// Waits until the GCS at `addr` answers, as Ray's monitor does: a slow or not yet
/// started GCS is not a missing one. Says so when it starts waiting and every minute.
pub(crate) async fn wait_for_gcs(addr: &str) {
    let started = std::time::Instant::now();
    let mut said: Option<std::time::Instant> = None;
    loop {
        match gcs_probe(addr).await {
            Ok(()) => {
                if said.is_some() {
                    tracing::info!(
                        "the GCS at {addr} answers (after {:.0?})",
                        started.elapsed()
                    );
                }
                return;
            }
            Err(e) => {
                if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::info!("waiting for the Ray GCS at {addr}: {e:#}");
                    said = Some(std::time::Instant::now());
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub(crate) fn loop_client(addr: &str) -> Result<GcsClient> {
    gcs_client(addr, 5, 3)
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM (what Kubernetes and systemd send): the loop
/// then stops between iterations, after the effects under way.
pub(crate) async fn ctrl_c() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    let int = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let which = tokio::select! {
        _ = int => "Ctrl-C",
        _ = term => "SIGTERM",
    };
    tracing::info!(
        "{which}: stopping the loop (the cluster keeps running; `rayscale down` stops it)"
    );
}

/// Arguments of `rayscale up`.
#[derive(Args)]
pub struct UpArgs {
    /// The cluster config.
    config: PathBuf,
    /// local_processes: GCS port of the head on 127.0.0.1.
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// The `ray` binary (default: found on PATH).
    #[arg(long)]
    ray: Option<PathBuf>,
    /// local_processes: the loop's expander flags (a cloud head's rayscale reads its YAML).
    #[command(flatten)]
    expander: ExpanderArgs,
    /// local_processes: the loop's metrics, health and event file.
    #[command(flatten)]
    ops: OpsArgs,
}

/// `rayscale up`.
pub async fn up(args: UpArgs) -> Result<String> {
    let config = load_config(&args.config)?;
    if config.provider_type != LOCAL {
        return crate::launch::up(&config, &args.config).await;
    }
    let ray = find_ray(args.ray.as_ref())?;
    let addr = format!("127.0.0.1:{}", args.port);
    let provider = local_provider(&config, &addr, &ray).await?;
    // Bad flags fail here, before the head starts; the loop rebuilds the chain from the
    // file on every change.
    let source = FileConfig::open(args.config.clone(), args.expander)?;
    if gcs_answers(&addr).await {
        tracing::info!("a Ray GCS already answers at {addr}: using it");
    } else {
        start_head(&config, &ray, args.port).await?;
    }
    let gcs = loop_client(&addr)?;
    let observers = crate::ops::start(&args.ops, &gcs, Some(&head_temp_dir(&config))).await?;
    run_loop(
        gcs,
        provider,
        &config.cluster_name,
        Box::new(source),
        DriverOptions::default(),
        observers,
        ctrl_c(),
    )
    .await?;
    Ok(String::new())
}

async fn start_head(config: &ClusterConfig, ray: &Path, port: u16) -> Result<()> {
    let head = config
        .head_node_type
        .as_deref()
        .and_then(|h| config.node_type(h));
    let cpus = head
        .and_then(|t| t.resources.get("CPU"))
        .map_or(0.0, to_f64);
    let temp = head_temp_dir(config);
    let addr = format!("127.0.0.1:{port}");
    tracing::info!(
        "starting a Ray head at {addr} (temp dir {})",
        temp.display()
    );
    let out = tokio::process::Command::new(ray)
        .args([
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            &format!("--port={port}"),
            &format!("--num-cpus={cpus}"),
            "--include-dashboard=false",
            "--disable-usage-stats",
            // The head of an external autoscaler: autoscaler v2's view in `ray status`,
            // and no Ray autoscaler of its own (see the README).
            "--no-monitor",
            &format!("--temp-dir={}", temp.display()),
        ])
        .env("RAY_enable_autoscaler_v2", "1")
        .env(
            "RAY_NODE_TYPE_NAME",
            config.head_node_type.as_deref().unwrap_or("head"),
        )
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {}", ray.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!("ray start --head failed ({}): {}", out.status, last.trim());
    }
    for _ in 0..60 {
        if gcs_answers(&addr).await {
            tracing::info!("Ray head is up at {addr}");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(anyhow!(
        "the Ray head started but its GCS does not answer at {addr}"
    ))
}

/// Arguments of `rayscale down`.
#[derive(Args)]
pub struct DownArgs {
    /// The cluster config.
    config: PathBuf,
    /// local_processes: GCS port of the head on 127.0.0.1.
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// The `ray` binary (default: found on PATH).
    #[arg(long)]
    ray: Option<PathBuf>,
}

/// Pids of the processes whose command line mentions `needle`.
/// Processes (not this one) whose command line names the directory `needle`.
fn pids_mentioning(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| mentions_dir(&String::from_utf8_lossy(&c), needle))
                .unwrap_or(false)
        })
        .collect()
}

fn signal(pids: &[u32], sig: &str) {
    if pids.is_empty() {
        return;
    }
    let _ = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .args(pids.iter().map(u32::to_string))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// `rayscale down`.
pub async fn down(args: DownArgs) -> Result<String> {
    let config = load_config(&args.config)?;
    if config.provider_type != LOCAL {
        return crate::launch::down(&config).await;
    }
    let ray = find_ray(args.ray.as_ref())?;
    let addr = format!("127.0.0.1:{}", args.port);
    let provider = local_provider(&config, &addr, &ray).await?;
    let workers = provider.list().await?;
    let ids: Vec<String> = workers
        .iter()
        .filter(|c| !c.is_head())
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    if !ids.is_empty() {
        tracing::info!("terminating {} workers", ids.len());
        provider.terminate(&ids, "down").await?;
        for _ in 0..60 {
            if provider.list().await?.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let temp = head_temp_dir(&config).display().to_string();
    let head = pids_mentioning(&temp);
    if !head.is_empty() {
        tracing::info!("stopping the head ({} processes)", head.len());
        signal(&head, "TERM");
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if pids_mentioning(&temp).is_empty() {
                break;
            }
        }
        signal(&pids_mentioning(&temp), "KILL");
    }
    let left = provider.list().await?.len();
    if left > 0 {
        bail!("{left} workers are still running");
    }
    Ok(format!(
        "cluster {} is down ({} workers, head {})",
        config.cluster_name,
        ids.len(),
        if head.is_empty() {
            "not running"
        } else {
            "stopped"
        }
    ))
}

/// Arguments of `rayscale run`.
#[derive(Args)]
pub struct RunArgs {
    /// The cluster config.
    #[arg(long)]
    config: PathBuf,
    /// GCS address (host:port).
    #[arg(long)]
    gcs: String,
    /// The `ray` binary (local_processes provider; default: found on PATH).
    #[arg(long)]
    ray: Option<PathBuf>,
    /// The head's address as cloud workers reach it (default: the --gcs host, unless
    /// that is a loopback address); `auto`: this machine's private address, from the
    /// cloud's instance metadata service (run on the head).
    #[arg(long)]
    head_ip: Option<String>,
    /// Reconcile at least every this many seconds.
    #[arg(long, default_value_t = 5.0)]
    interval: f64,
    #[command(flatten)]
    expander: ExpanderArgs,
    #[command(flatten)]
    ops: OpsArgs,
}

/// `rayscale run`.
pub async fn run(args: RunArgs) -> Result<String> {
    let config = load_config(&args.config)?;
    let head_ip = match args.head_ip.as_deref() {
        Some("auto") => {
            Some(crate::providers::private_ip_from_metadata(&config.provider_type).await?)
        }
        other => other.map(str::to_string),
    };
    let provider = crate::providers::build(
        &config,
        &ProviderEnv {
            gcs_address: args.gcs.clone(),
            ray_binary: args.ray.clone(),
            head_ip,
        },
    )
    .await?;
    let source = FileConfig::open(args.config.clone(), args.expander)?;
    if !(args.interval.is_finite() && args.interval > 0.0) {
        bail!("--interval: expected a positive number of seconds");
    }
    let gcs = loop_client(&args.gcs)?;
    // A slow GCS is not a missing one: the probe allows 10 s for an answer (nothing
    // listening fails at once: a wrong address is bad input, one line, non-zero exit).
    if !gcs_answers(gcs.addr()).await {
        bail!("no Ray GCS answers at {}", gcs.addr());
    }
    let observers = crate::ops::start(&args.ops, &gcs, None).await?;
    run_loop(
        gcs,
        provider,
        &config.cluster_name,
        Box::new(source),
        DriverOptions {
            interval: Duration::from_secs_f64(args.interval),
            ..Default::default()
        },
        observers,
        ctrl_c(),
    )
    .await?;
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str) -> ClusterConfig {
        let yaml = format!(
            "cluster_name: {name:?}\nprovider: {{type: local_processes}}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
        );
        ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_cluster_never_matches_another_clusters_head() {
        let foo = head_temp_dir(&config("foo")).display().to_string();
        let foo_head = head_temp_dir(&config("foo-head")).display().to_string();
        assert_eq!(foo, "/tmp/rayscale-foo-head");
        let cmd = format!("raylet\0--temp-dir={foo_head}\0--session-dir={foo_head}/session_1");
        assert!(!mentions_dir(&cmd, &foo), "{cmd}");
        assert!(mentions_dir(&cmd, &foo_head));
        assert!(mentions_dir(
            &format!("gcs_server --log-dir={foo}/session_x/logs"),
            &foo
        ));
        // Long or reduced names stay distinct.
        let a = head_temp_dir(&config("a-very-long-cluster-name-number-1"));
        let b = head_temp_dir(&config("a-very-long-cluster-name-number-2"));
        assert_ne!(a, b);
        assert_ne!(head_temp_dir(&config("x y")), head_temp_dir(&config("x_y")));
        assert!(a.display().to_string().len() <= 45);
    }
}
