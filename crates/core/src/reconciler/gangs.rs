//! Atomic gangs (`rayscale.gangs: atomic`; off: nothing here runs and decisions stay
//! Ray's). The new nodes one decision launches for a pending placement group are one
//! gang, tagged `<pg id>#<decision time, ns>` in the instance table (which survives
//! restarts, and with it the gang's clock: its members' creation times). Each iteration, before the
//! scheduler runs, a gang whose group is still pending has failed when one of its
//! members failed before Ray ran on it (a capacity error, a boot failure, a timeout), or
//! when not every member runs Ray `timeout_s` after the launch. A failed gang's members
//! that carry no work are released (queued ones canceled, booting ones terminated,
//! running idle ones drained with Ray's rejectable idle drain), the types of its members
//! that did not come up are set aside for the unavailable-type TTL, and the scheduler,
//! which no longer counts the released nodes, plans the group again whole in the same
//! iteration. After `attempts` failures the group is set aside for the TTL: it is left
//! out of the scheduling and reported infeasible, with the reason.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::availability::{GangAttempts, UnavailableTypes};
use crate::config::ClusterConfig;
use crate::instance::{Instance, InstanceUpdateEvent};
use crate::model::{ClusterResourceState, GangRequest, InstanceStatus, TerminationCause};
use crate::scheduler::SchedulingRequest;

const SEC: i64 = 1_000_000_000;

/// The placement group id of a gang request: what Ray's details start with
/// (`<pg id hex>:<strategy>|<state>`). `None` when the details name none: such a gang is
/// scheduled as Ray would, never released.
pub fn gang_id(g: &GangRequest) -> Option<&str> {
    let (id, _) = g.details.split_once(':')?;
    let id = id.trim();
    (!id.is_empty() && !id.contains('#')).then_some(id)
}

/// The tag of the members of the gang launched for group `pg` by the decision at
/// `now_ns` (one tag per decision: a gang is what one decision launches).
pub fn gang_tag(pg: &str, now_ns: i64) -> String {
    format!("{pg}#{now_ns}")
}

fn tag_group(tag: &str) -> Option<&str> {
    tag.rsplit_once('#').map(|(pg, _)| pg)
}

/// What the check decided.
#[derive(Debug, Default)]
pub(super) struct GangCheck {
    /// Members to release.
    pub events: Vec<InstanceUpdateEvent>,
    /// Groups not launched for now (set aside after their last attempt).
    pub set_aside: Vec<String>,
    /// For the event log and the warnings.
    pub lines: Vec<String>,
}

/// Whether `i` failed before Ray ever ran on it.
fn failed_before_running(i: &Instance) -> bool {
    let ended = matches!(
        i.status,
        InstanceStatus::AllocationFailed
            | InstanceStatus::AllocationTimeout
            | InstanceStatus::RayInstallFailed
            | InstanceStatus::Terminating
            | InstanceStatus::TerminationFailed
            | InstanceStatus::Terminated
            | InstanceStatus::RayStopped
    );
    ended && i.status_since(InstanceStatus::RayRunning).is_none()
}

/// The release of member `i` (none for one that carries work, or cannot be released in
/// its status yet: a launch request in flight is released when it lands).
fn release(i: &Instance, idle: bool, why: &str) -> Option<InstanceUpdateEvent> {
    let to = match i.status {
        InstanceStatus::Queued => InstanceStatus::Terminated,
        InstanceStatus::Allocated | InstanceStatus::RayInstalling => InstanceStatus::Terminating,
        InstanceStatus::RayRunning if idle => InstanceStatus::RayStopRequested,
        _ => return None,
    };
    let mut e = InstanceUpdateEvent::transition(i.instance_id.clone(), i.version, to)
        .with_details(format!("released: {why}"));
    if to == InstanceStatus::RayStopRequested {
        e = e.with_stop_cause(TerminationCause::Gang.name());
    }
    Some(e)
}

