//! Reconciler tests against the stateful [`FakeProvider`]: capacity fallback, joins by
//! node type, requeues that keep their request id, partial fills, the head.

use super::tests::{CONFIG, World, cpu_demand, node, with_idle_worker};
use super::*;
use crate::provider::{CloudInstanceProvider, ProviderErrorKind};
use crate::testing::{FakeProvider, block_on};

/// Two interchangeable worker types; `a` comes first, so Ray's order prefers it.
pub(super) const TWO_TYPES: &str = r#"
cluster_name: t
max_workers: 20
idle_timeout_minutes: 1
upscaling_speed: 100
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  a: {resources: {CPU: 2}, max_workers: 8, node_config: {}}
  b: {resources: {CPU: 2}, max_workers: 8, node_config: {}}
"#;

impl World {
    /// Performs the outcome's launches and terminations on `cloud` as the driver does
    /// (a shortfall or a refused call becomes a provider error for the next sync), then
    /// lists the cloud.
    pub(super) fn apply_to(&mut self, cloud: &FakeProvider, out: &Outcome) {
        for e in &out.effects {
            match e {
                Effect::Launch(l) => match block_on(cloud.launch(l)) {
                    Ok(o) => self.errors.extend(o.shortfall),
                    Err(err) => self.errors.push(err),
                },
                Effect::Terminate {
                    cloud_instance_ids,
                    request_id,
                } => {
                    if let Err(err) = block_on(cloud.terminate(cloud_instance_ids, request_id)) {
                        self.errors.push(err);
                    }
                }
                Effect::Drain { .. } | Effect::InstallRay { .. } => {}
            }
        }
        self.errors.extend(block_on(cloud.poll_errors()));
        self.cloud = block_on(cloud.list()).expect("list");
    }

