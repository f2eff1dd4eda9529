//! [`FakeGcs`]: Ray's GCS in memory behind [`Gcs`], with a small Ray data plane, for the
//! driver's virtual-time tests and benchmark.
//!
//! It keeps a KV store (atomic put-if-absent, as the GCS's), the cluster resource state
//! (a head, the workers that joined, pending demand) and the autoscaling reports it was
//! sent. [`FakeGcs::join_running`] plays the nodes' side: each running worker of a
//! [`FakeProvider`] gets a Ray node with its type's resources, as if Ray started on it; a
//! node whose instance is gone dies. Drains follow Ray: an idle-termination drain of a busy
//! node is rejected, a stop always stops. Several connections ([`FakeGcs::connect`]) share
//! one GCS, and each can be cut off, to play a process that loses the GCS.
//!
//! Faults for the fault suite: per-connection latency of every call or of puts alone (a
//! put or delete in flight lands after its latency even when its caller gave up, as a
//! request on the wire does), replies lost after the call took effect, and node rows that
//! cannot be read (NaN amounts: they come back as unreadable nodes).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::FakeProvider;
use crate::config::ClusterConfig;
use crate::driver::{DrainReply, Gcs, GcsState};
use crate::error::CoreError;
use crate::model::{
    ClusterConstraint, ClusterResourceState, GangRequest, NodeState, NodeStatus,
    ResourceRequestByCount,
};
use crate::reconciler::AutoscalingReport;
use crate::scheduler::request::HEAD_MARKER;

#[derive(Debug, Default)]
struct State {
    kv: BTreeMap<(String, String), Vec<u8>>,
    version: i64,
    nodes: Vec<NodeState>,
    busy: BTreeSet<String>,
    /// Nodes (by cloud instance) that reject an idle drain although they look idle.
    refusing: BTreeSet<String>,
    demand: Vec<ResourceRequestByCount>,
    /// Pending placement groups.
    gangs: Vec<GangRequest>,
    /// `request_resources` constraints.
    constraints: Vec<ClusterConstraint>,
    next_node: u32,
    reports: Vec<(i64, AutoscalingReport)>,
    held_version: i64,
    idle_drains: Vec<String>,
    /// Drains with a deadline: node id (hex), deadline (ms).
    deadline_drains: Vec<(String, i64)>,
    stops: Vec<String>,
    /// Nodes (by cloud instance) that were busy when a stop (not a drain) ended them.
    busy_stops: Vec<String>,
    /// Puts of keys starting with this fail.
    failing_puts: Option<String>,
    /// Nodes (by cloud instance) whose rows cannot be read, and why.
    unreadable: BTreeMap<String, String>,
}

/// One connection's faults.
#[derive(Debug, Default)]
struct Link {
    /// Before every answer.
    latency: Mutex<std::time::Duration>,
    /// Before a put or a delete lands (besides `latency`).
    put_latency: Mutex<std::time::Duration>,
    /// Replies to lose (the call took effect).
    lose: std::sync::atomic::AtomicU32,
}

/// A GCS in memory (see the module docs). Cloning shares the GCS and the connection.
#[derive(Debug, Clone)]
pub struct FakeGcs {
    state: Arc<Mutex<State>>,
    cut: Arc<AtomicBool>,
    link: Arc<Link>,
}

impl Default for FakeGcs {
    fn default() -> Self {
        Self::new()
    }
}

fn node_id(n: u32) -> Vec<u8> {
    let mut id = vec![0u8; 28];
    id[..4].copy_from_slice(&n.to_be_bytes());
    id
}

