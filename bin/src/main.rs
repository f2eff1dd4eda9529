//! The `rayscale` command line.

mod expander;
mod plan;

/// A faster allocator: scheduling large snapshots allocates many small vectors.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Plan(plan::PlanArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => plan::run(&args),
    }
}
