//! The simulated side of an iteration: the GCS state and cloud listing the reconciler
//! is shown, and what its effects do to the simulated cloud and cluster (split out of
//! `mod.rs`, behaviour unchanged).

use super::*;

impl Sim<'_> {
    /// What the GCS would report now.
    pub(super) fn ray_state(&self) -> ClusterResourceState {
        let t = self.t_s;
        let node_states = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| NodeState {
                node_id: n.id.clone(),
                instance_id: n.instance_id.clone(),
                ray_node_type_name: n.node_type.clone(),
                available_resources: resource_map(&n.avail),
                total_resources: resource_map(&n.total),
                idle_duration_ms: if n.running == 0 {
                    ((t - n.idle_since_s) * 1000.0) as i64
                } else {
                    0
                },
                status: Some(if n.taken_at_s.is_some() || n.draining {
                    NodeStatus::Draining
                } else if n.running == 0 {
                    NodeStatus::Idle
                } else {
                    NodeStatus::Running
                }),
                ..Default::default()
            })
            .collect();
        let mut by_shape: Vec<(Shape, u64)> = Vec::new();
        let mut gangs = Vec::new();
        for w in &self.waiting {
            match &w.gang {
                None => match by_shape.iter_mut().find(|(s, _)| *s == w.shape) {
                    Some(e) => e.1 += w.count,
                    None => by_shape.push((w.shape.clone(), w.count)),
                },
                Some((bundles, strategy, pg)) => {
                    let label = format!("_PG_{pg}");
                    let constraint = match strategy {
                        Strategy::StrictSpread => vec![PlacementConstraint::AntiAffinity {
                            label_name: label.clone(),
                            label_value: String::new(),
                        }],
                        Strategy::StrictPack => vec![PlacementConstraint::Affinity {
                            label_name: label.clone(),
                            label_value: String::new(),
                        }],
                        _ => Vec::new(),
                    };
                    gangs.push(GangRequest {
                        requests: bundles
                            .iter()
                            .map(|b| ResourceRequest {
                                resources: resource_map(b),
                                placement_constraints: constraint.clone(),
                                ..Default::default()
                            })
                            .collect(),
                        details: format!("{label}:{strategy:?}|PENDING"),
                        ..Default::default()
                    });
                }
            }
        }
        ClusterResourceState {
            node_states,
            unreadable_nodes: Vec::new(),
            pending_resource_requests: by_shape
                .into_iter()
                .map(|(s, count)| ResourceRequestByCount {
                    request: ResourceRequest {
                        resources: resource_map(&s),
                        ..Default::default()
                    },
                    count,
                })
                .collect(),
            pending_gang_resource_requests: gangs,
            cluster_resource_constraints: Vec::new(),
        }
    }

    pub(super) fn cloud(&self) -> Vec<CloudInstance> {
        self.vms
            .iter()
            .map(|v| {
                let mut c =
                    CloudInstance::worker(v.id.clone(), v.node_type.clone(), Some(&v.request_id));
                c.launch_config_hash = Some(v.hash.clone());
                if v.node.is_none() {
                    c.state = CloudInstanceState::Pending;
                }
                c
            })
            .collect()
    }

    pub(super) fn bill(&mut self, v: &Vm) {
        let hours = (self.t_s - v.launched_s).max(0.0) / 3600.0;
        let price = self.behaviour(&v.node_type).price;
        let s = self.summary.types.entry(v.node_type.clone()).or_default();
        s.node_hours += hours;
        s.cost += hours * price;
    }

    /// Runs the effects of an iteration on the simulated cloud and cluster.
    pub(super) fn apply(&mut self, effects: &[Effect]) {
        let t = self.t_s;
        for e in effects {
            match e {
                Effect::Launch(l) => {
                    self.summary.launch_requests += 1;
                    let b = self.behaviour(&l.node_type);
                    let entry = self.summary.types.entry(l.node_type.clone()).or_default();
                    if b.capacity_error_rate > 0.0 && self.rng.next_f64() < b.capacity_error_rate {
                        entry.capacity_errors += 1;
                        self.errors.push(ProviderError::new(
                            ProviderOp::Launch {
                                request_id: l.request_id.clone(),
                                node_type: l.node_type.clone(),
                                count: l.count,
                            },
                            ProviderErrorKind::Capacity {
                                node_type: l.node_type.clone(),
                                zone: None,
                            },
                            "simulated: insufficient capacity",
                        ));
                        continue;
                    }
                    let live = self
                        .vms
                        .iter()
                        .filter(|v| v.node_type == l.node_type)
                        .count();
                    let left = b.capacity.map(|c| c.saturating_sub(live as u64));
                    let give = match left {
                        Some(left) if left < l.count => {
                            let give = if l.all_or_nothing { 0 } else { left };
                            let entry = self.summary.types.entry(l.node_type.clone()).or_default();
                            entry.capacity_errors += 1;
                            self.errors.push(ProviderError::new(
                                ProviderOp::Launch {
                                    request_id: l.request_id.clone(),
                                    node_type: l.node_type.clone(),
                                    count: l.count - give,
                                },
                                ProviderErrorKind::Capacity {
                                    node_type: l.node_type.clone(),
                                    zone: None,
                                },
                                "simulated: the type's capacity is used up",
                            ));
                            give
                        }
                        _ => l.count,
                    };
                    let entry = self.summary.types.entry(l.node_type.clone()).or_default();
                    entry.launched += give;
                    for _ in 0..give {
                        self.next_vm += 1;
                        self.vms.push(Vm {
                            id: format!("vm-{:06}", self.next_vm),
                            node_type: l.node_type.clone(),
                            request_id: l.request_id.clone(),
                            hash: l.launch_config_hash.clone(),
                            launched_s: t,
                            ready_s: t + b.boot_s,
                            node: None,
                        });
                    }
                }
                Effect::Drain {
                    instance_id,
                    node_id_hex,
                    idle,
                    deadline_ns,
                    ..
                } => {
                    let Some(n) = self
                        .nodes
                        .iter()
                        .position(|n| n.alive && hex(&n.id) == *node_id_hex)
                    else {
                        continue;
                    };
                    // A drain with a deadline is never refused: the node takes no new
                    // work, and goes when the reconciler terminates its instance.
                    if deadline_ns.is_some() {
                        self.nodes[n].draining = true;
                        continue;
                    }
                    if *idle && self.nodes[n].running > 0 {
                        self.summary.drains_refused += 1;
                        self.rejections.push(DrainRejection {
                            instance_id: instance_id.clone(),
                            reason: "simulated: the node got work".into(),
                        });
                        continue;
                    }
                    self.stop_node(n);
                }
                Effect::InstallRay { .. } => {}
                Effect::Terminate {
                    cloud_instance_ids, ..
                } => {
                    for id in cloud_instance_ids {
                        if let Some(i) = self.vms.iter().position(|v| v.id == *id) {
                            let v = self.vms.remove(i);
                            self.bill(&v);
                            self.summary.terminated += 1;
                            if let Some(n) = v.node {
                                self.stop_node(n);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The node's Ray stops: its work goes back to the queue.
    pub(super) fn stop_node(&mut self, n: usize) {
        if !self.nodes[n].alive {
            return;
        }
        self.nodes[n].alive = false;
        let drained = self.nodes[n].draining;
        let mut i = 0;
        while i < self.placed.len() {
            if self.placed[i].holds.iter().any(|(m, _)| *m == n) {
                let p = self.placed.swap_remove(i);
                if drained {
                    let started = p.end_s - p.again.duration_s;
                    self.summary.consolidation_rerun_unit_s +=
                        (self.t_s - started).max(0.0) * p.again.count as f64;
                }
                self.release(&p);
                // Not placed after all: its wait counts when it is placed again (from its
                // first arrival).
                self.summary.placed = self.summary.placed.saturating_sub(p.again.count);
                if let Some(w) = self.waits.get_mut(p.wait) {
                    w.1 = w.1.saturating_sub(p.again.count);
                }
                self.waiting.push(p.again);
            } else {
                i += 1;
            }
        }
    }
}