    fn launched_types(out: &Outcome) -> Vec<(String, u64)> {
        out.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Launch(l) => Some((l.node_type.clone(), l.count)),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn a_capacity_error_moves_the_demand_to_the_next_type_and_the_type_returns_later() {
    let mut w = World::new(TWO_TYPES);
    let cloud = FakeProvider::new();
    cloud.set_capacity("a", Some(0), Some("zone-1"));
    w.ray.pending_resource_requests = cpu_demand(2);
    let out = w.tick();
    assert_eq!(World::launched_types(&out), [("a".to_string(), 1)]);
    w.apply_to(&cloud, &out);
    assert!(w.errors[0].capacity().is_some(), "{:?}", w.errors);

    // Next iteration: the record fails at once, `a` is unavailable, `b` takes the demand.
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::AllocationFailed);
    assert_eq!(World::launched_types(&out), [("b".to_string(), 1)]);
    assert_eq!(
        out.decision.as_ref().map(|d| d.launch.clone()),
        Some(vec![("b".into(), 1)])
    );
    let u = &out.report.unavailable_types;
    assert_eq!((u.len(), u[0].node_type.as_str()), (1, "a"));
    // The type's one zone was out: the type is (no zone is named).
    assert_eq!(u[0].zone, None);
    assert!(u[0].reason.contains("in zone-1"), "{:?}", u[0]);
    assert!(
        out.report
            .failed_requests
            .iter()
            .any(|f| f.node_type == "a" && f.count == 0 && f.reason.contains("unavailable")),
        "{:?}",
        out.report.failed_requests
    );
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    w.ray_joins();
    // The b node runs and is busy.
    let last = w.ray.node_states.len() - 1;
    w.ray.node_states[last].available_resources = crate::testing::res(&[("CPU", 0.0)]);

    // More demand within the window: only b.
    w.ray.pending_resource_requests = cpu_demand(4);
    w.now += 60 * SEC;
    let out = w.tick();
    let types = World::launched_types(&out);
    assert!(
        !types.is_empty() && types.iter().all(|(t, _)| t == "b"),
        "{types:?}"
    );

    // After the window (and with capacity back), a is chosen again.
    cloud.set_capacity("a", None, None);
    w.ray.pending_resource_requests = cpu_demand(12);
    w.now += 180 * SEC;
    let out = w.tick();
    assert!(out.report.unavailable_types.is_empty());
    let types = World::launched_types(&out);
    assert!(types.iter().any(|(t, _)| t == "a"), "{types:?}");
}

#[test]
fn queued_instances_of_an_unavailable_type_are_canceled() {
    let slow = TWO_TYPES.replace("upscaling_speed: 100", "upscaling_speed: 0");
    let mut w = World::new(&slow);
    let cloud = FakeProvider::new();
    cloud.set_capacity("a", Some(0), None);
    w.ray.pending_resource_requests = cpu_demand(6);
    let out = w.tick();
    // Ray's order gives a, b, a; one of each type is requested (speed 0: one at a time
    // per type), the second a waits in QUEUED.
    assert_eq!(w.count(InstanceStatus::Requested), 2);
    assert_eq!(w.count(InstanceStatus::Queued), 1);
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    let (_, table) = w.im.get_instances().expect("table");
    let live_a = table
        .iter()
        .filter(|i| i.node_type == "a" && live(i))
        .count();
    assert_eq!(live_a, 0, "{table:#?}");
    let b = table
        .iter()
        .filter(|i| i.node_type == "b" && live(i))
        .count();
    assert_eq!(b, 3);
}

#[test]
fn a_partial_fill_fails_only_the_shortfall() {
    let mut w = World::new(CONFIG);
    let cloud = FakeProvider::new();
    cloud.set_capacity("w", Some(1), None);
    w.ray.pending_resource_requests = cpu_demand(6);
    let out = w.tick();
    assert_eq!(World::launched_types(&out), [("w".to_string(), 3)]);
    w.apply_to(&cloud, &out);
    assert_eq!(w.cloud.len(), 1);
    assert_eq!(
        w.errors.iter().map(|e| e.op.clone()).collect::<Vec<_>>(),
        [ProviderOp::Launch {
            request_id: "r1".into(),
            node_type: "w".into(),
            count: 2
        }]
    );
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.count(InstanceStatus::Allocated), 1);
    assert_eq!(w.count(InstanceStatus::AllocationFailed), 2);
    // No other type can hold the demand and w is unavailable: nothing is launched.
    assert!(World::launched_types(&out).is_empty());
}

#[test]
fn instances_without_request_ids_join_their_records_by_type_and_nothing_is_launched_twice() {
    let mut w = World::new(CONFIG);
    let cloud = FakeProvider::new().without_request_ids().with_head("head");
    w.ray.pending_resource_requests = cpu_demand(6);
    let out = w.tick();
    assert_eq!(World::launched_types(&out), [("w".to_string(), 3)]);
    w.apply_to(&cloud, &out);
    assert!(w.cloud.iter().all(|c| c.request_id.is_none()));
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.count(InstanceStatus::Allocated), 3);
    assert!(
        !out.warnings.iter().any(|m| m.contains("adopted")),
        "{:?}",
        out.warnings
    );
    // Long after the request timeout, with Ray not yet up, nothing is launched again.
    for _ in 0..4 {
        w.now += 700 * SEC;
        let out = w.tick();
        w.apply_to(&cloud, &out);
        assert!(World::launched_types(&out).is_empty());
    }
    assert_eq!(cloud.launches().len(), 1);
    assert_eq!(cloud.instances().len(), 4, "3 workers and the head");
}

#[test]
fn the_head_is_never_adopted_nor_terminated() {
    let mut w = World::new(CONFIG);
    let cloud = FakeProvider::new().with_head("head");
    w.cloud = block_on(cloud.list()).expect("list");
    // The head runs Ray under its cloud id.
    w.ray.node_states[0].instance_id = "head".into();
    for _ in 0..3 {
        let out = w.tick();
        w.apply_to(&cloud, &out);
        w.now += 400 * SEC;
    }
    let (_, table) = w.im.get_instances().expect("table");
    assert!(table.is_empty(), "{table:#?}");
    assert!(
        cloud
            .calls()
            .iter()
            .all(|c| !matches!(c, crate::testing::FakeCall::Terminate(_)))
    );
    // Even asked directly, the provider refuses to terminate it.
    let err = block_on(cloud.terminate(&["head".to_string()], "r")).expect_err("refused");
    assert_eq!(err.kind, ProviderErrorKind::InvalidConfig);
    assert_eq!(cloud.instances().len(), 1);
}

