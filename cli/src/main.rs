//! `carpool`: plan and inspect Carpool's decisions from the command line.
//!
//! Exit codes: 0 on success, 2 on bad input (a flag, a value or a file), 1 on an internal
//! failure. Bad input is reported on one line that says what is wrong and how to fix it.

#![deny(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod catalog_cmd;
mod disrupt_cmd;
mod event_cmd;
mod output;
mod plan_cmd;
mod simulate;
mod table;
mod usage;

use std::process::ExitCode;

/// The system allocator, counting the heap in use and its peak (for `bench provision`).
#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

use clap::{Parser, Subcommand};

use usage::UsageError;

/// Carpool: a node autoscaler for Amazon EKS that runs as AWS Lambda functions.
#[derive(Parser, Debug)]
#[command(name = "carpool", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The cheapest instance types that meet a set of requirements.
    Catalog(catalog_cmd::CatalogArgs),
    /// Plan new nodes for the pending pods of a cluster dump.
    Plan(plan_cmd::PlanArgs),
    /// What the consolidator would do now with a cluster dump, and why every other node is kept.
    Disrupt(disrupt_cmd::DisruptArgs),
    /// What Carpool would do with interruption events (EventBridge, SQS or a Lambda SQS batch), touching nothing.
    Event(event_cmd::EventArgs),
    /// Measure the planner: Karpenter's scheduling benchmark, and the packing suite.
    Bench(bench::BenchArgs),
    /// Run Carpool's three functions on a scenario in simulated time, against node groups
    /// (Cluster Autoscaler) and a model of Karpenter on the same workload.
    Simulate(simulate::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage::report_clap_error(&e),
    };
    let result = match cli.command {
        Command::Catalog(args) => catalog_cmd::run(&args),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Event(args) => event_cmd::run(&args),
        Command::Disrupt(args) => disrupt_cmd::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Simulate(args) => simulate::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<UsageError>() {
            Some(u) => {
                eprintln!("carpool: {u}");
                ExitCode::from(2)
            }
            None => {
                eprintln!("carpool: internal error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}
