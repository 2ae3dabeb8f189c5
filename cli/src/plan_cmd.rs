//! `carpool plan`: the provisioning plan for a cluster dump.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use carpool::catalog::Catalog;
use carpool::decide::ProvisioningPlan;
use carpool::decide::provisioning::batch_plan::{FitTo, plan_dump};
use carpool::decide::provisioning::scheduler::Scheduler;
use carpool::decide::provisioning::selector::Selector;
use carpool::snapshot::Snapshot;
use clap::Args;
use serde::Serialize;

use crate::output::{say, say_raw};
use crate::table;
use crate::usage::UsageError;

/// Arguments of `carpool plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// Cluster dumps: `kubectl get pods,nodes,daemonsets,poddisruptionbudgets,nodepools.karpenter.sh,ec2nodeclasses.karpenter.k8s.aws -A -o json` (JSON or YAML, several allowed).
    #[arg(required = true, value_name = "SNAPSHOT")]
    snapshots: Vec<PathBuf>,
    /// The AWS region whose catalog and prices to use.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The NodePools that are Carpool's, as the deployment's `CARPOOL_NODEPOOL_SELECTOR`
    /// (a label selector, e.g. `carpool.sh/managed=true`); every NodePool by default.
    #[arg(long, value_name = "SELECTOR", default_value = "")]
    nodepool_selector: String,
    /// How the plan is fitted to kube-scheduler's own placement, as the provisioner does:
    /// `wave` (the default: a batch's nodes handed as one wave), `whole` (waves off), `off`
    /// (`CARPOOL_FIT_TO_SCHEDULER=false`).
    #[arg(long, value_enum, default_value_t = Fit::Wave)]
    fit: Fit,
}

/// `--fit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fit {
    /// Fitted to a launch wave handed biggest pods first.
    Wave,
    /// Fitted to nodes reaching the scheduler one by one.
    Whole,
    /// Not fitted.
    Off,
}

impl From<Fit> for FitTo {
    fn from(f: Fit) -> Self {
        match f {
            Fit::Wave => FitTo::HandedWave,
            Fit::Whole => FitTo::Whole,
            Fit::Off => FitTo::Off,
        }
    }
}

#[derive(Serialize)]
struct JsonPlan<'a> {
    #[serde(flatten)]
    plan: &'a ProvisioningPlan,
    /// Time to plan and fit, without the lower bound.
    elapsed_ms: f64,
    /// Time to compute the lower bound.
    lower_bound_ms: f64,
}

/// Reads the snapshot files into one snapshot; a bad file is a usage error.
pub fn read_snapshots(paths: &[PathBuf]) -> Result<Snapshot> {
    let mut snapshot = Snapshot::default();
    for path in paths {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            UsageError(format!(
                "{name}: cannot read: {e}; give the path of a kubectl JSON or YAML dump"
            ))
        })?;
        snapshot.add_text(&name, &text).map_err(|e| UsageError(e.to_string()))?;
    }
    Ok(snapshot)
}

/// Runs `carpool plan`.
pub fn run(args: &PlanArgs) -> Result<()> {
    let mut snapshot = read_snapshots(&args.snapshots)?;
    let catalog = Catalog::embedded()?;
    let mut region = catalog
        .region(&args.region)
        .map_err(|e| UsageError(format!("--region: {e}")))?;
    // The prices the user pays: the dump's NodeOverlays over the listed prices.
    let overlays = region.apply_overlays(&snapshot.nodeoverlays);
    snapshot.skipped.extend(overlays.skipped_objects());
    let selector =
        Selector::parse(&args.nodepool_selector).map_err(|e| UsageError(format!("--nodepool-selector: {e}")))?;
    // The dump cannot ask the cloud, but a Karpenter cluster's EC2NodeClasses record
    // their subnets and AMIs in `status`: they narrow the plan as the provisioner's
    // lookups do.
    let start = Instant::now();
    let (mut plan, narrowed) = plan_dump(snapshot, &region, &selector, args.fit.into());
    let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
    let start = Instant::now();
    plan.lower_bound_per_hour = Some(Scheduler::new(&narrowed, &region).run().lower_bound());
    let lower_bound_ms = start.elapsed().as_secs_f64() * 1000.0;
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&JsonPlan {
                plan: &plan,
                elapsed_ms,
                lower_bound_ms
            })?
        );
        return Ok(());
    }
    print_text(&plan, elapsed_ms, region.prices().is_estimated());
    Ok(())
}

fn percent(used: i64, of: i64) -> String {
    if of <= 0 {
        "-".into()
    } else {
        format!("{:.0}%", 100.0 * used as f64 / of as f64)
    }
}

fn print_text(plan: &ProvisioningPlan, elapsed_ms: f64, estimated: bool) {
    let pods_new: usize = plan.nodes.iter().map(|n| n.pods.len()).sum();
    let pods_existing: usize = plan.existing.iter().map(|e| e.pods.len()).sum();
    say!(
        "{} new node(s) for {pods_new} pod(s), {pods_existing} pod(s) on existing nodes, {} unschedulable",
        plan.nodes.len(),
        plan.unschedulable.len()
    );
    say!(
        "cost ${:.4}/h, lower bound ${:.4}/h{}",
        plan.cost_per_hour,
        plan.lower_bound_per_hour.unwrap_or(0.0),
        if estimated {
            " (prices estimated from us-east-1)"
        } else {
            ""
        }
    );
    if !plan.nodes.is_empty() {
        say!();
        let rows: Vec<Vec<String>> = plan
            .nodes
            .iter()
            .map(|n| {
                let used = n.requests.plus(&n.daemonset_overhead);
                vec![
                    n.nodepool.clone(),
                    n.instance_type.clone(),
                    n.zone.clone(),
                    n.capacity_type.to_string(),
                    format!("${:.4}", n.price_per_hour),
                    n.pods.len().to_string(),
                    percent(used.cpu_millis, n.allocatable.cpu_millis),
                    percent(used.memory, n.allocatable.memory),
                    n.instance_types.len().to_string(),
                ]
            })
            .collect();
        say_raw!(
            "{}",
            table::render(
                &[
                    "NODEPOOL",
                    "TYPE",
                    "ZONE",
                    "CAPACITY",
                    "PRICE/H",
                    "PODS",
                    "CPU",
                    "MEMORY",
                    "ALTERNATIVES"
                ],
                &rows
            )
        );
        say!();
        for (i, n) in plan.nodes.iter().enumerate() {
            say!("node {} ({} {}): {}", i + 1, n.instance_type, n.zone, n.pods.join(", "));
        }
    }
    if !plan.existing.is_empty() {
        say!("\non existing nodes:");
        for e in &plan.existing {
            say!("  {}: {}", e.node, e.pods.join(", "));
        }
    }
    if !plan.unschedulable.is_empty() {
        say!("\nunschedulable:");
        for u in &plan.unschedulable {
            say!("  {}: {}", u.pod, u.reason());
        }
    }
    if !plan.skipped.is_empty() {
        say!("\nskipped:");
        for s in &plan.skipped {
            say!("  {}: {}", s.object, s.reason);
        }
    }
    if !plan.zones_passed_over.is_empty() {
        say!("\nzones passed over:");
        for z in &plan.zones_passed_over {
            say!("  {}", z.reason());
        }
    }
    say!("\nplanned in {elapsed_ms:.1} ms");
}
