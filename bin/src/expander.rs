//! Expander flags shared by the subcommands that schedule (`plan` now, the live loop later).
//! Flags override the cluster config's `rayscale.expander` block.

use anyhow::Result;
use clap::Args;
use rayscale_core::config::ClusterConfig;
use rayscale_core::expander::settings::{check_chain, parse_chain};
use rayscale_core::expander::{Expander, ExpanderChain};
use rayscale_gcs_client::expander::GrpcExpander;

/// How new node types are chosen.
#[derive(Args, Debug, Default)]
pub struct ExpanderArgs {
    /// Expander chain, e.g. `grpc,priority,least-waste` (built-ins: ray, random,
    /// most-demands, least-waste, least-nodes, price, priority, weighted, grpc). Default: the
    /// config's `rayscale.expander.chain`, else `ray` (Ray's own choice).
    #[arg(long, value_name = "NAME[,NAME...]")]
    expander: Option<String>,
    /// Seed of the random and weighted expanders.
    #[arg(long, value_name = "N")]
    expander_seed: Option<u64>,
    /// Address of the gRPC expander, e.g. https://127.0.0.1:7000.
    #[arg(long, value_name = "URL")]
    grpc_expander_url: Option<String>,
    /// PEM certificate (CA or self-signed) the gRPC expander's certificate must chain to.
    #[arg(long, value_name = "PEM")]
    grpc_expander_cert: Option<String>,
    /// Talk to the gRPC expander in plain text (loopback addresses only).
    #[arg(long)]
    grpc_expander_insecure: bool,
    /// Per-call timeout of the gRPC expander, in seconds (default 5).
    #[arg(long, value_name = "SECONDS")]
    grpc_expander_timeout: Option<f64>,
}

/// Builds the expander chain from the config's settings and the flags.
pub fn build_chain(args: &ExpanderArgs, config: &ClusterConfig) -> Result<ExpanderChain> {
    let mut s = config.expander.clone();
    if let Some(chain) = &args.expander {
        s.chain = parse_chain(chain);
        check_chain(&s.chain, "--expander")?;
    }
    if let Some(seed) = args.expander_seed {
        s.seed = seed;
    }
    if args.grpc_expander_url.is_some()
        || args.grpc_expander_cert.is_some()
        || args.grpc_expander_insecure
        || args.grpc_expander_timeout.is_some()
    {
        let mut g = s.grpc.clone().unwrap_or_default();
        if let Some(u) = &args.grpc_expander_url {
            g.url.clone_from(u);
        }
        if let Some(c) = &args.grpc_expander_cert {
            g.cert = Some(c.clone());
        }
        if args.grpc_expander_insecure {
            g.insecure = true;
        }
        if let Some(t) = args.grpc_expander_timeout {
            anyhow::ensure!(
                t.is_finite() && t > 0.0,
                "--grpc-expander-timeout: expected a positive number of seconds, got {t}"
            );
            g.timeout_s = t;
        }
        anyhow::ensure!(
            !g.url.is_empty(),
            "--grpc-expander-url: required with the other --grpc-expander flags"
        );
        s.grpc = Some(g);
    }
    let grpc: Option<Box<dyn Expander>> = match (&s.grpc, s.chain.iter().any(|n| n == "grpc")) {
        (Some(g), true) => Some(Box::new(GrpcExpander::new(
            g,
            &config.node_types,
            &s.prices,
        )?)),
        _ => None,
    };
    Ok(ExpanderChain::from_settings(&s, &config.node_types, grpc)?)
}
