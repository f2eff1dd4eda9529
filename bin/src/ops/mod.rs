//! What the loop shows operators: Prometheus metrics and health endpoints on one port
//! (Ray's `AUTOSCALER_METRIC_PORT`, 44217), and Ray's autoscaler event file. `up`, `run`
//! and `kuberay` start them with [`start`] and hand the loop the observers it returns.

pub mod events;
pub mod health;
pub mod metrics;
pub mod preemption;
pub mod server;
pub mod why;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use rayscale_core::driver::Observer;
use rayscale_gcs_client::client::GcsClient;

/// Ray's default port of the autoscaler's metrics.
pub const DEFAULT_METRICS_PORT: u16 = 44217;

/// The operations flags of the commands that run the loop.
#[derive(Args, Clone, Debug)]
pub struct OpsArgs {
    /// Port of /metrics, /healthz and /readyz [default: 44217, Ray's
    /// AUTOSCALER_METRIC_PORT]; 0: none. A port given here that cannot be bound is an
    /// error; the default port in use is said and the loop runs without them (as Ray's).
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Address to serve them on (default, as Ray: 127.0.0.1 when the GCS is on a
    /// loopback address, else every interface).
    #[arg(long)]
    pub metrics_host: Option<IpAddr>,
    /// /readyz fails when no step went through for this many seconds.
    #[arg(long, default_value_t = 60.0)]
    pub ready_max_age: f64,
    /// The Ray session's logs directory, where Ray's autoscaler event file goes
    /// (default: <RAY_TMPDIR or /tmp/ray>/<session name>/logs, when it is on this machine).
    #[arg(long)]
    pub logs_dir: Option<PathBuf>,
}

/// Locks `m`, taking the data of a poisoned lock as it is (an observer that panicked
/// mid-update leaves counters, not broken invariants).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The local address this machine uses to reach `addr` (`host:port`): a UDP socket
/// connected towards it (no packet is sent) tells which interface routes there.
async fn local_ip_towards(addr: &str) -> Option<IpAddr> {
    let target = tokio::net::lookup_host(addr).await.ok()?.next()?;
    let bind: SocketAddr = if target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = std::net::UdpSocket::bind(bind).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// The host of a `host:port` GCS address.
fn gcs_host(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Reads the session name, starts the server (registering its address in the GCS, where
/// Ray's metrics agent finds the autoscaler's) and opens the event file. `temp_dir` is
/// Ray's temp dir when this command knows it (`up` chose it). Returns the loop's
/// observers (metrics, health, the event file).
pub async fn start(
    args: &OpsArgs,
    gcs: &GcsClient,
    temp_dir: Option<&Path>,
) -> Result<Vec<Arc<dyn Observer>>> {
    if !(args.ready_max_age.is_finite() && args.ready_max_age > 0.0) {
        bail!("--ready-max-age: expected a positive number of seconds");
    }
    let session = match gcs.kv_get("session", b"session_name").await {
        Ok(Some(v)) => String::from_utf8_lossy(&v).into_owned(),
        Ok(None) => {
            tracing::warn!("the GCS has no session name: metrics carry SessionName=\"\"");
            String::new()
        }
        Err(e) => {
            tracing::warn!("cannot read the session name ({e}): metrics carry SessionName=\"\"");
            String::new()
        }
    };
    let metrics = Arc::new(metrics::Metrics::new(&session, crate::driver::now_ns()));
    let health = Arc::new(health::Health::new(Duration::from_secs_f64(
        args.ready_max_age,
    )));
    let mut observers: Vec<Arc<dyn Observer>> = vec![metrics.clone(), health.clone()];
    let gcs_ip: Option<IpAddr> = gcs_host(gcs.addr()).parse().ok();
    let port = args.metrics_port.unwrap_or(DEFAULT_METRICS_PORT);
    let host = args.metrics_host.unwrap_or(match gcs_ip {
        Some(ip) if ip.is_loopback() => ip,
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    });
    let bound = match port {
        0 => None,
        _ => match server::serve(SocketAddr::new(host, port), metrics, health).await {
            Ok(b) => Some(b),
            Err(e) if args.metrics_port.is_none() => {
                tracing::warn!("{e:#}: running without /metrics, /healthz and /readyz");
                None
            }
            Err(e) => return Err(e),
        },
    };
    if let Some(bound) = bound {
        tracing::info!("metrics on http://{bound}/metrics (and /healthz, /readyz)");
        // Ray's metrics agent reads this key to scrape the autoscaler: this machine's
        // address as the GCS sees it (Ray's monitor registers its own IP).
        let ip = if host.is_unspecified() {
            local_ip_towards(gcs.addr()).await
        } else {
            Some(host)
        };
        match ip {
            Some(ip) => {
                let advertised = SocketAddr::new(ip, bound.port()).to_string();
                if let Err(e) = gcs
                    .kv_put("", b"AutoscalerMetricsAddress", advertised.as_bytes(), true)
                    .await
                {
                    tracing::warn!("cannot register the metrics address in the GCS: {e}");
                }
            }
            None => tracing::warn!(
                "cannot tell this machine's address towards the GCS: the metrics address is \
                 not registered (pass --metrics-host)"
            ),
        }
    }
    // The head's temp dir: the one this command chose, else Ray's default.
    let mut temps: Vec<PathBuf> = temp_dir.map(Path::to_path_buf).into_iter().collect();
    temps.push(
        std::env::var_os("RAY_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp/ray")),
    );
    let logs = match &args.logs_dir {
        Some(d) => Some(d.clone()),
        None if session.is_empty() => None,
        None => temps
            .iter()
            .map(|t| t.join(&session).join("logs"))
            .find(|d| d.is_dir()),
    };
    match logs {
        Some(dir) => {
            let host = std::fs::read_to_string("/etc/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "localhost".into());
            let seed = crate::driver::now_ns() as u64 ^ u64::from(std::process::id());
            match events::EventLog::open(&dir, &host, seed) {
                Ok(log) => {
                    tracing::info!("Ray events to {}", log.path().display());
                    observers.push(Arc::new(log));
                }
                // As Ray's monitor: a found directory it cannot write costs the events only.
                Err(e) if args.logs_dir.is_none() => {
                    tracing::warn!("{e:#}: running without Ray's event file")
                }
                Err(e) => return Err(e.context("--logs-dir")),
            }
        }
        None if !session.is_empty() => tracing::info!(
            "no Ray event file: the logs of session {session} are not on this machine \
             (pass --logs-dir)"
        ),
        None => {}
    }
    Ok(observers)
}
