//! Unit tests of the instance manager. The clock is a parameter: no sleeps.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::*;
use crate::model::instance::InstanceStatus::{self, *};

/// Ray 2.60's `InstanceUtil.get_valid_transitions`, copied by name from common.py.
const RAY_TABLE: &[(&str, &[&str])] = &[
    ("QUEUED", &["REQUESTED", "TERMINATED"]),
    ("REQUESTED", &["ALLOCATED", "QUEUED", "ALLOCATION_FAILED"]),
    (
        "ALLOCATED",
        &[
            "RAY_INSTALLING",
            "RAY_RUNNING",
            "ALLOCATION_TIMEOUT",
            "RAY_STOPPING",
            "RAY_STOPPED",
            "TERMINATING",
            "TERMINATED",
        ],
    ),
    (
        "RAY_INSTALLING",
        &[
            "RAY_RUNNING",
            "RAY_INSTALL_FAILED",
            "RAY_STOPPED",
            "TERMINATING",
            "TERMINATED",
        ],
    ),
    (
        "RAY_RUNNING",
        &[
            "RAY_STOP_REQUESTED",
            "RAY_STOPPING",
            "RAY_STOPPED",
            "TERMINATING",
            "TERMINATED",
        ],
    ),
    (
        "RAY_STOP_REQUESTED",
        &["RAY_STOPPING", "RAY_STOPPED", "RAY_RUNNING", "TERMINATED"],
    ),
    ("ALLOCATION_TIMEOUT", &["TERMINATING", "TERMINATED"]),
    (
        "RAY_STOPPING",
        &["RAY_STOPPED", "TERMINATING", "TERMINATED"],
    ),
    ("RAY_STOPPED", &["TERMINATING", "TERMINATED"]),
    ("TERMINATING", &["TERMINATED", "TERMINATION_FAILED"]),
    ("TERMINATION_FAILED", &["TERMINATING", "TERMINATED"]),
    ("TERMINATED", &[]),
    ("ALLOCATION_FAILED", &[]),
    ("RAY_INSTALL_FAILED", &["TERMINATING", "TERMINATED"]),
    ("UNKNOWN", &[]),
];

const T0: i64 = 1_700_000_000_000_000_000;

/// An instance with every field a status may need, at version 5.
fn fixture(id: &str, status: InstanceStatus) -> Instance {
    let mut i = Instance::new(id, "cpu", status, T0, "fixture");
    i.version = 5;
    i.launch_request_id = "lr-1".into();
    i.cloud_instance_id = Some(format!("cloud-{id}"));
    i.node_id = Some("ab12".into());
    i
}

fn manager_with(instances: Vec<Instance>) -> InstanceManager<InMemoryStorage> {
    InstanceManager::new(InMemoryStorage::with_instances(3, instances))
}

fn stored(m: &InstanceManager<InMemoryStorage>, id: &str) -> Instance {
    m.storage().get(id).cloned().expect("stored")
}

/// Records every notification.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Vec<InstanceUpdateEvent>>>>);

impl InstanceUpdateSubscriber for Recorder {
    fn notify(&mut self, events: &[InstanceUpdateEvent]) {
        self.0.lock().expect("recorder lock").push(events.to_vec());
    }
}

impl Recorder {
    fn calls(&self) -> Vec<Vec<InstanceUpdateEvent>> {
        self.0.lock().expect("recorder lock").clone()
    }
}

#[test]
fn table_equals_ray_table() {
    assert_eq!(RAY_TABLE.len(), InstanceStatus::ALL.len());
    for (from, tos) in RAY_TABLE {
        let from = InstanceStatus::from_name(from).expect("a Ray status name");
        let ours: BTreeSet<&str> = valid_transitions(from).iter().map(|s| s.name()).collect();
        let rays: BTreeSet<&str> = tos.iter().copied().collect();
        assert_eq!(ours, rays, "transitions from {}", from.name());
        assert_eq!(ours.len(), valid_transitions(from).len(), "no duplicates");
    }
}

