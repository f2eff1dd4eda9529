//! `rayscale request-resources`: Ray's `request_resources` from the command line.

use anyhow::{Result, anyhow, bail};
use clap::Args;
use rayscale_core::model::{
    ClusterConstraint, ResourceMap, ResourceRequest, ResourceRequestByCount,
};
use rayscale_gcs_client::convert::constraint_to_proto;

use crate::gcs::one_shot_client;

/// Arguments of `rayscale request-resources`.
#[derive(Args)]
pub struct RequestArgs {
    /// GCS address (host:port); `--address` too. Absent: `RAY_ADDRESS`, else the head
    /// started last on this host (/tmp/ray/ray_current_cluster), as `ray status` finds it.
    #[arg(long, visible_alias = "address")]
    gcs: Option<String>,
    /// Ask for this many CPUs (as `num_cpus` of Ray's `request_resources`: one-CPU bundles).
    #[arg(long)]
    num_cpus: Option<u64>,
    /// Bundles as a JSON list of resource maps, e.g. '[{"CPU": 2}, {"GPU": 1}]'.
    #[arg(long)]
    bundles: Option<String>,
}

/// Builds the constraint of `request_resources(num_cpus, bundles)`: identical bundles
/// are counted together. Neither given clears the request.
pub fn constraint_from(num_cpus: Option<u64>, bundles: Option<&str>) -> Result<ClusterConstraint> {
    let mut list: Vec<ResourceMap> = Vec::new();
    if let Some(n) = num_cpus {
        for _ in 0..n.min(100_000) {
            list.push(ResourceMap::from_f64_pairs([("CPU".to_string(), 1.0)]));
        }
    }
    if let Some(text) = bundles {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| anyhow!("--bundles: not JSON: {e}"))?;
        let items = v
            .as_array()
            .ok_or_else(|| anyhow!("--bundles: expected a JSON list of resource maps"))?;
        for (i, b) in items.iter().enumerate() {
            let m = b
                .as_object()
                .ok_or_else(|| anyhow!("--bundles[{i}]: expected a mapping of resource: amount"))?;
            let mut pairs = Vec::new();
            for (k, x) in m {
                match x.as_f64() {
                    Some(f) if f.is_finite() && f >= 0.0 => pairs.push((k.clone(), f)),
                    _ => bail!("--bundles[{i}].{k}: expected a non-negative number, got {x}"),
                }
            }
            list.push(ResourceMap::from_f64_pairs(pairs));
        }
    }
    let mut out: Vec<ResourceRequestByCount> = Vec::new();
    for m in list {
        match out.iter_mut().find(|r| r.request.resources == m) {
            Some(r) => r.count += 1,
            None => out.push(ResourceRequestByCount {
                request: ResourceRequest {
                    resources: m,
                    ..Default::default()
                },
                count: 1,
            }),
        }
    }
    Ok(ClusterConstraint {
        resource_requests: out,
    })
}

/// `rayscale request-resources`.
pub async fn request_resources(args: &RequestArgs) -> Result<String> {
    let c = constraint_from(args.num_cpus, args.bundles.as_deref())?;
    let gcs = one_shot_client(&crate::gcs::address(args.gcs.as_deref())?)?;
    let n: u64 = c.resource_requests.iter().map(|r| r.count).sum();
    gcs.request_cluster_resource_constraint(constraint_to_proto(&c))
        .await?;
    Ok(if n == 0 {
        "cleared the resource request".to_string()
    } else {
        format!("requested {n} bundles")
    })
}
