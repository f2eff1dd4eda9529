//! The workload trace of `rayscale simulate`: what arrives when (tasks, actors, placement
//! groups, with durations) and how the simulated cloud behaves per node type (boot time,
//! failure and capacity-error rates, price, and for spot types the preemption rate and
//! the notice window).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::CoreError;

/// A trace file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// The autoscaler's iteration period (Ray's is 5 s).
    #[serde(default = "default_step")]
    pub step_s: f64,
    /// Simulate until this time; default: until the work is done and the cluster is back
    /// to its minimum (at most a day).
    #[serde(default)]
    pub end_s: Option<f64>,
    /// Seed of the cloud's failures and capacity errors.
    #[serde(default)]
    pub seed: u64,
    /// How the cloud behaves.
    #[serde(default)]
    pub cloud: CloudModel,
    /// What arrives.
    pub workload: Vec<Arrival>,
}

/// The shortest autoscaler period simulated.
pub const MIN_STEP_S: f64 = 0.1;
/// The longest simulation (a week).
pub const MAX_END_S: f64 = 604_800.0;
/// Tasks or actors one arrival may bring.
pub const MAX_UNITS: u64 = 10_000_000;
/// Placement groups one arrival may bring (each is its own entry).
pub const MAX_GROUPS: u64 = 100_000;

fn default_step() -> f64 {
    5.0
}

fn one() -> u64 {
    1
}

/// The simulated cloud: a default and per-type overrides.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudModel {
    /// Every type's behaviour unless overridden.
    #[serde(default)]
    pub default: TypeModel,
    /// Per node type.
    #[serde(default)]
    pub types: BTreeMap<String, TypeModel>,
}

/// How instances of a node type behave (unset fields fall back to the default, then to
/// 60 s boots, no failures, no capacity errors, and the price of the config's
/// `rayscale.expander.prices`, else 0).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeModel {
    /// From launch to Ray running on the instance.
    pub boot_s: Option<f64>,
    /// Chance an instance dies while it boots.
    pub failure_rate: Option<f64>,
    /// Chance a launch request fails with a capacity error.
    pub capacity_error_rate: Option<f64>,
    /// At most this many instances of the type at once (a stockout): a launch beyond
    /// makes what fits and fails the rest with a capacity error; an all-or-nothing one
    /// (an atomic gang's) makes none.
    pub capacity: Option<u64>,
    /// Price per instance-hour.
    pub price_per_hour: Option<f64>,
    /// Spot: the mean time (s) from an instance running to the cloud's preemption notice
    /// (drawn per instance, exponentially); unset: never preempted.
    pub preemption_mean_s: Option<f64>,
    /// The notice's warning (s) before the instance is taken (default 30 s; AWS gives
    /// 120 s).
    pub notice_s: Option<f64>,
}

/// What kind of work arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Tasks (the default).
    #[default]
    Task,
    /// Actors: to the autoscaler, demand that lasts (modelled as long tasks).
    Actor,
    /// A placement group: all bundles or none.
    PlacementGroup,
}

/// Work arriving at `at_s` (and, with `repeat`, every `every_s` after).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    /// When (s from the start).
    pub at_s: f64,
    /// What.
    #[serde(default)]
    pub kind: Kind,
    /// How many (tasks, actors or placement groups).
    #[serde(default = "one")]
    pub count: u64,
    /// Resources of each task or actor.
    #[serde(default)]
    pub resources: BTreeMap<String, f64>,
    /// A placement group's bundles.
    #[serde(default)]
    pub bundles: Vec<BTreeMap<String, f64>>,
    /// A placement group's strategy: PACK (default), SPREAD, STRICT_PACK, STRICT_SPREAD.
    #[serde(default)]
    pub strategy: Option<String>,
    /// How long each runs once placed.
    pub duration_s: f64,
    /// How many times it arrives.
    #[serde(default = "one")]
    pub repeat: u64,
    /// Between repeats.
    #[serde(default)]
    pub every_s: f64,
}

/// A placement group strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Anywhere, preferably together.
    Pack,
    /// Anywhere, preferably apart.
    Spread,
    /// All on one node.
    StrictPack,
    /// Each on its own node.
    StrictSpread,
}

impl Arrival {
    /// The strategy of a placement group.
    pub fn strategy(&self) -> Strategy {
        match self.strategy.as_deref() {
            Some("SPREAD") => Strategy::Spread,
            Some("STRICT_PACK") => Strategy::StrictPack,
            Some("STRICT_SPREAD") => Strategy::StrictSpread,
            _ => Strategy::Pack,
        }
    }
}

fn bad(origin: &str, path: &str, what: impl std::fmt::Display) -> CoreError {
    CoreError::Invalid {
        path: format!("{origin}: {path}"),
        message: what.to_string(),
    }
}

