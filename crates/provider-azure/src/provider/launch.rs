//! Launching on Azure: each VM's create (awaited up to a bound, a failed one deleted),
//! the starts of deallocated workers, and the request's outcome (split out of
//! `provider.rs`, behaviour unchanged).

use super::*;

impl AzureProvider {
    /// Waits for the operation of `acc` (if any) until `deadline`: `Ok(true)` done,
    /// `Ok(false)` left running (queued for `poll_errors`), or its failure.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn settle(
        &self,
        call: &'static str,
        acc: &Accepted,
        op: ProviderOp,
        vm: &str,
        node_type: &str,
        zone: Option<&str>,
        deadline: Instant,
    ) -> Result<bool, AzureError> {
        let Some(url) = &acc.operation else {
            return Ok(true);
        };
        let done = self
            .arm
            .wait(
                call,
                url,
                acc.retry_after,
                &self.polling,
                deadline,
                node_type,
                zone,
            )
            .await?;
        if !done {
            lock(&self.pending).push(PendingOp {
                url: url.clone(),
                call,
                op,
                node_type: node_type.to_string(),
                vm: vm.to_string(),
                checks: 0,
            });
        }
        Ok(done)
    }

    /// Sends the delete of VM `name` (its NIC, address and disk go with it) without
    /// waiting: for a VM whose create failed.
    pub(super) async fn discard(&self, cfg: &AzureConfig, name: &str) {
        let r = self
            .arm
            .compute
            .virtual_machines_client()
            .delete(&cfg.resource_group, name, &cfg.subscription_id)
            .send()
            .await
            .map(azure_core::Response::from);
        match Arm::accepted("virtualMachines.delete", r).await {
            Ok(_) => {
                lock(&self.failed).remove(name);
            }
            Err(e) if e.kind() == ProviderErrorKind::NotFound => {
                lock(&self.failed).remove(name);
            }
            Err(e) => {
                tracing::warn!("deleting {name}, whose create failed: {e} (tried again later)");
                lock(&self.failed).insert(name.to_string());
            }
        }
    }

    /// Creates VM `name` (the `index`-th of `request_id`) and waits for it until
    /// `deadline`; a create that fails after its 201 leaves a `Failed` VM, deleted here.
    pub(super) async fn create(
        &self,
        state: &State,
        spec: CreateSpec<'_>,
        deadline: Instant,
    ) -> Made {
        let cfg = &state.cfg;
        let t = spec.node_type;
        let mut made = CloudInstance::worker(spec.name, t, spec.request_id);
        made.kind = spec.kind;
        made.state = CloudInstanceState::Pending;
        made.launch_config_hash = Some(cfg.launch_hashes.get(t, spec.kind).to_string());
        let body = match mapping::vm_body(cfg, &spec) {
            Ok(b) => b,
            Err(e) => return Made::Failed(e),
        };
        // A capacity error names the zone only where another zone is left to try (the
        // next launch avoids this one); in the last open zone it is the type's.
        let zones = cfg
            .node_types
            .get(t)
            .and_then(|nc| nc.zones.as_ref())
            .unwrap_or(&cfg.zones);
        let others_left = matches!(
            mapping::open_zones(zones, spec.avoid_zones),
            Some(crate::config::Zones::List(z)) if z.len() > 1
        );
        let zone = body
            .get("zones")
            .and_then(|z| z.get(0))
            .and_then(Value::as_str)
            .filter(|_| others_left)
            .map(str::to_string);
        let acc = match self
            .arm
            .put_vm(
                &cfg.subscription_id,
                &cfg.resource_group,
                spec.name,
                &body,
                false,
                t,
                zone.as_deref(),
            )
            .await
        {
            Ok(a) => a,
            Err(e) => return Made::Failed(e),
        };
        let op = ProviderOp::Launch {
            request_id: spec.request_id.unwrap_or_default().to_string(),
            node_type: t.to_string(),
            count: 1,
        };
        match self
            .settle(
                "virtualMachines.createOrUpdate",
                &acc,
                op,
                spec.name,
                t,
                zone.as_deref(),
                deadline,
            )
            .await
        {
            Ok(_) => Made::Ok(made),
            Err(e) => {
                self.discard(cfg, spec.name).await;
                Made::Failed(e)
            }
        }
    }

    /// `PATCH` of VM `vm`'s tags: all of them with `changes` (Azure replaces a VM's tags
    /// whole), waited for until `deadline` (`Ok(false)`: an operation still running then,
    /// left to `poll_errors` as `op`).
    pub(super) async fn patch_tags(
        &self,
        cfg: &AzureConfig,
        vm: &Vm,
        changes: &[(&str, String)],
        op: ProviderOp,
        node_type: &str,
        deadline: Instant,
    ) -> Result<bool, AzureError> {
        let mut t = vm.tags.clone();
        for (k, v) in changes {
            t.insert((*k).to_string(), v.clone());
        }
        let acc = self
            .arm
            .put_vm(
                &cfg.subscription_id,
                &cfg.resource_group,
                &vm.name,
                &json!({ "tags": t }),
                true,
                node_type,
                None,
            )
            .await?;
        self.settle(
            "virtualMachines.update",
            &acc,
            op,
            &vm.name,
            node_type,
            None,
            deadline,
        )
        .await
    }

    /// Starts a deallocated VM for `request_id`, tagging it with the request first (so
    /// a replay counts it).
    pub(super) async fn restart(
        &self,
        state: &State,
        vm: &Vm,
        request_id: &str,
        node_type: &str,
        deadline: Instant,
    ) -> Made {
        let cfg = &state.cfg;
        let op = ProviderOp::Launch {
            request_id: request_id.to_string(),
            node_type: node_type.to_string(),
            count: 1,
        };
        let changes = [
            (tags::LAUNCH_REQUEST, request_id.to_string()),
            (tags::NODE_STATUS, tags::STATUS_UNINITIALIZED.to_string()),
        ];
        if let Err(e) = self
            .patch_tags(cfg, vm, &changes, op.clone(), node_type, deadline)
            .await
        {
            return Made::Failed(e);
        }
        let r = self
            .arm
            .compute
            .virtual_machines_client()
            .start(&cfg.resource_group, &vm.name, &cfg.subscription_id)
            .send()
            .await
            .map(azure_core::Response::from);
        let acc = match Arm::accepted("virtualMachines.start", r).await {
            Ok(a) => a,
            Err(e) => return Made::Failed(e),
        };
        self.set_power(&vm.name, Power::Starting);
        match self
            .settle(
                "virtualMachines.start",
                &acc,
                op,
                &vm.name,
                node_type,
                None,
                deadline,
            )
            .await
        {
            Err(e) => Made::Failed(e),
            Ok(done) => {
                if done {
                    self.set_power(&vm.name, Power::Running);
                }
                let mut v = vm.clone();
                for (k, value) in &changes {
                    v.tags.insert((*k).to_string(), value.clone());
                }
                let mut c = mapping::cloud_instance(&v, Power::Starting)
                    .unwrap_or_else(|| CloudInstance::worker(&vm.name, node_type, None));
                c.request_id = Some(request_id.to_string());
                c.state = CloudInstanceState::Pending;
                Made::Ok(c)
            }
        }
    }

    /// Deletes (or deallocates) one VM; `None` when done, gone or left to `poll_errors`.
    pub(super) async fn remove_one(
        &self,
        cfg: &AzureConfig,
        name: &str,
        deallocate: bool,
        deadline: Instant,
    ) -> Option<(String, AzureError)> {
        let vms = self.arm.compute.virtual_machines_client();
        let (call, r) = if deallocate {
            self.set_power(name, Power::Deallocating);
            (
                "virtualMachines.deallocate",
                vms.deallocate(&cfg.resource_group, name, &cfg.subscription_id)
                    .send()
                    .await
                    .map(azure_core::Response::from),
            )
        } else {
            (
                "virtualMachines.delete",
                vms.delete(&cfg.resource_group, name, &cfg.subscription_id)
                    .send()
                    .await
                    .map(azure_core::Response::from),
            )
        };
        let op = ProviderOp::Terminate {
            cloud_instance_id: name.to_string(),
        };
        let acc = match Arm::accepted(call, r).await {
            Ok(a) => a,
            Err(e) if e.kind() == ProviderErrorKind::NotFound => return None,
            Err(e) => return Some((name.to_string(), e)),
        };
        match self.settle(call, &acc, op, name, "", None, deadline).await {
            Ok(true) if deallocate => {
                self.set_power(name, Power::Deallocated);
                None
            }
            Ok(_) => None,
            Err(e) if e.kind() == ProviderErrorKind::NotFound => None,
            Err(e) => Some((name.to_string(), e)),
        }
    }

    pub(super) async fn launch_inner(
        &self,
        req: &LaunchRequest,
        kind: NodeKind,
    ) -> Result<LaunchOutcome, ProviderError> {
        let deadline = Instant::now() + self.polling.launch_wait;
        let state = self.state();
        let cfg = &state.cfg;
        let t = req.node_type.as_str();
        let launch_op = |count: u64| ProviderOp::Launch {
            request_id: req.request_id.clone(),
            node_type: req.node_type.clone(),
            count,
        };
        cloud::check_launch(
            cfg.head_node_type.as_deref(),
            cfg.node_types.contains_key(t),
            req,
            kind,
        )?;
        // 1. What this request made already (a replay after a crash, a retry).
        let all = self
            .list_raw(cfg)
            .await
            .map_err(|e| e.into_provider(launch_op(req.count)))?;
        let ours: Vec<Vm> = all
            .iter()
            .filter(|v| {
                v.tags.get(tags::LAUNCH_REQUEST) == Some(&req.request_id)
                    && v.tags.get(tags::USER_NODE_TYPE).map(String::as_str) == Some(t)
            })
            .cloned()
            .collect();
        let stopped_kind = |v: &Vm| {
            v.tags.get(tags::NODE_KIND).map(String::as_str) == Some(kind.tag_value())
                && v.tags.get(tags::USER_NODE_TYPE).map(String::as_str) == Some(t)
                && v.tags.get(tags::LAUNCH_CONFIG).map(String::as_str)
                    == Some(cfg.launch_hashes.get(t, kind))
        };
        let candidates: Vec<Vm> = if cfg.cache_stopped_nodes {
            all.iter()
                .filter(|v| stopped_kind(v) || ours.iter().any(|o| o.name == v.name))
                .cloned()
                .collect()
        } else {
            ours.clone()
        };
        let powers = self.powers(cfg, &candidates, false).await;
        let power = |v: &Vm| powers.get(&v.name).copied().unwrap_or(Power::Unknown);
        // Every name in use: a VM of another request under one of this request's names
        // (a cached node restarted for it) is not this request's, and a PUT would
        // update it.
        let taken: BTreeSet<String> = all.iter().map(|v| v.name.clone()).collect();
        let mut made: Vec<CloudInstance> = Vec::new();
        let mut reuse: Vec<Vm> = Vec::new();
        let mut failures: Vec<AzureError> = Vec::new();
        for v in &ours {
            let p = power(v);
            if v.failed(p) {
                // An earlier try of this request failed and its VM was left: gone now.
                self.discard(cfg, &v.name).await;
            } else if matches!(p, Power::Deallocated | Power::Deallocating) {
                // An interrupted restart of a cached node is finished; without caching,
                // a deallocated one (an evicted Spot VM) is not this request's any more.
                if cfg.cache_stopped_nodes && p == Power::Deallocated {
                    reuse.push(v.clone());
                }
            } else {
                made.extend(mapping::cloud_instance(v, p));
            }
        }
        let remaining = req.count.saturating_sub(made.len() as u64);
        // 2. Cached nodes: deallocated VMs of this kind, type and launch config.
        if cfg.cache_stopped_nodes && remaining > reuse.len() as u64 {
            let mut more: Vec<Vm> = candidates
                .iter()
                .filter(|v| !ours.iter().any(|o| o.name == v.name) && stopped_kind(v))
                .filter(|v| power(v) == Power::Deallocated && !v.failed(power(v)))
                .cloned()
                .collect();
            more.sort_by(|a, b| a.name.cmp(&b.name));
            reuse.extend(more);
        }
        reuse.truncate(usize::try_from(remaining).unwrap_or(usize::MAX));
        let futs: Vec<_> = reuse
            .iter()
            .map(|v| self.restart(&state, v, &req.request_id, t, deadline))
            .collect();
        let restarts: Vec<Made> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut short_restarts = 0u64;
        for m in restarts {
            match m {
                Made::Ok(c) => made.push(c),
                Made::Failed(e) => {
                    tracing::warn!("starting a deallocated {t}: {e}");
                    short_restarts += 1;
                    failures.push(e);
                }
            }
        }
        // 3. New VMs for the rest: names by index, skipping names taken.
        let new_count = req
            .count
            .saturating_sub(made.len() as u64)
            .saturating_sub(short_restarts);
        let boot = state.boot.get(t).map(String::as_str);
        let mut names = Vec::new();
        let mut index = 0u64;
        while (names.len() as u64) < new_count {
            let n = mapping::vm_name(&cfg.cluster_name, kind, &req.request_id, index);
            if !taken.contains(&n) {
                names.push(n);
            }
            index += 1;
        }
        let futs: Vec<_> = names
            .iter()
            .map(|n| {
                self.create(
                    &state,
                    CreateSpec {
                        node_type: t,
                        kind,
                        name: n,
                        request_id: Some(&req.request_id),
                        boot_script: boot,
                        avoid_zones: &req.avoid_zones,
                    },
                    deadline,
                )
            })
            .collect();
        let creates: Vec<Made> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for m in creates {
            match m {
                Made::Ok(c) => made.push(c),
                Made::Failed(e) => failures.push(e),
            }
        }
        cloud::launch_outcome(
            req,
            made,
            failures,
            AzureError::kind,
            AzureError::into_provider,
        )
    }
}
