//! The gRPC expander: asks an external `rayscale.expander.v1.Expander` service which
//! option to take, as the Kubernetes Cluster Autoscaler's `grpc` expander does.
//!
//! It implements `rayscale_core::expander::Expander`, whose calls are synchronous (the
//! scheduler is a pure function), so the client owns a small current-thread runtime and
//! blocks on each call for at most the configured timeout. It must therefore not be called
//! from inside an async task (the live loop runs the scheduler on a blocking thread).
//! The channel connects lazily and reconnects by itself, so a server that was down is used
//! again as soon as it is back.

use std::collections::BTreeMap;
use std::time::Duration;

use rayscale_core::CoreError;
use rayscale_core::config::NodeTypeConfig;
use rayscale_core::expander::{Expander, ExpansionOption, GrpcExpanderSettings};
use rayscale_core::model::resources::to_f64;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::GcsError;
use crate::convert::resource_request_to_proto;
use crate::proto::ray::rpc::autoscaler as pb;
use crate::proto::rayscale::expander::v1 as ex;

/// A client of an external expander service.
pub struct GrpcExpander {
    /// Always `Some` until dropped (taken by `Drop`, which must not block: the owner may
    /// be an async task).
    rt: Option<tokio::runtime::Runtime>,
    client: ex::expander_client::ExpanderClient<Channel>,
    timeout: Duration,
    node_map: BTreeMap<String, ex::NodeGroupInfo>,
    calls: u64,
}

impl std::fmt::Debug for GrpcExpander {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcExpander")
            .field("timeout", &self.timeout)
            .field("calls", &self.calls)
            .finish()
    }
}

/// True for 127.0.0.0/8, ::1 and `localhost`.
fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h.eq_ignore_ascii_case("localhost") {
        return true;
    }
    h.parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

impl GrpcExpander {
    /// Sets up a client (without connecting yet: the first call connects). `prices` are
    /// per node per hour. TLS is the default: the server certificate is checked against
    /// `settings.cert` (a PEM file) or the public web roots; plain text needs
    /// `settings.insecure` and a loopback address.
    pub fn new(
        settings: &GrpcExpanderSettings,
        node_types: &[NodeTypeConfig],
        prices: &[(String, f64)],
    ) -> Result<Self, GcsError> {
        let bad = |m: String| GcsError::ExpanderConfig(m);
        let url = settings.url.trim();
        let (scheme, rest) = match url.split_once("://") {
            Some((s, r)) => (s.to_ascii_lowercase(), r),
            None => (
                if settings.insecure { "http" } else { "https" }.to_string(),
                url,
            ),
        };
        match (scheme.as_str(), settings.insecure) {
            ("https", false) | ("http", true) => {}
            ("http", false) => {
                return Err(bad(format!(
                    "{url}: plain-text gRPC needs --grpc-expander-insecure (loopback only)"
                )));
            }
            ("https", true) => {
                return Err(bad(format!(
                    "{url}: --grpc-expander-insecure is for plain-text http:// addresses"
                )));
            }
            (other, _) => return Err(bad(format!("{url}: unsupported scheme {other:?}"))),
        }
        let full = format!("{scheme}://{rest}");
        let timeout = Duration::from_secs_f64(settings.timeout_s);
        let mut endpoint = Endpoint::from_shared(full.clone())
            .map_err(|e| bad(format!("{url}: invalid address ({e})")))?
            .connect_timeout(timeout)
            .timeout(timeout);
        let host = endpoint.uri().host().unwrap_or_default().to_string();
        if host.is_empty() {
            return Err(bad(format!("{url}: the address has no host")));
        }
        if settings.insecure {
            if !is_loopback(&host) {
                return Err(bad(format!(
                    "{url}: plain text is only allowed to a loopback address; use TLS"
                )));
            }
        } else {
            let mut tls = ClientTlsConfig::new()
                .domain_name(host.trim_start_matches('[').trim_end_matches(']'));
            tls = match &settings.cert {
                Some(path) => {
                    let pem = std::fs::read(path)
                        .map_err(|e| bad(format!("cannot read certificate {path}: {e}")))?;
                    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                        return Err(bad(format!("{path}: not a PEM certificate")));
                    }
                    tls.ca_certificate(Certificate::from_pem(pem))
                }
                None => tls.with_webpki_roots(),
            };
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| bad(format!("{url}: TLS setup failed ({e})")))?;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| bad(format!("cannot start a runtime: {e}")))?;
        let channel = {
            let _guard = rt.enter();
            endpoint.connect_lazy()
        };
        let node_map = node_types
            .iter()
            .map(|t| {
                let price = prices.iter().find(|(n, _)| *n == t.name).map(|(_, p)| *p);
                (
                    t.name.clone(),
                    ex::NodeGroupInfo {
                        resources: t
                            .resources
                            .iter()
                            .map(|(k, v)| (k.to_string(), to_f64(v)))
                            .collect(),
                        labels: t.labels.iter().cloned().collect(),
                        price: price.unwrap_or(0.0),
                        has_price: price.is_some(),
                        priority: t.priority,
                    },
                )
            })
            .collect();
        Ok(GrpcExpander {
            rt: Some(rt),
            client: ex::expander_client::ExpanderClient::new(channel),
            timeout,
            node_map,
            calls: 0,
        })
    }

    /// Number of RPCs made so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    fn request(&self, options: &[ExpansionOption]) -> ex::BestOptionsRequest {
        ex::BestOptionsRequest {
            options: options
                .iter()
                .map(|o| ex::Option {
                    node_group_id: o.node_type.clone(),
                    node_count: i32::try_from(o.node_count).unwrap_or(i32::MAX),
                    debug: format!(
                        "{} x {}: holds {} demands, price {}",
                        o.node_count,
                        o.node_type,
                        o.demand_count,
                        o.price.map_or("unknown".to_string(), |p| format!("{p}"))
                    ),
                    demands: o
                        .demands
                        .iter()
                        .map(|(r, c)| pb::ResourceRequestByCount {
                            request: Some(resource_request_to_proto(r)),
                            count: i64::try_from(*c).unwrap_or(i64::MAX),
                        })
                        .collect(),
                })
                .collect(),
            node_map: options
                .iter()
                .filter_map(|o| {
                    self.node_map
                        .get(&o.node_type)
                        .map(|i| (o.node_type.clone(), i.clone()))
                })
                .collect(),
        }
    }
}

