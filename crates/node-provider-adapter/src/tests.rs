//! The adapter on a hand-written in-memory v1 provider: Ray's batching and tags,
//! idempotency, unmanaged nodes, the head, installs with Ray's retries (virtual time).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{
    CloudInstanceProvider, LaunchRequest, ProviderErrorKind, ProviderOp,
};
use serde_json::Value;

use crate::config::AdapterConfig;
use crate::errors::AdapterError;
use crate::lock;
use crate::provider::NodeProviderAdapter;
use crate::v1::{NodeProvider, Tags};

#[derive(Default)]
struct Fake {
    nodes: Mutex<BTreeMap<String, Tags>>,
    next: AtomicUsize,
    calls: Mutex<Vec<u64>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    free: Mutex<Option<u64>>,
    install_failures: AtomicUsize,
    installs: AtomicUsize,
}

#[async_trait::async_trait]
impl NodeProvider for Fake {
    fn provider_type(&self) -> &str {
        "fake-v1"
    }
    async fn non_terminated_nodes(&self, f: &Tags) -> Result<Vec<String>, AdapterError> {
        Ok(lock(&self.nodes)
            .iter()
            .filter(|(_, t)| f.iter().all(|(k, v)| t.get(k) == Some(v)))
            .map(|(id, _)| id.clone())
            .collect())
    }
    async fn create_node(
        &self,
        _: &Value,
        tags: &Tags,
        count: u64,
    ) -> Result<Option<Vec<String>>, AdapterError> {
        lock(&self.calls).push(count);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let mut n = count;
        if let Some(free) = lock(&self.free).as_mut() {
            n = n.min(*free);
            *free -= n;
        }
        for _ in 0..n {
            let id = format!("n-{}", self.next.fetch_add(1, Ordering::SeqCst));
            lock(&self.nodes).insert(id, tags.clone());
        }
        Ok(None)
    }
    async fn terminate_node(&self, id: &str) -> Result<(), AdapterError> {
        lock(&self.nodes).remove(id);
        Ok(())
    }
    async fn node_tags(&self, id: &str) -> Result<Tags, AdapterError> {
        Ok(lock(&self.nodes).get(id).cloned().unwrap_or_default())
    }
    async fn set_node_tags(&self, id: &str, t: &Tags) -> Result<(), AdapterError> {
        if let Some(x) = lock(&self.nodes).get_mut(id) {
            x.extend(t.clone());
        }
        Ok(())
    }
    async fn is_running(&self, _: &str) -> Result<bool, AdapterError> {
        Ok(true)
    }
    async fn is_terminated(&self, id: &str) -> Result<bool, AdapterError> {
        Ok(!lock(&self.nodes).contains_key(id))
    }
    async fn internal_ip(&self, _: &str) -> Result<Option<String>, AdapterError> {
        Ok(Some("10.0.0.1".into()))
    }
    async fn external_ip(&self, _: &str) -> Result<Option<String>, AdapterError> {
        Ok(None)
    }
    async fn install_ray(&self, _: &str, _: &str, _: &str) -> Result<(), AdapterError> {
        self.installs.fetch_add(1, Ordering::SeqCst);
        if self.install_failures.load(Ordering::SeqCst) > 0 {
            self.install_failures.fetch_sub(1, Ordering::SeqCst);
            return Err(AdapterError::Raised {
                method: "install_ray".into(),
                exc_type: "Exception".into(),
                category: None,
                message: "Ray installation failed with unexpected status: update-failed".into(),
            });
        }
        Ok(())
    }
}

const CONFIG: &str = "cluster_name: c\nprovider: {type: local, head_ip: 127.0.0.1, worker_ips: []}\n\
head_node_type: h\navailable_node_types:\n  h: {resources: {}, node_config: {}}\n  \
w: {resources: {CPU: 2}, node_config: {}, max_workers: 30}\n";