#[test]
fn a_requeued_request_is_sent_again_as_it_was_and_a_late_first_launch_is_not_doubled() {
    let mut w = World::new(CONFIG);
    let cloud = FakeProvider::new();
    w.ray.pending_resource_requests = cpu_demand(4);
    let first = w.tick();
    assert_eq!(World::launched_types(&first), [("w".to_string(), 2)]);
    // The first launch is lost in transit: nothing happens for 10 minutes.
    w.now += 600 * SEC;
    let second = w.tick();
    let (Some(Effect::Launch(a)), Some(Effect::Launch(b))) = (
        first
            .effects
            .iter()
            .find(|e| matches!(e, Effect::Launch(_))),
        second
            .effects
            .iter()
            .find(|e| matches!(e, Effect::Launch(_))),
    ) else {
        panic!("two launches: {first:?} {second:?}");
    };
    assert_eq!(a, b, "the same request, sent again");
    // Both arrive (the first late): the instances are made once.
    w.apply_to(&cloud, &first);
    w.apply_to(&cloud, &second);
    assert_eq!(cloud.instances().len(), 2);
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Allocated), 2);
}

#[test]
fn a_requeued_record_of_a_request_that_landed_short_goes_out_in_a_fresh_request() {
    let mut w = World::new(CONFIG);
    let cloud = FakeProvider::new();
    w.ray.pending_resource_requests = cpu_demand(4);
    let first = w.tick();
    // The request made both instances, but one was gone before any list showed it (a
    // spot reclaim, an operator): its record waits for an instance that will not come.
    w.apply_to(&cloud, &first);
    let gone = w.cloud.pop().expect("two instances").cloud_instance_id;
    cloud.remove(&gone);
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Allocated), 1);
    assert_eq!(w.count(InstanceStatus::Requested), 1);
    // After the request timeout it is requeued and requested again: not by the landed
    // request's id (the cloud would answer that it is done, making nothing), but by a
    // fresh one, which makes its instance.
    w.now += 600 * SEC;
    let again = w.tick();
    let Some(Effect::Launch(a)) = first
        .effects
        .iter()
        .find(|e| matches!(e, Effect::Launch(_)))
    else {
        panic!("a first launch: {first:?}");
    };
    let Some(Effect::Launch(b)) = again
        .effects
        .iter()
        .find(|e| matches!(e, Effect::Launch(_)))
    else {
        panic!("a second launch: {again:?}");
    };
    assert_ne!(a.request_id, b.request_id);
    assert_eq!(b.count, 1);
    w.apply_to(&cloud, &again);
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Allocated), 2);
    assert_eq!(cloud.instances().len(), 2);
}

#[test]
fn a_late_instance_of_a_requeued_request_waits_for_its_record() {
    let mut w = World::new(CONFIG);
    let cloud = FakeProvider::new();
    w.ray.pending_resource_requests = cpu_demand(2);
    let first = w.tick();
    // Timed out and requeued, but another request holds the only launch slot.
    w.now += 600 * SEC;
    w.settings.max_concurrent_launches = 0;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Queued), 1);
    // The first launch lands now: its instance is not adopted as a stranger.
    w.apply_to(&cloud, &first);
    w.now += SEC;
    let out = w.tick();
    assert!(
        !out.warnings.iter().any(|m| m.contains("adopted")),
        "{:?}",
        out.warnings
    );
    // Once the record is requested again, it joins its instance.
    w.settings.max_concurrent_launches = 10;
    w.now += SEC;
    let out = w.tick();
    w.apply_to(&cloud, &out);
    w.now += SEC;
    w.tick();
    assert_eq!(w.count(InstanceStatus::Allocated), 1);
    assert_eq!(cloud.instances().len(), 1);
}