#[test]
fn terminal_and_new_statuses() {
    for s in InstanceStatus::ALL {
        let no_way_out = valid_transitions(s).is_empty();
        assert_eq!(is_terminal(s), no_way_out && s != Unknown, "{}", s.name());
        assert!(!is_valid_transition(s, s), "no self loop at {}", s.name());
        assert!(!is_valid_transition(s, Unknown));
    }
    let new: Vec<_> = InstanceStatus::ALL
        .iter()
        .filter(|s| is_valid_new_status(**s))
        .map(|s| s.name())
        .collect();
    assert_eq!(new, ["QUEUED", "ALLOCATED", "TERMINATING"]);
}

#[test]
fn reachability_agrees_with_model() {
    for s in InstanceStatus::ALL {
        assert_eq!(
            reachable_statuses(s).contains(&RayRunning),
            s.can_reach_ray_running(),
            "{}",
            s.name()
        );
    }
    assert_eq!(reachable_statuses(Terminated), []);
    assert_eq!(
        reachable_statuses(TerminationFailed),
        [Terminating, Terminated, TerminationFailed]
    );
    assert!(
        reachable_statuses(Queued).contains(&Queued),
        "QUEUED->REQUESTED->QUEUED"
    );
}

#[test]
fn every_pair_accepted_iff_in_table() {
    for from in InstanceStatus::ALL {
        for to in InstanceStatus::ALL {
            let mut m = manager_with(vec![fixture("i-1", from), fixture("i-2", Queued)]);
            let before = m.storage().clone();
            let event = InstanceUpdateEvent::transition("i-1", 5, to).with_details("step");
            let result = m.update(&[event], T0 + 7);
            if is_valid_transition(from, to) {
                let outcome =
                    result.unwrap_or_else(|e| panic!("{}->{}: {e}", from.name(), to.name()));
                assert_eq!(outcome.table_version, 4);
                let after = stored(&m, "i-1");
                assert_eq!(outcome.instances, std::slice::from_ref(&after));
                assert_eq!(after.status, to);
                assert_eq!(after.version, 6);
                assert_eq!(after.status_history.len(), 2);
                assert_eq!(
                    after.last_change(),
                    Some(&StatusChange {
                        status: to,
                        timestamp_ns: T0 + 7,
                        details: "step".into()
                    })
                );
                assert_eq!(
                    stored(&m, "i-2"),
                    before.get("i-2").cloned().expect("succeeds")
                );
            } else {
                assert_eq!(
                    result,
                    Err(InstanceError::InvalidTransition {
                        instance_id: "i-1".into(),
                        from,
                        to
                    }),
                    "{}->{}",
                    from.name(),
                    to.name()
                );
                assert_eq!(
                    m.storage(),
                    &before,
                    "{}->{} left a trace",
                    from.name(),
                    to.name()
                );
            }
        }
    }
}

#[test]
fn invalid_transition_message_names_statuses() {
    let e = InstanceError::InvalidTransition {
        instance_id: "i-1".into(),
        from: Terminated,
        to: RayRunning,
    };
    assert_eq!(
        e.to_string(),
        "instance i-1: invalid transition TERMINATED -> RAY_RUNNING"
    );
}

#[test]
fn new_instances_only_in_allowed_statuses() {
    for status in InstanceStatus::ALL {
        let mut m = manager_with(vec![]);
        let event = InstanceUpdateEvent::create("new", "cpu", status).with_cloud_instance_id("c-9");
        let result = m.update(&[event], T0);
        if matches!(status, Queued | Allocated | Terminating) {
            let i = &result.expect("succeeds").instances[0];
            assert_eq!((i.status, i.version), (status, 1));
            assert_eq!(i.status_since(status), Some(T0));
        } else {
            assert!(
                matches!(result, Err(InstanceError::InvalidEvent { .. })),
                "{}: {result:?}",
                status.name()
            );
            assert!(m.storage().is_empty());
            assert_eq!(m.storage().version(), 3);
        }
    }
}

