//! `up` and `down` for a cluster in a cloud: the launcher of `rayscale_core::launcher` on
//! the provider `provider.type` names (its head boots Ray's head and `rayscale run`).

use std::time::Duration;

use anyhow::Result;
use rayscale_core::config::ClusterConfig;
use rayscale_core::launcher::{self, LauncherSettings};
use rayscale_core::provider::boot::head_port;

/// How often the launcher looks at the cloud (`RAYSCALE_LAUNCHER_POLL_S`, for tests
/// on an emulator; 5 s by default).
fn settings() -> LauncherSettings {
    let mut s = LauncherSettings::default();
    if let Some(p) = std::env::var("RAYSCALE_LAUNCHER_POLL_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p > 0.0)
    {
        s.poll = Duration::from_secs_f64(p);
    }
    s
}

/// `rayscale up` for a cloud cluster: finds or launches the head; prints how to reach it.
pub async fn up(config: &ClusterConfig, path: &std::path::Path) -> Result<String> {
    let provider = crate::providers::build_for_launcher(config).await?;
    let port = head_port(config)?;
    let request_id = format!(
        "up-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let r = launcher::up(provider.as_ref(), config, &request_id, &settings()).await?;
    let ip = r.head.private_ip.as_deref().unwrap_or("?");
    Ok(format!(
        "cluster {name}: head {id} ({t}) {how}, private address {ip}\n\
         It starts Ray's head and rayscale at boot (logs on the head: \
         /var/lib/rayscale/boot.log and ~/rayscale.log).\n\
         From inside its network: ray status --address {ip}:{port}; \
         ray job submit --address http://{ip}:8265 -- python job.py\n\
         Stop it: rayscale down {path}",
        name = config.cluster_name,
        id = r.head.cloud_instance_id,
        t = r.head.node_type,
        how = if r.launched {
            "launched and running"
        } else {
            "already running"
        },
        path = path.display(),
    ))
}

/// `rayscale down` for a cloud cluster: workers, then the head, then late workers.
pub async fn down(config: &ClusterConfig) -> Result<String> {
    let provider = crate::providers::build_for_launcher(config).await?;
    let r = launcher::down(provider.as_ref(), &settings()).await?;
    Ok(format!(
        "cluster {} is down ({} workers, {})",
        config.cluster_name,
        r.workers.len(),
        match r.heads.as_slice() {
            [] => "no head was running".to_string(),
            hs => format!("head {}", hs.join(", ")),
        }
    ))
}
