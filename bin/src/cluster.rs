//! Subcommands that talk to a live GCS without running the loop: `status`,
//! `request-resources` and `snapshot`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use rayscale_core::availability::{Availability, DEFAULT_RECOVERY_S};
use rayscale_core::config::ClusterConfig;
use rayscale_core::driver::KvTable;
use rayscale_core::model::{
    ClusterConstraint, ResourceMap, ResourceRequest, ResourceRequestByCount,
};
use rayscale_gcs_client::client::{ClientOptions, GcsClient};
use rayscale_gcs_client::convert::constraint_to_proto;
use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;

/// A GCS client with the given per-attempt deadline and number of attempts.
pub fn gcs_client(addr: &str, deadline_s: u64, attempts: u32) -> Result<GcsClient> {
    Ok(GcsClient::new(
        addr,
        ClientOptions {
            deadline: std::time::Duration::from_secs(deadline_s),
            max_attempts: attempts,
            ..Default::default()
        },
    )?)
}

/// A client with short deadlines for one-shot commands (a dead GCS fails in seconds).
pub fn one_shot_client(addr: &str) -> Result<GcsClient> {
    gcs_client(addr, 3, 2)
}

/// Arguments of `rayscale status`.
#[derive(Args)]
pub struct StatusArgs {
    /// GCS address (host:port).
    #[arg(long)]
    gcs: String,
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
    /// --watch: the cluster whose instance table shows the recent transitions (default:
    /// every cluster the GCS holds a table of).
    #[arg(long)]
    cluster: Option<String>,
}

