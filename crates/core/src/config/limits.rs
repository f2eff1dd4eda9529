//! Limits an operator sets in the `rayscale:` block, all off by default (Ray has none of
//! them; with none set, decisions stay Ray's):
//!
//! ```yaml
//! rayscale:
//!   disruption_budget:
//!     max_draining: 2            # nodes, or "10%" of the live workers
//!     max_stops: 5               # voluntary stops started per window
//!     window_s: 600              # (default 600)
//!     blocked: ["Mon-Fri 09:00-18:00"]   # UTC; no voluntary stop starts inside
//!     node_types: {gpu: {max_draining: 1}}   # the same keys, per type (both apply)
//!   scale_down_delay_after_launch_s: 600     # no idle stop this long after a launch
//!   min_node_lifetime_s: 300                 # no idle stop of a node younger than this
//!   max_hourly_cost: 40.0        # running + pending, from rayscale.expander.prices
//!   autostop_minutes: 60         # no demand and no work this long: every worker stops
//!   consolidation:               # for retriable or movable work only
//!     node_types: [cpu]          # opted in, by name
//!     utilization_below: 0.5     # of the most used resource (default 0.5)
//!     after_s: 600               # below it this long (default 600)
//!     drain_deadline_s: 600      # then drained with this deadline (default 600)
//! ```
//!
//! Voluntary stops are the ones Ray's scheduler makes for idleness and outdated launch
//! configs, and consolidation's; stops over a lowered `max_workers`, preemptions, operator
//! drains and autostop are never held.

use std::collections::BTreeMap;

use serde_json::Value;

use super::schema::{describe, join};
use crate::CoreError;

/// A number of nodes, or a share of the live workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// This many nodes.
    Nodes(u64),
    /// This percentage (0-100] of the live workers (of the type, for a type's budget),
    /// rounded down, at least 1.
    Percent(f64),
}

impl Amount {
    /// The number of nodes out of `live`.
    pub fn of(self, live: u64) -> u64 {
        match self {
            Amount::Nodes(n) => n,
            Amount::Percent(p) => ((live as f64 * p / 100.0).floor() as u64).max(1),
        }
    }
}

/// One budget (the cluster's, or a node type's).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Budget {
    /// At most this many nodes draining at once.
    pub max_draining: Option<Amount>,
    /// At most this many voluntary stops started per `window_s`.
    pub max_stops: Option<u64>,
    /// The window of `max_stops` (s).
    pub window_s: u64,
}

/// A weekly window, UTC: days (0 = Monday) and minutes of the day [start, end).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// What the config said.
    pub text: String,
    days: [bool; 7],
    start_min: u32,
    end_min: u32,
}

impl Window {
    /// Whether `now_ns` (since the epoch) is inside.
    pub fn contains(&self, now_ns: i64) -> bool {
        let s = now_ns.div_euclid(1_000_000_000);
        let day = s.div_euclid(86_400);
        // 1970-01-01 was a Thursday (3 with Monday 0).
        let weekday = (day + 3).rem_euclid(7) as usize;
        let minute = (s.rem_euclid(86_400) / 60) as u32;
        self.days[weekday] && (self.start_min..self.end_min).contains(&minute)
    }

    /// Reads `"Mon-Fri 09:00-18:00"`, `"Sat 00:00-24:00"`, `"Mon,Wed 12:00-13:00"`.
    pub fn parse(text: &str) -> Result<Window, String> {
        const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
        let bad = || {
            format!(
                "expected days and UTC hours as \"Mon-Fri 09:00-18:00\", got {:?}",
                text.chars().take(60).collect::<String>()
            )
        };
        let (days_text, hours) = text.trim().split_once(' ').ok_or_else(bad)?;
        let day = |d: &str| {
            DAYS.iter()
                .position(|x| x.eq_ignore_ascii_case(d.trim()))
                .ok_or_else(bad)
        };
        let mut days = [false; 7];
        for part in days_text.split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (day(a)?, day(b)?);
                    let mut d = a;
                    loop {
                        days[d] = true;
                        if d == b {
                            break;
                        }
                        d = (d + 1) % 7;
                    }
                }
                None => days[day(part)?] = true,
            }
        }
        let minute = |t: &str| -> Result<u32, String> {
            let (h, m) = t.trim().split_once(':').ok_or_else(bad)?;
            let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
            if m >= 60 || h > 24 || (h == 24 && m > 0) {
                return Err(bad());
            }
            Ok(h * 60 + m)
        };
        let (a, b) = hours.trim().split_once('-').ok_or_else(bad)?;
        let (start_min, end_min) = (minute(a)?, minute(b)?);
        if start_min >= end_min {
            return Err(bad());
        }
        Ok(Window {
            text: text.trim().to_string(),
            days,
            start_min,
            end_min,
        })
    }
}

