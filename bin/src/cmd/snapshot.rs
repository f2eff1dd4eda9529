//! `rayscale snapshot`: a `plan` scenario (JSON) of the live cluster, to replay a
//! decision offline.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use rayscale_core::availability::{Availability, DEFAULT_RECOVERY_S};
use rayscale_core::config::ClusterConfig;
use rayscale_core::driver::KvTable;
use rayscale_core::driver::table::NAMESPACE;
use rayscale_core::explain::{Explanation, why_key};

use crate::gcs::one_shot_client;

/// Arguments of `rayscale snapshot`.
#[derive(Args)]
pub struct SnapshotArgs {
    /// GCS address (host:port); `--address` too. Absent: `RAY_ADDRESS`, else the head
    /// started last on this host (/tmp/ray/ray_current_cluster), as `ray status` finds it.
    #[arg(long, visible_alias = "address")]
    gcs: Option<String>,
    /// The cluster config.
    #[arg(long)]
    config: PathBuf,
}

/// `rayscale snapshot`: a `plan` scenario (JSON) of the live cluster.
pub async fn snapshot(args: &SnapshotArgs) -> Result<String> {
    let doc = scenario(&crate::gcs::address(args.gcs.as_deref())?, &args.config).await?;
    Ok(serde_json::to_string_pretty(&doc)?)
}

/// The `plan` scenario of the live cluster of `config` whose GCS is at `gcs`, with the
/// explanation the active rayscale stored last (when there is one that reads).
pub async fn scenario(gcs: &str, config: &Path) -> Result<serde_json::Value> {
    let origin = config.display().to_string();
    let text = std::fs::read_to_string(config).with_context(|| format!("cannot read {origin}"))?;
    let config =
        crate::providers::filled_or_as_is(ClusterConfig::from_yaml_str(&text, &origin)?).await;
    let gcs = one_shot_client(gcs)?;
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
    let stored = gcs
        .kv_get(NAMESPACE, why_key(&config.cluster_name).as_bytes())
        .await?
        .and_then(|b| Explanation::from_json(&b).ok());
    let mut doc = serde_json::json!({
        "config": config.raw,
        "cluster_resource_state": serde_json::to_value(&state)?,
        "instances": instances,
        "cloud_resource_availabilities": map(inputs.cloud_resource_availabilities),
        "recoverable_resource_availabilities": map(inputs.recoverable_resource_availabilities),
        "unavailable_node_types": inputs.unavailable_node_types,
    });
    if let (Some(e), Some(m)) = (stored, doc.as_object_mut()) {
        m.insert("explanation".into(), serde_json::to_value(&e)?);
    }
    Ok(doc)
}
