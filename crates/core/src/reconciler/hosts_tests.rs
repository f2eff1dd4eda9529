//! Multi-host instances (a TPU slice of two hosts): one unit to the reconciler.

use super::tests::{World, node};
use super::*;
use crate::config::MultiHost;
use crate::model::NodeState;
use crate::testing::demand;

const CONFIG: &str = r#"
cluster_name: t
max_workers: 10
idle_timeout_minutes: 1
upscaling_speed: 100
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  slice: {resources: {TPU: 4, TPU-v4-16-head: 1}, max_workers: 1, node_config: {}}
"#;

const HEAD_RES: &str = "TPU-v4-16-head";

/// A world whose `slice` type has two hosts per instance.
fn world() -> World {
    world_of(CONFIG)
}

/// [`world`] of another config with the same `slice` type.
fn world_of(config: &str) -> World {
    let mut w = World::new(config);
    for t in &mut w.config.node_types {
        if t.name == "slice" {
            t.hosts = Some(MultiHost {
                count: 2,
                first_host_only: vec![HEAD_RES.into()],
            });
        }
    }
    w
}

/// Host `k` (0 first) of cloud instance `cloud`: node id `[10 + k; 4]`, the first host
/// with Ray's head resource.
fn host(k: u8, cloud: &str) -> NodeState {
    let mut r = vec![("TPU", 4.0)];
    if k == 0 {
        r.push((HEAD_RES, 1.0));
    }
    node(10 + k, cloud, "slice", &r, &r)
}

fn hex(k: u8) -> String {
    hex_of(10 + k)
}

fn hex_of(b: u8) -> String {
    format!("{b:02x}").repeat(4)
}

fn idle(ns: &mut NodeState, ms: i64) {
    ns.status = Some(NodeStatus::Idle);
    ns.idle_duration_ms = ms;
}

/// One slice launched for a head-resource demand, its cloud instance listed; returns
/// its cloud id.
fn launched(w: &mut World) -> String {
    w.ray.pending_resource_requests = vec![demand(&[(HEAD_RES, 1.0)], 1)];
    let out = w.tick();
    w.cloud_fulfils(&out);
    assert_eq!(w.cloud.len(), 1, "{:?}", out.effects);
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    w.tick();
    w.cloud[0].cloud_instance_id.clone()
}

/// [`launched`], with both hosts' Ray nodes up: the record RAY_RUNNING on worker 0's.
fn running(w: &mut World) -> String {
    let cloud = launched(w);
    w.ray.node_states.push(host(0, &cloud));
    w.ray.node_states.push(host(1, &cloud));
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayRunning);
    cloud
}

fn drains(out: &Outcome) -> Vec<(String, Vec<String>)> {
    out.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Drain {
                node_id_hex,
                siblings,
                ..
            } => Some((node_id_hex.clone(), siblings.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_record_takes_the_first_hosts_node_and_the_instance_counts_once() {
    let mut w = world();
    let cloud = launched(&mut w);
    // The second host's raylet comes up first: not the record's node.
    w.ray.node_states.push(host(1, &cloud));
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Allocated);
    assert_eq!(w.instance("i1").node_id, None);
    w.ray.node_states.push(host(0, &cloud));
    w.now += SEC;
    w.tick();
    let i = w.instance("i1");
    assert_eq!(i.status, InstanceStatus::RayRunning);
    assert_eq!(i.node_id.as_deref(), Some(hex(0).as_str()));
    // Both hosts busy for a while, under max_workers 1 for the type: nothing is cut,
    // stopped or launched (two Ray nodes, one instance), and no record is added.
    for _ in 0..5 {
        w.now += 10 * SEC;
        let out = w.tick();
        assert!(out.effects.is_empty(), "{:?}", out.effects);
    }
    assert_eq!(w.statuses().len(), 1);
}

#[test]
fn a_slice_is_idle_only_when_every_host_is_and_stops_whole() {
    let mut w = world();
    let cloud = running(&mut w);
    // The first host idle past the timeout, the other still working: kept.
    idle(&mut w.ray.node_states[1], 120_000);
    for _ in 0..3 {
        w.now += 10 * SEC;
        let out = w.tick();
        assert!(drains(&out).is_empty(), "{:?}", out.effects);
    }
    assert_eq!(w.instance("i1").status, InstanceStatus::RayRunning);
    // The other host idle too, not yet for the timeout: kept.
    idle(&mut w.ray.node_states[2], 30_000);
    w.now += SEC;
    assert!(drains(&w.tick()).is_empty());
    // Both idle past it: one stop, of the first host, the other drained before it.
    idle(&mut w.ray.node_states[2], 61_000);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(drains(&out), vec![(hex(0), vec![hex(1)])]);
    assert_eq!(w.instance("i1").status, InstanceStatus::RayStopRequested);
    // The hosts die; the instance is terminated once.
    for n in &mut w.ray.node_states[1..] {
        n.status = Some(NodeStatus::Dead);
    }
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    assert!(out.effects.iter().any(
        |e| matches!(e, Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids == &vec![cloud.clone()])
    ));
}

#[test]
fn a_dead_first_host_is_not_replaced_by_another_host() {
    let mut w = world();
    let cloud = running(&mut w);
    // The first host's raylet dies, the other lives: the slice is broken and goes
    // whole (no record takes the other host as a raylet restarted on the instance).
    w.ray.node_states[1].status = Some(NodeStatus::Dead);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    assert!(out.effects.iter().any(
        |e| matches!(e, Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids == &vec![cloud.clone()])
    ));
    assert_eq!(w.statuses().len(), 1, "{:?}", w.statuses());
    // The slice is gone from the cloud while the GCS still shows its other host alive:
    // that node is not taken for an unmanaged instance.
    w.cloud.retain(|c| c.cloud_instance_id != cloud);
    w.assert_quiet(3);
    assert_eq!(w.statuses().len(), 1, "{:?}", w.statuses());
}

#[test]
fn a_dead_other_host_stops_the_slice_whole() {
    let mut w = world();
    let cloud = running(&mut w);
    // Worker 0 lives, the other host's raylet dies: the slice cannot run its program.
    w.ray.node_states[2].status = Some(NodeStatus::Dead);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    let terminates: Vec<_> = out
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids == &vec![cloud.clone()]))
        .collect();
    assert_eq!(terminates.len(), 1, "{:?}", out.effects);
    // Its own node is still worker 0's.
    assert_eq!(w.instance("i1").node_id.as_deref(), Some(hex(0).as_str()));
    assert_eq!(w.statuses().len(), 1, "{:?}", w.statuses());
}

