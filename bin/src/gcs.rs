//! Clients of the Ray GCS as the commands use them: one-shot commands fail in seconds on
//! a dead GCS, the loop's client retries, and a GCS that is slow to start is waited for.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use rayscale_gcs_client::GcsError;
use rayscale_gcs_client::client::{ClientOptions, GcsClient};

/// Where Ray records the GCS address of the head started last on this host (`ray
/// start --head` writes it; `ray status` reads it).
pub const RAY_CURRENT_CLUSTER: &str = "/tmp/ray/ray_current_cluster";

/// The GCS address a command talks to, found as Ray's CLI finds it: `given` (`--gcs`
/// or `--address`), else `RAY_ADDRESS`, else the head Ray recorded on this host; `auto`
/// in either means the recorded one.
pub fn address(given: Option<&str>) -> Result<String> {
    address_from(
        given,
        std::env::var("RAY_ADDRESS").ok().as_deref(),
        Path::new(RAY_CURRENT_CLUSTER),
    )
}

/// [`address`] with its environment and file given.
pub fn address_from(given: Option<&str>, env: Option<&str>, recorded: &Path) -> Result<String> {
    let (value, from) = match (given, env) {
        (Some(g), _) => (g.trim(), "--gcs"),
        (None, Some(e)) if !e.trim().is_empty() => (e.trim(), "RAY_ADDRESS"),
        _ => ("auto", ""),
    };
    if value == "auto" {
        let text = std::fs::read_to_string(recorded).unwrap_or_default();
        let line = text.lines().next().unwrap_or("").trim();
        if line.is_empty() {
            bail!(
                "no GCS address: give --gcs HOST:PORT (or --address, or RAY_ADDRESS); no head \
                 started on this host is recorded in {}",
                recorded.display()
            );
        }
        return Ok(line.to_string());
    }
    if value.starts_with("ray://") {
        bail!(
            "{from} {value}: a Ray Client address, not the GCS's: give the head's GCS \
             address (host:port, port 6379 by default)"
        );
    }
    if value.starts_with("http://") || value.starts_with("https://") {
        bail!(
            "{from} {value}: a dashboard or job address, not the GCS's: give the head's GCS \
             address (host:port, port 6379 by default)"
        );
    }
    Ok(value.to_string())
}

/// What to do when no GCS answers at `addr`: the end of a command's error line.
pub fn no_gcs_hint(addr: &str) -> String {
    let port = addr.rsplit(':').next().unwrap_or("6379");
    format!(
        "is a Ray head running there? Start one with `RAY_enable_autoscaler_v2=1 ray start \
         --head --no-monitor --port={port}`, or give the head's GCS address (host:port) with \
         --gcs"
    )
}

/// The hint for an error whose cause is a GCS that did not answer at all (gRPC
/// Unavailable: nothing listening, or not reachable from here), if it is one.
pub fn hint_for(e: &anyhow::Error) -> Option<String> {
    e.chain().find_map(|c| match c.downcast_ref::<GcsError>() {
        Some(GcsError::Rpc { code, addr, .. }) if code == "Unavailable" => Some(no_gcs_hint(addr)),
        _ => None,
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gcs_address_is_found_as_rays_cli_finds_it() {
        let dir = std::env::temp_dir().join(format!("rayscale-addr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("ray_current_cluster");
        let none = dir.join("absent");
        let got = |g: Option<&str>, e: Option<&str>, f: &Path| address_from(g, e, f);
        assert_eq!(
            got(Some("10.0.0.1:6379"), Some("x:1"), &none).expect("found"),
            "10.0.0.1:6379"
        );
        assert_eq!(
            got(None, Some("10.0.0.2:6379"), &none).expect("found"),
            "10.0.0.2:6379"
        );
        std::fs::write(&file, "127.0.0.1:6390\n").expect("write");
        assert_eq!(got(None, None, &file).expect("found"), "127.0.0.1:6390");
        assert_eq!(
            got(None, Some("auto"), &file).expect("found"),
            "127.0.0.1:6390"
        );
        assert_eq!(
            got(Some("auto"), None, &file).expect("found"),
            "127.0.0.1:6390"
        );
        let e = got(None, None, &none).expect_err("refused").to_string();
        assert!(e.starts_with("no GCS address: give --gcs"), "{e}");
        let e = got(None, Some("ray://h:10001"), &file)
            .expect_err("refused")
            .to_string();
        assert!(
            e.starts_with("RAY_ADDRESS ray://h:10001: a Ray Client address"),
            "{e}"
        );
        let e = got(Some("http://h:8265"), None, &file)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("a dashboard or job address"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