#[test]
fn pending_instances_are_adopted_and_stopping_ones_are_not() {
    let mut w = World::new(CONFIG);
    w.cloud.push(
        CloudInstance::worker("booting", "w", Some("lost")).in_state(CloudInstanceState::Pending),
    );
    w.cloud.push(
        CloudInstance::worker("leaving", "w", Some("lost")).in_state(CloudInstanceState::Stopping),
    );
    // Ray still runs on the instance being stopped: it is not adopted through its node
    // either.
    w.ray
        .node_states
        .push(node(7, "leaving", "w", &[("CPU", 2.0)], &[("CPU", 2.0)]));
    w.tick();
    let (_, table) = w.im.get_instances().expect("table");
    let adopted: Vec<_> = table
        .iter()
        .filter_map(|i| i.cloud_instance_id.as_deref())
        .collect();
    assert_eq!(adopted, ["booting"]);
    assert_eq!(table[0].status, InstanceStatus::Allocated);
}

#[test]
fn an_instance_that_fails_on_its_own_fails_its_record_not_a_sibling() {
    let mut w = World::new(CONFIG);
    w.ray.pending_resource_requests = cpu_demand(4);
    let out = w.tick();
    assert_eq!(World::launched_types(&out), [("w".to_string(), 2)]);
    // Only the first instance shows up; it joins i1, i2 still waits for its own.
    let rid = w.instance("i1").launch_request_id.clone();
    w.cloud.push(CloudInstance::worker("c-0", "w", Some(&rid)));
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Allocated);
    assert_eq!(w.instance("i2").status, InstanceStatus::Requested);
    // c-0's process dies on its own and the provider says which instance it was.
    w.errors.push(ProviderError::new(
        ProviderOp::Instance {
            cloud_instance_id: "c-0".into(),
            request_id: Some(rid.clone()),
            node_type: "w".into(),
        },
        ProviderErrorKind::Transient,
        "ray start exited (exit status: 1)",
    ));
    w.now += SEC;
    w.tick();
    // Still listed (remnants being stopped): its record is terminated with the error.
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::Terminating);
    assert_eq!(
        i1.last_error.as_deref(),
        Some("ray start exited (exit status: 1)")
    );
    assert_eq!(
        w.instance("i2").status,
        InstanceStatus::Requested,
        "the sibling waits"
    );
    // An instance that died before any record held it costs its request one instance.
    w.errors.push(ProviderError::new(
        ProviderOp::Instance {
            cloud_instance_id: "c-1".into(),
            request_id: Some(rid),
            node_type: "w".into(),
        },
        ProviderErrorKind::Transient,
        "ray start exited (exit status: 1)",
    ));
    w.cloud.clear();
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminated);
    assert_eq!(w.instance("i2").status, InstanceStatus::AllocationFailed);
    assert_eq!(
        out.report
            .failed_requests
            .iter()
            .map(|f| f.count)
            .sum::<u64>(),
        2
    );
}

/// The idle worker's raylet dies and comes back on the same instance under node id
/// 0x77777777; the GCS lists the dead node first.
fn restart_raylet(w: &mut World) {
    w.ray.node_states[1].status = Some(NodeStatus::Dead);
    let mut new = w.ray.node_states[1].clone();
    new.node_id = vec![0x77; 4];
    new.status = Some(NodeStatus::Idle);
    w.ray.node_states.push(new);
}

