//! `rayscale explain --config C.yaml --gcs H:P`: the reasons for pending demand and for
//! each worker node, worked out now from the live cluster (its GCS state, the instance
//! table and availability rayscale stored), without acting: `snapshot` then `plan --why`
//! in one shot. It works whether or not a rayscale runs.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::status::why::render;

/// Arguments of `rayscale explain`.
#[derive(Args)]
pub struct ExplainArgs {
    /// The cluster config.
    #[arg(long)]
    config: PathBuf,
    /// GCS address (host:port); `--address` too. Absent: `RAY_ADDRESS`, else the head
    /// started last on this host (/tmp/ray/ray_current_cluster), as `ray status` finds it.
    #[arg(long, visible_alias = "address")]
    gcs: Option<String>,
    #[command(flatten)]
    expander: crate::expander::ExpanderArgs,
}

/// `rayscale explain`.
pub async fn explain(args: &ExplainArgs) -> Result<String> {
    let doc =
        super::snapshot::scenario(&crate::gcs::address(args.gcs.as_deref())?, &args.config).await?;
    let cluster = doc
        .pointer("/config/cluster_name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?")
        .to_string();
    let e = super::plan::explain_value(doc, &args.expander)?;
    Ok(render(&cluster, &e, e.at_ns))
}
