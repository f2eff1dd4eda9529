//! rayscale's own scale-downs in virtual time: consolidation (opt-in per type) and
//! autostop; each off by default.

use super::tests::World;
use super::*;
use crate::testing::{demand, res};

/// Two 4-CPU types, `w` and `o`; `rayscale` as the `rayscale:` block, the idle timeout
/// long (these tests are about other stops).
fn config(rayscale: &str, w_min: u64) -> String {
    format!(
        "cluster_name: t\nmax_workers: 10\nidle_timeout_minutes: 100\nupscaling_speed: 100\n\
         head_node_type: head\nprovider: {{type: local_processes}}\n\
         available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n  \
         w: {{resources: {{CPU: 4}}, min_workers: {w_min}, max_workers: 6, node_config: {{}}}}\n  \
         o: {{resources: {{CPU: 4, o: 1}}, max_workers: 6, node_config: {{}}}}\n\
         rayscale: {rayscale}\n"
    )
}

/// `n` workers of type `t` launched and running, each with `used` of its 4 CPUs in use.
fn running(w: &mut World, t: &str, n: u64, used: f64) {
    let r: &[(&str, f64)] = if t == "o" {
        &[("CPU", 4.0), ("o", 1.0)]
    } else {
        &[("CPU", 4.0)]
    };
    w.ray.pending_resource_requests = vec![demand(r, n)];
    let out = w.tick();
    w.cloud_fulfils(&out);
    w.ray_joins();
    w.ray.pending_resource_requests.clear();
    for node in w.ray.node_states.iter_mut().skip(1) {
        if node.ray_node_type_name == t && node.total_resources.get("CPU") != res(r).get("CPU") {
            node.total_resources = res(r);
            let mut avail: Vec<(&str, f64)> = r.to_vec();
            avail[0].1 = 4.0 - used;
            node.available_resources = res(&avail);
        }
    }
    w.now += SEC;
    w.tick();
}

fn use_cpus(w: &mut World, instance: &str, used: f64) {
    let cid = w.instance(instance).cloud_instance_id.expect("cloud id");
    let n = w
        .ray
        .node_states
        .iter_mut()
        .find(|n| n.instance_id == cid)
        .expect("node");
    let extra: Vec<(String, f64)> = n
        .total_resources
        .iter()
        .filter(|(k, _)| *k != "CPU")
        .map(|(k, v)| (k.to_string(), crate::model::resources::to_f64(v)))
        .collect();
    let mut avail = vec![("CPU".to_string(), 4.0 - used)];
    avail.extend(extra);
    n.available_resources = crate::model::ResourceMap::from_f64_pairs(avail);
}

fn deadline_drains(out: &Outcome) -> Vec<(String, i64)> {
    out.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Drain {
                instance_id,
                deadline_ns: Some(d),
                idle: false,
                ..
            } => Some((instance_id.clone(), *d)),
            _ => None,
        })
        .collect()
}

fn with_cause(w: &World, cause: &str) -> Vec<String> {
    let (_, all) = w.im.get_instances().expect("table");
    let mut v: Vec<String> = all
        .into_iter()
        .filter(|i| i.stop_cause.as_deref() == Some(cause))
        .map(|i| i.instance_id)
        .collect();
    v.sort();
    v
}

const CONSOLIDATE: &str = "{consolidation: {node_types: [w], utilization_below: 0.6, after_s: 60, drain_deadline_s: 120}}";