#[test]
fn a_raylet_restart_keeps_the_instance() {
    let mut w = with_idle_worker();
    let cloud_id = w
        .instance("i1")
        .cloud_instance_id
        .clone()
        .expect("allocated");
    let old_node = w.instance("i1").node_id.clone().expect("node");
    restart_raylet(&mut w);
    w.assert_quiet(3);
    let i1 = w.instance("i1");
    assert_eq!(
        i1.status,
        InstanceStatus::Terminated,
        "the old node's record retires"
    );
    let (_, table) = w.im.get_instances().expect("table");
    let live: Vec<&Instance> = table.iter().filter(|i| live(i)).collect();
    assert_eq!(live.len(), 1, "{table:#?}");
    assert_eq!(
        live[0].cloud_instance_id.as_deref(),
        Some(cloud_id.as_str())
    );
    assert_eq!(live[0].status, InstanceStatus::RayRunning);
    assert_eq!(live[0].node_id.as_deref(), Some("77777777"));
    assert_ne!(live[0].node_id.as_deref(), Some(old_node.as_str()));
    // The GCS forgets the dead node: nothing changes.
    w.ray.node_states.remove(1);
    w.now += SEC;
    let out = w.tick();
    assert!(out.effects.is_empty(), "{:?}", out.effects);
    assert_eq!(w.count(InstanceStatus::RayRunning), 1);
}

/// A second live node under an instance whose own node is alive too is no restart: the
/// record keeps its node and no record is made for the other one.
#[test]
fn a_second_live_node_on_an_instance_does_not_retire_its_record() {
    let mut w = with_idle_worker();
    let old_node = w.instance("i1").node_id.clone().expect("node");
    let mut other = w.ray.node_states[1].clone();
    other.node_id = vec![0x77; 4];
    other.status = Some(NodeStatus::Idle);
    w.ray.node_states.push(other);
    for _ in 0..2 {
        w.now += SEC;
        w.tick();
    }
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::RayRunning);
    assert_eq!(i1.node_id, Some(old_node));
    let (_, table) = w.im.get_instances().expect("table");
    assert_eq!(table.iter().filter(|i| live(i)).count(), 1, "{table:#?}");
}

/// A Ray node the GCS still lists after its cloud instance is gone is not adopted
/// again: a record (now finished) already ran it.
#[test]
fn a_node_a_finished_record_ran_is_not_adopted_again() {
    let mut w = with_idle_worker();
    let cid = w
        .instance("i1")
        .cloud_instance_id
        .clone()
        .expect("allocated");
    w.cloud.retain(|c| c.cloud_instance_id != cid);
    for _ in 0..2 {
        w.now += SEC;
        w.tick();
    }
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminated);
    assert!(
        w.ray.node_states[1].instance_id == cid
            && w.ray.node_states[1].status != Some(NodeStatus::Dead),
        "the GCS still lists the node"
    );
    let (_, table) = w.im.get_instances().expect("table");
    assert_eq!(table.iter().filter(|i| live(i)).count(), 0, "{table:#?}");
}

#[test]
fn a_dead_raylet_without_a_successor_still_stops_the_instance() {
    let mut w = with_idle_worker();
    w.ray.node_states[1].status = Some(NodeStatus::Dead);
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::Terminating);
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::Terminate { .. }))
    );
}

/// A provider that installs Ray: `cpus` CPUs of demand launched and allocated (all
/// cloud instances running, no raylet yet).
fn launched_with_installs(cpus: u64) -> World {
    let mut w = World::new(CONFIG);
    w.settings.install_ray = true;
    w.ray.pending_resource_requests = cpu_demand(cpus);
    let out = w.tick();
    w.cloud_fulfils(&out);
    w
}

