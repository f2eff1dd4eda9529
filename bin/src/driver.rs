//! The live loop: the only place that does the autoscaler's I/O. It watches the GCS about
//! once a second, runs the pure reconciler when something changed (or every interval),
//! stores the instance table in the GCS's KV store *before* any side effect, reports the
//! autoscaling state, then performs the effects (launches, drains, terminations).
//! Any error aborts the iteration; the loop goes on at the next tick.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use rayscale_core::availability::{Availability, DEFAULT_RECOVERY_S};
use rayscale_core::config::ClusterConfig;
use rayscale_core::expander::{ExpanderChain, SeededRng};
use rayscale_core::instance::{InMemoryStorage, Instance, InstanceManager};
use rayscale_core::model::InstanceStatus;
use rayscale_core::provider::{
    CloudInstanceProvider, CloudInstanceState, LaunchRequest, ProviderError, ProviderOp,
};
use rayscale_core::reconciler::{
    DrainRejection, Effect, IdSource, Observed, ReconcilerSettings, reconcile,
};
use rayscale_gcs_client::client::GcsClient;
use rayscale_gcs_client::convert::{autoscaling_state_to_proto, node_id_from_hex};
use rayscale_gcs_client::kv_store::KvInstanceStore;
use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;

/// Wall-clock time in ns since the epoch (the loop's only clock).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Random ids from a generator seeded at start (process id and time).
struct RandomIds(SeededRng);

impl IdSource for RandomIds {
    fn instance_id(&mut self) -> String {
        format!("im-{:016x}", self.0.next_u64())
    }
    fn request_id(&mut self) -> String {
        format!("lr-{:016x}", self.0.next_u64())
    }
}

/// Said once when the head was started without autoscaler v2.
pub const V1_HEAD_HINT: &str = "this Ray head was started without RAY_enable_autoscaler_v2=1: \
rayscale autoscales it, but `ray status` does not show rayscale's view (and turning v2 on now \
would make every Ray job print tracebacks). For the full view, start the head with \
`RAY_enable_autoscaler_v2=1 ray start --head --no-monitor ...`";

/// Said once when another autoscaler reports to the same GCS.
const OTHER_AUTOSCALER_HINT: &str = "another autoscaler reports to this GCS (a Ray head \
started without --no-monitor runs Ray's own): both act on the cluster. Start the head with \
`RAY_enable_autoscaler_v2=1 ray start --head --no-monitor ...`";

/// How often the loop looks at the autoscaling state version the GCS holds.
const HELD_CHECK: Duration = Duration::from_secs(60);

/// The version of the autoscaling state the GCS holds (0 when none).
async fn held_report_version(gcs: &GcsClient) -> Result<i64> {
    Ok(gcs
        .get_cluster_status()
        .await?
        .autoscaling_state
        .map_or(0, |s| s.autoscaler_state_version))
}

/// Says each entry of `now` that `said` lacks, then remembers `now`: a condition that
/// lasts is said when it starts, not on every iteration.
fn say_new(said: &mut BTreeSet<String>, now: BTreeSet<String>, say: impl Fn(&str)) {
    for s in now.difference(said) {
        say(s);
    }
    *said = now;
}

/// Loop timing.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// Reconcile at least this often.
    pub interval: Duration,
    /// Look at the GCS this often; reconcile at once when something changed.
    pub watch: Duration,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            interval: Duration::from_secs(5),
            watch: Duration::from_secs(1),
        }
    }
}

/// What the watch compares to decide whether to reconcile.
#[derive(PartialEq, Eq, Default)]
struct Fingerprint {
    version: i64,
    cloud: BTreeSet<(String, CloudInstanceState)>,
}

