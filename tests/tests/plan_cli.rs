//! End-to-end tests of `rayscale plan`: shipped examples against Ray's recorded decisions,
//! and bad input (exit 2, one line naming the path, nothing on stdout).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The `rayscale` binary of the same profile as this test.
fn rayscale() -> Command {
    Command::new(rayscale_tests::workspace_bin("rayscale"))
}

fn plan(file: &Path) -> (i32, String, String) {
    let out = rayscale()
        .args(["plan", "--scenario"])
        .arg(file)
        .output()
        .expect("rayscale runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn examples_match_rays_recorded_decisions() {
    let dir = root().join("examples/scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("examples exist") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        if !name.ends_with(".yaml") {
            continue;
        }
        let expected_path = dir.join(name.replace(".yaml", ".expected.json"));
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&expected_path).expect("expected decision recorded"),
        )
        .expect("expected is JSON");
        let (code, stdout, stderr) = plan(&path);
        assert_eq!(code, 0, "{name}: {stderr}");
        let got: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is JSON");
        assert_eq!(got, expected, "{name}");
        n += 1;
    }
    assert!(n >= 4, "only {n} examples found");
}

fn bad(name: &str, text: &str) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("rayscale-plan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write scenario");
    plan(&path)
}

const GOOD: &str = r#"
config:
  cluster_name: t
  max_workers: 4
  head_node_type: head
  provider: {type: local_processes}
  available_node_types:
    head: {resources: {CPU: 0}, node_config: {}}
    gpu: {resources: {CPU: 8, GPU: 1}, node_config: {}}
cluster_resource_state:
  pending_resource_requests:
    - {request: {resources_bundle: {GPU: 1}}, count: 2}
"#;

#[test]
fn good_scenario_plans() {
    let (code, stdout, _) = bad("good.yaml", GOOD);
    assert_eq!(code, 0);
    assert_eq!(
        stdout.trim(),
        r#"{"infeasible_constraints":[],"infeasible_gang_requests":[],"infeasible_requests":[],"launch":{"gpu":2},"terminate":[]}"#
    );
}