#[test]
fn three_half_empty_nodes_lose_one_and_a_load_that_fits_nowhere_stays() {
    let mut w = World::new(&config(CONSOLIDATE, 0));
    running(&mut w, "w", 3, 2.0);
    assert_eq!(w.count(InstanceStatus::RayRunning), 3);
    // Below the threshold, but not for 60 s yet.
    for _ in 0..5 {
        w.now += 10 * SEC;
        let out = w.tick();
        assert!(deadline_drains(&out).is_empty());
    }
    w.now += 15 * SEC;
    let out = w.tick();
    // The least used first (all alike: the first id); drained with its deadline.
    let drains = deadline_drains(&out);
    assert_eq!(drains, vec![("i1".to_string(), w.now + 120 * SEC)]);
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopRequested);
    assert_eq!(w.instance("i1").drain_deadline_ns, Some(w.now + 120 * SEC));
    assert!(out.decision.as_ref().is_some_and(|d| {
        d.terminate
            .iter()
            .any(|t| t.cause == TerminationCause::Consolidation)
    }));
    // Ray drains it; its work runs on; no second node goes meanwhile: the room left on
    // the third is the drained node's load's, counted in every trial.
    let cid = w.instance("i1").cloud_instance_id.expect("cid");
    for n in w.ray.node_states.iter_mut() {
        if n.instance_id == cid {
            n.status = Some(NodeStatus::Draining);
        }
    }
    for _ in 0..10 {
        w.now += 10 * SEC;
        let out = w.tick();
        assert!(deadline_drains(&out).is_empty());
        assert_eq!(w.instance("i1").status, InstanceStatus::RayStopping);
    }
    // The deadline passes: the instance is terminated (its tasks are retried elsewhere).
    w.now += 30 * SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    assert!(out.effects.iter().any(|e| matches!(e,
        Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids == &vec![cid.clone()])));
    w.cloud.retain(|c| c.cloud_instance_id != cid);
    w.ray.node_states.retain(|n| n.instance_id != cid);
    // Its task re-runs on i2, which is full now; i3 is still half empty, but its load
    // fits on no other node: it stays, however long.
    use_cpus(&mut w, "i2", 4.0);
    for _ in 0..30 {
        w.now += 10 * SEC;
        let out = w.tick();
        assert!(deadline_drains(&out).is_empty());
    }
    assert_eq!(w.instance("i2").status, InstanceStatus::RayRunning);
    assert_eq!(w.instance("i3").status, InstanceStatus::RayRunning);
    assert_eq!(with_cause(&w, "CONSOLIDATION"), vec!["i1".to_string()]);
}

#[test]
fn a_type_not_opted_in_is_never_drained_and_an_opted_in_one_is() {
    let mut w = World::new(&config(CONSOLIDATE, 0));
    running(&mut w, "o", 2, 1.0);
    for _ in 0..30 {
        w.now += 10 * SEC;
        let out = w.tick();
        assert!(deadline_drains(&out).is_empty());
    }
    assert!(with_cause(&w, "CONSOLIDATION").is_empty());
    assert!(w.avail.clocks.low_since_ns.is_empty());
    // The same nodes with their type opted in: one goes.
    let mut w = World::new(&config(
        "{consolidation: {node_types: [o], utilization_below: 0.6, after_s: 60}}",
        0,
    ));
    running(&mut w, "o", 2, 1.0);
    let mut drained = Vec::new();
    for _ in 0..10 {
        w.now += 10 * SEC;
        drained.extend(deadline_drains(&w.tick()));
    }
    assert_eq!(drained.len(), 1, "{drained:?}");
    // The default deadline: 600 s.
    assert_eq!(
        w.instance(&drained[0].0).drain_deadline_ns,
        Some(drained[0].1)
    );
}