#[test]
fn adopted_instance_needs_cloud_id_and_new_one_a_node_type() {
    let mut m = manager_with(vec![]);
    let err = m
        .update(&[InstanceUpdateEvent::create("a", "cpu", Allocated)], T0)
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "instance a: ALLOCATED needs cloud_instance_id"
    );
    let err = m
        .update(&[InstanceUpdateEvent::create("q", "", Queued)], T0)
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "instance q: a new instance needs a node type"
    );
    let head = InstanceUpdateEvent::create("h", "head", Allocated)
        .with_cloud_instance_id("c-head")
        .with_node_id("ffee")
        .with_is_head(true)
        .with_launch_config_hash("hash1");
    let out = m.update(&[head], T0).expect("applied");
    let h = &out.instances[0];
    assert_eq!(h.cloud_instance_id.as_deref(), Some("c-head"));
    assert_eq!(h.node_id.as_deref(), Some("ffee"));
    assert!(h.is_head);
    assert_eq!(h.launch_config_hash, "hash1");
    assert!(m.storage().get("a").is_none() && m.storage().get("q").is_none());
}

#[test]
fn required_fields_checked_on_resulting_record() {
    let mut m = manager_with(vec![]);
    m.update(&[InstanceUpdateEvent::create("i", "cpu", Queued)], T0)
        .expect("succeeds");
    // REQUESTED without a launch request id.
    let err = m
        .update(
            &[InstanceUpdateEvent::transition("i", 1, Requested)],
            T0 + 1,
        )
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "instance i: REQUESTED needs launch_request_id"
    );
    m.update(
        &[InstanceUpdateEvent::transition("i", 1, Requested).with_launch_request_id("lr")],
        T0 + 1,
    )
    .expect("succeeds");
    m.update(
        &[InstanceUpdateEvent::transition("i", 2, Allocated).with_cloud_instance_id("c")],
        T0 + 2,
    )
    .expect("succeeds");
    let err = m
        .update(
            &[InstanceUpdateEvent::transition("i", 3, RayRunning)],
            T0 + 3,
        )
        .expect_err("refused");
    assert_eq!(err.to_string(), "instance i: RAY_RUNNING needs node_id");
    m.update(
        &[InstanceUpdateEvent::transition("i", 3, RayRunning).with_node_id("n")],
        T0 + 3,
    )
    .expect("succeeds");
    // TERMINATING: the stored cloud id suffices, the event need not repeat it.
    m.update(
        &[InstanceUpdateEvent::transition("i", 4, Terminating)],
        T0 + 4,
    )
    .expect("succeeds");
    let i = stored(&m, "i");
    assert_eq!(i.launch_request_id, "lr");
    assert_eq!(i.cloud_instance_id.as_deref(), Some("c"));
    assert_eq!(i.version, 5);
}

#[test]
fn stale_version_rejected_and_not_applied() {
    let mut m = manager_with(vec![fixture("i-1", RayRunning)]);
    let before = m.storage().clone();
    for expected in [0, 4, 6, u64::MAX] {
        let err = m
            .update(
                &[InstanceUpdateEvent::transition(
                    "i-1",
                    expected,
                    RayStopping,
                )],
                T0,
            )
            .expect_err("refused");
        assert_eq!(
            err,
            InstanceError::StaleVersion {
                instance_id: "i-1".into(),
                expected,
                actual: 5
            }
        );
        assert_eq!(m.storage(), &before);
    }
    m.update(
        &[InstanceUpdateEvent::transition("i-1", 5, RayStopping)],
        T0,
    )
    .expect("succeeds");
    // The same event again is now stale.
    let err = m
        .update(&[InstanceUpdateEvent::transition("i-1", 5, RayStopped)], T0)
        .expect_err("refused");
    assert!(matches!(err, InstanceError::StaleVersion { actual: 6, .. }));
}

