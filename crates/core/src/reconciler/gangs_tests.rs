//! Atomic gangs (`rayscale.gangs: atomic`) in virtual time, against the stateful
//! [`FakeProvider`] (a cloud without an all-or-nothing call: a launch fills what it can).

use super::tests::World;
use super::*;
use crate::model::PlacementConstraint;
use crate::testing::{FakeProvider, res};

/// Two GPU types a gang's bundles fit on; `a` comes first, so Ray's order prefers it.
const GPU_TYPES: &str = r#"
cluster_name: t
max_workers: 20
idle_timeout_minutes: 1
upscaling_speed: 100
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  a: {resources: {CPU: 2, GPU: 1}, max_workers: 10, node_config: {}}
  b: {resources: {CPU: 4, GPU: 1}, max_workers: 10, node_config: {}}
"#;

fn atomic(extra: &str) -> String {
    format!("{GPU_TYPES}rayscale: {{gangs: {extra}}}\n")
}

/// A STRICT_SPREAD placement group of `n` bundles of 2 CPUs and a GPU (all of an `a`,
/// half a `b`: Ray's scheduler prefers `a`), as Ray's GCS reports it.
fn spread(pg: &str, n: usize) -> GangRequest {
    GangRequest {
        requests: (0..n)
            .map(|_| ResourceRequest {
                resources: res(&[("CPU", 2.0), ("GPU", 1.0)]),
                placement_constraints: vec![PlacementConstraint::AntiAffinity {
                    label_name: format!("_PG_{pg}"),
                    label_value: String::new(),
                }],
                ..Default::default()
            })
            .collect(),
        details: format!("{pg}:STRICT_SPREAD|PENDING"),
        ..Default::default()
    }
}

fn launches(out: &Outcome) -> Vec<(String, u64, bool)> {
    out.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Launch(l) => Some((l.node_type.clone(), l.count, l.all_or_nothing)),
            _ => None,
        })
        .collect()
}

fn live_of(w: &World, t: &str) -> Vec<Instance> {
    let (_, all) = w.im.get_instances().expect("table");
    all.into_iter()
        .filter(|i| i.node_type == t && live(i))
        .collect()
}

/// Every cloud instance's raylet joined, with its type's resources, idle.
fn joins(w: &mut World, only: Option<usize>) {
    let cloud = w.cloud.clone();
    for (k, c) in cloud.iter().enumerate().take(only.unwrap_or(usize::MAX)) {
        if !w
            .ray
            .node_states
            .iter()
            .any(|n| n.instance_id == c.cloud_instance_id)
        {
            let cpu = if c.node_type == "a" { 2.0 } else { 4.0 };
            let r = [("CPU", cpu), ("GPU", 1.0)];
            let mut n = super::tests::node(k as u8 + 1, &c.cloud_instance_id, &c.node_type, &r, &r);
            // Idle as Ray reports it (nothing in use, an idle time).
            n.status = Some(NodeStatus::Idle);
            n.idle_duration_ms = 1_000;
            w.ray.node_states.push(n);
        }
    }
}

#[test]
fn without_the_option_the_nodes_that_came_up_stay_as_in_ray() {
    let mut w = World::new(GPU_TYPES);
    let cloud = FakeProvider::new();
    cloud.set_capacity("a", Some(5), None);
    w.ray.pending_gang_resource_requests = vec![spread("pg3f2a", 8)];
    let out = w.tick();
    assert_eq!(launches(&out), [("a".to_string(), 8, false)]);
    assert!(live_of(&w, "a").iter().all(|i| i.gang.is_none()));
    w.apply_to(&cloud, &out);
    w.now += SEC;
    let out = w.tick();
    // The 5 stay; the 3 missing go to b (Ray's behaviour: the group is completed mixed).
    assert_eq!(live_of(&w, "a").len(), 5);
    assert_eq!(launches(&out), [("b".to_string(), 3, false)]);
    assert!(out.gang_lines.is_empty());
}