/// The check of every gang in `table` at `now` with `config.gangs` (see the module docs;
/// nothing without it). `attempts` is the stored record per group, `unavailable` the
/// capacity memory, `unreadable` whether an instance's Ray row could not be read.
pub(super) fn check(
    config: &ClusterConfig,
    ray: &ClusterResourceState,
    table: &[Arc<Instance>],
    attempts: &mut BTreeMap<String, GangAttempts>,
    unavailable: &mut UnavailableTypes,
    now: i64,
    unreadable: &dyn Fn(&Instance) -> bool,
) -> GangCheck {
    let mut out = GangCheck::default();
    let Some(g) = &config.gangs else {
        return out;
    };
    let ttl_s = config.unavailable_type_ttl_s;
    let pending: BTreeMap<&str, &GangRequest> = ray
        .pending_gang_resource_requests
        .iter()
        .filter_map(|r| gang_id(r).map(|id| (id, r)))
        .collect();
    let mut gangs: BTreeMap<&str, Vec<&Instance>> = BTreeMap::new();
    for i in table {
        if let Some(tag) = i.gang.as_deref() {
            gangs.entry(tag).or_default().push(i);
        }
    }
    // The records follow the table: a gang tag no record of the table carries any more
    // is forgotten. The gangs of a group no longer pending were placed (or the group
    // went): they are settled, never judged again, should the group be pending again
    // (Ray reschedules a group whose node died). A group whose set-aside time ended
    // starts again from its first attempt.
    for tag in gangs.keys() {
        if let Some(pg) = tag_group(tag)
            && !pending.contains_key(pg)
        {
            let a = attempts.entry(pg.to_string()).or_default();
            if !a.failed_tags.iter().any(|t| t == tag) && !a.settled_tags.iter().any(|t| t == tag) {
                a.settled_tags.push(tag.to_string());
            }
        }
    }
    attempts.retain(|pg, a| {
        a.failed_tags.retain(|t| gangs.contains_key(t.as_str()));
        a.settled_tags.retain(|t| gangs.contains_key(t.as_str()));
        if !pending.contains_key(pg.as_str()) {
            a.failed = 0;
            a.set_aside_until_ns = None;
        } else if a.set_aside_until_ns.is_some_and(|t| t <= now) {
            a.set_aside_until_ns = None;
            a.failed = 0;
        }
        pending.contains_key(pg.as_str()) || !a.failed_tags.is_empty() || !a.settled_tags.is_empty()
    });
    let idle: BTreeMap<String, bool> = ray
        .node_states
        .iter()
        .map(|n| (n.node_id_hex(), n.is_idle()))
        .collect();
    let is_idle = |i: &Instance| {
        i.node_id
            .as_deref()
            .and_then(|n| idle.get(n))
            .copied()
            .unwrap_or(false)
    };
    for (tag, members) in gangs {
        let Some(pg) = tag_group(tag) else {
            continue;
        };
        if attempts
            .get(pg)
            .is_some_and(|a| a.failed_tags.iter().any(|t| t == tag))
        {
            // A gang given up before: what is left of it goes once it can (a launch in
            // flight when it lands, a member with work once it is idle), whether or not
            // its group is still pending: it was launched for an attempt that failed.
            let why = format!("gang {} was given up before", short(pg));
            for i in &members {
                if !unreadable(i) {
                    out.events.extend(release(i, is_idle(i), &why));
                }
            }
            continue;
        }
        if !pending.contains_key(pg)
            || attempts
                .get(pg)
                .is_some_and(|a| a.settled_tags.iter().any(|t| t == tag))
        {
            continue;
        }
        let n = members.len();
        let up = members
            .iter()
            .filter(|i| i.status == InstanceStatus::RayRunning)
            .count();
        let failed: Vec<&&Instance> = members
            .iter()
            .filter(|i| failed_before_running(i))
            .collect();
        let started = members
            .iter()
            .filter_map(|i| i.status_history.first().map(|c| c.timestamp_ns))
            .min()
            .unwrap_or(now);
        let age_s = now.saturating_sub(started) / SEC;
        let timed_out = age_s >= i64::try_from(g.timeout_s).unwrap_or(i64::MAX) && up < n;
        if failed.is_empty() && !timed_out {
            continue;
        }
        let mut types: BTreeMap<&str, u64> = BTreeMap::new();
        for i in &members {
            *types.entry(i.node_type.as_str()).or_default() += 1;
        }
        let shape = types
            .iter()
            .map(|(t, k)| format!("{k} x {t}"))
            .collect::<Vec<_>>()
            .join(" + ");
        let reason = if let Some(f) = failed.first() {
            let e = f
                .last_error
                .clone()
                .unwrap_or_else(|| f.status.name().to_string());
            format!(
                "{} of {n} failed before Ray ran ({}: {e})",
                failed.len(),
                f.node_type
            )
        } else {
            format!("{up} of {n} up after {age_s} s")
        };
        // The types of the members that did not come up are set aside for the TTL (a
        // capacity error set its own, with its zone, already).
        let mut set: Vec<&str> = Vec::new();
        for i in &members {
            let down =
                failed_before_running(i) || (timed_out && i.status != InstanceStatus::RayRunning);
            let by_capacity = i.status == InstanceStatus::AllocationFailed;
            if down && !by_capacity && !set.contains(&i.node_type.as_str()) {
                set.push(&i.node_type);
                unavailable.mark(
                    &i.node_type,
                    None,
                    &format!("gang {}: {reason}", short(pg)),
                    now,
                );
            }
        }
        let why = format!("gang {} ({shape}): {reason}", short(pg));
        let mut released = 0;
        let mut kept = 0;
        for i in &members {
            // A member whose Ray node's row could not be read is left alone.
            match (!unreadable(i))
                .then(|| release(i, is_idle(i), &why))
                .flatten()
            {
                Some(e) => {
                    released += 1;
                    out.events.push(e);
                }
                None if i.status == InstanceStatus::RayRunning => kept += 1,
                None => {}
            }
        }
        let a = attempts.entry(pg.to_string()).or_default();
        a.failed = a.failed.saturating_add(1);
        let attempt = a.failed;
        a.reason = reason.clone();
        a.failed_tags.push(tag.to_string());
        let kept_text = if kept > 0 {
            format!(", kept {kept} that carry work")
        } else {
            String::new()
        };
        if attempt >= g.attempts {
            // One TTL counted from when its types are back (a capacity error set them
            // aside for a TTL from now): meanwhile other work may use what the cloud has.
            let back = unavailable
                .active(now)
                .iter()
                .filter(|u| types.contains_key(u.node_type.as_str()))
                .map(|u| u.until_ns)
                .max()
                .unwrap_or(now)
                .max(now);
            let until = back.saturating_add(ttl_s.saturating_mul(SEC));
            a.set_aside_until_ns = Some(until);
            out.lines.push(format!(
                "{why}; released {released}{kept_text}; not satisfiable now after {attempt} \
                 attempts: not launched for the next {} s",
                until.saturating_sub(now) / SEC
            ));
        } else {
            out.lines.push(format!(
                "{why}; released {released}{kept_text}, retrying whole (attempt {} of {})",
                attempt + 1,
                g.attempts
            ));
        }
    }
    out.set_aside = attempts
        .iter()
        .filter(|(_, a)| a.set_aside_until_ns.is_some_and(|t| t > now))
        .map(|(pg, _)| pg.clone())
        .collect();
    out
}

