//! The launcher: `rayscale up` and `rayscale down` for a cluster in a cloud, on the
//! provider trait alone (so every cloud that implements
//! [`launch_head`](CloudInstanceProvider::launch_head) and
//! [`terminate_head`](CloudInstanceProvider::terminate_head) has it).
//!
//! - [`up`] finds the cluster's head, or launches one (its boot script starts Ray's head
//!   and `rayscale run`: [`crate::provider::boot::render_head`]), and waits until the
//!   cloud runs it and knows its address. Run again, it finds the same head.
//! - [`down`] terminates the head (its autoscaler goes with it), then every worker
//!   (any the dying head launched too), and waits until the cloud has listed nothing
//!   for [`DOWN_QUIET_POLLS`] polls;
//!   [`down_workers`] only the workers (or all but each type's `min_workers`).
//!
//! It waits on tokio's clock (paused in tests); it never talks to Ray: the head's Ray and
//! its autoscaler are the head's own business, as in Ray's `ray up`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::CoreError;
use crate::config::ClusterConfig;
use crate::provider::{CloudInstance, CloudInstanceProvider, CloudInstanceState, LaunchRequest};

/// How the launcher waits.
#[derive(Debug, Clone, Copy)]
pub struct LauncherSettings {
    /// Between two looks at the cloud.
    pub poll: Duration,
    /// How long a new head may take to run with an address.
    pub head_timeout: Duration,
    /// How long `down` waits for instances to go.
    pub down_timeout: Duration,
    /// `up -y`, as `ray up -y`: a head found outdated (another launch hash or head type
    /// than the YAML's) is terminated and a new one launched. Off, it is left running and
    /// [`UpReport::outdated`] says so.
    pub relaunch_outdated: bool,
}

/// For how many polls ([`LauncherSettings::poll`]; 4 × 5 s = 20 s by default) `down`
/// wants every look at the cloud empty after it terminated a head (at most until
/// `down_timeout`): about the time a machine takes to shut down, during which the head's
/// autoscaler still runs.
pub const DOWN_QUIET_POLLS: u32 = 4;

impl Default for LauncherSettings {
    fn default() -> Self {
        LauncherSettings {
            poll: Duration::from_secs(5),
            head_timeout: Duration::from_secs(600),
            down_timeout: Duration::from_secs(600),
            relaunch_outdated: false,
        }
    }
}

/// What `up` found or made.
#[derive(Debug, Clone)]
pub struct UpReport {
    /// The head, running, with its private address.
    pub head: CloudInstance,
    /// Whether this call launched it (else it was there).
    pub launched: bool,
    /// A head that was there carries another launch hash than the YAML's head has now
    /// (its `node_config` or `auth` changed since), or another head type: it runs as it
    /// was launched. Ray's `ray up` relaunches it after asking; `rayscale up` says so and
    /// leaves it, unless [`LauncherSettings::relaunch_outdated`].
    pub outdated: bool,
    /// The outdated head this call terminated before it launched [`UpReport::head`]
    /// ([`LauncherSettings::relaunch_outdated`]).
    pub relaunched: Option<String>,
}

/// What `up` knows, from the head's [`tags::RAYSCALE_CONFIG`](crate::provider::tags::RAYSCALE_CONFIG),
/// of the config the head's rayscale runs with, against the YAML's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadConfig {
    /// The head runs this YAML's config.
    Same,
    /// The head was launched with, or last given, another config: `up` pushes this one.
    Differs,
    /// The head carries no such tag (`ray up` or an older rayscale launched it): its
    /// config is not known, and `up` leaves it.
    Unknown,
}

impl HeadConfig {
    /// The state of head `h` against the YAML's config digest `digest`
    /// ([`boot::head_config_digest`](crate::provider::boot::head_config_digest)).
    pub fn of(h: &CloudInstance, digest: &str) -> Self {
        match h.labels.get(crate::provider::tags::RAYSCALE_CONFIG) {
            None => HeadConfig::Unknown,
            Some(d) if d == digest => HeadConfig::Same,
            Some(_) => HeadConfig::Differs,
        }
    }
}

/// Whether the head `h` was launched from another head than `config` describes now: its
/// `ray-launch-config` tag is not `hash`, or its `ray-user-node-type` not `head_type`, as
/// `ray up` compares them (a head without the tag is not called outdated: rayscale cannot
/// tell, and never relaunches on a guess).
fn is_outdated(h: &CloudInstance, hash: &str, head_type: &str) -> bool {
    h.launch_config_hash
        .as_deref()
        .is_some_and(|had| had != hash)
        || (!h.node_type.is_empty() && h.node_type != head_type)
}

