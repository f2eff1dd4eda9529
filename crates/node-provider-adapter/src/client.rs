//! [`PythonBridge`]: Ray's own Python v1 provider in a child process.
//!
//! The child runs `python/rayscale_bridge.py` (embedded in this crate) with `python -u
//! -c`. The protocol is line-delimited JSON on the child's stdin and stdout:
//!
//! 1. rayscale writes one line `{"provider_type": ..., "cluster_config": {...}}`; the
//!    child makes the provider with Ray's `_get_node_provider` and answers `{"ready":
//!    true, "pid": N}` or `{"fatal": "one line"}`;
//! 2. then every request `{"id": N, "method": "...", "params": {...}}` is answered, in
//!    any order (the child runs calls on a thread pool), by `{"id": N, "result": ...}`
//!    or `{"id": N, "error": {"type": "KeyError", "category": null, "message": "..."}}`.
//!
//! Anything Ray or the provider prints goes to the child's stderr (the child moves its
//! stdout there and keeps the protocol on a private descriptor); every stderr line is
//! forwarded to the logs. A call that does not answer in time fails, and the child is
//! killed (a provider that hangs one call is not trusted with the next) unless the call is
//! an install, whose own deadline is its own. A child that exits fails the calls in flight;
//! the next call starts a new one.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{Notify, oneshot};

use crate::config::BridgeConfig;
use crate::errors::AdapterError;
use crate::lock;
use crate::v1::{NodeInfo, NodeProvider, Tags};

/// The child's program.
pub const SHIM: &str = include_str!("../python/rayscale_bridge.py");

type Reply = Result<Value, AdapterError>;

struct Session {
    pid: u32,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Mutex<HashMap<u64, (String, oneshot::Sender<Reply>)>>,
    exited: AtomicBool,
    kill: Notify,
}

impl Session {
    fn fail_all(&self, status: &str) {
        let pending: Vec<(u64, (String, oneshot::Sender<Reply>))> =
            lock(&self.pending).drain().collect();
        for (_, (method, tx)) in pending {
            let _ = tx.send(Err(AdapterError::Crashed {
                method,
                status: status.to_string(),
            }));
        }
    }
}

/// Ray's Python v1 provider of `provider.type`, in a child process (see the module docs).
pub struct PythonBridge {
    cfg: BridgeConfig,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    next_id: AtomicU64,
    starts: AtomicU64,
}

/// The longest stderr line of the child said whole (bytes).
const MAX_STDERR_LINE: usize = 8192;

/// Kills the process group the child leads (the child and what it started), if any.
fn kill_group(pid: u32) {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
}

fn cut(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > 200 {
        format!("{}...", line.chars().take(200).collect::<String>())
    } else {
        line.to_string()
    }
}

impl PythonBridge {
    /// A bridge; the child starts with the first call.
    pub fn new(cfg: BridgeConfig) -> Self {
        PythonBridge {
            cfg,
            session: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            starts: AtomicU64::new(0),
        }
    }

    /// Starts the child now (to fail early on a wrong interpreter or provider).
    pub async fn start(&self) -> Result<u32, AdapterError> {
        Ok(self.session().await?.pid)
    }

    /// How many children were started so far.
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// The running child's pid, if one runs.
    pub async fn child_pid(&self) -> Option<u32> {
        let s = self.session.lock().await;
        s.as_ref()
            .filter(|s| !s.exited.load(Ordering::Acquire))
            .map(|s| s.pid)
    }

    async fn session(&self) -> Result<Arc<Session>, AdapterError> {
        let mut slot = self.session.lock().await;
        if let Some(s) = slot.as_ref()
            && !s.exited.load(Ordering::Acquire)
        {
            return Ok(s.clone());
        }
        let s = self.spawn().await?;
        *slot = Some(s.clone());
        Ok(s)
    }

