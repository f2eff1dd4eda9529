//! Which node types the cloud can give now: Ray 2.60's `CloudResourceMonitor`, exactly,
//! and rayscale's unavailable-types cache (after Karpenter's unavailable offerings).
//!
//! - [`CloudResourceMonitor`] (Ray: `instance_manager/subscribers/cloud_resource_monitor.py`)
//!   watches instance transitions: ALLOCATION_TIMEOUT stamps the type as unavailable now,
//!   RAY_RUNNING clears it. It yields Ray's two scheduler inputs: the availability
//!   `1 - ts / max(ts)` and the recoverable availability, 0 within a safety floor
//!   (`min(10 s, 10% of the window)`) of the last failure, then climbing linearly to 1 over
//!   `RAY_AUTOSCALER_AVAILABILITY_RECOVERY_S` (600 s).
//! - [`UnavailableTypes`] is faster: a capacity error makes the type unavailable at once for
//!   a window (3 minutes by default, `rayscale.unavailable_type_ttl_s`), so the scheduler
//!   moves the demand to the next type that can hold it in the next iteration instead of
//!   waiting out an allocation timeout.
//!
//! Time is the caller's (ns since the epoch); nothing here reads a clock.

use std::collections::BTreeMap;

use crate::config::ClusterConfig;
use crate::model::InstanceStatus;
use crate::scheduler::request::AvailabilityInputs;

const SEC: f64 = 1e9;

/// Ray's `RAY_AUTOSCALER_AVAILABILITY_RECOVERY_S` default.
pub const DEFAULT_RECOVERY_S: f64 = 600.0;
pub use crate::config::DEFAULT_UNAVAILABLE_TTL_S;

/// Ray's `CloudResourceMonitor`: last unavailable time per node type.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudResourceMonitor {
    /// Node type -> when it was last found unavailable (s since the epoch, as Ray's
    /// `time.time()`).
    last_unavailable_s: BTreeMap<String, f64>,
    recovery_s: f64,
}

impl Default for CloudResourceMonitor {
    fn default() -> Self {
        Self::new(DEFAULT_RECOVERY_S)
    }
}

impl CloudResourceMonitor {
    /// A monitor with Ray's recovery window `recovery_s` (> 0).
    pub fn new(recovery_s: f64) -> Self {
        CloudResourceMonitor {
            last_unavailable_s: BTreeMap::new(),
            recovery_s: if recovery_s > 0.0 {
                recovery_s
            } else {
                DEFAULT_RECOVERY_S
            },
        }
    }

    /// Ray's `notify`: an instance of `node_type` entered `status` at `now_ns`.
    pub fn notify(&mut self, node_type: &str, status: InstanceStatus, now_ns: i64) {
        match status {
            InstanceStatus::AllocationTimeout => {
                self.last_unavailable_s
                    .insert(node_type.to_string(), now_ns as f64 / SEC);
            }
            InstanceStatus::RayRunning if !node_type.is_empty() => {
                self.last_unavailable_s.remove(node_type);
            }
            _ => {}
        }
    }

    /// Ray's `get_resource_availabilities`: `1 - ts / max_ts` per type that failed.
    pub fn availabilities(&self) -> Vec<(String, f64)> {
        let max = self
            .last_unavailable_s
            .values()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        self.last_unavailable_s
            .iter()
            .map(|(t, ts)| (t.clone(), 1.0 - ts / max))
            .collect()
    }

    /// Ray's `get_recoverable_resource_availabilities` at `now_ns`.
    pub fn recoverable(&self, now_ns: i64) -> Vec<(String, f64)> {
        let now = now_ns as f64 / SEC;
        let floor = f64::min(10.0, self.recovery_s * 0.1);
        self.last_unavailable_s
            .iter()
            .map(|(t, ts)| {
                let diff = now - ts;
                let score = if diff < floor {
                    0.0
                } else {
                    f64::min(1.0, diff / self.recovery_s)
                };
                (t.clone(), score)
            })
            .collect()
    }
}

/// Why and until when a node type is unavailable.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unavailable {
    /// The node type.
    pub node_type: String,
    /// The zone the cloud named, if any.
    pub zone: Option<String>,
    /// The capacity error's message.
    pub reason: String,
    /// When it was marked (ns).
    pub since_ns: i64,
    /// Until when (ns).
    pub until_ns: i64,
}