impl FakeGcs {
    /// A GCS with a running head (type `head`, no resources), autoscaler v2 on.
    pub fn new() -> Self {
        let head = NodeState {
            node_id: node_id(0),
            instance_id: "head".into(),
            ray_node_type_name: "head".into(),
            total_resources: super::res(&[(HEAD_MARKER, 1.0)]),
            available_resources: super::res(&[(HEAD_MARKER, 1.0)]),
            status: Some(NodeStatus::Running),
            ..Default::default()
        };
        FakeGcs {
            state: Arc::new(Mutex::new(State {
                nodes: vec![head],
                next_node: 1,
                version: 1,
                ..Default::default()
            })),
            cut: Arc::new(AtomicBool::new(false)),
            link: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Another connection to the same GCS (with its own cut switch).
    pub fn connect(&self) -> FakeGcs {
        FakeGcs {
            state: self.state.clone(),
            cut: Arc::new(AtomicBool::new(false)),
            link: Arc::default(),
        }
    }

    /// Every call on this connection answers `d` late.
    pub fn set_latency(&self, d: std::time::Duration) {
        *self
            .link
            .latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = d;
    }

    /// Every put and delete on this connection lands `d` late (and answers then).
    pub fn set_put_latency(&self, d: std::time::Duration) {
        *self
            .link
            .put_latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = d;
    }

    /// The next `n` replies on this connection are lost (their calls took effect).
    pub fn lose_replies(&self, n: u32) {
        self.link.lose.store(n, Ordering::SeqCst);
    }

    /// The row of the node on `cloud_instance_id` cannot be read (`Some(reason)`), or can.
    pub fn set_unreadable(&self, cloud_instance_id: &str, reason: Option<&str>) {
        let mut st = self.lock();
        match reason {
            Some(r) => st
                .unreadable
                .insert(cloud_instance_id.to_string(), r.to_string()),
            None => st.unreadable.remove(cloud_instance_id),
        };
        st.version += 1;
    }

    /// Sets the autoscaling report version the GCS holds (another autoscaler's, or
    /// garbage).
    pub fn set_held_version(&self, v: i64) {
        self.lock().held_version = v;
    }

    fn latency(&self) -> std::time::Duration {
        *self
            .link
            .latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits out this connection's latency (no timer at zero: plain executors work).
    async fn delay(&self) {
        let d = self.latency();
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    /// Fails when the reply is to be lost.
    fn reply(&self, call: &str) -> Result<(), CoreError> {
        let lost = self
            .link
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lost {
            return Err(CoreError::gcs(call, "fake: reply lost"));
        }
        Ok(())
    }

    /// Runs a write after this connection's latencies: on a task of its own when there is
    /// any, so that it lands even if the caller stops waiting.
    async fn write<T: Send + 'static>(
        &self,
        call: &str,
        f: impl FnOnce(&FakeGcs) -> Result<T, CoreError> + Send + 'static,
    ) -> Result<T, CoreError> {
        let put = *self
            .link
            .put_latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let d = self.latency() + put;
        let r = if d.is_zero() {
            f(self)
        } else {
            let this = self.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = tx.send(f(&this));
            });
            rx.await
                .unwrap_or_else(|_| Err(CoreError::gcs(call, "fake: write task gone")))
        };
        self.reply(call)?;
        r
    }

    /// Cuts this connection off (every call fails) or restores it.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }

    fn check(&self, call: &str) -> Result<(), CoreError> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(CoreError::gcs(call, "fake: connection cut"));
        }
        Ok(())
    }

    /// Sets the pending demand.
    pub fn set_demand(&self, demand: Vec<ResourceRequestByCount>) {
        let mut st = self.lock();
        st.demand = demand;
        st.version += 1;
    }

    /// Sets the pending placement groups.
    pub fn set_gangs(&self, gangs: Vec<GangRequest>) {
        let mut st = self.lock();
        st.gangs = gangs;
        st.version += 1;
    }

    /// Sets the `request_resources` constraints (Ray holds at most one).
    pub fn set_constraints(&self, constraints: Vec<ClusterConstraint>) {
        let mut st = self.lock();
        st.constraints = constraints;
        st.version += 1;
    }

    /// Marks the node on `cloud_instance_id` busy (nothing available) or idle.
    pub fn set_busy(&self, cloud_instance_id: &str, busy: bool) {
        let mut st = self.lock();
        if busy {
            st.busy.insert(cloud_instance_id.to_string());
        } else {
            st.busy.remove(cloud_instance_id);
        }
        st.version += 1;
    }

    /// The node on `cloud_instance_id` rejects idle drains (it got work just as the
    /// drain came, as a raylet does).
    pub fn refuse_drains(&self, cloud_instance_id: &str) {
        self.lock().refusing.insert(cloud_instance_id.to_string());
    }

    /// Every node accepts idle drains again (see [`Self::refuse_drains`]).
    pub fn accept_drains(&self) {
        self.lock().refusing.clear();
    }

    /// The cloud instances whose node was stopped (not drained) while it was busy.
    pub fn busy_stops(&self) -> Vec<String> {
        self.lock().busy_stops.clone()
    }

    /// Sets every live worker's idle time (busy ones stay at 0).
    pub fn set_idle_ms(&self, ms: i64) {
        let mut st = self.lock();
        let busy = st.busy.clone();
        for n in st.nodes.iter_mut().skip(1) {
            n.idle_duration_ms = if busy.contains(&n.instance_id) { 0 } else { ms };
        }
        st.version += 1;
    }

    /// Sets the head's idle time (a real head reports itself IDLE with its idle time
    /// when nothing runs on it).
    pub fn set_head_idle_ms(&self, ms: i64) {
        let mut st = self.lock();
        if let Some(h) = st.nodes.first_mut() {
            h.idle_duration_ms = ms;
        }
        st.version += 1;
    }

    /// Plays the nodes' side: every running worker of `cloud` without a live node gets
    /// one (its type's resources from `config`); a node whose instance is gone dies.
    /// It looks at the cloud's instances as they are, not through `list` (whose injected
    /// faults are the autoscaler's to meet: a failed list is no instance gone).
    pub async fn join_running(&self, cloud: &FakeProvider, config: &ClusterConfig) {
        let instances = cloud.instances();
        let mut st = self.lock();
        let listed: BTreeSet<String> = instances
            .iter()
            .map(|c| c.cloud_instance_id.clone())
            .collect();
        let mut changed = false;
        for n in st.nodes.iter_mut().skip(1) {
            if n.status != Some(NodeStatus::Dead) && !listed.contains(&n.instance_id) {
                n.status = Some(NodeStatus::Dead);
                changed = true;
            }
        }
        for c in instances.iter().filter(|c| c.is_running() && !c.is_head()) {
            let has_node = st.nodes.iter().any(|n| {
                n.instance_id == c.cloud_instance_id && n.status != Some(NodeStatus::Dead)
            });
            let ever = st
                .nodes
                .iter()
                .any(|n| n.instance_id == c.cloud_instance_id);
            if has_node || ever {
                continue;
            }
            let Some(t) = config.node_type(&c.node_type) else {
                continue;
            };
            let id = st.next_node;
            st.next_node += 1;
            st.nodes.push(NodeState {
                node_id: node_id(id),
                instance_id: c.cloud_instance_id.clone(),
                ray_node_type_name: c.node_type.clone(),
                total_resources: t.resources.clone(),
                available_resources: t.resources.clone(),
                status: Some(NodeStatus::Running),
                ..Default::default()
            });
            changed = true;
        }
        if changed {
            st.version += 1;
        }
    }

    /// Live worker nodes.
    pub fn live_workers(&self) -> usize {
        self.lock()
            .nodes
            .iter()
            .skip(1)
            .filter(|n| n.status != Some(NodeStatus::Dead))
            .count()
    }

    /// Reports received, with their versions.
    pub fn reports(&self) -> Vec<(i64, AutoscalingReport)> {
        self.lock().reports.clone()
    }

    /// Node ids (hex) drained as idle, and stopped.
    pub fn stops(&self) -> (Vec<String>, Vec<String>) {
        let st = self.lock();
        (st.idle_drains.clone(), st.stops.clone())
    }

    /// Drains with a deadline: node id (hex), deadline (ms since the epoch).
    pub fn deadline_drains(&self) -> Vec<(String, i64)> {
        self.lock().deadline_drains.clone()
    }

    /// The keys in `namespace` starting with `prefix`.
    pub fn keys(&self, namespace: &str, prefix: &str) -> Vec<String> {
        self.lock()
            .kv
            .keys()
            .filter(|(n, k)| n == namespace && k.starts_with(prefix))
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Puts a raw value (to plant what an older version stored, or garbage).
    pub fn put_raw(&self, namespace: &str, key: &str, value: &[u8]) {
        self.lock()
            .kv
            .insert((namespace.into(), key.into()), value.to_vec());
    }

    /// Puts of keys starting with `prefix` fail (every connection), or none.
    pub fn fail_puts(&self, prefix: Option<&str>) {
        self.lock().failing_puts = prefix.map(str::to_string);
    }

    /// Forgets every KV key (a GCS restarted without persistence).
    pub fn clear_kv(&self) {
        self.lock().kv.clear();
    }

    fn find_node<'a>(st: &'a mut State, hex: &str) -> Option<&'a mut NodeState> {
        st.nodes.iter_mut().find(|n| n.node_id_hex() == hex)
    }
}

