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
use crate::providers::ResourceFill;

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
/// (with the command's expander flags on top). With a resource fill-in (AWS), each
/// config read is filled in before it is used; when the fill-in fails (EC2 unreachable,
/// no `ec2:DescribeInstanceTypes` permission), the config is used as the YAML has it,
/// with a warning, and the fill-in is tried again on the next poll until it succeeds.
pub struct FileConfig {
    path: PathBuf,
    expander: ExpanderArgs,
    fill: Option<Arc<dyn ResourceFill>>,
    last: Option<String>,
    /// The config read last, not filled in yet (its fill-in failed).
    unfilled: Option<ClusterConfig>,
    /// The last fill-in error warned about (each new one is warned once).
    fill_error: Option<String>,
    /// The config read at start, handed to the first poll (its chain is built once).
    first: Option<Reloaded>,
    /// Where workers fetch the file mounts (the head's server), set on every config read.
    mounts: Option<rayscale_core::config::mounts::MountsSource>,
    /// The command line's overrides of the YAML (`up -n`, `--max-workers`), applied to
    /// every read.
    changes: Vec<(&'static str, serde_json::Value)>,
}

impl FileConfig {
    /// The config at `path`, with `expander` flags and resource fill-in `fill`, read now:
    /// a bad file or bad flags fail here, before anything starts. The first poll returns
    /// what was read.
    pub async fn open(
        path: PathBuf,
        expander: ExpanderArgs,
        fill: Option<Arc<dyn ResourceFill>>,
    ) -> anyhow::Result<Self> {
        Self::open_with(path, expander, fill, Vec::new()).await
    }

    /// [`FileConfig::open`], with the command line's `changes` applied to every read.
    pub async fn open_with(
        path: PathBuf,
        expander: ExpanderArgs,
        fill: Option<Arc<dyn ResourceFill>>,
        changes: Vec<(&'static str, serde_json::Value)>,
    ) -> anyhow::Result<Self> {
        let mut source = FileConfig {
            path,
            expander,
            fill,
            last: None,
            unfilled: None,
            fill_error: None,
            first: None,
            mounts: None,
            changes,
        };
        let first = source.read().await.map_err(anyhow::Error::msg)?;
        source.first = first;
        Ok(source)
    }
}

impl FileConfig {
    /// Every config read from now on (and the one read at start) says where workers fetch
    /// the file mounts.
    pub fn set_mounts(&mut self, mounts: Option<rayscale_core::config::mounts::MountsSource>) {
        if let Some(first) = &mut self.first {
            first.config.mounts_source = mounts.clone();
        }
        self.mounts = mounts;
    }
}

#[async_trait::async_trait]
impl ConfigSource for FileConfig {
    async fn poll(&mut self) -> Result<Option<Reloaded>, String> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        self.read().await
    }
}

impl FileConfig {
    /// Reads the file; `None` when its text did not change (and no earlier fill-in is
    /// left to finish).
    async fn read(&mut self) -> Result<Option<Reloaded>, String> {
        let origin = self.path.display().to_string();
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {origin}: {e}"))?;
        let config = if self.last.as_deref() == Some(text.as_str()) {
            // Unchanged: only a fill-in that failed before is tried again.
            match self.unfilled.take() {
                None => return Ok(None),
                Some(c) => match self.filled(&c).await {
                    Some(f) => f,
                    None => {
                        self.unfilled = Some(c);
                        return Ok(None);
                    }
                },
            }
        } else {
            let read = crate::overrides::apply(&text, &origin, &self.changes, false)
                .map_err(|e| e.to_string())?;
            self.unfilled = None;
            match self.filled(&read).await {
                Some(f) => f,
                None => {
                    self.unfilled = Some(read.clone());
                    read
                }
            }
        };
        let mut config = config;
        config.mounts_source = self.mounts.clone();
        if self.mounts.is_none() && crate::mounts::wanted(&config) && self.last.is_some() {
            tracing::warn!(
                "{origin}: file_mounts or cluster_synced_files were added after rayscale run \
                 started: restart it to serve them to the workers (new workers boot without them)"
            );
        }
        let chain = build_chain(&self.expander, &config)
            .map_err(|e| format!("{origin}: {}", format!("{e:#}").replace('\n', " ")))?;
        self.last = Some(text);
        Ok(Some(Reloaded { config, chain }))
    }