#[test]
fn unknown_existing_and_duplicate_ids() {
    let mut m = manager_with(vec![fixture("i-1", Queued)]);
    let before = m.storage().clone();
    assert_eq!(
        m.update(
            &[InstanceUpdateEvent::transition("ghost", 1, Requested)],
            T0
        ),
        Err(InstanceError::NotFound {
            instance_id: "ghost".into()
        })
    );
    assert_eq!(
        m.update(&[InstanceUpdateEvent::create("i-1", "cpu", Queued)], T0),
        Err(InstanceError::AlreadyExists {
            instance_id: "i-1".into()
        })
    );
    let dup = [
        InstanceUpdateEvent::create("n", "cpu", Queued),
        InstanceUpdateEvent::create("n", "gpu", Queued),
    ];
    assert_eq!(
        m.update(&dup, T0),
        Err(InstanceError::AlreadyExists {
            instance_id: "n".into()
        })
    );
    let empty = InstanceUpdateEvent::create("", "cpu", Queued);
    assert!(matches!(
        m.update(&[empty], T0),
        Err(InstanceError::InvalidEvent { .. })
    ));
    assert_eq!(m.storage(), &before);
}

#[test]
fn batch_is_atomic() {
    let mut m = manager_with(vec![fixture("a", Queued), fixture("b", RayRunning)]);
    let rec = Recorder::default();
    m.subscribe(Box::new(rec.clone()));
    let before = m.storage().clone();
    let batch = [
        InstanceUpdateEvent::transition("a", 5, Requested),
        InstanceUpdateEvent::create("c", "cpu", Queued),
        InstanceUpdateEvent::transition("b", 5, RayStopRequested),
        // Bad: RAY_STOP_REQUESTED cannot go to TERMINATING.
        InstanceUpdateEvent::transition("b", 6, Terminating),
    ];
    let err = m.update(&batch, T0).expect_err("refused");
    assert!(matches!(
        err,
        InstanceError::InvalidTransition {
            from: RayStopRequested,
            to: Terminating,
            ..
        }
    ));
    assert_eq!(m.storage(), &before);
    assert!(rec.calls().is_empty());
}

#[test]
fn batch_may_move_an_instance_twice() {
    let mut m = manager_with(vec![fixture("a", Allocated)]);
    let batch = [
        InstanceUpdateEvent::transition("a", 5, RayInstalling),
        InstanceUpdateEvent::create("b", "cpu", Queued),
        InstanceUpdateEvent::transition("a", 6, RayRunning).with_details("up"),
    ];
    let out = m.update(&batch, T0 + 50).expect("applied");
    assert_eq!(out.table_version, 4);
    let ids: Vec<_> = out
        .instances
        .iter()
        .map(|i| i.instance_id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b"]);
    let a = stored(&m, "a");
    assert_eq!((a.status, a.version), (RayRunning, 7));
    let statuses: Vec<_> = a.status_history.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [Allocated, RayInstalling, RayRunning]);
}