#[test]
fn pending_demand_min_workers_and_blocked_windows_keep_nodes() {
    // min_workers 2 of w: neither may go.
    let mut w = World::new(&config(CONSOLIDATE, 2));
    let out = w.tick();
    w.cloud_fulfils(&out);
    w.ray_joins();
    for n in w.ray.node_states.iter_mut().skip(1) {
        n.total_resources = res(&[("CPU", 4.0)]);
        n.available_resources = res(&[("CPU", 3.0)]);
    }
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::RayRunning), 2);
    for _ in 0..12 {
        w.now += 10 * SEC;
        assert!(deadline_drains(&w.tick()).is_empty());
    }
    let mut w = World::new(&config(CONSOLIDATE, 0));
    running(&mut w, "w", 2, 1.0);
    // Pending demand (that fits nowhere: a GPU) holds consolidation.
    w.ray.pending_resource_requests = vec![demand(&[("GPU", 1.0)], 1)];
    for _ in 0..12 {
        w.now += 10 * SEC;
        assert!(deadline_drains(&w.tick()).is_empty());
    }
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    assert_eq!(deadline_drains(&w.tick()).len(), 1);
    // A blocked window holds it as it holds an idle stop.
    let mut w = World::new(&config(
        "{consolidation: {node_types: [w], utilization_below: 0.6, after_s: 60}, \
         disruption_budget: {blocked: [\"Mon-Sun 00:00-24:00\"]}}",
        0,
    ));
    running(&mut w, "w", 2, 1.0);
    for _ in 0..12 {
        w.now += 10 * SEC;
        assert!(deadline_drains(&w.tick()).is_empty());
    }
    assert!(with_cause(&w, "CONSOLIDATION").is_empty());
}

/// Two `w` nodes a quarter used, consolidation on: after 80 s, the drains made.
fn two_quarter_used_nodes_one_drained() -> (World, Vec<(String, i64)>) {
    let mut w = World::new(&config(CONSOLIDATE, 0));
    running(&mut w, "w", 2, 1.0);
    let mut drained = Vec::new();
    for _ in 0..8 {
        w.now += 10 * SEC;
        drained.extend(deadline_drains(&w.tick()));
    }
    (w, drained)
}

#[test]
fn a_drained_node_whose_work_ends_goes_before_its_deadline() {
    let (mut w, drained) = two_quarter_used_nodes_one_drained();
    let [(id, deadline)] = &drained[..] else {
        panic!("{drained:?}")
    };
    let cid = w.instance(id).cloud_instance_id.expect("cid");
    for n in w.ray.node_states.iter_mut() {
        if n.instance_id == cid {
            n.status = Some(NodeStatus::Draining);
        }
    }
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance(id).status, InstanceStatus::RayStopping);
    // Its task ends: nothing in use, the instance goes at once.
    use_cpus(&mut w, id, 0.0);
    w.now += SEC;
    w.tick();
    assert!(w.now < *deadline);
    assert_eq!(w.instance(id).status, InstanceStatus::Terminating);
}

/// Autostop after one minute, `min_workers: 1`, two workers up; every node idle.
fn quiet_world() -> World {
    let mut w = World::new(&config("{autostop_minutes: 1}", 1));
    running(&mut w, "w", 2, 0.0);
    assert_eq!(w.count(InstanceStatus::RayRunning), 2);
    for n in w.ray.node_states.iter_mut() {
        n.idle_duration_ms = 1_000;
    }
    w
}