#[async_trait]
impl Gcs for FakeGcs {
    async fn cluster_resource_state(&self) -> Result<GcsState, CoreError> {
        self.check("GetClusterResourceState")?;
        self.delay().await;
        self.reply("GetClusterResourceState")?;
        let st = self.lock();
        let mut unreadable_nodes = Vec::new();
        let nodes = st
            .nodes
            .iter()
            .filter_map(|n| {
                let mut n = n.clone();
                if st.busy.contains(&n.instance_id) {
                    n.available_resources = Default::default();
                    n.idle_duration_ms = 0;
                }
                if let Some(reason) = st.unreadable.get(&n.instance_id)
                    && n.status != Some(NodeStatus::Dead)
                {
                    unreadable_nodes.push(crate::model::UnreadableNode {
                        node_id: n.node_id,
                        instance_id: n.instance_id,
                        ray_node_type_name: n.ray_node_type_name,
                        status: n.status,
                        reason: reason.clone(),
                    });
                    return None;
                }
                Some(n)
            })
            .collect();
        Ok(GcsState {
            version: st.version,
            state: ClusterResourceState {
                node_states: nodes,
                unreadable_nodes,
                pending_resource_requests: st.demand.clone(),
                pending_gang_resource_requests: st.gangs.clone(),
                cluster_resource_constraints: st.constraints.clone(),
            },
            skipped: Vec::new(),
        })
    }

