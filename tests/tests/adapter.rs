//! The node-provider adapter and its Python bridge on a Ray v1 provider written for these
//! tests (`tests/fixtures/v1/rayscale_test_provider.py`, loaded by Ray's own
//! `_get_node_provider` as `type: external`): the provider conformance suite through the
//! bridge, and a child that crashes or hangs: an error on the affected calls and
//! instances, a restarted bridge, never a hung caller.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstanceProvider, LaunchRequest, ProviderErrorKind, ProviderOp,
};
use rayscale_node_provider_adapter::{
    AdapterConfig, BridgeConfig, NodeProviderAdapter, PythonBridge,
};
use rayscale_tests::conformance::{Provoke, Subject, run_all};
use serde_json::json;

struct Files {
    dir: PathBuf,
}

impl Files {
    fn new(name: &str) -> Files {
        let dir = std::env::temp_dir().join(format!("rayscale-v1-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Files { dir }
    }
    fn control(&self) -> PathBuf {
        self.dir.join("control.json")
    }
    fn set(&self, v: serde_json::Value) {
        std::fs::write(self.control(), v.to_string()).unwrap();
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/v1")
}

/// The cluster config, the bridge over the test provider, and the adapter.
fn subject(files: &Files, bridge_extra: &str) -> (Arc<PythonBridge>, NodeProviderAdapter) {
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let yaml = format!(
        "cluster_name: v1test\nmax_workers: 50\nhead_node_type: head\nauth: {{ssh_user: nobody}}\n\
         provider:\n  type: external\n  module: rayscale_test_provider.TestNodeProvider\n  \
         state_file: {}\n  control_file: {}\n\
         rayscale:\n  bridge: {{python: {}{bridge_extra}}}\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{}}}}\n  \
         w: {{resources: {{CPU: 1}}, node_config: {{}}, max_workers: 50}}\n",
        files.dir.join("state.json").display(),
        files.control().display(),
        python.display(),
    );
    let config = ClusterConfig::from_yaml_str(&yaml, "v1.yaml").unwrap();
    let mut b = BridgeConfig::new(&config, "127.0.0.1:1").unwrap();
    b.env
        .push(("PYTHONPATH".into(), fixtures().display().to_string()));
    let bridge = Arc::new(PythonBridge::new(b));
    let mut a = AdapterConfig::new(&config, "127.0.0.1").unwrap();
    a.install_retry_interval = Duration::from_millis(100);
    let adapter = NodeProviderAdapter::new(bridge.clone(), a, &config);
    (bridge, adapter)
}

struct V1Provoke(PathBuf);

impl V1Provoke {
    fn set(&self, v: serde_json::Value) {
        std::fs::write(&self.0, v.to_string()).unwrap();
    }
}

#[async_trait::async_trait]
impl Provoke for V1Provoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        // What Ray's cloud providers raise, as the bridge reports it.
        let (exc, message) = match kind {
            ProviderErrorKind::Capacity { .. } => (
                "Exception",
                "InsufficientInstanceCapacity: We currently do not have sufficient capacity",
            ),
            ProviderErrorKind::Quota => ("Exception", "VcpuLimitExceeded: quota of 32 vCPUs"),
            ProviderErrorKind::Throttled => {
                ("Exception", "RequestLimitExceeded: Request limit exceeded.")
            }
            ProviderErrorKind::InvalidConfig => {
                ("ValueError", "node_config.ImageId is not a string")
            }
            ProviderErrorKind::Auth => (
                "Exception",
                "AuthFailure: AWS was not able to validate the credentials",
            ),
            ProviderErrorKind::NotFound => (
                "Exception",
                "InvalidAMIID.NotFound: the image does not exist",
            ),
            ProviderErrorKind::Transient => ("ConnectionError", "connection reset by peer"),
        };
        self.set(json!({"raise": {"exc": exc, "message": message}}));
        Some(LaunchRequest {
            request_id: request_id.into(),
            node_type: "w".into(),
            count: 1,
            launch_config_hash: "h".into(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
    }
    async fn limit_capacity(&self, _: &str, n: u64) -> bool {
        self.set(json!({"capacity": n}));
        true
    }
    async fn unlimit_capacity(&self, _: &str) {
        self.set(json!({}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_v1_provider_through_the_bridge_conforms() {
    let files = Files::new("conf");
    let (bridge, adapter) = subject(&files, "");
    let subject = Subject {
        provider: Arc::new(adapter),
        node_type: "w".into(),
        head_id: Some("head-0".into()),
        head_type: None,
        settle: Duration::from_secs(5),
        all_or_nothing: false,
        provoke: Box::new(V1Provoke(files.control())),
    };
    let report = run_all(&subject).await;
    report.print("v1 bridge");
    // Ray's node updater tags a v1 provider's head (`ray up`), not rayscale.
    assert_eq!(
        report.skipped_names(),
        ["the_head_is_tagged_up_to_date"],
        "{:?}",
        report.skipped
    );
    assert_eq!(bridge.starts(), 1, "one child served the whole suite");
}

fn req(id: &str, n: u64) -> LaunchRequest {
    LaunchRequest {
        request_id: id.into(),
        node_type: "w".into(),
        count: n,
        launch_config_hash: "h".into(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_child_fails_its_calls_and_the_next_call_restarts_it() {
    let files = Files::new("crash");
    let (bridge, adapter) = subject(&files, "");
    adapter.list().await.unwrap();
    let first = bridge.child_pid().await.unwrap();
    files.set(json!({"crash_on": "create_node"}));
    let o = adapter.launch(&req("lr-crash", 2)).await.unwrap();
    let short = o.shortfall.expect("the launch fell short");
    assert_eq!(short.kind, ProviderErrorKind::Transient, "{short}");
    assert!(short.message.contains("exited"), "{short}");
    assert!(
        matches!(short.op, ProviderOp::Launch { count: 2, .. }),
        "{:?}",
        short.op
    );
    files.set(json!({}));
    // The next call starts a new child; the cloud's nodes are still there.
    let listed = adapter.list().await.unwrap();
    assert!(listed.iter().any(|c| c.cloud_instance_id == "head-0"));
    let second = bridge.child_pid().await.unwrap();
    assert_ne!(first, second);
    assert_eq!(bridge.starts(), 2);
    // The same request again makes its instances once.
    let o = adapter.launch(&req("lr-crash", 2)).await.unwrap();
    assert!(o.shortfall.is_none(), "{:?}", o.shortfall);
    assert_eq!(adapter.list().await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_child_dies_after_making_the_nodes_counts_them() {
    let files = Files::new("crash-after");
    let (bridge, adapter) = subject(&files, "");
    files.set(json!({"crash_after": "create_node"}));
    let o = adapter.launch(&req("lr-made", 3)).await.unwrap();
    // The call failed, but the nodes exist: nothing fell short.
    assert!(o.shortfall.is_none(), "{:?}", o.shortfall);
    files.set(json!({}));
    let workers = adapter
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| !c.is_head())
        .count();
    assert_eq!(workers, 3);
    assert_eq!(bridge.starts(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_child_times_out_and_is_replaced() {
    let files = Files::new("hang");
    let (bridge, adapter) = subject(&files, ", call_timeout_s: 2");
    adapter.list().await.unwrap();
    let first = bridge.child_pid().await.unwrap();
    files.set(json!({"hang_on": "non_terminated_nodes"}));
    let t0 = Instant::now();
    let e = adapter.list().await.expect_err("a hung list fails");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(e.kind, ProviderErrorKind::Transient, "{e}");
    assert!(e.message.contains("did not answer within 2s"), "{e}");
    assert!(!e.message.contains('\n'), "{e}");
    files.set(json!({}));
    let listed = adapter.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    let second = bridge.child_pid().await.unwrap();
    assert_ne!(second, first, "a new child");
    // A caller that gives up before the bridge's deadline (the loop's own deadlines)
    // does not leave the hung child alive: the deadline is the bridge's own.
    files.set(json!({"hang_on": "non_terminated_nodes"}));
    let gave_up = tokio::time::timeout(Duration::from_millis(300), adapter.list()).await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(bridge.child_pid().await, None, "the hung child was killed");
    files.set(json!({}));
    assert_eq!(adapter.list().await.unwrap().len(), 1);
    assert_eq!(bridge.starts(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_whose_child_crashes_is_an_error_on_that_instance() {
    let files = Files::new("install");
    let (_bridge, adapter) = subject(&files, "");
    adapter.launch(&req("lr-i", 1)).await.unwrap();
    let node = adapter
        .list()
        .await
        .unwrap()
        .into_iter()
        .find(|c| !c.is_head())
        .unwrap();
    assert!(adapter.installs_ray());
    // Ray's node updater sets the node's status tag first: the child dies there.
    files.set(json!({"crash_on": "set_node_tags"}));
    adapter
        .install_ray(&node.cloud_instance_id, "w")
        .await
        .unwrap();
    let t0 = Instant::now();
    let errors = loop {
        let e = adapter.poll_errors().await;
        if !e.is_empty() || t0.elapsed() > Duration::from_secs(60) {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].op,
        ProviderOp::InstallRay {
            cloud_instance_id: node.cloud_instance_id.clone()
        }
    );
    assert!(
        errors[0].message.contains("exited"),
        "{}",
        errors[0].message
    );
    files.set(json!({}));
    assert!(adapter.list().await.is_ok(), "the bridge serves again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_interpreter_or_module_is_a_one_line_error() {
    let files = Files::new("bad");
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let yaml = format!(
        "cluster_name: v1bad\nhead_node_type: head\nprovider: {{type: external, module: no_such_module.Provider}}\n\
         rayscale: {{bridge: {{python: {}}}}}\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {{}}}}\n",
        python.display()
    );
    let config = ClusterConfig::from_yaml_str(&yaml, "bad.yaml").unwrap();
    let bridge = PythonBridge::new(BridgeConfig::new(&config, "127.0.0.1:1").unwrap());
    let e = bridge
        .start()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("could not load provider \"external\"") && e.contains("no_such_module"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    let mut b = BridgeConfig::new(&config, "127.0.0.1:1").unwrap();
    b.python = files.dir.join("no-python");
    let e = PythonBridge::new(b)
        .start()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.starts_with("cannot start the python bridge with"), "{e}");
}
