//! Step: active transitions (missing Ray nodes, stuck instances, the scheduler's decision,
//! termination of what is stopped or failed).

use super::*;

impl<S: InstanceStorage> Run<'_, S> {
    pub(super) fn step(
        &mut self,
        config: &ClusterConfig,
        chain: &mut ExpanderChain,
        s: &ReconcilerSettings,
        obs: Observed<'_>,
        ids: &mut dyn IdSource,
    ) -> Result<(), CoreError> {
        let now = self.now_ns;
        // Instances whose node's row could not be read are kept exactly as they are.
        let unreadable = Unreadable::of(obs.ray);
        // 1. Ray nodes missing from the GCS: gone only on positive evidence, a reply whose
        //    rows were read and that does not name the node (an unreadable row names it).
        let hexes = self.hexes.clone();
        let ray_ids: foldhash::HashSet<&str> = hexes
            .iter()
            .chain(unreadable.nodes.iter())
            .map(String::as_str)
            .collect();
        let table = self.table()?;
        let mut events = Vec::new();
        for i in table.iter() {
            if !i.is_head
                && !unreadable.holds(i)
                && matches!(
                    i.status,
                    InstanceStatus::RayRunning
                        | InstanceStatus::RayStopRequested
                        | InstanceStatus::RayStopping
                )
                && let Some(node) = &i.node_id
                && !ray_ids.contains(node.as_str())
            {
                events.push(Self::ev(
                    i,
                    InstanceStatus::RayStopped,
                    "ray node no longer in the GCS",
                ));
            }
        }
        self.apply(events)?;

        // 2. Stuck instances.
        let table = self.table()?;
        let mut events = Vec::new();
        let over = |i: &Instance, limit_s: i64| {
            i.status_since(i.status)
                .is_some_and(|t| now.saturating_sub(t) >= limit_s.saturating_mul(SEC))
        };
        for i in table.iter().filter(|i| !unreadable.holds(i)) {
            let e = match i.status {
                InstanceStatus::Requested if over(i, s.request_timeout_s) => {
                    let tries = i.times_entered(InstanceStatus::Requested);
                    Some(if tries > s.max_request_retries {
                        Self::ev(
                            i,
                            InstanceStatus::AllocationFailed,
                            format!("no cloud instance after {tries} requests"),
                        )
                        .with_error(format!("no cloud instance after {tries} requests"))
                    } else {
                        Self::ev(
                            i,
                            InstanceStatus::Queued,
                            format!("requeued after {}s", s.request_timeout_s),
                        )
                        .bump_launch_retries()
                    })
                }
                InstanceStatus::Allocated if over(i, s.allocate_timeout_s) => Some(Self::ev(
                    i,
                    InstanceStatus::AllocationTimeout,
                    format!("ray not running after {}s", s.allocate_timeout_s),
                )),
                InstanceStatus::RayInstalling if over(i, s.install_timeout_s) => Some(Self::ev(
                    i,
                    InstanceStatus::RayInstallFailed,
                    format!("ray not installed after {}s", s.install_timeout_s),
                )),
                InstanceStatus::Terminating if over(i, s.terminating_timeout_s) => Some(Self::ev(
                    i,
                    InstanceStatus::TerminationFailed,
                    format!("still there after {}s", s.terminating_timeout_s),
                )),
                InstanceStatus::RayStopRequested if over(i, s.stop_requested_timeout_s) => {
                    Some(Self::ev(
                        i,
                        InstanceStatus::RayRunning,
                        format!("not drained after {}s", s.stop_requested_timeout_s),
                    ))
                }
                _ => None,
            };
            events.extend(e);
        }
        self.apply(events)?;
        // Drains with a deadline (consolidation) end when their work does, or at it.
        self.finish_deadline_drains(obs, &unreadable)?;

        // Nodes drained from outside (preempted): their work is demand now.
        let outside_demand = if config.preemption.enabled {
            self.drained_outside(obs, &unreadable)?
        } else {
            Vec::new()
        };

        // 3. Scale: the scheduler's decision.
        let table = self.table()?;
        let head_running = obs.ray.node_states.iter().any(|n| {
            n.total_resources.get(HEAD_MARKER).is_some() && n.status != Some(NodeStatus::Dead)
        });
        // Records whose type the config no longer knows are not scheduled: they are
        // terminated (drained first when Ray runs on them).
        let unknown_type = |i: &Instance| config.node_type(&i.node_type).is_none();
        let mut events = Vec::new();
        // The idle Ray nodes, by hex id: read only for an adopted record of an unknown type
        // (rare), so made only then.
        let mut idle_nodes: Option<foldhash::HashSet<&str>> = None;
        for i in table
            .iter()
            .filter(|i| live(i) && unknown_type(i) && !unreadable.holds(i))
        {
            let why = format!("node type {:?} is not in the config", i.node_type);
            let adopted = i
                .status_history
                .first()
                .is_some_and(|c| c.details == ADOPTED_UNKNOWN);
            let e = match i.status {
                InstanceStatus::Queued => Self::ev(i, InstanceStatus::Terminated, why),
                InstanceStatus::Allocated | InstanceStatus::RayInstalling => {
                    Self::ev(i, InstanceStatus::Terminating, why)
                }
                // A cloud instance adopted with a type the config does not know (moved
                // from Ray's autoscaler, a renamed type, a lost table) was never this
                // autoscaler's decision: Ray is drained off it as off an idle node, once
                // the GCS says the node is idle, never while it is busy.
                InstanceStatus::RayRunning if adopted => {
                    let idle = idle_nodes.get_or_insert_with(|| {
                        obs.ray
                            .node_states
                            .iter()
                            .zip(hexes.iter())
                            .filter(|(n, _)| n.is_idle())
                            .map(|(_, h)| h.as_str())
                            .collect()
                    });
                    if !i.node_id.as_deref().is_some_and(|n| idle.contains(n)) {
                        continue;
                    }
                    Self::ev(i, InstanceStatus::RayStopRequested, why)
                        .with_stop_cause(TerminationCause::Idle.name())
                }
                // Ray's scheduler calls a node of a type the config lost outdated.
                InstanceStatus::RayRunning => Self::ev(i, InstanceStatus::RayStopRequested, why)
                    .with_stop_cause(TerminationCause::Outdated.name()),
                _ => continue,
            };
            self.out
                .warnings
                .push(format!("terminating {}: {}", i.instance_id, e.details));
            events.push(e);
        }
        self.apply(events)?;
        let mut table = self.table()?;
        // Atomic gangs that did not come up whole are released, before the scheduler
        // counts their nodes (off: nothing).
        let mut set_aside = Vec::new();
        if config.gangs.is_some() {
            let c = gangs::check(
                config,
                obs.ray,
                &table,
                &mut self.avail.gangs,
                &mut self.avail.unavailable,
                now,
                &|i: &Instance| unreadable.holds(i),
            );
            for l in &c.lines {
                self.out.warnings.push(l.clone());
            }
            self.out.gang_lines = c.lines;
            set_aside = c.set_aside;
            if !c.events.is_empty() {
                self.apply(c.events)?;
                table = self.table()?;
            }
        }
        // Queued launches of a type the cloud has no capacity for are canceled, so that
        // the scheduler places their demand on another type (Karpenter's unavailable
        // offerings); in-flight requests of the type are left to finish or fail.
        let inputs = self.avail.scheduler_inputs(now, config);
        let canceled: Vec<InstanceUpdateEvent> = table
            .iter()
            .filter(|i| {
                i.status == InstanceStatus::Queued
                    && inputs.unavailable_node_types.contains(&i.node_type)
            })
            .map(|i| {
                Self::ev(
                    i,
                    InstanceStatus::Terminated,
                    format!(
                        "canceled: node type {} is unavailable (capacity)",
                        i.node_type
                    ),
                )
            })
            .collect();
        let table = if canceled.is_empty() {
            table
        } else {
            self.apply(canceled)?;
            self.table()?
        };
        let records: Vec<RecordRef<'_>> = table
            .iter()
            .filter(|i| live(i) && !unknown_type(i) && !gangs::given_up(i, &self.avail.gangs))
            .map(|i| RecordRef {
                instance_id: &i.instance_id,
                cloud_instance_id: i.cloud_instance_id.as_deref(),
                node_type: &i.node_type,
                status: i.status,
                launch_config_hash: Some(&i.launch_config_hash),
            })
            .collect();
        let placed = with_unreadable(config, obs.ray, &table);
        let ray = placed.as_ref().unwrap_or(obs.ray);
        let fixed = schedulable_state(config, ray, &table, &mut self.out.warnings);
        // A released gang's nodes being drained are not room for anything, the group
        // planned again whole included (its members kept for their work are).
        let released = config
            .gangs
            .is_some()
            .then(|| {
                gangs::without_given_up(fixed.as_ref().unwrap_or(ray), &table, &self.avail.gangs)
            })
            .flatten();
        let state = released.as_ref().or(fixed.as_ref()).unwrap_or(ray);
        // A multi-host instance is one node to the scheduler (no such type: nothing).
        let one_per_instance = hosts::folded(config, state, &table);
        let state = one_per_instance.as_ref().unwrap_or(state);
        // The nodes' hex ids were made once for this reconcile, of the state as read.
        let read = std::ptr::eq(state, obs.ray).then_some(&hexes[..]);
        let mut request =
            build_request_with_hexes(config, state, &records, read, "gcs", "instance table")?;
        inputs.apply(&mut request);
        // The members of given-up gangs that are no room still hold their places under
        // the max (off: nothing).
        if config.gangs.is_some() {
            gangs::hold_places(&mut request, &table, &self.avail.gangs);
        }
        // Atomic gangs set aside after their last attempt: not launched for, reported.
        if !set_aside.is_empty() {
            let (aside, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut request.gang_requests)
                .into_iter()
                .partition(|r| {
                    gangs::gang_id(r).is_some_and(|id| set_aside.iter().any(|s| s == id))
                });
            request.gang_requests = keep;
            self.out.report.infeasible_gangs.extend(aside);
        }
        let outside = !outside_demand.is_empty();
        request.resource_requests.extend(outside_demand);
        let (mut decision, views) = schedule_with_placements(&request, chain);
        // In tests: with every rayscale knob off, nothing below may change Ray's decision
        // (the whole-loop simulation and every reconciler test check it at each step).
        #[cfg(test)]
        let as_scheduled = (config.limits == crate::config::limits::Limits::default()
            && config.gangs.is_none()
            && !config.preemption.enabled)
            .then(|| decision.clone());
        // rayscale's own scale-downs, opted in (none set: nothing here runs).
        if config.limits.autostop_minutes.is_some() || config.limits.consolidation.is_some() {
            self.avail.clocks.observe(now);
        } else {
            self.avail.clocks = Default::default();
        }
        // They see a multi-host instance as one node too (no such type: the state read).
        let units = hosts::folded(config, obs.ray, &table);
        let units = units.as_ref().unwrap_or(obs.ray);
        self.out.autostop = autostop::apply(
            config.limits.autostop_minutes,
            units,
            &request,
            outside,
            &table,
            &mut decision,
            &mut self.avail.clocks,
            now,
        );
        consolidate::choose(
            config.limits.consolidation.as_ref(),
            config,
            units,
            &unreadable,
            &request,
            &table,
            &mut decision,
            &mut self.avail.clocks,
            now,
        );
        // The operator's limits (none set: the decision is Ray's, unchanged).
        let limited = limits::apply(
            &config.limits,
            config,
            &mut decision,
            &views,
            &table,
            self.now_ns,
        );
        #[cfg(test)]
        if let Some(d) = &as_scheduled {
            assert_eq!(
                d, &decision,
                "with every rayscale knob off the decision is the scheduler's"
            );
        }
        self.out.warnings.extend(chain.take_warnings());
        for (r, _) in &decision.infeasible_requests {
            self.out.report.infeasible_requests.push(r.clone());
        }
        for &g in &decision.infeasible_gang_requests {
            if let Some(x) = request.gang_requests.get(g) {
                self.out.report.infeasible_gangs.push(x.clone());
            }
        }
        for &c in &decision.infeasible_constraints {
            if let Some(x) = request.cluster_constraints.get(c) {
                self.out.report.infeasible_constraints.push(x.clone());
            }
        }
        if head_running {
            let by_id: HashMap<&str, &Instance> = table
                .iter()
                .map(|i| (i.instance_id.as_str(), &**i))
                .collect();
            let mut events = Vec::new();
            for t in &decision.terminate {
                let Some(i) = by_id.get(t.instance_id.as_str()) else {
                    self.out.warnings.push(format!(
                        "cannot terminate ray node {} ({}): no instance of this cluster runs it",
                        t.ray_node_id,
                        t.cause.name()
                    ));
                    continue;
                };
                if unreadable.holds(i) {
                    self.out.warnings.push(format!(
                        "keeping {}: the scheduler chose it ({}), but its ray node's row \
                         could not be read",
                        i.instance_id,
                        t.cause.name()
                    ));
                    continue;
                }
                let why = format!("{} ({})", t.cause.name(), t.node_type);
                let e = match i.status {
                    InstanceStatus::Queued => {
                        Self::ev(i, InstanceStatus::Terminated, format!("canceled: {why}"))
                    }
                    InstanceStatus::Allocated | InstanceStatus::RayInstalling => Self::ev(
                        i,
                        InstanceStatus::Terminating,
                        format!("terminating: {why}"),
                    ),
                    InstanceStatus::RayRunning => {
                        let e = Self::ev(
                            i,
                            InstanceStatus::RayStopRequested,
                            format!("draining: {why}"),
                        )
                        .with_stop_cause(t.cause.name());
                        match (&config.limits.consolidation, t.cause) {
                            (Some(c), TerminationCause::Consolidation) => {
                                let d = i64::try_from(c.drain_deadline_s)
                                    .unwrap_or(i64::MAX)
                                    .saturating_mul(SEC);
                                e.with_drain_deadline(now.saturating_add(d))
                            }
                            _ => e,
                        }
                    }
                    _ => continue,
                };
                events.push(e);
            }
            // With atomic gangs, the nodes launched for a pending group carry its tag.
            let mut tags: BTreeMap<&str, VecDeque<String>> = BTreeMap::new();
            if config.gangs.is_some() {
                for v in views.iter().filter(|v| {
                    v.fate == NodeFate::Launch
                        && !v.gang.is_some_and(|g| limited.capped_gangs.contains(&g))
                }) {
                    let tag = v
                        .gang
                        .and_then(|gi| request.gang_requests.get(gi))
                        .and_then(gangs::gang_id)
                        .map(|pg| gangs::gang_tag(pg, now));
                    if let Some(t) = tag {
                        tags.entry(v.node_type.as_str()).or_default().push_back(t);
                    }
                }
            }
            for (node_type, count) in &decision.launch {
                let hash = config
                    .node_type(node_type)
                    .map(|t| t.launch_config_hash.clone())
                    .unwrap_or_default();
                for _ in 0..*count {
                    let mut e = InstanceUpdateEvent::create(
                        ids.instance_id(),
                        node_type.clone(),
                        InstanceStatus::Queued,
                    )
                    .with_launch_config_hash(hash.clone())
                    .with_details("queued by the scheduler");
                    if let Some(t) = tags.get_mut(node_type.as_str()).and_then(|q| q.pop_front()) {
                        e = e.with_gang(t);
                    }
                    events.push(e);
                }
            }
            self.apply(events)?;
        }
        let scheduled = (decision, request, views, limited);

        // 4. Terminate what is stopped, timed out or failed.
        let table = self.table()?;
        let mut events = Vec::new();
        for i in table.iter() {
            let again = match i.status {
                InstanceStatus::RayStopped
                | InstanceStatus::AllocationTimeout
                | InstanceStatus::RayInstallFailed => false,
                // A failed termination is tried again after a backoff per instance (5 s,
                // doubling, at most 300 s), unless it was given up for good.
                InstanceStatus::TerminationFailed => {
                    let given_up = termination_given_up(i);
                    let wait_s = backoff_s(
                        s.terminate_backoff_s,
                        i.termination_retries,
                        s.max_terminate_backoff_s,
                    );
                    if given_up || !over(i, wait_s) {
                        continue;
                    }
                    true
                }
                _ => continue,
            };
            let mut e = Self::ev(
                i,
                InstanceStatus::Terminating,
                format!("terminating after {}", i.status.name()),
            );
            if again {
                e = e.bump_termination_retries();
            }
            events.push(e);
        }
        self.apply(events)?;
        let mut to_terminate = std::mem::take(&mut self.to_terminate);
        if !to_terminate.is_empty() {
            to_terminate.sort();
            to_terminate.dedup();
            self.out.effects.push(Effect::Terminate {
                cloud_instance_ids: to_terminate,
                request_id: ids.request_id(),
            });
        }
        self.pace(s, ids)?;
        let (decision, request, views, limited) = scheduled;
        let table = self.table()?;
        let table: Vec<&Instance> = table.iter().map(|i| &**i).collect();
        let unavailable = self.avail.unavailable.active(self.now_ns);
        let rejections: Vec<(String, String)> = obs
            .drain_rejections
            .iter()
            .map(|r| (r.instance_id.clone(), r.reason.clone()))
            .collect();
        self.out.explanation = Some(crate::explain::explain(&crate::explain::Inputs {
            config,
            request: &request,
            decision: &decision,
            nodes: &views,
            table: &table,
            holds: &self.holds,
            unavailable: &unavailable,
            drain_rejections: &rejections,
            held_stops: &limited.held,
            cost_capped: &limited.capped,
            now_ns: self.now_ns,
        }));
        self.out.decision = Some(decision);
        if s.install_ray {
            self.install(obs)?;
        }
        self.report(s)
    }

    /// 5. Install Ray on running ALLOCATED workers (Ray's `_handle_ray_install`): the
    ///    transition's effect asks the provider to run Ray's node updater.
    fn install(&mut self, obs: Observed<'_>) -> Result<(), CoreError> {
        let running: BTreeSet<&str> = obs
            .cloud
            .iter()
            .filter(|c| c.is_running())
            .map(|c| c.cloud_instance_id.as_str())
            .collect();
        // Never on an instance whose Ray already runs (a raylet restarted under a new
        // record): the updater's start commands would stop it.
        let ray_runs: BTreeSet<&str> = obs
            .ray
            .node_states
            .iter()
            .filter(|n| n.status != Some(NodeStatus::Dead))
            .map(|n| n.instance_id.as_str())
            .chain(
                obs.ray
                    .unreadable_nodes
                    .iter()
                    .map(|n| n.instance_id.as_str()),
            )
            .collect();
        let table = self.table()?;
        let events: Vec<InstanceUpdateEvent> = table
            .iter()
            .filter(|i| {
                i.status == InstanceStatus::Allocated
                    && !i.is_head
                    && !i
                        .cloud_instance_id
                        .as_deref()
                        .is_some_and(|c| ray_runs.contains(c))
                    && i.cloud_instance_id
                        .as_deref()
                        .is_some_and(|c| running.contains(c))
            })
            .map(|i| Self::ev(i, InstanceStatus::RayInstalling, "installing ray"))
            .collect();
        self.apply(events)
    }
}
