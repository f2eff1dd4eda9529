//! One check of the autoscaling loop over a cloud provider, shared by every cloud's
//! tests (included with `#[path]`; written once): a capacity error moves the demand to
//! another node type at the next iterations, and the refused types are not asked again
//! until their window ends. The loop runs with core's fake GCS for the demand and the
//! provider on its cloud's emulator or fake.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rayscale_core::config::ClusterConfig;
use rayscale_core::driver::{ConfigSource, Driver, DriverOptions, Reloaded, TokioClock};
use rayscale_core::expander::ExpanderChain;
use rayscale_core::provider::CloudInstanceProvider;
use rayscale_core::testing::{FakeGcs, demand};

/// The cloud's fault switch, as the check needs it.
pub trait Capacity {
    /// Neither `big` nor `alt` can be had.
    fn exhaust_both(&self);
    /// `big` can be had again.
    fn restore_big(&self);
    /// How often the cloud was asked for `big` and for `alt` so far.
    fn asks(&self) -> (u64, u64);
}

/// The config once (it never changes).
struct Fixed(Option<ClusterConfig>);

#[async_trait::async_trait]
impl ConfigSource for Fixed {
    async fn poll(&mut self) -> Result<Option<Reloaded>, String> {
        let Some(config) = self.0.take() else {
            return Ok(None);
        };
        let chain = ExpanderChain::from_settings(&config.expander, &config.node_types, None)
            .map_err(|e| e.to_string())?;
        Ok(Some(Reloaded { config, chain }))
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Two worker types of the same shape, `big` and `alt`, with the priority expander
/// preferring `big`; `provider` is the YAML's `provider:` flow mapping, `head`, `big`
/// and `alt` each type's `node_config`.
pub fn config(
    cluster: &str,
    ttl_s: u64,
    provider: &str,
    head: &str,
    big: &str,
    alt: &str,
) -> ClusterConfig {
    let yaml = format!(
        "cluster_name: {cluster}\nprovider: {provider}\n\
         head_node_type: head\nmax_workers: 10\nupscaling_speed: 100\n\
         rayscale: {{unavailable_type_ttl_s: {ttl_s}, expander: {{chain: [priority], priorities: {{10: [big], 1: [alt]}}}}}}\n\
         available_node_types:\n  head: {{resources: {{}}, node_config: {head}}}\n  \
         big: {{resources: {{CPU: 8}}, max_workers: 5, node_config: {big}}}\n  \
         alt: {{resources: {{CPU: 8}}, max_workers: 5, node_config: {alt}}}\n"
    );
    ClusterConfig::from_yaml_str(&yaml, "loop.yaml").unwrap_or_else(|e| panic!("{e}"))
}

/// The check: `cfg` from [`config`] with window `ttl_s`.
pub async fn a_capacity_error_moves_the_demand(
    cfg: &ClusterConfig,
    ttl_s: u64,
    provider: Arc<dyn CloudInstanceProvider>,
    cloud: &dyn Capacity,
) {
    cloud.exhaust_both();
    let gcs = FakeGcs::new();
    gcs.set_demand(vec![demand(&[("CPU", 8.0)], 1)]);
    let mut d = Driver::new(
        &cfg.cluster_name,
        Arc::new(gcs.clone()),
        provider.clone(),
        TokioClock::new(now_ns()),
        Box::new(Fixed(Some(cfg.clone()))),
        DriverOptions {
            interval: Duration::from_millis(200),
            watch: Duration::from_millis(100),
            ..Default::default()
        },
    );
    // Each reconciled step, what the cloud was asked for so far.
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) && cloud.asks().1 == 0 {
        if d.step().await.reconciled {
            seen.push(cloud.asks());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_alt = seen
        .iter()
        .position(|r| r.1 == 1)
        .unwrap_or_else(|| panic!("alt never asked for: {seen:?}"));
    let first_big = seen.iter().position(|r| r.0 == 1).unwrap_or(usize::MAX);
    assert_eq!(seen[first_alt].0, 1, "big asked once before alt: {seen:?}");
    assert!(
        first_alt > first_big && first_alt - first_big <= 2,
        "the demand moves to alt within the next iterations: {seen:?}"
    );
    eprintln!("reconciled steps, (big, alt) asked so far: {seen:?}");
    let refused_at = Instant::now();
    // Within the window: neither refused type is asked again, though the demand stays.
    cloud.restore_big();
    while refused_at.elapsed() < Duration::from_secs(ttl_s - 3) {
        d.step().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(cloud.asks(), (1, 1), "no call for a type inside its window");
    // After it: big is tried again, and made.
    let mut made = false;
    while refused_at.elapsed() < Duration::from_secs(ttl_s + 10) && !made {
        d.step().await;
        made = provider
            .list()
            .await
            .map(|l| l.iter().any(|i| i.node_type == "big"))
            .unwrap_or(false);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(made, "big made after its window; asked {:?}", cloud.asks());
    assert_eq!(cloud.asks().0, 2, "big asked once more, after its window");
    d.stop().await;
}
