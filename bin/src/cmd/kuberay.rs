//! `rayscale kuberay`: the autoscaler of one RayCluster, run as the head pod's sidecar in
//! place of Ray's (`ray kuberay-autoscaler`, same flags). The config is the RayCluster,
//! read every iteration; an optional cluster YAML adds only its `rayscale:` block.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rayscale_core::driver::{ConfigSource, DriverOptions, Reloaded};
use rayscale_provider_kuberay::{KubeRayConfig, KubeRayProvider};
use serde_json::Value;

use crate::driver::run_loop;
use crate::expander::{ExpanderArgs, build_chain};
use crate::gcs::{loop_client, wait_for_gcs};

/// Arguments of `rayscale kuberay` (those of Ray's `ray kuberay-autoscaler`, and
/// rayscale's own).
#[derive(clap::Args)]
pub struct KubeRayArgs {
    /// The RayCluster's name.
    #[arg(long)]
    cluster_name: String,
    /// The RayCluster's namespace.
    #[arg(long)]
    cluster_namespace: String,
    /// The GCS address (default: this pod's IP, port 6379, as Ray's sidecar).
    #[arg(long, value_name = "HOST:PORT")]
    gcs_address: Option<String>,
    /// A cluster YAML whose `rayscale:` block (expanders, unavailable-type TTL) applies;
    /// everything else comes from the RayCluster.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Reconcile at least every this many seconds.
    #[arg(long, default_value_t = 5.0)]
    interval: f64,
    #[command(flatten)]
    expander: ExpanderArgs,
    #[command(flatten)]
    ops: crate::ops::OpsArgs,
}

/// The RayCluster as the loop's config source.
struct RayClusterSource {
    provider: Arc<KubeRayProvider>,
    rayscale: Option<Value>,
    expander: ExpanderArgs,
    last: Option<Value>,
    /// The config read at start, handed to the loop's first poll.
    first: Option<Reloaded>,
}

#[async_trait::async_trait]
impl ConfigSource for RayClusterSource {
    async fn poll(&mut self) -> Result<Option<Reloaded>, String> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        let config = self
            .provider
            .cluster_config(self.rayscale.as_ref())
            .await
            .map_err(|e| e.to_string())?;
        if self.last.as_ref() == Some(&config.raw) {
            return Ok(None);
        }
        let chain = build_chain(&self.expander, &config)
            .map_err(|e| format!("{e:#}").replace('\n', " "))?;
        self.last = Some(config.raw.clone());
        Ok(Some(Reloaded { config, chain }))
    }
}

/// The `rayscale:` block of `path`, if any.
fn rayscale_block(path: &PathBuf) -> Result<Option<Value>> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {origin}"))?;
    let v = rayscale_core::config::parse_yaml(&text, &origin)?;
    Ok(v.get("rayscale").cloned())
}

/// This pod's IP: the address its hostname resolves to (`/etc/hosts` in a pod).
async fn pod_ip() -> Result<String> {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .context("--gcs-address: no HOSTNAME to find this pod's IP by; pass --gcs-address")?;
    let addrs = tokio::net::lookup_host((host.as_str(), 6379))
        .await
        .with_context(|| format!("--gcs-address: cannot resolve this pod's name {host:?}"))?;
    addrs
        .map(|a| a.ip())
        .find(|ip| !ip.is_loopback())
        .map(|ip| ip.to_string())
        .with_context(|| {
            format!("--gcs-address: {host:?} resolves to no pod IP; pass --gcs-address")
        })
}

/// `rayscale kuberay`.
pub async fn run(args: KubeRayArgs) -> Result<String> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        bail!("--interval: expected a positive number of seconds");
    }
    let cfg = KubeRayConfig::new(&args.cluster_name, &args.cluster_namespace)?;
    let rayscale = match &args.config {
        Some(p) => rayscale_block(p)?,
        None => None,
    };
    let gcs_address = match args.gcs_address.clone() {
        Some(a) => a,
        None => format!("{}:6379", pod_ip().await?),
    };
    let provider = Arc::new(KubeRayProvider::from_environment(cfg).await?);
    let mut source = RayClusterSource {
        provider: provider.clone(),
        rayscale,
        expander: args.expander,
        last: None,
        first: None,
    };
    // A bad RayCluster or expander flags fail now, in one line; the loop's first poll
    // takes what was read.
    source.first = source.poll().await.map_err(anyhow::Error::msg)?;
    let gcs = loop_client(&gcs_address)?;
    // The sidecar starts beside the head: wait for its GCS, as Ray's does.
    wait_for_gcs(gcs.addr()).await;
    tracing::info!(
        "autoscaling RayCluster {}/{} (GCS {gcs_address})",
        args.cluster_namespace,
        args.cluster_name
    );
    run_loop(
        gcs,
        provider,
        &args.cluster_name,
        Box::new(source),
        DriverOptions {
            interval: Duration::from_secs_f64(args.interval),
            ..Default::default()
        },
        &args.ops,
        None,
        None,
        None,
    )
    .await
    .map(|_| String::new())
}