#[test]
fn a_gang_that_cannot_come_up_whole_is_released_and_relaunched_whole_on_the_type_that_fits() {
    let mut w = World::new(&atomic("atomic"));
    let cloud = FakeProvider::new();
    cloud.set_capacity("a", Some(5), None);
    w.ray.pending_gang_resource_requests = vec![spread("pg3f2a", 8)];
    let out = w.tick();
    // One all-or-nothing request for the 8, all tagged with the group and the decision.
    assert_eq!(launches(&out), [("a".to_string(), 8, true)]);
    let a = live_of(&w, "a");
    let first = a[0].gang.clone().expect("tagged");
    assert!(first.starts_with("pg3f2a#"), "{first}");
    assert!(
        a.len() == 8 && a.iter().all(|i| i.gang.as_ref() == Some(&first)),
        "{a:#?}"
    );
    // This cloud has no all-or-nothing call: 5 are made, 3 fail for capacity.
    w.apply_to(&cloud, &out);
    assert_eq!(w.cloud.len(), 5);
    w.now += SEC;
    let out = w.tick();
    // The 5 that came up are released, a is set aside, the gang goes to b whole.
    let a = live_of(&w, "a");
    assert!(
        a.len() == 5 && a.iter().all(|i| i.status == InstanceStatus::Terminating),
        "{a:#?}"
    );
    assert_eq!(launches(&out), [("b".to_string(), 8, true)]);
    let b = live_of(&w, "b");
    let second = b[0].gang.clone().expect("tagged");
    assert!(second.starts_with("pg3f2a#") && second != first, "{second}");
    assert!(b.iter().all(|i| i.gang.as_ref() == Some(&second)), "{b:#?}");
    assert!(
        out.report
            .unavailable_types
            .iter()
            .any(|u| u.node_type == "a")
    );
    let terminated: Vec<&String> = out
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Terminate {
                cloud_instance_ids, ..
            } => Some(cloud_instance_ids),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(terminated.len(), 5, "{:?}", out.effects);
    assert_eq!(out.gang_lines.len(), 1, "{:?}", out.gang_lines);
    let line = &out.gang_lines[0];
    assert!(
        line.starts_with("gang pg3f2a (8 x a): 3 of 8 failed before Ray ran (a: ")
            && line.ends_with("released 5, retrying whole (attempt 2 of 3)"),
        "{line}"
    );
    // b comes up whole and Ray places the group: the gang is done, nothing is released.
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    joins(&mut w, None);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(live_of(&w, "b").len(), 8);
    w.ray.pending_gang_resource_requests.clear();
    w.now += 700 * SEC;
    let out2 = w.tick();
    assert!(out.gang_lines.is_empty() && out2.gang_lines.is_empty());
    assert_eq!(
        live_of(&w, "b")
            .iter()
            .filter(|i| i.status == InstanceStatus::RayRunning)
            .count(),
        8
    );
    // Placed: no failure counted, nothing set aside; its gangs are settled.
    assert!(
        w.avail.gangs.values().all(|a| a.failed == 0
            && a.set_aside_until_ns.is_none()
            && a.settled_tags.contains(&second)),
        "{:?}",
        w.avail.gangs
    );
}

