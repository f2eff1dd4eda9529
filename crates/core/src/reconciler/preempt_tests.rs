//! Preemption in virtual time: a notice drains a spot node; with
//! `rayscale.preemption.enabled` its replacement is launched in the same iteration, away
//! from the preempted zone, and the type gives way to on-demand once every zone is out;
//! without it, decisions stay Ray's.

use super::tests::{World, cpu_demand};
use super::*;
use crate::testing::{FakeProvider, res};

/// A spot type with two zones (the fake's) and an on-demand type after it.
const SPOT: &str = r#"
cluster_name: t
max_workers: 20
idle_timeout_minutes: 1
upscaling_speed: 100
head_node_type: head
provider: {type: local_processes}
rayscale: {preemption: {enabled: true}}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  spot: {resources: {CPU: 2}, max_workers: 8, node_config: {}}
  od: {resources: {CPU: 2}, max_workers: 8, node_config: {}}
"#;

fn launches(out: &Outcome) -> Vec<LaunchRequest> {
    out.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Launch(l) => Some(l.clone()),
            _ => None,
        })
        .collect()
}

/// One spot node launched for 2 CPUs of demand (the zones z1 and z2 open).
fn spot_launched(config: &str, cloud: &FakeProvider) -> World {
    let mut w = World::new(config);
    cloud.set_zones("spot", &[("z1", Some(1)), ("z2", Some(1))]);
    w.ray.pending_resource_requests = cpu_demand(2);
    let out = w.tick();
    assert_eq!(launches(&out)[0].node_type, "spot");
    w.apply_to(cloud, &out);
    w
}

/// Its node joined with both CPUs in use, and the demand gone.
fn joins_busy(w: &mut World) {
    w.ray_joins();
    w.ray.pending_resource_requests.clear();
    w.ray.node_states[1].available_resources = res(&[("CPU", 0.0)]);
}

/// One busy spot node (both CPUs in use) in zone z1, no pending demand.
fn busy_spot(config: &str, cloud: &FakeProvider) -> World {
    let mut w = spot_launched(config, cloud);
    joins_busy(&mut w);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayRunning);
    assert_eq!(w.cloud[0].zone.as_deref(), Some("z1"));
    w
}

/// Ray drains node `k` (of `w.ray.node_states`) on the cloud's notice.
fn notice(w: &mut World, k: usize, deadline_s: i64) {
    w.ray.node_states[k].status = Some(NodeStatus::Draining);
    w.notices.push(Notice {
        cloud_instance_id: w.ray.node_states[k].instance_id.clone(),
        source: "aws-spot-interruption".into(),
        deadline_ns: Some(w.now + deadline_s * SEC),
        message: "terminate".into(),
    });
}

/// After a tick that read the notice: `i1` is stopping, said preempted by the notice
/// (its status details returned), and `out` launched one node for what ran on it.
fn stopped_for_a_notice(w: &World, out: &Outcome) -> (String, LaunchRequest) {
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::RayStopping);
    let details = i1.status_history.last().expect("history").details.clone();
    assert!(
        details.contains("preempted (AWS spot interruption"),
        "{details}"
    );
    let l = launches(out);
    assert_eq!(l.len(), 1, "{l:?}");
    (details, l[0].clone())
}

#[test]
fn a_notice_launches_the_replacement_in_the_same_iteration_in_another_zone() {
    let cloud = FakeProvider::new();
    let mut w = busy_spot(SPOT, &cloud);
    notice(&mut w, 1, 120);
    w.now += SEC;
    let out = w.tick();
    let (details, l) = stopped_for_a_notice(&w, &out);
    assert!(
        details.contains("preempted (AWS spot interruption, deadline"),
        "{details}"
    );
    // What ran on it is demand now: one spot node, not in z1.
    assert_eq!((l.node_type.as_str(), l.count), ("spot", 1));
    assert_eq!(l.avoid_zones, ["z1"]);
    assert_eq!(out.drained_outside.len(), 1);
    let d = &out.drained_outside[0];
    assert!(d.new && d.zone.as_deref() == Some("z1"));
    assert!(
        d.event_line()
            .starts_with("Node 01010101 of type spot preempted (AWS spot interruption"),
        "{}",
        d.event_line()
    );
    assert!(
        out.report
            .unavailable_types
            .iter()
            .any(|u| u.node_type == "spot" && u.zone.as_deref() == Some("z1"))
    );
    w.apply_to(&cloud, &out);
    assert_eq!(
        w.cloud[1].zone.as_deref(),
        Some("z2"),
        "the replacement avoids z1"
    );

    // The next iteration launches nothing more (the replacement holds the demand).
    w.now += SEC;
    let out = w.tick();
    assert!(launches(&out).is_empty(), "{:?}", launches(&out));
    assert!(!out.drained_outside[0].new);

    // The cloud takes the node at its deadline: the record ends as any other.
    w.now += 120 * SEC;
    let gone = w
        .instance("i1")
        .cloud_instance_id
        .clone()
        .unwrap_or_default();
    w.cloud.retain(|c| c.cloud_instance_id != gone);
    w.ray.node_states.remove(1);
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminated);
}

