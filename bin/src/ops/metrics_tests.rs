//! The metrics in isolation: iterations fed by hand, the exposition read back.
use super::*;
use rayscale_core::config::ClusterConfig;
use rayscale_core::expander::ExpanderChain;
use rayscale_core::instance::StatusChange;
use rayscale_core::model::ClusterResourceState;
use rayscale_core::reconciler::Outcome;

const S: i64 = 1_000_000_000;

fn instance(id: &str, history: &[(InstanceStatus, i64)]) -> Instance {
    let mut i = Instance::new(id, "w", history[0].0, history[0].1 * S, "");
    for (status, t) in &history[1..] {
        i.status = *status;
        i.status_history.push(StatusChange {
            status: *status,
            timestamp_ns: t * S,
            details: String::new(),
        });
    }
    i
}

fn value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(-1.0)
}

fn config() -> ClusterConfig {
    ClusterConfig::from_yaml_str(
        "cluster_name: t\nprovider: {type: local_processes}\nhead_node_type: h\n\
         available_node_types:\n  h: {resources: {CPU: 0}, node_config: {}}\n  \
         w: {resources: {CPU: 2}, node_config: {}}\n",
        "t",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Feeds `m` an iteration at `now` s over `instances`, each cut to its history so far.
fn iterate(m: &Metrics, now: i64, instances: &[&Instance], first_after_load: bool) {
    let config = config();
    let (chain, ray, outcome) = (
        ExpanderChain::ray(),
        ClusterResourceState::default(),
        Outcome::default(),
    );
    let cut: Vec<Instance> = instances
        .iter()
        .map(|i| {
            let mut i = (*i).clone();
            i.status_history.retain(|c| c.timestamp_ns <= now * S);
            if let Some(last) = i.status_history.last() {
                i.status = last.status;
            }
            i
        })
        .collect();
    m.iteration(&IterationView {
        now_ns: now * S,
        config: &config,
        instances: cut.iter().collect(),
        ray: &ray,
        outcome: &outcome,
        provider_errors: &[],
        drain_rejections: &[],
        chain: &chain,
        first_after_load,
        advisories: &[],
    });
}

#[test]
fn transitions_are_counted_once_with_their_durations() {
    use InstanceStatus::*;
    // Installed, then a drain refused after the first iteration: back to RAY_RUNNING,
    // which is not a second install.
    let up = instance(
        "a",
        &[
            (Queued, 100),
            (Requested, 101),
            (Allocated, 131),
            (RayInstalling, 132),
            (RayRunning, 152),
            (RayStopRequested, 170),
            (RayRunning, 175),
        ],
    );
    let failed = instance(
        "b",
        &[
            (Queued, 100),
            (Requested, 101),
            (Allocated, 111),
            (RayInstalling, 112),
            (RayInstallFailed, 140),
        ],
    );
    let mut gone = instance(
        "c",
        &[
            (Queued, 100),
            (Requested, 101),
            (Allocated, 105),
            (RayRunning, 106),
            (Terminating, 180),
            (Terminated, 190),
        ],
    );
    gone.cloud_instance_id = Some("i-1".into());
    // A raylet restarted on a live instance: a record born ALLOCATED, no launch.
    let restarted = instance("d", &[(Allocated, 150), (RayRunning, 151)]);
    let m = Metrics::new("s1", 99 * S);
    for now in [160, 200] {
        iterate(&m, now, &[&up, &failed, &gone, &restarted], false);
    }
    let text = m.encode();
    let s = "{SessionName=\"s1\"}";
    let v = |name: &str| value(&text, &format!("{name}{s}"));
    assert_eq!(v("autoscaler_started_nodes_total"), 3.0, "{text}");
    assert_eq!(v("autoscaler_worker_create_node_time_seconds_count"), 3.0);
    // 30 s, 10 s and 4 s from REQUESTED to ALLOCATED.
    assert_eq!(v("autoscaler_worker_create_node_time_seconds_sum"), 44.0);
    assert_eq!(v("autoscaler_successful_updates_total"), 1.0);
    assert_eq!(v("autoscaler_failed_updates_total"), 1.0);
    assert_eq!(v("autoscaler_worker_update_time_seconds_sum"), 20.0);
    assert_eq!(v("autoscaler_stopped_nodes_total"), 1.0);
    assert_eq!(
        value(
            &text,
            "autoscaler_active_nodes{NodeType=\"w\",SessionName=\"s1\"}"
        ),
        2.0
    );
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn a_new_leader_counts_only_what_its_first_iteration_did() {
    use InstanceStatus::*;
    let theirs = instance("a", &[(Queued, 100), (Requested, 101), (Allocated, 120)]);
    let mine = instance("b", &[(Queued, 100), (Requested, 101), (Allocated, 200)]);
    let m = Metrics::new("s1", 50 * S);
    iterate(&m, 200, &[&theirs, &mine], true);
    let text = m.encode();
    assert_eq!(
        value(&text, "autoscaler_started_nodes_total{SessionName=\"s1\"}"),
        1.0,
        "{text}"
    );
}

/// Checks that every sample of exposition `text` carries the labels its family declares
/// (`LABELS`), in that order, besides a histogram's `le`.
pub(crate) fn assert_declared_labels(text: &str) {
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, _)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        let names: Vec<&str> = labels
            .trim_end_matches('}')
            .split(',')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
            .filter(|k| *k != "le")
            .collect();
        assert_eq!(names, labels_of(family), "labels of {line}");
    }
}

#[test]
fn every_sample_carries_the_labels_its_family_declares() {
    use InstanceStatus::*;
    let a = instance("a", &[(Queued, 100), (Requested, 101), (Allocated, 131)]);
    let m = Metrics::new("s1", 99 * S);
    iterate(&m, 140, &[&a], false);
    let text = m.encode();
    assert!(text.contains("NodeType=\"w\""), "{text}");
    assert_declared_labels(&text);
    // A family declared with a label it does not have would fail the check.
    let bad = "autoscaler_active_nodes{SessionName=\"s1\"} 1\n";
    assert!(std::panic::catch_unwind(|| assert_declared_labels(bad)).is_err());
}

/// `docs/src/reference/metrics.md` is what the registry says (RAYSCALE_BLESS=1 rewrites it).
#[test]
fn metrics_reference_is_the_registry() {
    let m = Metrics::new("s", 0);
    let doc = m.reference_markdown();
    for (name, _) in LABELS {
        assert!(
            m.families.iter().any(|f| f.0 == *name),
            "LABELS names {name}, which is not registered"
        );
    }
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/reference/metrics.md");
    if std::env::var_os("RAYSCALE_BLESS").is_some() {
        std::fs::write(&path, &doc).expect("write docs/src/reference/metrics.md");
        return;
    }
    let now = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        now == doc,
        "docs/src/reference/metrics.md is not the metric registry: regenerate it with \
         RAYSCALE_BLESS=1 cargo test -p rayscale --bin rayscale metrics_reference"
    );
    // Every family is on the page, Ray's and rayscale's.
    for family in [
        "autoscaler_active_nodes",
        "rayscale_nodes_kept",
        "rayscale_effects_total",
    ] {
        assert!(
            doc.contains(&format!("`{family}`")),
            "{family} missing:\n{doc}"
        );
    }
}
