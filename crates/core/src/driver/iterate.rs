//! One iteration of a process that holds the lease: the replays a takeover left, the
//! state gathered under deadlines, the reconciler on a tentative table, the table stored
//! (bounded by the lease), then the report and the effects.

use super::*;

/// The stored explanation is rewritten at least this often, unchanged or not.
const WHY_REFRESH: Duration = Duration::from_secs(60);

impl<G: Gcs + 'static, C: Clock> Driver<G, C> {
    pub(super) async fn iterate(&mut self, report: &mut StepReport) -> Result<(), CoreError> {
        let gcs = self.gcs.clone();
        let provider = self.provider.clone();
        let options = &self.options;
        let (Some(a), Some(loaded)) = (self.active.as_mut(), self.config.as_mut()) else {
            return Ok(());
        };
        // Replays of a crash first (the table that recorded them is stored).
        if !a.pending.is_empty() {
            let effects = std::mem::take(&mut a.pending);
            let done = effects::run_effects(
                gcs.as_ref(),
                provider.as_ref(),
                &effects,
                &self.lease_rx,
                options.effects,
            )
            .await;
            report.effects += effects.len();
            a.rejections.extend(done.rejections);
            a.carried.extend(done.errors);
        }
        // Gather concurrently, each under its deadline.
        let mut mark = Instant::now();
        let mut lap = || {
            let now = Instant::now();
            let d = now - mark;
            mark = now;
            d
        };
        let d = options.call_deadline;
        let (state, cloud, polled) = tokio::join!(
            tokio::time::timeout(d, gcs.cluster_resource_state()),
            tokio::time::timeout(d, provider.list()),
            tokio::time::timeout(d, provider.poll_errors()),
        );
        let mut errors = std::mem::take(&mut a.carried);
        match polled {
            Ok(polled) => {
                for e in &polled {
                    tracing::warn!("provider error: {e}");
                }
                errors.extend(polled);
            }
            Err(_) => tracing::warn!("the provider's errors did not come within {d:?}"),
        }
        let gathered = match (state, cloud) {
            (Ok(Ok(s)), Ok(Ok(c))) => Ok((s, c)),
            (Err(_), _) => Err(CoreError::gcs(
                "GetClusterResourceState",
                format!("no answer within {d:?}"),
            )),
            (Ok(Err(e)), _) => Err(e),
            (_, Err(_)) => Err(CoreError::Provider(format!("list: no answer within {d:?}"))),
            (_, Ok(Err(e))) => Err(CoreError::Provider(format!("list: {e}"))),
        };
        let (state, cloud) = match gathered {
            Ok(g) => g,
            Err(e) => {
                a.carried = errors;
                return Err(e);
            }
        };
        // The GCS answered: the head's Ray runs, so its tag may say so.
        self.head_ready
            .step(&provider, &cloud, options.call_deadline);
        let fp = Fingerprint::of(state.version, &cloud);
        let due = a.last_run.is_none_or(|t| t.elapsed() >= options.interval);
        if a.last.as_ref() == Some(&fp) && errors.is_empty() && a.rejections.is_empty() && !due {
            return Ok(());
        }
        report.phases.gather = lap();
        let skipped: BTreeSet<String> = state.skipped.iter().cloned().collect();
        say_new(self.said.entry("rows").or_default(), skipped, |e| {
            tracing::warn!("left out of this iteration's GCS state: {e}")
        });
        // Once per node while its row stays unreadable.
        let unreadable: BTreeSet<String> = state
            .state
            .unreadable_nodes
            .iter()
            .map(|n| {
                format!(
                    "ray node {} (instance {:?}): {}",
                    n.node_id_hex(),
                    n.instance_id,
                    n.reason
                )
            })
            .collect();
        say_new(
            self.said.entry("unreadable").or_default(),
            unreadable,
            |e| tracing::warn!("cannot read the GCS row of {e}: its instance is kept as it was"),
        );
        // Preemption notices, for the nodes Ray reports draining (one KV read, only
        // when some node drains).
        let notices = if loaded.config.preemption.enabled {
            notices::read_notices(
                gcs.as_ref(),
                &loaded.config.cluster_name,
                &state.state,
                options.call_deadline,
                self.said.entry("notices").or_default(),
            )
            .await
        } else {
            Vec::new()
        };
        // All or nothing: the iteration's writes to the table are tentative (the storage
        // remembers what each replaced) and are kept only once the table is stored;
        // anything short of that rolls them back, at a cost that grows with what changed.
        a.storage.begin();
        let mut im = InstanceManager::new(&mut a.storage);
        let mut avail = a.avail.clone();
        let rejections = std::mem::take(&mut a.rejections);
        let now = self.clock.now_ns();
        self.ids.set_now(now);
        let ids = &mut self.ids;
        let mut run = || {
            reconcile(
                &mut im,
                &loaded.config,
                &mut loaded.chain,
                &loaded.settings,
                &mut avail,
                Observed {
                    ray: &state.state,
                    cloud: &cloud,
                    provider_errors: &errors,
                    drain_rejections: &rejections,
                    notices: &notices,
                },
                now,
                ids,
            )
        };
        // The gRPC expander blocks on its own runtime: on a multi-threaded runtime the
        // iteration leaves this runtime's context.
        let result = match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(run),
            _ => run(),
        };
        let stored = 'store: {
            let outcome = match result {
                Ok(o) => o,
                Err(e) => break 'store Err(e),
            };
            let keep = i64::try_from(options.keep_terminal.as_nanos()).unwrap_or(i64::MAX);
            if let Err(e) = im.prune_terminal(now.saturating_sub(keep)) {
                break 'store Err(e.into());
            }
            report.phases.reconcile = lap();
            // Store the table before any effect: a crash after this point replays. A
            // process that lost the lease meanwhile stores nothing.
            if !self.lease_rx.borrow().may_act() {
                break 'store Err(CoreError::LeaseLost("before storing the table".into()));
            }
            // The save is bounded by the lease: it stops as soon as this process may
            // no longer act (and what it wrote is in its own epoch's space, which a
            // newer holder never reads).
            let version = im.storage().version();
            let save = a
                .table
                .save(gcs.as_ref(), version, im.storage().iter(), a.epoch);
            tokio::select! {
                r = save => r.map(|stats| (outcome, stats)),
                () = lease_lost(self.lease_rx.clone()) => {
                    Err(CoreError::LeaseLost("while storing the table".into()))
                }
            }
        };
        drop(im);
        let outcome = match stored {
            Ok((outcome, stats)) => {
                a.storage.commit();
                report.kv = stats;
                outcome
            }
            Err(e) => {
                a.storage.rollback();
                a.carried = errors;
                a.rejections = rejections;
                return Err(e);
            }
        };
        report.phases.save = lap();
        let first_after_load = a.last_run.is_none();
        // Commit.
        a.avail = avail;
        a.last = Some(fp);
        a.last_run = Some(Instant::now());
        report.reconciled = true;
        report.autostopped = outcome.autostop.as_ref().is_some_and(|a| a.head_due);
        for w in &outcome.warnings {
            tracing::warn!("{w}");
        }
        // New ones said in one line (a takeover at 10,000 nodes is not 10,000 lines).
        let unknown: BTreeSet<String> = outcome.unknown_ray_nodes.iter().cloned().collect();
        let said = self.said.entry("unknown").or_default();
        let new: Vec<String> = unknown.difference(said).cloned().collect();
        *said = unknown;
        if let Some(line) = crate::reconciler::summarize(
            "ray nodes that belong to no instance of this cluster",
            &new,
        ) {
            tracing::warn!("{line}");
        }
        // What is known of the cloud's capacity survives a restart; written on change.
        let now_avail = a.avail.state();
        if now_avail != a.saved_avail {
            match lease::within(
                options.call_deadline,
                "InternalKVPut",
                a.table.save_availability(gcs.as_ref(), &now_avail),
            )
            .await
            {
                Ok(()) => a.saved_avail = now_avail,
                Err(e) => tracing::warn!("cannot store the availability state: {e}"),
            }
        }
        // The GCS drops reports not newer than the one it holds (a restarted rayscale, or
        // another autoscaler, may have sent higher versions): look at what it holds now
        // and then, and go on from there.
        if a.last_held_check
            .is_none_or(|t| t.elapsed() >= options.held_check)
        {
            a.last_held_check = Some(Instant::now());
            let d = options.call_deadline;
            if let Ok(held) = lease::within(d, "GetClusterStatus", gcs.held_report_version()).await
            {
                if held > a.report_version && !self.warned_other {
                    tracing::warn!("{OTHER_AUTOSCALER_HINT}");
                    self.warned_other = true;
                }
                a.report_version = a.report_version.max(held);
            }
        }
        // The version the GCS holds is outside input: at the end of the range no report
        // can be newer, which is said once; autoscaling goes on without `ray status`.
        match a.report_version.checked_add(1) {
            Some(v) => a.report_version = v,
            None => {
                if !self.said.contains_key("report_version") {
                    self.said.insert("report_version", BTreeSet::new());
                    tracing::warn!(
                        "the GCS holds autoscaling report version {}: no report can be newer, \
                         so `ray status` will not show rayscale's view (autoscaling goes on)",
                        a.report_version
                    );
                }
            }
        }
        if let Err(e) = lease::within(
            options.call_deadline,
            "ReportAutoscalingState",
            gcs.report_autoscaling_state(&outcome.report, state.version, a.report_version),
        )
        .await
        {
            tracing::warn!("cannot report the autoscaling state: {e}");
        }
        let done = effects::run_effects(
            gcs.as_ref(),
            provider.as_ref(),
            &outcome.effects,
            &self.lease_rx,
            options.effects,
        )
        .await;
        report.effects += outcome.effects.len();
        a.rejections.extend(done.rejections);
        a.carried.extend(done.errors);
        report.phases.effects = lap();
        // Why, for `rayscale status --why`: stored when the reasons change, and at
        // least every minute (so a reader sees it is current).
        if let Some(e) = &outcome.explanation
            && a.why_saved
                .as_ref()
                .is_none_or(|(saved, at)| !saved.same_reasons(e) || at.elapsed() >= WHY_REFRESH)
        {
            let key = crate::explain::why_key(&loaded.config.cluster_name);
            match lease::within(
                options.call_deadline,
                "InternalKVPut",
                gcs.kv_put(NAMESPACE, &key, e.to_json().as_bytes(), true),
            )
            .await
            {
                Ok(_) => a.why_saved = Some((e.clone(), Instant::now())),
                Err(err) => tracing::debug!("cannot store the explanation: {err}"),
            }
        }
        // Every so often, the cluster's notices whole: advice that drained no node, and
        // the leftovers of instances that are gone.
        let mut advisories = Vec::new();
        if loaded.config.preemption.enabled
            && a.notice_scan
                .is_none_or(|t| t.elapsed() >= notices::NOTICE_SCAN)
        {
            a.notice_scan = Some(Instant::now());
            let known: BTreeSet<&str> = a
                .storage
                .iter()
                .filter_map(|i| i.cloud_instance_id.as_deref())
                .chain(cloud.iter().map(|c| c.cloud_instance_id.as_str()))
                .collect();
            let ignore = loaded.config.preemption.on_rebalance
                == crate::config::preemption::OnRebalance::Ignore;
            let scan = notices::scan_notices(
                gcs.as_ref(),
                &loaded.config.cluster_name,
                &known,
                ignore,
                &mut a.notices_seen,
                options.call_deadline,
                self.said.entry("notices").or_default(),
            )
            .await;
            for n in &scan.advisories {
                tracing::info!(
                    "instance {}: {}: not drained (rayscale.preemption.on_rebalance: ignore)",
                    n.cloud_instance_id,
                    n.message
                );
            }
            advisories = scan.advisories;
        }
        if !self.observers.is_empty() {
            let view = IterationView {
                now_ns: now,
                config: &loaded.config,
                instances: a.storage.iter().collect(),
                ray: &state.state,
                outcome: &outcome,
                provider_errors: &errors,
                drain_rejections: &rejections,
                chain: &loaded.chain,
                first_after_load,
                advisories: &advisories,
            };
            for o in &self.observers {
                o.iteration(&view);
            }
        }
        let p = report.phases;
        tracing::debug!(
            "iteration: gather {:?}, reconcile {:?}, save {:?} ({} records), report and effects {:?} ({})",
            p.gather,
            p.reconcile,
            p.save,
            report.kv.written + report.kv.deleted,
            p.effects,
            outcome.effects.len()
        );
        Ok(())
    }
}

/// Resolves once the lease no longer lets this process act: at once when it does not,
/// else when the lease view changes to that or its validity runs out.
async fn lease_lost(mut rx: watch::Receiver<LeaseView>) {
    loop {
        let view = rx.borrow_and_update().clone();
        if !view.may_act() {
            return;
        }
        let until = view.valid_until.unwrap_or_else(Instant::now);
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(until) => {}
        }
    }
}