    async fn report_autoscaling_state(
        &self,
        report: &AutoscalingReport,
        _seen_state_version: i64,
        version: i64,
    ) -> Result<(), CoreError> {
        self.check("ReportAutoscalingState")?;
        self.delay().await;
        self.reply("ReportAutoscalingState")?;
        let mut st = self.lock();
        // As the GCS: a report not newer than the held one is dropped.
        if version > st.held_version {
            st.held_version = version;
            st.reports.push((version, report.clone()));
        }
        Ok(())
    }

    async fn held_report_version(&self) -> Result<i64, CoreError> {
        self.check("GetClusterStatus")?;
        self.delay().await;
        self.reply("GetClusterStatus")?;
        Ok(self.lock().held_version)
    }

    async fn autoscaler_v2_enabled(&self) -> Result<bool, CoreError> {
        self.check("InternalKVGet")?;
        self.delay().await;
        Ok(true)
    }

    async fn drain_idle_node(
        &self,
        node_id_hex: &str,
        _reason: &str,
    ) -> Result<DrainReply, CoreError> {
        self.check("DrainNode")?;
        self.delay().await;
        let mut st = self.lock();
        st.idle_drains.push(node_id_hex.to_string());
        let mut busy = st.busy.clone();
        busy.extend(st.refusing.iter().cloned());
        let reply = match Self::find_node(&mut st, node_id_hex) {
            Some(n) if busy.contains(&n.instance_id) => DrainReply {
                accepted: false,
                rejection: "fake: the node is running tasks".into(),
            },
            Some(n) => {
                n.status = Some(NodeStatus::Dead);
                DrainReply {
                    accepted: true,
                    rejection: String::new(),
                }
            }
            None => DrainReply {
                accepted: true,
                rejection: String::new(),
            },
        };
        st.version += 1;
        Ok(reply)
    }