fn check_resources(origin: &str, path: &str, r: &BTreeMap<String, f64>) -> Result<(), CoreError> {
    if r.is_empty() {
        return Err(bad(origin, path, "expected at least one resource"));
    }
    for (k, v) in r {
        if !(v.is_finite() && *v > 0.0) {
            return Err(bad(
                origin,
                &format!("{path}.{k}"),
                format!("expected a positive amount, got {v}"),
            ));
        }
    }
    Ok(())
}

impl Trace {
    /// Checks what serde cannot: positive times, rates in [0, 1], work that can be placed.
    pub fn validate(&self, origin: &str) -> Result<(), CoreError> {
        let positive = |path: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(bad(
                    origin,
                    path,
                    format!("expected a positive number, got {v}"),
                ))
            }
        };
        if !(self.step_s.is_finite() && self.step_s >= MIN_STEP_S) {
            return Err(bad(
                origin,
                "step_s",
                format!("expected at least {MIN_STEP_S} s, got {}", self.step_s),
            ));
        }
        if let Some(e) = self.end_s {
            positive("end_s", e)?;
            if e > MAX_END_S {
                return Err(bad(
                    origin,
                    "end_s",
                    format!("expected at most {MAX_END_S} s (a week), got {e}"),
                ));
            }
        }
        let models = std::iter::once(("cloud.default".to_string(), &self.cloud.default)).chain(
            self.cloud
                .types
                .iter()
                .map(|(t, m)| (format!("cloud.types.{t}"), m)),
        );
        for (path, m) in models {
            if let Some(b) = m.boot_s
                && !(b.is_finite() && b >= 0.0)
            {
                return Err(bad(
                    origin,
                    &format!("{path}.boot_s"),
                    format!("expected seconds >= 0, got {b}"),
                ));
            }
            for (name, r) in [
                ("failure_rate", m.failure_rate),
                ("capacity_error_rate", m.capacity_error_rate),
            ] {
                if let Some(r) = r
                    && !(0.0..=1.0).contains(&r)
                {
                    return Err(bad(
                        origin,
                        &format!("{path}.{name}"),
                        format!("expected a rate in [0, 1], got {r}"),
                    ));
                }
            }
            for (name, v) in [
                ("preemption_mean_s", m.preemption_mean_s),
                ("notice_s", m.notice_s),
            ] {
                if let Some(v) = v {
                    positive(&format!("{path}.{name}"), v)?;
                }
            }
            if let Some(p) = m.price_per_hour
                && !(p.is_finite() && p >= 0.0)
            {
                return Err(bad(
                    origin,
                    &format!("{path}.price_per_hour"),
                    format!("expected a price >= 0, got {p}"),
                ));
            }
        }
        if self.workload.is_empty() {
            return Err(bad(origin, "workload", "expected at least one arrival"));
        }
        for (i, a) in self.workload.iter().enumerate() {
            let p = format!("workload[{i}]");
            if !(a.at_s.is_finite() && a.at_s >= 0.0) {
                return Err(bad(
                    origin,
                    &format!("{p}.at_s"),
                    format!("expected seconds >= 0, got {}", a.at_s),
                ));
            }
            positive(&format!("{p}.duration_s"), a.duration_s)?;
            if a.repeat > 1 {
                positive(&format!("{p}.every_s"), a.every_s)?;
            }
            let units = a.count.saturating_mul(a.repeat.max(1));
            let most = if a.kind == Kind::PlacementGroup {
                MAX_GROUPS
            } else {
                MAX_UNITS
            };
            if units > most {
                return Err(bad(
                    origin,
                    &p,
                    format!(
                        "count x repeat is {units}, more than the {most} one arrival may bring"
                    ),
                ));
            }
            match a.kind {
                Kind::PlacementGroup => {
                    if a.bundles.is_empty() {
                        return Err(bad(
                            origin,
                            &format!("{p}.bundles"),
                            "a placement group needs bundles",
                        ));
                    }
                    for (j, b) in a.bundles.iter().enumerate() {
                        check_resources(origin, &format!("{p}.bundles[{j}]"), b)?;
                    }
                    if let Some(s) = &a.strategy
                        && !["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"].contains(&s.as_str())
                    {
                        return Err(bad(
                            origin,
                            &format!("{p}.strategy"),
                            format!(
                                "expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, got {s:?}"
                            ),
                        ));
                    }
                }
                Kind::Task | Kind::Actor => {
                    check_resources(origin, &format!("{p}.resources"), &a.resources)?;
                    if !a.bundles.is_empty() || a.strategy.is_some() {
                        return Err(bad(
                            origin,
                            &p,
                            "bundles and strategy belong to kind: placement_group",
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
