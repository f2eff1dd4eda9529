//! The Prometheus metrics: Ray 2.60's autoscaler families (`autoscaler/_private/
//! prom_metrics.py`: the same names, types, labels and buckets, so Ray's Grafana dashboards
//! read rayscale unchanged) and rayscale's own (`rayscale_*`).
//!
//! Ray's v2 autoscaler fills only some of its families (nodes and resources per type,
//! stopped nodes); rayscale fills every one that has a meaning for it, from what the loop
//! saw (see the `Observer` impl); the recovery families (`reset_exceptions`,
//! `recovering_nodes`, `*_recoveries`: v1's node recovery, which v2 does not have) stay at
//! zero.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use rayscale_core::driver::{IterationView, Observer, StepView};
use rayscale_core::instance::Instance;
use rayscale_core::model::InstanceStatus;
use rayscale_core::provider::ProviderOp;
use rayscale_core::reconciler::Effect;
use rayscale_core::telemetry::{node_counts, resource_totals};

/// A label set: (name, value) pairs in Ray's order.
type Labels = Vec<(&'static str, String)>;
type Gauges = Family<Labels, Gauge>;
type FloatGauges = Family<Labels, Gauge<f64, AtomicU64>>;
type Counters = Family<Labels, Counter>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// Each family's labels besides `SessionName`, which every family carries (as Ray's do).
/// The reference page lists them; a test checks the exposition against them.
#[cfg(test)]
const LABELS: &[(&str, &[&str])] = &[
    ("autoscaler_pending_nodes", &["NodeType"]),
    ("autoscaler_active_nodes", &["NodeType"]),
    ("autoscaler_recently_failed_nodes", &["NodeType"]),
    ("autoscaler_cluster_resources", &["resource"]),
    ("autoscaler_pending_resources", &["resource"]),
    ("rayscale_iteration_phase_seconds", &["phase"]),
    ("rayscale_effects", &["effect"]),
    ("rayscale_provider_errors", &["op", "kind"]),
    ("rayscale_expander_fallbacks", &["expander"]),
    ("rayscale_unavailable_node_types", &["NodeType"]),
    ("rayscale_lease_holder", &["holder"]),
    ("rayscale_preemption_notices", &["NodeType", "source"]),
    ("rayscale_pending_demand", &["reason"]),
    ("rayscale_nodes_kept", &["reason"]),
];

/// The labels of family `name` (as registered, without a `_total` or `_bucket` suffix).
#[cfg(test)]
fn labels_of(name: &str) -> Vec<&'static str> {
    let mut l: Vec<&'static str> = LABELS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[][..], |(_, l)| *l)
        .to_vec();
    l.push("SessionName");
    l
}

/// Ray's buckets of worker launch and update times (5 s to 30 min).
fn worker_buckets() -> Histogram {
    Histogram::new([
        5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0,
        720.0, 900.0, 1200.0, 1500.0, 1800.0,
    ])
}

/// Ray's buckets of the update loop's time (10 ms to 1000 s).
fn update_buckets() -> Histogram {
    Histogram::new([0.01, 0.1, 1.0, 10.0, 100.0, 1000.0])
}

/// rayscale's buckets of phase times (100 µs to about 100 s).
fn phase_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

/// Registers families, each created with the session's label where Ray creates it so.
struct Reg<'a> {
    r: &'a mut Registry,
    session: Labels,
    /// Each family as registered: (name, type, help), for the reference page (its test).
    #[cfg_attr(not(test), allow(dead_code))]
    families: Vec<(String, &'static str, String)>,
}