#[test]
fn status_history_and_retries() {
    let mut m = manager_with(vec![]);
    let ev = |v, s| InstanceUpdateEvent::transition("i", v, s);
    m.update(
        &[InstanceUpdateEvent::create("i", "cpu", Queued).with_details("from scheduler")],
        100,
    )
    .expect("succeeds");
    m.update(&[ev(1, Requested).with_launch_request_id("lr-a")], 200)
        .expect("succeeds");
    m.update(
        &[ev(2, Queued)
            .bump_launch_retries()
            .with_error("quota exceeded")],
        300,
    )
    .expect("succeeds");
    m.update(&[ev(3, Requested).with_launch_request_id("lr-b")], 400)
        .expect("succeeds");
    m.update(&[ev(4, Allocated).with_cloud_instance_id("c-1")], 500)
        .expect("succeeds");
    m.update(&[ev(5, Terminating)], 600).expect("applied");
    m.update(&[ev(6, TerminationFailed).bump_termination_retries()], 700)
        .expect("succeeds");
    m.update(&[ev(7, Terminating)], 800).expect("applied");

    let i = stored(&m, "i");
    let times: Vec<_> = i.status_history.iter().map(|c| c.timestamp_ns).collect();
    assert_eq!(times, [100, 200, 300, 400, 500, 600, 700, 800]);
    assert_eq!(i.status_history[0].details, "from scheduler");
    assert_eq!(i.status_since(Queued), Some(300));
    assert_eq!(i.status_since(Requested), Some(400));
    assert_eq!(i.status_since(Terminating), Some(800));
    assert_eq!(i.status_since(i.status), Some(800));
    assert_eq!(i.status_since(RayRunning), None);
    assert_eq!(i.status_times(Requested), [200, 400]);
    assert_eq!(i.times_entered(Requested), 2);
    assert_eq!((i.launch_retries, i.termination_retries), (1, 1));
    assert_eq!(i.launch_request_id, "lr-b");
    assert_eq!(i.last_error.as_deref(), Some("quota exceeded"));
    assert_eq!(i.version, 8);
}

#[test]
fn status_since_uses_latest_timestamp_like_ray() {
    let mut i = Instance::new("i", "cpu", Queued, 500, "");
    i.status_history.push(StatusChange {
        status: Queued,
        timestamp_ns: 300,
        details: String::new(),
    });
    assert_eq!(i.status_since(Queued), Some(500));
}

#[test]
fn storage_rejects_stale_table_version() {
    let mut s = InMemoryStorage::new();
    assert_eq!(s.batch_upsert(0, &[fixture("a", Queued)], &[]), Ok(1));
    let before = s.clone();
    assert_eq!(
        s.batch_upsert(0, &[fixture("b", Queued)], &["a".into()]),
        Err(InstanceError::VersionConflict {
            expected: 0,
            actual: 1
        })
    );
    assert_eq!(s, before);
    assert_eq!(
        s.batch_upsert(1, &[fixture("b", Queued)], &["a".into(), "zz".into()]),
        Ok(2)
    );
    let (v, all) = s.load().expect("succeeds");
    assert_eq!(v, 2);
    assert_eq!(all, [fixture("b", Queued)]);
}

/// Storage where another writer sneaks in between the manager's load and its write.
struct RacingStorage {
    inner: InMemoryStorage,
    race: bool,
}

impl InstanceStorage for RacingStorage {
    fn load(&self) -> Result<(u64, Vec<Instance>), InstanceError> {
        self.inner.load()
    }

    fn batch_upsert(
        &mut self,
        expected: u64,
        upserts: &[Instance],
        deletes: &[String],
    ) -> Result<u64, InstanceError> {
        if std::mem::take(&mut self.race) {
            let v = self.inner.version();
            self.inner
                .batch_upsert(v, &[fixture("other", Queued)], &[])?;
        }
        self.inner.batch_upsert(expected, upserts, deletes)
    }
}

#[test]
fn manager_surfaces_storage_conflict() {
    let mut m = InstanceManager::new(RacingStorage {
        inner: InMemoryStorage::with_instances(3, [fixture("a", Queued)]),
        race: true,
    });
    let rec = Recorder::default();
    m.subscribe(Box::new(rec.clone()));
    let ev = [InstanceUpdateEvent::transition("a", 5, Requested)];
    assert_eq!(
        m.update(&ev, T0),
        Err(InstanceError::VersionConflict {
            expected: 3,
            actual: 4
        })
    );
    assert_eq!(m.storage().inner.get("a").expect("succeeds").status, Queued);
    assert!(rec.calls().is_empty());
    // Retried against the fresh table it goes through.
    assert_eq!(m.update(&ev, T0).expect("applied").table_version, 5);
    assert_eq!(rec.calls().len(), 1);
}

