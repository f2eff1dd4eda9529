use super::events::{Event, Said, Severity, infeasible_events, scaling_events};
use super::*;
use crate::model::{
    ClusterConstraint, GangRequest, LabelConstraint, LabelOperator, LabelSelector, NodeState,
    ResourceRequest, ResourceRequestByCount, TerminationCause,
};
use crate::scheduler::{Decision, Termination};
use crate::testing::res;

const CONFIG: &str = r#"
cluster_name: t
provider: {type: local_processes}
head_node_type: head
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  cpu4: {resources: {CPU: 4, memory: 1000}, node_config: {}}
  gpu: {resources: {CPU: 8, GPU: 1}, node_config: {}}
"#;

fn config() -> ClusterConfig {
    ClusterConfig::from_yaml_str(CONFIG, "t").expect("valid")
}

fn head_alive() -> ClusterResourceState {
    ClusterResourceState {
        node_states: vec![NodeState {
            total_resources: res(&[("CPU", 0.0), (HEAD_MARKER, 1.0)]),
            status: Some(NodeStatus::Running),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn instances(list: &[(&str, InstanceStatus)]) -> Vec<Instance> {
    list.iter()
        .enumerate()
        .map(|(i, (t, s))| Instance::new(format!("i{i}"), *t, *s, 0, ""))
        .collect()
}

#[test]
fn nodes_are_counted_by_rays_status_classes() {
    use InstanceStatus::*;
    let all = instances(&[
        ("cpu4", Queued),
        ("cpu4", Requested),
        ("cpu4", Allocated),
        ("cpu4", RayInstalling),
        ("cpu4", RayRunning),
        ("cpu4", RayStopRequested),
        ("cpu4", RayStopping),
        ("cpu4", RayStopped),
        ("cpu4", Terminating),
        ("cpu4", Terminated),
        ("cpu4", AllocationFailed),
        ("gone", RayRunning),
    ]);
    let refs: Vec<&Instance> = all.iter().collect();
    let c = node_counts(&config(), &refs, &head_alive());
    let get = |t: &str| c.get(t).copied().unwrap_or_default();
    assert_eq!(
        get("cpu4"),
        NodeCounts {
            pending: 4,
            running: 3,
            terminating: 1
        }
    );
    // Every configured type is reported, zero included; the head (no record) runs.
    assert_eq!(get("gpu"), NodeCounts::default());
    assert!(c.contains_key("gpu"));
    assert_eq!(get("head").running, 1);
    // A type the config lost is still counted.
    assert_eq!(get("gone").running, 1);
    // Without a live head in the GCS the head is not counted.
    let c = node_counts(&config(), &refs, &ClusterResourceState::default());
    assert_eq!(c["head"].running, 0);
}

#[test]
fn resources_are_the_types_configured_resources() {
    use InstanceStatus::*;
    let all = instances(&[
        ("cpu4", RayRunning),
        ("cpu4", RayRunning),
        ("gpu", Requested),
        ("cpu4", Terminating),
        ("gone", RayRunning),
    ]);
    let refs: Vec<&Instance> = all.iter().collect();
    let r = resource_totals(&config(), &refs, &head_alive());
    assert_eq!(
        r.cluster,
        BTreeMap::from([("CPU".to_string(), 8.0), ("memory".to_string(), 2000.0)])
    );
    assert_eq!(
        r.pending,
        BTreeMap::from([("CPU".to_string(), 8.0), ("GPU".to_string(), 1.0)])
    );
}

fn termination(t: &str, cause: TerminationCause) -> Termination {
    Termination {
        instance_id: String::new(),
        ray_node_id: String::new(),
        node_type: t.into(),
        instance_status: InstanceStatus::RayRunning,
        cause,
        idle_duration_ms: 0,
    }
}

fn messages(events: &[Event], severity: Severity) -> Vec<&str> {
    events
        .iter()
        .filter(|e| e.severity == severity)
        .map(|e| e.message.as_str())
        .collect()
}

#[test]
fn scaling_lines_are_worded_as_rays() {
    let d = Decision {
        launch: vec![("cpu4".into(), 3), ("gpu".into(), 1)],
        terminate: vec![
            termination("cpu4", TerminationCause::Idle),
            termination("cpu4", TerminationCause::Idle),
            termination("gpu", TerminationCause::MaxNumNodePerType),
            termination("cpu4", TerminationCause::Outdated),
        ],
        cluster_resources: res(&[("CPU", 20.5), ("GPU", 2.0)]),
        ..Default::default()
    };
    let e = scaling_events(&d);
    assert_eq!(
        messages(&e, Severity::Info),
        [
            "Adding 3 node(s) of type cpu4.",
            "Adding 1 node(s) of type gpu.",
            "Removing 2 nodes of type cpu4 (idle).",
            "Removing 1 nodes of type gpu (max number of worker nodes per type reached).",
            "Removing 1 nodes of type cpu4 (outdated).",
            "Resized to 20 CPUs, 2 GPUs.",
        ]
    );
    assert_eq!(
        messages(&e, Severity::Debug),
        ["Current cluster resources: {'CPU': 20.5, 'GPU': 2.0}."]
    );
    // Nothing launched or terminated: no line at all.
    assert!(scaling_events(&Decision::default()).is_empty());
}

fn request(r: &[(&str, f64)]) -> ResourceRequest {
    ResourceRequest {
        resources: res(r),
        ..Default::default()
    }
}

#[test]
fn infeasible_lines_are_worded_as_rays() {
    let mut labelled = request(&[("CPU", 1.0)]);
    labelled.label_selectors = vec![LabelSelector {
        constraints: vec![LabelConstraint {
            key: "zone".into(),
            operator: LabelOperator::In,
            values: vec!["a".into(), "b".into()],
        }],
    }];
    let requests = vec![
        (request(&[("CPU", 64.0)]), 2),
        (labelled, 1),
        (request(&[("CPU", 64.0)]), 1),
    ];
    let gangs = vec![GangRequest {
        requests: vec![request(&[("GPU", 4.0)]), request(&[("GPU", 4.0)])],
        details: "abc:STRICT_SPREAD|PENDING".into(),
        ..Default::default()
    }];
    let constraints = vec![ClusterConstraint {
        resource_requests: vec![ResourceRequestByCount {
            request: request(&[("CPU", 0.5)]),
            count: 100,
        }],
    }];
    let e = infeasible_events(&requests, &gangs, &constraints);
    let fix = ". Add suitable node types to this cluster to resolve this issue.";
    assert_eq!(
        messages(&e, Severity::Warning),
        [
            format!(
                "No available node types can fulfill resource requests {{'CPU': 64.0}}*3, \
                 {{'CPU': 1.0}}*1 with label selectors: [zone LABEL_OPERATOR_IN [a,b]]{fix}"
            ),
            format!(
                "No available node types can fulfill placement group requests \
                 (detail=abc:STRICT_SPREAD|PENDING): {{'GPU': 4.0}}*2{fix}"
            ),
            format!(
                "No available node types can fulfill cluster constraint: {{'CPU': 0.5}}*100{fix}"
            ),
        ]
    );
}

#[test]
fn a_lasting_warning_is_said_once() {
    let w = |m: &str| Event {
        severity: Severity::Warning,
        message: m.into(),
    };
    let mut said = Said::default();
    assert_eq!(said.new_ones(vec![w("a")]), [w("a")]);
    assert!(said.new_ones(vec![w("a")]).is_empty());
    assert_eq!(said.new_ones(vec![w("a"), w("b")]), [w("b")]);
    assert!(said.new_ones(vec![]).is_empty());
    // It comes back: said again.
    assert_eq!(said.new_ones(vec![w("a")]), [w("a")]);
}