/// `rayscale.disruption_budget`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DisruptionBudget {
    /// The cluster's.
    pub cluster: Budget,
    /// Per node type (both the type's and the cluster's apply).
    pub node_types: BTreeMap<String, Budget>,
    /// Windows in which no voluntary stop starts.
    pub blocked: Vec<Window>,
}

/// The limits of the `rayscale:` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Limits {
    /// `disruption_budget`.
    pub budget: Option<DisruptionBudget>,
    /// `scale_down_delay_after_launch_s`.
    pub scale_down_delay_after_launch_s: Option<u64>,
    /// `min_node_lifetime_s`.
    pub min_node_lifetime_s: Option<u64>,
    /// `max_hourly_cost` (in the unit of `rayscale.expander.prices`).
    pub max_hourly_cost: Option<f64>,
    /// `autostop_minutes`.
    pub autostop_minutes: Option<f64>,
    /// `consolidation`.
    pub consolidation: Option<Consolidation>,
}

/// `rayscale.consolidation`: moving the load off nodes that are mostly empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Consolidation {
    /// The node types it may drain.
    pub node_types: Vec<String>,
    /// A node is a candidate while its most used resource is below this share.
    pub utilization_below: f64,
    /// ... for this long (s).
    pub after_s: u64,
    /// The deadline of its drain (s): its work runs on until then, or until it ends.
    pub drain_deadline_s: u64,
}

/// `consolidation.utilization_below` by default.
pub const DEFAULT_UTILIZATION_BELOW: f64 = 0.5;
/// `consolidation.after_s` by default.
pub const DEFAULT_CONSOLIDATION_AFTER_S: u64 = 600;
/// `consolidation.drain_deadline_s` by default (the Cluster Autoscaler's
/// `max-graceful-termination-sec`).
pub const DEFAULT_DRAIN_DEADLINE_S: u64 = 600;

fn consolidation(v: &Value, path: &str, types: &[String]) -> Result<Consolidation, CoreError> {
    let block = v.as_object().ok_or_else(|| {
        CoreError::invalid(path, format!("expected a mapping, got {}", describe(v)))
    })?;
    let mut c = Consolidation {
        node_types: Vec::new(),
        utilization_below: DEFAULT_UTILIZATION_BELOW,
        after_s: DEFAULT_CONSOLIDATION_AFTER_S,
        drain_deadline_s: DEFAULT_DRAIN_DEADLINE_S,
    };
    for (k, val) in block {
        let p = join(path, k);
        match k.as_str() {
            "node_types" => {
                let list = val.as_array().ok_or_else(|| {
                    CoreError::invalid(
                        &p,
                        format!("expected a list of node types, got {}", describe(val)),
                    )
                })?;
                for (i, t) in list.iter().enumerate() {
                    let tp = format!("{p}[{i}]");
                    let t = t.as_str().ok_or_else(|| {
                        CoreError::invalid(&tp, format!("expected a string, got {}", describe(t)))
                    })?;
                    if !types.iter().any(|x| x == t) {
                        return Err(CoreError::invalid(tp, format!("unknown node type {t:?}")));
                    }
                    c.node_types.push(t.to_string());
                }
            }
            "utilization_below" => {
                c.utilization_below =
                    val.as_f64()
                        .filter(|u| *u > 0.0 && *u <= 1.0)
                        .ok_or_else(|| {
                            CoreError::invalid(
                                &p,
                                format!("expected a share in (0, 1], got {}", describe(val)),
                            )
                        })?;
            }
            "after_s" => c.after_s = seconds(val, &p)?,
            "drain_deadline_s" => c.drain_deadline_s = seconds(val, &p)?,
            _ => {
                return Err(CoreError::invalid(p, super::keys::unknown("consolidation")));
            }
        }
    }
    if c.node_types.is_empty() {
        return Err(CoreError::invalid(
            join(path, "node_types"),
            "expected at least one node type (consolidation is opted in per type)",
        ));
    }
    Ok(c)
}

