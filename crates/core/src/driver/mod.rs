//! The live loop as a library component, generic over its GCS ([`Gcs`]), its cloud
//! ([`CloudInstanceProvider`]) and its wall clock ([`Clock`]); waiting and deadlines use
//! tokio's timers, which tests pause. It does no I/O of its own: `bin/` wires a gRPC GCS
//! client, a provider and a config file to it; tests wire [`crate::testing::FakeGcs`] and
//! [`crate::testing::FakeProvider`] and run it in virtual time.
//!
//! Each step (about once a second):
//! 1. the config is polled (Ray re-reads it every iteration); a broken edit keeps the last
//!    good config and is said once;
//! 2. the process acts only while it holds the cluster's lease ([`lease`]); on taking it,
//!    it loads the instance table from the GCS KV and replays what a crash may have cut
//!    short (launch requests, stops, terminations);
//! 3. the GCS state, the cloud's instances and the provider's errors are gathered
//!    concurrently, each under a deadline;
//! 4. when something changed (or every `interval`), the pure reconciler runs on the table,
//!    whose writes stay tentative until they are stored in the KV ([`table`]): an
//!    iteration that fails (or is cut short) rolls them back, leaving the table in memory
//!    as it was, and runs no effect; the records a failed save did write are rewritten by
//!    the next;
//! 5. the report goes to the GCS, and the effects run concurrently (bounded), each under a
//!    deadline, while the lease is held ([`effects`]).

pub mod clock;
pub mod effects;
pub mod gcs;
pub mod head_ready;
pub mod head_stop;
mod iterate;
pub mod lease;
mod notices;
pub mod observe;
mod replay;
pub mod table;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

pub use clock::{Clock, TokioClock};
pub use effects::{EffectOptions, EffectResults};
pub use gcs::{DrainReply, Gcs, GcsState};
pub use head_stop::HeadStop;
pub use lease::{Lease, LeaseSettings, LeaseView};
pub use observe::{IterationView, Observer, StepView};
pub use table::{KvTable, NAMESPACE, SaveStats};

use crate::availability::{Availability, AvailabilityState, DEFAULT_RECOVERY_S};
use crate::config::ClusterConfig;
use crate::error::CoreError;
use crate::expander::{ExpanderChain, SeededRng};
use crate::instance::{InMemoryStorage, Instance, InstanceManager, InstanceStorage};
use crate::provider::{CloudInstance, CloudInstanceProvider, ProviderError};
use crate::reconciler::{
    DrainRejection, Effect, IdSource, Observed, ReconcilerSettings, reconcile,
};

/// Said once when the head was started without autoscaler v2.
pub const V1_HEAD_HINT: &str = "this Ray head was started without RAY_enable_autoscaler_v2=1: \
rayscale autoscales it, but `ray status` does not show rayscale's view (and turning v2 on now \
would make every Ray job print tracebacks). For the full view, start the head with \
`RAY_enable_autoscaler_v2=1 ray start --head --no-monitor ...`";

/// Said once when another autoscaler reports to the same GCS.
const OTHER_AUTOSCALER_HINT: &str = "another autoscaler reports to this GCS (a Ray head \
started without --no-monitor runs Ray's own): both act on the cluster. Start the head with \
`RAY_enable_autoscaler_v2=1 ray start --head --no-monitor ...`";

/// A config as loaded, with the expander chain built from it.
pub struct Reloaded {
    /// The cluster config.
    pub config: ClusterConfig,
    /// Its expander chain.
    pub chain: ExpanderChain,
}

/// Where the config comes from (a file in `bin/`, the RayCluster for KubeRay). Polled on
/// every step; async because a RayCluster is read over the network.
#[async_trait::async_trait]
pub trait ConfigSource: Send {
    /// The config when it changed since the last call (the first call always returns
    /// it), `None` when unchanged, or one line saying why the current text is unusable.
    async fn poll(&mut self) -> Result<Option<Reloaded>, String>;
}

