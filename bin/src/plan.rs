//! `rayscale plan --scenario FILE`: scenario in, decision JSON out.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use rayscale_core::config::{ClusterConfig, parse_yaml};
use rayscale_core::scenario::{build_request, decision_json, parse_instances};
use rayscale_core::scheduler::schedule;

/// Arguments of `rayscale plan`.
#[derive(Args)]
pub struct PlanArgs {
    /// The scenario file (YAML or JSON), see shared/spec/plan-scenario.md.
    #[arg(long)]
    scenario: PathBuf,
}

/// Exit status for malformed input.
const EXIT_BAD_INPUT: u8 = 2;

/// Runs `plan`, printing a one-line error and returning exit status 2 on bad input.
pub fn run(args: &PlanArgs) -> ExitCode {
    match plan(args) {
        Ok(json) => {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{json}").is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("rayscale plan: {msg}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn plan(args: &PlanArgs) -> Result<String> {
    let origin = args.scenario.display().to_string();
    let text = std::fs::read_to_string(&args.scenario)
        .with_context(|| format!("cannot read scenario {origin}"))?;
    let t0 = std::time::Instant::now();
    let doc = parse_yaml(&text, &origin)?;
    let t_parse = t0.elapsed();
    let top = doc
        .as_object()
        .ok_or_else(|| anyhow!("{origin}: expected a mapping at the top level"))?;
    for k in top.keys() {
        if !matches!(
            k.as_str(),
            "config" | "cluster_resource_state" | "instances"
        ) {
            return Err(anyhow!("{k}: unknown key in scenario"));
        }
    }
    let config_value = top
        .get("config")
        .ok_or_else(|| anyhow!("config: required key is missing"))?;
    let config = ClusterConfig::from_value(config_value, "config")?;
    let empty = serde_json::Value::Object(Default::default());
    let crs = match top.get("cluster_resource_state") {
        None | Some(serde_json::Value::Null) => &empty,
        Some(v) => v,
    };
    let state = rayscale_gcs_client::convert::cluster_resource_state_from_json(
        crs,
        "cluster_resource_state",
    )?;
    let instances = parse_instances(top.get("instances"), "instances")?;
    let request = build_request(
        &config,
        &state,
        &instances,
        "cluster_resource_state",
        "instances",
    )?;
    let t_build = t0.elapsed();
    let decision = schedule(&request);
    let t_sched = t0.elapsed();
    let out = decision_json(&decision, &request);
    if std::env::var_os("RAYSCALE_TIMINGS").is_some() {
        eprintln!(
            "parse {t_parse:?} build {t_build:?} schedule {t_sched:?} total {:?}",
            t0.elapsed()
        );
    }
    Ok(out)
}
