//! `rayscale simulate` as a user runs it: the two example traces (one config; three
//! expander chains side by side), the summary it prints, the SVG it writes (parsed by
//! Python's XML parser, its series checked), and a bad trace failing in one line.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use rayscale_tests::ray_head::ray_from_env;
use rayscale_tests::{Scratch, workspace_bin};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn simulate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(workspace_bin("rayscale"))
        .arg("simulate")
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The polylines' `data-series`, read by Python's XML parser (so the file is well-formed
/// SVG), with their point counts.
fn series(svg: &Path) -> Vec<(String, usize)> {
    let (python, _) = ray_from_env();
    let out = Command::new(python)
        .args([
            "-c",
            "import json, sys, xml.etree.ElementTree as ET\n\
             root = ET.parse(sys.argv[1]).getroot()\n\
             assert root.tag == '{http://www.w3.org/2000/svg}svg', root.tag\n\
             print(json.dumps([[p.get('data-series'), len(p.get('points').split())] \
             for p in root.iter('{http://www.w3.org/2000/svg}polyline')]))",
        ])
        .arg(svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_burst_example_runs_and_plots() {
    let scratch = Scratch::new("sim-burst");
    let svg = scratch.path("burst.svg");
    let (ok, out, err) = simulate(&[
        "--config",
        "examples/local-cluster.yaml",
        "--trace",
        "examples/traces/burst.yaml",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("local-cluster (expander ray)"), "{out}");
    assert!(out.contains("time to capacity: p50"), "{out}");
    assert!(out.contains("never placed 0"), "{out}");
    let s = series(&svg);
    let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["worker", "pending work", "cost"], "{s:?}");
    assert!(s.iter().all(|(_, n)| *n > 10), "{s:?}");
}

#[test]
fn the_gpu_example_compares_three_chains_on_one_plot() {
    let scratch = Scratch::new("sim-gpu");
    let svg = scratch.path("gpu.svg");
    let (ok, out, err) = simulate(&[
        "--config",
        "examples/gpu-cluster.yaml",
        "--trace",
        "examples/traces/gpu-day.yaml",
        "--compare",
        "ray",
        "--compare",
        "least-waste,ray",
        "--compare",
        "price,ray",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("side by side:"), "{out}");
    // An hour simulated, every iteration of it.
    assert_eq!(out.matches("1.00 h simulated").count(), 3, "{out}");
    assert_eq!(out.matches("(721 iterations)").count(), 3, "{out}");
    let s = series(&svg);
    let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
    for run in ["ray", "least-waste,ray", "price,ray"] {
        for what in ["cpu16", "gpu1", "gpu8", "pending work", "cost"] {
            let want = format!("{run}: {what}");
            assert!(names.contains(&want.as_str()), "{want} missing: {names:?}");
        }
    }
    assert_eq!(names.len(), 15);
}

#[test]
fn a_bad_trace_fails_in_one_line() {
    let scratch = Scratch::new("sim-bad");
    let trace = scratch.path("bad.yaml");
    std::fs::write(
        &trace,
        "workload: [{at_s: 0, resources: {CPU: 1}, duration_s: soon}]\n",
    )
    .unwrap();
    let (ok, out, err) = simulate(&[
        "--config",
        "examples/local-cluster.yaml",
        "--trace",
        trace.to_str().unwrap(),
        "--svg",
        scratch.path("x.svg").to_str().unwrap(),
    ]);
    assert!(!ok && out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("rayscale simulate: ")
            && err.contains("bad.yaml: workload[0].duration_s: invalid type"),
        "{err}"
    );
}