/// The driver's timing and limits.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// Reconcile at least this often.
    pub interval: Duration,
    /// Step this often; reconcile at once when something changed.
    pub watch: Duration,
    /// Deadline of each call that gathers state (GCS state, cloud list, provider errors).
    pub call_deadline: Duration,
    /// How effects run.
    pub effects: EffectOptions,
    /// The lease's timing.
    pub lease: LeaseSettings,
    /// This process, for humans (host and pid).
    pub holder: String,
    /// Seed of the id generator.
    pub id_seed: u64,
    /// Terminal records are kept this long (reports, launch backoff), then dropped.
    pub keep_terminal: Duration,
    /// How often to look at the report version the GCS holds.
    pub held_check: Duration,
    /// [`Driver::run`] ends once autostop has stopped every worker: at once with no
    /// [`HeadStop`] (the caller stops the head), or once the head's stop (tried while the
    /// cluster stays quiet) succeeds or gives up.
    pub end_on_autostop: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            interval: Duration::from_secs(5),
            watch: Duration::from_secs(1),
            call_deadline: Duration::from_secs(30),
            effects: EffectOptions::default(),
            lease: LeaseSettings::default(),
            holder: "rayscale".into(),
            id_seed: 0,
            keep_terminal: Duration::from_secs(3600),
            held_check: Duration::from_secs(60),
            end_on_autostop: false,
        }
    }
}

/// What one step did (for tests and the benchmark).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepReport {
    /// The reconciler ran and its table was stored.
    pub reconciled: bool,
    /// What the table save wrote.
    pub kv: SaveStats,
    /// Effects run.
    pub effects: usize,
    /// Why the step stopped early, if it did.
    pub aborted: Option<String>,
    /// It stopped on an error (the GCS, the cloud, the table), not by waiting (for the
    /// lease or a first config): Ray's `update_loop_exceptions`.
    pub failed: bool,
    /// A changed config was refused this step (unusable text, another cluster's, or the
    /// provider said no): Ray's `config_validation_exceptions`.
    pub config_refused: bool,
    /// Where the iteration's time went (zero for phases that did not run).
    pub phases: Phases,
    /// Autostop stopped every worker: the head is next.
    pub autostopped: bool,
}

/// Why [`Driver::run`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// Its shutdown future resolved.
    Shutdown,
    /// Autostop stopped every worker (with [`DriverOptions::end_on_autostop`] and no
    /// [`HeadStop`]).
    Autostopped,
    /// Autostop stopped every worker, then the head's stop (tried while the cluster
    /// stayed quiet) succeeded (its line) or gave up (the last error).
    HeadStopped(Result<String, String>),
}

/// Time of a reconciling iteration's phases on tokio's clock (for the logs at `debug`, the
/// benchmark and metrics; never an input to a decision; zero under paused time). All zero
/// for a step that did not reconcile.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    /// Gathering the GCS state, the cloud's list and the provider's errors.
    pub gather: std::time::Duration,
    /// The reconciler (sync, scheduler, pacing, report).
    pub reconcile: std::time::Duration,
    /// Storing the table.
    pub save: std::time::Duration,
    /// Reporting to the GCS and running the effects.
    pub effects: std::time::Duration,
}

/// Random ids from a seeded generator. A launch request id carries the time it was made:
/// `lr-` and 16 hex digits, the first 8 the time in seconds (a provider that must tell a
/// replay, however late, from a new request reads it: KubeRay's launch ledger).
struct RandomIds(SeededRng, u32);

impl RandomIds {
    fn new(seed: u64) -> Self {
        RandomIds(SeededRng::new(seed), 0)
    }

    /// The time (ns since the epoch) new request ids carry.
    fn set_now(&mut self, now_ns: i64) {
        self.1 = u32::try_from(now_ns.div_euclid(1_000_000_000)).unwrap_or(u32::MAX);
    }
}

impl IdSource for RandomIds {
    fn instance_id(&mut self) -> String {
        format!("im-{:016x}", self.0.next_u64())
    }
    fn request_id(&mut self) -> String {
        format!("lr-{:08x}{:08x}", self.1, self.0.next_u64() as u32)
    }
}

/// Says each entry of `now` that `said` lacks, then remembers `now`: a condition that
/// lasts is said when it starts, not on every step.
pub fn say_new(said: &mut BTreeSet<String>, now: BTreeSet<String>, say: impl Fn(&str)) {
    for s in now.difference(said) {
        say(s);
    }
    *said = now;
}

/// What the watch compares to decide whether to reconcile: the GCS state's version and
/// the cloud's instances with their states, as a count and an order-free hash (the watch
/// runs every second and copies nothing; a collision is caught by the `interval` run).
#[derive(PartialEq, Eq, Default)]
struct Fingerprint {
    version: i64,
    cloud_count: usize,
    cloud_hash: u64,
}

