//! A fake Ray GCS on loopback gRPC, for tests and benchmarks that must cross the wire
//! (message sizes, encoding cost) but need a cluster larger than one machine can start:
//! Ray 2.60's `AutoscalerStateService`, `InternalKVGcsService` and
//! `NodeInfoGcsService.DrainNode`, as rayscale's `.proto` files declare them, served from
//! memory. The cluster resource state is whatever the test puts there; the KV keeps
//! values by namespace and key with Ray's put-if-absent rule; every call is counted.
//!
//! It runs on its own thread and tokio runtime ([`Serving`]), so a benchmark that times its
//! own thread does not count the server's work.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rayscale_gcs_client::client::MAX_MESSAGE_BYTES;
use rayscale_gcs_client::proto::ray::rpc as kvpb;
use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use crate::serving::Serving;

use kvpb::internal_kv_gcs_service_server::{InternalKvGcsService, InternalKvGcsServiceServer};
use kvpb::node_info_gcs_service_server::{NodeInfoGcsService, NodeInfoGcsServiceServer};
use pb::autoscaler_state_service_server::{AutoscalerStateService, AutoscalerStateServiceServer};

/// What the server has been asked, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// `InternalKVPut` calls.
    pub puts: u64,
    /// Bytes of keys and values in those puts.
    pub put_bytes: u64,
    /// `InternalKVDel` calls.
    pub dels: u64,
    /// `InternalKVGet`, `InternalKVMultiGet` and `InternalKVKeys` calls.
    pub reads: u64,
    /// `GetClusterResourceState` calls.
    pub state_reads: u64,
    /// `ReportAutoscalingState` calls.
    pub reports: u64,
    /// Idle drains (`AutoscalerStateService.DrainNode`).
    pub drains: u64,
    /// Nodes stopped (`NodeInfoGcsService.DrainNode`).
    pub stops: u64,
}

#[derive(Debug, Default)]
struct State {
    kv: BTreeMap<(Vec<u8>, Vec<u8>), Vec<u8>>,
    cluster: pb::ClusterResourceState,
    report: Option<pb::AutoscalingState>,
    counters: Counters,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone)]
struct Svc(Shared);

/// The GCS's status "OK".
fn ok() -> Option<kvpb::GcsStatus> {
    Some(kvpb::GcsStatus {
        code: 0,
        message: String::new(),
    })
}

#[tonic::async_trait]
impl AutoscalerStateService for Svc {
    async fn get_cluster_resource_state(
        &self,
        _r: Request<pb::GetClusterResourceStateRequest>,
    ) -> Result<Response<pb::GetClusterResourceStateReply>, Status> {
        let mut st = lock(&self.0);
        st.counters.state_reads += 1;
        Ok(Response::new(pb::GetClusterResourceStateReply {
            cluster_resource_state: Some(st.cluster.clone()),
        }))
    }

    async fn report_autoscaling_state(
        &self,
        r: Request<pb::ReportAutoscalingStateRequest>,
    ) -> Result<Response<pb::ReportAutoscalingStateReply>, Status> {
        let mut st = lock(&self.0);
        st.counters.reports += 1;
        let new = r.into_inner().autoscaling_state.unwrap_or_default();
        // The GCS keeps the newest version only (`gcs_autoscaler_state_manager.cc`).
        let held = st
            .report
            .as_ref()
            .map_or(-1, |s| s.autoscaler_state_version);
        if new.autoscaler_state_version > held {
            st.report = Some(new);
        }
        Ok(Response::new(pb::ReportAutoscalingStateReply {}))
    }

    async fn report_cluster_config(
        &self,
        _r: Request<pb::ReportClusterConfigRequest>,
    ) -> Result<Response<pb::ReportClusterConfigReply>, Status> {
        Ok(Response::new(pb::ReportClusterConfigReply {}))
    }

    async fn request_cluster_resource_constraint(
        &self,
        _r: Request<pb::RequestClusterResourceConstraintRequest>,
    ) -> Result<Response<pb::RequestClusterResourceConstraintReply>, Status> {
        Ok(Response::new(pb::RequestClusterResourceConstraintReply {}))
    }

    async fn get_cluster_status(
        &self,
        _r: Request<pb::GetClusterStatusRequest>,
    ) -> Result<Response<pb::GetClusterStatusReply>, Status> {
        let st = lock(&self.0);
        Ok(Response::new(pb::GetClusterStatusReply {
            autoscaling_state: st.report.clone(),
            cluster_resource_state: Some(st.cluster.clone()),
        }))
    }