/// What `down` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownReport {
    /// Workers asked to terminate (including those the head launched during `down`).
    pub workers: Vec<String>,
    /// Heads asked to terminate.
    pub heads: Vec<String>,
}

fn provider_err(e: crate::provider::ProviderError) -> CoreError {
    CoreError::Provider(e.to_string())
}

/// `heads` without the one called `gone`.
fn but<'a>(heads: Vec<&'a CloudInstance>, gone: Option<&str>) -> Vec<&'a CloudInstance> {
    heads
        .into_iter()
        .filter(|h| Some(h.cloud_instance_id.as_str()) != gone)
        .collect()
}

fn live_heads(all: &[CloudInstance]) -> Vec<&CloudInstance> {
    all.iter()
        .filter(|i| i.is_head() && i.state != CloudInstanceState::Stopping)
        .collect()
}

/// Finds or launches the head of `config`'s cluster and waits until it runs with an
/// address. `request_id` keys the launch (a fresh one per `up`: a cloud keeps launch
/// tokens for a while, so a fixed one could bring back a head terminated by `down`).
pub async fn up(
    provider: &dyn CloudInstanceProvider,
    config: &ClusterConfig,
    request_id: &str,
    settings: &LauncherSettings,
) -> Result<UpReport, CoreError> {
    let head_type = config
        .head_node_type
        .as_deref()
        .ok_or_else(|| CoreError::invalid("head_node_type", "`rayscale up` needs one"))?;
    let hash = config
        .node_type(head_type)
        .and(config.head_launch_hash())
        .ok_or_else(|| {
            CoreError::invalid(
                "head_node_type",
                format!("{head_type:?} is not in available_node_types"),
            )
        })?;
    let all = provider.list().await.map_err(provider_err)?;
    let heads = live_heads(&all);
    if heads.len() > 1 {
        let ids: Vec<&str> = heads.iter().map(|h| h.cloud_instance_id.as_str()).collect();
        return Err(CoreError::Provider(format!(
            "cluster {} has {} heads ({}): terminate all but one",
            config.cluster_name,
            ids.len(),
            ids.join(", ")
        )));
    }
    // As `ray up -y`: an outdated head goes first, and a new one is launched.
    let relaunched = match heads.first() {
        Some(h) if settings.relaunch_outdated && is_outdated(h, &hash, head_type) => {
            tracing::info!(
                "the head {} of cluster {} is outdated: terminating it to launch one from \
                 this config",
                h.cloud_instance_id,
                config.cluster_name
            );
            provider
                .terminate_head(&h.cloud_instance_id)
                .await
                .map_err(provider_err)?;
            Some(h.cloud_instance_id.clone())
        }
        _ => None,
    };
    let heads = but(heads, relaunched.as_deref());
    let launched = heads.is_empty();
    // The head waited for, and whether the cloud has listed it yet: one the cloud lists as
    // stopping, or no longer lists after it did (EC2 drops terminated instances from a
    // list of live states), will never run, and `up` says so at once instead of waiting
    // out the timeout. Not yet listed after its launch says nothing (a cloud's list may
    // lag its launch call).
    let mut waiting_on: Option<(String, bool)> =
        heads.first().map(|h| (h.cloud_instance_id.clone(), true));
    if launched {
        tracing::info!(
            "launching the head ({head_type}) of cluster {}",
            config.cluster_name
        );
        let outcome = provider
            .launch_head(&LaunchRequest {
                request_id: request_id.to_string(),
                node_type: head_type.to_string(),
                count: 1,
                launch_config_hash: hash.clone(),
                avoid_zones: Vec::new(),
                all_or_nothing: false,
            })
            .await
            .map_err(provider_err)?;
        if let Some(e) = outcome.shortfall {
            return Err(provider_err(e));
        }
        waiting_on = outcome
            .instances
            .iter()
            .find(|i| i.is_head())
            .map(|i| (i.cloud_instance_id.clone(), false));
    }
    let waited = tokio::time::Instant::now();
    // Progress: said when the head's state changes (and every minute while it does not).
    let mut said: Option<(String, u64)> = None;
    loop {
        let all = provider.list().await.map_err(provider_err)?;
        // The head terminated above may still be listed a while: never the one waited on.
        let heads = but(live_heads(&all), relaunched.as_deref());
        if waiting_on.is_none() {
            waiting_on = heads.first().map(|h| (h.cloud_instance_id.clone(), true));
        }
        if let Some((id, listed)) = waiting_on.as_mut() {
            let gone = match all.iter().find(|i| i.cloud_instance_id == *id) {
                Some(i) if i.state == CloudInstanceState::Stopping => {
                    Some("is stopping or terminated")
                }
                Some(_) => {
                    *listed = true;
                    None
                }
                None if *listed => Some("is no longer in the cloud's list"),
                None => None,
            };
            if let Some(why) = gone {
                return Err(CoreError::Provider(format!(
                    "cluster {}: the head {id} {why} before it ran ({} s); \
                     rayscale up again launches a new one",
                    config.cluster_name,
                    waited.elapsed().as_secs()
                )));
            }
        }
        let now = heads
            .first()
            .map(|h| format!("head {} is {:?}", h.cloud_instance_id, h.state))
            .unwrap_or_else(|| "no head is listed yet".to_string());
        let minute = waited.elapsed().as_secs() / 60;
        if said.as_ref() != Some(&(now.clone(), minute)) {
            if said.as_ref().is_none_or(|(s, _)| *s != now) || minute > 0 {
                tracing::info!(
                    "cluster {}: {now} ({} s)",
                    config.cluster_name,
                    waited.elapsed().as_secs()
                );
            }
            said = Some((now, minute));
        }
        if let Some(h) = heads
            .iter()
            .find(|h| h.is_running() && h.private_ip.is_some())
        {
            let outdated = !launched && is_outdated(h, &hash, head_type);
            return Ok(UpReport {
                head: (*h).clone(),
                launched,
                outdated,
                relaunched,
            });
        }
        if waited.elapsed() >= settings.head_timeout {
            let what = heads
                .first()
                .map(|h| format!("head {} is {:?}", h.cloud_instance_id, h.state))
                .unwrap_or_else(|| "no head is listed".to_string());
            return Err(CoreError::Provider(format!(
                "cluster {}: {what} after {} s",
                config.cluster_name,
                settings.head_timeout.as_secs()
            )));
        }
        tokio::time::sleep(settings.poll).await;
    }
}

