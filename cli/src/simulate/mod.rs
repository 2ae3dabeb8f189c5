//! `carpool simulate`: the whole autoscaler on a scenario, in simulated time, against two
//! baselines on the same workload.
//!
//! - [`scenario`]: the scenario file (workloads, NodePools, node groups, world rates);
//! - [`workload`]: the pods of each workload and their Kubernetes objects;
//! - [`node`]: a node as the scheduler sees it, and its Node object;
//! - [`kube_scheduler`]: the simulated kube-scheduler (filters and default scores);
//! - [`world`]: controllers, kubelets, spot interruptions, capacity outages, measures,
//!   and the independent checker over every binding;
//! - [`carpool_strategy`]: Carpool's real runs over the in-memory ports, on a virtual clock;
//! - [`baseline`], [`node_groups`], [`karpenter`]: the Cluster Autoscaler and Karpenter
//!   models;
//! - [`metrics`]: what is measured and reported; [`plot`]: the SVG chart; [`rng`]: the
//!   seeded random sequence.

mod baseline;
mod carpool_strategy;
mod karpenter;
mod kube_scheduler;
mod metrics;
mod node;
mod node_groups;
mod plot;
mod rng;
mod scenario;
mod workload;
mod world;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use carpool::catalog::Catalog;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use self::metrics::StrategyReport;
use self::scenario::Scenario;
use self::world::World;
use crate::output::say;
use crate::usage::UsageError;

/// Arguments of `carpool simulate`.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The scenario file (YAML; see examples/scenarios/README.md).
    scenario: PathBuf,
    /// Hours to simulate (default: the scenario's, else 24).
    #[arg(long)]
    hours: Option<f64>,
    /// The seed of every random draw: the same seed gives the same report.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write an SVG chart of nodes and cost per hour over time, one line per strategy.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(Serialize)]
struct Baselines {
    node_groups: StrategyReport,
    karpenter_model: StrategyReport,
}

#[derive(Serialize)]
struct Report {
    scenario: String,
    description: String,
    hours: f64,
    seed: u64,
    #[serde(flatten)]
    carpool: StrategyReport,
    savings_vs_node_groups_pct: f64,
    savings_vs_karpenter_model_pct: f64,
    baselines: Baselines,
}

fn saving(ours: f64, theirs: f64) -> f64 {
    if theirs > 0.0 {
        100.0 * (1.0 - ours / theirs)
    } else {
        0.0
    }
}

