//! The fault suite: the driver (lease, table, reconciler, effects) against a GCS that is
//! slow, loses replies, answers rows that cannot be read or holds keys another job wrote,
//! and a cloud that refuses some terminations for good. Each test names the harm it rules
//! out: a busy node stopped on a misread, two processes acting (or none), a stale writer
//! over the new holder's table, a dead loop on a poisoned key, a terminate retried for
//! ever or blocking a whole batch.

use super::*;
use crate::driver::lease::MAX_EPOCH;
use crate::provider::ProviderErrorKind;

/// The records of the newest stored table (read as a later holder would).
fn stored(w: &World) -> Vec<Instance> {
    crate::testing::block_on(KvTable::new("t").load(&w.gcs, MAX_EPOCH))
        .map(|l| l.instances)
        .unwrap_or_default()
}

fn record_of(w: &World, cloud_id: &str) -> Instance {
    stored(w)
        .into_iter()
        .rev()
        .find(|i| i.cloud_instance_id.as_deref() == Some(cloud_id))
        .unwrap_or_else(|| panic!("no record of {cloud_id}"))
}

async fn scale_to(w: &World, n: u64) -> Vec<String> {
    w.gcs.set_demand(cpu2(n));
    for _ in 0..60 {
        sleep_s(1).await;
        if w.workers().len() as u64 == n {
            break;
        }
    }
    let mut ids: Vec<String> = w
        .workers()
        .into_iter()
        .map(|c| c.cloud_instance_id)
        .collect();
    ids.sort();
    assert_eq!(ids.len() as u64, n, "scaled to {ids:?}");
    ids
}

/// Two drivers on their own connections, `one` first, scaled to one worker: `one`'s
/// connection, the drivers' tasks, and the epoch `one` holds.
async fn one_holds_two_run(
    w: &World,
) -> (
    FakeGcs,
    [tokio::task::JoinHandle<crate::driver::RunEnd>; 2],
    u64,
) {
    let (c1, c2) = (w.gcs.connect(), w.gcs.connect());
    let d1 = tokio::spawn(w.driver("one", c1.clone()).run(std::future::pending()));
    sleep_s(1).await;
    let d2 = tokio::spawn(w.driver("two", c2).run(std::future::pending()));
    scale_to(w, 1).await;
    let (epoch, holder) = w.lease_top().expect("a lease");
    assert!(holder.contains("\"one\""), "{holder}");
    (c1, [d1, d2], epoch)
}