/// The default window of `max_stops` (s).
pub const DEFAULT_WINDOW_S: u64 = 600;

fn seconds(v: &Value, path: &str) -> Result<u64, CoreError> {
    v.as_u64().ok_or_else(|| {
        CoreError::invalid(
            path,
            format!(
                "expected a whole number of seconds >= 0, got {}",
                describe(v)
            ),
        )
    })
}

/// A budget block read: the budget, its per-type budgets and its blocked windows (the
/// two last only at the top).
type BudgetBlock = (Budget, Option<BTreeMap<String, Budget>>, Vec<Window>);

fn budget(v: &Value, path: &str, types: Option<&[String]>) -> Result<BudgetBlock, CoreError> {
    let block = v.as_object().ok_or_else(|| {
        CoreError::invalid(path, format!("expected a mapping, got {}", describe(v)))
    })?;
    let mut b = Budget {
        window_s: DEFAULT_WINDOW_S,
        ..Default::default()
    };
    let mut per_type = None;
    let mut blocked = Vec::new();
    for (k, val) in block {
        let p = join(path, k);
        match (k.as_str(), types) {
            ("max_draining", _) => {
                b.max_draining = Some(match val {
                    Value::String(s) => {
                        let pct = s
                            .strip_suffix('%')
                            .and_then(|x| x.trim().parse::<f64>().ok())
                            .filter(|x| *x > 0.0 && *x <= 100.0);
                        Amount::Percent(pct.ok_or_else(|| {
                            CoreError::invalid(
                                &p,
                                format!(
                                    "expected a node count or a percentage as \"10%\", got {}",
                                    describe(val)
                                ),
                            )
                        })?)
                    }
                    _ => Amount::Nodes(val.as_u64().ok_or_else(|| {
                        CoreError::invalid(
                            &p,
                            format!(
                                "expected a node count or a percentage as \"10%\", got {}",
                                describe(val)
                            ),
                        )
                    })?),
                });
            }
            ("max_stops", _) => {
                b.max_stops = Some(val.as_u64().ok_or_else(|| {
                    CoreError::invalid(
                        &p,
                        format!("expected a whole number, got {}", describe(val)),
                    )
                })?);
            }
            ("window_s", _) => {
                b.window_s = seconds(val, &p)?;
                if b.window_s == 0 {
                    return Err(CoreError::invalid(&p, "expected at least 1 second"));
                }
            }
            ("blocked", Some(_)) => {
                let list = val.as_array().ok_or_else(|| {
                    CoreError::invalid(
                        &p,
                        format!("expected a list of windows, got {}", describe(val)),
                    )
                })?;
                for (i, w) in list.iter().enumerate() {
                    let wp = format!("{p}[{i}]");
                    let text = w.as_str().ok_or_else(|| {
                        CoreError::invalid(&wp, format!("expected a string, got {}", describe(w)))
                    })?;
                    blocked.push(Window::parse(text).map_err(|e| CoreError::invalid(&wp, e))?);
                }
            }
            ("node_types", Some(types)) => {
                let m = val.as_object().ok_or_else(|| {
                    CoreError::invalid(
                        &p,
                        format!(
                            "expected a mapping of node type to budget, got {}",
                            describe(val)
                        ),
                    )
                })?;
                let mut out = BTreeMap::new();
                for (t, tv) in m {
                    let tp = join(&p, t);
                    if !types.iter().any(|x| x == t) {
                        return Err(CoreError::invalid(tp, "unknown node type"));
                    }
                    out.insert(t.clone(), budget(tv, &tp, None)?.0);
                }
                per_type = Some(out);
            }
            _ => {
                return Err(CoreError::invalid(
                    p,
                    if types.is_some() {
                        super::keys::unknown("disruption_budget")
                    } else {
                        // A node type's own budget: the global one's amounts.
                        "unknown key (known: max_draining, max_stops, window_s)".to_string()
                    },
                ));
            }
        }
    }
    Ok((b, per_type, blocked))
}

