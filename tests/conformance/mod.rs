//! The provider conformance suite: ONE set of checks of the contract in
//! `rayscale_core::provider`, run by every provider against its own fake or emulator
//! (`tests/tests/conformance.rs` runs it on `local_processes` and on core's
//! `FakeProvider`; each cloud adds a [`Subject`] for its fake). Write checks here, never
//! a copy in a provider's own tests.
//!
//! A provider shows what it can be made to do through [`Provoke`]: a cloud fake can answer
//! any error kind and limit capacity; the local-process provider only produces what its
//! own inputs can cause. Checks a subject cannot take part in are reported as skipped, by
//! name, so a run says what it did not check.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, LaunchOutcome, LaunchRequest, NodeKind, ProviderError,
    ProviderErrorKind, ProviderOp, tags,
};

/// What a subject can be made to do, beyond plain calls.
#[async_trait::async_trait]
pub trait Provoke: Send + Sync {
    /// A launch request the provider will answer with an error of `kind` (arranging the
    /// fake's answer first where it needs to), or `None` when this provider cannot be made
    /// to produce that kind.
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest>;
    /// Lets only `n` more instances of `node_type` be made; false when unsupported.
    async fn limit_capacity(&self, node_type: &str, n: u64) -> bool;
    /// Lifts a limit set by [`Self::limit_capacity`].
    async fn unlimit_capacity(&self, node_type: &str);
}

/// A provider under test, with what the suite needs to know about it.
pub struct Subject {
    /// The provider.
    pub provider: Arc<dyn CloudInstanceProvider>,
    /// A worker node type it can launch.
    pub node_type: String,
    /// The head the cloud lists, if it has one.
    pub head_id: Option<String>,
    /// The head node type the launcher's calls can launch, or `None` for a provider
    /// that does not launch heads (it must refuse both launcher calls).
    pub head_type: Option<String>,
    /// How long a made instance may take to show in `list`.
    pub settle: Duration,
    /// Whether its cloud has a call that makes all of a launch or none, used for an
    /// all-or-nothing launch (`LaunchRequest::all_or_nothing`).
    pub all_or_nothing: bool,
    /// What it can be made to do.
    pub provoke: Box<dyn Provoke>,
}

/// Which checks ran and which were skipped (and why).
#[derive(Debug, Default)]
pub struct Report {
    /// Checks that ran and passed.
    pub passed: Vec<String>,
    /// Checks this subject cannot take part in, with the reason.
    pub skipped: Vec<(String, String)>,
}

impl Report {
    /// Prints what passed and what was skipped (and why), under `subject`'s name.
    pub fn print(&self, subject: &str) {
        println!("{subject}: passed {:?}", self.passed);
        for (check, why) in &self.skipped {
            println!("{subject}: skipped {check}: {why}");
        }
    }

    /// The names of the skipped checks.
    pub fn skipped_names(&self) -> Vec<&str> {
        self.skipped.iter().map(|s| s.0.as_str()).collect()
    }

    fn pass(&mut self, name: &str) {
        self.passed.push(name.to_string());
    }
    fn skip(&mut self, name: &str, why: impl Into<String>) {
        self.skipped.push((name.to_string(), why.into()));
    }
}

/// Every error kind of the contract, with a name for the report.
pub fn all_kinds(node_type: &str) -> Vec<ProviderErrorKind> {
    vec![
        ProviderErrorKind::Capacity {
            node_type: node_type.to_string(),
            zone: None,
        },
        ProviderErrorKind::Quota,
        ProviderErrorKind::Throttled,
        ProviderErrorKind::InvalidConfig,
        ProviderErrorKind::Auth,
        ProviderErrorKind::NotFound,
        ProviderErrorKind::Transient,
    ]
}