impl Fingerprint {
    fn of(version: i64, cloud: &[CloudInstance]) -> Self {
        use std::hash::BuildHasher;
        // A fixed seed: the same in every process.
        let hasher = foldhash::fast::FixedState::with_seed(0x5ca1e);
        let cloud_hash = cloud.iter().fold(0u64, |sum, c| {
            sum.wrapping_add(hasher.hash_one((c.cloud_instance_id.as_str(), c.state)))
        });
        Fingerprint {
            version,
            cloud_count: cloud.len(),
            cloud_hash,
        }
    }
}

/// The state of a process while it holds the lease.
struct Active {
    epoch: u64,
    storage: InMemoryStorage,
    table: KvTable,
    avail: Availability,
    saved_avail: AvailabilityState,
    /// Effects to run before the next iteration (replays after taking the lease).
    pending: Vec<Effect>,
    rejections: Vec<DrainRejection>,
    carried: Vec<ProviderError>,
    last: Option<Fingerprint>,
    last_run: Option<Instant>,
    report_version: i64,
    last_held_check: Option<Instant>,
    /// When the cluster's notices were last listed, and the keys read already.
    notice_scan: Option<Instant>,
    notices_seen: BTreeSet<String>,
    /// The explanation last stored, and when.
    why_saved: Option<(crate::explain::Explanation, Instant)>,
}

struct Loaded {
    config: ClusterConfig,
    chain: ExpanderChain,
    settings: ReconcilerSettings,
}

/// The live loop (see the module docs).
pub struct Driver<G: Gcs + 'static, C: Clock> {
    gcs: Arc<G>,
    provider: Arc<dyn CloudInstanceProvider>,
    clock: C,
    source: Box<dyn ConfigSource>,
    options: DriverOptions,
    cluster: String,
    config: Option<Loaded>,
    active: Option<Active>,
    ids: RandomIds,
    lease_rx: watch::Receiver<LeaseView>,
    lease_stop: watch::Sender<bool>,
    lease_task: Option<tokio::task::JoinHandle<()>>,
    said: BTreeMap<&'static str, BTreeSet<String>>,
    head_ready: head_ready::HeadReady,
    warned_other: bool,
    warned_v1: bool,
    observers: Vec<Arc<dyn Observer>>,
    head_stop: Option<Arc<dyn HeadStop>>,
}

