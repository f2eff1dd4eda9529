//! The explanation's stored form and its lines.

use super::*;

fn sample() -> Explanation {
    let mut in_use = BTreeMap::new();
    in_use.insert("CPU".to_string(), 3.0);
    let mut gpu = BTreeMap::new();
    gpu.insert("GPU".to_string(), 8.0);
    Explanation {
        at_ns: 1_764_650_590_000_000_000,
        demand: vec![
            DemandGroup {
                kind: DemandKind::Task,
                reason: DemandReason::Paced {
                    node_type: "w".into(),
                    queued: 3,
                    hold: Hold::Speed {
                        per_iteration: 1,
                        upscaling_speed: 1.0,
                    },
                },
                count: 4,
                shapes: vec![Shape {
                    resources: in_use.clone(),
                    count: 4,
                }],
            },
            DemandGroup {
                kind: DemandKind::PlacementGroup,
                reason: DemandReason::Unavailable {
                    node_type: "gpu8".into(),
                    until_ns: 1_764_650_890_000_000_000,
                    error: "InsufficientInstanceCapacity".into(),
                },
                count: 1,
                shapes: vec![Shape {
                    resources: gpu,
                    count: 8,
                }],
            },
        ],
        nodes: vec![NodeGroup {
            node_type: "w".into(),
            reason: NodeReason::Busy { in_use },
            count: 2,
            examples: vec!["i1".into(), "i2".into()],
        }],
        groups_left_out: 0,
    }
}

#[test]
fn the_stored_form_reads_back_and_garbage_is_no_explanation() {
    let e = sample();
    let json = e.to_json();
    assert!(json.contains(r#""reason":"paced""#), "{json}");
    assert!(json.contains(r#""hold":"speed""#), "{json}");
    assert_eq!(Explanation::from_json(json.as_bytes()), Ok(e));
    assert!(Explanation::from_json(b"{\"demand\": 3}").is_err());
    assert!(Explanation::from_json(b"\xff").is_err());
}

#[test]
fn lines_say_each_group_with_its_shapes_and_counts() {
    let lines = sample().lines();
    assert_eq!(
        lines,
        vec![
            "Pending demand:",
            "  4 tasks and actors ({CPU: 3} x 4): launch paced: 3 w nodes queued \
             (upscaling_speed 1 allows 1 per iteration)",
            "  1 placement group ({GPU: 8} x 8): node type gpu8 is unavailable until \
             04:48:10 UTC after InsufficientInstanceCapacity",
            "Worker nodes:",
            "  2 w: busy ({CPU: 3} in use) [i1, i2]",
        ]
    );
    let counts = sample().demand_by_reason();
    assert_eq!(counts.get("paced"), Some(&4));
    assert_eq!(sample().nodes_by_reason().get("busy"), Some(&2));
}

#[test]
fn idle_seconds_and_busy_amounts_alone_are_the_same_reasons() {
    let a = sample();
    let mut b = sample();
    if let NodeReason::Busy { in_use } = &mut b.nodes[0].reason {
        in_use.insert("CPU".into(), 1.0);
    }
    b.at_ns += 5_000_000_000;
    assert!(a.same_reasons(&b));
    b.nodes[0].count = 3;
    assert!(!a.same_reasons(&b));
    let mut c = sample();
    c.demand[0].count = 5;
    assert!(!a.same_reasons(&c));
}