    async fn drain_node(
        &self,
        r: Request<pb::DrainNodeRequest>,
    ) -> Result<Response<pb::DrainNodeReply>, Status> {
        let node = r.into_inner().node_id;
        let mut st = lock(&self.0);
        st.counters.drains += 1;
        let idle = st
            .cluster
            .node_states
            .iter()
            .any(|n| n.node_id == node && n.idle_duration_ms > 0);
        Ok(Response::new(pb::DrainNodeReply {
            is_accepted: idle,
            rejection_reason_message: if idle {
                String::new()
            } else {
                "The node is not idle".into()
            },
        }))
    }

    async fn resize_raylet_resource_instances(
        &self,
        _r: Request<pb::ResizeRayletResourceInstancesRequest>,
    ) -> Result<Response<pb::ResizeRayletResourceInstancesReply>, Status> {
        Err(Status::unimplemented("not served by the fake GCS"))
    }
}

#[tonic::async_trait]
impl InternalKvGcsService for Svc {
    async fn internal_kv_get(
        &self,
        r: Request<kvpb::InternalKvGetRequest>,
    ) -> Result<Response<kvpb::InternalKvGetReply>, Status> {
        let r = r.into_inner();
        let mut st = lock(&self.0);
        st.counters.reads += 1;
        Ok(Response::new(match st.kv.get(&(r.namespace, r.key)) {
            Some(v) => kvpb::InternalKvGetReply {
                status: ok(),
                value: v.clone(),
            },
            // Ray answers a missing key with status NotFound (17).
            None => kvpb::InternalKvGetReply {
                status: Some(kvpb::GcsStatus {
                    code: 17,
                    message: "Failed to find the key".into(),
                }),
                value: Vec::new(),
            },
        }))
    }

    async fn internal_kv_multi_get(
        &self,
        r: Request<kvpb::InternalKvMultiGetRequest>,
    ) -> Result<Response<kvpb::InternalKvMultiGetReply>, Status> {
        let r = r.into_inner();
        let mut st = lock(&self.0);
        st.counters.reads += 1;
        let results = r
            .keys
            .into_iter()
            .filter_map(|k| {
                let v = st.kv.get(&(r.namespace.clone(), k.clone()))?.clone();
                Some(kvpb::MapFieldEntry { key: k, value: v })
            })
            .collect();
        Ok(Response::new(kvpb::InternalKvMultiGetReply {
            status: ok(),
            results,
        }))
    }

    async fn internal_kv_put(
        &self,
        r: Request<kvpb::InternalKvPutRequest>,
    ) -> Result<Response<kvpb::InternalKvPutReply>, Status> {
        let r = r.into_inner();
        let mut st = lock(&self.0);
        st.counters.puts += 1;
        st.counters.put_bytes += (r.key.len() + r.value.len()) as u64;
        let k = (r.namespace, r.key);
        let added = !st.kv.contains_key(&k);
        if added || r.overwrite {
            st.kv.insert(k, r.value);
        }
        Ok(Response::new(kvpb::InternalKvPutReply {
            status: ok(),
            added,
        }))
    }

    async fn internal_kv_del(
        &self,
        r: Request<kvpb::InternalKvDelRequest>,
    ) -> Result<Response<kvpb::InternalKvDelReply>, Status> {
        let r = r.into_inner();
        let mut st = lock(&self.0);
        st.counters.dels += 1;
        let doomed: Vec<_> = st
            .kv
            .keys()
            .filter(|(ns, k)| {
                *ns == r.namespace && (*k == r.key || (r.del_by_prefix && k.starts_with(&r.key)))
            })
            .cloned()
            .collect();
        for k in &doomed {
            st.kv.remove(k);
        }
        Ok(Response::new(kvpb::InternalKvDelReply {
            status: ok(),
            deleted_num: i32::try_from(doomed.len()).unwrap_or(i32::MAX),
        }))
    }

    async fn internal_kv_exists(
        &self,
        r: Request<kvpb::InternalKvExistsRequest>,
    ) -> Result<Response<kvpb::InternalKvExistsReply>, Status> {
        let r = r.into_inner();
        let st = lock(&self.0);
        Ok(Response::new(kvpb::InternalKvExistsReply {
            status: ok(),
            exists: st.kv.contains_key(&(r.namespace, r.key)),
        }))
    }

    async fn internal_kv_keys(
        &self,
        r: Request<kvpb::InternalKvKeysRequest>,
    ) -> Result<Response<kvpb::InternalKvKeysReply>, Status> {
        let r = r.into_inner();
        let mut st = lock(&self.0);
        st.counters.reads += 1;
        let results = st
            .kv
            .keys()
            .filter(|(ns, k)| *ns == r.namespace && k.starts_with(&r.prefix))
            .map(|(_, k)| k.clone())
            .collect();
        Ok(Response::new(kvpb::InternalKvKeysReply {
            status: ok(),
            results,
        }))
    }