#[test]
fn autostop_stops_every_worker_after_the_quiet_time_and_then_the_head_is_due() {
    let mut w = quiet_world();
    let t0 = w.now;
    let out = w.tick();
    let v = out.autostop.clone().expect("autostop is on");
    assert_eq!(v.quiet_since_ns, Some(t0));
    assert_eq!(v.stop_at_ns, Some(t0 + 60 * SEC));
    assert!(!v.head_due && v.stopped_at_ns.is_none());
    // Demand resets the clock.
    w.now += 30 * SEC;
    w.ray.pending_resource_requests = vec![demand(&[("GPU", 1.0)], 1)];
    assert_eq!(w.tick().autostop.and_then(|v| v.quiet_since_ns), None);
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    let since = w.now;
    w.tick();
    // So does a busy node.
    w.now += 40 * SEC;
    w.ray.node_states[1].idle_duration_ms = 0;
    assert_eq!(w.tick().autostop.and_then(|v| v.quiet_since_ns), None);
    assert_ne!(since, 0);
    w.ray.node_states[1].idle_duration_ms = 1_000;
    w.now += SEC;
    let since = w.now;
    w.tick();
    w.now = since + 59 * SEC;
    let out = w.tick();
    assert!(out.autostop.is_some_and(|v| v.stopped_at_ns.is_none()));
    assert_eq!(w.count(InstanceStatus::RayRunning), 2);
    // A minute of quiet: every worker is drained as idle (Ray refuses it on a node that
    // got work meanwhile), min_workers notwithstanding.
    w.now = since + 60 * SEC;
    let out = w.tick();
    let v = out.autostop.clone().expect("view");
    assert_eq!(v.stopped_at_ns, Some(w.now));
    assert!(!v.head_due);
    assert_eq!(with_cause(&w, "AUTOSTOP"), vec!["i1", "i2"]);
    let idle_drains = out
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::Drain { idle: true, .. }))
        .count();
    assert_eq!(idle_drains, 2);
    // Ray drains them: DRAINING, no idle time, nothing in use. Still quiet: nothing is
    // launched for min_workers (whose nodes are no capacity now).
    for n in w.ray.node_states.iter_mut().skip(1) {
        n.status = Some(NodeStatus::Draining);
        n.idle_duration_ms = 0;
    }
    w.now += SEC;
    let out = w.tick();
    assert!(
        out.autostop
            .as_ref()
            .is_some_and(|v| v.stopped_at_ns.is_some())
    );
    assert!(!out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
    assert_eq!(w.count(InstanceStatus::RayStopping), 2);
    // The nodes stop and their instances go; nothing is launched for min_workers.
    for n in w.ray.node_states.iter_mut().skip(1) {
        n.status = Some(NodeStatus::Dead);
    }
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Terminating), 2);
    w.cloud.clear();
    w.ray.node_states.truncate(1);
    w.now += SEC;
    let out = w.tick();
    assert!(out.autostop.as_ref().is_some_and(|v| v.head_due));
    assert!(out.decision.as_ref().is_some_and(|d| d.launch.is_empty()));
    assert!(!out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
    assert_eq!(w.count(InstanceStatus::Terminated), 2);
    // Work comes back before the head went: the cluster scales as ever.
    w.ray.pending_resource_requests = vec![demand(&[("CPU", 4.0)], 1)];
    w.now += SEC;
    let out = w.tick();
    assert!(
        out.autostop
            .as_ref()
            .is_some_and(|v| v.stopped_at_ns.is_none())
    );
    assert!(out.effects.iter().any(|e| matches!(e, Effect::Launch(_))));
}

#[test]
fn autostop_waits_on_unreadable_rows_and_is_off_by_default() {
    let mut w = quiet_world();
    w.ray.unreadable_nodes.push(crate::model::UnreadableNode {
        node_id: vec![9; 4],
        instance_id: "x".into(),
        reason: "garbage".into(),
        ..Default::default()
    });
    for _ in 0..10 {
        w.now += 30 * SEC;
        let out = w.tick();
        assert_eq!(out.autostop.and_then(|v| v.quiet_since_ns), None);
    }
    assert!(with_cause(&w, "AUTOSTOP").is_empty());
    // Off: no view, no clock.
    let mut w = World::new(&config("{}", 1));
    running(&mut w, "w", 2, 0.0);
    for n in w.ray.node_states.iter_mut() {
        n.idle_duration_ms = 1_000;
    }
    w.now += 3600 * SEC;
    let out = w.tick();
    assert!(out.autostop.is_none());
    assert_eq!(w.avail.clocks, crate::availability::LimitClocks::default());
    assert_eq!(w.count(InstanceStatus::RayRunning), 2);
}

#[test]
fn autostop_is_refused_on_kuberay() {
    let c = config("{autostop_minutes: 30}", 0).replace("type: local_processes", "type: kuberay");
    let err = ClusterConfig::from_yaml_str(&c, "rc.yaml").expect_err("refused");
    assert!(
        err.to_string()
            .contains("rayscale.autostop_minutes: not on KubeRay"),
        "{err}"
    );
}