/// Runs `carpool simulate`.
pub fn run(args: &SimulateArgs) -> Result<()> {
    let scenario = Scenario::load(&args.scenario).map_err(|e| UsageError(e.to_string()))?;
    let hours = args.hours.unwrap_or(scenario.hours);
    if !(hours > 0.0 && hours <= 24.0 * 31.0) {
        return Err(UsageError(format!(
            "--hours must be above 0 and at most 744 (31 days), not {hours}"
        ))
        .into());
    }
    if let Some(p) = &args.plot
        && let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(UsageError(format!(
            "--plot {}: directory {} does not exist; create it or write elsewhere",
            p.display(),
            dir.display()
        ))
        .into());
    }
    let catalog = Catalog::embedded()?;
    let mut region = catalog.region("us-east-1")?;
    // Only the types a NodePool or a node group of the scenario allows can be launched;
    // the others are dropped so that every plan does not read them again.
    let mut snapshot = carpool::snapshot::Snapshot::default();
    let objects = scenario
        .nodepools
        .iter()
        .chain(&scenario.ec2nodeclasses)
        .chain(&scenario.nodeoverlays)
        .cloned()
        .collect();
    snapshot
        .add_text(
            "nodepools, ec2nodeclasses and nodeoverlays",
            &World::list(objects).to_string(),
        )
        .map_err(|e| {
            UsageError(format!(
                "scenario {}: {e} (write them as Karpenter's own NodePool, EC2NodeClass and NodeOverlay objects)",
                args.scenario.display()
            ))
        })?;
    // The prices the user pays, for every strategy: Carpool's runs read the same
    // NodeOverlays from their cluster and apply them again, to the same effect. An overlay
    // that cannot apply is the scenario's error: a simulation that silently priced at
    // list prices would mislead.
    let overlays = region.apply_overlays(&snapshot.nodeoverlays);
    let skipped: Vec<String> = snapshot
        .skipped
        .iter()
        .filter(|(o, _)| o.starts_with("NodeOverlay/"))
        .cloned()
        .chain(overlays.skipped_objects())
        .map(|(o, r)| format!("{o}: {r}"))
        .collect();
    if !skipped.is_empty() {
        return Err(UsageError(format!(
            "scenario {}: {}; fix the NodeOverlay or remove it",
            args.scenario.display(),
            skipped.join("; ")
        ))
        .into());
    }
    if snapshot.nodepools.is_empty() || snapshot.nodeclasses.is_empty() {
        let why: Vec<String> = snapshot.skipped.iter().map(|(o, r)| format!("{o}: {r}")).collect();
        return Err(UsageError(format!(
            "scenario {}: no valid NodePool with its EC2NodeClass ({}); fix the Karpenter objects",
            args.scenario.display(),
            why.join("; ")
        ))
        .into());
    }
    let (templates, _) =
        carpool::decide::provisioning::templates::build(&snapshot.nodepools, &snapshot.nodeclasses, &region, &[], &[]);
    let mut keep: std::collections::BTreeSet<String> = templates
        .iter()
        .flat_map(|t| t.types.iter().map(|o| o.instance_type.name.clone()))
        .collect();
    for g in &scenario.node_groups {
        if !region.types().iter().any(|t| t.name == g.instance_type) {
            return Err(UsageError(format!(
                "scenario {}: node group {} names instance type {:?}, which the catalog does not have in us-east-1; pick one `carpool catalog` lists",
                args.scenario.display(),
                g.name,
                g.instance_type
            ))
            .into());
        }
        keep.insert(g.instance_type.clone());
    }
    region.retain_types(|t| keep.contains(&t.name));
    let seconds = hours * 3600.0;
    let minutes = (seconds / 60.0).ceil() as u64;
    let bar = if args.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(Some(minutes * 3), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} simulated minutes ({elapsed})")
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .progress_chars("=> "),
        );
        b
    };
    let new_world = || World::new(&region, &scenario, args.seed).map_err(|e| UsageError(format!("scenario: {e}")));
    let started = Instant::now();

    // Carpool on one thread, the two baselines on another: the same worlds, the same
    // seed, whatever runs when.
    bar.set_message("simulating");
    let (carpool, groups, karp, carpool_s, baselines_s) = std::thread::scope(|scope| {
        let ours = scope.spawn(|| {
            let start = Instant::now();
            let world = new_world()?;
            let out = carpool_strategy::run(&region, world, seconds, &mut |_| bar.inc(1));
            out.map(|w| (w, start.elapsed().as_secs_f64()))
        });
        let start = Instant::now();
        let theirs = (|| -> Result<_> {
            let mut ca = node_groups::NodeGroups::new(&scenario.node_groups);
            let groups = baseline::run(new_world()?, &mut ca, seconds, &mut |_| bar.inc(1));
            let mut k = karpenter::Karpenter::new(&scenario.nodepools, &scenario.ec2nodeclasses);
            let karp = baseline::run(new_world()?, &mut k, seconds, &mut |_| bar.inc(1));
            Ok((groups, karp))
        })();
        let baselines_s = start.elapsed().as_secs_f64();
        let (carpool, carpool_s) = ours
            .join()
            .map_err(|_| anyhow::anyhow!("the simulation of Carpool panicked"))??;
        let (groups, karp) = theirs?;
        Ok::<_, anyhow::Error>((carpool, groups, karp, carpool_s, baselines_s))
    })?;
    if std::env::var_os("CARPOOL_SIM_DEBUG").is_some() {
        eprintln!("carpool {carpool_s:.1} s, baselines {baselines_s:.1} s");
    }
    bar.finish_and_clear();

    let name = args
        .scenario
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let ours = StrategyReport::of(&carpool.metrics);
    let report = Report {
        scenario: name.clone(),
        description: scenario.description.clone(),
        hours,
        seed: args.seed,
        savings_vs_node_groups_pct: saving(ours.total_cost, groups.metrics.cost),
        savings_vs_karpenter_model_pct: saving(ours.total_cost, karp.metrics.cost),
        carpool: ours,
        baselines: Baselines {
            node_groups: StrategyReport::of(&groups.metrics),
            karpenter_model: StrategyReport::of(&karp.metrics),
        },
    };
    if let Some(path) = &args.plot {
        plot::write(
            path,
            &format!("{name}: nodes and cost per hour (seed {})", args.seed),
            &[
                plot::Series {
                    name: "carpool",
                    points: &carpool.metrics.series,
                },
                plot::Series {
                    name: "node groups (Cluster Autoscaler)",
                    points: &groups.metrics.series,
                },
                plot::Series {
                    name: "model of Karpenter",
                    points: &karp.metrics.series,
                },
            ],
        )
        .map_err(|e| anyhow::anyhow!("writing the plot {}: {e}", path.display()))?;
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print_text(&report, started.elapsed().as_secs_f64());
    if let Some(p) = &args.plot {
        say!("plot written to {}", p.display());
    }
    Ok(())
}

