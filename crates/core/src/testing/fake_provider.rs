//! [`FakeProvider`]: a stateful, recording fake cloud behind [`CloudInstanceProvider`], for
//! the reconciler tests and the provider conformance suite (after Karpenter's fake cloud
//! provider). It keeps the contract in `crate::provider`, and can be told to behave like
//! the clouds do: limited capacity per type (partial fills and capacity errors), instances
//! that carry no request id (KubeRay pods), instances that boot slowly, a head, paged
//! listing, and one-shot errors of any kind.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::provider::{
    CloudInstance, CloudInstanceProvider, CloudInstanceState, LaunchOutcome, LaunchRequest,
    NodeKind, ProviderError, ProviderErrorKind, ProviderOp, cloud, tags,
};

/// One call the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeCall {
    /// `list`.
    List,
    /// `launch`.
    Launch(LaunchRequest),
    /// `terminate`.
    Terminate(Vec<String>),
    /// `launch_head`.
    LaunchHead(LaunchRequest),
    /// `terminate_head`.
    TerminateHead(String),
    /// `mark_head_up_to_date`.
    MarkHead(String),
}

#[derive(Debug, Default)]
struct State {
    /// Live instances, by id (ids are `fake-<n>`, never reused).
    instances: BTreeMap<String, CloudInstance>,
    next_id: u64,
    /// Request id -> instances ever made for it (the idempotency record).
    made: BTreeMap<String, u64>,
    /// Per node type, how many more instances the cloud has (absent = unlimited).
    capacity: BTreeMap<String, u64>,
    /// The one zone of every type without zones of its own (its instances' zone).
    zone: Option<String>,
    /// Types with zones of their own: (zone, how many more it has; `None` unlimited),
    /// in the order launches try them.
    zones: BTreeMap<String, Vec<(String, Option<u64>)>>,
    /// Errors the next calls return, in order (`op` says which call).
    faults: VecDeque<(FaultOn, ProviderErrorKind)>,
    /// Calls that never answer (the next call of each listed kind).
    hangs: Vec<FaultOn>,
    /// Errors for `poll_errors`.
    async_errors: Vec<ProviderError>,
    calls: Vec<FakeCall>,
    /// Instances carry their request id.
    tag_request_ids: bool,
    /// New instances start pending (until [`FakeProvider::boot_all`]).
    boot_pending: bool,
    /// New instances get a private address (`10.0.<id>`).
    private_ips: bool,
    page_size: usize,
    /// Pages served by `list` (to check that listing walks them all).
    pages_served: usize,
    /// Ids whose terminate the cloud refuses, every time, with this kind (the whole call,
    /// as a real cloud refuses a batch naming an instance it will not terminate).
    refused: BTreeMap<String, ProviderErrorKind>,
    /// Instances a terminate does not remove (a stuck termination).
    sticky: BTreeSet<String>,
}

/// Which call an injected fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOn {
    /// The next `list`.
    List,
    /// The next `launch`.
    Launch,
    /// The next `terminate`.
    Terminate,
    /// The next `mark_head_up_to_date`.
    MarkHead,
}

/// A fake cloud (see the module docs). Shared by reference; all state behind a mutex.
#[derive(Debug)]
pub struct FakeProvider {
    state: Mutex<State>,
}