impl Reg<'_> {
    fn describe(&mut self, name: &str, kind: &'static str, help: &str) {
        self.families.push((name.into(), kind, help.into()));
    }
    fn gauges(&mut self, name: &str, help: &str) -> Gauges {
        self.describe(name, "gauge", help);
        let f = Gauges::default();
        self.r.register(name, help, f.clone());
        f
    }
    fn floats(&mut self, name: &str, help: &str) -> FloatGauges {
        self.describe(name, "gauge", help);
        let f = FloatGauges::default();
        self.r.register(name, help, f.clone());
        f
    }
    /// A family whose only series is the session's, present from the start (Ray's
    /// `.labels(SessionName=...)` at registration).
    fn session_gauge(&mut self, name: &str, help: &str) -> Gauges {
        let f = self.gauges(name, help);
        drop(f.get_or_create(&self.session));
        f
    }
    fn counter(&mut self, name: &str, help: &str) -> Counters {
        let f = self.counters(name, help);
        drop(f.get_or_create(&self.session));
        f
    }
    fn counters(&mut self, name: &str, help: &str) -> Counters {
        self.describe(name, "counter", help);
        let f = Counters::default();
        self.r.register(name, help, f.clone());
        f
    }
    fn histograms(&mut self, name: &str, help: &str, b: fn() -> Histogram) -> Histograms {
        self.describe(name, "histogram", help);
        let f = Histograms::new_with_constructor(b);
        self.r.register(name, help, f.clone());
        f
    }
    fn histogram(&mut self, name: &str, help: &str, b: fn() -> Histogram) -> Histograms {
        let f = self.histograms(name, help, b);
        drop(f.get_or_create(&self.session));
        f
    }
}

/// What is remembered between iterations (label sets to remove, counters' last values).
#[derive(Default)]
struct Seen {
    /// History entries at or before this time were counted already.
    history_ns: i64,
    node_types: BTreeSet<String>,
    cluster_resources: BTreeSet<String>,
    pending_resources: BTreeSet<String>,
    unavailable: BTreeSet<String>,
    holder: Option<String>,
    /// The chain's choice count and fall-backs per expander, as last seen.
    rounds: u64,
    fallbacks: Vec<(String, u64)>,
}

