//! `rayscale status`: a `ray status`-like view of the cluster from `GetClusterStatus`,
//! once, or refreshed with `--watch`.

mod render;
mod watch;
pub mod why;

use anyhow::{Result, bail};
use clap::Args;

use crate::gcs::one_shot_client;

pub use render::render;

/// Arguments of `rayscale status`.
#[derive(Args)]
pub struct StatusArgs {
    /// GCS address (host:port); `--address` too. Absent: `RAY_ADDRESS`, else the head
    /// started last on this host (/tmp/ray/ray_current_cluster), as `ray status` finds it.
    #[arg(long, visible_alias = "address")]
    gcs: Option<String>,
    /// Refresh until Ctrl-C: in place on a terminal, as plain lines (one per change and per
    /// instance transition) otherwise.
    #[arg(long)]
    watch: bool,
    /// --watch: seconds between refreshes.
    #[arg(long, default_value_t = 2.0)]
    every: f64,
    /// --watch: stop after this many refreshes.
    #[arg(long)]
    count: Option<u64>,
    /// Why: the reasons for pending demand and for each worker node, as the active
    /// rayscale stored them with its last iteration.
    #[arg(long, conflicts_with = "watch")]
    why: bool,
    /// --watch: the cluster whose instance table shows the recent transitions; --why:
    /// the cluster explained (default: every cluster the GCS holds a table, or an
    /// explanation, of).
    #[arg(long)]
    cluster: Option<String>,
}

/// `rayscale status`: a `ray status`-like view from `GetClusterStatus`, once or (with
/// `--watch`) refreshed.
pub async fn status(args: &StatusArgs) -> Result<String> {
    let gcs = one_shot_client(&crate::gcs::address(args.gcs.as_deref())?)?;
    if args.watch {
        if !(args.every.is_finite() && args.every > 0.0) {
            bail!("--every: expected a positive number of seconds");
        }
        watch::watch(watch::Watch {
            gcs: &gcs,
            cluster: args.cluster.as_deref(),
            every: std::time::Duration::from_secs_f64(args.every),
            count: args.count,
        })
        .await?;
        return Ok(String::new());
    }
    if args.why {
        return why::why(&gcs, args.cluster.as_deref(), crate::driver::now_ns()).await;
    }
    let reply = gcs.get_cluster_status().await?;
    Ok(render(&reply))
}