impl Default for FakeProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeProvider {
    /// An empty cloud with unlimited capacity, request ids on instances, instances running
    /// at once, pages of 3.
    pub fn new() -> Self {
        FakeProvider {
            state: Mutex::new(State {
                tag_request_ids: true,
                page_size: 3,
                ..Default::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Instances carry no request id (as KubeRay pods and v1 providers).
    pub fn without_request_ids(self) -> Self {
        self.lock().tag_request_ids = false;
        self
    }

    /// `list` pages hold `n` instances (3 by default, so tests cross page boundaries).
    pub fn with_page_size(self, n: usize) -> Self {
        self.lock().page_size = n.max(1);
        self
    }

    /// New instances are pending until [`Self::boot_all`].
    pub fn booting_slowly(self) -> Self {
        self.lock().boot_pending = true;
        self
    }

    /// New instances are listed with a private address, as a cloud lists one once it
    /// runs (`rayscale up` waits for it).
    pub fn with_private_ips(self) -> Self {
        self.lock().private_ips = true;
        self
    }

    /// Adds a running head instance `head` of type `node_type`.
    pub fn with_head(self, node_type: &str) -> Self {
        self.lock().instances.insert(
            "head".into(),
            CloudInstance::worker("head", node_type, None).as_head(),
        );
        self
    }

    /// Only `n` more instances of `node_type` can be made; beyond that, launches fall short
    /// with a capacity error naming the type (and `zone`).
    pub fn set_capacity(&self, node_type: &str, n: Option<u64>, zone: Option<&str>) {
        let mut st = self.lock();
        match n {
            Some(n) => {
                st.capacity.insert(node_type.to_string(), n);
            }
            None => {
                st.capacity.remove(node_type);
            }
        }
        st.zone = zone.map(str::to_string);
    }

    /// Gives `node_type` zones of its own, each with its capacity (`None` unlimited):
    /// a launch fills them in order, skipping those the request avoids, and fails
    /// without a zone (the type is out) when none is left open.
    pub fn set_zones(&self, node_type: &str, zones: &[(&str, Option<u64>)]) {
        self.lock().zones.insert(
            node_type.to_string(),
            zones.iter().map(|(z, n)| (z.to_string(), *n)).collect(),
        );
    }

    /// The next call `on` fails with an error of `kind` (and makes nothing).
    pub fn fail_next(&self, on: FaultOn, kind: ProviderErrorKind) {
        self.lock().faults.push_back((on, kind));
    }

    /// Every `terminate` naming `cloud_instance_id` is refused, whole, with `kind`.
    pub fn refuse_terminate(&self, cloud_instance_id: &str, kind: ProviderErrorKind) {
        self.lock()
            .refused
            .insert(cloud_instance_id.to_string(), kind);
    }

    /// The instances each `terminate` call named, in order.
    pub fn terminate_calls(&self) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                FakeCall::Terminate(ids) => Some(ids),
                _ => None,
            })
            .collect()
    }

    /// Forgets every error queued by [`Self::fail_next`] not met yet.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The next call `on` never answers (a hung cloud API); a launch is recorded first.
    pub fn hang_next(&self, on: FaultOn) {
        self.lock().hangs.push(on);
    }

    async fn maybe_hang(&self, on: FaultOn) {
        let hang = {
            let mut st = self.lock();
            match st.hangs.iter().position(|h| *h == on) {
                Some(p) => {
                    st.hangs.remove(p);
                    true
                }
                None => false,
            }
        };
        if hang {
            std::future::pending::<()>().await;
        }
    }

    /// Pending instances become running.
    pub fn boot_all(&self) {
        for c in self.lock().instances.values_mut() {
            if c.state == CloudInstanceState::Pending {
                c.state = CloudInstanceState::Running;
            }
        }
    }

    /// An instance vanishes (preempted, deleted from outside).
    pub fn remove(&self, id: &str) -> bool {
        self.lock().instances.remove(id).is_some()
    }

    /// Instance `id` stays listed when terminated (a termination the cloud never ends).
    pub fn stick(&self, id: &str) {
        self.lock().sticky.insert(id.to_string());
    }

    /// An instance made from outside rayscale.
    pub fn insert(&self, instance: CloudInstance) {
        self.lock()
            .instances
            .insert(instance.cloud_instance_id.clone(), instance);
    }

    /// An error for the next `poll_errors`.
    pub fn push_async_error(&self, e: ProviderError) {
        self.lock().async_errors.push(e);
    }

    /// The live instances, head included.
    pub fn instances(&self) -> Vec<CloudInstance> {
        self.lock().instances.values().cloned().collect()
    }

    /// Every call received, in order.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.lock().calls.clone()
    }

