//! The driver in virtual time: a fake GCS (with its small Ray data plane), the fake cloud,
//! paused tokio time. Hours of loop run in milliseconds, with no real sleep.

use std::sync::Mutex;

use super::*;
use crate::model::InstanceStatus;
use crate::provider::CloudInstance;
use crate::testing::{FakeGcs, FakeProvider, FaultOn, demand};

use crate::reconciler::tests::CONFIG;

/// A config text the test can edit; polled by the driver like a file.
#[derive(Clone)]
struct Text(Arc<Mutex<String>>);

impl Text {
    fn new(s: &str) -> Self {
        Text(Arc::new(Mutex::new(s.to_string())))
    }
    fn set(&self, s: &str) {
        *self.0.lock().expect("text") = s.to_string();
    }
    fn get(&self) -> String {
        self.0.lock().expect("text").clone()
    }
}

struct TextSource {
    text: Text,
    last: Option<String>,
}

#[async_trait::async_trait]
impl ConfigSource for TextSource {
    async fn poll(&mut self) -> Result<Option<Reloaded>, String> {
        let now = self.text.get();
        if self.last.as_deref() == Some(now.as_str()) {
            return Ok(None);
        }
        let config =
            ClusterConfig::from_yaml_str(&now, "cluster.yaml").map_err(|e| e.to_string())?;
        let chain = ExpanderChain::from_settings(&config.expander, &config.node_types, None)
            .map_err(|e| e.to_string())?;
        self.last = Some(now);
        Ok(Some(Reloaded { config, chain }))
    }
}

struct World {
    gcs: FakeGcs,
    cloud: Arc<FakeProvider>,
    text: Text,
    /// When the world began: every process's clock reads the same wall time, however
    /// late it starts (a restarted process must not see time begin again).
    born: tokio::time::Instant,
}

impl World {
    fn new() -> Self {
        World {
            gcs: FakeGcs::new(),
            cloud: Arc::new(FakeProvider::new().with_head("head")),
            text: Text::new(CONFIG),
            born: tokio::time::Instant::now(),
        }
    }

    fn driver(&self, name: &str, gcs: FakeGcs) -> Driver<FakeGcs, TokioClock> {
        let seed = name.len() as u64 * 7919 + name.as_bytes()[0] as u64;
        self.driver_seeded(name, gcs, seed)
    }

    /// A process named `name` whose ids come from `id_seed` (two processes must not
    /// share one: their ids would be the same, as no two real processes' are).
    fn driver_seeded(&self, name: &str, gcs: FakeGcs, id_seed: u64) -> Driver<FakeGcs, TokioClock> {
        self.driver_skewed(name, gcs, id_seed, 0)
    }

    /// [`Self::driver_seeded`] on a host whose wall clock is `skew_ns` off the others'.
    fn driver_skewed(
        &self,
        name: &str,
        gcs: FakeGcs,
        id_seed: u64,
        skew_ns: i64,
    ) -> Driver<FakeGcs, TokioClock> {
        Driver::new(
            "t",
            Arc::new(gcs),
            self.cloud.clone(),
            TokioClock::new(
                1_700_000_000_000_000_000
                    + i64::try_from(self.born.elapsed().as_nanos()).unwrap_or(i64::MAX / 4)
                    + skew_ns,
            ),
            Box::new(TextSource {
                text: self.text.clone(),
                last: None,
            }),
            DriverOptions {
                holder: name.into(),
                id_seed,
                ..Default::default()
            },
        )
    }