#[test]
fn autostop_says_it_ten_minutes_before_once_and_when_work_comes_back() {
    let mut said = autostop::AutostopSaid::default();
    let t = 1_000 * SEC;
    let view = |since: Option<i64>, stopped: bool| AutostopView {
        quiet_since_ns: since,
        stop_at_ns: since.map(|s| s + 3600 * SEC),
        stopped_at_ns: stopped.then_some(t + 3600 * SEC),
        workers_left: 2,
        head_due: false,
    };
    // Quiet for an hour's autostop: nothing said for the first 50 minutes.
    assert!(view(Some(t), false).lines(&mut said, t).is_empty());
    assert!(
        view(Some(t), false)
            .lines(&mut said, t + 2999 * SEC)
            .is_empty()
    );
    let l = view(Some(t), false).lines(&mut said, t + 3000 * SEC);
    assert_eq!(l.len(), 1);
    assert!(l[0].contains("every worker stops at 01:16:40 UTC"), "{l:?}");
    assert!(
        view(Some(t), false)
            .lines(&mut said, t + 3001 * SEC)
            .is_empty()
    );
    // Work arrives: said once; a new quiet period is warned again.
    assert_eq!(
        view(None, false).lines(&mut said, t + 3100 * SEC),
        vec!["Autostop: work arrived; the cluster stays up.".to_string()]
    );
    assert!(
        view(None, false)
            .lines(&mut said, t + 3101 * SEC)
            .is_empty()
    );
    let t2 = t + 3200 * SEC;
    let v2 = AutostopView {
        quiet_since_ns: Some(t2),
        stop_at_ns: Some(t2 + 3600 * SEC),
        ..Default::default()
    };
    assert_eq!(v2.lines(&mut said, t2 + 3000 * SEC).len(), 1);
    let stopped = AutostopView {
        stopped_at_ns: Some(t2 + 3600 * SEC),
        workers_left: 2,
        ..v2.clone()
    };
    let l = stopped.lines(&mut said, t2 + 3600 * SEC);
    assert_eq!(l.len(), 1);
    assert!(l[0].starts_with("Autostop: stopping every worker (2 worker(s) left) after 60 min"));
    assert!(stopped.lines(&mut said, t2 + 3601 * SEC).is_empty());
}

#[test]
fn a_refused_consolidation_drain_leaves_no_deadline_behind() {
    let (mut w, drained) = two_quarter_used_nodes_one_drained();
    let [(id, _)] = &drained[..] else {
        panic!("{drained:?}")
    };
    assert!(w.instance(id).drain_deadline_ns.is_some());
    // The GCS call fails: back to RAY_RUNNING, with neither the cause nor the deadline,
    // so that a later idle stop is Ray's refusable idle drain.
    w.rejections.push(DrainRejection {
        instance_id: id.clone(),
        reason: "drain failed: unavailable".into(),
    });
    w.now += SEC;
    w.tick();
    let i = w.instance(id);
    assert_eq!(i.status, InstanceStatus::RayRunning);
    assert_eq!((i.stop_cause.as_deref(), i.drain_deadline_ns), (None, None));
    assert!(i.idle_stop());
}

#[test]
fn the_clocks_start_again_after_a_gap_with_no_rayscale() {
    let mut w = quiet_world();
    let t0 = w.now;
    assert_eq!(w.tick().autostop.and_then(|v| v.quiet_since_ns), Some(t0));
    // No iteration for ten minutes (rayscale down): what happened meanwhile is not known,
    // so the quiet time starts again rather than stopping every worker at once.
    w.now += 600 * SEC;
    let out = w.tick();
    assert_eq!(out.autostop.and_then(|v| v.quiet_since_ns), Some(w.now));
    assert!(with_cause(&w, "AUTOSTOP").is_empty());
    // An iteration every few seconds keeps the clock.
    for _ in 0..20 {
        w.now += 5 * SEC;
        w.tick();
    }
    assert_eq!(with_cause(&w, "AUTOSTOP").len(), 2);
}
