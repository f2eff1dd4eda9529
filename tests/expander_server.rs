//! A scriptable `rayscale.expander.v1.Expander` server for tests: it answers with a fixed
//! node type, answers late, answers nonsense or nothing, counts calls and keeps the last
//! request. It runs on its own thread and runtime, so synchronous callers (the scheduler)
//! can use it from a plain `#[test]`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rayscale_gcs_client::proto::rayscale::expander::v1 as ex;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

use crate::serving::Serving;

/// How the server answers.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Picks the option of this node type (empty answer if it is not offered).
    Pick(String),
    /// Picks the first option.
    First,
    /// Picks the option with the fewest nodes (the first of ties).
    FewestNodes,
    /// Sleeps, then picks the option of this node type.
    Slow(Duration, String),
    /// Names a node type that was not offered.
    Nonsense,
    /// Answers with no option.
    Empty,
    /// Fails the call.
    Error,
}

/// What the server saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Number of calls.
    pub calls: u64,
    /// The last request.
    pub last: Option<ex::BestOptionsRequest>,
}

struct Svc {
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Seen>>,
}

#[tonic::async_trait]
impl ex::expander_server::Expander for Svc {
    async fn best_options(
        &self,
        request: Request<ex::BestOptionsRequest>,
    ) -> Result<Response<ex::BestOptionsResponse>, Status> {
        let req = request.into_inner();
        let mode = self.mode.lock().map(|m| m.clone()).unwrap_or(Mode::Error);
        if let Ok(mut s) = self.seen.lock() {
            s.calls += 1;
            s.last = Some(req.clone());
        }
        let pick = |t: &str| -> Vec<ex::Option> {
            req.options
                .iter()
                .filter(|o| o.node_group_id == t)
                .cloned()
                .collect()
        };
        let options = match mode {
            Mode::Pick(t) => pick(&t),
            Mode::First => req.options.first().cloned().into_iter().collect(),
            Mode::FewestNodes => req
                .options
                .iter()
                .min_by_key(|o| o.node_count)
                .cloned()
                .into_iter()
                .collect(),
            Mode::Slow(d, t) => {
                tokio::time::sleep(d).await;
                pick(&t)
            }
            Mode::Nonsense => vec![ex::Option {
                node_group_id: "no-such-type".into(),
                node_count: 1,
                ..Default::default()
            }],
            Mode::Empty => Vec::new(),
            Mode::Error => return Err(Status::unavailable("scripted failure")),
        };
        Ok(Response::new(ex::BestOptionsResponse { options }))
    }
}

/// A running test server; dropping it stops the server.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Seen>>,
    serving: Serving,
}

/// TLS identity (certificate and key PEM) for [`TestServer::start`].
pub type Tls = Option<(Vec<u8>, Vec<u8>)>;

impl TestServer {
    /// Starts a server on `addr` (port 0 for any free port).
    pub fn start(addr: SocketAddr, mode: Mode, tls: Tls) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let mode = Arc::new(Mutex::new(mode));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let svc = Svc {
            mode: mode.clone(),
            seen: seen.clone(),
        };
        let serving = Serving::spawn(listener, move |incoming| async move {
            let mut b = Server::builder();
            if let Some((cert, key)) = tls {
                match b.tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key))) {
                    Ok(x) => b = x,
                    Err(_) => return,
                }
            }
            let _ = b
                .add_service(ex::expander_server::ExpanderServer::new(svc))
                .serve_with_incoming(incoming)
                .await;
        })?;
        Ok(TestServer {
            addr,
            mode,
            seen,
            serving,
        })
    }

    /// Changes how it answers.
    pub fn set_mode(&self, mode: Mode) {
        if let Ok(mut m) = self.mode.lock() {
            *m = mode;
        }
    }

    /// Number of calls so far.
    pub fn calls(&self) -> u64 {
        self.seen.lock().map(|s| s.calls).unwrap_or(0)
    }

    /// The last request.
    pub fn last_request(&self) -> Option<ex::BestOptionsRequest> {
        self.seen.lock().ok().and_then(|s| s.last.clone())
    }

    /// Stops the server and waits until its port is closed.
    pub fn stop(mut self) {
        self.serving.stop();
    }
}