/// Offerings — node types, or one zone of a type — no new node is launched of for a
/// while after a capacity error or a preemption (Karpenter's unavailable offerings).
///
/// An entry without a zone makes the whole type unavailable: the scheduler places its
/// demand on other types. An entry with a zone steers the type's next launches away from
/// that zone ([`zones_out`](Self::zones_out), sent with each launch); the provider that
/// finds no zone left answers with a capacity error without a zone, which then makes the
/// type unavailable — so a type is unavailable as a whole only when every zone is.
#[derive(Debug, Clone, PartialEq)]
pub struct UnavailableTypes {
    ttl_ns: i64,
    entries: BTreeMap<(String, Option<String>), Unavailable>,
}

impl Default for UnavailableTypes {
    fn default() -> Self {
        Self::new(DEFAULT_UNAVAILABLE_TTL_S)
    }
}

impl UnavailableTypes {
    /// A cache whose entries last `ttl_s` seconds.
    pub fn new(ttl_s: i64) -> Self {
        UnavailableTypes {
            ttl_ns: ttl_s.max(0).saturating_mul(1_000_000_000),
            entries: BTreeMap::new(),
        }
    }

    /// Marks `node_type` (in `zone`, or all of it) unavailable from `now_ns` for the
    /// window (a later mark extends it).
    pub fn mark(&mut self, node_type: &str, zone: Option<&str>, reason: &str, now_ns: i64) {
        let zone = zone.filter(|z| !z.is_empty()).map(str::to_string);
        self.entries.insert(
            (node_type.to_string(), zone.clone()),
            Unavailable {
                node_type: node_type.to_string(),
                zone,
                reason: reason.to_string(),
                since_ns: now_ns,
                until_ns: now_ns.saturating_add(self.ttl_ns),
            },
        );
    }

    /// Sets the window of entries marked from now on (a config reload).
    pub fn set_ttl_s(&mut self, ttl_s: i64) {
        self.ttl_ns = ttl_s.max(0).saturating_mul(1_000_000_000);
    }

    /// Drops entries whose window is over at `now_ns`.
    pub fn expire(&mut self, now_ns: i64) {
        self.entries.retain(|_, u| u.until_ns > now_ns);
    }

    /// Entries still in force at `now_ns`, by node type then zone.
    pub fn active(&self, now_ns: i64) -> Vec<&Unavailable> {
        self.entries
            .values()
            .filter(|u| u.until_ns > now_ns)
            .collect()
    }

    /// Whether `node_type` as a whole is unavailable at `now_ns`.
    pub fn contains(&self, node_type: &str, now_ns: i64) -> bool {
        self.entries
            .get(&(node_type.to_string(), None))
            .is_some_and(|u| u.until_ns > now_ns)
    }

    /// The zones of `node_type` marked unavailable at `now_ns` (what its launches avoid).
    pub fn zones_out(&self, node_type: &str, now_ns: i64) -> Vec<String> {
        self.entries
            .range((node_type.to_string(), None)..)
            .take_while(|((t, _), _)| t == node_type)
            .filter(|(_, u)| u.until_ns > now_ns)
            .filter_map(|((_, z), _)| z.clone())
            .collect()
    }
}

/// What [`Availability`] keeps, as stored between processes (JSON): the monitor's
/// timestamps and the unavailable types.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct AvailabilityState {
    /// Ray's monitor: node type -> last unavailable time (s since the epoch).
    pub last_unavailable_s: BTreeMap<String, f64>,
    /// rayscale's unavailable types.
    pub unavailable: Vec<Unavailable>,
    /// The operator's limits' clocks.
    #[serde(default)]
    pub clocks: LimitClocks,
    /// Atomic gangs' failed attempts, by placement group id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gangs: BTreeMap<String, GangAttempts>,
}