/// Runs the loop until `shutdown` resolves.
pub async fn run_loop(
    gcs: GcsClient,
    provider: Arc<dyn CloudInstanceProvider>,
    config: ClusterConfig,
    mut chain: ExpanderChain,
    options: LoopOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let settings = ReconcilerSettings::from_config(&config);
    // Ray's CloudResourceMonitor and rayscale's unavailable types, kept across iterations
    // and stored in the GCS beside the instance table (so a restart keeps them).
    let mut avail = Availability::new(config.unavailable_type_ttl_s, DEFAULT_RECOVERY_S);
    tracing::info!("provider: {}", provider.provider_type());
    let store = KvInstanceStore::new(gcs.clone(), &config.cluster_name);
    let mut ids = RandomIds(SeededRng::new(
        now_ns() as u64 ^ (u64::from(std::process::id()) << 32),
    ));
    tokio::pin!(shutdown);

    // The instance table lives in the GCS: load it (waiting for the GCS if need be).
    let storage = loop {
        match store.load().await {
            Ok(Some((version, instances))) => {
                tracing::info!(
                    "loaded {} instance records (table version {version}) from the GCS",
                    instances.len()
                );
                break InMemoryStorage::with_instances(version, instances);
            }
            Ok(None) => break InMemoryStorage::new(),
            Err(e) => tracing::warn!("cannot load the instance table yet: {e}"),
        }
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(options.watch) => {}
        }
    };
    let mut im = InstanceManager::new(storage);
    match store.load_availability().await {
        Ok(Some(state)) => {
            tracing::info!(
                "loaded the availability state ({} unavailable types) from the GCS",
                state.unavailable.len()
            );
            avail.restore(state);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("ignoring the stored availability state: {e}"),
    }
    let mut saved_avail = avail.state();
    // `ray status` shows this autoscaler's reports only on a head started for autoscaler
    // v2 (`RAY_enable_autoscaler_v2=1`). Turning v2 on for a head started without it is
    // harmful: its log monitor stays in v1 mode and every Ray job then prints a traceback
    // per log line. So rayscale never sets the flag; it says once how to start the head.
    match gcs.kv_get("__autoscaler", b"__autoscaler_v2_enabled").await {
        Ok(Some(v)) if v == b"1" => {}
        Ok(_) => tracing::warn!("{}", V1_HEAD_HINT),
        Err(e) => tracing::warn!("cannot read whether autoscaler v2 is enabled: {e}"),
    }
    // Crash recovery: launches that were recorded but may not have been made are made
    // again; the provider is idempotent by request id, so nothing is launched twice.
    let mut pending_effects = relaunch_requested(&im)?;
    let mut rejections: Vec<DrainRejection> = Vec::new();
    // Provider errors not yet seen by a completed iteration.
    let mut carried: Vec<ProviderError> = Vec::new();
    let mut last = Fingerprint {
        version: -1,
        ..Default::default()
    };
    let mut last_run: Option<Instant> = None;
    let mut report_version: i64 = 0;
    let mut warned_other = false;
    let mut last_held_check: Option<Instant> = None;
    // Rows of the GCS state left out, as last said.
    let mut bad_rows: BTreeSet<String> = BTreeSet::new();
    // Ray nodes of no instance, as last said.
    let mut unknown_nodes: BTreeSet<String> = BTreeSet::new();
    let mut first = true;

    loop {
        if !first {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(options.watch) => {}
            }
        }
        first = false;
        // Effects postponed by an earlier iteration run first, once the table that
        // recorded them is stored.
        if !pending_effects.is_empty() {
            match save_table(&store, &im).await {
                Ok(()) => {
                    let effects = std::mem::take(&mut pending_effects);
                    run_effects(
                        &gcs,
                        provider.as_ref(),
                        &effects,
                        &mut rejections,
                        &mut carried,
                    )
                    .await;
                }
                Err(e) => {
                    tracing::warn!("cannot store the instance table yet: {e}");
                    continue;
                }
            }
        }
        let state = match gcs.get_cluster_resource_state(0).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("GCS unreachable, retrying: {e}");
                continue;
            }
        };
        let cloud = match provider.list().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("cannot list instances, retrying: {e}");
                continue;
            }
        };
        let mut errors = std::mem::take(&mut carried);
        for e in provider.poll_errors().await {
            tracing::warn!("provider error: {e}");
            errors.push(e);
        }
        let fp = Fingerprint {
            version: state.cluster_resource_state_version,
            cloud: cloud
                .iter()
                .map(|c| (c.cloud_instance_id.clone(), c.state))
                .collect(),
        };
        let due = last_run.is_none_or(|t| t.elapsed() >= options.interval);
        if fp == last && errors.is_empty() && rejections.is_empty() && !due {
            continue;
        }
        last = fp;
        last_run = Some(Instant::now());
        // A row that does not convert is left out (as Ray's scheduler skips it), and said
        // once while it lasts; the rest of the state is still acted on.
        let (core_state, skipped) = rayscale_gcs_client::convert::cluster_resource_state_lenient(
            &state,
            "cluster_resource_state",
        );
        say_new(
            &mut bad_rows,
            skipped.iter().map(ToString::to_string).collect(),
            |e| tracing::warn!("left out of this iteration's GCS state: {e}"),
        );
        let rej = std::mem::take(&mut rejections);
        // The reconciler is synchronous; the gRPC expander blocks on its own runtime, so
        // the iteration runs outside this runtime's context.
        let result = tokio::task::block_in_place(|| {
            reconcile(
                &mut im,
                &config,
                &mut chain,
                &settings,
                &mut avail,
                Observed {
                    ray: &core_state,
                    cloud: &cloud,
                    provider_errors: &errors,
                    drain_rejections: &rej,
                },
                now_ns(),
                &mut ids,
            )
        });
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!("iteration aborted: {e}");
                carried = errors;
                rejections = rej;
                continue;
            }
        };
        for w in &outcome.warnings {
            tracing::warn!("{w}");
        }
        say_new(
            &mut unknown_nodes,
            outcome.unknown_ray_nodes.iter().cloned().collect(),
            |n| tracing::warn!("ray node {n} belongs to no instance of this cluster"),
        );
        // Terminal records are kept an hour (for reports and launch backoff), then dropped.
        if let Err(e) = im.prune_terminal(now_ns().saturating_sub(3_600 * 1_000_000_000)) {
            tracing::warn!("cannot prune the instance table: {e}");
        }
        // Store the table before any side effect: a crash after this point replays.
        if let Err(e) = save_table(&store, &im).await {
            tracing::warn!("cannot store the instance table, effects postponed: {e}");
            pending_effects = outcome.effects;
            continue;
        }
        // What is known of the cloud's capacity survives a restart (and `snapshot` reads
        // it); it is only written when it changed.
        let now_avail = avail.state();
        if now_avail != saved_avail {
            match store.save_availability(&now_avail).await {
                Ok(()) => saved_avail = now_avail,
                Err(e) => tracing::warn!("cannot store the availability state: {e}"),
            }
        }
        // The GCS drops reports not newer than the one it holds (a restarted rayscale, or
        // another autoscaler, may have sent higher versions): look at what it holds at the
        // start and then once a minute, and go on from there. A version this process did
        // not send means another autoscaler reports too.
        if last_held_check.is_none_or(|t| t.elapsed() >= HELD_CHECK) {
            last_held_check = Some(Instant::now());
            if let Ok(held) = held_report_version(&gcs).await {
                if held > report_version && report_version > 0 && !warned_other {
                    tracing::warn!("{}", OTHER_AUTOSCALER_HINT);
                    warned_other = true;
                }
                report_version = report_version.max(held);
            }
        }
        report_version += 1;
        let report = autoscaling_state_to_proto(
            &outcome.report,
            state.cluster_resource_state_version,
            report_version,
        );
        if let Err(e) = gcs.report_autoscaling_state(report).await {
            tracing::warn!("cannot report the autoscaling state: {e}");
        }
        run_effects(
            &gcs,
            provider.as_ref(),
            &outcome.effects,
            &mut rejections,
            &mut carried,
        )
        .await;
    }
    tracing::info!("loop stopped");
    Ok(())
}