#[test]
fn a_gang_not_whole_at_its_timeout_is_released_and_one_whole_within_it_is_untouched() {
    let mut w = World::new(&atomic("{mode: atomic, timeout_s: 600}"));
    let cloud = FakeProvider::new();
    w.ray.pending_gang_resource_requests = vec![spread("pgaaaa", 4)];
    let out = w.tick();
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    // Three of four boot; the fourth never runs Ray.
    joins(&mut w, Some(3));
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::RayRunning), 3);
    w.now += 590 * SEC;
    let out = w.tick();
    assert!(
        out.gang_lines.is_empty(),
        "within the timeout: {:?}",
        out.gang_lines
    );
    assert_eq!(live_of(&w, "a").len(), 4);
    // A restart keeps the clock: it is the members' launch time, in the table; the
    // attempts are in the stored availability.
    let stored = w.avail.state();
    w.avail = Availability::new(w.config.unavailable_type_ttl_s, 600.0);
    w.avail.restore(
        serde_json::from_str(&serde_json::to_string(&stored).expect("json")).expect("parse"),
    );
    w.now += 10 * SEC;
    let out = w.tick();
    assert_eq!(out.gang_lines.len(), 1, "{:?}", out.gang_lines);
    assert!(
        out.gang_lines[0].starts_with("gang pgaaaa (4 x a): 3 of 4 up after 602 s; released 4"),
        "{}",
        out.gang_lines[0]
    );
    // The three idle running ones are drained as idle (Ray refuses if work came), the
    // booting one terminated; a is set aside and the gang goes to b.
    let a = live_of(&w, "a");
    let drained = a
        .iter()
        .filter(|i| {
            i.status == InstanceStatus::RayStopRequested && i.stop_cause.as_deref() == Some("GANG")
        })
        .count();
    let terminating = a
        .iter()
        .filter(|i| i.status == InstanceStatus::Terminating)
        .count();
    assert_eq!((drained, terminating), (3, 1), "{a:#?}");
    assert_eq!(launches(&out), [("b".to_string(), 4, true)]);

    // Another group whose gang comes up whole within the timeout is left alone.
    let mut w = World::new(&atomic("atomic"));
    let cloud = FakeProvider::new();
    w.ray.pending_gang_resource_requests = vec![spread("pgbbbb", 2)];
    let out = w.tick();
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    joins(&mut w, None);
    w.now += SEC;
    w.tick();
    w.ray.pending_gang_resource_requests.clear();
    w.now += 1_000 * SEC;
    let out = w.tick();
    assert!(out.gang_lines.is_empty());
    assert_eq!(w.count(InstanceStatus::RayRunning), 2);
    // Ray reschedules the group (one of its nodes died, long after the timeout): its
    // placed gang is settled, not judged again; the missing bundle is a new gang.
    let dead = w.cloud.remove(0);
    w.ray
        .node_states
        .retain(|n| n.instance_id != dead.cloud_instance_id);
    // The surviving node holds its bundle.
    for n in w
        .ray
        .node_states
        .iter_mut()
        .filter(|n| n.instance_id != "head-1")
    {
        n.available_resources = res(&[("CPU", 0.0), ("GPU", 0.0)]);
        n.status = Some(NodeStatus::Running);
        n.idle_duration_ms = 0;
    }
    w.ray.pending_gang_resource_requests = vec![spread("pgbbbb", 1)];
    w.now += SEC;
    let out = w.tick();
    assert!(out.gang_lines.is_empty(), "{:?}", out.gang_lines);
    assert!(out.report.unavailable_types.is_empty());
    assert_eq!(w.count(InstanceStatus::RayRunning), 1);
    assert_eq!(launches(&out), [("a".to_string(), 1, true)]);
}

#[test]
fn after_its_last_attempt_a_group_is_set_aside_for_the_ttl_and_reported() {
    let only_a = atomic("{mode: atomic, attempts: 2}").replace(
        "  b: {resources: {CPU: 4, GPU: 1}, max_workers: 10, node_config: {}}\n",
        "",
    );
    let mut w = World::new(&only_a);
    let cloud = FakeProvider::new();
    cloud.set_capacity("a", Some(2), None);
    w.ray.pending_gang_resource_requests = vec![spread("pgcccc", 3)];
    let out = w.tick();
    w.apply_to(&cloud, &out);
    w.now += SEC;
    let out = w.tick();
    assert!(
        out.gang_lines[0].contains("retrying whole (attempt 2 of 2)"),
        "{:?}",
        out.gang_lines
    );
    assert!(launches(&out).is_empty(), "a is out for the TTL");
    // After the TTL, the second attempt (capacity back to 2 only).
    w.apply_to(&cloud, &out);
    cloud.set_capacity("a", Some(2), None);
    w.now += 181 * SEC;
    let out = w.tick();
    assert_eq!(launches(&out), [("a".to_string(), 3, true)]);
    w.apply_to(&cloud, &out);
    w.now += SEC;
    let out = w.tick();
    // One TTL (180 s) from when a is back, which its capacity error set 180 s away.
    assert!(
        out.gang_lines[0]
            .contains("not satisfiable now after 2 attempts: not launched for the next 360 s"),
        "{:?}",
        out.gang_lines
    );
    // Set aside: not launched for, reported infeasible, while a is out and once it is
    // back (other work may use it meanwhile).
    w.apply_to(&cloud, &out);
    cloud.set_capacity("a", None, None);
    for wait_s in [170, 20, 160] {
        w.now += wait_s * SEC;
        let out = w.tick();
        assert!(launches(&out).is_empty(), "{:?}", out.effects);
        assert_eq!(out.report.infeasible_gangs.len(), 1);
    }
    // After the set-aside time, from its first attempt again.
    w.now += 20 * SEC;
    let out = w.tick();
    assert_eq!(launches(&out), [("a".to_string(), 3, true)]);
    assert!(
        live_of(&w, "a")
            .iter()
            .all(|i| i.gang.as_deref().is_some_and(|g| g.starts_with("pgcccc#")))
    );
    let lines = w.tick().gang_lines;
    assert!(lines.is_empty(), "a new gang, not counted yet: {lines:?}");
}

