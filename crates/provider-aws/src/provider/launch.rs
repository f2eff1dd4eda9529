//! Launching on EC2: RunInstances (with the node type's passed-through members appended
//! to the signed body, retried while EC2 throttles), the restarts of stopped workers, and
//! a request's attempts across its subnets or zones with its outcome (split out of
//! `provider.rs`, behaviour unchanged).

use super::*;

impl AwsProvider {
    /// RunInstances, tried again (with backoff) while EC2 throttles; `extra` (the node
    /// type's passed-through members, as form pairs) is appended to the request's body
    /// before it is signed.
    async fn run_instances(
        &self,
        input: aws_sdk_ec2::operation::run_instances::RunInstancesInput,
        extra: &[(String, String)],
        node_type: &str,
        zone: Option<&str>,
    ) -> Result<Vec<ec2::Instance>, AwsError> {
        let extra = Arc::new(extra.to_vec());
        retry_throttled(|| async {
            self.calls.run.fetch_add(1, Ordering::Relaxed);
            let i = input.clone();
            let extra = extra.clone();
            self.client
                .run_instances()
                .set_block_device_mappings(i.block_device_mappings)
                .set_image_id(i.image_id)
                .set_instance_type(i.instance_type)
                .set_key_name(i.key_name)
                .set_max_count(i.max_count)
                .set_min_count(i.min_count)
                .set_placement(i.placement)
                .set_security_group_ids(i.security_group_ids)
                .set_subnet_id(i.subnet_id)
                .set_user_data(i.user_data)
                .set_tag_specifications(i.tag_specifications)
                .set_launch_template(i.launch_template)
                .set_instance_market_options(i.instance_market_options)
                .set_capacity_reservation_specification(i.capacity_reservation_specification)
                .set_metadata_options(i.metadata_options)
                .set_client_token(i.client_token)
                .set_network_interfaces(i.network_interfaces)
                .set_iam_instance_profile(i.iam_instance_profile)
                .set_ebs_optimized(i.ebs_optimized)
                .customize()
                .config_override(no_retries())
                .mutate_request(move |r| {
                    if extra.is_empty() {
                        return;
                    }
                    if let Some(body) = r.body().bytes() {
                        let body = passthrough::append_form(body, &extra);
                        r.headers_mut()
                            .insert("content-length", body.len().to_string());
                        *r.body_mut() = body.into();
                    } else {
                        // A Query request's body is always in memory.
                        tracing::warn!("RunInstances: a streamed body; node_config's passed-through keys not sent");
                    }
                })
                .send()
                .await
                .map(|out| out.instances().to_vec())
                .map_err(|e| sdk_error("RunInstances", e, node_type, zone))
        })
        .await
    }