/// Stores the whole instance table in the GCS.
async fn save_table(store: &KvInstanceStore, im: &InstanceManager<InMemoryStorage>) -> Result<()> {
    let (version, instances) = im.get_instances()?;
    store.save(version, &instances).await?;
    Ok(())
}

/// Crash recovery: the launch requests of every REQUESTED instance, re-sent as they were
/// (same request id, type and size). The provider is idempotent by request id, so a
/// request that went through before the crash makes nothing twice.
fn relaunch_requested(im: &InstanceManager<InMemoryStorage>) -> Result<Vec<Effect>> {
    let (_, instances) = im.get_instances()?;
    let mut by_request: std::collections::BTreeMap<(String, String), (u64, String)> =
        Default::default();
    for i in instances
        .iter()
        .filter(|i: &&Instance| i.status == InstanceStatus::Requested)
    {
        let e = by_request
            .entry((i.launch_request_id.clone(), i.node_type.clone()))
            .or_insert((0, i.launch_config_hash.clone()));
        // A record of an older table has no size: send what is requested.
        e.0 = if i.launch_request_size > 0 {
            i.launch_request_size
        } else {
            e.0 + 1
        };
    }
    Ok(by_request
        .into_iter()
        .map(|((request_id, node_type), (count, launch_config_hash))| {
            tracing::info!(
                "replaying launch request {request_id} ({count} x {node_type}) after a restart"
            );
            Effect::Launch(LaunchRequest {
                request_id,
                node_type,
                count,
                launch_config_hash,
            })
        })
        .collect())
}