#[test]
fn a_provider_that_installs_ray_takes_running_workers_through_ray_installing() {
    let mut w = launched_with_installs(4);
    // The first cloud instance is still booting: it stays ALLOCATED; the running one is
    // handed to the installer.
    w.cloud[0].state = CloudInstanceState::Pending;
    w.now += SEC;
    let out = w.tick();
    let installs: Vec<(String, String)> = out
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::InstallRay {
                instance_id,
                cloud_instance_id,
                ..
            } => Some((instance_id.clone(), cloud_instance_id.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(w.instance("i1").status, InstanceStatus::Allocated);
    assert_eq!(w.instance("i2").status, InstanceStatus::RayInstalling);
    assert_eq!(
        installs,
        [("i2".to_string(), w.cloud[1].cloud_instance_id.clone())]
    );
    // Nothing twice: the next iteration asks for no install of i2.
    w.now += SEC;
    let out = w.tick();
    assert!(
        !out.effects
            .iter()
            .any(|e| matches!(e, Effect::InstallRay { instance_id, .. } if instance_id == "i2")),
        "{:?}",
        out.effects
    );
    // i1 boots and is installed; i2's install fails: RAY_INSTALL_FAILED, then terminated.
    w.cloud[0].state = CloudInstanceState::Running;
    let c2 = w.cloud[1].cloud_instance_id.clone();
    w.errors.push(ProviderError::new(
        ProviderOp::InstallRay {
            cloud_instance_id: c2.clone(),
        },
        ProviderErrorKind::Transient,
        "ray install failed: update-failed",
    ));
    w.now += SEC;
    let out = w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayInstalling);
    let i2 = w.instance("i2");
    assert_eq!(i2.status, InstanceStatus::Terminating);
    assert!(
        i2.status_history
            .iter()
            .any(|h| h.status == InstanceStatus::RayInstallFailed),
        "{:?}",
        i2.status_history
    );
    assert_eq!(
        i2.last_error.as_deref(),
        Some("ray install failed: update-failed")
    );
    assert!(out.effects.iter().any(
        |e| matches!(e, Effect::Terminate { cloud_instance_ids, .. } if cloud_instance_ids.as_slice() == std::slice::from_ref(&c2))
    ));
    // i1's raylet joins: RAY_RUNNING.
    w.cloud.retain(|c| c.cloud_instance_id != c2);
    w.ray_joins();
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayRunning);
    // An install that hangs fails after Ray's 30 minutes.
    let mut w2 = launched_with_installs(2);
    w2.now += SEC;
    w2.tick();
    assert_eq!(w2.instance("i1").status, InstanceStatus::RayInstalling);
    w2.now += 1800 * SEC;
    w2.tick();
    assert_eq!(w2.instance("i1").status, InstanceStatus::Terminating);
}

#[test]
fn a_host_used_again_is_not_stopped_by_its_last_lifes_dead_node() {
    // On-premise hosts (Ray's `local` provider) are their cloud ids: the GCS still holds
    // the dead node of the host's last use when the host is launched again.
    let mut w = launched_with_installs(2);
    let host = w.cloud[0].cloud_instance_id.clone();
    let mut old = node(9, &host, "w", &[("CPU", 2.0)], &[("CPU", 2.0)]);
    old.status = Some(NodeStatus::Dead);
    w.ray.node_states.push(old);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayInstalling);
    w.now += SEC;
    w.tick();
    assert_eq!(w.instance("i1").status, InstanceStatus::RayInstalling);
    // Its new raylet joins: RAY_RUNNING with the new node.
    w.ray
        .node_states
        .push(node(10, &host, "w", &[("CPU", 2.0)], &[("CPU", 2.0)]));
    w.now += SEC;
    w.tick();
    let i1 = w.instance("i1");
    assert_eq!(i1.status, InstanceStatus::RayRunning);
    assert_eq!(i1.node_id.as_deref(), Some(hex(&[10; 4]).as_str()));
}

#[test]
fn ray_is_not_installed_where_it_already_runs() {
    // A raylet restart makes a new record (ALLOCATED) for an instance Ray runs on: a
    // provider that installs Ray must not run its updater there.
    let mut w = with_idle_worker();
    w.settings.install_ray = true;
    restart_raylet(&mut w);
    for _ in 0..3 {
        w.now += SEC;
        let out = w.tick();
        assert!(
            !out.effects
                .iter()
                .any(|e| matches!(e, Effect::InstallRay { .. })),
            "{:?}",
            out.effects
        );
    }
    let (_, table) = w.im.get_instances().expect("table");
    assert!(
        table
            .iter()
            .all(|i| i.times_entered(InstanceStatus::RayInstalling) == 0),
        "{table:#?}"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