fn print_text(r: &Report, elapsed: f64) {
    say!(
        "scenario {} ({})  {} simulated hours  seed {}  ({elapsed:.1} s)\n",
        r.scenario,
        r.description,
        r.hours,
        r.seed
    );
    let rows: Vec<(&str, &StrategyReport)> = vec![
        ("carpool", &r.carpool),
        ("node groups", &r.baselines.node_groups),
        ("model of karpenter", &r.baselines.karpenter_model),
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(n, s)| {
            vec![
                n.to_string(),
                format!("${:.2}", s.total_cost),
                format!("{:.1}/{:.1}", s.spot_node_hours, s.on_demand_node_hours),
                format!(
                    "{:.0}%/{:.0}%",
                    100.0 * s.avg_cpu_utilisation,
                    100.0 * s.avg_memory_utilisation
                ),
                format!("{:.0}/{:.0}", s.pending_p50_s, s.pending_p99_s),
                format!("{}/{}", s.interruptions_handled, s.interruptions),
                format!("{}/{}", s.evictions, s.pods_killed),
                s.pdb_violations.to_string(),
                s.launches.to_string(),
            ]
        })
        .collect();
    crate::output::say_raw!(
        "{}",
        crate::table::render(
            &[
                "STRATEGY",
                "COST",
                "NODE-H SPOT/OD",
                "CPU/MEM UTIL",
                "PENDING P50/P99 S",
                "INTERRUPTIONS",
                "EVICTED/KILLED",
                "PDB VIOLATIONS",
                "LAUNCHES"
            ],
            &table
        )
    );
    say!(
        "\ncarpool saves {:.1}% against node groups (Cluster Autoscaler) and {:.1}% against a model of Karpenter (FFD + consolidation; bench/vs-karpenter measures the real one)",
        r.savings_vs_node_groups_pct,
        r.savings_vs_karpenter_model_pct
    );
    say!(
        "carpool: {} launches, {} not used by kube-scheduler as planned; {} pods still pending at the end; {} bindings checked, {} constraint violations; {} instances not Nodes after the registration TTL; {} failed runs",
        r.carpool.launches,
        r.carpool.launches_not_as_planned,
        r.carpool.still_pending,
        r.carpool.checked_bindings,
        r.carpool.constraint_violations,
        r.carpool.orphan_instances,
        r.carpool.run_errors
    );
    for v in &r.carpool.violation_examples {
        say!("  violation: {v}");
    }
}