#[test]
fn update_at_version_checks_table_version() {
    let mut m = manager_with(vec![fixture("a", Queued)]);
    let ev = [InstanceUpdateEvent::transition("a", 5, Requested)];
    assert_eq!(
        m.update_at_version(2, &ev, T0),
        Err(InstanceError::VersionConflict {
            expected: 2,
            actual: 3
        })
    );
    assert_eq!(stored(&m, "a").status, Queued);
    assert_eq!(
        m.update_at_version(3, &ev, T0)
            .expect("succeeds")
            .table_version,
        4
    );
}

#[test]
fn subscribers_notified_only_on_success() {
    let mut m = manager_with(vec![fixture("a", Queued)]);
    let (r1, r2) = (Recorder::default(), Recorder::default());
    m.subscribe(Box::new(r1.clone()));
    m.subscribe(Box::new(r2.clone()));
    // Empty batch: nothing written, nobody called.
    assert_eq!(m.update(&[], T0).expect("applied").table_version, 3);
    assert_eq!(m.storage().version(), 3);
    // Refused batch.
    let _ = m.update(&[InstanceUpdateEvent::transition("a", 5, RayRunning)], T0);
    assert!(r1.calls().is_empty() && r2.calls().is_empty());
    // Applied batch.
    let ev = vec![
        InstanceUpdateEvent::transition("a", 5, Requested).with_launch_request_id("lr"),
        InstanceUpdateEvent::create("b", "gpu", Queued),
    ];
    m.update(&ev, T0).expect("applied");
    assert_eq!(r1.calls(), std::slice::from_ref(&ev));
    assert_eq!(r2.calls(), [ev]);
}

#[test]
fn terminal_records_stay_until_pruned() {
    let mut m = manager_with(vec![]);
    m.update(&[InstanceUpdateEvent::create("q", "cpu", Queued)], 100)
        .expect("succeeds");
    m.update(&[InstanceUpdateEvent::transition("q", 1, Terminated)], 150)
        .expect("succeeds");
    let mut failed = fixture("f", AllocationFailed);
    failed.status_history.push(StatusChange {
        status: AllocationFailed,
        timestamp_ns: 300,
        details: String::new(),
    });
    let v = m.storage().version();
    m.storage_mut()
        .batch_upsert(v, &[failed, fixture("r", RayRunning)], &[])
        .expect("succeeds");
    assert_eq!(m.get_instances().expect("succeeds").1.len(), 3);
    let v = m.storage().version();
    assert_eq!(
        m.prune_terminal(150).expect("succeeds"),
        Vec::<String>::new()
    );
    assert_eq!(m.storage().version(), v, "nothing pruned, nothing written");
    assert_eq!(m.prune_terminal(151).expect("succeeds"), ["q"]);
    assert_eq!(m.prune_terminal(i64::MAX).expect("succeeds"), ["f"]);
    let (_, left) = m.get_instances().expect("succeeds");
    assert_eq!(left, [fixture("r", RayRunning)]);
    assert_eq!(
        m.get_instance("r").expect("succeeds"),
        Some(fixture("r", RayRunning))
    );
    assert_eq!(m.get_instance("q").expect("succeeds"), None);
    assert_eq!(m.instances_by_id().expect("succeeds").1.len(), 1);
}

#[test]
fn encode_decode_round_trip() {
    let mut m = manager_with(vec![fixture("a", RayStopRequested), fixture("b", Queued)]);
    m.update(
        &[InstanceUpdateEvent::transition("b", 5, Requested)
            .with_launch_request_id("lr")
            .with_error("boom \"quoted\"\nsecond line")],
        T0 + 1,
    )
    .expect("succeeds");
    let (version, instances) = m.get_instances().expect("succeeds");
    let bytes = encode_table(version, &instances).expect("succeeds");
    let text = String::from_utf8(bytes.clone()).expect("succeeds");
    assert!(text.contains("\"RAY_STOP_REQUESTED\""), "{text}");
    assert_eq!(decode_table(&bytes), Ok((version, instances.clone())));
    let restored = InMemoryStorage::with_instances(version, instances);
    assert_eq!(&restored, m.storage());
    assert_eq!(
        decode_table(&encode_table(0, &[]).expect("succeeds")),
        Ok((0, vec![]))
    );
}

