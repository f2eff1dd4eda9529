//! Launching on Compute Engine: the inserts of new instances (each awaited up to a
//! bound; an all-or-nothing gang's as one `bulkInsert`), the starts of stopped workers,
//! and the request's outcome (split out of `provider.rs`).

use super::*;

impl GcpProvider {
    /// Sends the insert of the instance `name` (the `index`-th of `request_id`), again
    /// while throttled (same `requestId`): how it ended, or its operation still running.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_insert(
        &self,
        state: &State,
        node_type: &str,
        kind: NodeKind,
        name: &str,
        request_id: &str,
        index: u64,
        boot_script: Option<&str>,
    ) -> (
        CloudInstance,
        Started<impl google_cloud_lro::Poller<model::Operation, model::Operation>>,
    ) {
        let spec = InsertSpec {
            node_type,
            kind,
            name,
            request_id: Some(request_id),
            boot_script,
        };
        let cfg = &state.cfg;
        let made = pending_instance(cfg, name, node_type, kind, request_id);
        let nc = &cfg.node_types[node_type];
        let body = match mapping::instance_body(cfg, &spec) {
            Ok(b) => b,
            Err(e) => return (made, Started::Ended(None, Err(e))),
        };
        let token = idempotency_token(request_id, index);
        let send = || {
            self.calls.insert.fetch_add(1, Ordering::Relaxed);
            self.client
                .insert()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_request_id(&token)
                .set_or_clear_source_instance_template(nc.source_instance_template.clone())
                .set_body(body.clone())
                .poller()
        };
        match self
            .send_retrying("instances.insert", node_type, send)
            .await
        {
            // The name is taken: made by this request already (a replay), or not.
            Started::Ended(op, Err(e))
                if crate::errors::classify(e.code(), e.status()) == Class::AlreadyExists =>
            {
                let ours = self.is_ours(cfg, name, request_id).await;
                match ours {
                    Ok(true) => (made, Started::Ended(op, Ok(true))),
                    Ok(false) => (
                        made,
                        Started::Ended(
                            op,
                            Err(name_taken(
                                "instances.insert",
                                &e,
                                &format!("the name {name}"),
                            )),
                        ),
                    ),
                    Err(e) => (made, Started::Ended(op, Err(e))),
                }
            }
            other => (made, other),
        }
    }

    /// Sends the call `send` makes (its first poll), again while throttled or lost on
    /// the way, with backoff (the same `requestId` makes a second send safe).
    async fn send_retrying<P>(
        &self,
        call: &'static str,
        node_type: &str,
        send: impl Fn() -> P,
    ) -> Started<P>
    where
        P: google_cloud_lro::Poller<model::Operation, model::Operation>,
    {
        let mut delay = Duration::from_millis(250);
        let mut tries = 1;
        loop {
            match self.start(send(), call, node_type).await {
                Started::Ended(_, Err(e))
                    if matches!(
                        e.kind(),
                        ProviderErrorKind::Throttled | ProviderErrorKind::Transient
                    ) && tries < THROTTLE_TRIES =>
                {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    /// One `instances.bulkInsert` of the workers `names` for `request_id`, all or none
    /// (sent again while throttled, with the same `requestId`), awaited until
    /// `deadline`: the instances (pending), or why none was made. An operation still
    /// running is left to `poll_errors` and its instances reported made (as an insert's).
    pub(super) async fn bulk_insert(
        &self,
        state: &State,
        node_type: &str,
        names: &[String],
        request_id: &str,
        boot_script: Option<&str>,
        deadline: Instant,
    ) -> Result<Vec<CloudInstance>, GcpError> {
        const CALL: &str = "instances.bulkInsert";
        let cfg = &state.cfg;
        let Some(first) = names.first() else {
            return Ok(Vec::new());
        };
        let spec = InsertSpec {
            node_type,
            kind: NodeKind::Worker,
            name: first,
            request_id: Some(request_id),
            boot_script,
        };
        let body = mapping::bulk_body(cfg, &spec, names)?;
        // The same names again (a replay while the first call runs, or after it) is the
        // same call; other names (a member gone since) are a call of their own, so the
        // answer of an earlier call never stands for instances it did not make.
        let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        let token = idempotency_token(&format!("{request_id}/bulk/{}", sorted.join(",")), 0);
        let made: Vec<CloudInstance> = names
            .iter()
            .map(|n| pending_instance(cfg, n, node_type, NodeKind::Worker, request_id))
            .collect();
        let send = || {
            self.calls.bulk_insert.fetch_add(1, Ordering::Relaxed);
            self.client
                .bulk_insert()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_request_id(&token)
                .set_body(body.clone())
                .poller()
        };
        // A name of the gang taken, by another request's instance (this request's own
        // were left out), whether said at once or when the operation ends: nothing was
        // made; later, the names may be free.
        let taken = |e: GcpError| {
            if crate::errors::classify(e.code(), e.status()) != Class::AlreadyExists {
                return e;
            }
            name_taken(CALL, &e, &format!("a name of the gang of {}", names.len()))
        };
        match self.send_retrying(CALL, node_type, send).await {
            Started::Ended(_, Err(e)) => Err(taken(e)),
            Started::Ended(_, Ok(_)) => Ok(made),
            Started::Running(op, poller) => {
                match self.finish(poller, CALL, node_type, deadline).await {
                    Ok(true) => Ok(made),
                    Ok(false) => {
                        self.leave_launch_op(op, CALL, request_id, node_type, names.len());
                        Ok(made)
                    }
                    Err(e) => Err(taken(e)),
                }
            }
        }
    }

    /// Leaves the launch operation `op` (of `count` instances), still running, to
    /// `poll_errors`, which reports how it ended.
    fn leave_launch_op(
        &self,
        op: Option<String>,
        call: &'static str,
        request_id: &str,
        node_type: &str,
        count: usize,
    ) {
        if let Some(name) = op {
            self.pending().push(PendingOp {
                name,
                call,
                op: ProviderOp::Launch {
                    request_id: request_id.to_string(),
                    node_type: node_type.to_string(),
                    count: count as u64,
                },
                node_type: node_type.to_string(),
                checks: 0,
                tpu: false,
            });
        }
    }

    /// Whether the instance `name` carries the launch request `request_id`.
    pub(super) async fn is_ours(
        &self,
        cfg: &GcpConfig,
        name: &str,
        request_id: &str,
    ) -> Result<bool, GcpError> {
        let i = self
            .client
            .get()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_instance(name)
            .send()
            .await
            .map_err(|e| call_error("instances.get", &e, ""))?;
        Ok(i.labels.get(tags::LAUNCH_REQUEST).map(String::as_str)
            == Some(mapping::label_value(request_id).as_str()))
    }

    /// Waits for an insert `send_insert` left running, until `deadline`; an unfinished
    /// one is left to `poll_errors`.
    pub(super) async fn finish_insert<P>(
        &self,
        made: CloudInstance,
        op: Option<String>,
        poller: P,
        deadline: Instant,
    ) -> Made
    where
        P: google_cloud_lro::Poller<model::Operation, model::Operation>,
    {
        match self
            .finish(poller, "instances.insert", &made.node_type, deadline)
            .await
        {
            Ok(true) => Made::Ok(made),
            Ok(false) => {
                let request_id = made.request_id.as_deref().unwrap_or_default();
                self.leave_launch_op(op, "instances.insert", request_id, &made.node_type, 1);
                Made::Ok(made)
            }
            Err(e) => Made::Failed(e),
        }
    }

    /// Starts a stopped instance for `request_id`, labelling it with the request first
    /// (so a replay counts it).
    pub(super) async fn restart(
        &self,
        state: &State,
        inst: &model::Instance,
        request_id: &str,
        node_type: &str,
        deadline: Instant,
    ) -> Made {
        let cfg = &state.cfg;
        let Some(name) = inst.name.clone() else {
            return Made::Failed(GcpError::config("instance", "an instance without a name"));
        };
        let changes = [
            (tags::LAUNCH_REQUEST, mapping::label_value(request_id)),
            (tags::NODE_STATUS, tags::STATUS_UNINITIALIZED.to_string()),
        ];
        if let Err(e) = self
            .set_labels(cfg, &name, inst, &changes, node_type, deadline)
            .await
        {
            return Made::Failed(e);
        }
        self.calls.start.fetch_add(1, Ordering::Relaxed);
        let poller = self
            .client
            .start()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_instance(&name)
            .set_request_id(idempotency_token(&format!("{request_id}/start/{name}"), 0))
            .poller();
        match self
            .wait(poller, "instances.start", node_type, deadline)
            .await
        {
            (_, Err(e)) => Made::Failed(e),
            (op, Ok(done)) => {
                if !done {
                    // A start that fails late (a stockout) is reported by poll_errors.
                    self.leave_launch_op(op, "instances.start", request_id, node_type, 1);
                }
                let mut c = mapping::cloud_instance(inst, &state.types)
                    .unwrap_or_else(|| CloudInstance::worker(&name, node_type, None));
                c.request_id = Some(request_id.to_string());
                c.state = CloudInstanceState::Pending;
                Made::Ok(c)
            }
        }
    }

    /// Deletes (or stops) one instance; `None` when done, gone or left to `poll_errors`.
    pub(super) async fn remove_one(
        &self,
        cfg: &GcpConfig,
        name: &str,
        inst: &model::Instance,
        stop: bool,
        deadline: Instant,
    ) -> Option<(String, GcpError)> {
        if stop && mapping::is_stopped(inst) {
            return None;
        }
        let (call, (op, r)) = if stop {
            self.calls.stop.fetch_add(1, Ordering::Relaxed);
            let p = self
                .client
                .stop()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_instance(name)
                .poller();
            (
                "instances.stop",
                self.wait(p, "instances.stop", "", deadline).await,
            )
        } else {
            self.calls.delete.fetch_add(1, Ordering::Relaxed);
            let p = self
                .client
                .delete()
                .set_project(&cfg.project_id)
                .set_zone(&cfg.zone)
                .set_instance(name)
                .poller();
            (
                "instances.delete",
                self.wait(p, "instances.delete", "", deadline).await,
            )
        };
        match (op, r) {
            (_, Err(e)) if e.kind() == ProviderErrorKind::NotFound => None,
            (_, Err(e)) => Some((name.to_string(), e)),
            (Some(op), Ok(false)) => {
                self.pending().push(PendingOp {
                    name: op,
                    call,
                    op: ProviderOp::Terminate {
                        cloud_instance_id: name.to_string(),
                    },
                    node_type: String::new(),
                    checks: 0,
                    tpu: false,
                });
                None
            }
            (_, Ok(_)) => None,
        }
    }

    /// Asks for a pending operation once more.
    pub(super) async fn check_op(
        &self,
        cfg: &GcpConfig,
        mut p: PendingOp,
    ) -> (PendingOp, Result<model::Operation, GcpError>) {
        p.checks += 1;
        self.calls.get_operation.fetch_add(1, Ordering::Relaxed);
        let r = self
            .client
            .get_operation()
            .set_project(&cfg.project_id)
            .set_zone(&cfg.zone)
            .set_operation(&p.name)
            .send()
            .await
            .map_err(|e| call_error("zoneOperations.get", &e, &p.node_type));
        (p, r)
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
        // The cluster's one zone took an instance back or ran out a short while ago:
        // there is nowhere else to go, so the type is out (no call is made).
        let is_tpu = cfg.node_types.get(t).is_some_and(|n| n.tpu.is_some());
        if req.avoid_zones.contains(&cfg.zone) {
            return Err(GcpError::Call {
                call: if is_tpu {
                    "nodes.create"
                } else {
                    "instances.insert"
                },
                code: None,
                status: None,
                kind: Class::Capacity.kind(t),
                message: format!("zone {} is avoided for now: {t} not launched", cfg.zone),
            }
            .into_provider(launch_op(req.count)));
        }
        if is_tpu {
            return self.tpu_launch(&state, req, kind, deadline).await;
        }
        // 1. What this request made already (a replay after a crash, a retry), in any
        //    status.
        let ours = self
            .list_raw(
                cfg,
                &[],
                &[
                    (tags::LAUNCH_REQUEST, req.request_id.as_str()),
                    (tags::USER_NODE_TYPE, t),
                ],
            )
            .await
            .map_err(|e| e.into_provider(launch_op(req.count)))?;
        let taken: BTreeSet<String> = ours.iter().filter_map(|i| i.name.clone()).collect();
        let mut made: Vec<CloudInstance> = Vec::new();
        let mut reuse: Vec<model::Instance> = Vec::new();
        for i in &ours {
            if mapping::is_stopped(i) {
                // An interrupted restart of a cached node is finished; without caching,
                // a stopped one (a preempted spot worker) is not this request's any more.
                if cfg.cache_stopped_nodes && !req.all_or_nothing && mapping::is_restartable(i) {
                    reuse.push(i.clone());
                }
            } else {
                made.extend(mapping::cloud_instance(i, &state.types));
            }
        }
        let mut remaining = req.count.saturating_sub(made.len() as u64);
        // 2. Cached nodes: stopped instances of this kind, type and launch config (not
        //    for an all-or-nothing gang: restarts are one by one, so the gang is made
        //    new, in one call).
        if cfg.cache_stopped_nodes && !req.all_or_nothing && remaining > reuse.len() as u64 {
            let hash = cfg.launch_hashes.get(t, kind).to_string();
            let stopped = self
                .list_raw(
                    cfg,
                    STOPPED,
                    &[
                        (tags::NODE_KIND, kind.tag_value()),
                        (tags::USER_NODE_TYPE, t),
                        (tags::LAUNCH_CONFIG, hash.as_str()),
                    ],
                )
                .await
                .map_err(|e| e.into_provider(launch_op(req.count)))?;
            let mut more: Vec<model::Instance> = stopped
                .into_iter()
                .filter(|i| i.name.as_ref().is_some_and(|n| !taken.contains(n)))
                .collect();
            more.sort_by(|a, b| a.name.cmp(&b.name));
            reuse.extend(more);
        }
        reuse.truncate(usize::try_from(remaining).unwrap_or(usize::MAX));
        let mut failures: Vec<GcpError> = Vec::new();
        let futs: Vec<_> = reuse
            .iter()
            .map(|i| self.restart(&state, i, &req.request_id, t, deadline))
            .collect();
        let restarts: Vec<Made> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for m in restarts {
            match m {
                Made::Ok(c) => {
                    remaining = remaining.saturating_sub(1);
                    made.push(c);
                }
                Made::Failed(e) => {
                    tracing::warn!("restarting a stopped {t}: {e}");
                    failures.push(e);
                }
            }
        }
        // 3. New instances: names (and request ids) by index, skipping names taken.
        let boot = state.boot.get(t).map(String::as_str);
        let names = free_names(&taken, remaining, |i| {
            mapping::instance_name(&cfg.cluster_name, kind, &req.request_id, i)
        });
        // An all-or-nothing gang: one bulkInsert makes every name or none.
        // A gang of more than one is always one bulkInsert, a replay too (the same
        // `requestId`: a replay while the first call runs answers its operation), even
        // when all but one of its names exist already.
        let bulk =
            req.all_or_nothing && kind == NodeKind::Worker && req.count > 1 && !names.is_empty();
        let blocker = cfg.node_types.get(t).and_then(mapping::bulk_blocker);
        if bulk && let Some(field) = blocker {
            tracing::warn!(
                "available_node_types.{t}.node_config.{field} has no bulkInsert equivalent: \
                 the gang of {} is launched instance by instance (and released whole if it \
                 does not come up)",
                names.len()
            );
        }
        if bulk && blocker.is_none() {
            let names: Vec<String> = names.into_iter().map(|(_, n)| n).collect();
            match self
                .bulk_insert(&state, t, &names, &req.request_id, boot, deadline)
                .await
            {
                Ok(new) => made.extend(new),
                Err(e) => failures.push(e),
            }
            return cloud::launch_outcome(
                req,
                made,
                failures,
                GcpError::kind,
                GcpError::into_provider,
            );
        }
        // Every insert is sent first (32 at a time), then the operations still running
        // are awaited together, until the deadline.
        let futs: Vec<_> = names
            .iter()
            .map(|(i, n)| self.send_insert(&state, t, kind, n, &req.request_id, *i, boot))
            .collect();
        let sent: Vec<_> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut inserts: Vec<Made> = Vec::new();
        let mut running = Vec::new();
        for (made, started) in sent {
            match started {
                Started::Ended(_, Ok(_)) => inserts.push(Made::Ok(made)),
                Started::Ended(_, Err(e)) => inserts.push(Made::Failed(e)),
                Started::Running(op, poller) => {
                    running.push(self.finish_insert(made, op, poller, deadline))
                }
            }
        }
        let finished: Vec<Made> = futures_util::stream::iter(running)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        inserts.extend(finished);
        for m in inserts {
            match m {
                Made::Ok(c) => made.push(c),
                Made::Failed(e) => failures.push(e),
            }
        }
        cloud::launch_outcome(req, made, failures, GcpError::kind, GcpError::into_provider)
    }
}

/// The instance `name` as a launch reports it before the cloud lists it: pending, with
/// its request and launch hash.
pub(super) fn pending_instance(
    cfg: &GcpConfig,
    name: &str,
    node_type: &str,
    kind: NodeKind,
    request_id: &str,
) -> CloudInstance {
    let mut c = CloudInstance::worker(name, node_type, Some(request_id));
    c.kind = kind;
    c.state = CloudInstanceState::Pending;
    c.launch_config_hash = Some(cfg.launch_hashes.get(node_type, kind).to_string());
    c
}

/// `what` (a name, or a gang's) is taken by another launch request's instance (the
/// cloud's `alreadyExists`, `e`): nothing was made, and later the name may be free.
pub(super) fn name_taken(call: &'static str, e: &GcpError, what: &str) -> GcpError {
    GcpError::Call {
        call,
        code: e.code().map(str::to_string),
        status: e.status(),
        kind: ProviderErrorKind::Transient,
        message: format!("{what} is taken by an instance of another launch request"),
    }
}