    async fn spawn(&self) -> Result<Arc<Session>, AdapterError> {
        let python = self.cfg.python.display().to_string();
        let mut cmd = Command::new(&self.cfg.python);
        cmd.arg("-u")
            .arg("-c")
            .arg(SHIM)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that killing it ends what it started (Ray's
            // node updater's SSH and rsync children) too.
            .process_group(0)
            .kill_on_drop(true);
        for (k, v) in &self.cfg.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|source| AdapterError::Spawn {
            python: python.clone(),
            source,
        })?;
        self.starts.fetch_add(1, Ordering::Relaxed);
        let pid = child.id().unwrap_or(0);
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(AdapterError::Spawn {
                python,
                source: std::io::Error::other("no pipes to the child"),
            });
        };
        let provider_type = self.cfg.provider_type.clone();
        let tag = provider_type.clone();
        tokio::spawn(async move {
            // Bytes, not text: a non-UTF-8 line (a remote command's output) must not stop
            // the forwarding (the child's prints would then fail on a closed pipe).
            // Lines are read in bounded pieces: a line past MAX_STDERR_LINE bytes is said
            // cut, and its rest skipped (memory stays bounded whatever the child prints).
            let mut err = BufReader::new(stderr);
            let mut buf = Vec::new();
            let mut in_long_line = false;
            loop {
                buf.clear();
                let mut piece = (&mut err).take(MAX_STDERR_LINE as u64);
                match piece.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let complete = buf.last() == Some(&b'\n');
                if in_long_line {
                    in_long_line = !complete;
                    continue;
                }
                if !complete && buf.len() >= MAX_STDERR_LINE {
                    in_long_line = true;
                    buf.extend_from_slice(" [line cut]".as_bytes());
                }
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end();
                if line.contains("ERROR") || line.contains("Traceback") || line.contains("WARNING")
                {
                    tracing::warn!(target: "rayscale::bridge", "{tag}[{pid}]: {line}");
                } else {
                    tracing::info!(target: "rayscale::bridge", "{tag}[{pid}]: {line}");
                }
            }
        });
        let init = json!({
            "provider_type": provider_type,
            "cluster_config": self.cfg.cluster_config,
        });
        let load_err = |message: String| AdapterError::Load {
            provider_type: provider_type.clone(),
            message,
        };
        let mut line = init.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| load_err(format!("cannot write to the child: {e}")))?;
        let mut out = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(self.cfg.start_timeout, out.next_line()).await;
        let first = match first {
            Err(_) => {
                kill_group(pid);
                let _ = child.start_kill();
                return Err(load_err(format!(
                    "no answer within {:?} (is Ray installed for {python}?)",
                    self.cfg.start_timeout
                )));
            }
            Ok(Err(e)) => return Err(load_err(format!("cannot read the child: {e}"))),
            Ok(Ok(None)) => {
                let status = child
                    .wait()
                    .await
                    .map(|s| s.to_string())
                    .unwrap_or_else(|e| e.to_string());
                return Err(load_err(format!(
                    "the child exited ({status}) before it was ready (is Ray installed for {python}?)"
                )));
            }
            Ok(Ok(Some(l))) => l,
        };
        match serde_json::from_str::<Value>(&first) {
            Ok(v) if v.get("ready") == Some(&Value::Bool(true)) => {}
            Ok(v) if v.get("fatal").is_some() => {
                let _ = child.start_kill();
                let msg = v["fatal"].as_str().unwrap_or("").to_string();
                return Err(load_err(cut(&msg)));
            }
            _ => {
                let _ = child.start_kill();
                return Err(load_err(format!("unexpected first line {:?}", cut(&first))));
            }
        }
        tracing::info!("python bridge for provider {provider_type} started (pid {pid})");
        let session = Arc::new(Session {
            pid,
            stdin: tokio::sync::Mutex::new(stdin),
            pending: Mutex::new(HashMap::new()),
            exited: AtomicBool::new(false),
            kill: Notify::new(),
        });
        let s = session.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    line = out.next_line() => match line {
                        Ok(Some(l)) => dispatch(&s, &l),
                        Ok(None) | Err(_) => break,
                    },
                    _ = s.kill.notified() => {
                        kill_group(pid);
                        let _ = child.start_kill();
                    }
                }
            }
            let status = match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
                Ok(Ok(st)) => st.to_string(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => {
                    kill_group(pid);
                    let _ = child.start_kill();
                    "closed its output".to_string()
                }
            };
            // Whatever it left running in its group (an SSH session) goes with it.
            kill_group(pid);
            s.exited.store(true, Ordering::Release);
            tracing::warn!("python bridge (pid {}) exited: {status}", s.pid);
            s.fail_all(&status);
        });
        Ok(session)
    }

    /// Calls `method` with `params` under `timeout`; `kill_on_timeout` restarts a child
    /// that does not answer.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        kill_on_timeout: bool,
    ) -> Result<Value, AdapterError> {
        let s = self.session().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&s.pending).insert(id, (method.to_string(), tx));
        let crashed = || AdapterError::Crashed {
            method: method.to_string(),
            status: "exited".into(),
        };
        if s.exited.load(Ordering::Acquire) {
            return Err(crashed());
        }
        let mut line = json!({"id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        let written = {
            let mut stdin = s.stdin.lock().await;
            match stdin.write_all(line.as_bytes()).await {
                Ok(()) => stdin.flush().await,
                Err(e) => Err(e),
            }
        };
        if let Err(source) = written {
            self.forget(&s, id);
            return Err(AdapterError::Io {
                method: method.to_string(),
                source,
            });
        }
        // The deadline is kept by a watchdog of its own, not by this caller: a caller that
        // gives up first (the loop's shorter deadlines) must not leave a hung child alive.
        let watched = s.clone();
        let name = method.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let entry = lock(&watched.pending).remove(&id);
            let Some((_, tx)) = entry else {
                return; // answered
            };
            if kill_on_timeout && !watched.exited.swap(true, Ordering::AcqRel) {
                // The next call starts a new child at once.
                tracing::warn!(
                    "python bridge (pid {}): {name} did not answer within {timeout:?}: \
                     restarting the bridge",
                    watched.pid
                );
                watched.kill.notify_one();
            }
            let _ = tx.send(Err(AdapterError::Timeout {
                method: name,
                timeout,
            }));
        });
        rx.await.unwrap_or_else(|_| Err(crashed()))
    }

    fn forget(&self, s: &Session, id: u64) {
        lock(&s.pending).remove(&id);
    }

    async fn quick(&self, method: &str, params: Value) -> Result<Value, AdapterError> {
        self.call(method, params, self.cfg.call_timeout, true).await
    }
}