impl<G: Gcs + 'static, C: Clock> Driver<G, C> {
    /// A driver of cluster `cluster`. Starts the lease task on the current tokio runtime.
    pub fn new(
        cluster: &str,
        gcs: Arc<G>,
        provider: Arc<dyn CloudInstanceProvider>,
        clock: C,
        source: Box<dyn ConfigSource>,
        options: DriverOptions,
    ) -> Self {
        let (tx, lease_rx) = watch::channel(LeaseView::default());
        let (lease_stop, stop_rx) = watch::channel(false);
        let lease = Lease::new(NAMESPACE, cluster, &options.holder, options.lease);
        let lease_task = tokio::spawn(lease::hold_lease(lease, gcs.clone(), tx, stop_rx));
        Driver {
            ids: RandomIds::new(options.id_seed),
            gcs,
            provider,
            clock,
            source,
            options,
            cluster: cluster.to_string(),
            config: None,
            active: None,
            lease_rx,
            lease_stop,
            lease_task: Some(lease_task),
            said: BTreeMap::new(),
            head_ready: head_ready::HeadReady::default(),
            warned_other: false,
            warned_v1: false,
            observers: Vec::new(),
            head_stop: None,
        }
    }

    /// How the head is stopped after autostop (with
    /// [`DriverOptions::end_on_autostop`]): see [`head_stop`].
    pub fn stop_head_with(mut self, stop: Arc<dyn HeadStop>) -> Self {
        self.head_stop = Some(stop);
        self
    }

    /// Adds an observer, told about every step and stored iteration.
    pub fn observe(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observers.push(observer);
        self
    }

    /// The lease as this process sees it.
    pub fn lease(&self) -> LeaseView {
        self.lease_rx.borrow().clone()
    }

    /// The instance table, as this process holds it (empty when it does not hold the
    /// lease).
    pub fn instances(&self) -> Vec<Instance> {
        self.active
            .as_ref()
            .map(|a| {
                // Loads come sorted by id.
                a.storage.load().map(|(_, all)| all).unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// Whether `what` is not being said under `topic` already.
    fn is_new(&self, topic: &'static str, what: &str) -> bool {
        !self.said.get(topic).is_some_and(|s| s.contains(what))
    }

    fn say(&mut self, topic: &'static str, now: BTreeSet<String>, say: impl Fn(&str)) {
        say_new(self.said.entry(topic).or_default(), now, say);
    }

    /// Steps until `shutdown` resolves, then gives up the lease (so a follower takes over
    /// at once). A step under way finishes first (its effects are bounded by their
    /// deadlines); its table was stored before any effect ran.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) -> RunEnd {
        tracing::info!("provider: {}", self.provider.provider_type());
        tokio::pin!(shutdown);
        let mut head = self
            .head_stop
            .clone()
            .filter(|_| self.options.end_on_autostop)
            .map(head_stop::HeadStops::new);
        let end = loop {
            let step = self.step().await;
            match &mut head {
                Some(h) => {
                    if let head_stop::HeadStep::End(r) =
                        h.after_step(step.reconciled, step.autostopped).await
                    {
                        break RunEnd::HeadStopped(r);
                    }
                }
                None if step.autostopped && self.options.end_on_autostop => {
                    tracing::info!("autostop: every worker is stopped; the head is next");
                    break RunEnd::Autostopped;
                }
                None => {}
            }
            tokio::select! {
                _ = &mut shutdown => break RunEnd::Shutdown,
                _ = tokio::time::sleep(self.options.watch) => {}
            }
        };
        self.stop().await;
        tracing::info!("loop stopped");
        end
    }

    /// Stops the lease task, releasing the lease.
    pub async fn stop(&mut self) {
        let _ = self.lease_stop.send(true);
        if let Some(t) = self.lease_task.take()
            && let Err(e) = t.await
        {
            tracing::warn!("the lease task ended badly: {e}");
        }
    }

    /// One step (see the module docs); its observers are told at its end.
    pub async fn step(&mut self) -> StepReport {
        let report = self.step_inner().await;
        if !self.observers.is_empty() {
            let lease = self.lease();
            let view = StepView {
                now_ns: self.clock.now_ns(),
                report: &report,
                lease: &lease,
            };
            for o in &self.observers {
                o.step(&view);
            }
        }
        report
    }

    async fn step_inner(&mut self) -> StepReport {
        let mut report = StepReport {
            config_refused: self.poll_config().await,
            ..StepReport::default()
        };
        if self.config.is_none() {
            report.aborted = Some("no usable config yet".into());
            return report;
        }
        let view = self.lease();
        let Some(epoch) = view.epoch.filter(|_| view.may_act()) else {
            if self.active.take().is_some() {
                tracing::warn!("no longer the active autoscaler: waiting for the lease");
            }
            let holder = view.holder.unwrap_or_else(|| "nobody yet".into());
            self.say("lease", BTreeSet::from([holder]), |h| {
                tracing::info!("waiting: the autoscaler lease is held by {h}")
            });
            report.aborted = Some("not holding the lease".into());
            return report;
        };
        self.said.remove("lease");
        if self.active.as_ref().is_none_or(|a| a.epoch != epoch) {
            match self.activate(epoch).await {
                Ok(a) => self.active = Some(a),
                Err(e) => {
                    tracing::warn!("cannot load the instance table yet: {e}");
                    report.aborted = Some(e.to_string());
                    report.failed = true;
                    return report;
                }
            }
        }
        match self.iterate(&mut report).await {
            Ok(()) => {
                if self.said.remove("aborted").is_some() {
                    tracing::info!("iterations go through again");
                }
            }
            Err(e) => {
                // Said once while the same failure lasts (an outage is one line, not one
                // a second).
                let gcs = matches!(e, CoreError::Gcs { .. });
                self.say("aborted", BTreeSet::from([e.to_string()]), |e| {
                    if gcs {
                        tracing::warn!("GCS unreachable, retrying: {e}")
                    } else {
                        tracing::warn!("iteration aborted: {e}")
                    }
                });
                report.aborted = Some(e.to_string());
                report.failed = true;
            }
        }
        report
    }

    /// Polls the config; true when a config was refused for a reason not said before (a
    /// broken file read every second counts once).
    async fn poll_config(&mut self) -> bool {
        // Every call the loop makes has a deadline (a RayCluster read that hangs costs one
        // deadline, and the last good config stays).
        let d = self.options.call_deadline;
        let polled = tokio::time::timeout(d, self.source.poll())
            .await
            .unwrap_or_else(|_| Err(format!("reading the config: no answer within {d:?}")));
        match polled {
            Ok(Some(r)) => {
                // The lease, the table and the provider belong to one cluster.
                if r.config.cluster_name != self.cluster {
                    let e = format!(
                        "cluster_name changed from {:?} to {:?}: restart rayscale to manage \
                         another cluster",
                        self.cluster, r.config.cluster_name
                    );
                    let new = self.is_new("config", &e);
                    self.say("config", BTreeSet::from([e]), |e| {
                        tracing::warn!("{e} (keeping the last good config)")
                    });
                    return new;
                }
                match tokio::time::timeout(d, self.provider.reconfigure(&r.config)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(
                            "the provider refused the new config, keeping the last: {e}"
                        );
                        return true;
                    }
                    Err(_) => {
                        tracing::warn!(
                            "the provider did not take the new config within {d:?}, keeping the last"
                        );
                        return true;
                    }
                }
                if self.config.is_some() {
                    tracing::info!("config reloaded");
                }
                if let Some(a) = &mut self.active {
                    a.avail
                        .unavailable
                        .set_ttl_s(r.config.unavailable_type_ttl_s);
                    // A new config is a reason to reconcile now.
                    a.last = None;
                }
                self.config = Some(Loaded {
                    settings: ReconcilerSettings {
                        install_ray: self.provider.installs_ray(),
                        ..ReconcilerSettings::from_config(&r.config)
                    },
                    config: r.config,
                    chain: r.chain,
                });
                self.said.remove("config");
                false
            }
            Ok(None) => false,
            Err(e) => {
                let keeping = if self.config.is_some() {
                    "keeping the last good config"
                } else {
                    "waiting for a usable config"
                };
                let new = self.is_new("config", &e);
                self.say("config", BTreeSet::from([e]), |e| {
                    tracing::warn!("{e} ({keeping})")
                });
                new
            }
        }
    }

    /// Loads the table and what is known of capacity, and lists what to replay.
    async fn activate(&mut self, epoch: u64) -> Result<Active, CoreError> {
        let mut table = KvTable::new(&self.cluster);
        let gcs = self.gcs.clone();
        let check_v2 = !self.warned_v1;
        // Three independent reads at once; the availability state (same table) after.
        let d = self.options.call_deadline;
        let (loaded, v2, held) = tokio::join!(
            lease::within(
                d,
                "loading the instance table",
                table.load(gcs.as_ref(), epoch)
            ),
            async {
                if check_v2 {
                    Some(lease::within(d, "InternalKVGet", gcs.autoscaler_v2_enabled()).await)
                } else {
                    None
                }
            },
            lease::within(d, "GetClusterStatus", gcs.held_report_version()),
        );
        let loaded = loaded?;
        for s in &loaded.skipped {
            tracing::warn!("instance record left out: {s}");
        }
        if loaded.found {
            tracing::info!(
                "loaded {} instance records (table version {}) from the GCS",
                loaded.instances.len(),
                loaded.version
            );
        }
        let storage = InMemoryStorage::with_instances(loaded.version, loaded.instances);
        let ttl = self
            .config
            .as_ref()
            .map_or(crate::availability::DEFAULT_UNAVAILABLE_TTL_S, |c| {
                c.config.unavailable_type_ttl_s
            });
        let mut avail = Availability::new(ttl, DEFAULT_RECOVERY_S);
        match lease::within(d, "InternalKVGet", table.load_availability(gcs.as_ref())).await {
            Ok(Some(state)) => avail.restore(state),
            Ok(None) => {}
            Err(e) => tracing::warn!("ignoring the stored availability state: {e}"),
        }
        if let Some(v2) = v2 {
            self.warned_v1 = true;
            match v2 {
                Ok(true) => {}
                Ok(false) => tracing::warn!("{V1_HEAD_HINT}"),
                Err(e) => tracing::warn!("cannot read whether autoscaler v2 is enabled: {e}"),
            }
        }
        let report_version = match held {
            Ok(v) => v.max(0),
            Err(e) => {
                tracing::warn!("cannot read the report version the GCS holds: {e}");
                0
            }
        };
        let pending = replay::replays(&storage, &mut self.ids);
        Ok(Active {
            epoch,
            saved_avail: avail.state(),
            storage,
            table,
            avail,
            pending,
            rejections: Vec::new(),
            carried: Vec::new(),
            last: None,
            last_run: None,
            report_version,
            last_held_check: Some(Instant::now()),
            notice_scan: None,
            notices_seen: BTreeSet::new(),
            why_saved: None,
        })
    }
}

#[cfg(test)]
mod tests;
