//! The seeded simulation of the whole loop (after FoundationDB's simulation testing and
//! TigerBeetle's VOPR): the driver (lease, table, reconciler, effects) over [`FakeGcs`]
//! and [`FakeProvider`] in paused virtual time, under a random workload and random
//! faults, every optional knob drawn on or off, with invariants checked after every
//! simulated second. A seed decides everything: the knobs, and a schedule of actions
//! (demand changes, placement groups, `request_resources`, busy and idle nodes, cloud errors of every kind, lost capacity, a
//! slow or lying GCS, unreadable rows, lost instances, kill -9 and restart of rayscale, a
//! second rayscale on a host whose clock is off by up to 30 s, a lost lease). The last part of every run is quiet (no fault): the
//! cluster must then settle and, with no demand, return to zero workers.
//!
//! Invariants, after every step:
//! - never more workers than `max_workers` in the cloud, nor of a type than its own;
//! - with a cost cap, never more than it costs per hour;
//! - no cloud worker that no record of the stored table knows for more than
//!   [`UNKNOWN_GRACE_S`] (a leak), and no two live records of one cloud instance;
//! - no busy node stopped (only Ray's rejectable idle drain may end a node with work
//!   here: the config never changes, so no forced stop is due);
//! - liveness: once quiet, every record settles (none in flight or stopping, in one status, for
//!   [`SETTLE_S`], a REQUESTED one for [`SETTLE_REQUESTED_S`]) and, with no demand, the workers go (but the terminations rayscale
//!   gave up, which it lists).
//!
//! - with every knob off, the reconciler's decision is the scheduler's, unchanged (an
//!   assertion in the reconciler's step, on in every test build).
//!
//! A failing seed panics with a one-line reproduction and its schedule shrunk (actions
//! dropped while it still fails). `RAYSCALE_SIM_SEED=S` runs one seed,
//! `RAYSCALE_SIM_SEEDS=N` N seeds from `RAYSCALE_SIM_FIRST` (default 1; CI runs
//! [`CI_SEEDS`]).

use super::*;
use crate::driver::lease::MAX_EPOCH;
use crate::provider::ProviderErrorKind;

/// Seeds a plain `cargo test` runs.
const CI_SEEDS: u64 = 24;
/// Simulated seconds with faults, then quiet ones.
const FAULTY_S: u32 = 900;
const QUIET_S: u32 = 900;
/// How long a cloud worker may be unknown to the stored table (a launch's answer and the
/// table's save take an iteration or two; a slow GCS more).
const UNKNOWN_GRACE_S: u32 = 120;
/// How long a record may stay in flight once the run is quiet.
const SETTLE_S: u32 = 300;
/// ... but a REQUESTED one, whose cloud instance may have gone before any list showed
/// it: it is requeued after the request timeout (600 s, as Ray's
/// `request_status_timeout_s`), then settles.
const SETTLE_REQUESTED_S: u32 = 600 + 60;

const BASE: &str = r#"
cluster_name: t
max_workers: 6
idle_timeout_minutes: 1
upscaling_speed: 100
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  w: {resources: {CPU: 2}, max_workers: 4, node_config: {}}
  big: {resources: {CPU: 8}, max_workers: 2, node_config: {}}
"#;

/// splitmix64: small, seedable, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// One scheduled action; a worker is picked by index into the cloud's workers then.
#[derive(Debug, Clone)]
enum Act {
    Demand {
        cpu2: u64,
        cpu8: u64,
    },
    Busy {
        pick: u64,
        busy: bool,
    },
    FailLaunch(ProviderErrorKind),
    FailTerminate(ProviderErrorKind),
    FailList,
    Capacity {
        node_type: &'static str,
        left: Option<u64>,
    },
    Latency {
        ms: u64,
    },
    LoseReplies(u32),
    Unreadable {
        pick: u64,
        on: bool,
    },
    Lost {
        pick: u64,
    },
    RefuseDrains {
        pick: u64,
    },
    /// A placement group pending (`n` bundles, packed on one node or spread over `n`),
    /// or none (`n` = 0).
    Gang {
        id: u32,
        n: u64,
        pack: bool,
    },
    /// `request_resources` of `cpu2` bundles of 2 CPUs (0: withdrawn).
    Constraint {
        cpu2: u64,
    },
    Kill,
    /// A rayscale starts on a host whose clock is `skew_s` off.
    Start {
        skew_s: i64,
    },
    Cut {
        on: bool,
    },
}