    /// Plays the Ray nodes (each running instance joins) every 500 ms, forever.
    fn pump(&self) -> tokio::task::JoinHandle<()> {
        let gcs = self.gcs.clone();
        let cloud = self.cloud.clone();
        let text = self.text.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(c) = ClusterConfig::from_yaml_str(&text.get(), "cluster.yaml") {
                    gcs.join_running(&cloud, &c).await;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    }

    fn workers(&self) -> Vec<CloudInstance> {
        self.cloud
            .instances()
            .into_iter()
            .filter(|c| !c.is_head())
            .collect()
    }

    fn launched(&self) -> u64 {
        let mut by_request: BTreeMap<String, u64> = BTreeMap::new();
        for l in self.cloud.launches() {
            let e = by_request.entry(l.request_id).or_default();
            *e = (*e).max(l.count);
        }
        by_request.values().sum()
    }

    /// The epoch of the highest lease key, and its holder's value.
    fn lease_top(&self) -> Option<(u64, String)> {
        let keys = self.gcs.keys(NAMESPACE, "lease/t/");
        let top = keys.last()?;
        let epoch = top.rsplit('/').next()?.parse().ok()?;
        let value = block_on_get(&self.gcs, top);
        Some((epoch, value))
    }
}

fn block_on_get(gcs: &FakeGcs, key: &str) -> String {
    crate::testing::block_on(gcs.kv_get(NAMESPACE, key))
        .ok()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .unwrap_or_default()
}

fn cpu2(n: u64) -> Vec<crate::model::ResourceRequestByCount> {
    vec![demand(&[("CPU", 2.0)], n)]
}

async fn sleep_s(s: u64) {
    tokio::time::sleep(Duration::from_secs(s)).await;
}

/// Waits until `d` holds the lease.
async fn lead(d: &Driver<FakeGcs, TokioClock>) {
    while !d.lease().may_act() {
        sleep_s(1).await;
    }
}

/// `n` steps of `d`, a second apart.
async fn steps(d: &mut Driver<FakeGcs, TokioClock>, n: u32) {
    for _ in 0..n {
        d.step().await;
        sleep_s(1).await;
    }
}

#[tokio::test(start_paused = true)]
async fn two_drivers_act_as_one_and_the_follower_takes_over_a_dead_leader() {
    let w = World::new();
    let _pump = w.pump();
    w.gcs.set_demand(cpu2(3));
    let c1 = w.gcs.connect();
    let c2 = w.gcs.connect();
    let d1 = tokio::spawn(w.driver("one", c1.clone()).run(std::future::pending()));
    // The second starts a little later, as in a rolling update.
    sleep_s(1).await;
    let d2 = tokio::spawn(w.driver("two", c2.clone()).run(std::future::pending()));
    sleep_s(30).await;
    assert_eq!(w.workers().len(), 3, "{:?}", w.workers());
    assert_eq!(w.launched(), 3);
    let (epoch, holder) = w.lease_top().expect("a lease");
    assert!(holder.contains("\"one\""), "{holder}");
    // The leader's process dies: its connection goes silent and it is gone (kill -9:
    // no release).
    c1.set_cut(true);
    d1.abort();
    w.gcs.set_demand(cpu2(4));
    let died = Instant::now();
    let took_over = loop {
        sleep_s(1).await;
        if let Some((e, h)) = w.lease_top()
            && e > epoch
        {
            assert!(h.contains("\"two\""), "{h}");
            break died.elapsed();
        }
        assert!(died.elapsed() < Duration::from_secs(60), "no takeover");
    };
    assert!(took_over <= Duration::from_secs(15), "took {took_over:?}");
    sleep_s(10).await;
    assert_eq!(w.workers().len(), 4, "{:?}", w.workers());
    assert_eq!(w.launched(), 4);
    d2.abort();
}

#[tokio::test(start_paused = true)]
async fn a_leader_cut_off_from_the_gcs_stops_acting_and_stays_stopped_when_it_comes_back() {
    let w = World::new();
    let _pump = w.pump();
    let c1 = w.gcs.connect();
    let c2 = w.gcs.connect();
    let _d1 = tokio::spawn(w.driver("one", c1.clone()).run(std::future::pending()));
    sleep_s(1).await;
    let _d2 = tokio::spawn(w.driver("two", c2.clone()).run(std::future::pending()));
    sleep_s(5).await;
    let (epoch, holder) = w.lease_top().expect("a lease");
    assert!(holder.contains("\"one\""), "{holder}");
    // `one` loses the GCS (a partition), `two` takes over and scales up.
    c1.set_cut(true);
    sleep_s(20).await;
    let (e2, h2) = w.lease_top().expect("a lease");
    assert!(e2 > epoch && h2.contains("\"two\""), "{e2} {h2}");
    w.gcs.set_demand(cpu2(2));
    sleep_s(10).await;
    assert_eq!(w.workers().len(), 2);
    // `one` comes back: it sees the higher epoch and never acts again. More demand is
    // served once, by `two`.
    c1.set_cut(false);
    w.gcs.set_demand(cpu2(3));
    sleep_s(30).await;
    assert_eq!(w.workers().len(), 3);
    assert_eq!(w.launched(), 3);
    let (e3, h3) = w.lease_top().expect("a lease");
    assert_eq!(e3, e2);
    assert!(h3.contains("\"two\""), "{h3}");
}

#[tokio::test(start_paused = true)]
async fn a_clean_stop_hands_the_lease_over_at_once() {
    let w = World::new();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let d1 = tokio::spawn(w.driver("one", w.gcs.connect()).run(async {
        let _ = rx.await;
    }));
    sleep_s(1).await;
    let _d2 = tokio::spawn(w.driver("two", w.gcs.connect()).run(std::future::pending()));
    sleep_s(3).await;
    let (epoch, _) = w.lease_top().expect("a lease");
    let _ = tx.send(());
    d1.await.expect("driver one stops");
    let stopped = Instant::now();
    loop {
        sleep_s(1).await;
        if w.lease_top().is_some_and(|(e, _)| e > epoch) {
            break;
        }
    }
    assert!(
        stopped.elapsed() <= Duration::from_secs(3),
        "{:?}",
        stopped.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_launch_costs_one_deadline_and_is_resent_with_its_request_id() {
    let w = World::new();
    let _pump = w.pump();
    w.cloud.hang_next(FaultOn::Launch);
    w.gcs.set_demand(cpu2(1));
    let _d = tokio::spawn(w.driver("one", w.gcs.connect()).run(std::future::pending()));
    sleep_s(70).await;
    // The loop went on after the deadline: it keeps reporting.
    let before = w.gcs.reports().len();
    sleep_s(20).await;
    assert!(w.gcs.reports().len() > before);
    assert!(w.workers().is_empty());
    // The request times out (600 s) and is re-sent as it was; it goes through.
    sleep_s(600).await;
    let launches = w.cloud.launches();
    assert!(launches.len() >= 2, "{launches:?}");
    assert!(
        launches
            .iter()
            .all(|l| l.request_id == launches[0].request_id)
    );
    assert_eq!(w.workers().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_save_runs_no_effect_and_changes_nothing() {
    let w = World::new();
    let _pump = w.pump();
    let mut d = w.driver("one", w.gcs.connect());
    lead(&d).await;
    assert!(d.step().await.reconciled);
    w.gcs.fail_puts(Some("records/"));
    w.gcs.set_demand(cpu2(2));
    let r = d.step().await;
    assert!(!r.reconciled, "{r:?}");
    assert!(r.aborted.is_some());
    assert_eq!(r.effects, 0);
    assert!(w.cloud.launches().is_empty());
    assert!(d.instances().is_empty(), "{:?}", d.instances());
    w.gcs.fail_puts(None);
    let r = d.step().await;
    assert!(r.reconciled);
    assert_eq!(r.kv.written, 2);
    assert_eq!(w.launched(), 2);
    // Once the instances settled, an iteration that changes nothing writes nothing.
    for _ in 0..10 {
        d.step().await;
        sleep_s(1).await;
    }
    sleep_s(6).await;
    let r = d.step().await;
    assert!(r.reconciled);
    assert_eq!(r.kv, SaveStats::default());
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_replays_a_launch_cut_short_by_a_crash() {
    let w = World::new();
    let _pump = w.pump();
    w.cloud.hang_next(FaultOn::Launch);
    w.gcs.set_demand(cpu2(1));
    let c1 = w.gcs.connect();
    let d1 = tokio::spawn(w.driver("one", c1.clone()).run(std::future::pending()));
    sleep_s(5).await;
    assert_eq!(w.cloud.launches().len(), 1);
    c1.set_cut(true);
    d1.abort();
    let _d2 = tokio::spawn(w.driver("two", w.gcs.connect()).run(std::future::pending()));
    sleep_s(20).await;
    let launches = w.cloud.launches();
    assert_eq!(launches.len(), 2, "{launches:?}");
    assert_eq!(launches[0].request_id, launches[1].request_id);
    assert_eq!(w.workers().len(), 1, "{:?}", w.cloud.calls());
}

#[tokio::test(start_paused = true)]
async fn busy_nodes_over_a_lowered_max_are_stopped_and_a_broken_edit_keeps_the_last_config() {
    let w = World::new();
    let _pump = w.pump();
    w.gcs.set_demand(cpu2(3));
    let _d = tokio::spawn(w.driver("one", w.gcs.connect()).run(std::future::pending()));
    sleep_s(15).await;
    assert_eq!(w.workers().len(), 3, "{:?}", w.cloud.launches());
    // The tasks run: no demand left, every node busy.
    w.gcs.set_demand(vec![]);
    for c in w.workers() {
        w.gcs.set_busy(&c.cloud_instance_id, true);
    }
    // A broken edit: the loop keeps going on the last good config.
    w.text.set("cluster_name: [");
    sleep_s(5).await;
    assert_eq!(w.workers().len(), 3);
    // Lowering the type's max stops the busy surplus at once (not an idle drain, which
    // a busy node rejects), then terminates it.
    w.text
        .set(&CONFIG.replace("max_workers: 4, node_config", "max_workers: 1, node_config"));
    sleep_s(3).await;
    let (idle, stops) = w.gcs.stops();
    assert!(idle.is_empty(), "{idle:?}");
    assert_eq!(stops.len(), 2, "{stops:?}");
    sleep_s(10).await;
    assert_eq!(w.workers().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn idle_nodes_are_drained_as_ray_drains_them_and_a_rejection_is_an_error() {
    let w = World::new();
    let _pump = w.pump();
    w.gcs.set_demand(cpu2(2));
    let mut d = w.driver("one", w.gcs.connect());
    lead(&d).await;
    steps(&mut d, 10).await;
    assert_eq!(w.workers().len(), 2);
    w.gcs.set_demand(vec![]);
    // One got work meanwhile: its drain is rejected and it goes back to RAY_RUNNING
    // with the error; the other is drained and terminated.
    let busy = w.workers()[0].cloud_instance_id.clone();
    w.gcs.refuse_drains(&busy);
    w.gcs.set_idle_ms(120_000);
    for _ in 0..3 {
        d.step().await;
        sleep_s(1).await;
    }
    let (idle, stops) = w.gcs.stops();
    assert!(stops.is_empty(), "{stops:?}");
    assert!(!idle.is_empty());
    let kept = d
        .instances()
        .into_iter()
        .find(|i| i.cloud_instance_id.as_deref() == Some(busy.as_str()))
        .expect("the busy instance");
    // Back to RAY_RUNNING with the error (and, still looking idle, asked again: Ray
    // cycles the same way until the node is really idle); never terminated.
    assert!(
        kept.status_history.iter().any(|c| c.status == InstanceStatus::RayRunning
            && c.details.contains("drain rejected")),
        "{:?}",
        kept.status_history
    );
    assert!(kept.last_error.is_some_and(|e| e.contains("rejected")));
    assert!(w.workers().iter().any(|c| c.cloud_instance_id == busy));
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn lease_keys_that_vanish_never_make_two_holders() {
    let gcs = FakeGcs::new();
    let mut a = Lease::new(NAMESPACE, "t", "a", LeaseSettings::default());
    let mut b = Lease::new(NAMESPACE, "t", "b", LeaseSettings::default());
    assert_eq!(a.tick(&gcs).await.expect("tick").epoch, Some(1));
    assert_eq!(b.tick(&gcs).await.expect("tick").epoch, None);
    // The GCS restarts without persistence: the keys are gone. The holder puts its key
    // back; the follower, which saw a lease before, waits instead of taking epoch 1.
    gcs.clear_kv();
    for _ in 0..10 {
        assert_eq!(b.tick(&gcs).await.expect("tick").epoch, None);
        assert_eq!(a.tick(&gcs).await.expect("tick").epoch, Some(1));
        sleep_s(2).await;
    }
    // Had the holder died with its key, the follower would take the next epoch.
    gcs.clear_kv();
    for _ in 0..6 {
        b.tick(&gcs).await.expect("tick");
        sleep_s(2).await;
    }
    assert_eq!(b.view().epoch, Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_table_stored_as_one_value_is_read_and_moved_to_one_key_per_instance() {
    let gcs = FakeGcs::new();
    let a = Instance::new("im-1", "w", InstanceStatus::Queued, 1, "queued");
    let b = Instance::new("im-2", "w", InstanceStatus::Queued, 2, "queued");
    let bytes = crate::instance::encode_table(7, &[a.clone(), b.clone()]).expect("encode");
    gcs.put_raw(NAMESPACE, "instances/t", &bytes);
    let mut table = KvTable::new("t");
    let loaded = table.load(&gcs, 1).await.expect("load");
    assert_eq!((loaded.version, loaded.instances.len()), (7, 2));
    let stats = table
        .save(&gcs, 8, &loaded.instances, 1)
        .await
        .expect("save");
    assert_eq!(stats.written, 2);
    assert!(gcs.keys(NAMESPACE, "instances/").is_empty());
    assert_eq!(
        gcs.keys(NAMESPACE, "records/t/"),
        [
            "records/t/00000000000000000001/im-1",
            "records/t/00000000000000000001/im-2"
        ]
    );
    let again = KvTable::new("t").load(&gcs, 1).await.expect("load");
    assert_eq!((again.version, again.instances), (8, vec![a, b]));
}

#[tokio::test(start_paused = true)]
async fn a_save_that_fails_part_way_rewrites_what_it_wrote() {
    let gcs = FakeGcs::new();
    let mut table = KvTable::new("t");
    let mut a = Instance::new("im-1", "w", InstanceStatus::Queued, 1, "first");
    table.save(&gcs, 1, &[], 1).await.expect("save");
    // The record is written, then the meta put fails: the save fails, and the caller
    // drops that table.
    gcs.fail_puts(Some("tables/"));
    assert!(
        table
            .save(&gcs, 2, std::slice::from_ref(&a), 1)
            .await
            .is_err()
    );
    gcs.fail_puts(None);
    // The next table has the record at the same version with other content: it is
    // written again, not taken for the one already stored.
    a.status_history[0].details = "second".into();
    let stats = table
        .save(&gcs, 2, std::slice::from_ref(&a), 1)
        .await
        .expect("save");
    assert_eq!(stats.written, 1);
    let loaded = KvTable::new("t").load(&gcs, 1).await.expect("load");
    assert_eq!(loaded.instances, vec![a]);
}

#[test]
fn a_new_leader_replays_the_installs_a_crash_cut_short() {
    let mut a = Instance::new(
        "im-1",
        "w",
        InstanceStatus::RayInstalling,
        1,
        "installing ray",
    );
    a.cloud_instance_id = Some("10.0.0.2".into());
    let b = Instance::new("im-2", "w", InstanceStatus::Allocated, 1, "allocated");
    let storage = InMemoryStorage::with_instances(3, [a, b]);
    let effects = replay::replays(&storage, &mut RandomIds::new(1));
    assert_eq!(
        effects,
        [Effect::InstallRay {
            instance_id: "im-1".into(),
            cloud_instance_id: "10.0.0.2".into(),
            node_type: "w".into(),
        }]
    );
}

#[test]
fn a_new_leader_replays_gang_launches_whole_stops_as_rejectable_and_given_up_terminations() {
    use crate::reconciler::TERMINATION_GIVEN_UP;
    // A gang's launch in flight.
    let mut g = Instance::new(
        "im-1",
        "w",
        InstanceStatus::Requested,
        1,
        "launch requested",
    );
    g.launch_request_id = "r-gang".into();
    g.launch_request_size = 2;
    g.gang = Some("pg1#5".into());
    // A forced stop (max_workers) the first process decided.
    let mut f = Instance::new("im-2", "w", InstanceStatus::RayStopRequested, 1, "draining");
    f.node_id = Some("ab".repeat(28));
    f.stop_cause = Some("MAX_NUM_NODE_PER_TYPE".into());
    // A termination given up.
    let mut t = Instance::new(
        "im-3",
        "w",
        InstanceStatus::TerminationFailed,
        1,
        format!("{TERMINATION_GIVEN_UP} (invalid_config error)"),
    );
    t.cloud_instance_id = Some("c-3".into());
    t.last_error = Some("refused".into());
    // One that failed and is retried by the reconciler's backoff: not replayed.
    let mut b = Instance::new(
        "im-4",
        "w",
        InstanceStatus::TerminationFailed,
        1,
        "termination failed (auth error)",
    );
    b.cloud_instance_id = Some("c-4".into());
    let storage = InMemoryStorage::with_instances(3, [g, f, t, b]);
    let effects = replay::replays(&storage, &mut RandomIds::new(1));
    let launch = effects.iter().find_map(|e| match e {
        Effect::Launch(l) => Some(l.clone()),
        _ => None,
    });
    assert!(
        launch
            .as_ref()
            .is_some_and(|l| l.all_or_nothing && l.count == 2 && l.request_id == "r-gang"),
        "{effects:?}"
    );
    // Ray may refuse it now (a raised max, a node that got work): decided again then.
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Drain { instance_id, idle: true, deadline_ns: None, .. } if instance_id == "im-2")),
        "{effects:?}"
    );
    let terminated: Vec<&String> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Terminate {
                cloud_instance_ids, ..
            } => Some(cloud_instance_ids),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(terminated, ["c-3"], "{effects:?}");
}

impl World {
    /// The highest lease key at or below `limit` (keys above it are ignored by the lease),
    /// and its value.
    fn lease_top_below(&self, limit: u64) -> Option<(u64, String)> {
        let keys = self.gcs.keys(NAMESPACE, "lease/t/");
        let (epoch, key) = keys
            .iter()
            .filter_map(|k| Some((k.rsplit('/').next()?.parse::<u64>().ok()?, k)))
            .filter(|(e, _)| *e <= limit)
            .max()?;
        Some((epoch, block_on_get(&self.gcs, key)))
    }
}

mod faults;
mod sim;

/// Records the advice each iteration handed over.
#[derive(Default)]
struct Advice(Mutex<Vec<String>>);

impl Observer for Advice {
    fn iteration(&self, v: &IterationView<'_>) {
        let mut seen = self.0.lock().expect("advice");
        seen.extend(
            v.advisories
                .iter()
                .map(|n| format!("{} {}", n.cloud_instance_id, n.source)),
        );
    }
}

#[tokio::test(start_paused = true)]
async fn ignored_rebalance_advice_is_handed_over_once_and_leftover_notices_are_deleted() {
    let w = World::new();
    w.text.set(&format!(
        "{CONFIG}rayscale: {{preemption: {{enabled: true}}}}\n"
    ));
    let _pump = w.pump();
    w.gcs.set_demand(cpu2(2));
    let advice = Arc::new(Advice::default());
    let mut d = w.driver("one", w.gcs.connect()).observe(advice.clone());
    lead(&d).await;
    steps(&mut d, 10).await;
    assert_eq!(w.workers().len(), 2);
    let advised = w.workers()[0].cloud_instance_id.clone();
    let rebalance = br#"{"source": "aws-rebalance", "deadline_s": 0, "message": "AWS rebalance recommendation"}"#;
    let spot = br#"{"source": "aws-spot-interruption", "deadline_s": 0, "message": "m"}"#;
    w.gcs
        .put_raw(NAMESPACE, &format!("notices/t/{advised}"), rebalance);
    // A notice of an instance neither the table nor the cloud knows: a leftover.
    w.gcs.put_raw(NAMESPACE, "notices/t/i-gone", spot);
    // Another cluster's notice, and a key that is not a watcher's: left alone.
    w.gcs.put_raw(NAMESPACE, "notices/other/i-gone", spot);
    w.gcs.put_raw(NAMESPACE, "notices/t/a/b", spot);
    steps(&mut d, 100).await;
    assert_eq!(
        *advice.0.lock().expect("advice"),
        vec![format!("{advised} aws-rebalance")],
        "handed over once, though listed in three scans"
    );
    let mut left = w.gcs.keys(NAMESPACE, "notices/");
    left.sort();
    assert_eq!(
        left,
        vec![
            "notices/other/i-gone".to_string(),
            "notices/t/a/b".to_string(),
            format!("notices/t/{advised}"),
        ]
    );
    // The advised node was not drained: both workers still run.
    assert_eq!(w.workers().len(), 2);
    assert!(w.gcs.stops().1.is_empty());
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_explanation_is_stored_for_status_why_and_follows_its_cause() {
    let w = World::new();
    let _pump = w.pump();
    // Six two-CPU shapes on a type of at most four nodes: two wait for the max.
    w.gcs.set_demand(cpu2(6));
    let mut d = w.driver("one", w.gcs.connect());
    lead(&d).await;
    steps(&mut d, 10).await;
    let read = || {
        let text = block_on_get(&w.gcs, &crate::explain::why_key("t"));
        crate::explain::Explanation::from_json(text.as_bytes()).expect("a stored explanation")
    };
    let e = read();
    assert!(
        e.demand.iter().any(|g| g.count == 2
            && g.reason
                == crate::explain::DemandReason::TypeAtMax {
                    node_type: "w".into(),
                    max_workers: 4
                }),
        "{:?}",
        e.lines()
    );
    // The cause gone, the stored reasons follow.
    w.gcs.set_demand(cpu2(4));
    steps(&mut d, 5).await;
    let e = read();
    assert!(
        !e.demand
            .iter()
            .any(|g| matches!(g.reason, crate::explain::DemandReason::TypeAtMax { .. })),
        "{:?}",
        e.lines()
    );
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn autostop_stops_every_worker_and_then_ends_the_loop_for_the_head() {
    let w = World::new();
    w.text.set(&format!(
        "{}rayscale: {{autostop_minutes: 2}}\n",
        CONFIG.replace(
            "w: {resources: {CPU: 2}, max_workers: 4,",
            "w: {resources: {CPU: 2}, min_workers: 1, max_workers: 4,"
        )
    ));
    let _pump = w.pump();
    w.gcs.set_demand(cpu2(2));
    let mut d = w.driver("one", w.gcs.connect());
    d.options.end_on_autostop = true;
    let run = tokio::spawn(d.run(std::future::pending()));
    sleep_s(20).await;
    assert_eq!(w.workers().len(), 2);
    // No demand, every node idle (for less than the idle timeout: only autostop stops
    // them, min_workers notwithstanding).
    w.gcs.set_demand(Vec::new());
    w.gcs.set_idle_ms(1_000);
    w.gcs.set_head_idle_ms(1_000);
    let quiet = Instant::now();
    sleep_s(100).await;
    assert_eq!(w.workers().len(), 2, "not before two minutes");
    let end = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the loop ends")
        .expect("joined");
    assert_eq!(end, RunEnd::Autostopped);
    let after = quiet.elapsed();
    assert!(
        after >= Duration::from_secs(120) && after < Duration::from_secs(150),
        "{after:?}"
    );
    assert!(w.workers().is_empty(), "{:?}", w.workers());
    // The workers went by idle drains; nothing was launched again for min_workers.
    assert_eq!(w.launched(), 2);
    assert_eq!(w.gcs.stops().0.len(), 2);
}

/// A head whose stop fails `fail` times, then succeeds; counts the tries.
struct FlakyHead {
    fail: std::sync::atomic::AtomicU32,
    tries: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl HeadStop for FlakyHead {
    async fn stop_head(&self) -> Result<String, String> {
        use std::sync::atomic::Ordering::SeqCst;
        self.tries.fetch_add(1, SeqCst);
        match self.fail.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)) {
            Ok(_) => Err("cloud: throttled".into()),
            Err(_) => Ok("head stopped".into()),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_head_stop_that_fails_is_tried_again_only_while_the_cluster_stays_quiet() {
    use std::sync::atomic::Ordering::SeqCst;
    let w = World::new();
    w.text
        .set(&format!("{CONFIG}rayscale: {{autostop_minutes: 2}}\n"));
    let _pump = w.pump();
    w.gcs.set_demand(cpu2(2));
    let head = Arc::new(FlakyHead {
        fail: 3.into(),
        tries: 0.into(),
    });
    let mut d = w
        .driver("one", w.gcs.connect())
        .stop_head_with(head.clone());
    d.options.end_on_autostop = true;
    let run = tokio::spawn(d.run(std::future::pending()));
    sleep_s(20).await;
    assert_eq!(w.workers().len(), 2);
    w.gcs.set_demand(Vec::new());
    w.gcs.set_idle_ms(1_000);
    w.gcs.set_head_idle_ms(1_000);
    // Two minutes of quiet: the workers stop, then the head's stop fails (throttled).
    sleep_s(150).await;
    assert!(w.workers().is_empty(), "{:?}", w.workers());
    let tried = head.tries.load(SeqCst);
    assert!((1..=2).contains(&tried), "tries: {tried}");
    // A job arrives before the next try: no more tries, the loop scales for it.
    w.gcs.set_demand(cpu2(1));
    w.gcs.set_head_idle_ms(0);
    sleep_s(90).await;
    assert_eq!(head.tries.load(SeqCst), tried, "not tried while work runs");
    assert_eq!(w.workers().len(), 1, "scaled for the new work");
    assert!(!run.is_finished());
    // Quiet again: after two more minutes the workers go, the head's stop is tried
    // (failing once more, then done) and the loop ends with its line.
    w.gcs.set_demand(Vec::new());
    w.gcs.set_idle_ms(1_000);
    w.gcs.set_head_idle_ms(1_000);
    let end = tokio::time::timeout(Duration::from_secs(400), run)
        .await
        .expect("the loop ends")
        .expect("joined");
    assert_eq!(end, RunEnd::HeadStopped(Ok("head stopped".into())));
    assert_eq!(head.tries.load(SeqCst), 4);
    assert!(w.workers().is_empty());
}