/// Routes one line of the child's output to its call.
fn dispatch(s: &Session, line: &str) {
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(_) => {
            tracing::warn!(
                "python bridge (pid {}): not a protocol line: {}",
                s.pid,
                cut(line)
            );
            return;
        }
    };
    let Some(id) = v.get("id").and_then(Value::as_u64) else {
        tracing::warn!(
            "python bridge (pid {}): a line without id: {}",
            s.pid,
            cut(line)
        );
        return;
    };
    let entry = lock(&s.pending).remove(&id);
    let Some((method, tx)) = entry else {
        return; // its caller gave up (timeout)
    };
    let reply = if let Some(e) = v.get("error") {
        let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
        Err(AdapterError::Raised {
            method,
            exc_type: text("type").unwrap_or_else(|| "Exception".into()),
            category: text("category"),
            message: cut(&text("message").unwrap_or_default()),
        })
    } else if let Some(r) = v.get("result") {
        Ok(r.clone())
    } else {
        Err(AdapterError::Protocol {
            method,
            line: cut(line),
        })
    };
    let _ = tx.send(reply);
}

fn garbage(method: &str, v: &Value) -> AdapterError {
    AdapterError::Protocol {
        method: method.to_string(),
        line: cut(&v.to_string()),
    }
}

fn strings(method: &str, v: Value) -> Result<Vec<String>, AdapterError> {
    match v {
        Value::Array(a) => a
            .into_iter()
            .map(|x| match x {
                Value::String(s) => Ok(s),
                other => Err(garbage(method, &other)),
            })
            .collect(),
        other => Err(garbage(method, &other)),
    }
}

fn tags_of(method: &str, v: &Value) -> Result<Tags, AdapterError> {
    let Some(o) = v.as_object() else {
        return Err(garbage(method, v));
    };
    o.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            other => Ok((k.clone(), other.to_string())),
        })
        .collect()
}

fn opt_string(method: &str, v: Value) -> Result<Option<String>, AdapterError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(garbage(method, &other)),
    }
}