fn fmt_resources(m: &BTreeMap<String, f64>) -> String {
    m.iter()
        .filter(|(k, _)| !k.starts_with("node:"))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_request(r: &pb::ResourceRequest) -> String {
    format!("{{{}}}", fmt_resources(&r.resources_bundle))
}

/// `rayscale status`: a `ray status`-like view from `GetClusterStatus`, once or (with
/// `--watch`) refreshed.
pub async fn status(args: &StatusArgs) -> Result<String> {
    let gcs = one_shot_client(&args.gcs)?;
    if args.watch {
        if !(args.every.is_finite() && args.every > 0.0) {
            bail!("--every: expected a positive number of seconds");
        }
        crate::watch::watch(crate::watch::Watch {
            gcs: &gcs,
            cluster: args.cluster.as_deref(),
            every: std::time::Duration::from_secs_f64(args.every),
            count: args.count,
        })
        .await?;
        return Ok(String::new());
    }
    let reply = gcs.get_cluster_status().await?;
    Ok(render(&reply))
}

/// The status view of a `GetClusterStatus` reply.
pub fn render(reply: &pb::GetClusterStatusReply) -> String {
    let mut out = String::new();
    let state = reply.cluster_resource_state.clone().unwrap_or_default();
    let auto = reply.autoscaling_state.clone().unwrap_or_default();
    out.push_str(&format!(
        "cluster {} (state version {})\n",
        if state.cluster_session_name.is_empty() {
            "?"
        } else {
            &state.cluster_session_name
        },
        state.cluster_resource_state_version
    ));
    out.push_str("Nodes:\n");
    let mut by_type: BTreeMap<(String, String), u32> = BTreeMap::new();
    for n in &state.node_states {
        let status = pb::NodeStatus::try_from(n.status)
            .map(|s| s.as_str_name().to_string())
            .unwrap_or_else(|_| n.status.to_string());
        *by_type
            .entry((n.ray_node_type_name.clone(), status))
            .or_default() += 1;
    }
    if by_type.is_empty() {
        out.push_str("  (none)\n");
    }
    for ((t, s), k) in &by_type {
        out.push_str(&format!(
            "  {k} {} {s}\n",
            if t.is_empty() { "?" } else { t }
        ));
    }
    out.push_str("Pending launches:\n");
    if auto.pending_instance_requests.is_empty() && auto.pending_instances.is_empty() {
        out.push_str("  (none)\n");
    }
    for p in &auto.pending_instance_requests {
        out.push_str(&format!("  {} {} queued\n", p.count, p.ray_node_type_name));
    }
    for p in &auto.pending_instances {
        out.push_str(&format!(
            "  {} {} {}\n",
            p.instance_id, p.ray_node_type_name, p.details
        ));
    }
    // Unavailable node types travel as failed requests of count 0 (so `ray status -v`
    // shows them too).
    let (unavailable, failed): (Vec<_>, Vec<_>) = auto
        .failed_instance_requests
        .iter()
        .partition(|f| f.count == 0);
    out.push_str("Unavailable node types:\n");
    if unavailable.is_empty() {
        out.push_str("  (none)\n");
    }
    for f in &unavailable {
        out.push_str(&format!("  {}: {}\n", f.ray_node_type_name, f.reason));
    }
    out.push_str("Recent failures:\n");
    if failed.is_empty() {
        out.push_str("  (none)\n");
    }
    for f in &failed {
        out.push_str(&format!(
            "  {} {}: {}\n",
            f.count, f.ray_node_type_name, f.reason
        ));
    }
    out.push_str("Demands:\n");
    for d in &state.pending_resource_requests {
        if let Some(r) = &d.request {
            out.push_str(&format!("  {} x {}\n", d.count, fmt_request(r)));
        }
    }
    for g in &state.pending_gang_resource_requests {
        let bundles: Vec<String> = g.requests.iter().map(fmt_request).collect();
        out.push_str(&format!("  placement group [{}]\n", bundles.join(", ")));
    }
    for c in &state.cluster_resource_constraints {
        for r in &c.resource_requests {
            if let Some(q) = &r.request {
                out.push_str(&format!(
                    "  request_resources: {} x {}\n",
                    r.count,
                    fmt_request(q)
                ));
            }
        }
    }
    out.push_str("Infeasible:\n");
    let infeasible = auto.infeasible_resource_requests.len()
        + auto.infeasible_gang_resource_requests.len()
        + auto.infeasible_cluster_resource_constraints.len();
    if infeasible == 0 {
        out.push_str("  (none)\n");
    }
    for r in &auto.infeasible_resource_requests {
        out.push_str(&format!("  {}\n", fmt_request(r)));
    }
    for g in &auto.infeasible_gang_resource_requests {
        let bundles: Vec<String> = g.requests.iter().map(fmt_request).collect();
        out.push_str(&format!("  placement group [{}]\n", bundles.join(", ")));
    }
    for c in &auto.infeasible_cluster_resource_constraints {
        out.push_str(&format!(
            "  request_resources with {} bundle kinds\n",
            c.resource_requests.len()
        ));
    }
    out
}

/// Arguments of `rayscale request-resources`.
#[derive(Args)]
pub struct RequestArgs {
    /// GCS address (host:port).
    #[arg(long)]
    gcs: String,
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
    let gcs = one_shot_client(&args.gcs)?;
    let n: u64 = c.resource_requests.iter().map(|r| r.count).sum();
    gcs.request_cluster_resource_constraint(constraint_to_proto(&c))
        .await?;
    Ok(if n == 0 {
        "cleared the resource request".to_string()
    } else {
        format!("requested {n} bundles")
    })
}

/// Arguments of `rayscale snapshot`.
#[derive(Args)]
pub struct SnapshotArgs {
    /// GCS address (host:port).
    #[arg(long)]
    gcs: String,
    /// The cluster config.
    #[arg(long)]
    config: PathBuf,
}

/// `rayscale snapshot`: a `plan` scenario (JSON) of the live cluster.
pub async fn snapshot(args: &SnapshotArgs) -> Result<String> {
    let origin = args.config.display().to_string();
    let text =
        std::fs::read_to_string(&args.config).with_context(|| format!("cannot read {origin}"))?;
    let config = ClusterConfig::from_yaml_str(&text, &origin)?;
    let gcs = one_shot_client(&args.gcs)?;
    let state = gcs.get_cluster_resource_state(0).await?;
    let mut store = KvTable::new(&config.cluster_name);
    // The newest table, read only.
    let instances = store
        .load(&gcs, rayscale_core::driver::lease::MAX_EPOCH)
        .await?
        .instances;
    let instances: Vec<serde_json::Value> = instances
        .iter()
        .filter(|i| {
            !matches!(
                i.status,
                rayscale_core::model::InstanceStatus::Terminated
                    | rayscale_core::model::InstanceStatus::AllocationFailed
            )
        })
        .map(|i| {
            let mut m = serde_json::Map::new();
            m.insert("instance_id".into(), i.instance_id.clone().into());
            if let Some(c) = &i.cloud_instance_id {
                m.insert("cloud_instance_id".into(), c.clone().into());
            }
            m.insert("node_type".into(), i.node_type.clone().into());
            m.insert("status".into(), i.status.name().into());
            m.insert(
                "launch_config_hash".into(),
                i.launch_config_hash.clone().into(),
            );
            serde_json::Value::Object(m)
        })
        .collect();
    // The availability the loop last stored, as the scheduler would see it now.
    let mut avail = Availability::new(config.unavailable_type_ttl_s, DEFAULT_RECOVERY_S);
    if let Some(s) = store.load_availability(&gcs).await? {
        avail.restore(s);
    }
    let inputs = avail.scheduler_inputs(crate::driver::now_ns(), &config);
    let map = |m: Vec<(String, f64)>| -> serde_json::Map<String, serde_json::Value> {
        m.into_iter().map(|(k, v)| (k, v.into())).collect()
    };
    let doc = serde_json::json!({
        "config": config.raw,
        "cluster_resource_state": serde_json::to_value(&state)?,
        "instances": instances,
        "cloud_resource_availabilities": map(inputs.cloud_resource_availabilities),
        "recoverable_resource_availabilities": map(inputs.recoverable_resource_availabilities),
        "unavailable_node_types": inputs.unavailable_node_types,
    });
    Ok(serde_json::to_string_pretty(&doc)?)
}