/// Terminates every worker until none is listed (the head's autoscaler may launch more
/// while this runs), adding what it asked for to `asked`. With `until_empty`, until the
/// cloud lists nothing at all, on every look for that long (a head terminated a moment
/// ago may still be shutting down, unlisted, its autoscaler running).
async fn sweep_workers(
    provider: &dyn CloudInstanceProvider,
    asked: &mut Vec<String>,
    settings: &LauncherSettings,
    started: tokio::time::Instant,
    until_empty: Option<Duration>,
    keep_min_of: Option<&ClusterConfig>,
) -> Result<(), CoreError> {
    // A worker listed as stopping is on its way out (a termination under way) and is not
    // asked again; one that stays so for a while without being asked (a preempted Cloud
    // TPU node, which stays until deleted) is asked once too.
    let linger = (settings.down_timeout / 4).min(std::time::Duration::from_secs(30));
    let mut stopping_since: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
    let mut empty_since: Option<tokio::time::Instant> = None;
    loop {
        let all = match provider.list().await {
            Ok(all) => all,
            // While the cloud is waited out empty, a look that fails says nothing: the
            // wait starts again (until `down_timeout`). Elsewhere it ends the sweep.
            Err(e) if empty_since.is_some() && started.elapsed() < settings.down_timeout => {
                tracing::warn!("listing the cluster's instances: {e}; looking again");
                empty_since = None;
                tokio::time::sleep(settings.poll).await;
                continue;
            }
            Err(e) => return Err(provider_err(e)),
        };
        let kept = keep_min_of.map_or_else(BTreeSet::new, |c| kept_min_workers(&all, c));
        let workers: Vec<&CloudInstance> = all
            .iter()
            .filter(|i| !i.is_head() && !kept.contains(&i.cloud_instance_id))
            .collect();
        let left = if until_empty.is_some() {
            all.len()
        } else {
            workers.len()
        };
        let now = tokio::time::Instant::now();
        if left == 0 {
            let since = *empty_since.get_or_insert(now);
            if now.duration_since(since) >= until_empty.unwrap_or_default()
                || started.elapsed() >= settings.down_timeout
            {
                return Ok(());
            }
            tokio::time::sleep(settings.poll).await;
            continue;
        }
        empty_since = None;
        stopping_since.retain(|id, _| {
            workers
                .iter()
                .any(|w| w.cloud_instance_id == *id && w.state == CloudInstanceState::Stopping)
        });
        for w in workers
            .iter()
            .filter(|w| w.state == CloudInstanceState::Stopping)
        {
            stopping_since
                .entry(w.cloud_instance_id.clone())
                .or_insert(now);
        }
        let fresh: Vec<String> = workers
            .iter()
            .filter(|w| {
                w.state != CloudInstanceState::Stopping
                    || stopping_since
                        .get(&w.cloud_instance_id)
                        .is_some_and(|t| now.duration_since(*t) >= linger)
            })
            .filter(|w| !asked.contains(&w.cloud_instance_id))
            .map(|w| w.cloud_instance_id.clone())
            .collect();
        if !fresh.is_empty() {
            tracing::info!("terminating {} workers", fresh.len());
            provider
                .terminate(&fresh, "rayscale-down")
                .await
                .map_err(provider_err)?;
            asked.extend(fresh);
        }
        if started.elapsed() >= settings.down_timeout {
            return Err(CoreError::Provider(format!(
                "{left} instances are still listed after {} s: {}",
                settings.down_timeout.as_secs(),
                all.iter()
                    .map(|i| i.cloud_instance_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        tokio::time::sleep(settings.poll).await;
    }
}

/// Terminates the head first, so its autoscaler goes with it (as `ray down` stops Ray on
/// the head before it touches a worker; terminating the head is the same stop without
/// SSH), then every worker, including any the head launched while it went; returns when
/// the cloud has listed none of the cluster's instances for [`DOWN_QUIET_POLLS`] polls
/// (a head leaves the lists of AWS and Azure as its termination starts, while its
/// machine still shuts down). Workers first would race a head that keeps
/// `min_workers`: it launches again what `down` terminates.
pub async fn down(
    provider: &dyn CloudInstanceProvider,
    settings: &LauncherSettings,
) -> Result<DownReport, CoreError> {
    let started = tokio::time::Instant::now();
    let mut report = DownReport::default();
    let all = provider.list().await.map_err(provider_err)?;
    for h in live_heads(&all) {
        tracing::info!("terminating the head {}", h.cloud_instance_id);
        provider
            .terminate_head(&h.cloud_instance_id)
            .await
            .map_err(|e| {
                CoreError::Provider(format!(
                    "{e}; no worker was terminated (the head keeps them): run down again \
                     once the head can go"
                ))
            })?;
        report.heads.push(h.cloud_instance_id.clone());
    }
    // With a head going, the cloud must stay empty for a while: its autoscaler may
    // launch until its machine is down.
    let quiet = if report.heads.is_empty() {
        Duration::ZERO
    } else {
        settings.poll * DOWN_QUIET_POLLS
    };
    sweep_workers(
        provider,
        &mut report.workers,
        settings,
        started,
        Some(quiet),
        None,
    )
    .await?;
    Ok(report)
}

/// The workers `down --workers-only --keep-min-workers` leaves running: of each node
/// type, its `min_workers` live workers, running ones first, then by id (so the same ones
/// from one look to the next). Ray's `--keep-min-workers` reads the legacy top-level
/// `min_workers` (absent from today's YAMLs, so it keeps none) and picks at random; the
/// per-type minimums are what the head's autoscaler would launch again at once.
pub fn kept_min_workers(all: &[CloudInstance], config: &ClusterConfig) -> BTreeSet<String> {
    let mut kept = BTreeSet::new();
    for t in &config.node_types {
        let mut live: Vec<&CloudInstance> = all
            .iter()
            .filter(|i| {
                !i.is_head() && i.node_type == t.name && i.state != CloudInstanceState::Stopping
            })
            .collect();
        live.sort_by(|a, b| {
            (a.state != CloudInstanceState::Running, &a.cloud_instance_id)
                .cmp(&(b.state != CloudInstanceState::Running, &b.cloud_instance_id))
        });
        let n = usize::try_from(t.min_workers).unwrap_or(usize::MAX);
        kept.extend(
            live.into_iter()
                .take(n)
                .map(|i| i.cloud_instance_id.clone()),
        );
    }
    kept
}

/// `down --workers-only`: terminates the workers (all, or all but each type's
/// `min_workers` with `keep_min_workers`) and leaves the head; returns when the cloud
/// lists none of them. The head's autoscaler, still running, may launch workers again
/// (as after Ray's `ray down --workers-only`); those found while this runs go too.
pub async fn down_workers(
    provider: &dyn CloudInstanceProvider,
    config: &ClusterConfig,
    keep_min_workers: bool,
    settings: &LauncherSettings,
) -> Result<DownReport, CoreError> {
    let started = tokio::time::Instant::now();
    let mut report = DownReport::default();
    let keep = keep_min_workers.then_some(config);
    sweep_workers(provider, &mut report.workers, settings, started, None, keep).await?;
    Ok(report)
}

#[cfg(test)]
mod tests;
