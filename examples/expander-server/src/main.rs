//! An example external expander for rayscale: it serves `rayscale.expander.v1.Expander`
//! and answers each `BestOptions` call with one option chosen at random, weighted by a YAML
//! file of `node_type: weight`. The file is read again when it changes (checked on every
//! call, so an edit takes effect on the next round); a broken edit keeps the last good
//! weights and is reported on stderr. Options of types without a weight are never chosen;
//! when no option has one, the answer is empty and rayscale's next expander decides.
//!
//! It is an example, not part of rayscale: it shows the contract an operator's own service
//! (costs, spot strategies, weekly business rules) has to follow.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use clap::Parser;
use rayscale_core::config::parse_yaml;
use rayscale_core::expander::SeededRng;
use rayscale_gcs_client::proto::rayscale::expander::v1 as ex;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// Command line.
#[derive(Parser)]
#[command(name = "rayscale-expander-example", about)]
struct Args {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:7000")]
    listen: SocketAddr,
    /// YAML file of `node_type: weight`.
    #[arg(long)]
    weights: PathBuf,
    /// Seed of the random choice.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// PEM certificate to serve TLS with (with --tls-key); without it, plain text on
    /// loopback only.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// Weights and where they come from.
struct State {
    path: PathBuf,
    text: String,
    weights: Vec<(String, f64)>,
    rng: SeededRng,
}

fn parse_weights(text: &str, origin: &str) -> Result<Vec<(String, f64)>> {
    let v = parse_yaml(text, origin)?;
    let Some(map) = v.as_object() else {
        bail!("{origin}: expected a mapping of node_type: weight");
    };
    let mut out = Vec::new();
    for (k, w) in map {
        match w.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => out.push((k.clone(), x)),
            _ => bail!("{origin}: {k}: expected a non-negative number, got {w}"),
        }
    }
    Ok(out)
}

impl State {
    /// Re-reads the file when its text changed; keeps the last good weights on error.
    fn refresh(&mut self) {
        let origin = self.path.display().to_string();
        match std::fs::read_to_string(&self.path) {
            Ok(text) if text != self.text => match parse_weights(&text, &origin) {
                Ok(w) => {
                    eprintln!("weights reloaded from {origin}: {w:?}");
                    self.weights = w;
                    self.text = text;
                }
                Err(e) => {
                    eprintln!("keeping the last weights: {e:#}");
                    self.text = text;
                }
            },
            Ok(_) => {}
            Err(e) => eprintln!("keeping the last weights: cannot read {origin}: {e}"),
        }
    }

    fn choose(&mut self, options: &[ex::Option]) -> Option<ex::Option> {
        let weighted: Vec<(&ex::Option, f64)> = options
            .iter()
            .filter_map(|o| {
                self.weights
                    .iter()
                    .find(|(t, _)| *t == o.node_group_id)
                    .map(|(_, w)| (o, *w))
            })
            .filter(|(_, w)| *w > 0.0)
            .collect();
        let sum: f64 = weighted.iter().map(|(_, w)| w).sum();
        if weighted.is_empty() || sum <= 0.0 {
            return None;
        }
        let mut x = self.rng.next_f64() * sum;
        for (o, w) in &weighted {
            if x < *w {
                return Some((*o).clone());
            }
            x -= w;
        }
        weighted.last().map(|(o, _)| (*o).clone())
    }
}

struct WeightedExpander(Arc<Mutex<State>>);

#[tonic::async_trait]
impl ex::expander_server::Expander for WeightedExpander {
    async fn best_options(
        &self,
        request: Request<ex::BestOptionsRequest>,
    ) -> Result<Response<ex::BestOptionsResponse>, Status> {
        let req = request.into_inner();
        let mut st = self
            .0
            .lock()
            .map_err(|_| Status::internal("state lock poisoned"))?;
        st.refresh();
        let options = st.choose(&req.options).into_iter().collect();
        Ok(Response::new(ex::BestOptionsResponse { options }))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let origin = args.weights.display().to_string();
    let text = std::fs::read_to_string(&args.weights)
        .with_context(|| format!("cannot read weights {origin}"))?;
    let weights = parse_weights(&text, &origin)?;
    let state = State {
        path: args.weights.clone(),
        text,
        weights,
        rng: SeededRng::new(args.seed),
    };
    let mut server = Server::builder();
    match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => {
            let cert = std::fs::read(c).with_context(|| format!("cannot read {}", c.display()))?;
            let key = std::fs::read(k).with_context(|| format!("cannot read {}", k.display()))?;
            server = server
                .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
                .context("TLS setup failed")?;
        }
        _ if !args.listen.ip().is_loopback() => {
            bail!(
                "--listen {}: plain text is only served on loopback; give --tls-cert and --tls-key",
                args.listen
            )
        }
        _ => {}
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    eprintln!("weights from {origin}; seed {}", args.seed);
    // TCP_NODELAY: without it, small answers wait for the peer's delayed ACK (~40 ms).
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    server
        .add_service(ex::expander_server::ExpanderServer::new(WeightedExpander(
            Arc::new(Mutex::new(state)),
        )))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("server failed")?;
    Ok(())
}