    /// The launch calls received.
    pub fn launches(&self) -> Vec<LaunchRequest> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                FakeCall::Launch(l) => Some(l),
                _ => None,
            })
            .collect()
    }

    /// How many pages `list` has served so far.
    pub fn pages_served(&self) -> usize {
        self.lock().pages_served
    }

    /// A launch of `kind` (see [`CloudInstanceProvider::launch`]).
    async fn make(
        &self,
        request: &LaunchRequest,
        kind: NodeKind,
    ) -> Result<LaunchOutcome, ProviderError> {
        self.maybe_hang(FaultOn::Launch).await;
        let mut st = self.lock();
        let op = |count| ProviderOp::Launch {
            request_id: request.request_id.clone(),
            node_type: request.node_type.clone(),
            count,
        };
        if request.request_id.is_empty() {
            return Err(ProviderError::new(
                op(request.count),
                ProviderErrorKind::InvalidConfig,
                "fake: empty request id",
            ));
        }
        if let Some(fault) = Self::take_fault(&mut st, FaultOn::Launch) {
            return Err(ProviderError::new(
                op(request.count),
                fault,
                format!("fake: launch of {} failed", request.node_type),
            ));
        }
        let done = st.made.get(&request.request_id).copied().unwrap_or(0);
        let want = request.count.saturating_sub(done);
        // The zones this launch may use: a type's own, else the one zone.
        let places: Vec<(Option<String>, Option<u64>)> = match st.zones.get(&request.node_type) {
            Some(z) => z
                .iter()
                .filter(|(z, _)| !request.avoid_zones.contains(z))
                .map(|(z, n)| (Some(z.clone()), *n))
                .collect(),
            None => {
                let zone = st.zone.clone();
                if zone
                    .as_ref()
                    .is_some_and(|z| request.avoid_zones.contains(z))
                {
                    Vec::new()
                } else {
                    vec![(zone, st.capacity.get(&request.node_type).copied())]
                }
            }
        };
        if places.is_empty() {
            return Err(ProviderError::new(
                op(request.count),
                ProviderErrorKind::Capacity {
                    node_type: request.node_type.clone(),
                    zone: None,
                },
                format!("fake: every zone of {} is avoided", request.node_type),
            ));
        }
        let mut made = Vec::new();
        let mut n = 0;
        for (zone, room) in places {
            let k = room.map_or(want - n, |r| r.min(want - n));
            for _ in 0..k {
                let id = format!("fake-{}", st.next_id);
                st.next_id += 1;
                let mut c = CloudInstance::worker(
                    id.clone(),
                    request.node_type.clone(),
                    st.tag_request_ids.then_some(request.request_id.as_str()),
                );
                c.kind = kind;
                c.launch_config_hash = Some(request.launch_config_hash.clone());
                c.zone = zone.clone();
                if st.boot_pending {
                    c.state = CloudInstanceState::Pending;
                }
                if st.private_ips {
                    c.private_ip = Some(format!("10.0.{}.{}", st.next_id / 250, st.next_id % 250));
                }
                st.instances.insert(id, c.clone());
                made.push(c);
            }
            n += k;
            match st.zones.get_mut(&request.node_type) {
                Some(zs) => {
                    if let Some(r) = zs
                        .iter_mut()
                        .find(|(z, _)| Some(z) == zone.as_ref())
                        .and_then(|(_, r)| r.as_mut())
                    {
                        *r -= k;
                    }
                }
                None => {
                    if let Some(r) = st.capacity.get_mut(&request.node_type) {
                        *r -= k;
                    }
                }
            }
        }
        *st.made.entry(request.request_id.clone()).or_default() += n;
        let short = want - n;
        // Every open zone was tried: a shortfall is the type's (no zone named).
        let shortfall = (short > 0).then(|| {
            ProviderError::new(
                op(short),
                ProviderErrorKind::Capacity {
                    node_type: request.node_type.clone(),
                    zone: None,
                },
                format!(
                    "fake: no capacity for {} more of {}{}",
                    short,
                    request.node_type,
                    st.zone
                        .as_deref()
                        .map(|z| format!(" in {z}"))
                        .unwrap_or_default()
                ),
            )
        });
        // Instances that fell short were never made: the request may make them later.
        Ok(LaunchOutcome {
            instances: made,
            shortfall,
        })
    }

    fn take_fault(st: &mut State, on: FaultOn) -> Option<ProviderErrorKind> {
        let pos = st.faults.iter().position(|(o, _)| *o == on)?;
        st.faults.remove(pos).map(|(_, k)| k)
    }
}

#[async_trait::async_trait]
impl CloudInstanceProvider for FakeProvider {
    fn provider_type(&self) -> &str {
        "fake"
    }

