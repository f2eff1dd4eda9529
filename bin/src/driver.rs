//! Wiring of the live loop: `rayscale_core::driver::Driver` over the gRPC GCS client, a
//! provider, the config file (re-read every step, as Ray re-reads its config) and the
//! system clock. The loop itself, and its tests in virtual time, live in the core.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use rayscale_core::config::ClusterConfig;
use rayscale_core::driver::{
    Clock, ConfigSource, Driver, DriverOptions, HeadStop, Reloaded, RunEnd,
};
use rayscale_core::provider::CloudInstanceProvider;
use rayscale_gcs_client::client::GcsClient;

use crate::expander::{ExpanderArgs, build_chain};

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> i64 {
        now_ns()
    }
}

/// Wall-clock time in ns since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The cluster config file, re-read on every step; a change rebuilds the expander chain
/// (with the command's expander flags on top).
pub struct FileConfig {
    path: PathBuf,
    expander: ExpanderArgs,
    last: Option<String>,
    /// The config read at start, handed to the first poll (its chain is built once).
    first: Option<Reloaded>,
}

impl FileConfig {
    /// The config at `path`, with `expander` flags, read now: a bad file or bad flags fail
    /// here, before anything starts. The first poll returns what was read.
    pub fn open(path: PathBuf, expander: ExpanderArgs) -> anyhow::Result<Self> {
        let mut source = FileConfig {
            path,
            expander,
            last: None,
            first: None,
        };
        let first = source.read().map_err(anyhow::Error::msg)?;
        source.first = first;
        Ok(source)
    }
}

#[async_trait::async_trait]
impl ConfigSource for FileConfig {
    async fn poll(&mut self) -> Result<Option<Reloaded>, String> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        self.read()
    }
}

impl FileConfig {
    /// Reads the file; `None` when its text did not change.
    fn read(&mut self) -> Result<Option<Reloaded>, String> {
        let origin = self.path.display().to_string();
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {origin}: {e}"))?;
        if self.last.as_deref() == Some(text.as_str()) {
            return Ok(None);
        }
        let config = ClusterConfig::from_yaml_str(&text, &origin).map_err(|e| e.to_string())?;
        let chain = build_chain(&self.expander, &config)
            .map_err(|e| format!("{origin}: {}", format!("{e:#}").replace('\n', " ")))?;
        self.last = Some(text);
        Ok(Some(Reloaded { config, chain }))
    }
}

/// This process, for the lease's holder field: host and pid.
fn holder() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host} pid {}", std::process::id())
}

/// Starts the ops endpoints (`ops`; the event file under `temp_dir`, else found) and
/// runs the loop of cluster `cluster` until Ctrl-C or SIGTERM (or, with
/// `options.end_on_autostop`, until autostop has stopped every worker and `head_stop`
/// the head).
#[allow(clippy::too_many_arguments)]
pub async fn run_loop(
    gcs: GcsClient,
    provider: Arc<dyn CloudInstanceProvider>,
    cluster: &str,
    source: Box<dyn ConfigSource>,
    options: DriverOptions,
    ops: &crate::ops::OpsArgs,
    temp_dir: Option<&Path>,
    head_stop: Option<Arc<dyn HeadStop>>,
) -> Result<RunEnd> {
    let observers = crate::ops::start(ops, &gcs, temp_dir).await?;
    let seed = now_ns() as u64 ^ (u64::from(std::process::id()) << 32);
    let mut driver = Driver::new(
        cluster,
        Arc::new(gcs),
        provider,
        SystemClock,
        source,
        DriverOptions {
            holder: holder(),
            id_seed: seed,
            ..options
        },
    );
    for o in observers {
        driver = driver.observe(o);
    }
    if let Some(h) = head_stop {
        driver = driver.stop_head_with(h);
    }
    Ok(driver.run(ctrl_c()).await)
}

/// After autostop, the head is stopped by `down`, with the config as it is then (it may
/// have changed since the start): as `rayscale down` does for a cloud head, or the local
/// head's processes (`port`, `ray`) for a cluster `up` started here.
pub struct DownHead {
    pub config: PathBuf,
    pub local: Option<(u16, PathBuf)>,
}

#[async_trait::async_trait]
impl HeadStop for DownHead {
    async fn stop_head(&self) -> Result<String, String> {
        let config = load_config(&self.config).map_err(|e| format!("{e:#}"))?;
        let r = match &self.local {
            Some((port, ray)) => crate::cmd::down::down_local(&config, *port, ray).await,
            None => crate::launch::down(&config).await,
        };
        r.map_err(|e| format!("{e:#}"))
    }
}

/// Reads and checks the cluster config at `path`.
pub fn load_config(path: &Path) -> Result<ClusterConfig> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {origin}"))?;
    Ok(ClusterConfig::from_yaml_str(&text, &origin)?)
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM (what Kubernetes and systemd send): the loop
/// then stops between iterations, after the effects under way.
async fn ctrl_c() {
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
