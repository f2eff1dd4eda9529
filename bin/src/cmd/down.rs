//! `rayscale down`: with local_processes, the head's processes (found by its temporary
//! directory) stopped, then this host's workers terminated; in a cloud, `launch`'s down.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;

use rayscale_core::launcher::kept_min_workers;
use rayscale_core::provider::CloudInstanceState;

use crate::local_head::{LOCAL, find_ray, head_temp_dir, local_provider, pids_mentioning};

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
    /// Terminate only the workers; the head (and its autoscaler, which may launch
    /// workers again for pending work or min_workers) keeps running.
    #[arg(long)]
    workers_only: bool,
    /// With --workers-only: leave each node type's min_workers running (Ray's flag reads
    /// the legacy top-level min_workers instead, and picks at random).
    #[arg(long, requires = "workers_only")]
    keep_min_workers: bool,
    /// Accepted for Ray's `ray down -y`; rayscale never asks.
    #[arg(short = 'y', long)]
    yes: bool,
    #[command(flatten)]
    name: crate::overrides::NameOverride,
}

/// Arguments of `rayscale get-head-ip` and `rayscale get-worker-ips`.
#[derive(Args)]
pub struct IpsArgs {
    /// The cluster config.
    config: PathBuf,
    /// local_processes: GCS port of the head on 127.0.0.1.
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// The `ray` binary (default: found on PATH).
    #[arg(long)]
    ray: Option<PathBuf>,
    #[command(flatten)]
    name: crate::overrides::NameOverride,
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
    let _ = args.yes;
    let config = args.name.load(&args.config)?;
    if config.provider_type != LOCAL {
        if args.workers_only {
            return crate::launch::down_workers(&config, args.keep_min_workers).await;
        }
        return crate::launch::down(&config).await;
    }
    let ray = find_ray(args.ray.as_ref())?;
    if args.workers_only {
        return down_local_workers(&config, args.port, &ray, args.keep_min_workers).await;
    }
    down_local(&config, args.port, &ray).await
}

/// `rayscale get-head-ip` (`head`) or `rayscale get-worker-ips`: the addresses (a cloud's
/// public ones unless `use_internal_ips`; this host's on local_processes),
/// one per line.
pub async fn ips(args: IpsArgs, head: bool) -> Result<String> {
    let config = args.name.load(&args.config)?;
    if config.provider_type != LOCAL {
        return crate::launch::ips(&config, head).await;
    }
    if head {
        return Ok("127.0.0.1".into());
    }
    let ray = find_ray(args.ray.as_ref())?;
    let provider = local_provider(&config, &format!("127.0.0.1:{}", args.port), &ray).await?;
    Ok(provider
        .list()
        .await?
        .iter()
        .filter(|c| !c.is_head() && c.state == CloudInstanceState::Running)
        .filter_map(|c| c.private_ip.clone())
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `down --workers-only` of a local_processes cluster: this host's workers terminated
/// (all, or all but each type's min_workers), the head left running.
async fn down_local_workers(
    config: &rayscale_core::config::ClusterConfig,
    port: u16,
    ray: &std::path::Path,
    keep_min_workers: bool,
) -> Result<String> {
    let provider = local_provider(config, &format!("127.0.0.1:{port}"), ray).await?;
    let all = provider.list().await?;
    let kept = if keep_min_workers {
        kept_min_workers(&all, config)
    } else {
        Default::default()
    };
    let ids: Vec<String> = all
        .iter()
        .filter(|c| !c.is_head() && !kept.contains(&c.cloud_instance_id))
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    if !ids.is_empty() {
        provider.terminate(&ids, "down").await?;
    }
    Ok(format!(
        "cluster {}: {} workers terminated, the head left running",
        config.cluster_name,
        ids.len()
    ))
}

/// `down` of a local_processes cluster whose head's GCS is on 127.0.0.1:`port`: the head's
/// processes stopped first (a loop autoscaling it, as `up`'s, then reads no GCS and
/// launches nothing: workers first would race one keeping `min_workers`), then this
/// host's workers terminated.
pub async fn down_local(
    config: &rayscale_core::config::ClusterConfig,
    port: u16,
    ray: &std::path::Path,
) -> Result<String> {
    let addr = format!("127.0.0.1:{port}");
    let provider = local_provider(config, &addr, ray).await?;
    let temp = head_temp_dir(config).display().to_string();
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
    let left: Vec<String> = provider
        .list()
        .await?
        .into_iter()
        .map(|c| c.cloud_instance_id)
        .collect();
    if !left.is_empty() {
        bail!(
            "{} workers are still running ({}): their processes carry \
             RAYSCALE_CLUSTER={} in their environment; run `rayscale down` again",
            left.len(),
            left.join(", "),
            config.cluster_name
        );
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
