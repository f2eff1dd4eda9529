//! `rayscale up`: with local_processes, a Ray head on loopback if none runs (started here),
//! autoscaled in the foreground until Ctrl-C (or until the head it started is stopped,
//! by `rayscale down`); in a cloud, the head found or launched (`launch`), which boots
//! Ray and `rayscale run` itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use rayscale_core::config::ClusterConfig;
use rayscale_core::driver::{DriverOptions, HeadStop, RunEnd};
use rayscale_core::model::resources::to_f64;

use crate::driver::{DownHead, FileConfig, run_loop};
use crate::expander::ExpanderArgs;
use crate::gcs::{gcs_answers, loop_client};
use crate::local_head::{LOCAL, find_ray, head_temp_dir, local_provider, pids_mentioning};
use crate::ops::OpsArgs;

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
    /// A cloud cluster: once the head runs, wait up to SECS (900 when no value is given)
    /// until rayscale runs on it, asking the head's GCS at its private address (so run
    /// it where `ray status --address` reaches the head); a head whose boot could not
    /// install rayscale (`rayscale.install`) ends the wait with the boot's reason.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "900")]
    wait: Option<u64>,
    /// Where `--wait` asks the head's GCS when not at the head's private address (a
    /// tunnel or port forward, e.g. `127.0.0.1:6379` after `ssh -L`).
    #[arg(long, value_name = "HOST:PORT", requires = "wait")]
    gcs: Option<String>,
    /// Ray's `ray up` overrides (`-n`, `--min-workers`, `--max-workers`) and its flags.
    #[command(flatten)]
    overrides: crate::overrides::UpOverrides,
    /// A cloud cluster, as `ray up -y`: a head found outdated (launched from another
    /// node_config, auth or head type than this YAML's) is terminated and a new one
    /// launched. Without it, such a head is left running and `up` says so.
    #[arg(short = 'y', long)]
    yes: bool,
}

/// `rayscale up`.
pub async fn up(args: UpArgs) -> Result<String> {
    args.overrides.check()?;
    let changes = args.overrides.changes();
    let config = crate::overrides::load_with(&args.config, &changes, true)?;
    for line in config.keys_not_acted_on() {
        tracing::warn!("{}: {line}", args.config.display());
    }
    if config.provider_type != LOCAL {
        let wait = args.wait.map(|secs| crate::launch::Wait {
            secs,
            gcs: args.gcs.clone(),
        });
        let again = args.overrides.again(&args.config);
        return crate::launch::up(&config, &again, wait, args.yes).await;
    }
    let ray = find_ray(args.ray.as_ref())?;
    let addr = format!("127.0.0.1:{}", args.port);
    let provider = local_provider(&config, &addr, &ray).await?;
    // Bad flags fail here, before the head starts; the loop rebuilds the chain from the
    // file on every change.
    let source =
        FileConfig::open_with(args.config.clone(), args.expander, None, changes.clone()).await?;
    // Autostop stops the head only if `up` started it.
    let started = if gcs_answers(&addr).await {
        tracing::info!("a Ray GCS already answers at {addr}: using it");
        false
    } else {
        start_head(&config, &ray, args.port).await?;
        true
    };
    let gcs = loop_client(&addr)?;
    // A head `up` started: autostop stops it too, as `down` does.
    let head_stop = started.then(|| {
        Arc::new(DownHead {
            config: args.config.clone(),
            changes,
            local: Some((args.port, ray.clone())),
        }) as Arc<dyn HeadStop>
    });
    // A head `up` started and something else stopped (`rayscale down` beside it): the
    // loop ends, rather than asking a GCS that is gone.
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let until = started.then(|| {
        let (temp, gone) = (head_temp_dir(&config).display().to_string(), gone.clone());
        Box::pin(async move {
            while !pids_mentioning(&temp).is_empty() {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            gone.store(true, std::sync::atomic::Ordering::Relaxed);
            tracing::info!("the head's processes are gone: stopping the loop");
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
    });
    let end = run_loop(
        gcs,
        provider.clone(),
        &config.cluster_name,
        Box::new(source),
        DriverOptions {
            end_on_autostop: started,
            ..Default::default()
        },
        &args.ops,
        Some(&head_temp_dir(&config)),
        head_stop,
        until,
    )
    .await?;
    match end {
        RunEnd::Shutdown if gone.load(std::sync::atomic::Ordering::Relaxed) => {
            // Stopped by `down` (which terminates the workers too) or ended on its own:
            // the workers of a head that is gone go as well (the list reads no GCS).
            let workers: Vec<String> = provider
                .list()
                .await?
                .into_iter()
                .filter(|c| !c.is_head())
                .map(|c| c.cloud_instance_id)
                .collect();
            if !workers.is_empty() {
                provider.terminate(&workers, "up-head-gone").await?;
                for _ in 0..30 {
                    if provider.list().await?.is_empty() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            Ok(format!(
                "cluster {}: the head at {addr} is gone (stopped by rayscale down, or it \
                 ended); {} workers left were terminated; up ends",
                config.cluster_name,
                workers.len()
            ))
        }
        end => crate::cmd::run::autostop_end(end),
    }
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
            // and no Ray autoscaler of its own (see docs/src/getting-started/migrating.md).
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
