//! Pacing: which queued instances are requested this iteration, and the report of what
//! is queued, pending or failed.

use super::*;

impl<S: InstanceStorage> Run<'_, S> {
    /// Paced launches: QUEUED -> REQUESTED, within the concurrency budget and upscaling
    /// speed, after each type's launch backoff.
    pub(super) fn pace(
        &mut self,
        s: &ReconcilerSettings,
        ids: &mut dyn IdSource,
    ) -> Result<(), CoreError> {
        let now = self.now_ns;
        // 5. Paced launches: QUEUED -> REQUESTED.
        let table = self.table()?;
        let requested = table
            .iter()
            .filter(|i| i.status == InstanceStatus::Requested)
            .count();
        let mut queued: BTreeMap<&str, Vec<&Instance>> = BTreeMap::new();
        let mut running: BTreeMap<&str, usize> = BTreeMap::new();
        // Launch failures per type within the failure window: (count, latest).
        let mut failures: BTreeMap<&str, (u32, i64)> = BTreeMap::new();
        for i in table.iter() {
            match i.status {
                InstanceStatus::Queued => queued.entry(&i.node_type).or_default().push(i),
                InstanceStatus::RayRunning => *running.entry(&i.node_type).or_default() += 1,
                _ => {
                    if let Some(at) = launch_failed_at(i)
                        && now.saturating_sub(at) < s.failed_report_s.saturating_mul(SEC)
                    {
                        let e = failures.entry(&i.node_type).or_insert((0, at));
                        e.0 += 1;
                        e.1 = e.1.max(at);
                    }
                }
            }
        }
        // After launch failures a type waits before it is launched again:
        // `launch_backoff_s * 2^(failures - 1)`, at most `max_launch_backoff_s`.
        let holds = &mut self.holds;
        queued.retain(|t, _| match failures.get(t) {
            None => true,
            Some(&(n, latest)) => {
                let wait_s = backoff_s(
                    s.launch_backoff_s,
                    n.saturating_sub(1),
                    s.max_launch_backoff_s,
                );
                let ready = now.saturating_sub(latest) >= wait_s.saturating_mul(SEC);
                if !ready {
                    holds.insert(
                        t.to_string(),
                        Hold::Backoff {
                            failures: n,
                            until_ns: latest.saturating_add(wait_s.saturating_mul(SEC)),
                        },
                    );
                }
                ready
            }
        });
        // Requests known to have landed: a record of theirs got a cloud instance. Their
        // outcome is final (a re-send of the id makes nothing more), so a record of one
        // that is requeued goes out in a fresh request.
        let landed: BTreeSet<&str> = table
            .iter()
            .filter(|i| i.cloud_instance_id.is_some() && !i.launch_request_id.is_empty())
            .map(|i| i.launch_request_id.as_str())
            .collect();
        let mut budget = s.max_concurrent_launches.saturating_sub(requested);
        let mut events = Vec::new();
        // (request id, node type) -> (count to send, launch config hash, all or nothing).
        let mut launches: BTreeMap<(String, String), (u64, String, bool)> = BTreeMap::new();
        // An atomic gang's queued members of a type go out together, in one all-or-nothing
        // request of their own, whatever the upscaling speed (they count in the budget).
        let mut gang_members: BTreeMap<(&str, &str), Vec<&Instance>> = BTreeMap::new();
        for list in queued.values_mut() {
            list.retain(|i| match i.gang.as_deref() {
                Some(g) => {
                    gang_members
                        .entry((g, i.node_type.as_str()))
                        .or_default()
                        .push(i);
                    false
                }
                None => true,
            });
        }
        for ((_, t), members) in gang_members {
            budget = budget.saturating_sub(members.len());
            Self::request(members, t, true, &landed, ids, &mut launches, &mut events);
        }
        queued.retain(|_, list| !list.is_empty());
        for (t, mut list) in queued {
            let base = running.get(t).copied().unwrap_or(0).max(1) as f64;
            let desired = ((s.upscaling_speed * base).ceil() as usize).max(1);
            let n = desired.min(budget).min(list.len());
            // What holds the rest back, for the explanation.
            if n < list.len() {
                let hold = if budget < desired {
                    Hold::Concurrency {
                        in_flight: s.max_concurrent_launches.saturating_sub(budget - n) as u64,
                        max: s.max_concurrent_launches as u64,
                    }
                } else {
                    Hold::Speed {
                        per_iteration: desired as u64,
                        upscaling_speed: s.upscaling_speed,
                    }
                };
                self.holds.insert(t.to_string(), hold);
            }
            list.sort_by_key(|i| {
                (
                    i.status_since(InstanceStatus::Queued).unwrap_or(0),
                    i.instance_id.clone(),
                )
            });
            let chosen: Vec<&Instance> = list.into_iter().take(n).collect();
            Self::request(chosen, t, false, &landed, ids, &mut launches, &mut events);
            budget -= n;
        }
        self.apply(events)?;
        for ((request_id, node_type), (count, launch_config_hash, all_or_nothing)) in launches {
            let avoid_zones = self.avail.unavailable.zones_out(&node_type, now);
            self.out.effects.push(Effect::Launch(LaunchRequest {
                request_id,
                node_type,
                count,
                launch_config_hash,
                avoid_zones,
                all_or_nothing,
            }));
        }
        Ok(())
    }

    /// QUEUED -> REQUESTED for `chosen` (of type `t`), and their launch requests in
    /// `launches` ((request id, type) -> (count, launch config hash, all or nothing)).
    /// A requeued instance keeps its request id, and its request is sent again as it was
    /// (same id, same size): if the first send went through late, a provider that
    /// deduplicates by id makes nothing twice. But a request that `landed` (the cloud
    /// made instances of it) is done: sent again, it would make nothing, and the record
    /// would wait out every request timeout. Its requeued records go out with the new
    /// instances, in a fresh request id they share.
    #[allow(clippy::too_many_arguments)]
    fn request(
        chosen: Vec<&Instance>,
        t: &str,
        all_or_nothing: bool,
        landed: &BTreeSet<&str>,
        ids: &mut dyn IdSource,
        launches: &mut BTreeMap<(String, String), (u64, String, bool)>,
        events: &mut Vec<InstanceUpdateEvent>,
    ) {
        let is_fresh = |i: &Instance| {
            i.launch_request_id.is_empty() || landed.contains(i.launch_request_id.as_str())
        };
        let fresh = chosen.iter().filter(|i| is_fresh(i)).count() as u64;
        let rid = if fresh > 0 {
            ids.request_id()
        } else {
            String::new()
        };
        for i in chosen {
            let (id, size) = if is_fresh(i) {
                (rid.clone(), fresh)
            } else {
                (i.launch_request_id.clone(), i.launch_request_size)
            };
            let e = launches.entry((id.clone(), t.to_string())).or_insert((
                0,
                i.launch_config_hash.clone(),
                all_or_nothing,
            ));
            // A record of an older table has no size: send what is requeued.
            e.0 = if size > 0 { size } else { e.0 + 1 };
            let what = if all_or_nothing { ", gang" } else { "" };
            events.push(
                Self::ev(
                    i,
                    InstanceStatus::Requested,
                    format!("launch requested ({id}{what})"),
                )
                .with_launch_request(id, size),
            );
        }
    }

    /// The report for `ray status`: queued, pending and recently failed launches.
    pub(super) fn report(&mut self, s: &ReconcilerSettings) -> Result<(), CoreError> {
        let now = self.now_ns;
        // The report.
        let table = self.table()?;
        let mut pending: BTreeMap<&str, (u64, i64)> = BTreeMap::new();
        let mut failed: BTreeMap<(String, String), FailedRequest> = BTreeMap::new();
        for i in table.iter() {
            match i.status {
                InstanceStatus::Queued => {
                    let e = pending.entry(&i.node_type).or_insert((0, i64::MAX));
                    e.0 += 1;
                    e.1 =
                        e.1.min(i.status_since(InstanceStatus::Queued).unwrap_or(now) / SEC);
                }
                InstanceStatus::Requested
                | InstanceStatus::Allocated
                | InstanceStatus::RayInstalling => {
                    self.out.report.pending_instances.push(PendingInstance {
                        instance_id: i.instance_id.clone(),
                        node_type: i.node_type.clone(),
                        details: i.status.name().to_string(),
                    });
                }
                _ => {
                    let Some(at) = launch_failed_at(i) else {
                        continue;
                    };
                    if now.saturating_sub(at) > s.failed_report_s.saturating_mul(SEC) {
                        continue;
                    }
                    let reason = i
                        .last_error
                        .clone()
                        .unwrap_or_else(|| "launch failed".into());
                    let start = i.status_history.first().map_or(at, |c| c.timestamp_ns);
                    let e = failed
                        .entry((i.node_type.clone(), reason.clone()))
                        .or_insert(FailedRequest {
                            node_type: i.node_type.clone(),
                            count: 0,
                            reason,
                            start_ts_s: start / SEC,
                            failed_ts_s: at / SEC,
                        });
                    e.count += 1;
                }
            }
        }
        self.out.report.pending_requests = pending
            .into_iter()
            .map(|(t, (count, ts))| PendingRequest {
                node_type: t.to_string(),
                count,
                request_ts_s: ts,
            })
            .collect();
        self.out.report.failed_requests = failed.into_values().collect();
        // Unavailable types show in `ray status` as failed launches of count 0 whose
        // details say why and for how long.
        for u in self.avail.unavailable.active(now) {
            self.out.report.unavailable_types.push(u.clone());
            self.out.report.failed_requests.push(FailedRequest {
                node_type: u.node_type.clone(),
                count: 0,
                reason: match &u.zone {
                    None => format!(
                        "node type unavailable for {}s more after a capacity error: {}",
                        (u.until_ns - now).div_euclid(SEC).max(0),
                        u.reason
                    ),
                    Some(z) => format!(
                        "zone {z} avoided for {}s more: {}",
                        (u.until_ns - now).div_euclid(SEC).max(0),
                        u.reason
                    ),
                },
                start_ts_s: u.since_ns / SEC,
                failed_ts_s: u.since_ns / SEC,
            });
        }
        Ok(())
    }
}