#[async_trait::async_trait]
impl NodeProvider for PythonBridge {
    fn provider_type(&self) -> &str {
        &self.cfg.provider_type
    }

    async fn non_terminated_nodes(&self, tag_filters: &Tags) -> Result<Vec<String>, AdapterError> {
        let m = "non_terminated_nodes";
        strings(m, self.quick(m, json!({"tag_filters": tag_filters})).await?)
    }

    async fn create_node(
        &self,
        node_config: &Value,
        tags: &Tags,
        count: u64,
    ) -> Result<Option<Vec<String>>, AdapterError> {
        self.create_node_with_resources_and_labels(
            node_config,
            tags,
            count,
            &BTreeMap::new(),
            &BTreeMap::new(),
        )
        .await
    }

    async fn create_node_with_resources_and_labels(
        &self,
        node_config: &Value,
        tags: &Tags,
        count: u64,
        resources: &BTreeMap<String, f64>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Option<Vec<String>>, AdapterError> {
        let m = "create_node_with_resources_and_labels";
        let params = json!({
            "node_config": node_config,
            "tags": tags,
            "count": count,
            "resources": resources,
            "labels": labels,
        });
        match self.call(m, params, self.cfg.launch_timeout, true).await? {
            Value::Null => Ok(None),
            v => strings(m, v).map(Some),
        }
    }

    async fn terminate_node(&self, node_id: &str) -> Result<(), AdapterError> {
        self.terminate_nodes(&[node_id.to_string()]).await
    }

    async fn terminate_nodes(&self, node_ids: &[String]) -> Result<(), AdapterError> {
        self.quick("terminate_nodes", json!({"node_ids": node_ids}))
            .await
            .map(|_| ())
    }

    async fn node_tags(&self, node_id: &str) -> Result<Tags, AdapterError> {
        let m = "node_tags";
        tags_of(m, &self.quick(m, json!({"node_id": node_id})).await?)
    }

    async fn set_node_tags(&self, node_id: &str, tags: &Tags) -> Result<(), AdapterError> {
        self.quick("set_node_tags", json!({"node_id": node_id, "tags": tags}))
            .await
            .map(|_| ())
    }

    async fn is_running(&self, node_id: &str) -> Result<bool, AdapterError> {
        let m = "is_running";
        let v = self.quick(m, json!({"node_id": node_id})).await?;
        v.as_bool().ok_or_else(|| garbage(m, &v))
    }

    async fn is_terminated(&self, node_id: &str) -> Result<bool, AdapterError> {
        let m = "is_terminated";
        let v = self.quick(m, json!({"node_id": node_id})).await?;
        v.as_bool().ok_or_else(|| garbage(m, &v))
    }

    async fn internal_ip(&self, node_id: &str) -> Result<Option<String>, AdapterError> {
        let m = "internal_ip";
        opt_string(m, self.quick(m, json!({"node_id": node_id})).await?)
    }

    async fn external_ip(&self, node_id: &str) -> Result<Option<String>, AdapterError> {
        let m = "external_ip";
        opt_string(m, self.quick(m, json!({"node_id": node_id})).await?)
    }

    async fn describe(&self, tag_filters: &Tags) -> Result<Vec<NodeInfo>, AdapterError> {
        let m = "describe";
        let v = self.quick(m, json!({"tag_filters": tag_filters})).await?;
        let Value::Array(nodes) = v else {
            return Err(garbage(m, &v));
        };
        nodes
            .into_iter()
            .map(|n| {
                let id = n
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| garbage(m, &n))?;
                Ok(NodeInfo {
                    id: id.to_string(),
                    tags: tags_of(m, n.get("tags").unwrap_or(&Value::Null))?,
                    running: n.get("running").and_then(Value::as_bool).unwrap_or(false),
                    internal_ip: n
                        .get("internal_ip")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                })
            })
            .collect()
    }

    async fn install_ray(
        &self,
        node_id: &str,
        node_type: &str,
        head_ip: &str,
    ) -> Result<(), AdapterError> {
        self.call(
            "install_ray",
            json!({"node_id": node_id, "node_type": node_type, "head_ip": head_ip}),
            self.cfg.install_timeout,
            false,
        )
        .await
        .map(|_| ())
    }
}