fn request(s: &Subject, id: &str, count: u64) -> LaunchRequest {
    LaunchRequest {
        request_id: id.to_string(),
        node_type: s.node_type.clone(),
        count,
        launch_config_hash: "conformance".to_string(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    }
}

async fn list(s: &Subject) -> Vec<CloudInstance> {
    match s.provider.list().await {
        Ok(l) => l,
        Err(e) => panic!("list failed: {e}"),
    }
}

async fn launch(s: &Subject, r: &LaunchRequest) -> LaunchOutcome {
    match s.provider.launch(r).await {
        Ok(o) => o,
        Err(e) => panic!("launch {} failed: {e}", r.request_id),
    }
}

fn workers(l: &[CloudInstance]) -> BTreeSet<String> {
    l.iter()
        .filter(|c| c.kind == NodeKind::Worker)
        .map(|c| c.cloud_instance_id.clone())
        .collect()
}

/// Waits until the workers listed, less `before`, number `n` (or the settle time is
/// over), and returns them.
async fn new_workers(s: &Subject, before: &BTreeSet<String>, n: usize) -> BTreeSet<String> {
    let t0 = Instant::now();
    loop {
        let now: BTreeSet<String> = workers(&list(s).await)
            .difference(before)
            .cloned()
            .collect();
        if now.len() >= n || t0.elapsed() > s.settle {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Terminates every worker and waits until none is listed.
async fn clean(s: &Subject) {
    let ids: Vec<String> = workers(&list(s).await).into_iter().collect();
    if !ids.is_empty()
        && let Err(e) = s.provider.terminate(&ids, "conformance-clean").await
    {
        panic!("terminate of every worker failed: {e}");
    }
    let t0 = Instant::now();
    while !workers(&list(s).await).is_empty() {
        assert!(
            t0.elapsed() < s.settle + Duration::from_secs(20),
            "workers still listed after terminate: {:?}",
            list(s).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs every check on `s`; panics naming the broken rule. Leaves no worker behind.
pub async fn run_all(s: &Subject) -> Report {
    let mut r = Report::default();
    clean(s).await;
    idempotent_launch(s, &mut r).await;
    list_is_complete(s, &mut r).await;
    terminate_of_a_gone_instance_succeeds(s, &mut r).await;
    the_head_is_never_a_worker(s, &mut r).await;
    the_head_is_tagged_up_to_date(s, &mut r).await;
    heads_only_through_the_launcher(s, &mut r).await;
    partial_fill_is_reported(s, &mut r).await;
    all_or_nothing_launch(s, &mut r).await;
    error_kinds(s, &mut r).await;
    clean(s).await;
    r
}

/// The same request id twice makes the instances once; what a launch reports it made is
/// what the cloud lists; every instance carries its node type (and the request id, where
/// the cloud can carry one).
async fn idempotent_launch(s: &Subject, r: &mut Report) {
    let before = workers(&list(s).await);
    let req = request(s, "conf-idem", 2);
    let first = launch(s, &req).await;
    assert!(first.shortfall.is_none(), "{:?}", first.shortfall);
    let second = launch(s, &req).await;
    let made = new_workers(s, &before, 2).await;
    // Let a late second set show, if the provider made one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let made_after = new_workers(s, &before, 3).await;
    assert_eq!(made.len(), 2, "first launch made {made:?}");
    assert_eq!(made_after, made, "the same request id made instances twice");
    for o in [&first, &second] {
        for c in &o.instances {
            assert!(
                made.contains(&c.cloud_instance_id),
                "launch reported {} which the cloud does not list",
                c.cloud_instance_id
            );
        }
    }
    let listed = list(s).await;
    for c in listed
        .iter()
        .filter(|c| made.contains(&c.cloud_instance_id))
    {
        assert_eq!(c.node_type, s.node_type, "{c:?}");
        assert_eq!(c.kind, NodeKind::Worker, "{c:?}");
        if let Some(id) = &c.request_id {
            assert_eq!(id, &req.request_id, "{c:?}");
        }
    }
    r.pass("idempotent_launch");
}

/// `list` returns every instance (across pages), never a part.
async fn list_is_complete(s: &Subject, r: &mut Report) {
    let before = workers(&list(s).await);
    let req = request(s, "conf-many", 7);
    launch(s, &req).await;
    let made = new_workers(s, &before, 7).await;
    assert_eq!(made.len(), 7, "7 launched, {} listed", made.len());
    for _ in 0..3 {
        assert_eq!(workers(&list(s).await).len(), before.len() + 7);
    }
    r.pass("list_is_complete");
}

/// Terminating an instance that is already gone, or never existed, succeeds.
async fn terminate_of_a_gone_instance_succeeds(s: &Subject, r: &mut Report) {
    let victim = workers(&list(s).await).into_iter().next();
    let Some(victim) = victim else {
        panic!("no worker to terminate");
    };
    let ids = vec![victim.clone()];
    if let Err(e) = s.provider.terminate(&ids, "conf-term").await {
        panic!("terminate failed: {e}");
    }
    let t0 = Instant::now();
    while workers(&list(s).await).contains(&victim) {
        assert!(
            t0.elapsed() < s.settle + Duration::from_secs(20),
            "{victim} still listed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for ids in [ids, vec!["conformance-never-existed".to_string()]] {
        if let Err(e) = s.provider.terminate(&ids, "conf-term-again").await {
            panic!("terminate of a gone instance {ids:?} failed: {e}");
        }
    }
    r.pass("terminate_of_a_gone_instance_succeeds");
}

/// The head is listed as a head, never as a worker, and a terminate naming it touches
/// nothing.
async fn the_head_is_never_a_worker(s: &Subject, r: &mut Report) {
    let listed = list(s).await;
    let heads: Vec<&CloudInstance> = listed.iter().filter(|c| c.is_head()).collect();
    let Some(head) = &s.head_id else {
        assert!(
            heads.is_empty(),
            "a head listed by a subject without one: {heads:?}"
        );
        r.skip("the_head_is_never_a_worker", "this provider lists no head");
        return;
    };
    assert_eq!(
        heads
            .iter()
            .map(|c| c.cloud_instance_id.as_str())
            .collect::<Vec<_>>(),
        [head.as_str()]
    );
    let e = s
        .provider
        .terminate(std::slice::from_ref(head), "conf-head")
        .await
        .expect_err("terminating the head must be refused");
    assert_eq!(e.kind, ProviderErrorKind::InvalidConfig, "{e}");
    assert!(list(s).await.iter().any(|c| &c.cloud_instance_id == head));
    r.pass("the_head_is_never_a_worker");
}

/// `mark_head_up_to_date` sets the head's `ray-node-status` to `up-to-date` and leaves its
/// other tags; asked for a worker, it is refused and the worker's tags stay. `tag_head`
/// (what `rayscale up` sets once it pushed a config) likewise, with its own tag.
async fn the_head_is_tagged_up_to_date(s: &Subject, r: &mut Report) {
    const NAME: &str = "the_head_is_tagged_up_to_date";
    let labels = |l: &[CloudInstance], id: &str| {
        l.iter()
            .find(|c| c.cloud_instance_id == id)
            .map(|c| c.labels.clone())
            .unwrap_or_else(|| panic!("{id} is not listed"))
    };
    let Some(head) = &s.head_id else {
        r.skip(NAME, "this provider lists no head");
        return;
    };
    let before = list(s).await;
    if !labels(&before, head).contains_key(tags::NODE_STATUS) {
        r.skip(NAME, "this cloud's instances carry no Ray status");
        return;
    }
    let worker = workers(&before)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no worker to try the tag on"));
    let e = s
        .provider
        .mark_head_up_to_date(&worker)
        .await
        .expect_err("tagging a worker as the head must be refused");
    assert_eq!(e.kind, ProviderErrorKind::NotFound, "{e}");
    if let Err(e) = s.provider.mark_head_up_to_date(head).await {
        panic!("tagging head {head} failed: {e}");
    }
    let t0 = Instant::now();
    let after = loop {
        let l = list(s).await;
        if labels(&l, head).get(tags::NODE_STATUS).map(String::as_str)
            == Some(tags::STATUS_UP_TO_DATE)
        {
            break l;
        }
        assert!(
            t0.elapsed() < s.settle + Duration::from_secs(20),
            "head {head} not listed up-to-date: {:?}",
            labels(&l, head)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (mut was, mut now) = (labels(&before, head), labels(&after, head));
    was.remove(tags::NODE_STATUS);
    now.remove(tags::NODE_STATUS);
    assert_eq!(was, now, "the head's other tags changed");
    assert_eq!(labels(&before, &worker), labels(&after, &worker));
    // A base32hex digest, as `rayscale up` sets it (a valid label on every cloud).
    let digest = "0123456789abcdefghijklmnopqrstuv0123456789abcdefghij".to_string();
    let change = [(tags::RAYSCALE_CONFIG, digest.clone())];
    let e = s
        .provider
        .tag_head(&worker, &change)
        .await
        .expect_err("tagging a worker as the head must be refused");
    assert_eq!(e.kind, ProviderErrorKind::NotFound, "{e}");
    if let Err(e) = s.provider.tag_head(head, &change).await {
        panic!("tagging head {head} with its config's digest failed: {e}");
    }
    let t0 = Instant::now();
    let tagged = loop {
        let l = list(s).await;
        if labels(&l, head).get(tags::RAYSCALE_CONFIG) == Some(&digest) {
            break l;
        }
        assert!(
            t0.elapsed() < s.settle + Duration::from_secs(20),
            "head {head} not listed with its config's digest: {:?}",
            labels(&l, head)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut last = labels(&tagged, head);
    last.remove(tags::RAYSCALE_CONFIG);
    let mut up = labels(&after, head);
    up.remove(tags::RAYSCALE_CONFIG);
    assert_eq!(
        last, up,
        "the head's other tags changed (its status included)"
    );
    assert_eq!(labels(&tagged, &worker), labels(&after, &worker));
    r.pass(NAME);
}

/// `launch_head` makes one head (of kind head, once per request id), `terminate` refuses
/// it, `terminate_head` removes it and succeeds again once it is gone; a provider that
/// launches no heads refuses both calls as invalid config.
async fn heads_only_through_the_launcher(s: &Subject, r: &mut Report) {
    let Some(head_type) = &s.head_type else {
        let req = request(s, "conf-no-head", 1);
        let e = s
            .provider
            .launch_head(&req)
            .await
            .err()
            .unwrap_or_else(|| panic!("launch_head must be refused by this provider"));
        assert_eq!(e.kind, ProviderErrorKind::InvalidConfig, "{e}");
        let e = s
            .provider
            .terminate_head("conf-no-head")
            .await
            .expect_err("terminate_head must be refused by this provider");
        assert_eq!(e.kind, ProviderErrorKind::InvalidConfig, "{e}");
        r.pass("heads_only_through_the_launcher (refused)");
        return;
    };
    let req = LaunchRequest {
        node_type: head_type.clone(),
        ..request(s, "conf-head-launch", 1)
    };
    let old: BTreeSet<String> = list(s)
        .await
        .iter()
        .filter(|c| c.is_head())
        .map(|c| c.cloud_instance_id.clone())
        .collect();
    let new_heads = || async {
        list(s)
            .await
            .into_iter()
            .filter(|c| c.is_head() && !old.contains(&c.cloud_instance_id))
            .collect::<Vec<_>>()
    };
    match s.provider.launch_head(&req).await {
        Ok(o) => assert!(o.shortfall.is_none(), "{:?}", o.shortfall),
        Err(e) => panic!("launch_head failed: {e}"),
    }
    let t0 = Instant::now();
    while new_heads().await.is_empty() && t0.elapsed() < s.settle {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Sent again: no second head.
    if let Err(e) = s.provider.launch_head(&req).await {
        panic!("launch_head sent again failed: {e}");
    }
    let made = new_heads().await;
    assert_eq!(made.len(), 1, "one head per request id: {made:?}");
    let h = made[0].clone();
    assert_eq!(h.kind, NodeKind::Head);
    assert_eq!(h.node_type, *head_type);
    let id = h.cloud_instance_id.clone();
    let e = s
        .provider
        .terminate(std::slice::from_ref(&id), "conf-head")
        .await
        .expect_err("terminate must refuse a head");
    assert_eq!(e.kind, ProviderErrorKind::InvalidConfig, "{e}");
    if let Err(e) = s.provider.terminate_head(&id).await {
        panic!("terminate_head {id} failed: {e}");
    }
    let t0 = Instant::now();
    while !new_heads().await.is_empty() {
        assert!(
            t0.elapsed() < s.settle + Duration::from_secs(20),
            "head {id} still listed after terminate_head"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Err(e) = s.provider.terminate_head(&id).await {
        panic!("terminate_head of a gone head must succeed: {e}");
    }
    r.pass("heads_only_through_the_launcher");
}

/// A launch the cloud fills only in part reports how many fell short, as a capacity error
/// of the node type.
async fn partial_fill_is_reported(s: &Subject, r: &mut Report) {
    if !s.provoke.limit_capacity(&s.node_type, 1).await {
        r.skip("partial_fill_is_reported", "capacity cannot be limited");
        return;
    }
    let before = workers(&list(s).await);
    let o = launch(s, &request(s, "conf-partial", 3)).await;
    s.provoke.unlimit_capacity(&s.node_type).await;
    let Some(short) = &o.shortfall else {
        panic!("no shortfall reported: {o:?}");
    };
    assert_eq!(
        short.op,
        ProviderOp::Launch {
            request_id: "conf-partial".into(),
            node_type: s.node_type.clone(),
            count: 2
        }
    );
    assert_eq!(short.capacity().map(|c| c.0), Some(s.node_type.as_str()));
    assert_eq!(new_workers(s, &before, 1).await.len(), 1);
    r.pass("partial_fill_is_reported");
}

/// An all-or-nothing launch (an atomic gang) the cloud cannot fill: where the provider
/// has an all-or-nothing call, nothing is made and the launch is the capacity error of
/// all of it; elsewhere it is a plain launch (a partial fill, reported), which the
/// reconciler releases whole if it does not come up.
async fn all_or_nothing_launch(s: &Subject, r: &mut Report) {
    if !s.provoke.limit_capacity(&s.node_type, 2).await {
        r.skip("all_or_nothing_launch", "capacity cannot be limited");
        return;
    }
    let before = workers(&list(s).await);
    let mut req = request(s, "conf-gang", 3);
    req.all_or_nothing = true;
    let got = s.provider.launch(&req).await;
    s.provoke.unlimit_capacity(&s.node_type).await;
    let op = |count: u64| ProviderOp::Launch {
        request_id: "conf-gang".into(),
        node_type: s.node_type.clone(),
        count,
    };
    if s.all_or_nothing {
        let e = got.expect_err("an all-or-nothing launch the cloud cannot fill fails");
        assert_eq!(e.op, op(3), "{e}");
        assert_eq!(e.capacity().map(|c| c.0), Some(s.node_type.as_str()), "{e}");
        // Nothing shows up later either.
        tokio::time::sleep(s.settle).await;
        let now = workers(&list(s).await);
        let new: Vec<&String> = now.difference(&before).collect();
        assert!(new.is_empty(), "an all-or-nothing launch made {new:?}");
    } else {
        let o = got.expect("a partial fill is a launch with a shortfall");
        let short = o.shortfall.as_ref().expect("the shortfall is reported");
        assert_eq!(short.op, op(1));
        assert_eq!(new_workers(s, &before, 2).await.len(), 2);
    }
    r.pass("all_or_nothing_launch");
}

/// Each error kind the provider can be made to produce comes back with that kind, a
/// one-line message, and the launch it belongs to.
async fn error_kinds(s: &Subject, r: &mut Report) {
    for (n, kind) in all_kinds(&s.node_type).into_iter().enumerate() {
        let name = format!("error_kind_{}", kind.name());
        let rid = format!("conf-err-{n}");
        let Some(req) = s.provoke.error(&kind, &rid).await else {
            r.skip(&name, "this provider cannot be made to produce it");
            continue;
        };
        let e: ProviderError = match s.provider.launch(&req).await {
            Err(e) => e,
            Ok(LaunchOutcome {
                shortfall: Some(e), ..
            }) => e,
            Ok(o) => panic!("{name}: the launch succeeded: {o:?}"),
        };
        // A capacity error names the type; the zone only where the cloud knows it.
        let same = match (&e.kind, &kind) {
            (
                ProviderErrorKind::Capacity { node_type: a, .. },
                ProviderErrorKind::Capacity { node_type: b, .. },
            ) => a == b,
            (a, b) => a == b,
        };
        assert!(same, "{name}: {e} is not {kind:?}");
        assert!(
            !e.message.is_empty() && !e.message.contains('\n'),
            "{name}: {e:?}"
        );
        assert!(
            matches!(&e.op, ProviderOp::Launch { request_id, .. } if *request_id == rid),
            "{name}: {:?}",
            e.op
        );
        r.pass(&name);
    }
}