/// Runs effects in order. A drain the GCS rejects is recorded for the next sync, and so
/// is a launch or termination the provider refuses at once (as a provider error).
async fn run_effects(
    gcs: &GcsClient,
    provider: &dyn CloudInstanceProvider,
    effects: &[Effect],
    rejections: &mut Vec<DrainRejection>,
    carried: &mut Vec<ProviderError>,
) {
    for e in effects {
        match e {
            Effect::Launch(l) => {
                tracing::info!(
                    "launching {} x {} (request {})",
                    l.count,
                    l.node_type,
                    l.request_id
                );
                match provider.launch(l).await {
                    Ok(outcome) => {
                        if !outcome.instances.is_empty() {
                            let ids: Vec<&str> = outcome
                                .instances
                                .iter()
                                .map(|c| c.cloud_instance_id.as_str())
                                .collect();
                            tracing::info!("launch {} made {}", l.request_id, ids.join(", "));
                        }
                        if let Some(short) = outcome.shortfall {
                            tracing::warn!(
                                "launch {} fell short ({}): {short}",
                                l.request_id,
                                short.kind.name()
                            );
                            carried.push(short);
                        }
                    }
                    Err(err) => {
                        tracing::warn!(
                            "launch {} failed ({}): {err}",
                            l.request_id,
                            err.kind.name()
                        );
                        carried.push(err.for_op(ProviderOp::Launch {
                            request_id: l.request_id.clone(),
                            node_type: l.node_type.clone(),
                            count: l.count,
                        }));
                    }
                }
            }
            Effect::Drain {
                instance_id,
                node_id_hex,
                reason,
                deadline_ms,
            } => {
                let node = match node_id_from_hex(node_id_hex) {
                    Ok(n) => n,
                    Err(err) => {
                        tracing::warn!("cannot drain {instance_id}: {err}");
                        continue;
                    }
                };
                tracing::info!("draining {instance_id} (node {node_id_hex}): {reason}");
                match gcs
                    .drain_node(
                        &node,
                        pb::DrainNodeReason::IdleTermination,
                        reason,
                        *deadline_ms,
                    )
                    .await
                {
                    Ok(r) if r.is_accepted => {}
                    Ok(r) => {
                        tracing::warn!(
                            "drain of {instance_id} rejected: {}",
                            r.rejection_reason_message
                        );
                        rejections.push(DrainRejection {
                            instance_id: instance_id.clone(),
                            reason: r.rejection_reason_message,
                        });
                    }
                    Err(err) => tracing::warn!("drain of {instance_id} failed: {err}"),
                }
            }
            Effect::Terminate {
                cloud_instance_ids,
                request_id,
            } => {
                tracing::info!("terminating {}", cloud_instance_ids.join(", "));
                if let Err(err) = provider.terminate(cloud_instance_ids, request_id).await {
                    tracing::warn!("terminate failed: {err}");
                    for id in cloud_instance_ids {
                        carried.push(err.clone().for_op(ProviderOp::Terminate {
                            cloud_instance_id: id.clone(),
                        }));
                    }
                }
            }
        }
    }
}