impl Limits {
    /// Reads the limits of the `rayscale:` block `block` (at `path`); `types` are the
    /// config's node types, `priced` those with a price.
    pub fn from_block(
        block: Option<&Value>,
        path: &str,
        types: &[String],
        priced: &[String],
    ) -> Result<Limits, CoreError> {
        let mut l = Limits::default();
        let Some(block) = block.and_then(Value::as_object) else {
            return Ok(l);
        };
        if let Some(v) = block.get("disruption_budget").filter(|v| !v.is_null()) {
            let (cluster, node_types, blocked) =
                budget(v, &join(path, "disruption_budget"), Some(types))?;
            l.budget = Some(DisruptionBudget {
                cluster,
                node_types: node_types.unwrap_or_default(),
                blocked,
            });
        }
        for (key, slot) in [
            (
                "scale_down_delay_after_launch_s",
                &mut l.scale_down_delay_after_launch_s,
            ),
            ("min_node_lifetime_s", &mut l.min_node_lifetime_s),
        ] {
            if let Some(v) = block.get(key).filter(|v| !v.is_null()) {
                *slot = Some(seconds(v, &join(path, key))?);
            }
        }
        if let Some(v) = block.get("max_hourly_cost").filter(|v| !v.is_null()) {
            let p = join(path, "max_hourly_cost");
            let cap = v
                .as_f64()
                .filter(|c| c.is_finite() && *c >= 0.0)
                .ok_or_else(|| {
                    CoreError::invalid(
                        &p,
                        format!("expected a cost per hour >= 0, got {}", describe(v)),
                    )
                })?;
            if let Some(t) = types.iter().find(|t| !priced.contains(t)) {
                return Err(CoreError::invalid(
                    p,
                    format!(
                        "node type {t:?} has no price: give every type one in \
                         rayscale.expander.prices"
                    ),
                ));
            }
            l.max_hourly_cost = Some(cap);
        }
        if let Some(v) = block.get("autostop_minutes").filter(|v| !v.is_null()) {
            l.autostop_minutes = Some(
                v.as_f64()
                    .filter(|m| m.is_finite() && *m > 0.0)
                    .ok_or_else(|| {
                        CoreError::invalid(
                            join(path, "autostop_minutes"),
                            format!("expected a number of minutes > 0, got {}", describe(v)),
                        )
                    })?,
            );
        }
        if let Some(v) = block.get("consolidation").filter(|v| !v.is_null()) {
            l.consolidation = Some(consolidation(v, &join(path, "consolidation"), types)?);
        }
        Ok(l)
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.budget.is_some()
            || self.scale_down_delay_after_launch_s.is_some()
            || self.min_node_lifetime_s.is_some()
            || self.max_hourly_cost.is_some()
            || self.autostop_minutes.is_some()
            || self.consolidation.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn windows_are_weekly_and_utc() {
        let w = Window::parse("Mon-Fri 09:00-18:00").expect("window");
        let tue = 1_764_633_600 * S; // 2025-12-02 00:00 UTC, a Tuesday
        let tue_10 = tue + 10 * 3600 * S;
        assert!(w.contains(tue_10));
        assert!(!w.contains(tue + 8 * 3600 * S));
        assert!(!w.contains(tue + 18 * 3600 * S));
        // Saturday (four days later).
        assert!(!w.contains(tue_10 + 4 * 86_400 * S));
        let wrap = Window::parse("Sat-Mon 00:00-24:00").expect("window");
        assert!(wrap.contains(tue_10 + 4 * 86_400 * S));
        assert!(wrap.contains(tue_10 - 86_400 * S));
        assert!(!wrap.contains(tue_10));
        for bad in [
            "Mon 18:00-09:00",
            "Funday 01:00-02:00",
            "Mon 9-10",
            "Mon",
            "Mon 25:00-26:00",
        ] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_block_reads_with_paths_in_its_errors() {
        let types = vec!["cpu".to_string(), "gpu".to_string()];
        let v: Value = serde_json::json!({
            "disruption_budget": {"max_draining": "25%", "max_stops": 3, "window_s": 60,
                "blocked": ["Sat-Sun 00:00-24:00"], "node_types": {"gpu": {"max_draining": 1}}},
            "scale_down_delay_after_launch_s": 600,
            "min_node_lifetime_s": 300,
            "max_hourly_cost": 12.5,
        });
        let l = Limits::from_block(Some(&v), "rayscale", &types, &types).expect("limits");
        let b = l.budget.as_ref().expect("budget");
        assert_eq!(b.cluster.max_draining, Some(Amount::Percent(25.0)));
        assert_eq!(b.cluster.max_draining.map(|a| a.of(10)), Some(2));
        assert_eq!(b.node_types["gpu"].max_draining, Some(Amount::Nodes(1)));
        assert_eq!(b.cluster.window_s, 60);
        assert_eq!(l.max_hourly_cost, Some(12.5));
        assert!(l.any());
        let err = |v: Value, priced: &[String]| {
            Limits::from_block(Some(&v), "rayscale", &types, priced)
                .expect_err("bad")
                .to_string()
        };
        assert!(
            err(serde_json::json!({"max_hourly_cost": 3}), &types[..1])
                .contains("rayscale.max_hourly_cost: node type \"gpu\" has no price")
        );
        assert!(
            err(
                serde_json::json!({"disruption_budget": {"max_draining": "150%"}}),
                &types
            )
            .contains("rayscale.disruption_budget.max_draining")
        );
        assert!(
            err(
                serde_json::json!({"disruption_budget": {"node_types": {"tpu": {}}}}),
                &types
            )
            .contains("rayscale.disruption_budget.node_types.tpu: unknown node type")
        );
        assert!(
            err(
                serde_json::json!({"disruption_budget": {"blocked": ["Mon 9-5"]}}),
                &types
            )
            .contains("rayscale.disruption_budget.blocked[0]")
        );
        let l = Limits::from_block(
            Some(&serde_json::json!({"autostop_minutes": 30,
                "consolidation": {"node_types": ["cpu"], "after_s": 60}})),
            "rayscale",
            &types,
            &[],
        )
        .expect("autostop and consolidation");
        assert_eq!(l.autostop_minutes, Some(30.0));
        let c = l.consolidation.as_ref().expect("consolidation");
        assert_eq!(
            (
                c.node_types.as_slice(),
                c.utilization_below,
                c.after_s,
                c.drain_deadline_s
            ),
            (&types[..1], 0.5, 60, 600)
        );
        for (v, says) in [
            (
                serde_json::json!({"autostop_minutes": 0}),
                "rayscale.autostop_minutes: expected a number of minutes > 0, got 0",
            ),
            (
                serde_json::json!({"consolidation": {"node_types": ["tpu"]}}),
                "rayscale.consolidation.node_types[0]: unknown node type \"tpu\"",
            ),
            (
                serde_json::json!({"consolidation": {"node_types": []}}),
                "rayscale.consolidation.node_types: expected at least one node type",
            ),
            (
                serde_json::json!({"consolidation": {"node_types": ["cpu"],
                    "utilization_below": 1.5}}),
                "rayscale.consolidation.utilization_below: expected a share in (0, 1]",
            ),
        ] {
            assert!(err(v, &types).contains(says), "{says}");
        }
        assert!(
            !Limits::from_block(None, "rayscale", &types, &[])
                .expect("none")
                .any()
        );
    }
}