    /// `config` filled in (itself without a fill-in); `None` when the fill-in failed
    /// (warned once per distinct error).
    async fn filled(&mut self, config: &ClusterConfig) -> Option<ClusterConfig> {
        let Some(fill) = &self.fill else {
            return Some(config.clone());
        };
        match fill.fill(config).await {
            Ok(c) => {
                if self.fill_error.take().is_some() {
                    tracing::info!("{}: resources filled in", self.path.display());
                }
                Some(c)
            }
            Err(e) => {
                if self.fill_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(
                        "{}: {e}; node types keep the resources the YAML gives until it succeeds",
                        self.path.display()
                    );
                    self.fill_error = Some(e);
                }
                None
            }
        }
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
    until: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
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
    // Ctrl-C or SIGTERM, or `until` (for `up`: the head it started is gone).
    let shutdown = async move {
        match until {
            Some(u) => tokio::select! {
                () = ctrl_c() => {}
                () = u => {}
            },
            None => ctrl_c().await,
        }
    };
    Ok(driver.run(shutdown).await)
}

/// After autostop, the head is stopped by `down`, with the config as it is then (it may
/// have changed since the start): as `rayscale down` does for a cloud head, or the local
/// head's processes (`port`, `ray`) for a cluster `up` started here.
pub struct DownHead {
    pub config: PathBuf,
    /// The command line's overrides of the YAML (`up -n`).
    pub changes: Vec<(&'static str, serde_json::Value)>,
    pub local: Option<(u16, PathBuf)>,
}

#[async_trait::async_trait]
impl HeadStop for DownHead {
    async fn stop_head(&self) -> Result<String, String> {
        let config = crate::overrides::load_with(&self.config, &self.changes, false)
            .map_err(|e| format!("{e:#}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fill-in that fails its first `fail` calls, then sets the type `w`'s CPU to 7.
    struct Flaky {
        fail: u32,
        calls: AtomicU32,
    }

    #[async_trait::async_trait]
    impl ResourceFill for Flaky {
        async fn fill(&self, config: &ClusterConfig) -> Result<ClusterConfig, String> {
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail {
                return Err("EC2 said no".into());
            }
            let mut raw = config.raw.clone();
            raw["available_node_types"]["w"]["resources"] = serde_json::json!({"CPU": 7});
            ClusterConfig::from_value(&raw, "").map_err(|e| e.to_string())
        }
    }

    fn cpus(r: &Reloaded) -> Option<f64> {
        r.config
            .node_type("w")
            .and_then(|t| t.resources.get("CPU"))
            .map(rayscale_core::model::resources::to_f64)
    }

    #[tokio::test]
    async fn a_failed_fill_in_keeps_the_yamls_resources_and_is_tried_again_until_it_succeeds() {
        let dir = std::env::temp_dir().join(format!("rayscale-fill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("c.yaml");
        std::fs::write(
            &path,
            "cluster_name: f\nprovider: {type: local_processes}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {}, node_config: {}}\n  \
             w: {resources: {}, node_config: {}}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let fill = Arc::new(Flaky {
            fail: 2,
            calls: AtomicU32::new(0),
        });
        let mut source =
            FileConfig::open(path.clone(), ExpanderArgs::default(), Some(fill.clone()))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        // The first read's fill-in failed: the YAML's (empty) resources.
        let first = source.poll().await.ok().flatten();
        assert_eq!(first.as_ref().map(cpus), Some(None));
        // The file did not change, the fill-in fails again: nothing new.
        assert!(source.poll().await.ok().flatten().is_none());
        // It succeeds: the filled config, once.
        let filled = source.poll().await.ok().flatten();
        assert_eq!(filled.as_ref().map(cpus), Some(Some(7.0)));
        assert!(source.poll().await.ok().flatten().is_none());
        assert_eq!(
            fill.calls.load(Ordering::SeqCst),
            3,
            "no fill-in once it succeeded"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
