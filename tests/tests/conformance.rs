//! The provider conformance suite (`rayscale_tests::conformance`) on every provider this
//! workspace has: core's `FakeProvider` (a cloud that can fail in every way) and the
//! local-process provider (real processes, a stand-in `ray` that only sleeps).

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstance, LaunchRequest, ProviderErrorKind, tags};
use rayscale_core::testing::{FakeProvider, FaultOn};
use rayscale_provider_local::{LocalProcessConfig, LocalProcessProvider};
use rayscale_tests::conformance::{Provoke, Subject, run_all};

struct FakeProvoke(Arc<FakeProvider>);

#[async_trait::async_trait]
impl Provoke for FakeProvoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        if let ProviderErrorKind::Capacity { node_type, .. } = kind {
            // No capacity at all: the whole launch falls short.
            self.0.set_capacity(node_type, Some(0), None);
        } else {
            self.0.fail_next(FaultOn::Launch, kind.clone());
        }
        Some(LaunchRequest {
            request_id: request_id.into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
    }
    async fn limit_capacity(&self, node_type: &str, n: u64) -> bool {
        self.0.set_capacity(node_type, Some(n), None);
        true
    }
    async fn unlimit_capacity(&self, node_type: &str) {
        self.0.set_capacity(node_type, None, None);
    }
}

#[tokio::test]
async fn fake_provider_conforms() {
    // The head as `ray up` tags one, before its setup ran.
    let fake = Arc::new(FakeProvider::new());
    let mut head = CloudInstance::worker("head", "head", None).as_head();
    head.labels
        .insert(tags::NODE_STATUS.into(), "uninitialized".into());
    fake.insert(head);
    let subject = Subject {
        provider: fake.clone(),
        node_type: "cpu".into(),
        head_id: Some("head".into()),
        head_type: Some("head".into()),
        settle: Duration::from_secs(1),
        all_or_nothing: false,
        provoke: Box::new(FakeProvoke(fake.clone())),
    };
    let report = run_all(&subject).await;
    report.print("fake");
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    assert!(fake.pages_served() > 3, "listing walked the pages");
}

/// The local provider can only be made to fail by its inputs: an unknown node type is
/// an invalid config.
struct LocalProvoke;

#[async_trait::async_trait]
impl Provoke for LocalProvoke {
    async fn error(&self, kind: &ProviderErrorKind, request_id: &str) -> Option<LaunchRequest> {
        (*kind == ProviderErrorKind::InvalidConfig).then(|| LaunchRequest {
            request_id: request_id.into(),
            node_type: "no-such-type".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
    }
    async fn limit_capacity(&self, _: &str, _: u64) -> bool {
        false
    }
    async fn unlimit_capacity(&self, _: &str) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_processes_conform() {
    let dir = std::env::temp_dir().join(format!("rs-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ray = dir.join("ray");
    // A leader that keeps its `start ... --block` arguments, as `ray start` does.
    std::fs::write(&ray, "#!/bin/sh\nwhile :; do sleep 1; done\n").unwrap();
    std::fs::set_permissions(&ray, std::fs::Permissions::from_mode(0o755)).unwrap();
    let yaml = r#"
cluster_name: conformance
provider: {type: local_processes}
head_node_type: head
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  cpu: {resources: {CPU: 1}, node_config: {}}
"#;
    let config = ClusterConfig::from_yaml_str(yaml, "conformance.yaml").unwrap();
    let mut cfg = LocalProcessConfig::new(
        format!("conformance-{}", std::process::id()),
        "127.0.0.1:1",
        &ray,
        config.node_types,
    );
    cfg.grace_period = Duration::from_millis(500);
    cfg.log_dir = dir.join("logs");
    let subject = Subject {
        provider: Arc::new(LocalProcessProvider::new(cfg).unwrap()),
        node_type: "cpu".into(),
        head_id: None,
        head_type: None,
        settle: Duration::from_secs(5),
        all_or_nothing: false,
        provoke: Box::new(LocalProvoke),
    };
    let report = run_all(&subject).await;
    report.print("local_processes");
    assert!(
        report
            .passed
            .iter()
            .any(|p| p == "error_kind_invalid_config")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