#[test]
fn plan_why_gives_the_reasons_of_a_scenario() {
    // Two {GPU: 1} fit; three more than the max of four; one {GPU: 2} no type has.
    let text = GOOD.replace(
        "count: 2}",
        "count: 7}\n    - {request: {resources_bundle: {GPU: 2}}, count: 1}",
    );
    let dir = std::env::temp_dir().join(format!("rayscale-plan-why-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("why.yaml");
    std::fs::write(&path, text).expect("write scenario");
    let out = rayscale()
        .args(["plan", "--why", "--scenario"])
        .arg(&path)
        .output()
        .expect("rayscale runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec![
            "Pending demand:",
            "  4 tasks and actors ({GPU: 1} x 4): waiting for 4 gpu nodes being launched",
            "  3 tasks and actors ({GPU: 1} x 3): the cluster is at its max_workers (4)",
            "  1 task or actor ({GPU: 2} x 1): infeasible: no node type has the resources; \
             the closest, gpu, lacks GPU 2 (it has 1)",
            "Worker nodes: none",
        ]
    );
}

#[test]
fn bad_inputs_exit_2_with_one_line_naming_the_path() {
    let cases = [
        (
            GOOD.replace("GPU: 1}, node_config", "GPU: one}, node_config"),
            "config.available_node_types.gpu.resources.GPU: expected an integer, got \"one\"",
        ),
        (
            GOOD.replace("count: 2", "count: two"),
            "cluster_resource_state.pending_resource_requests[0].count",
        ),
        (
            GOOD.replace("max_workers: 4", "max_workers: 4\n  colour: red"),
            "config.colour: unknown key",
        ),
        (
            format!("{GOOD}instances:\n  - {{instance_id: q, node_type: nope, status: QUEUED}}\n"),
            "instances[0].node_type: unknown node type \"nope\"",
        ),
        (
            format!("{GOOD}instances:\n  - {{instance_id: q, node_type: gpu, status: SLEEPING}}\n"),
            "instances[0].status: unknown instance status \"SLEEPING\"",
        ),
        ("config: [1, 2\n".to_string(), "bad.yaml"),
        (
            GOOD.replace(
                "cluster_resource_state:",
                "cluster_resource_state:\n  cluster_resource_constraints: [{}, {}]",
            ),
            "cluster_resource_state.cluster_resource_constraints: at most one",
        ),
    ];
    for (text, want) in cases {
        let (code, stdout, stderr) = bad("bad.yaml", &text);
        assert_eq!(code, 2, "want exit 2 for {want}: {stderr}");
        assert!(stdout.is_empty(), "stdout must be empty: {stdout}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(want), "{stderr:?} should name {want:?}");
    }
}

#[test]
fn missing_file_is_an_error() {
    let (code, stdout, stderr) = plan(Path::new("/nonexistent/scenario.yaml"));
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(stderr.contains("/nonexistent/scenario.yaml"));
}

fn plan_with(file: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = rayscale()
        .args(["plan", "--scenario"])
        .arg(file)
        .args(extra)
        .output()
        .expect("rayscale runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn launch_of(stdout: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(stdout).expect("stdout is JSON");
    v["launch"].clone()
}

#[test]
fn expander_block_and_flag_choose_the_node_type() {
    let file = root().join("examples/expanders/price.yaml");
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/expanders/price.expected.json"))
            .expect("expected decision recorded"),
    )
    .expect("JSON");
    let (code, stdout, stderr) = plan_with(&file, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).expect("JSON"),
        expected
    );
    assert_eq!(launch_of(&stdout), serde_json::json!({"spot-large": 2}));
    // The flag overrides the block; `ray` replays Ray's own alternating choice.
    let (code, stdout, _) = plan_with(&file, &["--expander", "ray"]);
    assert_eq!(code, 0);
    assert_eq!(
        launch_of(&stdout),
        serde_json::json!({"cpu-large": 1, "spot-large": 1})
    );
    let (_, stdout, _) = plan_with(&file, &["--expander", "least-nodes"]);
    assert_eq!(launch_of(&stdout), serde_json::json!({"cpu-large": 2}));
    // Seeded random: the same seed gives the same decision.
    let a = plan_with(&file, &["--expander", "random", "--expander-seed", "5"]).1;
    let b = plan_with(&file, &["--expander", "random", "--expander-seed", "5"]).1;
    assert_eq!(a, b);
}

#[test]
fn an_unreachable_grpc_expander_falls_back_with_a_warning() {
    let file = root().join("examples/expanders/price.yaml");
    // Port 1 on loopback: nothing listens there.
    let (code, stdout, stderr) = plan_with(
        &file,
        &[
            "--expander",
            "grpc,price",
            "--grpc-expander-url",
            "127.0.0.1:1",
            "--grpc-expander-insecure",
            "--grpc-expander-timeout",
            "1",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(launch_of(&stdout), serde_json::json!({"spot-large": 2}));
    assert!(
        stderr.contains("warning: expander grpc failed") && stderr.contains("price decides"),
        "{stderr}"
    );
}

#[test]
fn bad_expander_settings_exit_2_with_one_line() {
    let file = root().join("examples/expanders/price.yaml");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--expander", "cheapest"],
            "--expander: unknown expander \"cheapest\"",
        ),
        (&["--expander", "grpc"], "grpc needs a server address"),
        (
            &[
                "--expander",
                "grpc",
                "--grpc-expander-url",
                "http://10.1.2.3:7000",
            ],
            "plain-text gRPC needs --grpc-expander-insecure",
        ),
        (
            &[
                "--grpc-expander-url",
                "127.0.0.1:7000",
                "--grpc-expander-cert",
                "/nonexistent.pem",
                "--expander",
                "grpc",
            ],
            "cannot read certificate /nonexistent.pem",
        ),
    ];
    for (args, want) in cases {
        let (code, stdout, stderr) = plan_with(&file, args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(want), "{stderr:?} should contain {want:?}");
    }
    let text = std::fs::read_to_string(&file)
        .expect("example")
        .replace("cpu-small: 0.10", "cpu-smal: 0.10");
    let (code, _, stderr) = bad("bad-block.yaml", &text);
    assert_eq!(code, 2);
    assert!(
        stderr
            .contains("config.rayscale.expander.prices.cpu-smal: not one of available_node_types"),
        "{stderr}"
    );
}

const TWINS: &str = r#"
config:
  cluster_name: t
  head_node_type: head
  provider: {type: local_processes}
  available_node_types:
    head: {resources: {CPU: 0}, node_config: {}}
    a: {resources: {CPU: 4}, node_config: {}}
    b: {resources: {CPU: 4}, node_config: {}}
cluster_resource_state:
  pending_resource_requests:
    - {request: {resources_bundle: {CPU: 4}}, count: 2}
"#;

fn launched(text: &str) -> serde_json::Value {
    let (code, stdout, stderr) = bad("avail.yaml", text);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    v["launch"].clone()
}

#[test]
fn availability_inputs_choose_the_type() {
    // Ray alternates between identical types (the type just used goes to the end).
    assert_eq!(launched(TWINS), serde_json::json!({"a": 1, "b": 1}));
    let unavailable = format!("{TWINS}unavailable_node_types: [a]\n");
    assert_eq!(launched(&unavailable), serde_json::json!({"b": 2}));
    let recovering = format!("{TWINS}recoverable_resource_availabilities: {{a: 0.0}}\n");
    assert_eq!(launched(&recovering), serde_json::json!({"b": 2}));
    let scarce = format!("{TWINS}cloud_resource_availabilities: {{a: 0.25, b: 0.5}}\n");
    assert_eq!(launched(&scarce), serde_json::json!({"b": 2}));
}

#[test]
fn bad_availability_inputs_name_their_path() {
    for (extra, path) in [
        (
            "unavailable_node_types: [nope]\n",
            "unavailable_node_types[0]:",
        ),
        ("unavailable_node_types: a\n", "unavailable_node_types:"),
        (
            "cloud_resource_availabilities: {a: 2}\n",
            "cloud_resource_availabilities.a:",
        ),
        (
            "recoverable_resource_availabilities: {b: high}\n",
            "recoverable_resource_availabilities.b:",
        ),
    ] {
        let (code, stdout, stderr) = bad("bad-avail.yaml", &format!("{TWINS}{extra}"));
        assert_eq!(code, 2, "{extra}: {stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.contains(path), "{extra}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}
