//! The launcher: `rayscale up` and `rayscale down` for a cluster in a cloud, on the
//! provider trait alone (so every cloud that implements
//! [`launch_head`](CloudInstanceProvider::launch_head) and
//! [`terminate_head`](CloudInstanceProvider::terminate_head) has it).
//!
//! - [`up`] finds the cluster's head, or launches one (its boot script starts Ray's head
//!   and `rayscale run`: [`crate::provider::boot::render_head`]), and waits until the
//!   cloud runs it and knows its address. Run again, it finds the same head.
//! - [`down`] terminates the workers, then the head, then any worker the head's
//!   autoscaler launched meanwhile, and waits until the cloud lists nothing;
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
    let heads: Vec<&CloudInstance> = heads
        .into_iter()
        .filter(|h| Some(&h.cloud_instance_id) != relaunched.as_ref())
        .collect();
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
        let heads: Vec<&CloudInstance> = live_heads(&all)
            .into_iter()
            .filter(|h| Some(&h.cloud_instance_id) != relaunched.as_ref())
            .collect();
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
/// while this runs), adding what it asked for to `asked`.
async fn sweep_workers(
    provider: &dyn CloudInstanceProvider,
    asked: &mut Vec<String>,
    settings: &LauncherSettings,
    started: tokio::time::Instant,
    until_empty: bool,
    keep_min_of: Option<&ClusterConfig>,
) -> Result<(), CoreError> {
    // A worker listed as stopping is on its way out (a termination under way) and is not
    // asked again; one that stays so for a while without being asked (a preempted Cloud
    // TPU node, which stays until deleted) is asked once too.
    let linger = (settings.down_timeout / 4).min(std::time::Duration::from_secs(30));
    let mut stopping_since: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
    loop {
        let all = provider.list().await.map_err(provider_err)?;
        let kept = keep_min_of.map_or_else(BTreeSet::new, |c| kept_min_workers(&all, c));
        let workers: Vec<&CloudInstance> = all
            .iter()
            .filter(|i| !i.is_head() && !kept.contains(&i.cloud_instance_id))
            .collect();
        let left = if until_empty {
            all.len()
        } else {
            workers.len()
        };
        if left == 0 {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
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

/// Terminates the workers, then the head, then what the head launched meanwhile; returns
/// when the cloud lists none of the cluster's instances.
pub async fn down(
    provider: &dyn CloudInstanceProvider,
    settings: &LauncherSettings,
) -> Result<DownReport, CoreError> {
    let started = tokio::time::Instant::now();
    let mut report = DownReport::default();
    sweep_workers(
        provider,
        &mut report.workers,
        settings,
        started,
        false,
        None,
    )
    .await?;
    let all = provider.list().await.map_err(provider_err)?;
    for h in live_heads(&all) {
        tracing::info!("terminating the head {}", h.cloud_instance_id);
        provider
            .terminate_head(&h.cloud_instance_id)
            .await
            .map_err(provider_err)?;
        report.heads.push(h.cloud_instance_id.clone());
    }
    sweep_workers(provider, &mut report.workers, settings, started, true, None).await?;
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
    sweep_workers(
        provider,
        &mut report.workers,
        settings,
        started,
        false,
        keep,
    )
    .await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeCall, FakeProvider};

    fn config() -> ClusterConfig {
        ClusterConfig::from_yaml_str(
            "cluster_name: c\nprovider: {type: fake}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {}, node_config: {}}\n  \
             w: {resources: {CPU: 1}, node_config: {}}\n",
            "t.yaml",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The error's text, or empty when it succeeded.
    fn err_text<T>(r: Result<T, CoreError>) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    }

    fn settings() -> LauncherSettings {
        LauncherSettings {
            poll: Duration::from_secs(1),
            head_timeout: Duration::from_secs(30),
            down_timeout: Duration::from_secs(30),
            relaunch_outdated: false,
        }
    }

    fn with_ips(p: &FakeProvider) {
        for mut i in p.instances() {
            i.private_ip = Some("10.0.0.9".into());
            p.insert(i);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn up_launches_one_head_and_finds_it_again() {
        let p = FakeProvider::new().booting_slowly();
        let c = config();
        // Pending and without an address: `up` waits, then gives up naming the head.
        let e = err_text(up(&p, &c, "up-1", &settings()).await);
        assert!(e.contains("head fake-0 is Pending after 30 s"), "{e}");
        p.boot_all();
        with_ips(&p);
        let r = up(&p, &c, "up-2", &settings())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.launched, "the head of the first call is found");
        assert!(!r.outdated, "launched from this config");
        assert_eq!(r.head.cloud_instance_id, "fake-0");
        assert!(r.head.is_head());
        let heads: Vec<FakeCall> = p
            .calls()
            .into_iter()
            .filter(|c| matches!(c, FakeCall::LaunchHead(_)))
            .collect();
        assert_eq!(heads.len(), 1, "one head launch: {heads:?}");
        if let Some(FakeCall::LaunchHead(r)) = heads.first() {
            assert_eq!((r.node_type.as_str(), r.count), ("h", 1));
        }
    }

    /// A head found running with another launch hash than its type has now is said to be
    /// outdated (its `node_config` changed since it was launched); one without a hash
    /// tag says nothing.
    #[tokio::test(start_paused = true)]
    async fn a_found_head_of_another_node_config_is_outdated() {
        let c = config();
        for (had, outdated) in [(Some("an-older-hash"), true), (None, false)] {
            let p = FakeProvider::new();
            let mut h = CloudInstance::worker("h1", "h", None).as_head();
            h.launch_config_hash = had.map(str::to_string);
            h.private_ip = Some("10.0.0.9".into());
            p.insert(h);
            let r = up(&p, &c, "r", &settings())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!r.launched);
            assert_eq!(r.outdated, outdated, "{had:?}");
        }
    }

    /// `up -y`, as `ray up -y`: an outdated head (another hash, or another head type) is
    /// terminated and a new one launched and waited for; a current head, or one without
    /// a hash tag, is kept.
    #[tokio::test(start_paused = true)]
    async fn up_yes_relaunches_an_outdated_head_and_keeps_a_current_one() {
        let c = config();
        let current = c.head_launch_hash().unwrap_or_default();
        let relaunch = LauncherSettings {
            relaunch_outdated: true,
            ..settings()
        };
        for (hash, head_type, relaunched) in [
            (Some("an-older-hash"), "h", true),
            (Some(current.as_str()), "old-head-type", true),
            (Some(current.as_str()), "h", false),
            (None, "h", false),
        ] {
            let p = FakeProvider::new().with_private_ips();
            let mut h = CloudInstance::worker("h1", head_type, None).as_head();
            h.launch_config_hash = hash.map(str::to_string);
            h.private_ip = Some("10.0.0.9".into());
            p.insert(h);
            let r = up(&p, &c, "r", &relaunch)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let terminated = p
                .calls()
                .iter()
                .any(|c| matches!(c, FakeCall::TerminateHead(id) if id == "h1"));
            assert_eq!(terminated, relaunched, "{hash:?} {head_type}");
            assert_eq!(r.launched, relaunched);
            assert!(!r.outdated);
            if relaunched {
                assert_eq!(r.relaunched.as_deref(), Some("h1"));
                assert_ne!(r.head.cloud_instance_id, "h1", "the new head is waited for");
                assert_eq!(r.head.launch_config_hash.as_deref(), Some(current.as_str()));
            } else {
                assert_eq!(r.head.cloud_instance_id, "h1");
                assert!(r.relaunched.is_none());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn two_heads_are_an_error_and_a_refused_head_is_reported() {
        let c = config();
        let p = FakeProvider::new();
        p.insert(CloudInstance::worker("h1", "h", None).as_head());
        p.insert(CloudInstance::worker("h2", "h", None).as_head());
        let e = err_text(up(&p, &c, "r", &settings()).await);
        assert!(e.contains("2 heads (h1, h2)"), "{e}");
        let p = FakeProvider::new();
        p.set_capacity("h", Some(0), Some("us-west-2a"));
        let e = err_text(up(&p, &c, "r", &settings()).await);
        assert!(e.contains("no capacity"), "{e}");
        assert!(p.instances().is_empty());
    }

    /// A cloud whose list, from its `at`-th call on, shows the pending head changed by
    /// `how` (stopping, or gone), or (`hide`) leaves it out of its first lists.
    struct Fickle {
        inner: FakeProvider,
        lists: std::sync::atomic::AtomicUsize,
        at: usize,
        how: Option<CloudInstanceState>,
        hide: usize,
    }

    #[async_trait::async_trait]
    impl CloudInstanceProvider for Fickle {
        fn provider_type(&self) -> &str {
            "fickle"
        }
        async fn list(&self) -> Result<Vec<CloudInstance>, crate::provider::ProviderError> {
            let n = self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut all = self.inner.list().await?;
            if n < self.hide {
                all.retain(|i| !i.is_head());
            } else if n >= self.at {
                match self.how {
                    Some(s) => all.iter_mut().for_each(|i| i.state = s),
                    None => all.clear(),
                }
            }
            Ok(all)
        }
        async fn launch(
            &self,
            r: &LaunchRequest,
        ) -> Result<crate::provider::LaunchOutcome, crate::provider::ProviderError> {
            self.inner.launch(r).await
        }
        async fn launch_head(
            &self,
            r: &LaunchRequest,
        ) -> Result<crate::provider::LaunchOutcome, crate::provider::ProviderError> {
            self.inner.launch_head(r).await
        }
        async fn terminate(
            &self,
            ids: &[String],
            r: &str,
        ) -> Result<(), crate::provider::ProviderError> {
            self.inner.terminate(ids, r).await
        }
        async fn poll_errors(&self) -> Vec<crate::provider::ProviderError> {
            Vec::new()
        }
    }

    /// A head the cloud lists as stopping, or stops listing after it did, fails `up` at
    /// once (EC2 ends a pending instance it has no capacity for); one the list has not
    /// shown yet right after its launch is waited for.
    #[tokio::test(start_paused = true)]
    async fn up_says_at_once_when_the_head_it_waits_for_goes() {
        let c = config();
        let fickle = |at, how, hide| Fickle {
            inner: FakeProvider::new().booting_slowly(),
            lists: Default::default(),
            at,
            how,
            hide,
        };
        // Listed pending by the first look after the launch (call 1), stopping at call 3.
        let p = fickle(3, Some(CloudInstanceState::Stopping), 0);
        let started = tokio::time::Instant::now();
        let e = err_text(up(&p, &c, "r", &settings()).await);
        assert!(
            e.contains("the head fake-0 is stopping or terminated before it ran")
                && e.contains("rayscale up again launches a new one"),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "not waited out");
        let p = fickle(3, None, 0);
        let e = err_text(up(&p, &c, "r", &settings()).await);
        assert!(
            e.contains("the head fake-0 is no longer in the cloud's list"),
            "{e}"
        );
        // The list lags the launch for 3 looks, then shows the head, which boots.
        let p = fickle(usize::MAX, None, 4);
        let s = settings();
        let waiting = up(&p, &c, "r", &s);
        let booting = async {
            tokio::time::sleep(Duration::from_secs(6)).await;
            p.inner.boot_all();
            with_ips(&p.inner);
        };
        let (r, ()) = tokio::join!(waiting, booting);
        let r = r.unwrap_or_else(|e| panic!("{e}"));
        assert!(r.launched && r.head.cloud_instance_id == "fake-0");
    }

    /// A cloud whose head launches one more worker as it goes (the head's autoscaler
    /// acting during `down`).
    struct LateWorker(FakeProvider);

    #[async_trait::async_trait]
    impl CloudInstanceProvider for LateWorker {
        fn provider_type(&self) -> &str {
            "late"
        }
        async fn list(&self) -> Result<Vec<CloudInstance>, crate::provider::ProviderError> {
            self.0.list().await
        }
        async fn launch(
            &self,
            r: &LaunchRequest,
        ) -> Result<crate::provider::LaunchOutcome, crate::provider::ProviderError> {
            self.0.launch(r).await
        }
        async fn terminate(
            &self,
            ids: &[String],
            r: &str,
        ) -> Result<(), crate::provider::ProviderError> {
            self.0.terminate(ids, r).await
        }
        async fn poll_errors(&self) -> Vec<crate::provider::ProviderError> {
            Vec::new()
        }
        async fn terminate_head(&self, id: &str) -> Result<(), crate::provider::ProviderError> {
            self.0
                .insert(CloudInstance::worker("late", "w", Some("r2")));
            self.0.terminate_head(id).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn down_removes_workers_then_the_head_then_late_workers() {
        let late = LateWorker(FakeProvider::new());
        let p = &late.0;
        p.insert(CloudInstance::worker("head", "h", None).as_head());
        p.insert(CloudInstance::worker("w1", "w", Some("r1")));
        p.insert(CloudInstance::worker("w2", "w", Some("r1")));
        let r = down(&late, &settings())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.heads, ["head"]);
        assert_eq!(r.workers, ["w1", "w2", "late"]);
        assert!(p.instances().is_empty());
        let order: Vec<String> = p
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                FakeCall::Terminate(ids) => Some(ids.join("+")),
                FakeCall::TerminateHead(id) => Some(format!("head:{id}")),
                _ => None,
            })
            .collect();
        assert_eq!(
            order,
            ["w1+w2", "head:head", "late"],
            "workers first, then the head, then what it launched"
        );
        // Nothing there: nothing asked.
        let r = down(p, &settings()).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r, DownReport::default());
    }

    #[tokio::test(start_paused = true)]
    async fn down_reports_what_will_not_go() {
        let p = FakeProvider::new();
        // A worker the cloud keeps listing as stopping (a stuck termination): asked once,
        // once it lingers, and named when the time is up.
        p.insert(CloudInstance::worker("w1", "w", None).in_state(CloudInstanceState::Stopping));
        p.stick("w1");
        let e = err_text(down(&p, &settings()).await);
        assert!(
            e.contains("1 instances are still listed after 30 s: w1"),
            "{e}"
        );
        let asks = p
            .calls()
            .iter()
            .filter(|c| matches!(c, FakeCall::Terminate(ids) if ids == &["w1".to_string()]))
            .count();
        assert_eq!(asks, 1, "{:?}", p.calls());
    }

    #[tokio::test(start_paused = true)]
    async fn down_asks_a_worker_left_stopping_once_it_lingers() {
        let p = FakeProvider::new();
        // A preempted node the cloud lists as stopping until it is deleted.
        p.insert(CloudInstance::worker("w1", "w", None).in_state(CloudInstanceState::Stopping));
        let t0 = tokio::time::Instant::now();
        let r = down(&p, &settings())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.workers, ["w1"]);
        assert!(p.instances().is_empty());
        // Not at once: a stopping worker is on its way out unless it lingers.
        assert!(
            t0.elapsed() >= settings().down_timeout / 4,
            "{:?}",
            t0.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn down_workers_only_leaves_the_head_and_with_keep_min_each_types_minimum() {
        let c = ClusterConfig::from_yaml_str(
            "cluster_name: c\nprovider: {type: fake}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {}, node_config: {}}\n  \
             w: {resources: {CPU: 1}, node_config: {}, min_workers: 2}\n  \
             g: {resources: {GPU: 1}, node_config: {}, min_workers: 1}\n",
            "t.yaml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let p = FakeProvider::new();
        p.insert(CloudInstance::worker("head", "h", None).as_head());
        for id in ["w3", "w1", "w2"] {
            p.insert(CloudInstance::worker(id, "w", None));
        }
        // A pending worker is kept only after the running ones.
        p.insert(CloudInstance::worker("w0", "w", None).in_state(CloudInstanceState::Pending));
        p.insert(CloudInstance::worker("g1", "g", None));
        let r = down_workers(&p, &c, true, &settings())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.workers, ["w0", "w3"]);
        assert!(r.heads.is_empty());
        let mut left: Vec<String> = p
            .instances()
            .into_iter()
            .map(|i| i.cloud_instance_id)
            .collect();
        left.sort();
        assert_eq!(left, ["g1", "head", "w1", "w2"]);
        // Without --keep-min-workers every worker goes, and the head stays.
        let r = down_workers(&p, &c, false, &settings())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.workers, ["g1", "w1", "w2"]);
        let left: Vec<String> = p
            .instances()
            .into_iter()
            .map(|i| i.cloud_instance_id)
            .collect();
        assert_eq!(left, ["head"]);
        assert!(
            !p.calls()
                .iter()
                .any(|c| matches!(c, FakeCall::TerminateHead(_))),
            "the head is never asked to go"
        );
    }
}