/// The knobs a seed drew, as the `rayscale:` block's entries.
fn knobs(rng: &mut Rng) -> (String, Option<f64>) {
    let mut parts = Vec::new();
    let mut cap = None;
    if rng.chance(400) {
        parts.push("gangs: {mode: atomic, timeout_s: 300}".to_string());
    }
    if rng.chance(400) {
        // w 1.0, big 3.0 an hour: 6 w and 2 big cost 12; the cap cuts that.
        let c = [5.0, 7.5, 9.0][rng.below(3) as usize];
        cap = Some(c);
        parts.push(format!(
            "max_hourly_cost: {c}, expander: {{prices: {{head: 0.0, w: 1.0, big: 3.0}}}}"
        ));
    }
    if rng.chance(300) {
        parts.push("disruption_budget: {max_draining: 1}".to_string());
    }
    if rng.chance(300) {
        parts.push("min_node_lifetime_s: 120".to_string());
    }
    if rng.chance(300) {
        parts.push(
            "consolidation: {node_types: [big], utilization_below: 0.5, after_s: 120, \
             drain_deadline_s: 60}"
                .to_string(),
        );
    }
    if rng.chance(300) {
        parts.push("preemption: {enabled: true}".to_string());
    }
    if parts.is_empty() {
        return (String::new(), cap);
    }
    (format!("rayscale: {{{}}}\n", parts.join(", ")), cap)
}

fn kind(rng: &mut Rng, for_terminate: bool) -> ProviderErrorKind {
    let kinds: &[ProviderErrorKind] = if for_terminate {
        &[
            ProviderErrorKind::Throttled,
            ProviderErrorKind::Auth,
            ProviderErrorKind::Transient,
            ProviderErrorKind::Quota,
        ]
    } else {
        &[
            ProviderErrorKind::Throttled,
            ProviderErrorKind::Auth,
            ProviderErrorKind::Transient,
            ProviderErrorKind::Quota,
            ProviderErrorKind::InvalidConfig,
        ]
    };
    kinds[rng.below(kinds.len() as u64) as usize].clone()
}

/// The seed's config text, cost cap and schedule (second, action).
fn plan(seed: u64) -> (String, Option<f64>, Vec<(u32, Act)>) {
    let mut rng = Rng(seed);
    let (block, cap) = knobs(&mut rng);
    let mut acts = Vec::new();
    for t in 0..FAULTY_S {
        let mut at = |a: Act| acts.push((t, a));
        if rng.chance(30) {
            at(Act::Demand {
                cpu2: rng.below(10),
                cpu8: rng.below(3),
            });
        }
        if rng.chance(40) {
            at(Act::Busy {
                pick: rng.next(),
                busy: rng.chance(500),
            });
        }
        if rng.chance(15) {
            at(Act::FailLaunch(kind(&mut rng, false)));
        }
        if rng.chance(15) {
            at(Act::FailTerminate(kind(&mut rng, true)));
        }
        if rng.chance(5) {
            at(Act::FailList);
        }
        if rng.chance(8) {
            let node_type = if rng.chance(500) { "w" } else { "big" };
            let left = rng.chance(600).then(|| rng.below(3));
            at(Act::Capacity { node_type, left });
        }
        if rng.chance(6) {
            at(Act::Latency {
                ms: [0, 200, 1_500, 4_000][rng.below(4) as usize],
            });
        }
        if rng.chance(6) {
            at(Act::LoseReplies(1 + rng.below(3) as u32));
        }
        if rng.chance(6) {
            at(Act::Unreadable {
                pick: rng.next(),
                on: rng.chance(500),
            });
        }
        if rng.chance(4) {
            at(Act::Lost { pick: rng.next() });
        }
        if rng.chance(4) {
            at(Act::RefuseDrains { pick: rng.next() });
        }
        if rng.chance(6) {
            let n = rng.below(4);
            at(Act::Gang {
                id: rng.below(1 << 16) as u32,
                pack: n <= 2 && rng.chance(400),
                n,
            });
        }
        if rng.chance(4) {
            at(Act::Constraint { cpu2: rng.below(6) });
        }
        if rng.chance(3) {
            at(Act::Kill);
        }
        if rng.chance(6) {
            // NTP keeps hosts within a second; a bad one is off by tens.
            let skew_s = if rng.chance(800) {
                rng.below(3) as i64 - 1
            } else {
                rng.below(61) as i64 - 30
            };
            at(Act::Start { skew_s });
        }
        if rng.chance(3) {
            at(Act::Cut {
                on: rng.chance(500),
            });
        }
    }
    // Quiet: what the run ends on.
    let cpu2 = rng.below(8);
    acts.push((FAULTY_S, Act::Demand { cpu2, cpu8: 0 }));
    (format!("{BASE}{block}"), cap, acts)
}

