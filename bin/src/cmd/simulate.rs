//! `rayscale simulate`: what the autoscaler would do on a workload trace, in virtual time
//! (`rayscale_core::simulate`), for one config or several side by side (`--config` given
//! more than once, or `--compare` expander chains), with a summary and an SVG plot.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use rayscale_core::config::ClusterConfig;
use rayscale_core::expander::ExpanderChain;
use rayscale_core::expander::settings::{check_chain, parse_chain};
use rayscale_core::simulate::{Run, Sim, Trace, plot};
use serde::Deserialize;

/// Arguments of `rayscale simulate`.
#[derive(Args)]
pub struct SimulateArgs {
    /// A cluster config (give it more than once to compare configs).
    #[arg(long, required = true)]
    config: Vec<PathBuf>,
    /// The workload trace (YAML; see examples/traces).
    #[arg(long)]
    trace: PathBuf,
    /// Compare expander chains on each config (e.g. `--compare ray --compare
    /// least-waste,ray`); default: each config's own chain.
    #[arg(long, value_name = "CHAIN")]
    compare: Vec<String>,
    /// Where the SVG plot goes.
    #[arg(long, default_value = "simulate.svg")]
    svg: PathBuf,
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// Reads a trace; a type error names its field.
pub fn read_trace(path: &Path) -> Result<Trace> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {origin}"))?;
    let de = serde_yaml_ng::Deserializer::from_str(&text);
    // The YAML reader's message names the field already ("workload[0].duration_s: ...").
    let trace: Trace = Trace::deserialize(de).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    trace.validate(&origin)?;
    Ok(trace)
}

fn table(label: &str, chain: &str, r: &Run, wall: std::time::Duration) -> String {
    let s = &r.summary;
    let mut out = format!(
        "{label} (expander {chain}): {:.2} h simulated in {:.2} s ({} iterations)\n",
        s.end_s / 3600.0,
        wall.as_secs_f64(),
        s.iterations
    );
    out.push_str(&format!(
        "  {:<16} {:>9} {:>11} {:>10} {:>16} {:>14}\n",
        "node type", "launched", "node-hours", "cost", "capacity errors", "boot failures"
    ));
    for (t, x) in &s.types {
        out.push_str(&format!(
            "  {:<16} {:>9} {:>11.2} {:>10.2} {:>16} {:>14}\n",
            t, x.launched, x.node_hours, x.cost, x.capacity_errors, x.boot_failures
        ));
    }
    let peak = r
        .series
        .iter()
        .map(|x| x.nodes.values().sum::<u64>())
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "  total cost {:.2}; node-hours {:.2}; at most {peak} workers at once\n",
        s.cost,
        s.types.values().map(|x| x.node_hours).sum::<f64>()
    ));
    out.push_str(&format!(
        "  time to capacity: p50 {:.0} s, p90 {:.0} s, p99 {:.0} s, max {:.0} s\n",
        s.wait_p50_s, s.wait_p90_s, s.wait_p99_s, s.wait_max_s
    ));
    out.push_str(&format!(
        "  pending work: {:.1} unit-hours waited; placed {}, never placed {}\n",
        s.pending_area / 3600.0,
        s.placed,
        s.unplaced
    ));
    out.push_str(&format!(
        "  scale events: {} launch requests, {} instances terminated, {} drains refused\n",
        s.launch_requests, s.terminated, s.drains_refused
    ));
    if s.preemptions > 0 {
        out.push_str(&format!(
            "  preemptions: {}; work lost {:.1} unit-hours (run again)\n",
            s.preemptions,
            s.work_lost_unit_s / 3600.0
        ));
    }
    if s.consolidations > 0 {
        out.push_str(&format!(
            "  consolidation: {} nodes drained; {:.1} unit-hours of work run again\n",
            s.consolidations,
            s.consolidation_rerun_unit_s / 3600.0
        ));
    }
    if let Some(t) = s.autostopped_at_s {
        out.push_str(&format!("  autostop: every worker stopped at {t:.0} s\n"));
    }
    out
}

/// `rayscale simulate`.
pub fn run(args: &SimulateArgs) -> Result<String> {
    let trace = read_trace(&args.trace)?;
    let mut runs: Vec<(String, String, Run, std::time::Duration)> = Vec::new();
    for path in &args.config {
        let origin = path.display().to_string();
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read {origin}"))?;
        let config = ClusterConfig::from_yaml_str(&text, &origin)?;
        let chains: Vec<Option<&String>> = if args.compare.is_empty() {
            vec![None]
        } else {
            args.compare.iter().map(Some).collect()
        };
        for chain_text in chains {
            let mut settings = config.expander.clone();
            if let Some(c) = chain_text {
                settings.chain = parse_chain(c);
                check_chain(&settings.chain, "--compare")?;
            }
            if settings.chain.iter().any(|e| e == "grpc") {
                bail!(
                    "{origin}: the grpc expander cannot run in a simulation (give --compare without it)"
                );
            }
            let mut chain = ExpanderChain::from_settings(&settings, &config.node_types, None)
                .with_context(|| origin.clone())?;
            let sim = Sim::new(&config, &chain, &trace);
            let started = std::time::Instant::now();
            let r = sim.run(&mut chain).with_context(|| origin.clone())?;
            let mut label = stem(path);
            if args.config.len() > 1 && args.compare.len() > 1 {
                label = format!("{label} {}", settings.chain.join(","));
            } else if args.compare.len() > 1 {
                label = settings.chain.join(",");
            }
            let name = if settings.chain.is_empty() {
                "ray".to_string()
            } else {
                settings.chain.join(",")
            };
            runs.push((label, name, r, started.elapsed()));
        }
    }
    let plotted: Vec<(String, &Run)> = runs.iter().map(|(l, _, r, _)| (l.clone(), r)).collect();
    let svg = plot::svg(&plotted);
    std::fs::write(&args.svg, svg)
        .with_context(|| format!("cannot write {}", args.svg.display()))?;
    let mut out = String::new();
    for (label, chain, r, wall) in &runs {
        out.push_str(&table(label, chain, r, *wall));
    }
    if runs.len() > 1 {
        out.push_str("side by side:\n");
        out.push_str(&format!(
            "  {:<24} {:>10} {:>11} {:>9} {:>9} {:>13}\n",
            "run", "cost", "node-hours", "p50 wait", "p99 wait", "pending u-h"
        ));
        for (label, _, r, _) in &runs {
            let s = &r.summary;
            out.push_str(&format!(
                "  {:<24} {:>10.2} {:>11.2} {:>8.0}s {:>8.0}s {:>13.1}\n",
                label,
                s.cost,
                s.types.values().map(|x| x.node_hours).sum::<f64>(),
                s.wait_p50_s,
                s.wait_p99_s,
                s.pending_area / 3600.0
            ));
        }
    }
    out.push_str(&format!("plot: {}\n", args.svg.display()));
    Ok(out)
}
