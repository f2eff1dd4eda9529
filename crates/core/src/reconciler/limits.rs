//! The operator's limits (`config::limits`), applied to the scheduler's decision before
//! it is recorded: the cost cap trims launches; the disruption budget, its blocked
//! windows, the delay after a launch and the minimum lifetime hold voluntary stops.
//! With no limit set, the decision passes unchanged (Ray's).

use super::*;
use crate::config::limits::Limits;
use crate::explain::{CostCapped, StopHold};
use crate::scheduler::NodeView;

/// What the limits did to one decision.
#[derive(Debug, Default)]
pub(super) struct Limited {
    /// Voluntary stops held: (instance id, Ray's cause, the hold).
    pub held: Vec<(String, String, StopHold)>,
    /// Launches the cost cap refused, by type.
    pub capped: CostCapped,
    /// Gangs (indices into the request's gang requests) the cost cap refused whole.
    pub capped_gangs: BTreeSet<usize>,
}

fn live(i: &Instance) -> bool {
    !matches!(
        i.status,
        InstanceStatus::Terminated | InstanceStatus::AllocationFailed
    )
}

fn draining(i: &Instance) -> bool {
    matches!(
        i.status,
        InstanceStatus::RayStopRequested | InstanceStatus::RayStopping
    )
}

/// When `i` was asked to stop for idleness or an outdated config, if at or after `since`.
fn voluntary_stop_at(i: &Instance, since: i64) -> bool {
    let voluntary = matches!(
        i.stop_cause.as_deref(),
        Some("IDLE" | "OUTDATED" | "CONSOLIDATION")
    );
    voluntary
        && i.status_history
            .iter()
            .any(|c| c.status == InstanceStatus::RayStopRequested && c.timestamp_ns >= since)
}

