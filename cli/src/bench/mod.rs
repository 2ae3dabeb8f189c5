//! `carpool bench`: the planner's speed and cost, measured.
//!
//! - `schedule` reproduces Karpenter's scheduling benchmark (its pod mix, 400 instance
//!   types) and reports the planning time.
//! - `consolidate` times one consolidation decision over a generated cluster
//!   ([`consolidate`]).
//! - `interruption` handles one batch of spot warnings over a generated cluster and
//!   reports its apiserver requests and heap ([`interruption`]).
//! - `packing` runs a suite of scenarios and compares Carpool's plan with a Karpenter-style
//!   first-fit-decreasing baseline ([`ffd`]) and with the LP lower bound. Every plan, the
//!   baseline's too, must pass the independent checker.

mod consolidate;
pub(crate) mod ffd;
mod interruption;
mod provision;
mod scenarios;
mod vs_karpenter;

use std::time::Instant;

use anyhow::Result;
use carpool::catalog::Catalog;
use carpool::decide::checker::check;
use carpool::decide::provisioning::scheduler::Scheduler;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::output::{say, say_raw};
use crate::table;
use crate::usage::UsageError;

/// Arguments of `carpool bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Karpenter's scheduling benchmark: N pods in five classes on 400 instance types.
    Schedule {
        /// Pods to plan.
        #[arg(long, default_value_t = 5000)]
        pods: usize,
        /// Instance types in the NodePool.
        #[arg(long, default_value_t = 400)]
        instance_types: usize,
        /// Runs; the median time is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One provisioner run, as the Lambda makes it, on in-memory ports: N pending pods of
    /// the scheduling benchmark's mix are batched, planned, launched and recorded.
    Provision {
        /// Pending pods.
        #[arg(long, default_value_t = 5000)]
        pods: usize,
        /// Nodes already running (with `--running-pods` on them).
        #[arg(long, default_value_t = 0)]
        nodes: usize,
        /// Pods already running on those nodes.
        #[arg(long, default_value_t = 0)]
        running_pods: usize,
        /// Instance types in the NodePool.
        #[arg(long, default_value_t = 400)]
        instance_types: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One consolidation decision over a generated cluster of running pods.
    Consolidate {
        /// Nodes.
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        /// Running pods.
        #[arg(long, default_value_t = 20000)]
        pods: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One batch of spot warnings handled over a generated cluster: apiserver requests and heap.
    Interruption {
        /// Nodes.
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        /// Running pods.
        #[arg(long, default_value_t = 20000)]
        pods: usize,
        /// Spot warnings in the batch (each about one of the nodes).
        #[arg(long, default_value_t = 20)]
        warnings: usize,
        /// Each record reads the cluster for itself (as before one read was shared).
        #[arg(long)]
        per_record: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Karpenter's instance-types file (its kwok provider) for the side-by-side benchmark,
    /// and, from a scenario, the workload and both autoscalers' NodePools.
    KarpenterWorld(vs_karpenter::WorldArgs),
    /// The packing suite: Carpool against a Karpenter-style FFD baseline and the lower bound.
    Packing {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct ScheduleResult {
    pods: usize,
    instance_types: usize,
    elapsed_ms: f64,
    pods_per_sec: f64,
    nodes: usize,
    unschedulable: usize,
    cost_per_hour: f64,
    lower_bound_per_hour: f64,
    lower_bound_ms: f64,
    peak_rss_mib: Option<f64>,
}

#[derive(Serialize)]
struct PackingRow {
    scenario: &'static str,
    pods: usize,
    mixed: bool,
    carpool_cost: f64,
    ffd_cost: f64,
    lower_bound: f64,
    carpool_over_bound: f64,
    carpool_over_ffd: f64,
    carpool_ms: f64,
    carpool_nodes: usize,
    ffd_nodes: usize,
    checker_ok: bool,
}

/// Peak resident memory of this process, from `/proc/self/status` (Linux).
fn peak_rss_mib() -> Option<f64> {
    status_mib("VmHWM:")
}

/// The heap in use now, in MiB.
fn heap_mib() -> f64 {
    crate::HEAP.current_usage() as f64 / (1024.0 * 1024.0)
}

/// The heap's peak since the last [`reset_heap_peak`], in MiB.
fn heap_peak_mib() -> f64 {
    crate::HEAP.peak_usage() as f64 / (1024.0 * 1024.0)
}

/// Starts counting the heap's peak from now.
fn reset_heap_peak() {
    crate::HEAP.reset_peak_usage();
}

/// The resident memory now.
fn current_rss_mib() -> Option<f64> {
    status_mib("VmRSS:")
}

/// A `/proc/self/status` line in KiB, as MiB (Linux only; `None` elsewhere).
fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Resets the peak resident memory to the current one (Linux: writing 5 to
/// `/proc/self/clear_refs`); where it cannot, the peak keeps what came before.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs `carpool bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let catalog = Catalog::embedded()?;
    let region = catalog.region("us-east-1")?;
    match &args.command {
        BenchCommand::Schedule {
            pods,
            instance_types,
            runs,
            json,
        } => {
            if *pods == 0 || *runs == 0 || *instance_types == 0 {
                return Err(UsageError("--pods, --instance-types and --runs must be at least 1".into()).into());
            }
            let snapshot = scenarios::karpenter_mix(&region, *pods, *instance_types);
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..*runs {
                let start = Instant::now();
                let outcome = Scheduler::new(&snapshot, &region).run();
                times.push(start.elapsed().as_secs_f64() * 1000.0);
                last = Some(outcome);
            }
            let Some(outcome) = last else { return Ok(()) };
            let start = Instant::now();
            let bound = outcome.lower_bound();
            let lower_bound_ms = start.elapsed().as_secs_f64() * 1000.0;
            let elapsed_ms = median(times);
            let r = ScheduleResult {
                pods: *pods,
                instance_types: scenarios::instance_types(&region, *instance_types).len(),
                elapsed_ms,
                pods_per_sec: *pods as f64 / (elapsed_ms / 1000.0),
                nodes: outcome.plan.nodes.len(),
                unschedulable: outcome.plan.unschedulable.len(),
                cost_per_hour: outcome.plan.cost_per_hour,
                lower_bound_per_hour: bound,
                lower_bound_ms,
                peak_rss_mib: peak_rss_mib(),
            };
            if *json {
                say!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                say!(
                    "pods {}  instance types {}  elapsed {:.1} ms (median of {runs})  {:.0} pods/s\nnodes {}  unschedulable {}  cost ${:.4}/h  lower bound ${:.4}/h ({:.0} ms)  peak RSS {:.0} MiB",
                    r.pods,
                    r.instance_types,
                    r.elapsed_ms,
                    r.pods_per_sec,
                    r.nodes,
                    r.unschedulable,
                    r.cost_per_hour,
                    r.lower_bound_per_hour,
                    r.lower_bound_ms,
                    r.peak_rss_mib.unwrap_or(0.0)
                );
            }
        }
        BenchCommand::Provision {
            pods,
            nodes,
            running_pods,
            instance_types,
            json,
        } => {
            if *pods == 0 || *instance_types == 0 {
                return Err(UsageError("--pods and --instance-types must be at least 1".into()).into());
            }
            if *running_pods > 0 && *nodes == 0 {
                return Err(UsageError("--running-pods needs --nodes to run on: give --nodes N".into()).into());
            }
            let r = provision::run(&region, *pods, *instance_types, *nodes, *running_pods)?;
            if *json {
                say!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                say!(
                    "pods {}  running {} on {} nodes  batches {}  nodes {}  unschedulable {}  snapshot {:.0} ms  plan {:.0} ms  run {:.0} ms  cluster calls {}  cost ${:.4}/h  run heap peak {:.0} MiB  peak RSS {:.0} MiB (fakes {:.0} MiB)",
                    r.pods,
                    r.running_pods,
                    r.nodes_running,
                    r.batches,
                    r.nodes,
                    r.unschedulable,
                    r.snapshot_ms,
                    r.plan_ms,
                    r.run_ms,
                    r.cluster_calls,
                    r.cost_per_hour,
                    r.run_heap_peak_mib,
                    r.peak_rss_mib.unwrap_or(0.0),
                    r.fakes_rss_mib.unwrap_or(0.0)
                );
            }
        }
        BenchCommand::Consolidate { nodes, pods, json } => {
            if *nodes == 0 {
                return Err(UsageError("--nodes must be at least 1".into()).into());
            }
            let r = consolidate::run(&region, *nodes, *pods)?;
            if *json {
                say!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                say!(
                    "nodes {}  pods {}  elapsed {:.0} ms  method {}  removed {}  saves ${:.4}/h  simulations {}  peak RSS {:.0} MiB",
                    r.nodes,
                    r.pods,
                    r.elapsed_ms,
                    r.method.as_deref().unwrap_or("none"),
                    r.removed,
                    r.savings_per_hour,
                    r.simulations,
                    r.peak_rss_mib.unwrap_or(0.0)
                );
            }
        }
        BenchCommand::Interruption {
            nodes,
            pods,
            warnings,
            per_record,
            json,
        } => {
            if *warnings == 0 || warnings > nodes {
                return Err(UsageError("--warnings must be between 1 and --nodes".into()).into());
            }
            let r = interruption::run(&region, *nodes, *pods, *warnings, *per_record)?;
            if *json {
                say!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                say!(
                    "nodes {}  pods {}  warnings {}  {}  cluster calls {} (lists {})  drained {}  evicted {}  elapsed {:.0} ms  heap peak {:.0} MiB (fakes {:.0} MiB)",
                    r.nodes,
                    r.pods,
                    r.warnings,
                    if r.per_record {
                        "a read per record"
                    } else {
                        "one shared read"
                    },
                    r.cluster_calls,
                    r.cluster_lists,
                    r.drained,
                    r.evicted,
                    r.elapsed_ms,
                    r.heap_peak_mib,
                    r.fakes_heap_mib
                );
            }
        }
        BenchCommand::KarpenterWorld(world) => vs_karpenter::run(world, &region)?,
        BenchCommand::Packing { json } => {
            let mut rows = Vec::new();
            for s in scenarios::packing_suite() {
                let start = Instant::now();
                let outcome = Scheduler::new(&s.snapshot, &region).run();
                let carpool_ms = start.elapsed().as_secs_f64() * 1000.0;
                let bound = outcome.lower_bound();
                let baseline = ffd::plan(&s.snapshot, &region);
                let ours = &outcome.plan;
                let violations = check(&s.snapshot, &region, ours);
                let baseline_violations = check(&s.snapshot, &region, &baseline);
                for v in violations.iter().chain(&baseline_violations).take(5) {
                    eprintln!("{}: checker: {v}", s.name);
                }
                rows.push(PackingRow {
                    scenario: s.name,
                    pods: s.snapshot.pods.len(),
                    mixed: s.mixed,
                    carpool_cost: ours.cost_per_hour,
                    ffd_cost: baseline.cost_per_hour,
                    lower_bound: bound,
                    carpool_over_bound: ours.cost_per_hour / bound.max(1e-9),
                    carpool_over_ffd: ours.cost_per_hour / baseline.cost_per_hour.max(1e-9),
                    carpool_ms,
                    carpool_nodes: ours.nodes.len(),
                    ffd_nodes: baseline.nodes.len(),
                    checker_ok: violations.is_empty()
                        && baseline_violations.is_empty()
                        && ours.unschedulable.is_empty(),
                });
            }
            let median_over_bound = median(rows.iter().map(|r| r.carpool_over_bound).collect());
            let worst_vs_ffd = rows.iter().map(|r| r.carpool_over_ffd).fold(0.0, f64::max);
            let least_mixed_saving = rows
                .iter()
                .filter(|r| r.mixed)
                .map(|r| 1.0 - r.carpool_over_ffd)
                .fold(f64::INFINITY, f64::min);
            if *json {
                say!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "scenarios": rows,
                        "median_carpool_over_bound": median_over_bound,
                        "worst_carpool_over_ffd": worst_vs_ffd,
                        "least_saving_on_mixed": least_mixed_saving,
                    }))?
                );
            } else {
                let table_rows: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.scenario.to_string(),
                            r.pods.to_string(),
                            format!("${:.3}", r.carpool_cost),
                            format!("${:.3}", r.ffd_cost),
                            format!("${:.3}", r.lower_bound),
                            format!("{:.3}", r.carpool_over_bound),
                            format!("{:+.1}%", 100.0 * (r.carpool_over_ffd - 1.0)),
                            format!("{}/{}", r.carpool_nodes, r.ffd_nodes),
                            format!("{:.0}", r.carpool_ms),
                            if r.checker_ok { "ok".into() } else { "FAILED".into() },
                        ]
                    })
                    .collect();
                say_raw!(
                    "{}",
                    table::render(
                        &[
                            "SCENARIO",
                            "PODS",
                            "CARPOOL/H",
                            "FFD/H",
                            "BOUND/H",
                            "VS BOUND",
                            "VS FFD",
                            "NODES",
                            "MS",
                            "CHECK"
                        ],
                        &table_rows
                    )
                );
                say!(
                    "\nmedian cost / lower bound: {median_over_bound:.3}   worst cost / FFD: {worst_vs_ffd:.3}   least saving on mixed shapes: {:.1}%",
                    100.0 * least_mixed_saving
                );
            }
            if rows.iter().any(|r| !r.checker_ok) {
                anyhow::bail!("a plan failed the checker or left pods unschedulable (see above)");
            }
        }
    }
    Ok(())
}