/// Whether `i` is a live member of a gang given up (`attempts`' failed tags) that does
/// not run Ray: a launch in flight (released when it lands) or a member being released
/// (drained, terminated). It is no room for the scheduling, so that its group is planned
/// again whole; while it may still come to run Ray it holds its place under the max
/// ([`hold_places`]). A member that runs Ray (kept for its work, or back after Ray refused
/// its drain) is an ordinary node: room, counted under the max, stopped when idle (by
/// [`check`] while it is a given-up member, by Ray's idle timeout otherwise).
pub(super) fn given_up(i: &Instance, attempts: &BTreeMap<String, GangAttempts>) -> bool {
    let Some(tag) = i.gang.as_deref() else {
        return false;
    };
    !i.is_terminal()
        && i.status != InstanceStatus::RayRunning
        && tag_group(tag)
            .and_then(|pg| attempts.get(pg))
            .is_some_and(|a| a.failed_tags.iter().any(|t| t == tag))
}

/// Lowers the request's `max_workers` (per type and global) by the places the
/// [`given_up`] members that may still run Ray hold (Ray counts such an instance, a launch
/// in flight or a node whose drain may be refused, under the max; left out of the request
/// as room, they are counted here), never below what the request already counts, so that
/// no node is stopped for it. Nothing when none is held.
pub(super) fn hold_places(
    request: &mut SchedulingRequest,
    table: &[Arc<Instance>],
    attempts: &BTreeMap<String, GangAttempts>,
) {
    let mut held: BTreeMap<&str, u64> = BTreeMap::new();
    for i in table
        .iter()
        .filter(|i| i.status.can_reach_ray_running() && given_up(i, attempts))
    {
        *held.entry(i.node_type.as_str()).or_default() += 1;
    }
    if held.is_empty() {
        return;
    }
    let counted = |t: Option<&str>| -> u64 {
        let n = request
            .instances
            .iter()
            .filter(|x| x.status.can_reach_ray_running() && t.is_none_or(|t| x.node_type == t))
            .count();
        u64::try_from(n).unwrap_or(u64::MAX)
    };
    let lowered =
        |max: u64, held: u64, counted: u64| max.saturating_sub(held).max(counted.min(max));
    for nt in &mut request.node_types {
        if let (Some(max), Some(&h)) = (nt.max_workers, held.get(nt.name.as_str())) {
            nt.max_workers = Some(lowered(max, h, counted(Some(&nt.name))));
        }
    }
    if let Some(max) = request.max_num_nodes {
        let all = held.values().fold(0u64, |a, b| a.saturating_add(*b));
        request.max_num_nodes = Some(lowered(max, all, counted(None)));
    }
}

/// `ray` without the nodes of [`given_up`] gang members, `None` when there is none.
pub(super) fn without_given_up(
    ray: &ClusterResourceState,
    table: &[Arc<Instance>],
    attempts: &BTreeMap<String, GangAttempts>,
) -> Option<ClusterResourceState> {
    let out: std::collections::BTreeSet<&str> = table
        .iter()
        .filter(|i| given_up(i, attempts))
        .filter_map(|i| i.node_id.as_deref())
        .collect();
    if out.is_empty() {
        return None;
    }
    let mut s = ray.clone();
    s.node_states
        .retain(|n| !out.contains(n.node_id_hex().as_str()));
    Some(s)
}

/// A group id short enough for a line (Ray's are 36 hex digits).
fn short(pg: &str) -> &str {
    pg.get(..8).unwrap_or(pg)
}