#[test]
fn decode_errors_are_one_line() {
    let good = encode_table(1, &[fixture("a", Queued)]).expect("succeeds");
    let good_text = String::from_utf8(good.clone()).expect("succeeds");
    let bad_status = good_text.replace("\"QUEUED\"", "\"RUNNING\"");
    let dup = encode_table(1, &[fixture("a", Queued), fixture("a", Queued)]).expect("succeeds");
    let cases: Vec<Vec<u8>> = vec![
        vec![0xff, 0x00, 0x13, 0x37],
        b"not json\n at all".to_vec(),
        Vec::new(),
        good[..good.len() / 2].to_vec(),
        b"{\"version\": -1, \"instances\": []}".to_vec(),
        b"[1, 2]".to_vec(),
        bad_status.into_bytes(),
        dup,
    ];
    for bytes in cases {
        let err = decode_table(&bytes).expect_err("refused");
        assert!(matches!(err, InstanceError::Decode(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("instance table: cannot decode: "), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
    let err = decode_table(good_text.replace("\"QUEUED\"", "\"RUNNING\"").as_bytes())
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("unknown instance status `RUNNING`"),
        "{err}"
    );
}

#[test]
fn status_history_is_bounded_and_keeps_the_creation() {
    use super::manager::MAX_HISTORY;
    let mut m = InstanceManager::new(InMemoryStorage::new());
    m.update(
        &[InstanceUpdateEvent::create("a", "w", Allocated).with_cloud_instance_id("c")],
        1,
    )
    .expect("create");
    for k in 0..100u32 {
        let to = if k % 2 == 0 {
            RayRunning
        } else {
            RayStopRequested
        };
        let v = 1 + u64::from(k);
        let e = InstanceUpdateEvent::transition("a", v, to).with_node_id("n");
        m.update(&[e], 2 + i64::from(k)).expect("update");
    }
    let a = m.get_instance("a").expect("table").expect("a");
    assert_eq!(a.status_history.len(), MAX_HISTORY);
    assert_eq!(a.status_history[0].status, Allocated);
    assert_eq!(a.status_history[0].timestamp_ns, 1);
    assert_eq!(a.status_history.last().map(|c| c.timestamp_ns), Some(101));
    assert_eq!(a.version, 101);
}

#[test]
fn a_rolled_back_change_leaves_the_table_as_it_was_and_a_committed_one_stays() {
    let original =
        InMemoryStorage::with_instances(3, vec![fixture("a", RayRunning), fixture("b", Allocated)]);
    let mut s = original.clone();
    s.begin();
    let mut changed = fixture("a", RayStopRequested);
    changed.version = 9;
    s.batch_upsert(3, &[changed.clone(), fixture("c", Queued)], &[])
        .expect("upsert");
    s.batch_upsert(4, &[], &["b".to_string(), "a".to_string()])
        .expect("delete");
    assert_eq!(s.len(), 1);
    s.rollback();
    assert_eq!(s, original);
    // A change left open (its step was cut short) is rolled back by the next begin.
    s.begin();
    s.batch_upsert(3, &[fixture("d", Queued)], &[])
        .expect("upsert");
    s.begin();
    assert_eq!(s.get("d"), None);
    assert_eq!(s.version(), 3);
    s.rollback();
    // Committed: the writes stay, and a later rollback has nothing to undo.
    s.begin();
    s.batch_upsert(3, &[changed.clone()], &[]).expect("upsert");
    s.commit();
    s.rollback();
    assert_eq!(s.version(), 4);
    assert_eq!(s.get("a"), Some(&changed));
}
