//! `rayscale run`: the autoscaling loop alone against a running cluster (as Ray's
//! monitor.py), for every provider.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use rayscale_core::driver::{DriverOptions, HeadStop, RunEnd};

use crate::driver::{DownHead, FileConfig, load_config, run_loop};
use crate::expander::ExpanderArgs;
use crate::gcs::{gcs_answers, loop_client};
use crate::ops::OpsArgs;
use crate::providers::ProviderEnv;

/// Arguments of `rayscale run`.
#[derive(Args)]
pub struct RunArgs {
    /// The cluster config.
    #[arg(long)]
    config: PathBuf,
    /// GCS address (host:port); `--address` too. Absent: `RAY_ADDRESS`, else the head
    /// started last on this host (/tmp/ray/ray_current_cluster), as `ray status` finds it.
    #[arg(long, visible_alias = "address")]
    gcs: Option<String>,
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
    /// When autostop (`rayscale.autostop_minutes`) has stopped every worker, stop the
    /// head too, as `rayscale down` does (what the head of a cluster `rayscale up`
    /// launched runs; a cloud provider's head call).
    #[arg(long)]
    autostop_head: bool,
    /// The port the head serves `file_mounts` and `cluster_synced_files` on, to the
    /// workers it boots (AWS, GCP, Azure; only when the config has them).
    #[arg(
        long,
        value_name = "PORT",
        env = "RAYSCALE_FILE_MOUNTS_PORT",
        default_value_t = rayscale_core::config::mounts::DEFAULT_PORT
    )]
    file_mounts_port: u16,
    #[command(flatten)]
    expander: ExpanderArgs,
    #[command(flatten)]
    ops: OpsArgs,
}

/// `rayscale run`.
pub async fn run(args: RunArgs) -> Result<String> {
    let mut config = load_config(&args.config)?;
    let gcs_address = crate::gcs::address(args.gcs.as_deref())?;
    for line in config.keys_not_acted_on() {
        tracing::warn!("{}: {line}", args.config.display());
    }
    let head_ip = match args.head_ip.as_deref() {
        Some("auto") => {
            Some(crate::providers::private_ip_from_metadata(&config.provider_type).await?)
        }
        other => other.map(str::to_string),
    };
    // The workers this head boots fetch the file mounts from it (as Ray's head rsyncs
    // them): served from this user's home, where `ray up` put them.
    if crate::mounts::wanted(&config) {
        let home = std::env::var_os("HOME").map(PathBuf::from).ok_or_else(|| {
            anyhow::anyhow!("HOME is not set: the file mounts' `~` is read there")
        })?;
        config.mounts_source =
            Some(crate::mounts::serve(&args.config, &home, args.file_mounts_port).await?);
    }
    let provider = crate::providers::build(
        &config,
        &ProviderEnv {
            gcs_address: gcs_address.clone(),
            ray_binary: args.ray.clone(),
            head_ip,
        },
    )
    .await?;
    let fill = crate::providers::resource_fill(&config).await?;
    let mut source = FileConfig::open(args.config.clone(), args.expander, fill).await?;
    source.set_mounts(config.mounts_source.clone());
    if !(args.interval.is_finite() && args.interval > 0.0) {
        bail!("--interval: expected a positive number of seconds");
    }
    let gcs = loop_client(&gcs_address)?;
    // A slow GCS is not a missing one: the probe allows 10 s for an answer (nothing
    // listening fails at once: a wrong address is bad input, one line, non-zero exit).
    if !gcs_answers(gcs.addr()).await {
        bail!(
            "no Ray GCS answers at {}: {}",
            gcs.addr(),
            crate::gcs::no_gcs_hint(gcs.addr())
        );
    }
    if args.autostop_head && config.provider_type == crate::local_head::LOCAL {
        bail!(
            "--autostop-head: local_processes clusters stop their head from `rayscale up` \
             (this host's head is not a cloud instance)"
        );
    }
    let head_stop: Option<Arc<dyn HeadStop>> = args.autostop_head.then(|| {
        Arc::new(DownHead {
            config: args.config.clone(),
            changes: Vec::new(),
            local: None,
        }) as Arc<dyn HeadStop>
    });
    let end = run_loop(
        gcs,
        provider,
        &config.cluster_name,
        Box::new(source),
        DriverOptions {
            interval: Duration::from_secs_f64(args.interval),
            end_on_autostop: args.autostop_head,
            ..Default::default()
        },
        &args.ops,
        None,
        head_stop,
        None,
    )
    .await?;
    autostop_end(end)
}

/// What `run` and `up` say when their loop ends: the head stopped after autostop, or why
/// it could not be (non-zero).
pub fn autostop_end(end: RunEnd) -> Result<String> {
    match end {
        RunEnd::HeadStopped(Ok(s)) => Ok(format!("autostop: {s}")),
        RunEnd::HeadStopped(Err(e)) => bail!(
            "autostop stopped every worker, but the head could not be stopped ({e}): \
             `rayscale down` it"
        ),
        RunEnd::Autostopped => bail!("autostop stopped every worker; the head is left to stop"),
        RunEnd::Shutdown => Ok(String::new()),
    }
}
