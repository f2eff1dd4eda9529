//! Sync: passive transitions that mirror the outside world (cloud instances, provider
//! errors, Ray node states, rejected drains).

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::*;

impl<S: InstanceStorage> Run<'_, S> {
    pub(super) fn sync(
        &mut self,
        config: &ClusterConfig,
        obs: Observed<'_>,
        ids: &mut dyn IdSource,
    ) -> Result<(), CoreError> {
        let cloud_ids: HashSet<&str> = obs
            .cloud
            .iter()
            .map(|c| c.cloud_instance_id.as_str())
            .collect();

        // 1. REQUESTED meets a cloud instance: one its launch request made, else (a cloud
        //    that carries no request id, as KubeRay pods or v1 providers) any unclaimed
        //    worker of its type, as Ray's `_try_resolve_pending_allocation` does. A head
        //    is never a worker's instance.
        // (`table()` reads the table again only when events were applied since.)
        let table = self.table()?;
        let mut held = held_ids(&table);
        let mut events = Vec::new();
        let mut allocated: HashSet<&str> = HashSet::new();
        // Unclaimed workers, in list order: by (request id, type), and by type for those
        // that carry no request id. The two pools are disjoint, so one pass over the
        // records joins by request id where it can and by type otherwise.
        let mut by_request: HashMap<(&str, &str), VecDeque<&CloudInstance>> = HashMap::new();
        let mut by_type: HashMap<&str, VecDeque<&CloudInstance>> = HashMap::new();
        for c in obs
            .cloud
            .iter()
            .filter(|c| !c.is_head() && !held.contains(c.cloud_instance_id.as_str()))
        {
            match c.request_id.as_deref() {
                Some(r) => by_request
                    .entry((r, c.node_type.as_str()))
                    .or_default()
                    .push_back(c),
                None if c.state != CloudInstanceState::Stopping => by_type
                    .entry(c.node_type.as_str())
                    .or_default()
                    .push_back(c),
                None => {}
            }
        }
        for i in table
            .iter()
            .filter(|i| i.status == InstanceStatus::Requested)
        {
            let key = (i.launch_request_id.as_str(), i.node_type.as_str());
            let joined = by_request
                .get_mut(&key)
                .and_then(VecDeque::pop_front)
                .map(|c| (c, "its launch request"))
                .or_else(|| {
                    by_type
                        .get_mut(i.node_type.as_str())
                        .and_then(VecDeque::pop_front)
                        .map(|c| (c, "its node type"))
                });
            if let Some((c, how)) = joined {
                held.insert(c.cloud_instance_id.as_str());
                allocated.insert(i.instance_id.as_str());
                events.push(
                    Self::ev(
                        i,
                        InstanceStatus::Allocated,
                        format!("cloud instance allocated (joined by {how})"),
                    )
                    .with_cloud_instance_id(c.cloud_instance_id.clone()),
                );
            }
        }
        // 2. Launch errors fail the instances their request still owes, at once; a
        //    capacity error also makes the type unavailable for a while.
        let mut owed: HashMap<(String, String), u64> = HashMap::new();
        let mut failed_instances: BTreeMap<&str, &str> = BTreeMap::new();
        for e in obs.provider_errors {
            match &e.op {
                ProviderOp::Launch {
                    request_id,
                    node_type,
                    count,
                } => {
                    *owed
                        .entry((request_id.clone(), node_type.clone()))
                        .or_default() += count;
                }
                // An instance that failed on its own is its record's failure; only one
                // that no record holds yet costs its request one instance.
                ProviderOp::Instance {
                    cloud_instance_id,
                    request_id,
                    node_type,
                } => {
                    if held.contains(cloud_instance_id.as_str()) {
                        failed_instances.insert(cloud_instance_id.as_str(), e.message.as_str());
                    } else if let Some(r) = request_id {
                        *owed.entry((r.clone(), node_type.clone())).or_default() += 1;
                    }
                }
                _ => {}
            }
            if let Some((node_type, zone)) = e.capacity() {
                self.avail
                    .unavailable
                    .mark(node_type, zone, &e.message, self.now_ns);
                self.out.warnings.push(format!(
                    "node type {node_type} is unavailable for a while (capacity): {}",
                    e.message
                ));
            }
        }
        for i in table.iter().filter(|i| {
            i.status == InstanceStatus::Requested && !allocated.contains(i.instance_id.as_str())
        }) {
            let key = (i.launch_request_id.clone(), i.node_type.clone());
            if let Some(n) = owed.get_mut(&key)
                && *n > 0
            {
                *n -= 1;
                let why = obs
                    .provider_errors
                    .iter()
                    .find(|e| match &e.op {
                        ProviderOp::Launch { request_id, .. } => *request_id == key.0,
                        ProviderOp::Instance { request_id, .. } => {
                            request_id.as_deref() == Some(key.0.as_str())
                        }
                        _ => false,
                    })
                    .map(|e| e.message.clone())
                    .unwrap_or_default();
                events.push(
                    Self::ev(i, InstanceStatus::AllocationFailed, "launch failed").with_error(why),
                );
            }
        }
        // 3. Cloud instances that are gone; 4. termination errors.
        let term_errors: BTreeMap<&str, &ProviderError> = obs
            .provider_errors
            .iter()
            .filter_map(|e| match &e.op {
                ProviderOp::Terminate { cloud_instance_id } => {
                    Some((cloud_instance_id.as_str(), e))
                }
                _ => None,
            })
            .collect();
        for i in table.iter().filter(|i| live(i)) {
            let Some(cid) = i.cloud_instance_id.as_deref() else {
                continue;
            };
            if matches!(i.status, InstanceStatus::Queued | InstanceStatus::Requested) {
                continue;
            }
            if !cloud_ids.contains(cid) {
                let mut e = Self::ev(i, InstanceStatus::Terminated, "cloud instance is gone");
                // Died before Ray ran on it, with an error of its own or of its launch: a
                // failed launch.
                if i.times_entered(InstanceStatus::RayRunning) == 0 {
                    let own = failed_instances.get(cid).map(|m| m.to_string());
                    let of_launch = || {
                        obs.provider_errors
                            .iter()
                            .find(|e| {
                                matches!(&e.op, ProviderOp::Launch { request_id, .. }
                                    if *request_id == i.launch_request_id)
                            })
                            .map(|e| e.message.clone())
                    };
                    if let Some(msg) = own.or_else(of_launch) {
                        e = e.with_error(msg);
                    }
                }
                events.push(e);
            } else if let Some(msg) = failed_instances.get(cid)
                && matches!(
                    i.status,
                    InstanceStatus::Allocated | InstanceStatus::RayInstalling
                )
                && crate::instance::is_valid_transition(i.status, InstanceStatus::Terminating)
            {
                // Failed before Ray ran on it and still there: terminate what is left.
                events.push(
                    Self::ev(i, InstanceStatus::Terminating, "the instance failed")
                        .with_error(*msg),
                );
            } else if i.status == InstanceStatus::Terminating
                && let Some(e) = term_errors.get(cid)
            {
                // A refusal the cloud says is about this id for good (a head, an
                // instance that is not this cluster's worker) is given up after it is met
                // on TERMINATE_PERMANENT_TRIES tries in a row: the record says why, and a
                // restart tries it again. Any other error (expired credentials, a
                // transient fault, throttling) is retried after the backoff, never given
                // up: the instance would go on running and billing.
                let tries = i.termination_retries.saturating_add(1);
                let details = if is_permanent(&e.kind) && tries >= TERMINATE_PERMANENT_TRIES {
                    self.out.warnings.push(format!(
                        "giving up terminating {cid} after {tries} tries ({}): {}",
                        e.kind.name(),
                        e.message
                    ));
                    format!("{TERMINATION_GIVEN_UP} ({} error)", e.kind.name())
                } else {
                    self.out.warnings.push(format!(
                        "terminating {cid} failed (try {tries}, {} error), retried after a \
                         backoff: {}",
                        e.kind.name(),
                        e.message
                    ));
                    format!("termination failed ({} error)", e.kind.name())
                };
                events.push(
                    Self::ev(i, InstanceStatus::TerminationFailed, details)
                        .with_error(e.message.clone()),
                );
            }
        }
        // 4b. Install failures (Ray's RayInstallError): RAY_INSTALLING -> RAY_INSTALL_FAILED.
        let install_errors: BTreeMap<&str, &str> = obs
            .provider_errors
            .iter()
            .filter_map(|e| match &e.op {
                ProviderOp::InstallRay { cloud_instance_id } => {
                    Some((cloud_instance_id.as_str(), e.message.as_str()))
                }
                _ => None,
            })
            .collect();
        for i in table
            .iter()
            .filter(|i| i.status == InstanceStatus::RayInstalling)
        {
            // One event per instance per batch (a vanished instance is already TERMINATED).
            if events
                .iter()
                .any(|e: &InstanceUpdateEvent| e.instance_id == i.instance_id)
            {
                continue;
            }
            if let Some(msg) = i
                .cloud_instance_id
                .as_deref()
                .and_then(|c| install_errors.get(c))
            {
                events.push(
                    Self::ev(i, InstanceStatus::RayInstallFailed, "failed to install ray")
                        .with_error(*msg),
                );
            }
        }
        self.apply(events)?;

        // 5. Adopt cloud instances no record knows (e.g. launched just before a crash
        //    whose REQUESTED record was lost, or started by hand with our tags). Never the
        //    head; never an instance being stopped (it is on its way out); never one whose
        //    request a requeued (QUEUED) record is about to re-send: it joins that record.
        let requeued: BTreeSet<&str> = table
            .iter()
            .filter(|i| i.status == InstanceStatus::Queued && !i.launch_request_id.is_empty())
            .map(|i| i.launch_request_id.as_str())
            .collect();
        let mut events = Vec::new();
        let mut adopted_clouds = Vec::new();
        for c in obs.cloud {
            if held.contains(c.cloud_instance_id.as_str())
                || c.is_head()
                || c.state == CloudInstanceState::Stopping
                || c.request_id
                    .as_deref()
                    .is_some_and(|r| requeued.contains(r))
            {
                continue;
            }
            // A node type the config does not know is adopted too, to be removed: at once
            // when Ray does not run on it, drained first when it does (step 3), never
            // terminated while Ray is busy on it.
            let status = InstanceStatus::Allocated;
            let node_type = if c.node_type.is_empty() {
                "unknown".to_string()
            } else {
                c.node_type.clone()
            };
            let mut e = InstanceUpdateEvent::create(ids.instance_id(), node_type, status)
                .with_cloud_instance_id(c.cloud_instance_id.clone())
                .with_details(ADOPTED_UNKNOWN);
            if let Some(r) = &c.request_id {
                e = e.with_launch_request_id(r.clone());
            }
            if let Some(h) = &c.launch_config_hash {
                e = e.with_launch_config_hash(h.clone());
            }
            adopted_clouds.push(format!("{} ({})", c.cloud_instance_id, c.node_type));
            events.push(e);
        }
        self.out.warnings.extend(summarize(
            "adopted cloud instances that no record knew",
            &adopted_clouds,
        ));
        self.apply(events)?;

        // 5b. Adopt Ray nodes that name a cloud instance no record holds (Ray's
        //     `_handle_extra_cloud_instances_from_ray_nodes`): a node whose instance the
        //     cloud does not list (yet, or any more). Never the head, never a dead or
        //     draining node, never one some record (even a finished one) already ran, and
        //     only of a type the config knows (a node started by hand under another type
        //     is not rayscale's to stop).
        let now = self.table()?;
        // The same table (nothing applied since step 1, so step 1 joined nothing) holds the
        // same instances.
        let held = if Rc::ptr_eq(&table, &now) {
            held
        } else {
            held_ids(&now)
        };
        let table = &now;
        // The node ids records ran, made only for a node that gets this far (a cluster's
        // nodes are all held by their records).
        let mut ran: Option<HashSet<&str>> = None;
        let stopping: HashSet<&str> = obs
            .cloud
            .iter()
            .filter(|c| c.state == CloudInstanceState::Stopping)
            .map(|c| c.cloud_instance_id.as_str())
            .collect();
        let mut events = Vec::new();
        let mut adopted: HashSet<&str> = HashSet::new();
        let mut adopted_nodes = Vec::new();
        // The cloud ids of multi-host instances rayscale made: a host's Ray node outliving
        // its deleted instance in the GCS is never taken for an unmanaged instance.
        let mut made_multi: HashSet<&str> = HashSet::new();
        made_multi.extend(
            table
                .iter()
                .filter(|i| hosts::is_multi_host(config, i))
                .filter_map(|i| i.cloud_instance_id.as_deref()),
        );
        let hexes = self.hexes.clone();
        for (ns, hex) in obs.ray.node_states.iter().zip(hexes.iter()) {
            if ns.instance_id.is_empty()
                || ns.total_resources.get(HEAD_MARKER).is_some()
                || matches!(
                    ns.status,
                    Some(NodeStatus::Dead) | Some(NodeStatus::Draining)
                )
                || held.contains(ns.instance_id.as_str())
                || stopping.contains(ns.instance_id.as_str())
                || made_multi.contains(ns.instance_id.as_str())
                || ran
                    .get_or_insert_with(|| {
                        // Sized for the table (a filtered `collect` would grow it a dozen
                        // times).
                        let mut ran = HashSet::with_capacity(table.len());
                        ran.extend(table.iter().filter_map(|i| i.node_id.as_deref()));
                        ran
                    })
                    .contains(hex.as_str())
                || config.node_type(&ns.ray_node_type_name).is_none()
                || !adopted.insert(ns.instance_id.as_str())
            {
                continue;
            }
            adopted_nodes.push(format!(
                "{hex} on {} ({})",
                ns.instance_id, ns.ray_node_type_name
            ));
            events.push(
                InstanceUpdateEvent::create(
                    ids.instance_id(),
                    ns.ray_node_type_name.clone(),
                    InstanceStatus::Allocated,
                )
                .with_cloud_instance_id(ns.instance_id.clone())
                .with_node_id(hex)
                .with_details("allocated an unmanaged cloud instance from its ray node"),
            );
        }
        self.out.warnings.extend(summarize(
            "adopted ray nodes that no record knew",
            &adopted_nodes,
        ));
        self.apply(events)?;

        // 6. Ray node states; 7. rejected drains.
        let table = self.table()?;
        let mut by_cloud: HashMap<&str, &Instance> = HashMap::with_capacity(table.len());
        by_cloud.extend(
            table
                .iter()
                .filter(|i| live(i))
                .filter_map(|i| i.cloud_instance_id.as_deref().map(|c| (c, &**i))),
        );
        let mut events = Vec::new();
        let mut moved: HashSet<&str> = HashSet::new();
        let is_live = |ns: &crate::model::NodeState| {
            !matches!(
                ns.status,
                Some(NodeStatus::Dead) | Some(NodeStatus::Draining)
            )
        };
        // A node whose row could not be read is there (not dead, not gone).
        let unreadable_hexes: Vec<(String, Option<NodeStatus>)> = obs
            .ray
            .unreadable_nodes
            .iter()
            .map(|n| (n.node_id_hex(), n.status))
            .collect();
        // Made only when a record's node is not the one on its instance now.
        let mut status_of: Option<HashMap<&str, Option<NodeStatus>>> = None;
        // A raylet that restarted on a healthy instance: a live node under the cloud id of
        // a record whose own node is dead (or gone from the GCS). The old node's record is
        // retired (TERMINATED: no terminate call, the instance is kept) and a new record
        // takes the instance and the new node.
        for (ns, hex) in obs
            .ray
            .node_states
            .iter()
            .zip(hexes.iter())
            .filter(|(n, _)| is_live(n))
        {
            let Some(i) = by_cloud.get(ns.instance_id.as_str()) else {
                continue;
            };
            // Another live node on a multi-host instance is another host.
            if hosts::is_multi_host(config, i) {
                continue;
            }
            let Some(old) = i.node_id.as_deref() else {
                continue;
            };
            if old == hex {
                continue;
            }
            let old_dead = status_of
                .get_or_insert_with(|| {
                    obs.ray
                        .node_states
                        .iter()
                        .zip(hexes.iter())
                        .map(|(n, hex)| (hex.as_str(), n.status))
                        .chain(unreadable_hexes.iter().map(|(h, s)| (h.as_str(), *s)))
                        .collect()
                })
                .get(old)
                .is_none_or(|s| *s == Some(NodeStatus::Dead));
            if !old_dead
                || !matches!(
                    i.status,
                    InstanceStatus::RayRunning
                        | InstanceStatus::RayStopRequested
                        | InstanceStatus::RayStopping
                        | InstanceStatus::RayStopped
                )
                || !moved.insert(i.instance_id.as_str())
            {
                continue;
            }
            events.push(Self::ev(
                i,
                InstanceStatus::Terminated,
                format!("ray node {old} was replaced by {hex} on the same instance, which is kept"),
            ));
            events.push(
                InstanceUpdateEvent::create(
                    ids.instance_id(),
                    i.node_type.clone(),
                    InstanceStatus::Allocated,
                )
                .with_cloud_instance_id(ns.instance_id.clone())
                .with_launch_config_hash(i.launch_config_hash.clone())
                .with_launch_request(i.launch_request_id.clone(), i.launch_request_size)
                .with_details(format!("ray restarted on the instance (node {hex})")),
            );
        }
        for (ns, hex) in obs.ray.node_states.iter().zip(hexes.iter()) {
            let Some(i) = by_cloud.get(ns.instance_id.as_str()) else {
                let is_head = ns.total_resources.get(HEAD_MARKER).is_some();
                if !is_head && ns.status != Some(NodeStatus::Dead) {
                    self.out.unknown_ray_nodes.push(hex.clone());
                }
                continue;
            };
            let (target, why) = match ns.status.unwrap_or(NodeStatus::Running) {
                NodeStatus::Running | NodeStatus::Idle | NodeStatus::Unspecified => {
                    (InstanceStatus::RayRunning, "ray node is running")
                }
                NodeStatus::Draining => (InstanceStatus::RayStopping, "ray node is draining"),
                NodeStatus::Dead => (InstanceStatus::RayStopped, "ray node is dead"),
            };
            // Back to RAY_RUNNING only through a rejected drain, never from a node state.
            let passive_ok = match target {
                InstanceStatus::RayRunning => matches!(
                    i.status,
                    InstanceStatus::Allocated | InstanceStatus::RayInstalling
                ),
                _ => true,
            };
            // A node of an earlier life of this cloud id (the GCS keeps dead nodes) is not
            // this instance's: a record that has not seen its node alive is claimed by a
            // live node only (on-premise hosts and Ray's fake_multinode reuse cloud ids,
            // and a host used again would be stopped by its last life's dead node; a
            // raylet that dies before it is ever seen alive leaves its record to the
            // ALLOCATED / RAY_INSTALLING timeouts). One event per instance per batch.
            // Another host of a running multi-host instance dead: the slice is broken (its
            // hosts run one program) and is stopped whole, as when its first host dies.
            if ns.status == Some(NodeStatus::Dead)
                && i.status == InstanceStatus::RayRunning
                && i.node_id.as_deref().is_some_and(|n| n != hex)
                && hosts::is_multi_host(config, i)
                && moved.insert(i.instance_id.as_str())
            {
                events.push(Self::ev(
                    i,
                    InstanceStatus::RayStopped,
                    format!("ray node {hex}, another host of the instance, is dead"),
                ));
                continue;
            }
            // A multi-host instance's record takes its first host's node. A node draining
            // on a notice for this very instance is this instance's too (it joined, took
            // work and got its notice between two looks, a launch call holding the loop):
            // the notice, keyed by the instance's cloud id, is the evidence an earlier
            // life's node lacks (a notice whose deadline came before this record was made
            // is an earlier life's, as of a stopped instance started again).
            let made = i
                .status_history
                .first()
                .map_or(i64::MIN, |h| h.timestamp_ns);
            let noticed = ns.status == Some(NodeStatus::Draining)
                && obs.notices.iter().any(|n| {
                    n.cloud_instance_id == ns.instance_id && n.deadline_ns.is_none_or(|d| d >= made)
                });
            let other_node = match &i.node_id {
                Some(n) => n != hex,
                None => !(is_live(ns) || noticed) || !hosts::may_claim(config, i, ns),
            };
            if i.status != target
                && passive_ok
                && !other_node
                && crate::instance::is_valid_transition(i.status, target)
                && moved.insert(i.instance_id.as_str())
            {
                // Draining without rayscale having asked: the notice says why.
                let why = if target == InstanceStatus::RayStopping
                    && super::preempt::entered_drain_from_outside(i.status)
                {
                    match obs
                        .notices
                        .iter()
                        .find(|n| n.cloud_instance_id == ns.instance_id)
                    {
                        Some(n) => format!("{DRAINED_OUTSIDE}: preempted ({})", n.describe()),
                        None => format!("{DRAINED_OUTSIDE} (no notice)"),
                    }
                } else {
                    why.to_string()
                };
                events.push(Self::ev(i, target, why).with_node_id(hex));
            }
        }
        for rej in obs.drain_rejections {
            if let Some(i) = table.iter().find(|i| {
                i.instance_id == rej.instance_id && i.status == InstanceStatus::RayStopRequested
            }) && !events.iter().any(|e| e.instance_id == i.instance_id)
            {
                events.push(
                    Self::ev(i, InstanceStatus::RayRunning, "drain rejected")
                        .with_error(rej.reason.clone()),
                );
            }
        }
        self.apply(events)
    }
}

/// The cloud ids the table's live records hold, in a set sized for the table (a filtered
/// `collect` would grow it a dozen times).
fn held_ids(table: &[Arc<Instance>]) -> HashSet<&str> {
    let mut held = HashSet::with_capacity(table.len());
    held.extend(
        table
            .iter()
            .filter(|i| live(i))
            .filter_map(|i| i.cloud_instance_id.as_deref()),
    );
    held
}
