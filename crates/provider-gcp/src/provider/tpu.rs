//! Cloud TPU nodes through the TPU API (v2alpha1, as Ray's GCP provider): list (every
//! page, the cluster's nodes by label, filtered here as Ray filters them: the API takes
//! no filter), launch (`nodes.create` with the node's name as `nodeId` and a `requestId`
//! from the request and index, so a replay is the same call; a name taken by this
//! request's node is success), delete (gone is success). Each call's long-running
//! operation is awaited up to the launch bound, then left to `poll_errors`.

use serde_json::Value;

use super::*;
use crate::rest::Rest;
use crate::tpu::{self, API_VERSION};

/// The environment variable whose base URL replaces the TPU API's endpoint.
pub const TPU_ENDPOINT_ENV: &str = "RAYSCALE_GCP_TPU_ENDPOINT";

/// Google's TPU API endpoint.
pub const TPU_ENDPOINT: &str = "https://tpu.googleapis.com";

/// TPU nodes per page of `nodes.list`.
const TPU_PAGE_SIZE: u32 = 100;

/// Pages of one `nodes.list` at most (a server that always answers a next page token
/// would otherwise be followed for ever).
const TPU_MAX_PAGES: u32 = 1000;

/// How a TPU node call's operation ended: `Ok(true)` done, `Ok(false)` still running
/// (its name kept for `poll_errors`), or its failure.
struct OpEnd {
    name: Option<String>,
    result: Result<bool, GcpError>,
}

impl GcpProvider {
    /// The TPU API client: from the environment when the config has TPU types (see
    /// [`GcpProvider::with_tpu_api`]).
    pub(super) fn tpu_api(&self) -> Result<&Rest, GcpError> {
        self.tpu.as_ref().ok_or_else(|| {
            GcpError::config(
                "available_node_types",
                "a TPU node type needs the TPU API client, which this provider was built without",
            )
        })
    }

    /// Every TPU node of the cluster in the zone (any state), across every page. A node
    /// of the cluster without a name or a state is an error, never taken as gone.
    pub(super) async fn tpu_nodes(&self, cfg: &GcpConfig) -> Result<Vec<Value>, GcpError> {
        const CALL: &str = "nodes.list";
        let api = self.tpu_api()?;
        let cluster = mapping::label_value(&cfg.cluster_name);
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..TPU_MAX_PAGES {
            let mut path = format!(
                "{API_VERSION}/{}/nodes?pageSize={TPU_PAGE_SIZE}",
                tpu::parent(cfg)
            );
            if let Some(t) = &token {
                path.push_str("&pageToken=");
                path.push_str(&url_escape(t));
            }
            self.calls.tpu_list.fetch_add(1, Ordering::Relaxed);
            let page = api.get(CALL, &path).await?;
            // Nodes of a location the API could not reach are missing, not gone.
            if let Some(u) = page.get("unreachable").and_then(Value::as_array)
                && !u.is_empty()
            {
                return Err(GcpError::transient(
                    CALL,
                    None,
                    format!(
                        "locations not reached, the list is not whole: {}",
                        clip(&page["unreachable"])
                    ),
                ));
            }
            let nodes = match page.get("nodes") {
                None => &Vec::new(),
                Some(Value::Array(a)) => a,
                Some(other) => {
                    return Err(GcpError::transient(
                        CALL,
                        None,
                        format!("nodes is not a list: {}", clip(other)),
                    ));
                }
            };
            for n in nodes {
                let ours = n
                    .pointer(&format!("/labels/{}", tags::CLUSTER_NAME))
                    .and_then(Value::as_str)
                    == Some(cluster.as_str());
                if !ours {
                    continue;
                }
                if n.get("name").and_then(Value::as_str).is_none()
                    || n.get("state").and_then(Value::as_str).is_none()
                {
                    return Err(GcpError::transient(
                        CALL,
                        None,
                        format!("a node of the cluster without a name or state: {}", clip(n)),
                    ));
                }
                out.push(n.clone());
            }
            match page.get("nextPageToken").and_then(Value::as_str) {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => return Ok(out),
            }
        }
        Err(GcpError::transient(
            CALL,
            None,
            format!("more than {TPU_MAX_PAGES} pages"),
        ))
    }

