//! The operations HTTP server: `/metrics` (OpenMetrics text), `/healthz`, `/readyz`.
//! One small hyper server on its own tokio task; a slow or broken client costs one task.
//! Bounded: at most [`MAX_CONNECTIONS`] connections are kept (a new one closes the oldest,
//! so a flood of idle connections never keeps a scraper out), each serves at most
//! [`MAX_REQUESTS`] requests, and a client that does not send its request headers within
//! 10 s is dropped.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::health::Health;
use super::metrics::Metrics;

/// Connections kept open at once.
pub const MAX_CONNECTIONS: usize = 256;

/// Requests served on one connection (then it is closed; a scraper opens another).
pub const MAX_REQUESTS: u64 = 1000;

/// OpenMetrics' content type (Prometheus reads it; so does every scraper since 2.5).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn route(req: &Request<Incoming>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => reply(StatusCode::OK, OPENMETRICS, metrics.encode()),
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => {
            let (ready, why) = health.readiness();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            reply(status, TEXT, why)
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

/// Binds `addr` now (a port in use fails here, in one line) and serves on a task.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-port: cannot listen on {addr}"))?;
    let bound = listener
        .local_addr()
        .context("the metrics listener has no address")?;
    tokio::spawn(async move {
        // Open connections by age, each with the switch that closes it.
        let open: Arc<
            std::sync::Mutex<std::collections::BTreeMap<u64, tokio::sync::oneshot::Sender<()>>>,
        > = Arc::default();
        let mut next = 0u64;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("metrics server: cannot accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (close_tx, close_rx) = tokio::sync::oneshot::channel();
            let id = next;
            next += 1;
            {
                let mut open = super::lock(&open);
                while open.len() >= MAX_CONNECTIONS {
                    // The oldest goes (dropping its sender closes it).
                    if open.pop_first().is_none() {
                        break;
                    }
                }
                open.insert(id, close_tx);
            }
            let (metrics, health, open) = (metrics.clone(), health.clone(), open.clone());
            tokio::spawn(async move {
                let served = std::sync::atomic::AtomicU64::new(0);
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let mut r = route(&req, &metrics, &health);
                    let n = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    if n >= MAX_REQUESTS {
                        r.headers_mut().insert(
                            hyper::header::CONNECTION,
                            hyper::header::HeaderValue::from_static("close"),
                        );
                    }
                    async move { Ok::<_, Infallible>(r) }
                });
                // A client that never finishes its request headers is dropped.
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    r = conn => {
                        if let Err(e) = r {
                            tracing::debug!("metrics server: connection ended: {e}");
                        }
                    }
                    // Closed to make room for a newer connection.
                    _ = close_rx => {}
                }
                super::lock(&open).remove(&id);
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get_metrics(addr: SocketAddr) -> String {
        let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect");
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut out = String::new();
        c.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ten_thousand_idle_connections_do_not_keep_a_scraper_out() {
        let metrics = Arc::new(Metrics::new("s", 0));
        let health = Arc::new(Health::new(std::time::Duration::from_secs(60)));
        let addr = serve("127.0.0.1:0".parse().expect("addr"), metrics, health)
            .await
            .expect("serve");
        // 10,000 connections that never send a byte, all still open on this side.
        let mut idle = Vec::new();
        for _ in 0..10_000 {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(c) => idle.push(c),
                // Past the machine's descriptor limit: what was opened is the flood.
                Err(e) => {
                    assert!(idle.len() >= 1_000, "only {} connections: {e}", idle.len());
                    break;
                }
            }
        }
        let reply = tokio::time::timeout(std::time::Duration::from_secs(5), get_metrics(addr))
            .await
            .expect("/metrics answers within 5 s despite the flood");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("autoscaler_"), "{reply}");
        drop(idle);
    }
}