#[test]
fn with_every_zone_out_the_demand_moves_to_on_demand() {
    let cloud = FakeProvider::new();
    let mut w = busy_spot(SPOT, &cloud);
    notice(&mut w, 1, 120);
    w.now += SEC;
    let out = w.tick();
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    w.ray_joins();
    let k = w.ray.node_states.len() - 1;
    w.ray.node_states[k].available_resources = res(&[("CPU", 0.0)]);
    w.now += SEC;
    w.tick();
    // The replacement (z2) is preempted too: no spot zone is left.
    notice(&mut w, k, 120);
    w.now += SEC;
    let out = w.tick();
    let l = launches(&out);
    assert_eq!(l[0].node_type, "spot");
    assert_eq!(l[0].avoid_zones, ["z1", "z2"]);
    w.apply_to(&cloud, &out);
    assert!(
        w.errors.iter().any(|e| matches!(
            &e.kind,
            crate::provider::ProviderErrorKind::Capacity { zone: None, .. }
        )),
        "{:?}",
        w.errors
    );
    // The fast failure makes the type unavailable: on-demand takes the demand.
    w.now += SEC;
    let out = w.tick();
    let l = launches(&out);
    assert_eq!(
        l.iter().map(|l| l.node_type.as_str()).collect::<Vec<_>>(),
        ["od"],
        "{l:?}"
    );
    // After the TTL spot is tried again.
    w.now += 200 * SEC;
    w.tick();
    assert!(w.avail.unavailable.active(w.now).is_empty());
}

#[test]
fn past_its_deadline_a_preempted_node_is_terminated() {
    let cloud = FakeProvider::new();
    let mut w = busy_spot(SPOT, &cloud);
    notice(&mut w, 1, 30); // the deadline: now + 30 s; with the grace, now + 40 s
    w.now += SEC;
    w.tick();
    w.now += 38 * SEC;
    w.tick();
    assert_eq!(
        w.instance("i1").status,
        InstanceStatus::RayStopping,
        "within the grace"
    );
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    assert!(out.effects.iter().any(|e| matches!(e, Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids == &[w.cloud[0].cloud_instance_id.clone()])));
}

#[test]
fn without_the_option_a_draining_node_is_rays_to_wait_for() {
    let cloud = FakeProvider::new();
    let off = SPOT.replace("rayscale: {preemption: {enabled: true}}\n", "");
    let mut w = busy_spot(&off, &cloud);
    notice(&mut w, 1, 120);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopping);
    assert!(
        launches(&out).is_empty(),
        "Ray launches when the work comes back"
    );
    assert!(out.drained_outside.is_empty());
    assert!(w.avail.unavailable.active(w.now).is_empty());
}

#[test]
fn rayscales_own_idle_drain_is_no_preemption() {
    let cloud = FakeProvider::new();
    let mut w = busy_spot(SPOT, &cloud);
    w.ray.node_states[1].available_resources = res(&[("CPU", 2.0)]);
    w.ray.node_states[1].idle_duration_ms = 61_000;
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopRequested);
    w.ray.node_states[1].status = Some(NodeStatus::Draining);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopping);
    assert!(out.drained_outside.is_empty());
    assert!(launches(&out).is_empty());
}

#[test]
fn an_operators_drain_without_a_notice_is_replaced_but_marks_no_zone() {
    let cloud = FakeProvider::new();
    let mut w = busy_spot(SPOT, &cloud);
    w.ray.node_states[1].status = Some(NodeStatus::Draining);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(launches(&out).len(), 1);
    assert!(launches(&out)[0].avoid_zones.is_empty());
    assert!(out.drained_outside[0].notice.is_none());
    assert!(
        out.drained_outside[0]
            .event_line()
            .contains("not asked by the autoscaler")
    );
}

/// A node that joined, took work and got its notice between two looks (a launch call
/// held the loop meanwhile) is first seen draining, never running: still a preemption,
/// replaced at once away from its zone.
#[test]
fn a_node_drained_before_rayscale_saw_it_run_is_replaced_too() {
    let cloud = FakeProvider::new();
    let mut w = spot_launched(SPOT, &cloud);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Allocated);
    joins_busy(&mut w);
    notice(&mut w, 1, 120);
    w.now += SEC;
    let out = w.tick();
    let (_, l) = stopped_for_a_notice(&w, &out);
    assert_eq!(
        (l.node_type.as_str(), l.avoid_zones.clone()),
        ("spot", vec!["z1".to_string()])
    );
    assert!(out.drained_outside.first().is_some_and(|d| d.new));
}