    /// Walks the instances page by page (as a cloud API would make a client do).
    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        self.maybe_hang(FaultOn::List).await;
        let mut st = self.lock();
        st.calls.push(FakeCall::List);
        if let Some(kind) = Self::take_fault(&mut st, FaultOn::List) {
            return Err(ProviderError::new(
                ProviderOp::List,
                kind,
                "fake: list failed",
            ));
        }
        // Served in pages of `page_size` (counted), handed back whole.
        let out: Vec<CloudInstance> = st.instances.values().cloned().collect();
        st.pages_served += out.len().div_ceil(st.page_size.max(1));
        Ok(out)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.lock().calls.push(FakeCall::Launch(request.clone()));
        self.make(request, NodeKind::Worker).await
    }

    /// Heads are made as workers are (one per request id), of kind head.
    async fn launch_head(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.lock()
            .calls
            .push(FakeCall::LaunchHead(request.clone()));
        self.make(request, NodeKind::Head).await
    }

    async fn terminate_head(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
        let mut st = self.lock();
        st.calls
            .push(FakeCall::TerminateHead(cloud_instance_id.to_string()));
        if let Some(kind) = Self::take_fault(&mut st, FaultOn::Terminate) {
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: cloud_instance_id.to_string(),
                },
                kind,
                "fake: terminate failed",
            ));
        }
        if st
            .instances
            .get(cloud_instance_id)
            .is_some_and(|i| !i.is_head())
        {
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: cloud_instance_id.to_string(),
                },
                ProviderErrorKind::InvalidConfig,
                format!("fake: {cloud_instance_id} is not the head"),
            ));
        }
        st.instances.remove(cloud_instance_id);
        Ok(())
    }
    async fn terminate(
        &self,
        cloud_instance_ids: &[String],
        _request_id: &str,
    ) -> Result<(), ProviderError> {
        self.maybe_hang(FaultOn::Terminate).await;
        let mut st = self.lock();
        st.calls
            .push(FakeCall::Terminate(cloud_instance_ids.to_vec()));
        if let Some(id) = cloud_instance_ids
            .iter()
            .find(|id| st.instances.get(*id).is_some_and(CloudInstance::is_head))
        {
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: id.clone(),
                },
                ProviderErrorKind::InvalidConfig,
                format!("fake: {id} is the head and is never terminated"),
            ));
        }
        if let Some((id, kind)) = cloud_instance_ids
            .iter()
            .find_map(|id| st.refused.get(id).map(|k| (id.clone(), k.clone())))
        {
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: id.clone(),
                },
                kind,
                format!("fake: {id} may not be terminated"),
            ));
        }
        if let Some(kind) = Self::take_fault(&mut st, FaultOn::Terminate) {
            let id = cloud_instance_ids.first().cloned().unwrap_or_default();
            return Err(ProviderError::new(
                ProviderOp::Terminate {
                    cloud_instance_id: id,
                },
                kind,
                "fake: terminate failed",
            ));
        }
        for id in cloud_instance_ids {
            if !st.sticky.contains(id) {
                st.instances.remove(id);
            }
        }
        Ok(())
    }

    async fn poll_errors(&self) -> Vec<ProviderError> {
        std::mem::take(&mut self.lock().async_errors)
    }

    fn tags_heads(&self) -> bool {
        true
    }

    /// Sets the head's status label (anything but the running head is refused).
    async fn mark_head_up_to_date(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
        let mut st = self.lock();
        st.calls
            .push(FakeCall::MarkHead(cloud_instance_id.to_string()));
        if let Some(kind) = Self::take_fault(&mut st, FaultOn::MarkHead) {
            return Err(ProviderError::new(
                ProviderOp::Other,
                kind,
                format!("fake: tagging {cloud_instance_id} failed"),
            ));
        }
        match st.instances.get_mut(cloud_instance_id) {
            Some(i) if i.is_head() && i.is_running() => {
                i.labels
                    .insert(tags::NODE_STATUS.into(), tags::STATUS_UP_TO_DATE.into());
                Ok(())
            }
            _ => Err(cloud::refuse_mark(cloud_instance_id)),
        }
    }

    /// Sets the head's labels (anything but the running head is refused).
    async fn tag_head(
        &self,
        cloud_instance_id: &str,
        changes: &[(&str, String)],
    ) -> Result<(), ProviderError> {
        let mut st = self.lock();
        match st.instances.get_mut(cloud_instance_id) {
            Some(i) if i.is_head() && i.is_running() => {
                for (k, v) in changes {
                    i.labels.insert((*k).to_string(), v.clone());
                }
                Ok(())
            }
            _ => Err(cloud::refuse_mark(cloud_instance_id)),
        }
    }
}