    async fn drain_node_until(
        &self,
        node_id_hex: &str,
        _reason: &str,
        deadline_ms: i64,
    ) -> Result<DrainReply, CoreError> {
        self.check("DrainNode")?;
        self.delay().await;
        let mut st = self.lock();
        st.deadline_drains
            .push((node_id_hex.to_string(), deadline_ms));
        // As Ray: never refused; the node is DRAINING and keeps its work.
        if let Some(n) = Self::find_node(&mut st, node_id_hex) {
            n.status = Some(NodeStatus::Draining);
        }
        st.version += 1;
        Ok(DrainReply {
            accepted: true,
            rejection: String::new(),
        })
    }

    async fn stop_node(&self, node_id_hex: &str) -> Result<bool, CoreError> {
        self.check("NodeInfoGcsService.DrainNode")?;
        self.delay().await;
        let mut st = self.lock();
        st.stops.push(node_id_hex.to_string());
        let busy = st.busy.clone();
        let mut stopped_busy = None;
        let found = match Self::find_node(&mut st, node_id_hex) {
            Some(n) => {
                if n.status != Some(NodeStatus::Dead) && busy.contains(&n.instance_id) {
                    stopped_busy = Some(n.instance_id.clone());
                }
                n.status = Some(NodeStatus::Dead);
                true
            }
            None => false,
        };
        st.busy_stops.extend(stopped_busy);
        st.version += 1;
        Ok(found)
    }

    async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, CoreError> {
        self.check("InternalKVGet")?;
        self.delay().await;
        self.reply("InternalKVGet")?;
        Ok(self
            .lock()
            .kv
            .get(&(namespace.to_string(), key.to_string()))
            .cloned())
    }

    async fn kv_multi_get(
        &self,
        namespace: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<u8>)>, CoreError> {
        self.check("InternalKVMultiGet")?;
        self.delay().await;
        self.reply("InternalKVMultiGet")?;
        let st = self.lock();
        Ok(keys
            .iter()
            .filter_map(|k| {
                st.kv
                    .get(&(namespace.to_string(), k.clone()))
                    .map(|v| (k.clone(), v.clone()))
            })
            .collect())
    }

    async fn kv_put(
        &self,
        namespace: &str,
        key: &str,
        value: &[u8],
        overwrite: bool,
    ) -> Result<bool, CoreError> {
        self.check("InternalKVPut")?;
        let (namespace, key, value) = (namespace.to_string(), key.to_string(), value.to_vec());
        self.write("InternalKVPut", move |g| {
            let mut st = g.lock();
            if st
                .failing_puts
                .as_deref()
                .is_some_and(|p| key.starts_with(p))
            {
                return Err(CoreError::gcs("InternalKVPut", "fake: put refused"));
            }
            let k = (namespace, key);
            let exists = st.kv.contains_key(&k);
            if exists && !overwrite {
                return Ok(false);
            }
            st.kv.insert(k, value);
            Ok(!exists)
        })
        .await
    }

    async fn kv_del(&self, namespace: &str, key: &str) -> Result<(), CoreError> {
        self.check("InternalKVDel")?;
        let k = (namespace.to_string(), key.to_string());
        self.write("InternalKVDel", move |g| {
            g.lock().kv.remove(&k);
            Ok(())
        })
        .await
    }

    async fn kv_keys(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, CoreError> {
        self.check("InternalKVKeys")?;
        self.delay().await;
        self.reply("InternalKVKeys")?;
        Ok(self.keys(namespace, prefix))
    }
}