#[test]
fn a_gang_tag_survives_the_stored_table() {
    let mut i = Instance::new("i1", "a", InstanceStatus::Queued, 5, "queued");
    i.gang = Some("pg1#1000".into());
    let back: Instance =
        serde_json::from_str(&serde_json::to_string(&i).expect("json")).expect("parse");
    assert_eq!(back.gang.as_deref(), Some("pg1#1000"));
    // A record of an older table has none.
    let old = serde_json::to_string(&Instance::new("i2", "a", InstanceStatus::Queued, 5, "q"))
        .expect("json");
    assert!(!old.contains("gang"));
    let back: Instance = serde_json::from_str(&old).expect("parse");
    assert_eq!(back.gang, None);
}

/// The workers Ray's scheduler counts under `max_workers`: every record that runs Ray or
/// may come to (its `is_ray_running_reachable`).
fn counted(w: &World) -> usize {
    let (_, all) = w.im.get_instances().expect("table");
    all.iter()
        .filter(|i| !i.is_head && i.status.can_reach_ray_running())
        .count()
}

fn busy(w: &mut World, cloud_id: &str, busy: bool) {
    let n = w
        .ray
        .node_states
        .iter_mut()
        .find(|n| n.instance_id == cloud_id)
        .expect("a node");
    if busy {
        n.available_resources = res(&[("CPU", 0.0), ("GPU", 0.0)]);
        n.status = Some(NodeStatus::Running);
        n.idle_duration_ms = 0;
    } else {
        n.available_resources = n.total_resources.clone();
        n.status = Some(NodeStatus::Idle);
        n.idle_duration_ms = 1_000;
    }
}