#[test]
fn one_host_types_keep_rays_restart_rule() {
    // The same world without `hosts`: a second live node on the instance whose record's
    // node died is a raylet restarted there (a new record takes it).
    let mut w = World::new(CONFIG);
    let cloud = launched(&mut w);
    w.ray.node_states.push(host(0, &cloud));
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayRunning);
    w.ray.node_states[1].status = Some(NodeStatus::Dead);
    let mut again = host(0, &cloud);
    again.node_id = vec![99; 4];
    w.ray.node_states.push(again);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminated);
    w.now += SEC;
    w.tick();
    assert_eq!(
        w.instance("i2").node_id.as_deref(),
        Some(hex_of(99).as_str())
    );
}

#[test]
fn folding_keeps_one_node_per_slice_and_leaves_others_alone() {
    let mut w = world();
    let cloud = launched(&mut w);
    w.ray.node_states.push(host(1, &cloud));
    w.ray.node_states.push(host(0, &cloud));
    idle(&mut w.ray.node_states[1], 5_000);
    idle(&mut w.ray.node_states[2], 90_000);
    let table = w.im.get_instances_shared().expect("table").1;
    let f = hosts::folded(&w.config, &w.ray, &table).expect("folded");
    // The head node and one node for the slice: its first host's, idle for the
    // shortest time.
    assert_eq!(f.node_states.len(), 2);
    assert_eq!(f.node_states[1].node_id_hex(), hex(0));
    assert_eq!(f.node_states[1].idle_duration_ms, 5_000);
    // A busy host makes the slice busy.
    w.ray.node_states[1].status = Some(NodeStatus::Running);
    w.ray.node_states[1].idle_duration_ms = 0;
    let f = hosts::folded(&w.config, &w.ray, &table).expect("folded");
    assert_eq!(f.node_states[1].idle_duration_ms, 0);
    assert_eq!(f.node_states[1].status, Some(NodeStatus::Running));
    // No multi-host type: nothing folded.
    assert!(hosts::folded(&World::new(CONFIG).config, &w.ray, &table).is_none());
}

#[test]
fn a_slice_opted_into_consolidation_is_never_consolidated() {
    let config = format!(
        "{}rayscale: {{consolidation: {{node_types: [slice], utilization_below: 0.6, after_s: 60}}}}\n",
        CONFIG.replace("max_workers: 1,", "max_workers: 2,")
    );
    let mut w = world_of(&config);
    w.ray.pending_resource_requests = vec![demand(&[(HEAD_RES, 1.0)], 2)];
    let out = w.tick();
    w.cloud_fulfils(&out);
    assert_eq!(w.cloud.len(), 2, "{:?}", out.effects);
    w.ray.pending_resource_requests.clear();
    w.now += SEC;
    w.tick();
    let clouds: Vec<String> = w
        .cloud
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    // Two slices, each host with one of its 4 TPUs in use (a quarter: below the
    // threshold, and the load would fit on the other slice).
    for (s, cloud) in clouds.iter().enumerate() {
        for k in 0..2u8 {
            let mut h = host(k, cloud);
            h.node_id = vec![10 + 2 * s as u8 + k; 4];
            let mut avail = vec![("TPU", 3.0)];
            if k == 0 {
                avail.push((HEAD_RES, 1.0));
            }
            h.available_resources = crate::testing::res(&avail);
            w.ray.node_states.push(h);
        }
    }
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::RayRunning), 2);
    for _ in 0..20 {
        w.now += 10 * SEC;
        let out = w.tick();
        assert!(drains(&out).is_empty(), "{:?}", out.effects);
    }
    assert_eq!(w.count(InstanceStatus::RayRunning), 2);
}
