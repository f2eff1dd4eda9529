//! One full driver iteration over loopback gRPC: the real GCS client against a fake GCS
//! server (`rayscale_tests::fake_gcs_server`, on its own thread), the fake cloud, the
//! driver of `rayscale-core` with its lease, KV table and effects. Prints, per scale, the
//! CPU time of the driver's thread, the bytes put into the KV and the log lines (at the
//! binary's default level, `info`) of:
//!
//! - the first iteration, which adopts every instance of a cluster it never saw;
//! - steady iterations (nothing changed; the median and the fastest of 15);
//! - an iteration where demand for 1% more nodes appears (they are launched), and the
//!   one after it (they are allocated).
//!
//! The driver runs on a current-thread tokio runtime on this thread, so the thread's CPU
//! time is everything the driver does: gathering (gRPC decode, conversion), the
//! reconciler and scheduler, the table save (encode, gRPC), the lease, the effects.
//!
//! Run: `cargo bench -p rayscale-tests --bench driver_iteration` (add `-- 1000` to run
//! only the smaller scale, `alike` to skip the distinct-node runs, `distinct` to run only
//! them, `idle` to run only the cluster without demand).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rayscale_core::config::ClusterConfig;
use rayscale_core::driver::{
    ConfigSource, Driver, DriverOptions, Reloaded, StepReport, TokioClock,
};
use rayscale_core::expander::ExpanderChain;
use rayscale_core::provider::CloudInstance;
use rayscale_core::testing::FakeProvider;
use rayscale_gcs_client::client::{ClientOptions, GcsClient};
use rayscale_tests::fake_gcs_server::{FakeGcsServer, demand, running_node};

// The binary's allocator, so the numbers are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

static LINES: AtomicU64 = AtomicU64::new(0);

/// Counts the lines the log would print, and drops them.
struct CountingWriter;

impl Write for CountingWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = b.iter().filter(|&&c| c == b'\n').count() as u64;
        LINES.fetch_add(n, Ordering::Relaxed);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// CPU time of this thread, in ns.
#[allow(unsafe_code)]
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

const YAML: &str = r#"
cluster_name: bench
max_workers: 100000
idle_timeout_minutes: 1
upscaling_speed: 1
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  cpu16: {resources: {CPU: 16, memory: 68719476736}, max_workers: 100000, node_config: {}}
"#;

struct Once(Option<Reloaded>);

#[async_trait::async_trait]
impl ConfigSource for Once {
    async fn poll(&mut self) -> Result<Option<Reloaded>, String> {
        Ok(self.0.take())
    }
}

/// One measured step.
#[derive(Clone)]
struct Sample {
    cpu_ms: f64,
    wall_ms: f64,
    kv_bytes: u64,
    records: usize,
    lines: u64,
    effects: usize,
    phases: [f64; 4],
}

async fn measured(
    driver: &mut Driver<GcsClient, TokioClock>,
    server: &FakeGcsServer,
) -> (Sample, StepReport) {
    let put0 = server.counters().put_bytes;
    let lines0 = LINES.load(Ordering::Relaxed);
    let cpu0 = thread_cpu_ns();
    let t0 = Instant::now();
    let report = driver.step().await;
    let wall = t0.elapsed();
    let cpu = thread_cpu_ns() - cpu0;
    let sample = Sample {
        cpu_ms: cpu as f64 / 1e6,
        wall_ms: wall.as_secs_f64() * 1e3,
        kv_bytes: server.counters().put_bytes - put0,
        records: report.kv.written + report.kv.deleted,
        lines: LINES.load(Ordering::Relaxed) - lines0,
        effects: report.effects,
        phases: [
            report.phases.gather.as_secs_f64() * 1e3,
            report.phases.reconcile.as_secs_f64() * 1e3,
            report.phases.save.as_secs_f64() * 1e3,
            report.phases.effects.as_secs_f64() * 1e3,
        ],
    };
    (sample, report)
}