/// An atomic gang's failed attempts (`rayscale.gangs: atomic`), kept until its placement
/// group is placed, goes, or its set-aside time ends.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct GangAttempts {
    /// Attempts that did not come up whole.
    pub failed: u32,
    /// The last one's reason.
    pub reason: String,
    /// After the last allowed attempt: not launched for until then (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_aside_until_ns: Option<i64>,
    /// The gangs (their tags) counted as failed, while the table has members of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_tags: Vec<String>,
    /// The gangs (their tags) of the group when it was placed (or went), while the table
    /// has members of them: never judged, should the group be pending again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settled_tags: Vec<String>,
}

/// The clocks of the operator's limits that run over many iterations, kept with the
/// availability (and stored with it, so a restart keeps them).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct LimitClocks {
    /// Autostop: since when (ns) the cluster has had no demand and no work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_since_ns: Option<i64>,
    /// Autostop: when (ns) it stopped the workers, while the cluster stays quiet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autostopped_ns: Option<i64>,
    /// Consolidation: since when (ns) each instance (by id) has been used below the
    /// threshold.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub low_since_ns: BTreeMap<String, i64>,
    /// When an iteration last moved these clocks (ns, to the minute: stored at most once
    /// a minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_ns: Option<i64>,
}

impl LimitClocks {
    /// How long without an iteration (rayscale down, or no leader) resets the clocks:
    /// what happened meanwhile is not known.
    pub const GAP_S: i64 = 180;

    /// Notes an iteration at `now_ns`; after a gap longer than [`Self::GAP_S`] every
    /// clock starts again.
    pub fn observe(&mut self, now_ns: i64) {
        const SEC: i64 = 1_000_000_000;
        if let Some(seen) = self.seen_ns
            && now_ns.saturating_sub(seen) < 60 * SEC
        {
            return;
        }
        if self
            .seen_ns
            .is_some_and(|seen| now_ns.saturating_sub(seen) > Self::GAP_S * SEC)
        {
            *self = LimitClocks::default();
        }
        self.seen_ns = Some(now_ns);
    }
}

/// Both, as the reconciler keeps them between iterations, with the limits' clocks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Availability {
    /// Ray's monitor.
    pub monitor: CloudResourceMonitor,
    /// rayscale's cache.
    pub unavailable: UnavailableTypes,
    /// The limits' clocks.
    pub clocks: LimitClocks,
    /// Atomic gangs' failed attempts.
    pub gangs: BTreeMap<String, GangAttempts>,
}

impl Availability {
    /// With the unavailability window `ttl_s` and Ray's recovery window `recovery_s`.
    pub fn new(ttl_s: i64, recovery_s: f64) -> Self {
        Availability {
            monitor: CloudResourceMonitor::new(recovery_s),
            unavailable: UnavailableTypes::new(ttl_s),
            clocks: LimitClocks::default(),
            gangs: BTreeMap::new(),
        }
    }

    /// What to store.
    pub fn state(&self) -> AvailabilityState {
        AvailabilityState {
            last_unavailable_s: self.monitor.last_unavailable_s.clone(),
            unavailable: self.unavailable.entries.values().cloned().collect(),
            clocks: self.clocks.clone(),
            gangs: self.gangs.clone(),
        }
    }

    /// Restores a stored state (the windows stay this object's).
    pub fn restore(&mut self, state: AvailabilityState) {
        self.monitor.last_unavailable_s = state.last_unavailable_s;
        self.clocks = state.clocks;
        self.gangs = state.gangs;
        self.unavailable.entries = state
            .unavailable
            .into_iter()
            .map(|u| ((u.node_type.clone(), u.zone.clone()), u))
            .collect();
    }