    /// Restarts `ids` (stopped workers being reused), tagging them with the request
    /// first, so a replay counts them.
    async fn restart(
        &self,
        ids: &[String],
        request_id: &str,
        node_type: &str,
    ) -> Result<(), AwsError> {
        self.calls.create_tags.fetch_add(1, Ordering::Relaxed);
        self.client
            .create_tags()
            .set_resources(Some(ids.to_vec()))
            .tags(tag(tags::LAUNCH_REQUEST, request_id))
            .tags(tag(tags::NODE_STATUS, tags::STATUS_UNINITIALIZED))
            .send()
            .await
            .map_err(|e| sdk_error("CreateTags", e, node_type, None))?;
        retry_throttled(|| async {
            self.calls.start.fetch_add(1, Ordering::Relaxed);
            self.client
                .start_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .customize()
                .config_override(no_retries())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| sdk_error("StartInstances", e, node_type, None))
        })
        .await
    }

    pub(super) async fn launch_inner(
        &self,
        req: &LaunchRequest,
        kind: NodeKind,
    ) -> Result<LaunchOutcome, ProviderError> {
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
        let Some(nc) = cfg.node_types.get(t) else {
            return Err(ProviderError::new(
                launch_op(req.count),
                ProviderErrorKind::InvalidConfig,
                format!("launch {}: unknown node type {t:?}", req.request_id),
            ));
        };
        // 1. What this request already made (a replay after a crash, a retry).
        let ours = self
            .describe(
                cfg,
                &["pending", "running", "stopping", "stopped"],
                vec![
                    filter(
                        &format!("tag:{}", tags::LAUNCH_REQUEST),
                        [req.request_id.as_str()],
                    ),
                    filter(&format!("tag:{}", tags::USER_NODE_TYPE), [t]),
                ],
            )
            .await
            .map_err(|e| e.into_provider(launch_op(req.count)))?;
        let mut made: Vec<CloudInstance> = Vec::new();
        let mut stopped_ours = Vec::new();
        for i in &ours {
            match i.state().and_then(|s| s.name()) {
                Some(ec2::InstanceStateName::Stopped) => {
                    if let Some(id) = i.instance_id() {
                        stopped_ours.push(id.to_string());
                    }
                }
                _ => made.extend(placed(cfg, i)),
            }
        }
        let mut remaining = req.count.saturating_sub(made.len() as u64);
        // 2. Cached nodes: stopped instances of this kind, type and launch config,
        //    restarted (ours from an interrupted restart first); their boot script runs
        //    again at boot (it installed itself to).
        //    Not for an all-or-nothing launch: restarted nodes and a RunInstances that
        //    fails would leave part of the gang.
        let mut reuse: Vec<String> = stopped_ours;
        if cfg.cache_stopped_nodes && !req.all_or_nothing && remaining > reuse.len() as u64 {
            let hash = cfg.launch_hashes.get(t, kind).to_string();
            let stopped = self
                .describe(
                    cfg,
                    &["stopped"],
                    vec![
                        filter(&format!("tag:{}", tags::NODE_KIND), [kind.tag_value()]),
                        filter(&format!("tag:{}", tags::USER_NODE_TYPE), [t]),
                        filter(&format!("tag:{}", tags::LAUNCH_CONFIG), [hash.as_str()]),
                    ],
                )
                .await
                .map_err(|e| e.into_provider(launch_op(req.count)))?;
            let mut ids: Vec<String> = stopped
                .iter()
                .filter_map(|i| i.instance_id().map(str::to_string))
                .filter(|id| !reuse.contains(id))
                .collect();
            ids.sort();
            reuse.extend(ids);
        }
        reuse.truncate(usize::try_from(remaining).unwrap_or(usize::MAX));
        let mut shortfall: Option<AwsError> = None;
        for chunk in reuse.chunks(MAX_IDS_PER_CALL) {
            match self.restart(chunk, &req.request_id, t).await {
                Ok(()) => {
                    remaining -= chunk.len() as u64;
                    made.extend(chunk.iter().map(|id| {
                        let mut c = CloudInstance::worker(id.clone(), t, Some(&req.request_id));
                        c.kind = kind;
                        c.state = rayscale_core::provider::CloudInstanceState::Pending;
                        c.launch_config_hash = Some(cfg.launch_hashes.get(t, kind).to_string());
                        c
                    }));
                }
                Err(e) => {
                    tracing::warn!("restarting stopped workers of {t}: {e}");
                    // New instances may still be had.
                    shortfall = Some(e);
                    break;
                }
            }
        }
        // 3. New instances: one RunInstances per subnet (or zone) tried, the next one on
        //    a capacity error, as Ray rotates its SubnetIds.
        if remaining > 0 {
            let subnets = nc.subnets();
            let user_zone = nc
                .placement
                .as_ref()
                .and_then(|p| p.availability_zone.as_deref());
            let attempts: Vec<Placement<'_>> = if !subnets.is_empty() {
                subnets
                    .iter()
                    .map(|s| Placement {
                        subnet: Some(s.as_str()),
                        zone: None,
                    })
                    .collect()
            } else if nc.network_interfaces.is_none()
                && user_zone.is_none()
                && !cfg.availability_zones.is_empty()
            {
                cfg.availability_zones
                    .iter()
                    .map(|z| Placement {
                        subnet: None,
                        zone: Some(z.as_str()),
                    })
                    .collect()
            } else {
                vec![Placement {
                    subnet: None,
                    zone: None,
                }]
            };
            let user_data = mapping::user_data(
                nc.user_data.as_deref(),
                state.boot.get(t).map(String::as_str),
            );
            // Places that ran out or took an instance back a short while ago are
            // skipped; with none left the type is out, and no call is made.
            let open: Vec<&Placement<'_>> = attempts
                .iter()
                .filter(|at| !at.avoided(&req.avoid_zones))
                .collect();
            if open.is_empty() {
                let e = AwsError::Call {
                    call: "RunInstances",
                    code: None,
                    status: None,
                    kind: Class::Capacity.kind(t, None),
                    message: format!(
                        "every place of {t} is avoided for now ({}): not launched",
                        req.avoid_zones.join(", ")
                    ),
                };
                return Err(e.into_provider(launch_op(req.count)));
            }
            let tried = open.len();
            let mut out_of_capacity = 0;
            for at in open {
                // One token for the whole request, every place it tries: EC2 remembers a
                // token once a call with it succeeded, and answers a later call with it
                // by that call's reservation when every parameter is the same, or
                // IdempotentParameterMismatch when one differs (the SubnetId of another
                // attempt, a count computed from an eventually consistent describe). A
                // replay whose first call went through in any place thus launches nothing
                // twice; a call that failed (out of capacity) consumed nothing, and the
                // next place may use the token. Never a count in the token: a replay that
                // sees part of its instances would make a new one, and launch again.
                let token = idempotency_token(&req.request_id, 0);
                let input = mapping::run_instances_input(
                    cfg,
                    t,
                    kind,
                    Some(&req.request_id),
                    remaining,
                    req.all_or_nothing,
                    at,
                    user_data.as_deref(),
                    &token,
                )
                .map_err(|e| e.into_provider(launch_op(req.count)))?;
                let zone = at.zone.or(at.subnet).or(user_zone);
                let extra = cfg
                    .node_types
                    .get(t)
                    .map(|n| n.passthrough.as_slice())
                    .unwrap_or_default();
                match self.run_instances(input, extra, t, zone).await {
                    Ok(instances) => {
                        let got = instances.len() as u64;
                        made.extend(instances.iter().filter_map(|i| placed(cfg, i)));
                        if got < remaining {
                            shortfall = Some(AwsError::Call {
                                call: "RunInstances",
                                code: None,
                                status: None,
                                kind: Class::Capacity.kind(t, zone),
                                message: format!(
                                    "made {got} of {remaining} {t} instances (EC2 had no more)"
                                ),
                            });
                        } else {
                            shortfall = None;
                        }
                        remaining -= got.min(remaining);
                        break;
                    }
                    Err(e) if e.code() == Some("IdempotentParameterMismatch") => {
                        // The request went through before, in this place or another (a
                        // replay that saw none or part of what it made): its instances come
                        // with the next lists, joined by the request's tag.
                        tracing::info!(
                            "launch {} of {t} at {at:?} was made before: nothing new is \
                             launched ({} not listed yet)",
                            req.request_id,
                            remaining
                        );
                        shortfall = None;
                        remaining = 0;
                        break;
                    }
                    Err(e) => {
                        if matches!(e.kind(), ProviderErrorKind::Capacity { .. }) {
                            out_of_capacity += 1;
                        }
                        let next = classify(e.code(), None).next_subnet_may_help()
                            || matches!(e.kind(), ProviderErrorKind::Capacity { .. });
                        tracing::info!("launch {} of {t} at {at:?}: {e}", req.request_id);
                        shortfall = Some(e);
                        if !next {
                            break;
                        }
                    }
                }
            }
            // Every place tried was out of capacity: the type is, not one zone (a single
            // place that is out is the type out too: there is nowhere else to go).
            if out_of_capacity == tried
                && let Some(AwsError::Call {
                    kind: ProviderErrorKind::Capacity { zone, .. },
                    ..
                }) = &mut shortfall
            {
                *zone = None;
            }
        }
        match shortfall {
            None => Ok(LaunchOutcome {
                instances: made,
                shortfall: None,
            }),
            Some(e) if made.is_empty() => Err(e.into_provider(launch_op(req.count))),
            Some(e) => Ok(LaunchOutcome {
                instances: made,
                shortfall: Some(e.into_provider(launch_op(remaining))),
            }),
        }
    }
}