/// The metrics of one autoscaler process.
pub struct Metrics {
    registry: Registry,
    /// Each family as registered: (name, type, help).
    #[cfg(test)]
    families: Vec<(String, &'static str, String)>,
    session: String,
    pending_nodes: Gauges,
    active_nodes: Gauges,
    recently_failed_nodes: Gauges,
    cluster_resources: FloatGauges,
    pending_resources: FloatGauges,
    started_nodes: Counters,
    stopped_nodes: Counters,
    failed_create_nodes: Counters,
    update_loop_exceptions: Counters,
    node_launch_exceptions: Counters,
    drain_node_exceptions: Counters,
    config_validation_exceptions: Counters,
    successful_updates: Counters,
    failed_updates: Counters,
    updating_nodes: Gauges,
    running_workers: Gauges,
    update_time: Histograms,
    worker_create_node_time: Histograms,
    worker_update_time: Histograms,
    // rayscale's own.
    preemption: super::preemption::PreemptionMetrics,
    why: super::why::WhyMetrics,
    phase_seconds: Histograms,
    effects: Counters,
    provider_errors: Counters,
    unreadable_rows: Gauges,
    expander_choices: Counters,
    expander_fallbacks: Counters,
    gang_releases: Counters,
    unavailable_types: Gauges,
    lease_held: Gauges,
    lease_holder: Gauges,
    last_iteration: FloatGauges,
    seen: Mutex<Seen>,
}

impl Metrics {
    /// The metrics of a process of session `session` (Ray's `SessionName` label),
    /// counting instance history from `now_ns` on.
    pub fn new(session: &str, now_ns: i64) -> Self {
        let mut registry = Registry::default();
        let mut r = Reg {
            r: &mut registry,
            session: vec![("SessionName", session.to_string())],
            families: Vec::new(),
        };
        let wb = worker_buckets as fn() -> Histogram;
        let worker_create_node_time = r.histogram(
            "autoscaler_worker_create_node_time_seconds",
            "Time from an instance's launch request to the cloud having it, per instance.",
            wb,
        );
        let worker_update_time = r.histogram(
            "autoscaler_worker_update_time_seconds",
            "Time of a successful Ray install (from RAY_INSTALLING to Ray running).",
            wb,
        );
        let update_time = r.histogram(
            "autoscaler_update_time_seconds",
            "Time of one reconciling iteration of the autoscaler.",
            update_buckets,
        );
        let pending_nodes = r.gauges(
            "autoscaler_pending_nodes",
            "Nodes on their way up (queued, requested, allocated, installing Ray).",
        );
        let active_nodes = r.gauges("autoscaler_active_nodes", "Nodes running Ray.");
        let recently_failed_nodes = r.gauges(
            "autoscaler_recently_failed_nodes",
            "Nodes being terminated.",
        );
        let started_nodes = r.counter("autoscaler_started_nodes", "Nodes the cloud started.");
        let stopped_nodes = r.counter(
            "autoscaler_stopped_nodes",
            "Nodes the autoscaler asked the cloud to terminate.",
        );
        let updating_nodes = r.session_gauge(
            "autoscaler_updating_nodes",
            "Nodes Ray is being installed on.",
        );
        r.session_gauge(
            "autoscaler_recovering_nodes",
            "Nodes being recovered (v1 only: always 0).",
        );
        // Ray's name: prometheus_client appends the unit ("nodes") to "running_workers".
        let running_workers = r.session_gauge(
            "autoscaler_running_workers_nodes",
            "Worker nodes running Ray.",
        );
        let failed_create_nodes = r.counter(
            "autoscaler_failed_create_nodes",
            "Instances whose launch failed.",
        );
        let failed_updates = r.counter("autoscaler_failed_updates", "Ray installs that failed.");
        let successful_updates = r.counter(
            "autoscaler_successful_updates",
            "Ray installs that succeeded.",
        );
        r.counter(
            "autoscaler_failed_recoveries",
            "Failed node recoveries (v1 only: always 0).",
        );
        r.counter(
            "autoscaler_successful_recoveries",
            "Successful node recoveries (v1 only: always 0).",
        );
        let update_loop_exceptions = r.counter(
            "autoscaler_update_loop_exceptions",
            "Iterations that failed (GCS, cloud or table errors).",
        );
        let node_launch_exceptions = r.counter(
            "autoscaler_node_launch_exceptions",
            "Launch requests that failed, wholly or in part.",
        );
        r.counter(
            "autoscaler_reset_exceptions",
            "Errors resetting the autoscaler (v1 only: always 0).",
        );
        let config_validation_exceptions = r.counter(
            "autoscaler_config_validation_exceptions",
            "Config reloads refused as invalid.",
        );
        let drain_node_exceptions = r.counter(
            "autoscaler_drain_node_exceptions",
            "Drains of a node the GCS refused or that failed.",
        );
        let cluster_resources = r.floats(
            "autoscaler_cluster_resources",
            "Logical resources of the nodes running Ray.",
        );
        let pending_resources = r.floats(
            "autoscaler_pending_resources",
            "Logical resources of the nodes on their way up.",
        );
        let phase_seconds = r.histograms(
            "rayscale_iteration_phase_seconds",
            "Time of each phase of a reconciling iteration (gather, reconcile: the scheduler \
             and the instance manager, save, effects).",
            phase_buckets,
        );
        let effects = r.counters(
            "rayscale_effects",
            "Side effects run, by kind (launch, drain, install_ray, terminate).",
        );
        let provider_errors = r.counters(
            "rayscale_provider_errors",
            "Errors of provider calls, by call and kind.",
        );
        let unreadable_rows = r.session_gauge(
            "rayscale_gcs_unreadable_node_rows",
            "Ray nodes whose row of the GCS's cluster state could not be read in the last \
             iteration (their instances are kept as they were).",
        );
        let expander_choices = r.counter(
            "rayscale_expander_choices",
            "Choices of a node type the expander chain made.",
        );
        let expander_fallbacks = r.counters(
            "rayscale_expander_fallbacks",
            "Choices an expander passed on to the next in the chain, by expander.",
        );
        let gang_releases = r.counter(
            "rayscale_gang_releases",
            "Atomic gangs (rayscale.gangs: atomic) that did not come up whole and were released.",
        );
        let unavailable_types = r.gauges(
            "rayscale_unavailable_node_types",
            "Node types set aside after capacity errors (1 while set aside).",
        );
        let lease_held = r.session_gauge(
            "rayscale_lease_held",
            "1 while this process holds the cluster's autoscaler lease.",
        );
        let lease_holder = r.gauges(
            "rayscale_lease_holder",
            "The process holding the lease as this one sees it (value 1, holder label).",
        );
        let last_iteration = r.floats(
            "rayscale_last_iteration_timestamp_seconds",
            "Wall-clock time of the last stored iteration.",
        );
        let preemption = super::preemption::PreemptionMetrics::new(
            r.counters(
                "rayscale_preemption_notices",
                "Nodes Ray drained without rayscale asking, by node type and notice source.",
            ),
            r.histograms(
                "rayscale_preemption_replacement_seconds",
                "From a preemption notice seen to its replacement running.",
                super::preemption::replacement_buckets,
            ),
            session,
        );
        let why = super::why::WhyMetrics::new(
            r.gauges(
                "rayscale_pending_demand",
                "Pending demand requests by reason.",
            ),
            r.gauges(
                "rayscale_nodes_kept",
                "Worker nodes by why they are kept or go.",
            ),
            session,
        );
        #[cfg(test)]
        let families = r.families;
        Metrics {
            #[cfg(test)]
            families,
            preemption,
            why,
            registry,
            session: session.to_string(),
            pending_nodes,
            active_nodes,
            recently_failed_nodes,
            cluster_resources,
            pending_resources,
            started_nodes,
            stopped_nodes,
            failed_create_nodes,
            update_loop_exceptions,
            node_launch_exceptions,
            drain_node_exceptions,
            config_validation_exceptions,
            successful_updates,
            failed_updates,
            updating_nodes,
            running_workers,
            update_time,
            worker_create_node_time,
            worker_update_time,
            phase_seconds,
            effects,
            provider_errors,
            unreadable_rows,
            expander_choices,
            expander_fallbacks,
            gang_releases,
            unavailable_types,
            lease_held,
            lease_holder,
            last_iteration,
            seen: Mutex::new(Seen {
                history_ns: now_ns,
                ..Default::default()
            }),
        }
    }