    async fn get_internal_config(
        &self,
        _r: Request<kvpb::GetInternalConfigRequest>,
    ) -> Result<Response<kvpb::GetInternalConfigReply>, Status> {
        Ok(Response::new(kvpb::GetInternalConfigReply {
            status: ok(),
            config: "{}".into(),
        }))
    }
}

#[tonic::async_trait]
impl NodeInfoGcsService for Svc {
    async fn drain_node(
        &self,
        r: Request<kvpb::DrainNodeRequest>,
    ) -> Result<Response<kvpb::DrainNodeReply>, Status> {
        let ids: Vec<Vec<u8>> = r
            .into_inner()
            .drain_node_data
            .into_iter()
            .map(|d| d.node_id)
            .collect();
        let mut st = lock(&self.0);
        st.counters.stops += ids.len() as u64;
        Ok(Response::new(kvpb::DrainNodeReply {
            status: ok(),
            drain_node_status: ids
                .into_iter()
                .map(|node_id| kvpb::DrainNodeStatus { node_id })
                .collect(),
        }))
    }
}

/// A fake GCS serving on a loopback port (see the module docs). Stops when dropped.
pub struct FakeGcsServer {
    addr: SocketAddr,
    state: Shared,
    _serving: Serving,
}

impl FakeGcsServer {
    /// Starts a server on a free port of 127.0.0.1, with an empty KV and an empty
    /// cluster state. Its message limits are Ray's (`max_grpc_message_size`, 500 MiB).
    pub fn start() -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let state = Shared::default();
        let svc = Svc(state.clone());
        let serving = Serving::spawn(listener, move |incoming| async move {
            let _ = Server::builder()
                .add_service(
                    AutoscalerStateServiceServer::new(svc.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES),
                )
                .add_service(
                    InternalKvGcsServiceServer::new(svc.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES),
                )
                .add_service(
                    NodeInfoGcsServiceServer::new(svc)
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES),
                )
                .serve_with_incoming(incoming)
                .await;
        })?;
        Ok(FakeGcsServer {
            addr,
            state,
            _serving: serving,
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Changes the cluster resource state (and bumps its version).
    pub fn with_cluster<R>(&self, f: impl FnOnce(&mut pb::ClusterResourceState) -> R) -> R {
        let mut st = lock(&self.state);
        let r = f(&mut st.cluster);
        st.cluster.cluster_resource_state_version += 1;
        r
    }

    /// Sets the value of `key` in `namespace`.
    pub fn kv_set(&self, namespace: &str, key: &str, value: &[u8]) {
        lock(&self.state).kv.insert(
            (namespace.as_bytes().to_vec(), key.as_bytes().to_vec()),
            value.to_vec(),
        );
    }

    /// The number of keys in `namespace` starting with `prefix`.
    pub fn kv_count(&self, namespace: &str, prefix: &str) -> usize {
        lock(&self.state)
            .kv
            .keys()
            .filter(|(ns, k)| ns == namespace.as_bytes() && k.starts_with(prefix.as_bytes()))
            .count()
    }

    /// The calls so far.
    pub fn counters(&self) -> Counters {
        lock(&self.state).counters
    }

    /// The autoscaling state the GCS holds (the newest reported).
    pub fn report(&self) -> Option<pb::AutoscalingState> {
        lock(&self.state).report.clone()
    }
}

/// A 28-byte node id whose first bytes are `n`.
pub fn node_id(n: u32) -> Vec<u8> {
    let mut id = vec![0u8; 28];
    id[..4].copy_from_slice(&n.to_be_bytes());
    id[27] = 1;
    id
}

/// A running Ray node as the GCS reports it.
pub fn running_node(
    n: u32,
    instance_id: &str,
    node_type: &str,
    total: &[(&str, f64)],
    available: &[(&str, f64)],
    idle_ms: i64,
) -> pb::NodeState {
    let map = |r: &[(&str, f64)]| r.iter().map(|(k, v)| ((*k).to_string(), *v)).collect();
    pb::NodeState {
        node_id: node_id(n),
        instance_id: instance_id.to_string(),
        ray_node_type_name: node_type.to_string(),
        available_resources: map(available),
        total_resources: map(total),
        status: pb::NodeStatus::Running as i32,
        idle_duration_ms: idle_ms,
        node_ip_address: format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255),
        instance_type_name: node_type.to_string(),
        ..Default::default()
    }
}

/// `count` copies of a request for `bundle`.
pub fn demand(bundle: &[(&str, f64)], count: i64) -> pb::ResourceRequestByCount {
    pb::ResourceRequestByCount {
        request: Some(pb::ResourceRequest {
            resources_bundle: bundle.iter().map(|(k, v)| ((*k).to_string(), *v)).collect(),
            ..Default::default()
        }),
        count,
    }
}