#[tokio::test(start_paused = true)]
async fn a_busy_node_whose_row_cannot_be_read_is_never_drained_or_terminated() {
    let w = World::new();
    let _pump = w.pump();
    let _d = tokio::spawn(w.driver("one", w.gcs.connect()).run(std::future::pending()));
    let ids = scale_to(&w, 3).await;
    sleep_s(5).await;
    let kept = ids[0].clone();
    let before = record_of(&w, &kept);
    assert_eq!(before.status, InstanceStatus::RayRunning);
    // The demand is done and every node looks idle for ten minutes, but one node's row
    // cannot be read (a NaN amount): for five minutes of iterations, the others are
    // drained and terminated; that one stays exactly as it was.
    w.gcs.set_demand(vec![]);
    w.gcs
        .set_unreadable(&kept, Some("available_resources.CPU: got NaN"));
    w.gcs.set_idle_ms(600_000);
    sleep_s(300).await;
    let left: Vec<String> = w
        .workers()
        .into_iter()
        .map(|c| c.cloud_instance_id)
        .collect();
    assert_eq!(
        left,
        std::slice::from_ref(&kept),
        "the others are removed, the unreadable one kept"
    );
    let (idle, stops) = w.gcs.stops();
    assert_eq!(idle.len(), 2, "{idle:?}");
    assert!(stops.is_empty(), "{stops:?}");
    let after = record_of(&w, &kept);
    assert_eq!(after.status, InstanceStatus::RayRunning);
    assert_eq!(after.version, before.version, "{:?}", after.status_history);
    // Readable again, and idle: now it goes, by a drain.
    w.gcs.set_unreadable(&kept, None);
    w.gcs.set_idle_ms(600_000);
    sleep_s(60).await;
    assert!(w.workers().is_empty(), "{:?}", w.workers());
    assert_eq!(w.gcs.stops().0.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn with_two_and_a_half_seconds_on_every_gcs_call_exactly_one_process_acts() {
    let w = World::new();
    let _pump = w.pump();
    let (c1, c2) = (w.gcs.connect(), w.gcs.connect());
    c1.set_latency(Duration::from_millis(2500));
    c2.set_latency(Duration::from_millis(2500));
    let _d1 = tokio::spawn(w.driver("one", c1).run(std::future::pending()));
    sleep_s(1).await;
    let _d2 = tokio::spawn(w.driver("two", c2).run(std::future::pending()));
    w.gcs.set_demand(cpu2(2));
    sleep_s(60).await;
    assert_eq!(w.workers().len(), 2, "{:?}", w.cloud.launches());
    let (epoch, holder) = w.lease_top().expect("a lease");
    // It keeps acting, and nobody takes over: more demand is served once, by the same
    // holder, at the same epoch.
    for n in [3, 4] {
        w.gcs.set_demand(cpu2(n));
        sleep_s(60).await;
        assert_eq!(w.workers().len() as u64, n);
        assert_eq!(w.launched(), n, "{:?}", w.cloud.launches());
    }
    let (e2, h2) = w.lease_top().expect("a lease");
    assert_eq!(e2, epoch);
    let who = |h: &str| h.contains("\"one\"");
    assert_eq!(who(&h2), who(&holder), "{holder} then {h2}");
    let reports = w.gcs.reports().len();
    sleep_s(30).await;
    assert!(w.gcs.reports().len() > reports, "it still reports");
}

#[tokio::test(start_paused = true)]
async fn renewals_that_land_after_their_round_gave_up_do_not_stop_a_takeover() {
    let w = World::new();
    let _pump = w.pump();
    let (c1, _drivers, epoch) = one_holds_two_run(&w).await;
    // `one`'s writes now take 5 s: each renewal's round gives up at its deadline, but the
    // put lands later and changes the value. `one` gives the lease up at its renew
    // deadline and stops writing, so `two` sees the value settle and takes over.
    c1.set_put_latency(Duration::from_secs(5));
    let slow = Instant::now();
    let took = loop {
        sleep_s(1).await;
        if let Some((e, h)) = w.lease_top()
            && e > epoch
        {
            assert!(h.contains("\"two\""), "{h}");
            break slow.elapsed();
        }
        assert!(slow.elapsed() < Duration::from_secs(120), "no takeover");
    };
    assert!(took <= Duration::from_secs(40), "took {took:?}");
    // Exactly one acts: more demand is served once.
    w.gcs.set_demand(cpu2(3));
    sleep_s(60).await;
    assert_eq!(w.workers().len(), 3);
    assert_eq!(w.launched(), 3, "{:?}", w.cloud.launches());
}

#[tokio::test(start_paused = true)]
async fn a_holder_paused_mid_save_never_writes_over_the_new_holders_table() {
    let w = World::new();
    let _pump = w.pump();
    let (c1, _drivers, epoch) = one_holds_two_run(&w).await;
    // `one`'s writes now hang for two minutes (a process paused mid-save: its puts land
    // long after). New demand makes it save; it loses the lease meanwhile.
    c1.set_put_latency(Duration::from_secs(120));
    w.gcs.set_demand(cpu2(2));
    sleep_s(60).await;
    let (e2, h2) = w.lease_top().expect("a lease");
    assert!(e2 > epoch && h2.contains("\"two\""), "{e2} {h2}");
    assert_eq!(w.workers().len(), 2);
    // The old holder's puts land now, into its own epoch's space.
    sleep_s(120).await;
    w.gcs.set_demand(cpu2(3));
    sleep_s(30).await;
    // The new holder's records and epoch stand: a later holder loads the new space, and
    // every cloud instance has exactly one live record there.
    let metas = w.gcs.keys(NAMESPACE, "tables/t/");
    let top = metas.last().expect("a table");
    assert!(top.ends_with(&format!("{e2:020}")), "{metas:?}");
    let records = stored(&w);
    for c in w.workers() {
        let n = records
            .iter()
            .filter(|i| {
                i.cloud_instance_id.as_deref() == Some(c.cloud_instance_id.as_str())
                    && i.status != InstanceStatus::Terminated
            })
            .count();
        assert_eq!(n, 1, "{} in {records:?}", c.cloud_instance_id);
    }
    // No stale record of the old holder's aborted iteration (a launch it queued) is in
    // the table a later holder would load: every live record holds a live instance.
    let live: Vec<String> = w
        .cloud
        .instances()
        .into_iter()
        .map(|c| c.cloud_instance_id)
        .collect();
    for i in records.iter().filter(|i| {
        !matches!(
            i.status,
            InstanceStatus::Terminated | InstanceStatus::AllocationFailed
        )
    }) {
        assert!(
            i.cloud_instance_id
                .as_ref()
                .is_some_and(|c| live.contains(c)),
            "a stale record in the stored table: {i:?}"
        );
    }
    assert_eq!(w.workers().len(), 3);
    assert_eq!(w.launched(), 3, "{:?}", w.cloud.launches());
}

#[tokio::test(start_paused = true)]
async fn a_kv_poisoned_with_absurd_epochs_and_versions_is_reported_and_ignored() {
    let w = World::new();
    let _pump = w.pump();
    // What any Ray job could have written into the namespace.
    let max = format!("{:020}", u64::MAX);
    w.gcs
        .put_raw(NAMESPACE, &format!("lease/t/{max}"), b"{\"holder\":\"x\"}");
    w.gcs.put_raw(
        NAMESPACE,
        &format!("tables/t/{max}"),
        b"{\"version\":1,\"epoch\":1}",
    );
    w.gcs.put_raw(
        NAMESPACE,
        "table/t",
        format!("{{\"version\":{},\"epoch\":{}}}", u64::MAX, u64::MAX).as_bytes(),
    );
    // A real-looking epoch whose value is garbage, and a report version at the end of
    // the range.
    w.gcs
        .put_raw(NAMESPACE, "lease/t/00000000000000000500", b"\xff not json");
    w.gcs.set_held_version(i64::MAX);
    let mut record = Instance::new("im-x", "w", InstanceStatus::Queued, 1, "queued");
    record.version = u64::MAX;
    w.gcs.put_raw(
        NAMESPACE,
        "instance/t/im-x",
        &serde_json::to_vec(&record).expect("json"),
    );
    let _d = tokio::spawn(w.driver("one", w.gcs.connect()).run(std::future::pending()));
    // The garbage lease lapses after one lease duration; the next epoch is taken and
    // autoscaling goes on.
    w.gcs.set_demand(cpu2(2));
    sleep_s(40).await;
    assert_eq!(w.workers().len(), 2, "{:?}", w.cloud.launches());
    let (epoch, holder) = w.lease_top_below(MAX_EPOCH).expect("a lease");
    assert_eq!(epoch, 501);
    assert!(holder.contains("\"one\""), "{holder}");
    // The absurd record was left out (its key is removed with the former layout).
    assert!(stored(&w).iter().all(|i| i.instance_id != "im-x"));
}

#[tokio::test(start_paused = true)]
async fn a_terminate_refused_for_one_id_lets_the_others_go_and_gives_up_on_it() {
    let w = World::new();
    let _pump = w.pump();
    let _d = tokio::spawn(w.driver("one", w.gcs.connect()).run(std::future::pending()));
    let ids = scale_to(&w, 3).await;
    sleep_s(5).await;
    let refused = ids[1].clone();
    w.cloud
        .refuse_terminate(&refused, ProviderErrorKind::InvalidConfig);
    w.gcs.set_demand(vec![]);
    w.gcs.set_idle_ms(600_000);
    sleep_s(60).await;
    let left: Vec<String> = w
        .workers()
        .into_iter()
        .map(|c| c.cloud_instance_id)
        .collect();
    assert_eq!(left, std::slice::from_ref(&refused));
    // Each other id was in a call that went through exactly once.
    let calls = w.cloud.terminate_calls();
    for id in ids.iter().filter(|i| **i != refused) {
        assert!(calls.iter().any(|c| c.contains(id)), "{calls:?}");
    }
    // The refused one is given up, with the reason; no more calls for it.
    let r = record_of(&w, &refused);
    assert_eq!(r.status, InstanceStatus::TerminationFailed);
    let last = r.status_history.last().expect("history");
    assert!(
        last.details
            .starts_with(crate::reconciler::TERMINATION_GIVEN_UP),
        "{last:?}"
    );
    assert!(
        r.last_error
            .is_some_and(|e| e.contains("may not be terminated"))
    );
    let n = w.cloud.terminate_calls().len();
    sleep_s(600).await;
    assert_eq!(
        w.cloud.terminate_calls().len(),
        n,
        "given up: no more calls"
    );
}

#[tokio::test(start_paused = true)]
async fn a_terminate_that_keeps_failing_is_retried_with_a_backoff() {
    let w = World::new();
    let _pump = w.pump();
    let _d = tokio::spawn(w.driver("one", w.gcs.connect()).run(std::future::pending()));
    let ids = scale_to(&w, 1).await;
    sleep_s(5).await;
    // The cloud fails every terminate for ten minutes (throttled).
    for _ in 0..1000 {
        w.cloud
            .fail_next(FaultOn::Terminate, ProviderErrorKind::Throttled);
    }
    w.gcs.set_demand(vec![]);
    w.gcs.set_idle_ms(600_000);
    sleep_s(600).await;
    let calls = w.cloud.terminate_calls().len();
    // 5 s doubling to 300 s: 5+10+20+40+80+160+300 > 600 s, so about 7 tries, never one a
    // second (which would be ~600).
    assert!(
        (3..=10).contains(&calls),
        "{calls} terminate calls in 10 minutes"
    );
    assert_eq!(w.workers().len(), 1, "{:?}", ids);
}

#[tokio::test(start_paused = true)]
async fn a_terminate_failing_on_expired_credentials_is_retried_until_they_are_renewed() {
    let w = World::new();
    let _pump = w.pump();
    let _d = tokio::spawn(w.driver("one", w.gcs.connect()).run(std::future::pending()));
    let ids = scale_to(&w, 2).await;
    sleep_s(5).await;
    // The credentials expired: every terminate call fails with an auth error for a while
    // (before: every id of the batch given up at the first one, left running for good).
    for _ in 0..6 {
        w.cloud
            .fail_next(FaultOn::Terminate, ProviderErrorKind::Auth);
    }
    w.gcs.set_demand(vec![]);
    w.gcs.set_idle_ms(600_000);
    sleep_s(120).await;
    for id in &ids {
        let r = record_of(&w, id);
        assert!(
            r.status_history.iter().all(|c| !c
                .details
                .starts_with(crate::reconciler::TERMINATION_GIVEN_UP)),
            "{r:?}"
        );
    }
    // Renewed (the faults used up): both go.
    sleep_s(900).await;
    assert!(w.workers().is_empty(), "{:?}", w.workers());
    assert!(
        w.cloud.terminate_calls().len() >= 7,
        "{:?}",
        w.cloud.terminate_calls()
    );
}

/// The head's `ray-node-status` tag (what Ray's CLI finds a head by): set once, while
/// the loop leads, on the one running head that is not up to date; a refused call is
/// retried a minute later, not every step; no worker is tagged.
#[tokio::test(start_paused = true)]
async fn the_head_is_tagged_up_to_date_once_and_a_refusal_waits_a_minute() {
    use crate::provider::tags;
    use crate::testing::FakeCall;
    let w = World::new();
    let mut head = CloudInstance::worker("head", "head", None).as_head();
    head.labels
        .insert(tags::NODE_STATUS.into(), "uninitialized".into());
    w.cloud.insert(head);
    let mut stray = CloudInstance::worker("stray", "cpu", None);
    stray
        .labels
        .insert(tags::NODE_STATUS.into(), "uninitialized".into());
    w.cloud.insert(stray);
    let marks = || {
        w.cloud
            .calls()
            .into_iter()
            .filter(|c| matches!(c, FakeCall::MarkHead(_)))
            .count()
    };
    let status = |id: &str| {
        w.cloud
            .instances()
            .into_iter()
            .find(|c| c.cloud_instance_id == id)
            .and_then(|c| c.labels.get(tags::NODE_STATUS).cloned())
    };
    w.cloud
        .fail_next(FaultOn::MarkHead, ProviderErrorKind::Auth);
    let mut d = w.driver("one", w.gcs.connect());
    lead(&d).await;
    steps(&mut d, 30).await;
    assert_eq!(marks(), 1, "one refused call in the first minute");
    assert_eq!(status("head").as_deref(), Some("uninitialized"));
    steps(&mut d, 40).await;
    assert_eq!(marks(), 2, "tried again after a minute");
    assert_eq!(status("head").as_deref(), Some(tags::STATUS_UP_TO_DATE));
    steps(&mut d, 90).await;
    assert_eq!(marks(), 2, "tagged once");
    assert!(
        w.cloud
            .calls()
            .iter()
            .all(|c| !matches!(c, FakeCall::MarkHead(id) if id != "head")),
        "workers are not tagged"
    );
}
