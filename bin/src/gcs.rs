//! Clients of the Ray GCS as the commands use them: one-shot commands fail in seconds on
//! a dead GCS, the loop's client retries, and a GCS that is slow to start is waited for.

use std::time::Duration;

use anyhow::Result;
use rayscale_gcs_client::client::{ClientOptions, GcsClient};

/// A GCS client with the given per-attempt deadline and number of attempts.
pub fn gcs_client(addr: &str, deadline_s: u64, attempts: u32) -> Result<GcsClient> {
    Ok(GcsClient::new(
        addr,
        ClientOptions {
            deadline: Duration::from_secs(deadline_s),
            max_attempts: attempts,
            ..Default::default()
        },
    )?)
}

/// A client with short deadlines for one-shot commands (a dead GCS fails in seconds).
pub fn one_shot_client(addr: &str) -> Result<GcsClient> {
    gcs_client(addr, 3, 2)
}

/// Whether a GCS answers at `addr` (one call; nothing listening fails at once, a slow GCS
/// has 10 s).
pub async fn gcs_answers(addr: &str) -> bool {
    gcs_probe(addr).await.is_ok()
}

async fn gcs_probe(addr: &str) -> Result<()> {
    let c = gcs_client(addr, 10, 1)?;
    c.get_cluster_resource_state(0).await?;
    Ok(())
}

/// Waits until the GCS at `addr` answers, as Ray's monitor does: a slow or not yet
/// started GCS is not a missing one. Says so when it starts waiting and every minute.
#[cfg_attr(not(feature = "kuberay"), allow(dead_code))]
pub async fn wait_for_gcs(addr: &str) {
    let started = std::time::Instant::now();
    let mut said: Option<std::time::Instant> = None;
    loop {
        match gcs_probe(addr).await {
            Ok(()) => {
                if said.is_some() {
                    tracing::info!(
                        "the GCS at {addr} answers (after {:.0?})",
                        started.elapsed()
                    );
                }
                return;
            }
            Err(e) => {
                if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::info!("waiting for the Ray GCS at {addr}: {e:#}");
                    said = Some(std::time::Instant::now());
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The client of the live loop.
pub fn loop_client(addr: &str) -> Result<GcsClient> {
    gcs_client(addr, 5, 3)
}