    /// The cluster's live TPU nodes as core sees them.
    pub(super) async fn tpu_list(&self, state: &State) -> Result<Vec<CloudInstance>, GcpError> {
        if !state.has_tpus() && self.tpu.is_none() {
            return Ok(Vec::new());
        }
        let cfg = &state.cfg;
        Ok(self
            .tpu_nodes(cfg)
            .await?
            .iter()
            .filter_map(|n| tpu::cloud_instance(n, &cfg.cluster_name, &state.types))
            .collect())
    }

    /// Polls a TPU operation until it is done or `deadline` passes.
    async fn tpu_wait(
        &self,
        call: &'static str,
        op: Value,
        node_type: &str,
        deadline: Instant,
    ) -> OpEnd {
        let name = op.get("name").and_then(Value::as_str).map(str::to_string);
        let mut op = op;
        let mut delay = self.polling.initial;
        loop {
            if let Some(end) = tpu_op_end(call, &op, node_type) {
                return OpEnd {
                    name,
                    result: end.map(|()| true),
                };
            }
            let Some(n) = &name else {
                // Accepted, with nothing to poll: the list tells the rest.
                return OpEnd {
                    name,
                    result: Ok(false),
                };
            };
            if Instant::now() + delay > deadline {
                return OpEnd {
                    name,
                    result: Ok(false),
                };
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(self.polling.maximum);
            match self.tpu_get_op(n).await {
                Ok(o) => op = o,
                Err(e) => {
                    tracing::debug!("polling {call} ({n}): {e}");
                    return OpEnd {
                        name,
                        result: Ok(false),
                    };
                }
            }
        }
    }

    /// `operations.get` of the TPU operation `name` (`projects/.../operations/...`).
    pub(super) async fn tpu_get_op(&self, name: &str) -> Result<Value, GcpError> {
        self.calls.get_operation.fetch_add(1, Ordering::Relaxed);
        self.tpu_api()?
            .get("operations.get", &format!("{API_VERSION}/{name}"))
            .await
    }

    /// Launches `req` as TPU nodes: this request's nodes counted first, then one
    /// `nodes.create` per missing name, all awaited together up to the launch bound.
    pub(super) async fn tpu_launch(
        &self,
        state: &State,
        req: &LaunchRequest,
        kind: NodeKind,
        deadline: Instant,
    ) -> Result<LaunchOutcome, ProviderError> {
        let cfg = &state.cfg;
        let t = req.node_type.as_str();
        let launch_op = ProviderOp::Launch {
            request_id: req.request_id.clone(),
            node_type: req.node_type.clone(),
            count: req.count,
        };
        if req.all_or_nothing && req.count > 1 {
            tracing::warn!(
                "the TPU API has no all-or-nothing create: the gang of {} x {t} is made node by \
                 node (and released whole if it does not come up)",
                req.count
            );
        }
        let request_label = mapping::label_value(&req.request_id);
        let nodes = self
            .tpu_nodes(cfg)
            .await
            .map_err(|e| e.into_provider(launch_op.clone()))?;
        let ours: Vec<&Value> = nodes
            .iter()
            .filter(|n| {
                let label = |k: &str| n.pointer(&format!("/labels/{k}")).and_then(Value::as_str);
                label(tags::LAUNCH_REQUEST) == Some(request_label.as_str())
                    && label(tags::USER_NODE_TYPE) == Some(mapping::label_value(t).as_str())
            })
            .collect();
        let taken: BTreeSet<String> = ours
            .iter()
            .filter_map(|n| {
                n.get("name")?
                    .as_str()?
                    .rsplit('/')
                    .next()
                    .map(str::to_string)
            })
            .collect();
        let mut made: Vec<CloudInstance> = ours
            .iter()
            .filter_map(|n| tpu::cloud_instance(n, &cfg.cluster_name, &state.types))
            .collect();
        let remaining = req.count.saturating_sub(made.len() as u64);
        let names = free_names(&taken, remaining, |i| {
            tpu::node_name(&cfg.cluster_name, kind, &req.request_id, i)
        });
        let boot = state.boot.get(t).map(String::as_str);
        let futs: Vec<_> = names
            .iter()
            .map(|(i, n)| self.tpu_create(state, t, kind, n, &req.request_id, *i, boot, deadline))
            .collect();
        let results: Vec<Result<CloudInstance, GcpError>> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut failures = Vec::new();
        for r in results {
            match r {
                Ok(c) => made.push(c),
                Err(e) => failures.push(e),
            }
        }
        cloud::launch_outcome(req, made, failures, GcpError::kind, GcpError::into_provider)
    }

    /// One `nodes.create` of `name` (sent again while throttled or lost, with the same
    /// `requestId`), awaited until `deadline`.
    #[allow(clippy::too_many_arguments)]
    async fn tpu_create(
        &self,
        state: &State,
        node_type: &str,
        kind: NodeKind,
        name: &str,
        request_id: &str,
        index: u64,
        boot_script: Option<&str>,
        deadline: Instant,
    ) -> Result<CloudInstance, GcpError> {
        const CALL: &str = "nodes.create";
        let cfg = &state.cfg;
        let spec = InsertSpec {
            node_type,
            kind,
            name,
            request_id: Some(request_id),
            boot_script,
        };
        let body = tpu::node_json(cfg, &spec)?;
        let token = idempotency_token(request_id, index);
        let path = format!(
            "{API_VERSION}/{}/nodes?nodeId={name}&requestId={token}",
            tpu::parent(cfg)
        );
        let mut made = super::launch::pending_instance(cfg, name, node_type, kind, request_id);
        made.zone = Some(cfg.zone.clone());
        let api = self.tpu_api()?;
        let mut delay = Duration::from_millis(250);
        let mut tries = 1;
        let op = loop {
            self.calls.tpu_create.fetch_add(1, Ordering::Relaxed);
            match api.post(CALL, &path, &body).await {
                Ok(op) => break op,
                Err(e)
                    if matches!(
                        e.kind(),
                        ProviderErrorKind::Throttled | ProviderErrorKind::Transient
                    ) && tries < THROTTLE_TRIES =>
                {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    tries += 1;
                }
                // The name is taken: this request's node (a replay), or another's.
                Err(e) if crate::errors::classify(e.code(), e.status()) == Class::AlreadyExists => {
                    let node = api
                        .get(
                            "nodes.get",
                            &format!("{API_VERSION}/{}/nodes/{name}", tpu::parent(cfg)),
                        )
                        .await?;
                    let label = node
                        .pointer(&format!("/labels/{}", tags::LAUNCH_REQUEST))
                        .and_then(Value::as_str);
                    if label == Some(mapping::label_value(request_id).as_str()) {
                        return Ok(made);
                    }
                    return Err(super::launch::name_taken(
                        CALL,
                        &e,
                        &format!("the name {name}"),
                    ));
                }
                Err(e) => return Err(retag(e, node_type)),
            }
        };
        let end = self.tpu_wait(CALL, op, node_type, deadline).await;
        match end.result {
            Ok(true) => Ok(made),
            Ok(false) => {
                if let Some(op) = end.name {
                    self.pending().push(PendingOp {
                        name: op,
                        call: CALL,
                        op: ProviderOp::Launch {
                            request_id: request_id.to_string(),
                            node_type: node_type.to_string(),
                            count: 1,
                        },
                        node_type: node_type.to_string(),
                        checks: 0,
                        tpu: true,
                    });
                }
                Ok(made)
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes the TPU nodes `ids` of the cluster (workers, or with `head` the head
    /// alone); a name not of the cluster, or gone, is left alone.
    pub(super) async fn tpu_terminate(
        &self,
        ids: &[String],
        head: bool,
    ) -> Result<(), ProviderError> {
        let Some(first) = ids.first() else {
            return Ok(());
        };
        let deadline = Instant::now() + self.polling.launch_wait;
        let state = self.state();
        let cfg = &state.cfg;
        let op = |id: &str| ProviderOp::Terminate {
            cloud_instance_id: id.to_string(),
        };
        let nodes = self
            .tpu_nodes(cfg)
            .await
            .map_err(|e| e.into_provider(op(first)))?;
        let want = if head {
            NodeKind::Head
        } else {
            NodeKind::Worker
        };
        let mut known = Vec::new();
        for n in &nodes {
            let Some(id) = n
                .get("name")
                .and_then(Value::as_str)
                .and_then(|s| s.rsplit('/').next())
            else {
                continue;
            };
            if !ids.iter().any(|i| i == id) {
                continue;
            }
            let kind = n
                .pointer(&format!("/labels/{}", tags::NODE_KIND))
                .and_then(Value::as_str);
            if kind != Some(want.tag_value()) {
                return Err(cloud::refuse_terminate(id, head));
            }
            known.push(id.to_string());
        }
        let futs: Vec<_> = known
            .iter()
            .map(|id| self.tpu_delete(cfg, id, deadline))
            .collect();
        let results: Vec<Option<(String, GcpError)>> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        match results.into_iter().flatten().next() {
            None => Ok(()),
            Some((id, e)) => Err(e.into_provider(op(&id))),
        }
    }

    /// `nodes.delete` of `id`, awaited until `deadline`; `None` when done, gone or left
    /// to `poll_errors`.
    async fn tpu_delete(
        &self,
        cfg: &GcpConfig,
        id: &str,
        deadline: Instant,
    ) -> Option<(String, GcpError)> {
        const CALL: &str = "nodes.delete";
        let api = match self.tpu_api() {
            Ok(a) => a,
            Err(e) => return Some((id.to_string(), e)),
        };
        self.calls.delete.fetch_add(1, Ordering::Relaxed);
        let path = format!("{API_VERSION}/{}/nodes/{id}", tpu::parent(cfg));
        let op = match api.delete(CALL, &path).await {
            Ok(op) => op,
            Err(e) if e.kind() == ProviderErrorKind::NotFound => return None,
            Err(e) => return Some((id.to_string(), e)),
        };
        let end = self.tpu_wait(CALL, op, "", deadline).await;
        match end.result {
            Ok(true) => None,
            Err(e) if e.kind() == ProviderErrorKind::NotFound => None,
            Err(e) => Some((id.to_string(), e)),
            Ok(false) => {
                if let Some(name) = end.name {
                    self.pending().push(PendingOp {
                        name,
                        call: CALL,
                        op: ProviderOp::Terminate {
                            cloud_instance_id: id.to_string(),
                        },
                        node_type: String::new(),
                        checks: 0,
                        tpu: true,
                    });
                }
                None
            }
        }
    }
}

/// A call error with its capacity kind naming `node_type`.
fn retag(e: GcpError, node_type: &str) -> GcpError {
    match e {
        GcpError::Call {
            call,
            code,
            status,
            message,
            ..
        } => {
            let kind = crate::errors::classify(code.as_deref(), status).kind(node_type);
            GcpError::Call {
                call,
                code,
                status,
                kind,
                message,
            }
        }
        other => other,
    }
}

/// How a TPU operation (`google.longrunning.Operation`) ended: `None` while not `done`,
/// `Some(Ok)` done without an error, else its error classified by its
/// `google.rpc.Code` (8 RESOURCE_EXHAUSTED is a stockout, or a quota when it says so).
pub(super) fn tpu_op_end(
    call: &'static str,
    op: &Value,
    node_type: &str,
) -> Option<Result<(), GcpError>> {
    if op.get("done").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let Some(err) = op.get("error") else {
        return Some(Ok(()));
    };
    let code = err.get("code").and_then(Value::as_i64);
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map(crate::rest::one_line)
        .unwrap_or_else(|| clip(err));
    let (name, class) = match code {
        Some(8) if message.to_ascii_lowercase().contains("quota") => {
            ("RESOURCE_EXHAUSTED", Class::Quota)
        }
        Some(8) => ("RESOURCE_EXHAUSTED", Class::Capacity),
        Some(7) => ("PERMISSION_DENIED", Class::Auth),
        Some(16) => ("UNAUTHENTICATED", Class::Auth),
        Some(3) => ("INVALID_ARGUMENT", Class::Invalid),
        Some(9) => ("FAILED_PRECONDITION", Class::Invalid),
        Some(11) => ("OUT_OF_RANGE", Class::Invalid),
        Some(5) => ("NOT_FOUND", Class::NotFound),
        Some(6) => ("ALREADY_EXISTS", Class::AlreadyExists),
        _ => ("UNKNOWN", Class::Transient),
    };
    Some(Err(GcpError::Call {
        call,
        code: Some(name.to_string()),
        status: None,
        kind: class.kind(node_type),
        message: format!("{name}: {message}"),
    }))
}

/// A query value with the characters a page token may hold escaped.
fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A value, clipped for an error message.
fn clip(v: &Value) -> String {
    crate::rest::clip(&v.to_string())
}