/// Placement group `id` of `n` bundles: 4 CPUs each on one node (STRICT_PACK), or 2
/// CPUs each on `n` nodes (STRICT_SPREAD), as the GCS reports a pending one.
fn gang(id: u32, n: u64, pack: bool) -> crate::model::GangRequest {
    use crate::model::{PlacementConstraint, ResourceRequest};
    let pg = format!("pg{id:04x}");
    let label_name = format!("_PG_{pg}");
    let (cpu, constraint, strategy) = if pack {
        (
            4.0,
            PlacementConstraint::Affinity {
                label_name,
                label_value: String::new(),
            },
            "STRICT_PACK",
        )
    } else {
        (
            2.0,
            PlacementConstraint::AntiAffinity {
                label_name,
                label_value: String::new(),
            },
            "STRICT_SPREAD",
        )
    };
    crate::model::GangRequest {
        requests: (0..n)
            .map(|_| ResourceRequest {
                resources: demand(&[("CPU", cpu)], 1).request.resources,
                placement_constraints: vec![constraint.clone()],
                ..Default::default()
            })
            .collect(),
        details: format!("{pg}:{strategy}|PENDING"),
        ..Default::default()
    }
}

/// What went wrong, and when.
#[derive(Debug, Clone, PartialEq)]
struct Violation {
    at_s: u32,
    what: String,
}

/// The invariant's name: shrinking keeps a schedule that breaks the same one.
fn kind_of(v: &Violation) -> &str {
    v.what.split(':').next().unwrap_or("")
}

struct Proc {
    conn: FakeGcs,
    /// Its connection is cut off (it cannot act).
    cut: std::sync::atomic::AtomicBool,
    task: tokio::task::JoinHandle<RunEnd>,
}

fn pick(list: &[CloudInstance], k: u64) -> Option<String> {
    (!list.is_empty()).then(|| {
        list[(k % list.len() as u64) as usize]
            .cloud_instance_id
            .clone()
    })
}

/// Runs `acts` (the ones `keep` says) on the seed's config; the first violation.
fn run(config: &str, cap: Option<f64>, acts: &[(u32, Act)], keep: &[bool]) -> Option<Violation> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(run_in(config, cap, acts, keep))
}