/// Applies `limits` to `decision` (whose planned nodes are `views`) at `now_ns` over the
/// instance table `table`.
pub(super) fn apply(
    limits: &Limits,
    config: &ClusterConfig,
    decision: &mut Decision,
    views: &[NodeView],
    table: &[Arc<Instance>],
    now_ns: i64,
) -> Limited {
    let mut out = Limited::default();
    if !limits.any() {
        return out;
    }
    // The cost cap: launches in the decision's order while the cost stays within it.
    if let Some(cap) = limits.max_hourly_cost {
        let price = |t: &str| {
            config
                .expander
                .prices
                .iter()
                .find(|(n, _)| n == t)
                .map_or(0.0, |(_, p)| *p)
        };
        let mut cost: f64 = table
            .iter()
            .filter(|i| live(i))
            .map(|i| price(&i.node_type))
            .sum();
        // A gang (the new nodes of one placement group) is launched whole or not at all,
        // before the other launches (Ray's scheduler places gangs before tasks).
        let mut gangs: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for v in views.iter().filter(|v| v.fate == NodeFate::Launch) {
            if let Some(g) = v.gang {
                gangs.entry(g).or_default().push(&v.node_type);
            }
        }
        let mut in_gangs: BTreeMap<&str, u64> = BTreeMap::new();
        let mut gang_kept: BTreeMap<&str, u64> = BTreeMap::new();
        for (g, types) in &gangs {
            let whole: f64 = types.iter().map(|t| price(t)).sum();
            let fits = cost + whole <= cap + 1e-9;
            if fits {
                cost += whole;
            } else {
                out.capped_gangs.insert(*g);
            }
            for t in types {
                *in_gangs.entry(t).or_default() += 1;
                if fits {
                    *gang_kept.entry(t).or_default() += 1;
                }
            }
        }
        for (t, count) in &mut decision.launch {
            let of = |m: &BTreeMap<&str, u64>| m.get(t.as_str()).copied().unwrap_or(0);
            let plain = count.saturating_sub(of(&in_gangs));
            let mut plain_kept = 0u64;
            while plain_kept < plain && cost + price(t) <= cap + 1e-9 {
                cost += price(t);
                plain_kept += 1;
            }
            let kept = of(&gang_kept).saturating_add(plain_kept).min(*count);
            if kept < *count {
                out.capped.insert(t.clone(), (kept, cost, cap));
                *count = kept;
            }
        }
        decision.launch.retain(|(_, n)| *n > 0);
    }
    // Voluntary stops.
    let by_id: HashMap<&str, &Instance> = table
        .iter()
        .map(|i| (i.instance_id.as_str(), &**i))
        .collect();
    // Counted once per decision, by type ("" for the cluster): live workers, draining
    // ones, and voluntary stops started within each budget's window.
    let mut live_by: HashMap<&str, u64> = HashMap::default();
    let mut draining_by: HashMap<&str, u64> = HashMap::default();
    for i in table.iter().filter(|i| live(i) && !i.is_head) {
        for k in ["", i.node_type.as_str()] {
            *live_by.entry(k).or_default() += 1;
            if draining(i) {
                *draining_by.entry(k).or_default() += 1;
            }
        }
    }
    let mut stops_by: HashMap<&str, u64> = HashMap::default();
    if let Some(b) = &limits.budget {
        let window = |budget: &crate::config::limits::Budget| {
            now_ns.saturating_sub((budget.window_s as i64).saturating_mul(SEC))
        };
        let count = |t: Option<&str>, since: i64| {
            table
                .iter()
                .filter(|x| !x.is_head && t.is_none_or(|t| x.node_type == t))
                .filter(|x| voluntary_stop_at(x, since))
                .count() as u64
        };
        if b.cluster.max_stops.is_some() {
            stops_by.insert("", count(None, window(&b.cluster)));
        }
        for (t, budget) in b.node_types.iter().filter(|(_, b)| b.max_stops.is_some()) {
            stops_by.insert(t.as_str(), count(Some(t), window(budget)));
        }
    }
    let get = |m: &HashMap<&str, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    let last_launch = table
        .iter()
        .filter_map(|i| i.status_since(InstanceStatus::Requested))
        .max();
    // Stops admitted in this decision, by type (and the cluster's under "").
    let mut admitted: HashMap<String, u64> = HashMap::default();
    let mut held = Vec::new();
    decision.terminate.retain(|t| {
        let voluntary = matches!(
            t.cause,
            TerminationCause::Idle | TerminationCause::Outdated | TerminationCause::Consolidation
        );
        let Some(i) = by_id.get(t.instance_id.as_str()) else {
            return true;
        };
        if !voluntary || i.status != InstanceStatus::RayRunning {
            return true;
        }
        let hold = (|| {
            if let Some(b) = &limits.budget
                && let Some(w) = b.blocked.iter().find(|w| w.contains(now_ns))
            {
                return Some(StopHold::Blocked {
                    window: w.text.clone(),
                });
            }
            if matches!(
                t.cause,
                TerminationCause::Idle | TerminationCause::Consolidation
            ) {
                if let (Some(d), Some(at)) = (limits.scale_down_delay_after_launch_s, last_launch) {
                    let until = at.saturating_add((d as i64).saturating_mul(SEC));
                    if now_ns < until {
                        return Some(StopHold::DelayAfterLaunch { until_ns: until });
                    }
                }
                if let (Some(l), Some(up)) = (
                    limits.min_node_lifetime_s,
                    i.status_history
                        .iter()
                        .find(|c| c.status == InstanceStatus::RayRunning)
                        .map(|c| c.timestamp_ns),
                ) {
                    let until = up.saturating_add((l as i64).saturating_mul(SEC));
                    if now_ns < until {
                        return Some(StopHold::MinLifetime { until_ns: until });
                    }
                }
            }
            let b = limits.budget.as_ref()?;
            let budgets = [
                (None, Some(&b.cluster)),
                (Some(i.node_type.as_str()), b.node_types.get(&i.node_type)),
            ];
            for (whose, budget) in budgets {
                let Some(budget) = budget else { continue };
                let key = whose.unwrap_or("");
                let now_admitted = admitted.get(key).copied().unwrap_or(0);
                if let Some(max) = budget.max_draining {
                    let max = max.of(get(&live_by, key));
                    let d = get(&draining_by, key) + now_admitted;
                    if d >= max {
                        return Some(StopHold::Draining {
                            node_type: whose.map(str::to_string),
                            draining: d,
                            max,
                        });
                    }
                }
                if let Some(max) = budget.max_stops {
                    let stops = get(&stops_by, key) + now_admitted;
                    if stops >= max {
                        return Some(StopHold::Stops {
                            node_type: whose.map(str::to_string),
                            max,
                            window_s: budget.window_s,
                        });
                    }
                }
            }
            None
        })();
        match hold {
            Some(h) => {
                held.push((t.instance_id.clone(), t.cause.name().to_string(), h));
                false
            }
            None => {
                *admitted.entry(String::new()).or_default() += 1;
                *admitted.entry(i.node_type.clone()).or_default() += 1;
                true
            }
        }
    });
    out.held = held;
    out
}