    /// The exposition (OpenMetrics text).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("cannot encode the metrics: {e}");
        }
        out
    }

    /// The reference page of every family (`docs/src/reference/metrics.md`): its name as
    /// scraped, type, labels and help, as registered.
    #[cfg(test)]
    pub fn reference_markdown(&self) -> String {
        let mut out = String::from(
            "# Metrics\n\n<!-- Generated from the metric registry (bin/src/ops/metrics.rs) by \
             `RAYSCALE_BLESS=1 cargo test -p rayscale --bin rayscale metrics_reference`; \
             a test fails when it drifts. -->\n\n\
             Served at `/metrics` on `--metrics-port` (8080 by default; see \
             [Monitoring](../guides/monitoring.md)). The `autoscaler_*` families are Ray \
             2.60's (`autoscaler/_private/prom_metrics.py`: same names, types, labels and \
             buckets, so Ray's Grafana dashboards read rayscale unchanged); the `rayscale_*` \
             families are rayscale's own. Every family carries `SessionName`, the Ray \
             session's name. A counter is scraped with `_total`, a histogram as \
             `_bucket`, `_sum` and `_count`.\n\n\
             | Family | Type | Labels | What it counts |\n|---|---|---|---|\n",
        );
        for (name, kind, what) in &self.families {
            let shown = match *kind {
                "counter" => format!("{name}_total"),
                _ => name.clone(),
            };
            let labels = labels_of(name)
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ");
            out.push_str(&format!(
                "| `{shown}` | {kind} | {labels} | {} |\n",
                what.replace('|', "\\|")
            ));
        }
        out
    }

    fn session(&self) -> Labels {
        vec![("SessionName", self.session.clone())]
    }

    fn by(&self, name: &'static str, value: &str) -> Labels {
        self.with(&[(name, value)])
    }

    /// `pairs`, then the session (every family carries it, as Ray's do).
    fn with(&self, pairs: &[(&'static str, &str)]) -> Labels {
        let mut l: Labels = pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
        l.push(("SessionName", self.session.clone()));
        l
    }

    /// Removes the series of the keys of `before` that `now` lacks.
    fn drop_gone<M, C: prometheus_client::metrics::family::MetricConstructor<M>>(
        family: &Family<Labels, M, C>,
        before: &BTreeSet<String>,
        now: &BTreeSet<String>,
        labels: impl Fn(&str) -> Labels,
    ) {
        for gone in before.difference(now) {
            family.remove(&labels(gone));
        }
    }

    /// Counts what instances' histories show happened since the last iteration.
    fn history(&self, instances: &[&Instance], since_ns: i64, now_ns: i64) {
        let s = self.session();
        let secs = |a: i64, b: i64| (b.saturating_sub(a)) as f64 / 1e9;
        for i in instances {
            let h = &i.status_history;
            let mut requested: Option<i64> = None;
            let mut installing: Option<i64> = None;
            for c in h {
                let new = c.timestamp_ns > since_ns && c.timestamp_ns <= now_ns;
                match c.status {
                    InstanceStatus::Requested => requested = Some(c.timestamp_ns),
                    InstanceStatus::RayInstalling => installing = Some(c.timestamp_ns),
                    // Started by the cloud: a launch request's instance (a record made
                    // for a raylet restarted on a live instance has no request).
                    InstanceStatus::Allocated => {
                        if let Some(t) = requested.take()
                            && new
                            && !i.is_head
                        {
                            self.started_nodes.get_or_create(&s).inc();
                            self.worker_create_node_time
                                .get_or_create(&s)
                                .observe(secs(t, c.timestamp_ns));
                        }
                    }
                    // An install ends here (a later return to RAY_RUNNING, after a refused
                    // drain, is not another).
                    InstanceStatus::RayRunning => {
                        if let Some(t) = installing.take()
                            && new
                        {
                            self.successful_updates.get_or_create(&s).inc();
                            self.worker_update_time
                                .get_or_create(&s)
                                .observe(secs(t, c.timestamp_ns));
                        }
                    }
                    InstanceStatus::RayInstallFailed if new => {
                        self.failed_updates.get_or_create(&s).inc();
                    }
                    // Ray's `stopped_nodes`: instances the cloud terminated.
                    InstanceStatus::Terminated if new && i.cloud_instance_id.is_some() => {
                        self.stopped_nodes.get_or_create(&s).inc();
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Observer for Metrics {
    fn iteration(&self, v: &IterationView<'_>) {
        let mut seen = super::lock(&self.seen);
        let s = self.session();
        // Nodes and resources per type, as Ray's metrics reporter counts them.
        let counts = node_counts(v.config, &v.instances, v.ray);
        for (t, c) in &counts {
            let l = self.by("NodeType", t);
            self.pending_nodes.get_or_create(&l).set(c.pending as i64);
            self.active_nodes.get_or_create(&l).set(c.running as i64);
            self.recently_failed_nodes
                .get_or_create(&l)
                .set(c.terminating as i64);
        }
        let types: BTreeSet<String> = counts.keys().cloned().collect();
        for f in [
            &self.pending_nodes,
            &self.active_nodes,
            &self.recently_failed_nodes,
        ] {
            Self::drop_gone(f, &seen.node_types, &types, |t| self.by("NodeType", t));
        }
        seen.node_types = types;
        let totals = resource_totals(v.config, &v.instances, v.ray);
        for (k, x) in &totals.cluster {
            self.cluster_resources
                .get_or_create(&self.by("resource", k))
                .set(*x);
        }
        for (k, x) in &totals.pending {
            self.pending_resources
                .get_or_create(&self.by("resource", k))
                .set(*x);
        }
        // A resource no longer running or pending reads 0 (Ray's reporter leaves its last
        // value; a dashboard's sum would show capacity long gone).
        let resource = |k: &str| self.by("resource", k);
        let sn = &mut *seen;
        for (family, known, now) in [
            (
                &self.cluster_resources,
                &mut sn.cluster_resources,
                &totals.cluster,
            ),
            (
                &self.pending_resources,
                &mut sn.pending_resources,
                &totals.pending,
            ),
        ] {
            for gone in known.iter().filter(|k| !now.contains_key(*k)) {
                family.get_or_create(&resource(gone)).set(0.0);
            }
            known.extend(now.keys().cloned());
        }
        let installing = v
            .instances
            .iter()
            .filter(|i| i.status == InstanceStatus::RayInstalling)
            .count();
        self.updating_nodes.get_or_create(&s).set(installing as i64);
        let workers = v
            .instances
            .iter()
            .filter(|i| !i.is_head && rayscale_core::telemetry::is_ray_running(i.status))
            .count();
        self.running_workers.get_or_create(&s).set(workers as i64);

        // What happened since the last iteration (after the table was loaded, only what
        // this iteration did: another process counted the rest).
        let since = if v.first_after_load {
            v.now_ns - 1
        } else {
            seen.history_ns
        };
        self.history(&v.instances, since, v.now_ns);
        seen.history_ns = seen.history_ns.max(v.now_ns);
        for e in v.provider_errors {
            let op = match &e.op {
                ProviderOp::Launch { count, .. } => {
                    self.node_launch_exceptions.get_or_create(&s).inc();
                    self.failed_create_nodes.get_or_create(&s).inc_by(*count);
                    "launch"
                }
                ProviderOp::Instance { .. } => "instance",
                ProviderOp::InstallRay { .. } => "install_ray",
                ProviderOp::Terminate { .. } => "terminate",
                ProviderOp::List => "list",
                ProviderOp::Other => "other",
            };
            self.provider_errors
                .get_or_create(&self.with(&[("op", op), ("kind", e.kind.name())]))
                .inc();
        }
        self.drain_node_exceptions
            .get_or_create(&s)
            .inc_by(v.drain_rejections.len() as u64);
        self.unreadable_rows
            .get_or_create(&s)
            .set(i64::try_from(v.ray.unreadable_nodes.len()).unwrap_or(i64::MAX));
        for e in &v.outcome.effects {
            let kind = match e {
                Effect::Launch(_) => "launch",
                Effect::Drain { .. } => "drain",
                Effect::InstallRay { .. } => "install_ray",
                Effect::Terminate { .. } => "terminate",
            };
            self.effects.get_or_create(&self.by("effect", kind)).inc();
        }

        // The expander chain: its counts are since it was built (a config reload
        // rebuilds it), so a drop means a new chain.
        let rounds = v.chain.rounds();
        let delta = if rounds >= seen.rounds {
            rounds - seen.rounds
        } else {
            rounds
        };
        self.expander_choices.get_or_create(&s).inc_by(delta);
        seen.rounds = rounds;
        let now: Vec<(String, u64)> = v.chain.fallbacks().to_vec();
        for (name, n) in &now {
            let before = seen
                .fallbacks
                .iter()
                .find(|(b, _)| b == name)
                .map_or(0, |(_, b)| *b);
            let d = if *n >= before { n - before } else { *n };
            self.expander_fallbacks
                .get_or_create(&self.by("expander", name))
                .inc_by(d);
        }
        seen.fallbacks = now;
        self.gang_releases
            .get_or_create(&s)
            .inc_by(v.outcome.gang_lines.len() as u64);

        self.preemption.iteration(v);
        self.why.iteration(v);
        // Whole types (a zone set aside is not the type).
        let unavailable: BTreeSet<String> = v
            .outcome
            .report
            .unavailable_types
            .iter()
            .filter(|u| u.zone.is_none())
            .map(|u| u.node_type.clone())
            .collect();
        for t in &unavailable {
            self.unavailable_types
                .get_or_create(&self.by("NodeType", t))
                .set(1);
        }
        Self::drop_gone(
            &self.unavailable_types,
            &seen.unavailable,
            &unavailable,
            |t| self.by("NodeType", t),
        );
        seen.unavailable = unavailable;
        self.last_iteration
            .get_or_create(&s)
            .set(v.now_ns as f64 / 1e9);
    }

    fn step(&self, v: &StepView<'_>) {
        let s = self.session();
        let r = v.report;
        if r.failed {
            self.update_loop_exceptions.get_or_create(&s).inc();
        }
        if r.config_refused {
            self.config_validation_exceptions.get_or_create(&s).inc();
        }
        if r.reconciled {
            let p = r.phases;
            let total = p.gather + p.reconcile + p.save + p.effects;
            self.update_time
                .get_or_create(&s)
                .observe(total.as_secs_f64());
            for (phase, d) in [
                ("gather", p.gather),
                ("reconcile", p.reconcile),
                ("save", p.save),
                ("effects", p.effects),
            ] {
                self.phase_seconds
                    .get_or_create(&self.by("phase", phase))
                    .observe(d.as_secs_f64());
            }
        }
        self.lease_held
            .get_or_create(&s)
            .set(i64::from(v.lease.may_act()));
        let mut seen = super::lock(&self.seen);
        if seen.holder != v.lease.holder {
            if let Some(old) = seen.holder.take() {
                self.lease_holder.remove(&self.by("holder", &old));
            }
            if let Some(new) = &v.lease.holder {
                self.lease_holder
                    .get_or_create(&self.by("holder", new))
                    .set(1);
            }
            seen.holder = v.lease.holder.clone();
        }
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
pub(crate) mod tests;