impl Drop for GrpcExpander {
    fn drop(&mut self) {
        // A plain drop of a runtime panics inside an async context; this never blocks.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Expander for GrpcExpander {
    fn name(&self) -> &str {
        "grpc"
    }

    fn best_options(&mut self, options: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        let req = self.request(options);
        self.calls += 1;
        let mut client = self.client.clone();
        let timeout = self.timeout;
        let Some(rt) = self.rt.as_ref() else {
            return Err(CoreError::invalid("grpc expander", "already shut down"));
        };
        let reply = rt
            .block_on(async move { tokio::time::timeout(timeout, client.best_options(req)).await });
        let fail = |m: String| CoreError::invalid("grpc expander", m);
        let reply = match reply {
            Err(_) => return Err(fail(format!("no answer within {timeout:?}"))),
            Ok(Err(status)) => {
                return Err(fail(format!(
                    "{:?}: {}",
                    status.code(),
                    status.message().replace('\n', " ")
                )));
            }
            Ok(Ok(r)) => r.into_inner(),
        };
        let mut out = Vec::new();
        for o in &reply.options {
            let Some(i) = options.iter().position(|x| x.node_type == o.node_group_id) else {
                return Err(fail(format!(
                    "answer names node type {:?}, which is not an option",
                    o.node_group_id
                )));
            };
            if !out.contains(&i) {
                out.push(i);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str, insecure: bool) -> GrpcExpanderSettings {
        GrpcExpanderSettings {
            url: url.into(),
            cert: None,
            insecure,
            timeout_s: 1.0,
        }
    }

    #[test]
    fn addresses_and_flags_are_checked() {
        let err = |s: GrpcExpanderSettings| {
            GrpcExpander::new(&s, &[], &[])
                .expect_err("should be refused")
                .to_string()
        };
        assert!(
            err(settings("http://127.0.0.1:1", false)).contains("needs --grpc-expander-insecure")
        );
        assert!(err(settings("https://127.0.0.1:1", true)).contains("for plain-text"));
        assert!(err(settings("10.0.0.1:80", true)).contains("only allowed to a loopback"));
        assert!(err(settings("ftp://x:1", false)).contains("unsupported scheme"));
        let mut s = settings("127.0.0.1:1", false);
        s.cert = Some("/nonexistent/ca.pem".into());
        assert!(err(s).contains("cannot read certificate /nonexistent/ca.pem"));
        assert!(GrpcExpander::new(&settings("127.0.0.1:1", true), &[], &[]).is_ok());
        assert!(GrpcExpander::new(&settings("[::1]:1", true), &[], &[]).is_ok());
        assert!(GrpcExpander::new(&settings("localhost:1", false), &[], &[]).is_ok());
    }
}