fn adapter(fake: Arc<Fake>) -> NodeProviderAdapter {
    let config = ClusterConfig::from_yaml_str(CONFIG, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
    let cfg = AdapterConfig::new(&config, "127.0.0.1").unwrap_or_else(|e| panic!("{e}"));
    NodeProviderAdapter::new(fake, cfg, &config)
}

fn req(id: &str, count: u64) -> LaunchRequest {
    LaunchRequest {
        request_id: id.into(),
        node_type: "w".into(),
        count,
        launch_config_hash: "h".into(),
        avoid_zones: Vec::new(),
        all_or_nothing: false,
    }
}

#[tokio::test]
async fn launches_go_in_rays_batches_with_rays_tags_and_never_twice() {
    let fake = Arc::new(Fake::default());
    let a = adapter(fake.clone());
    let o = a
        .launch(&req("lr-1", 12))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.shortfall.is_none(), "{:?}", o.shortfall);
    let mut calls = lock(&fake.calls).clone();
    calls.sort();
    assert_eq!(calls, [2, 5, 5]);
    assert_eq!(
        fake.max_in_flight.load(Ordering::SeqCst),
        2,
        "ceil(10 / 5) batches at once"
    );
    // Sent again (a replay): nothing more.
    a.launch(&req("lr-1", 12))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lock(&fake.calls).len(), 3);
    let listed = a.list().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.len(), 12);
    let t = &listed[0].labels;
    assert_eq!(t["ray-node-type"], "worker");
    assert_eq!(t["ray-user-node-type"], "w");
    assert_eq!(t["ray-launch-request"], "lr-1");
    assert_eq!(t["ray-node-name"], "ray-c-worker");
    assert_eq!(t["ray-node-status"], "uninitialized");
    assert_eq!(listed[0].private_ip.as_deref(), Some("10.0.0.1"));
    // An unmanaged node and a head: one skipped, the other listed as the head and
    // never terminated.
    lock(&fake.nodes).insert("other".into(), Tags::new());
    lock(&fake.nodes).insert(
        "head".into(),
        Tags::from([("ray-node-type".into(), "head".into())]),
    );
    let listed = a.list().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.len(), 13);
    assert!(
        listed
            .iter()
            .any(|c| c.is_head() && c.cloud_instance_id == "head")
    );
    let e = a
        .terminate(&["n-0".into(), "head".into()], "t")
        .await
        .err()
        .map(|e| e.kind.clone());
    assert_eq!(e, Some(ProviderErrorKind::InvalidConfig));
    assert!(lock(&fake.nodes).contains_key("n-0"), "nothing touched");
    // Gone ones succeed.
    a.terminate(&["n-0".into(), "never".into()], "t")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    a.terminate(&["n-0".into()], "t")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!lock(&fake.nodes).contains_key("n-0"));
}

#[tokio::test]
async fn a_provider_that_makes_fewer_reports_the_shortfall_as_capacity() {
    let fake = Arc::new(Fake::default());
    *lock(&fake.free) = Some(3);
    let a = adapter(fake.clone());
    let o = a
        .launch(&req("lr-2", 7))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let short = o.shortfall.unwrap_or_else(|| panic!("a shortfall"));
    assert_eq!(
        short.op,
        ProviderOp::Launch {
            request_id: "lr-2".into(),
            node_type: "w".into(),
            count: 4
        }
    );
    assert_eq!(short.capacity().map(|c| c.0), Some("w"));
    assert!(short.message.contains("made 3 of 7"), "{}", short.message);
}

#[tokio::test(start_paused = true)]
async fn installs_retry_as_ray_does_and_report_the_last_failure_once() {
    let fake = Arc::new(Fake::default());
    let a = adapter(fake.clone());
    assert!(a.installs_ray());
    // Fails twice, then succeeds: no error.
    fake.install_failures.store(2, Ordering::SeqCst);
    a.install_ray("n-1", "w")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    a.install_ray("n-1", "w")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(
        fake.installs.load(Ordering::SeqCst),
        1,
        "one install however often asked"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        fake.installs.load(Ordering::SeqCst),
        2,
        "retried after 10 s"
    );
    tokio::time::sleep(Duration::from_secs(21)).await;
    assert_eq!(fake.installs.load(Ordering::SeqCst), 3, "then after 20 s");
    assert!(a.poll_errors().await.is_empty());
    // Fails three times: one InstallRay error.
    fake.install_failures.store(3, Ordering::SeqCst);
    a.install_ray("n-2", "w")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(40)).await;
    let errors = a.poll_errors().await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].op,
        ProviderOp::InstallRay {
            cloud_instance_id: "n-2".into()
        }
    );
    assert!(
        errors[0].message.contains("update-failed"),
        "{}",
        errors[0].message
    );
    assert!(a.poll_errors().await.is_empty(), "reported once");
}
