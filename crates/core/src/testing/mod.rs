//! Small builders, a fake cloud and a fake GCS for tests and benchmarks (compiled always,
//! see the crate root; nothing in the binary calls them).

use crate::config::NodeTypeConfig;
use crate::model::{ResourceMap, ResourceRequest, ResourceRequestByCount};

/// A resource map from `(name, amount)` pairs, in order.
pub fn res(pairs: &[(&str, f64)]) -> ResourceMap {
    ResourceMap::from_f64_pairs(pairs.iter().map(|(k, v)| (k.to_string(), *v)))
}

/// A node type with the given resources and worker bounds; its launch hash is
/// `hash-<name>`, no labels, priority 0.
pub fn node_type(name: &str, r: &[(&str, f64)], min: u64, max: Option<u64>) -> NodeTypeConfig {
    NodeTypeConfig {
        name: name.into(),
        resources: res(r),
        labels: vec![],
        min_workers: min,
        max_workers: max,
        idle_timeout_s: None,
        priority: 0,
        node_config: serde_json::json!({}),
        launch_config_hash: format!("hash-{name}"),
        hosts: None,
    }
}

/// `count` identical requests of the given resources.
pub fn demand(r: &[(&str, f64)], count: u64) -> ResourceRequestByCount {
    ResourceRequestByCount {
        request: ResourceRequest {
            resources: res(r),
            ..Default::default()
        },
        count,
    }
}

mod fake_gcs;
mod fake_provider;
pub use fake_gcs::FakeGcs;
pub use fake_provider::{FakeCall, FakeProvider, FaultOn};

/// Runs a future that never waits on I/O to completion (the [`FakeProvider`]'s calls), on
/// the current thread without a runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}