fn row(label: &str, s: &Sample) {
    println!(
        "| {label} | {:.1} ms | {:.1} ms | {:.1} / {:.1} / {:.1} / {:.1} ms | {} | {} | {} | {} |",
        s.cpu_ms,
        s.wall_ms,
        s.phases[0],
        s.phases[1],
        s.phases[2],
        s.phases[3],
        s.kv_bytes,
        s.records,
        s.lines,
        s.effects
    );
}

fn median(mut v: Vec<Sample>) -> Sample {
    v.sort_by(|a, b| a.cpu_ms.total_cmp(&b.cpu_ms));
    v.swap_remove(v.len() / 2)
}

async fn run(nodes: u32, demands: i64, distinct: bool) -> Result<(), String> {
    let server = FakeGcsServer::start().map_err(|e| format!("fake GCS: {e}"))?;
    server.kv_set("__autoscaler", "__autoscaler_v2_enabled", b"1");
    let cloud = Arc::new(FakeProvider::new().with_head("head").with_page_size(1000));
    let total = [("CPU", 16.0), ("memory", 68_719_476_736.0)];
    server.with_cluster(|c| {
        // The head (Ray's autoscaler scales only while the head runs).
        let head = [("node:__internal_head__", 1.0)];
        c.node_states
            .push(running_node(0, "head", "head", &head, &head, 0));
        for i in 1..=nodes {
            let id = format!("w-{i:06}");
            cloud.insert(CloudInstance::worker(&id, "cpu16", None));
            // Alike nodes all have 6 CPUs and 32 GiB free; distinct ones 4 to 8 CPUs
            // and each its own amount of memory, so no two nodes share a trial.
            let free = if distinct {
                [
                    ("CPU", 4.0 + f64::from(i % 5)),
                    ("memory", 34_359_738_368.0 - f64::from(i) * 1_048_576.0),
                ]
            } else {
                [("CPU", 6.0), ("memory", 34_359_738_368.0)]
            };
            c.node_states
                .push(running_node(i, &id, "cpu16", &total, &free, 0));
        }
        // 20 shapes, 10 demands per node on average, all fitting the free room (none in
        // the idle case).
        let shapes = if demands == 0 { 0 } else { 20 };
        for s in 0..shapes {
            let cpu = 0.25 + 0.0125 * f64::from(s);
            let mem = 268_435_456.0 * f64::from(s + 1);
            c.pending_resource_requests.push(demand(
                &[("CPU", cpu), ("memory", mem)],
                demands / i64::from(shapes),
            ));
        }
    });
    // `RAYSCALE_BENCH_DUMP=DIR` writes the generated state (Ray's `ClusterResourceState`
    // protobuf) and the config, for `scripts/bench_iteration_vs_ray.py` to run Ray's own
    // iteration on the same cluster.
    if let Some(dir) = std::env::var_os("RAYSCALE_BENCH_DUMP") {
        let dir = std::path::PathBuf::from(dir);
        let kind = if distinct { "distinct" } else { "alike" };
        let bytes = server.with_cluster(|c| prost::Message::encode_to_vec(c));
        std::fs::write(
            dir.join(format!("state-{nodes}-{demands}-{kind}.pb")),
            bytes,
        )
        .and_then(|()| std::fs::write(dir.join("config.yaml"), YAML))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let config = ClusterConfig::from_yaml_str(YAML, "bench.yaml").map_err(|e| e.to_string())?;
    let chain = ExpanderChain::from_settings(&config.expander, &config.node_types, None)
        .map_err(|e| e.to_string())?;
    let gcs =
        GcsClient::new(&server.addr(), ClientOptions::default()).map_err(|e| e.to_string())?;
    let mut driver = Driver::new(
        "bench",
        Arc::new(gcs),
        cloud.clone(),
        TokioClock::new(1_800_000_000_000_000_000),
        Box::new(Once(Some(Reloaded { config, chain }))),
        DriverOptions {
            // Reconcile on every step, changed or not.
            interval: Duration::ZERO,
            holder: "bench".into(),
            // Long enough for a step under valgrind (the renewals are as frequent).
            lease: rayscale_core::driver::LeaseSettings {
                duration: Duration::from_secs(600),
                renew_every: Duration::from_secs(2),
                renew_deadline: Duration::from_secs(300),
            },
            ..Default::default()
        },
    );
    // Wait for the lease.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let r = driver.step().await;
        if r.reconciled {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("never reconciled: {:?}", r.aborted));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!();
    println!(
        "{nodes} instances / {demands} pending demands, {} nodes ({} bytes of cluster state)",
        if distinct { "distinct" } else { "alike" },
        server.with_cluster(|c| prost::Message::encoded_len(c))
    );
    println!();
    println!(
        "| iteration | CPU (driver thread) | wall | gather / reconcile / save / effects | KV bytes put | records written or deleted | log lines | effects |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    // The step above took the lease and adopted the cloud's instances (ALLOCATED); the
    // next one sees their Ray nodes (RAY_RUNNING).
    let (s, _) = measured(&mut driver, &server).await;
    row("second (instances join their Ray nodes)", &s);
    let mut steady = Vec::new();
    // `RAYSCALE_BENCH_STEADY=n` runs n steady steps (to profile them); 15 by default.
    let n = std::env::var("RAYSCALE_BENCH_STEADY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(15)
        .max(1);
    for _ in 0..n {
        let (s, r) = measured(&mut driver, &server).await;
        if let Some(why) = r.aborted {
            return Err(format!("a steady step stopped: {why}"));
        }
        steady.push(s);
    }
    let fastest = steady
        .iter()
        .min_by(|a, b| a.cpu_ms.total_cmp(&b.cpu_ms))
        .cloned();
    row(&format!("steady (median of {n})"), &median(steady));
    // The fastest is the work itself; the median adds what the machine's other load costs
    // (on a shared 2-core VM the median of one build varies by a third between runs).
    if let Some(f) = fastest {
        row(&format!("steady (fastest of {n})"), &f);
    }
    // Demand for 1% more nodes (whole nodes: no existing one can take them). Whole
    // nodes with memory: Ray's order places requests with more resource kinds first, so
    // a CPU-only request would come after the small ones, which may fill the new nodes
    // first (as Ray's scheduler does) and ask for more.
    let more = (nodes / 100).max(1);
    server.with_cluster(|c| {
        c.pending_resource_requests.push(demand(
            &[("CPU", 16.0), ("memory", 68_719_476_736.0)],
            i64::from(more),
        ));
    });
    let (s, _) = measured(&mut driver, &server).await;
    row(&format!("demand for {more} more nodes (launched)"), &s);
    let (s, _) = measured(&mut driver, &server).await;
    row("the step after", &s);
    let workers = cloud.instances().len();
    if let Some(r) = server.report() {
        println!();
        println!(
            "last report: {} pending instance requests, {} pending instances, {} infeasible requests",
            r.pending_instance_requests.len(),
            r.pending_instances.len(),
            r.infeasible_resource_requests.len()
        );
    }
    println!();
    println!(
        "instances in the table: {}, in the cloud: {workers}, KV records: {}",
        driver.instances().len(),
        server.kv_count("__rayscale", "instance/bench/")
    );
    driver.stop().await;
    Ok(())
}

fn main() {
    // RAYSCALE_BENCH_LOG=1 shows the log (on stderr) instead of only counting it.
    if std::env::var_os("RAYSCALE_BENCH_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(|| CountingWriter)
            .init();
    }
    let only: Option<u32> = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok());
    let only_alike = std::env::args().any(|a| a == "alike");
    let only_distinct = std::env::args().any(|a| a == "distinct");
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("no runtime: {e}");
            std::process::exit(1);
        }
    };
    let only_idle = std::env::args().any(|a| a == "idle");
    for (nodes, demands, distinct) in [
        (1_000u32, 10_000i64, false),
        (1_000, 10_000, true),
        (10_000, 100_000, false),
        (10_000, 100_000, true),
        (10_000, 0, false),
    ] {
        if only.is_some_and(|o| o != nodes)
            || (only_alike && distinct)
            || (only_distinct && !distinct)
            || (only_idle && demands != 0)
        {
            continue;
        }
        if let Err(e) = rt.block_on(run(nodes, demands, distinct)) {
            eprintln!("driver_iteration at {nodes}: {e}");
            std::process::exit(1);
        }
    }
}