    /// The scheduler's three availability inputs at `now_ns` (as a `plan` scenario
    /// holds them): Ray's two maps and the unavailable types that `config` still has.
    pub fn scheduler_inputs(&self, now_ns: i64, config: &ClusterConfig) -> AvailabilityInputs {
        AvailabilityInputs {
            cloud_resource_availabilities: self.monitor.availabilities(),
            recoverable_resource_availabilities: self.monitor.recoverable(now_ns),
            unavailable_node_types: self
                .unavailable
                .active(now_ns)
                .into_iter()
                .filter(|u| u.zone.is_none() && config.node_type(&u.node_type).is_some())
                .map(|u| u.node_type.clone())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn monitor_follows_ray() {
        let mut m = CloudResourceMonitor::new(600.0);
        let t0 = 1_000_000 * S;
        m.notify("a", InstanceStatus::AllocationTimeout, t0);
        m.notify("b", InstanceStatus::AllocationTimeout, t0 + 100 * S);
        let av: BTreeMap<_, _> = m.availabilities().into_iter().collect();
        assert_eq!(av["b"], 0.0);
        assert!((av["a"] - (1.0 - 1_000_000.0 / 1_000_100.0)).abs() < 1e-15);
        // Within the 10 s floor: 0; then linear to 1 over 600 s.
        let rec: BTreeMap<_, _> = m.recoverable(t0 + 105 * S).into_iter().collect();
        assert_eq!(rec["b"], 0.0);
        assert!((rec["a"] - 105.0 / 600.0).abs() < 1e-12);
        let rec: BTreeMap<_, _> = m.recoverable(t0 + 5000 * S).into_iter().collect();
        assert_eq!(rec["a"], 1.0);
        m.notify("a", InstanceStatus::RayRunning, t0 + 200 * S);
        assert_eq!(m.availabilities().len(), 1);
        m.notify("b", InstanceStatus::AllocationFailed, t0);
        assert_eq!(m.availabilities()[0].0, "b");
    }

    #[test]
    fn floor_is_ten_percent_of_a_short_window() {
        let mut m = CloudResourceMonitor::new(50.0);
        m.notify("a", InstanceStatus::AllocationTimeout, 0);
        assert_eq!(m.recoverable(4 * S)[0].1, 0.0);
        assert_eq!(m.recoverable(5 * S)[0].1, 0.1);
    }

    #[test]
    fn unavailable_types_expire() {
        let mut u = UnavailableTypes::new(180);
        u.mark("gpu", None, "no capacity", 10 * S);
        assert!(u.contains("gpu", 189 * S));
        assert!(!u.contains("gpu", 190 * S));
        u.expire(190 * S);
        assert!(u.active(0).is_empty());
    }

    #[test]
    fn a_zone_is_an_offering_not_the_type() {
        let mut u = UnavailableTypes::new(180);
        u.mark("gpu", Some("z1"), "preempted", 10 * S);
        u.mark("gpu", Some("z2"), "no capacity", 20 * S);
        u.mark("gpu-b", Some("z1"), "no capacity", 20 * S);
        assert!(
            !u.contains("gpu", 30 * S),
            "one zone out is not the type out"
        );
        assert_eq!(u.zones_out("gpu", 30 * S), ["z1", "z2"]);
        assert_eq!(u.zones_out("gpu", 195 * S), ["z2"], "z1's window is over");
        assert_eq!(u.zones_out("gp", 30 * S), Vec::<String>::new());
        assert_eq!(u.active(100 * S)[0].zone.as_deref(), Some("z1"));
        // The provider that finds no zone left says so without a zone: the type is out.
        u.mark("gpu", None, "every zone out", 40 * S);
        assert!(u.contains("gpu", 41 * S));
        assert_eq!(u.zones_out("gpu", 41 * S), ["z1", "z2"]);
        let mut a = Availability::new(180, 600.0);
        a.unavailable = u;
        let mut b = Availability::new(180, 600.0);
        b.restore(a.state());
        assert_eq!(a, b, "zones survive a restart");
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut a = Availability::new(180, 600.0);
        a.monitor
            .notify("a", InstanceStatus::AllocationTimeout, 5 * S);
        a.unavailable.mark("b", None, "stockout", 7 * S);
        let json = serde_json::to_string(&a.state()).expect("json");
        let mut b = Availability::new(180, 600.0);
        b.restore(serde_json::from_str(&json).expect("parse"));
        assert_eq!(a, b);
        let config = ClusterConfig::from_yaml_str(
            "cluster_name: c\nprovider: {type: local_processes}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {}, node_config: {}}\n  \
             b: {resources: {CPU: 1}, node_config: {}}\n",
            "t.yaml",
        )
        .expect("config");
        let i = b.scheduler_inputs(8 * S, &config);
        assert_eq!(i.cloud_resource_availabilities.len(), 1);
        assert_eq!(i.recoverable_resource_availabilities[0].1, 0.0);
        assert_eq!(i.unavailable_node_types, ["b"]);
    }
}
