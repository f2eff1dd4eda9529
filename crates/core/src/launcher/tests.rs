//! The launcher's tests, on the fake provider in virtual time.

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

/// What the head's autoscaler does during `down`, before each look at the cloud: given
/// the cloud and how many looks ago the head was asked to go (`None`: not yet).
type HeadHook = Box<dyn Fn(&FakeProvider, Option<u32>) + Send + Sync>;

/// The fake cloud, with the head's autoscaler acting on it as `hook` says.
struct Hooked {
    cloud: FakeProvider,
    hook: HeadHook,
    looks_since_head: std::sync::Mutex<Option<u32>>,
}

impl Hooked {
    fn new(hook: HeadHook) -> Hooked {
        let cloud = FakeProvider::new();
        cloud.insert(CloudInstance::worker("head", "h", None).as_head());
        cloud.insert(CloudInstance::worker("w1", "w", Some("r1")));
        cloud.insert(CloudInstance::worker("w2", "w", Some("r1")));
        Hooked {
            cloud,
            hook,
            looks_since_head: std::sync::Mutex::new(None),
        }
    }
}

#[async_trait::async_trait]
impl CloudInstanceProvider for Hooked {
    fn provider_type(&self) -> &str {
        "hooked"
    }
    async fn list(&self) -> Result<Vec<CloudInstance>, crate::provider::ProviderError> {
        let since = {
            let mut looks = self
                .looks_since_head
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(n) = looks.as_mut() {
                *n += 1;
            }
            *looks
        };
        (self.hook)(&self.cloud, since);
        self.cloud.list().await
    }
    async fn launch(
        &self,
        r: &LaunchRequest,
    ) -> Result<crate::provider::LaunchOutcome, crate::provider::ProviderError> {
        self.cloud.launch(r).await
    }
    async fn terminate(
        &self,
        ids: &[String],
        r: &str,
    ) -> Result<(), crate::provider::ProviderError> {
        self.cloud.terminate(ids, r).await
    }
    async fn poll_errors(&self) -> Vec<crate::provider::ProviderError> {
        Vec::new()
    }
    async fn terminate_head(&self, id: &str) -> Result<(), crate::provider::ProviderError> {
        *self
            .looks_since_head
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(0);
        self.cloud.terminate_head(id).await
    }
}

/// The order of `down`'s terminations, as `head:<id>` and `<id>+<id>`.
fn terminations(p: &FakeProvider) -> Vec<String> {
    p.calls()
        .into_iter()
        .filter_map(|c| match c {
            FakeCall::Terminate(ids) => Some(ids.join("+")),
            FakeCall::TerminateHead(id) => Some(format!("head:{id}")),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn down_removes_the_head_then_the_workers_and_what_it_launched_as_it_went() {
    // The head launches one more worker as it goes.
    let late = Hooked::new(Box::new(|cloud, since| {
        if since == Some(1) {
            cloud.insert(CloudInstance::worker("late", "w", Some("r2")));
        }
    }));
    let p = &late.cloud;
    let r = down(&late, &settings())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.heads, ["head"]);
    assert_eq!(r.workers, ["late", "w1", "w2"]);
    assert!(p.instances().is_empty());
    assert_eq!(
        terminations(p),
        ["head:head", "late+w1+w2"],
        "the head first (its autoscaler goes with it), then every worker"
    );
    // Nothing there: nothing asked.
    let r = down(p, &settings()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r, DownReport::default());
}

#[tokio::test(start_paused = true)]
async fn down_launches_nothing_again_on_a_head_that_keeps_min_workers() {
    // The running head keeps two workers of type `w` (`min_workers: 2`): each look at
    // the cloud finds one launched for each that went.
    let keeps = Hooked::new(Box::new(|cloud, _| {
        let all = cloud.instances();
        let head_runs = all
            .iter()
            .any(|i| i.is_head() && i.state == CloudInstanceState::Running);
        if head_runs {
            for n in all.iter().filter(|i| !i.is_head()).count()..2 {
                let id = format!("again-{}-{n}", cloud.calls().len());
                cloud.insert(CloudInstance::worker(&id, "w", Some("r")));
            }
        }
    }));
    let p = &keeps.cloud;
    let r = down(&keeps, &settings())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Workers first would meet a new pair at each look until down_timeout.
    assert_eq!(r.workers, ["w1", "w2"], "{:?}", terminations(p));
    assert_eq!(terminations(p), ["head:head", "w1+w2"]);
    assert!(p.instances().is_empty());
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

#[tokio::test(start_paused = true)]
async fn down_waits_out_a_head_that_launches_as_its_machine_shuts_down() {
    // The head leaves the list as its termination starts (AWS, Azure) while its machine
    // shuts down: its autoscaler launches one worker three looks later.
    let dying = Hooked::new(Box::new(|cloud, since| {
        if since == Some(3) {
            cloud.insert(CloudInstance::worker("late", "w", Some("r2")));
        }
    }));
    let p = &dying.cloud;
    let t0 = tokio::time::Instant::now();
    let r = down(&dying, &settings())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The first empty look comes after w1 and w2 went; the late one is met within the quiet
    // looks that follow, terminated, and waited out again.
    assert_eq!(r.workers, ["w1", "w2", "late"], "{:?}", terminations(p));
    assert!(p.instances().is_empty());
    assert!(
        t0.elapsed() >= settings().poll * DOWN_QUIET_POLLS,
        "{:?}",
        t0.elapsed()
    );
    // A head that cannot go: no worker is asked, and the error says so.
    let p = FakeProvider::new();
    p.insert(CloudInstance::worker("head", "h", None).as_head());
    p.insert(CloudInstance::worker("w1", "w", Some("r1")));
    p.fail_next(
        crate::testing::FaultOn::Terminate,
        crate::provider::ProviderErrorKind::Auth,
    );
    let e = err_text(down(&p, &settings()).await);
    assert!(e.contains("no worker was terminated"), "{e}");
    assert_eq!(terminations(&p), ["head:head"]);
}

/// A look that fails while `down` waits the cloud out empty says nothing: the wait starts
/// again, and `down` ends well. One that fails before ends it, as before.
#[tokio::test(start_paused = true)]
async fn a_failed_look_while_down_waits_the_cloud_out_starts_the_wait_again() {
    let flaky = Hooked::new(Box::new(|cloud, since| {
        if since == Some(3) {
            cloud.fail_next(
                crate::testing::FaultOn::List,
                crate::provider::ProviderErrorKind::Transient,
            );
        }
    }));
    let t0 = tokio::time::Instant::now();
    let r = down(&flaky, &settings())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.workers, ["w1", "w2"]);
    // Empty at look 2, failed at 3, empty again from 4: the quiet polls count from 4.
    assert!(
        t0.elapsed() >= settings().poll * (DOWN_QUIET_POLLS + 2),
        "{:?}",
        t0.elapsed()
    );
    let failing = Hooked::new(Box::new(|cloud, since| {
        if since == Some(1) {
            cloud.fail_next(
                crate::testing::FaultOn::List,
                crate::provider::ProviderErrorKind::Auth,
            );
        }
    }));
    assert!(!err_text(down(&failing, &settings()).await).is_empty());
}