#[test]
fn a_failed_gangs_members_with_work_stay_counted_under_the_max_and_go_once_idle() {
    // At most 5 workers in all: a gang of 4 whose fourth never boots, one of the three
    // that run carrying work when it is released.
    let cfg = atomic("{mode: atomic, timeout_s: 600}").replace("max_workers: 20", "max_workers: 5");
    let mut w = World::new(&cfg);
    let cloud = FakeProvider::new();
    w.ray.pending_gang_resource_requests = vec![spread("pgdddd", 4)];
    let out = w.tick();
    assert_eq!(launches(&out), [("a".to_string(), 4, true)]);
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    joins(&mut w, Some(3));
    let ids: Vec<String> = w
        .cloud
        .iter()
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    busy(&mut w, &ids[0], true);
    w.now += SEC;
    w.tick();
    w.now += 600 * SEC;
    let out = w.tick();
    // (The busy member has no room for its bundle: one more a was launched for it, a
    // gang of its own that timed out too.)
    assert!(
        out.gang_lines
            .iter()
            .any(|l| l.starts_with("gang pgdddd (4 x a)")
                && l.contains("released 3, kept 1 that carry work")),
        "{:?}",
        out.gang_lines
    );
    // The busy one is kept and counted, the two draining ones may still be refused: with
    // 5 in all, the 4 of the retry do not fit yet (before the fix: 4 b on top, 7 counted).
    assert!(launches(&out).is_empty(), "{:?}", out.effects);
    assert!(counted(&w) <= 5, "{:?}", w.statuses());
    w.apply_to(&cloud, &out);
    let kept =
        w.im.get_instances()
            .expect("table")
            .1
            .into_iter()
            .find(|i| i.cloud_instance_id.as_deref() == Some(&ids[0]))
            .expect("kept");
    assert_eq!(kept.status, InstanceStatus::RayRunning);
    // Ray refuses one drain (work came): that member runs on, counted, kept too.
    let draining: Vec<Instance> = live_of(&w, "a")
        .into_iter()
        .filter(|i| i.status == InstanceStatus::RayStopRequested)
        .collect();
    assert_eq!(draining.len(), 2, "{:?}", w.statuses());
    w.rejections.push(DrainRejection {
        instance_id: draining[0].instance_id.clone(),
        reason: "the node is not idle".into(),
    });
    let refused = draining[0].cloud_instance_id.clone().expect("cloud id");
    busy(&mut w, &refused, true);
    // The other drain completes: Ray's node goes, the instance is terminated.
    let done = draining[1].cloud_instance_id.clone().expect("cloud id");
    w.ray.node_states.retain(|n| n.instance_id != done);
    w.now += SEC;
    let out = w.tick();
    assert!(counted(&w) <= 5, "{:?}", w.statuses());
    w.apply_to(&cloud, &out);
    for _ in 0..3 {
        w.now += SEC;
        let out = w.tick();
        assert!(counted(&w) <= 5, "{:?}", w.statuses());
        w.apply_to(&cloud, &out);
    }
    // Two a's carry work and count: the 4 b of the retry do not fit under 5, and are
    // not launched.
    assert_eq!(
        live_of(&w, "a")
            .iter()
            .filter(|i| i.status == InstanceStatus::RayRunning)
            .count(),
        2,
        "{:?}",
        w.statuses()
    );
    assert!(live_of(&w, "b").is_empty(), "{:?}", w.statuses());
    // Their work ends; the group is still pending: both are released once idle, and the
    // gang goes to b whole, within the max.
    busy(&mut w, &ids[0], false);
    busy(&mut w, &refused, false);
    w.now += SEC;
    let out = w.tick();
    assert!(counted(&w) <= 5, "{:?}", w.statuses());
    let a: Vec<Instance> = live_of(&w, "a")
        .into_iter()
        .filter(|i| {
            i.cloud_instance_id
                .as_deref()
                .is_some_and(|c| c == ids[0] || c == refused)
        })
        .collect();
    assert!(
        a.len() == 2
            && a.iter()
                .all(|i| i.status == InstanceStatus::RayStopRequested
                    && i.stop_cause.as_deref() == Some("GANG")),
        "{a:#?}"
    );
    // The two drains complete; then the retry fits.
    w.ray
        .node_states
        .retain(|n| n.instance_id != ids[0] && n.instance_id != refused);
    w.apply_to(&cloud, &out);
    let mut launched = Vec::new();
    for _ in 0..4 {
        w.now += SEC;
        let out = w.tick();
        assert!(counted(&w) <= 5, "{:?}", w.statuses());
        launched.extend(launches(&out));
        w.apply_to(&cloud, &out);
    }
    assert_eq!(launched, [("b".to_string(), 4, true)]);
    assert!(live_of(&w, "a").is_empty(), "{:?}", w.statuses());
}

#[test]
fn a_failed_gangs_member_busy_until_its_group_is_placed_is_stopped_once_idle() {
    let cfg = atomic("{mode: atomic, timeout_s: 600}");
    let mut w = World::new(&cfg);
    let cloud = FakeProvider::new();
    w.ray.pending_gang_resource_requests = vec![spread("pgeeee", 2)];
    let out = w.tick();
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    joins(&mut w, Some(1));
    let first = w.cloud[0].cloud_instance_id.clone();
    busy(&mut w, &first, true);
    w.now += 601 * SEC;
    let out = w.tick();
    assert!(
        out.gang_lines[0].contains("kept 1 that carry work"),
        "{:?}",
        out.gang_lines
    );
    assert_eq!(launches(&out), [("b".to_string(), 2, true)]);
    // b comes up, Ray places the group; the kept a still works, then goes idle.
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    joins(&mut w, None);
    busy(&mut w, &first, true);
    w.ray.pending_gang_resource_requests.clear();
    w.now += SEC;
    w.tick();
    let kept = |w: &World| {
        w.im.get_instances()
            .expect("table")
            .1
            .into_iter()
            .find(|i| i.cloud_instance_id.as_deref() == Some(first.as_str()))
            .expect("kept")
    };
    assert_eq!(kept(&w).status, InstanceStatus::RayRunning);
    busy(&mut w, &first, false);
    w.now += SEC;
    w.tick();
    // Before the fix it was hidden from the scheduler for good: never stopped.
    assert_eq!(
        kept(&w).status,
        InstanceStatus::RayStopRequested,
        "{:?}",
        w.statuses()
    );
}
