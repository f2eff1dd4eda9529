//! Sync: passive transitions that mirror the outside world (cloud instances, provider
//! errors, Ray node states, rejected drains).

use super::*;

impl<S: InstanceStorage> Run<'_, S> {
    pub(super) fn sync(
        &mut self,
        config: &ClusterConfig,
        obs: Observed<'_>,
        ids: &mut dyn IdSource,
    ) -> Result<(), CoreError> {
        let cloud_ids: BTreeSet<&str> = obs
            .cloud
            .iter()
            .map(|c| c.cloud_instance_id.as_str())
            .collect();

        // 1. REQUESTED meets the cloud instances of its launch request.
        let table = self.table()?;
        let mut held: BTreeSet<String> = table
            .iter()
            .filter(|i| live(i))
            .filter_map(|i| i.cloud_instance_id.clone())
            .collect();
        let mut events = Vec::new();
        let mut allocated: BTreeSet<String> = BTreeSet::new();
        for i in table
            .iter()
            .filter(|i| i.status == InstanceStatus::Requested)
        {
            if let Some(c) = obs.cloud.iter().find(|c| {
                !held.contains(&c.cloud_instance_id)
                    && c.request_id == i.launch_request_id
                    && c.node_type == i.node_type
            }) {
                held.insert(c.cloud_instance_id.clone());
                allocated.insert(i.instance_id.clone());
                events.push(
                    Self::ev(i, InstanceStatus::Allocated, "cloud instance allocated")
                        .with_cloud_instance_id(c.cloud_instance_id.clone()),
                );
            }
        }
        // 2. Launch errors fail the instances their request still owes.
        let mut owed: HashMap<(String, String), u64> = HashMap::new();
        for e in obs.provider_errors {
            if let ProviderErrorKind::Launch {
                request_id,
                node_type,
                count,
            } = &e.kind
            {
                *owed
                    .entry((request_id.clone(), node_type.clone()))
                    .or_default() += count;
            }
        }
        for i in table.iter().filter(|i| {
            i.status == InstanceStatus::Requested && !allocated.contains(&i.instance_id)
        }) {
            let key = (i.launch_request_id.clone(), i.node_type.clone());
            if let Some(n) = owed.get_mut(&key)
                && *n > 0
            {
                *n -= 1;
                let why = obs
                    .provider_errors
                    .iter()
                    .find(|e| {
                        matches!(&e.kind, ProviderErrorKind::Launch { request_id, .. } if *request_id == key.0)
                    })
                    .map(|e| e.message.clone())
                    .unwrap_or_default();
                events.push(
                    Self::ev(i, InstanceStatus::AllocationFailed, "launch failed").with_error(why),
                );
            }
        }
        // 3. Cloud instances that are gone; 4. termination errors.
        let term_errors: BTreeMap<&str, &str> = obs
            .provider_errors
            .iter()
            .filter_map(|e| match &e.kind {
                ProviderErrorKind::Terminate { cloud_instance_id } => {
                    Some((cloud_instance_id.as_str(), e.message.as_str()))
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
                // Died before Ray ran on it, with a launch error: a failed launch.
                if i.times_entered(InstanceStatus::RayRunning) == 0
                    && let Some(err) = obs.provider_errors.iter().find(|e| {
                        matches!(&e.kind, ProviderErrorKind::Launch { request_id, .. }
                            if *request_id == i.launch_request_id)
                    })
                {
                    e = e.with_error(err.message.clone());
                }
                events.push(e);
            } else if i.status == InstanceStatus::Terminating
                && let Some(msg) = term_errors.get(cid)
            {
                events.push(
                    Self::ev(i, InstanceStatus::TerminationFailed, "termination failed")
                        .with_error(*msg),
                );
            }
        }
        self.apply(events)?;

        // 5. Adopt cloud instances no record knows (e.g. launched just before a crash
        //    whose REQUESTED record was lost, or started by hand with our tags).
        let mut events = Vec::new();
        for c in obs.cloud {
            if held.contains(&c.cloud_instance_id) {
                continue;
            }
            // A node type the config does not know is adopted to be terminated.
            let known = config.node_type(&c.node_type).is_some();
            let status = if c.is_running && known {
                InstanceStatus::Allocated
            } else {
                InstanceStatus::Terminating
            };
            let node_type = if c.node_type.is_empty() {
                "unknown".to_string()
            } else {
                c.node_type.clone()
            };
            let mut e = InstanceUpdateEvent::create(ids.instance_id(), node_type, status)
                .with_cloud_instance_id(c.cloud_instance_id.clone())
                .with_details("adopted an unknown cloud instance");
            if !c.request_id.is_empty() {
                e = e.with_launch_request_id(c.request_id.clone());
            }
            self.out.warnings.push(format!(
                "adopted cloud instance {} ({}) that no record knew",
                c.cloud_instance_id, c.node_type
            ));
            events.push(e);
        }
        self.apply(events)?;

        // 6. Ray node states; 7. rejected drains.
        let table = self.table()?;
        let by_cloud: HashMap<&str, &Instance> = table
            .iter()
            .filter(|i| live(i))
            .filter_map(|i| i.cloud_instance_id.as_deref().map(|c| (c, i)))
            .collect();
        let mut events = Vec::new();
        let mut moved: BTreeSet<&str> = BTreeSet::new();
        for ns in &obs.ray.node_states {
            let hex = ns.node_id_hex();
            let Some(i) = by_cloud.get(ns.instance_id.as_str()) else {
                let is_head = ns.total_resources.get(HEAD_MARKER).is_some();
                if !is_head && ns.status != Some(NodeStatus::Dead) {
                    self.out.unknown_ray_nodes.push(hex);
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
            // this instance's; and one event per instance per batch.
            let other_node = i.node_id.as_ref().is_some_and(|n| *n != hex);
            if i.status != target
                && passive_ok
                && !other_node
                && crate::instance::is_valid_transition(i.status, target)
                && moved.insert(i.instance_id.as_str())
            {
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
