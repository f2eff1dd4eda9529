//! `rayscale plan --scenario FILE`: scenario in, decision JSON out.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use rayscale_core::config::ClusterConfig;
use rayscale_core::scenario::{AvailabilityInputs, build_request, decision_json, parse_instances};
use rayscale_core::scheduler::request::InstanceRecord;
use rayscale_core::scheduler::{SchedulingRequest, schedule_with};
use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;

/// Arguments of `rayscale plan`.
#[derive(Args)]
pub struct PlanArgs {
    /// The scenario file (YAML or JSON), format: docs/src/reference/scenario.md.
    #[arg(long)]
    scenario: PathBuf,
    /// Print why instead of the decision: the reasons for pending demand and for each
    /// worker node (as `rayscale status --why`).
    #[arg(long)]
    why: bool,
    #[command(flatten)]
    expander: crate::expander::ExpanderArgs,
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

/// A scenario document, decoded in one pass: the config and instances as generic values
/// (validated by the core with path-naming errors), the GCS state straight into Ray's wire
/// types (proto3 JSON rules).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioDoc {
    config: Option<serde_json::Value>,
    cluster_resource_state: Option<pb::ClusterResourceState>,
    instances: Option<serde_json::Value>,
    cloud_resource_availabilities: Option<serde_json::Value>,
    recoverable_resource_availabilities: Option<serde_json::Value>,
    unavailable_node_types: Option<serde_json::Value>,
    /// What the running rayscale stored (a snapshot's; not read by the plan).
    #[allow(dead_code)]
    explanation: Option<serde_json::Value>,
}

/// Decodes a scenario; a syntax error names the file, a wrong value names its path.
fn decode(text: &str, origin: &str) -> Result<ScenarioDoc> {
    let at = |path: String, msg: String, syntax: bool| {
        let msg = msg.replace('\n', " ");
        if syntax || path == "." || path.is_empty() {
            anyhow!("{origin}: {msg}")
        } else {
            anyhow!("{path}: {msg}")
        }
    };
    if text.trim_start().starts_with('{') {
        // JSON is YAML too, but decoding it directly is several times faster. Paths are
        // tracked only to explain an error.
        if let Ok(doc) = serde_json::from_str(text) {
            return Ok(doc);
        }
        let de = &mut serde_json::Deserializer::from_str(text);
        return serde_path_to_error::deserialize(de).map_err(|e| {
            let syntax = e.inner().is_syntax() || e.inner().is_eof();
            at(e.path().to_string(), e.inner().to_string(), syntax)
        });
    }
    // Plain YAML (what snapshots and most hand-written scenarios are) goes through the
    // fast reader; anything else, in one typed pass through libyaml.
    if let Some(value) = rayscale_core::config::fast_yaml::parse(text) {
        if let Ok(doc) = serde_json::from_value(value) {
            return Ok(doc);
        }
        // Read again to find the path of the error (only on bad input).
        let value = rayscale_core::config::fast_yaml::parse(text).unwrap_or_default();
        return serde_path_to_error::deserialize(value)
            .map_err(|e| at(e.path().to_string(), e.inner().to_string(), false));
    }
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // A syntax error names the file, a wrong value its path.
        match serde_yaml_ng::from_str::<serde::de::IgnoredAny>(text) {
            Err(syntax) => at(String::new(), syntax.to_string(), true),
            Ok(_) => at(e.path().to_string(), e.inner().to_string(), false),
        }
    })
}

/// What one scheduling pass on a scenario takes.
struct Planned {
    config: ClusterConfig,
    request: SchedulingRequest,
    instances: Vec<InstanceRecord>,
}

fn planned(doc: ScenarioDoc) -> Result<Planned> {
    let config_value = doc
        .config
        .ok_or_else(|| anyhow!("config: required key is missing"))?;
    let config = ClusterConfig::from_value(&config_value, "config")?;
    let state = rayscale_gcs_client::convert::cluster_resource_state(
        doc.cluster_resource_state.unwrap_or_default(),
        "cluster_resource_state",
    )?;
    let instances = parse_instances(doc.instances.as_ref(), "instances")?;
    let availability = AvailabilityInputs::parse(
        doc.cloud_resource_availabilities.as_ref(),
        doc.recoverable_resource_availabilities.as_ref(),
        doc.unavailable_node_types.as_ref(),
        &config,
    )?;
    let mut request = build_request(
        &config,
        &state,
        &instances,
        "cluster_resource_state",
        "instances",
    )?;
    availability.apply(&mut request);
    Ok(Planned {
        config,
        request,
        instances,
    })
}

/// The explanation of a scenario given as a JSON value (a snapshot taken live).
pub fn explain_value(
    doc: serde_json::Value,
    expander: &crate::expander::ExpanderArgs,
) -> Result<rayscale_core::explain::Explanation> {
    let doc: ScenarioDoc = serde_json::from_value(doc)?;
    explained(planned(doc)?, expander)
}

fn explained(
    p: Planned,
    expander: &crate::expander::ExpanderArgs,
) -> Result<rayscale_core::explain::Explanation> {
    let mut chain = crate::expander::build_chain(expander, &p.config)?;
    let (_, e) = rayscale_core::explain::of_snapshot(
        &p.config,
        &p.request,
        &p.instances,
        &mut chain,
        crate::driver::now_ns(),
    );
    Ok(e)
}

fn plan(args: &PlanArgs) -> Result<String> {
    let origin = args.scenario.display().to_string();
    let text = std::fs::read_to_string(&args.scenario)
        .with_context(|| format!("cannot read scenario {origin}"))?;
    let t0 = std::time::Instant::now();
    let doc = decode(&text, &origin)?;
    let t_parse = t0.elapsed();
    let p = planned(doc)?;
    if args.why {
        return Ok(explained(p, &args.expander)?.lines().join("\n"));
    }
    let mut chain = crate::expander::build_chain(&args.expander, &p.config)?;
    let t_build = t0.elapsed();
    let decision = schedule_with(&p.request, &mut chain);
    for w in chain.take_warnings() {
        eprintln!("rayscale plan: warning: {w}");
    }
    let t_sched = t0.elapsed();
    let out = decision_json(&decision, &p.request);
    if std::env::var_os("RAYSCALE_TIMINGS").is_some() {
        eprintln!(
            "parse {t_parse:?} build {t_build:?} schedule {t_sched:?} total {:?}",
            t0.elapsed()
        );
    }
    Ok(out)
}
