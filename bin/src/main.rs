//! The `rayscale` command line.

mod cmd;
mod driver;
mod expander;
mod gcs;
mod launch;
mod local_head;
mod logging;
mod mounts;
mod ops;
mod overrides;
mod providers;
mod ssh;

/// A faster allocator: scheduling large snapshots allocates many small vectors.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::future::Future;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cmd::{
    boot_script, down, explain, plan, request_resources, run, simulate, snapshot, status, up,
};

/// rayscale: a fast, restart-safe autoscaler for Ray clusters.
#[derive(Parser)]
#[command(name = "rayscale", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scheduling pass on a frozen snapshot and print the decision as JSON.
    #[command(
        after_help = "Examples:\n  rayscale plan --scenario examples/scenarios/basic.yaml\n  rayscale snapshot --gcs 127.0.0.1:6379 --config cluster.yaml > now.json && rayscale plan --scenario now.json\n\nFormat: docs/src/reference/scenario.md"
    )]
    Plan(plan::PlanArgs),
    /// Start a cluster: a cloud head that runs rayscale, or a local one autoscaled here.
    ///
    /// In a cloud: find or launch its head (which starts Ray and rayscale at boot) and
    /// print its address. With local_processes: a Ray head on loopback if none runs,
    /// autoscaled in the foreground until Ctrl-C (or until `rayscale down` stops the head
    /// it started).
    #[command(
        after_help = "Examples:\n  rayscale up examples/local-cluster.yaml --port 6379\n  rayscale up aws-cluster.yaml --wait"
    )]
    Up(up::UpArgs),
    /// Terminate a cluster: a cloud head first (its autoscaler goes with it), then every worker (or only workers: --workers-only).
    #[command(
        after_help = "Examples:\n  rayscale down examples/local-cluster.yaml --port 6379\n  rayscale down aws-cluster.yaml --workers-only --keep-min-workers"
    )]
    Down(down::DownArgs),
    /// Print the head's address, public unless provider.use_internal_ips (like `ray get-head-ip`).
    #[command(after_help = "Example:\n  ssh ubuntu@$(rayscale get-head-ip aws-cluster.yaml)")]
    GetHeadIp(down::IpsArgs),
    /// Print the running workers' addresses, one per line, public unless provider.use_internal_ips (like `ray get-worker-ips`).
    #[command(after_help = "Example:\n  rayscale get-worker-ips aws-cluster.yaml")]
    GetWorkerIps(down::IpsArgs),
    /// Run the autoscaling loop alone against a running cluster (like Ray's monitor.py).
    #[command(
        after_help = "Example (on the head, started with RAY_enable_autoscaler_v2=1 ray start --head --no-monitor):\n  rayscale run --config ~/ray_bootstrap_config.yaml --gcs 127.0.0.1:6379 --head-ip auto"
    )]
    Run(run::RunArgs),
    /// Show the cluster and the autoscaler's state (like `ray status`); `--watch` refreshes.
    #[command(
        after_help = "Examples:\n  rayscale status --gcs 127.0.0.1:6379\n  rayscale status --gcs 127.0.0.1:6379 --why\n  rayscale status --gcs 127.0.0.1:6379 --watch"
    )]
    Status(status::StatusArgs),
    /// Ask the cluster to keep capacity for bundles (Ray's `request_resources`).
    RequestResources(request_resources::RequestArgs),
    /// Why each worker stays or goes and why demand waits, worked out now without acting.
    ///
    /// The reasons for pending demand and for each worker node, from the live cluster
    /// (`status --why` shows what the running rayscale stored).
    Explain(explain::ExplainArgs),
    /// Write a `plan` scenario (JSON) of the live cluster, to replay a decision offline.
    Snapshot(snapshot::SnapshotArgs),
    /// Autoscale a RayCluster as its head pod's sidecar, in place of Ray's autoscaler.
    ///
    /// Takes the flags of `ray kuberay-autoscaler`.
    #[cfg(feature = "kuberay")]
    Kuberay(cmd::kuberay::KubeRayArgs),
    /// Print the script a new worker of a node type runs at boot (its cloud's user data).
    BootScript(boot_script::BootScriptArgs),
    /// What the autoscaler would do on a workload trace, in virtual time.
    ///
    /// A simulation of the real reconciler and scheduler against a simulated cloud, with a
    /// summary and an SVG plot; several configs or `--compare` expander chains side by side.
    #[command(
        after_help = "Example:\n  rayscale simulate --config examples/local-cluster.yaml --trace examples/traces/burst.yaml"
    )]
    Simulate(simulate::SimulateArgs),
}

/// Runs an async command on a fresh runtime; errors become one line and exit status 1.
fn run_async<F>(name: &str, f: F) -> ExitCode
where
    F: Future<Output = anyhow::Result<String>>,
{
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rayscale {name}: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(f) {
        Ok(out) => {
            if !out.is_empty() {
                println!("{}", out.trim_end());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let hint = gcs::hint_for(&e)
                .map(|h| format!(": {h}"))
                .unwrap_or_default();
            eprintln!(
                "rayscale {name}: {}{hint}",
                format!("{e:#}").replace('\n', " ")
            );
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init();
    // One TLS crypto provider for the process (tonic's ring): with a cloud SDK's aws-lc
    // linked too, rustls cannot pick one itself, and TLS to a gRPC expander would panic.
    // An error means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match cli.command {
        Command::Plan(args) => plan::run(&args),
        Command::Up(args) => run_async("up", up::up(args)),
        Command::Down(args) => run_async("down", down::down(args)),
        Command::GetHeadIp(args) => run_async("get-head-ip", down::ips(args, true)),
        Command::GetWorkerIps(args) => run_async("get-worker-ips", down::ips(args, false)),
        Command::Run(args) => run_async("run", run::run(args)),
        Command::Status(args) => run_async("status", async move { status::status(&args).await }),
        Command::RequestResources(args) => run_async("request-resources", async move {
            request_resources::request_resources(&args).await
        }),
        Command::Explain(args) => {
            run_async("explain", async move { explain::explain(&args).await })
        }
        Command::Snapshot(args) => {
            run_async("snapshot", async move { snapshot::snapshot(&args).await })
        }
        #[cfg(feature = "kuberay")]
        Command::Kuberay(args) => run_async("kuberay", cmd::kuberay::run(args)),
        Command::Simulate(args) => match simulate::run(&args) {
            Ok(s) => {
                print!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rayscale simulate: {}", format!("{e:#}").replace('\n', " "));
                ExitCode::FAILURE
            }
        },
        Command::BootScript(args) => match boot_script::boot_script(&args) {
            Ok(s) => {
                print!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "rayscale boot-script: {}",
                    format!("{e:#}").replace('\n', " ")
                );
                ExitCode::FAILURE
            }
        },
    }
}