async fn run_in(
    config: &str,
    cap: Option<f64>,
    acts: &[(u32, Act)],
    keep: &[bool],
) -> Option<Violation> {
    let w = World::new();
    w.text.set(config);
    let parsed = ClusterConfig::from_yaml_str(config, "sim.yaml").expect("the sim's config");
    let _pump = w.pump();
    let mut started = 0u32;
    let mut procs: Vec<Proc> = Vec::new();
    let start = |procs: &mut Vec<Proc>, started: &mut u32, skew_s: i64| {
        *started += 1;
        let conn = w.gcs.connect();
        let task = tokio::spawn(
            w.driver_skewed(
                &format!("p{started}"),
                conn.clone(),
                0x5eed_0000 + u64::from(*started),
                skew_s * 1_000_000_000,
            )
            .run(std::future::pending()),
        );
        procs.push(Proc {
            conn,
            cut: std::sync::atomic::AtomicBool::new(false),
            task,
        });
    };
    start(&mut procs, &mut started, 0);
    let mut unknown_since: BTreeMap<String, u32> = BTreeMap::new();
    let mut in_flight_since: BTreeMap<(String, &str), u32> = BTreeMap::new();
    let mut unreadable: BTreeSet<String> = BTreeSet::new();
    let mut busy: BTreeSet<String> = BTreeSet::new();
    let mut demand_at = 0u32;
    let mut next = 0usize;
    let end = FAULTY_S + QUIET_S;
    // `RAYSCALE_SIM_SAFETY_ONLY` leaves out the liveness checks (settling, back to zero),
    // to look at a safety finding alone.
    let liveness = std::env::var_os("RAYSCALE_SIM_SAFETY_ONLY").is_none();
    let price = |t: &str| match t {
        "w" => 1.0,
        "big" => 3.0,
        _ => 0.0,
    };
    for t in 0..end {
        if t == FAULTY_S {
            // Quiet from here: every fault cleared, one process at least.
            for p in &procs {
                p.conn.set_latency(Duration::ZERO);
                p.conn.set_cut(false);
                p.cut.store(false, std::sync::atomic::Ordering::SeqCst);
            }
            w.cloud.set_capacity("w", None, None);
            w.cloud.set_capacity("big", None, None);
            for id in std::mem::take(&mut unreadable) {
                w.gcs.set_unreadable(&id, None);
            }
            for id in std::mem::take(&mut busy) {
                w.gcs.set_busy(&id, false);
            }
            w.gcs.accept_drains();
            w.cloud.clear_faults();
            procs.retain(|p| !p.task.is_finished());
            if procs.is_empty() {
                start(&mut procs, &mut started, 0);
            }
        }
        if t == FAULTY_S + QUIET_S / 2 {
            w.gcs.set_demand(vec![]);
            w.gcs.set_gangs(vec![]);
            w.gcs.set_constraints(vec![]);
            demand_at = t;
        }
        let workers = w.workers();
        while next < acts.len() && acts[next].0 <= t {
            let (_, act) = &acts[next];
            let on = keep[next];
            next += 1;
            if !on {
                continue;
            }
            match act {
                Act::Demand { cpu2, cpu8 } => {
                    let mut d = Vec::new();
                    if *cpu2 > 0 {
                        d.push(demand(&[("CPU", 2.0)], *cpu2));
                    }
                    if *cpu8 > 0 {
                        d.push(demand(&[("CPU", 8.0)], *cpu8));
                    }
                    w.gcs.set_demand(d);
                    demand_at = t;
                }
                Act::Busy { pick: k, busy: b } => {
                    if let Some(id) = pick(&workers, *k) {
                        w.gcs.set_busy(&id, *b);
                        if *b {
                            busy.insert(id);
                        } else {
                            busy.remove(&id);
                        }
                    }
                }
                Act::FailLaunch(k) => w.cloud.fail_next(FaultOn::Launch, k.clone()),
                Act::FailTerminate(k) => w.cloud.fail_next(FaultOn::Terminate, k.clone()),
                Act::FailList => w
                    .cloud
                    .fail_next(FaultOn::List, ProviderErrorKind::Transient),
                Act::Capacity { node_type, left } => w.cloud.set_capacity(node_type, *left, None),
                Act::Latency { ms } => {
                    if let Some(p) = procs.first() {
                        p.conn.set_latency(Duration::from_millis(*ms));
                    }
                }
                Act::LoseReplies(n) => {
                    if let Some(p) = procs.first() {
                        p.conn.lose_replies(*n);
                    }
                }
                Act::Unreadable { pick: k, on } => {
                    if let Some(id) = pick(&workers, *k) {
                        w.gcs.set_unreadable(&id, on.then_some("NaN in CPU"));
                        if *on {
                            unreadable.insert(id);
                        } else {
                            unreadable.remove(&id);
                        }
                    }
                }
                Act::Lost { pick: k } => {
                    if let Some(id) = pick(&workers, *k) {
                        w.cloud.remove(&id);
                    }
                }
                Act::RefuseDrains { pick: k } => {
                    if let Some(id) = pick(&workers, *k) {
                        w.gcs.refuse_drains(&id);
                    }
                }
                Act::Kill => {
                    if !procs.is_empty() {
                        procs.remove(0).task.abort();
                    }
                }
                Act::Start { skew_s } => {
                    if procs.len() < 2 {
                        start(&mut procs, &mut started, *skew_s);
                    }
                }
                Act::Gang { id, n, pack } => {
                    w.gcs.set_gangs(if *n == 0 {
                        vec![]
                    } else {
                        vec![gang(*id, *n, *pack)]
                    });
                    demand_at = t;
                }
                Act::Constraint { cpu2 } => {
                    w.gcs.set_constraints(if *cpu2 == 0 {
                        vec![]
                    } else {
                        vec![crate::model::ClusterConstraint {
                            resource_requests: vec![demand(&[("CPU", 2.0)], *cpu2)],
                        }]
                    });
                }
                Act::Cut { on } => {
                    if let Some(p) = procs.first() {
                        p.conn.set_cut(*on);
                        p.cut.store(*on, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
        }
        if t % 60 == 0 {
            tracing::debug!("sim: t = {t} s");
        }
        // Idle time as Ray counts it: since the demand last changed (busy nodes: none).
        w.gcs
            .set_idle_ms(i64::from(t.saturating_sub(demand_at)) * 1_000);
        tokio::time::sleep(Duration::from_secs(1)).await;

        // The invariants.
        let fail = |what: String| Some(Violation { at_s: t, what });
        let Ok(table) = KvTable::new("t").load(&w.gcs, MAX_EPOCH).await else {
            continue;
        };
        // Under the max are the workers Ray's scheduler counts: all but those whose
        // termination was asked (a failing terminate leaves them in the cloud a while;
        // the quiet part checks that they go).
        let leaving: BTreeSet<&str> = table
            .instances
            .iter()
            .filter(|i| {
                matches!(
                    i.status,
                    InstanceStatus::RayStopped
                        | InstanceStatus::Terminating
                        | InstanceStatus::TerminationFailed
                        | InstanceStatus::Terminated
                )
            })
            .filter_map(|i| i.cloud_instance_id.as_deref())
            .collect();
        let all_workers = w.workers();
        let workers: Vec<CloudInstance> = all_workers
            .iter()
            .filter(|c| !leaving.contains(c.cloud_instance_id.as_str()))
            .cloned()
            .collect();
        let max = parsed.max_workers.unwrap_or(u64::MAX);
        if workers.len() as u64 > max {
            return fail(format!(
                "max_workers: {} workers in the cloud, max {max}{}",
                workers.len(),
                detail(&w).await
            ));
        }
        for nt in &parsed.node_types {
            let n = workers.iter().filter(|c| c.node_type == nt.name).count() as u64;
            if nt.max_workers.is_some_and(|m| n > m) {
                return fail(format!(
                    "type max_workers: {n} of {} in the cloud, max {:?}{}",
                    nt.name,
                    nt.max_workers,
                    detail(&w).await
                ));
            }
        }
        if let Some(cap) = cap {
            let cost: f64 = workers.iter().map(|c| price(&c.node_type)).sum();
            if cost > cap + 1e-9 {
                return fail(format!("cost cap: {cost} an hour in the cloud, cap {cap}"));
            }
        }
        let stopped = w.gcs.busy_stops();
        if !stopped.is_empty() {
            return fail(format!(
                "busy node stopped: {stopped:?}{}",
                detail(&w).await
            ));
        }
        let live: Vec<&Instance> = table
            .instances
            .iter()
            .filter(|i| !i.is_terminal())
            .collect();
        let mut held: BTreeMap<&str, &str> = BTreeMap::new();
        for i in &live {
            if let Some(c) = i.cloud_instance_id.as_deref()
                && let Some(other) = held.insert(c, &i.instance_id)
            {
                return fail(format!(
                    "doubled: {c} is held by {other} and {}",
                    i.instance_id
                ));
            }
        }
        let now_ids: BTreeSet<String> = all_workers
            .iter()
            .map(|c| c.cloud_instance_id.clone())
            .collect();
        unknown_since.retain(|id, _| now_ids.contains(id) && !held.contains_key(id.as_str()));
        // With no rayscale running that reaches the GCS, nothing can know an instance:
        // the grace counts from when one does again.
        procs.retain(|p| !p.task.is_finished());
        if procs
            .iter()
            .all(|p| p.cut.load(std::sync::atomic::Ordering::SeqCst))
        {
            unknown_since.clear();
        }
        for c in &all_workers {
            if !held.contains_key(c.cloud_instance_id.as_str()) {
                let since = *unknown_since
                    .entry(c.cloud_instance_id.clone())
                    .or_insert(t);
                if t - since > UNKNOWN_GRACE_S {
                    return fail(format!(
                        "leak: cloud worker {} ({}) known to no record for {} s",
                        c.cloud_instance_id,
                        c.node_type,
                        t - since
                    ));
                }
            }
        }
        if liveness && t >= FAULTY_S {
            let moving = |i: &Instance| {
                !matches!(
                    i.status,
                    InstanceStatus::RayRunning | InstanceStatus::TerminationFailed
                ) && !i.is_head
            };
            // How long each record has been in its present status.
            let now: BTreeSet<(String, &str)> = live
                .iter()
                .filter(|i| moving(i))
                .map(|i| (i.instance_id.clone(), i.status.name()))
                .collect();
            in_flight_since.retain(|k, _| now.contains(k));
            for i in live.iter().filter(|i| moving(i)) {
                let since = *in_flight_since
                    .entry((i.instance_id.clone(), i.status.name()))
                    .or_insert(t);
                let limit = if i.status == InstanceStatus::Requested {
                    SETTLE_REQUESTED_S
                } else {
                    SETTLE_S
                };
                if t - since > limit {
                    return fail(format!(
                        "stall: {} ({}) {} for {} s while quiet{}",
                        i.instance_id,
                        i.node_type,
                        i.status.name(),
                        t - since,
                        detail(&w).await
                    ));
                }
            }
        }
    }
    // No demand for the last half of the quiet part: zero workers, but those whose
    // termination rayscale gave up (listed).
    let table = KvTable::new("t")
        .load(&w.gcs, MAX_EPOCH)
        .await
        .map(|l| l.instances)
        .unwrap_or_default();
    let given_up: BTreeSet<&str> = table
        .iter()
        .filter(|i| i.status == InstanceStatus::TerminationFailed)
        .filter_map(|i| i.cloud_instance_id.as_deref())
        .collect();
    let left: Vec<String> = w
        .workers()
        .into_iter()
        .filter(|c| !given_up.contains(c.cloud_instance_id.as_str()))
        .map(|c| format!("{} ({})", c.cloud_instance_id, c.node_type))
        .collect();
    for p in procs {
        p.task.abort();
    }
    if liveness && !left.is_empty() {
        return Some(Violation {
            at_s: end,
            what: format!(
                "scale to zero: {left:?} left {} s after the demand went",
                end - demand_at
            ),
        });
    }
    None
}

/// With `RAYSCALE_SIM_DETAIL` set: the launches the cloud was sent and the stored
/// records, for a failure's message.
async fn detail(w: &World) -> String {
    if std::env::var_os("RAYSCALE_SIM_DETAIL").is_none() {
        return String::new();
    }
    let launches: Vec<String> = w
        .cloud
        .launches()
        .iter()
        .map(|l| format!("{} {}x{}", l.request_id, l.count, l.node_type))
        .collect();
    let records: Vec<String> = KvTable::new("t")
        .load(&w.gcs, MAX_EPOCH)
        .await
        .map(|l| l.instances)
        .unwrap_or_default()
        .iter()
        .map(|i| {
            let history: Vec<String> = i
                .status_history
                .iter()
                .map(|c| {
                    format!(
                        "{}@{}s",
                        c.status.name(),
                        (c.timestamp_ns - 1_700_000_000_000_000_000) / 1_000_000_000
                    )
                })
                .collect();
            format!(
                "{} {} {} {:?} req {} [{}]",
                i.instance_id,
                i.node_type,
                i.status.name(),
                i.cloud_instance_id,
                i.launch_request_id,
                history.join(" ")
            )
        })
        .collect();
    let cloud: Vec<String> = w
        .workers()
        .iter()
        .map(|c| format!("{} {} {:?}", c.cloud_instance_id, c.node_type, c.request_id))
        .collect();
    let why = block_on_get(&w.gcs, &crate::explain::why_key("t"));
    let spaces: Vec<(String, String)> = w
        .gcs
        .keys(NAMESPACE, "tables/")
        .into_iter()
        .map(|k| {
            let v = block_on_get(&w.gcs, &k);
            (k, v)
        })
        .collect();
    format!(
        "\n  launches: {launches:?}\n  records: {records:#?}\n  cloud: {cloud:?}\n  lease: {:?}\n  why: {why}\n  tables: {spaces:?}",
        w.lease_top()
    )
}

/// Drops actions while the same invariant still breaks (a few rounds of chunks, then
/// single actions), within `budget` reruns. The kept mask.
fn shrink(
    config: &str,
    cap: Option<f64>,
    acts: &[(u32, Act)],
    v: &Violation,
    budget: u32,
) -> Vec<bool> {
    // What comes after the violation cannot have caused it.
    let mut keep: Vec<bool> = acts.iter().map(|(t, _)| *t <= v.at_s).collect();
    let mut runs = 0;
    let mut chunk = acts.len().div_ceil(2).max(1);
    while chunk >= 1 && runs < budget {
        let mut start = 0;
        while start < acts.len() && runs < budget {
            let end = (start + chunk).min(acts.len());
            if keep[start..end].iter().any(|k| *k) {
                let mut trial = keep.clone();
                trial[start..end].iter_mut().for_each(|k| *k = false);
                runs += 1;
                if run(config, cap, acts, &trial).is_some_and(|t| kind_of(&t) == kind_of(v)) {
                    keep = trial;
                }
            }
            start = end;
        }
        if chunk == 1 {
            break;
        }
        chunk /= 2;
    }
    keep
}

/// With `RAYSCALE_SIM_LOG` (a filter, e.g. `info`): the processes' log on stderr.
fn log_to_stderr() {
    if let Ok(filter) = std::env::var("RAYSCALE_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

fn check_seed(seed: u64) -> Result<(), String> {
    log_to_stderr();
    let (config, cap, acts) = plan(seed);
    let all = vec![true; acts.len()];
    let Some(v) = run(&config, cap, &acts, &all) else {
        return Ok(());
    };
    let budget = if std::env::var_os("RAYSCALE_SIM_NO_SHRINK").is_some() {
        0
    } else {
        150
    };
    let keep = shrink(&config, cap, &acts, &v, budget);
    let trace: Vec<String> = acts
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|((t, a), _)| format!("{t}s {a:?}"))
        .collect();
    Err(format!(
        "sim seed {seed}: at {} s: {}\n  reproduce: RAYSCALE_SIM_SEED={seed} cargo test -p rayscale-core --release --lib sim\n  rayscale block: {}\n  shrunk schedule ({} of {} actions): {}",
        v.at_s,
        v.what,
        config.lines().last().unwrap_or(""),
        trace.len(),
        acts.len(),
        trace.join("; ")
    ))
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn the_whole_loop_keeps_its_invariants_under_random_workloads_and_faults() {
    let seeds: Vec<u64> = match env_u64("RAYSCALE_SIM_SEED") {
        Some(s) => vec![s],
        None => {
            let first = env_u64("RAYSCALE_SIM_FIRST").unwrap_or(1);
            let n = env_u64("RAYSCALE_SIM_SEEDS").unwrap_or(CI_SEEDS);
            (first..first.saturating_add(n)).collect()
        }
    };
    let failures: Vec<String> = seeds.iter().filter_map(|s| check_seed(*s).err()).collect();
    eprintln!(
        "sim: {} seeds, {} failed ({} s faulty + {} s quiet each)",
        seeds.len(),
        failures.len(),
        FAULTY_S,
        QUIET_S
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_seed_decides_the_whole_schedule() {
    let (c1, k1, a1) = plan(7);
    let (c2, k2, a2) = plan(7);
    assert_eq!((c1, k1), (c2, k2));
    assert_eq!(format!("{a1:?}"), format!("{a2:?}"));
    let (_, _, a3) = plan(8);
    assert_ne!(format!("{a1:?}"), format!("{a3:?}"));
    // Every knob set a seed can draw loads.
    for seed in 0..64 {
        let (config, _, _) = plan(seed);
        ClusterConfig::from_yaml_str(&config, "sim.yaml").expect("a knob set loads");
    }
}
