//! `carpool disrupt`: what the consolidator would do now with a cluster dump, and why every
//! other node is kept.

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use anyhow::Result;
use carpool::catalog::Catalog;
use carpool::decide::disruption::{CandidateReport, DisruptionCommand, DisruptionInput, DisruptionSettings, decide};
use carpool::decide::provisioning::ami_requirements::{images_by_class_from_status, narrow_to_images};
use carpool::snapshot::Snapshot;
use clap::Args;
use serde::Serialize;

use crate::output::{say, say_raw};
use crate::plan_cmd::read_snapshots;
use crate::table;
use crate::usage::UsageError;

/// Arguments of `carpool disrupt`.
#[derive(Args, Debug)]
pub struct DisruptArgs {
    /// Cluster dumps, as `carpool plan` reads them (nodes, pods, PDBs, NodePools, EC2NodeClasses).
    #[arg(required = true, value_name = "SNAPSHOT")]
    snapshots: Vec<PathBuf>,
    /// The time to decide at (RFC 3339, e.g. 2026-12-02T12:00:00Z); by default the newest
    /// timestamp in the dump.
    #[arg(long, value_name = "RFC3339")]
    at: Option<String>,
    /// The AWS region whose catalog and prices to use.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct JsonDecision<'a> {
    command: &'a Option<DisruptionCommand>,
    candidates: &'a [CandidateReport],
    /// The time decided at.
    at: String,
    simulations: usize,
    elapsed_ms: f64,
}

/// The newest timestamp in the dump: node and pod creation, pod start, condition changes.
fn newest_timestamp(s: &Snapshot) -> Option<SystemTime> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut times: Vec<&Time> = Vec::new();
    for n in &s.nodes {
        times.extend(n.metadata.creation_timestamp.as_ref());
        if let Some(cs) = n.status.as_ref().and_then(|st| st.conditions.as_ref()) {
            times.extend(cs.iter().filter_map(|c| c.last_transition_time.as_ref()));
        }
    }
    for p in &s.pods {
        times.extend(p.metadata.creation_timestamp.as_ref());
        if let Some(st) = &p.status {
            times.extend(st.start_time.as_ref());
            times.extend(
                st.conditions
                    .iter()
                    .flatten()
                    .filter_map(|c| c.last_transition_time.as_ref()),
            );
        }
    }
    times.into_iter().map(|t| SystemTime::from(t.0)).max()
}

/// Runs `carpool disrupt`.
pub fn run(args: &DisruptArgs) -> Result<()> {
    let mut snapshot = read_snapshots(&args.snapshots)?;
    let catalog = Catalog::embedded()?;
    let mut region = catalog
        .region(&args.region)
        .map_err(|e| UsageError(format!("--region: {e}")))?;
    // Savings at the prices the user pays: the dump's NodeOverlays.
    let overlays = region.apply_overlays(&snapshot.nodeoverlays);
    for (object, reason) in overlays.skipped_objects() {
        eprintln!("carpool: {object} skipped: {reason}");
    }
    let images = images_by_class_from_status(&snapshot.nodeclasses);
    narrow_to_images(&mut snapshot.nodepools, &images, region.types());
    let now = match &args.at {
        Some(at) => at.parse::<jiff::Timestamp>().map(SystemTime::from).map_err(|e| {
            UsageError(format!(
                "--at: {at:?} is not an RFC 3339 time ({e}); write e.g. 2026-12-02T12:00:00Z"
            ))
        })?,
        None => newest_timestamp(&snapshot).unwrap_or_else(SystemTime::now),
    };
    let start = Instant::now();
    let decision = decide(&DisruptionInput {
        snapshot: &snapshot,
        region: &region,
        now,
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    });
    let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
    let at = jiff::Timestamp::try_from(now)
        .map(|t| t.to_string())
        .unwrap_or_default();
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&JsonDecision {
                command: &decision.command,
                candidates: &decision.candidates,
                at,
                simulations: decision.simulations,
                elapsed_ms,
            })?
        );
        return Ok(());
    }
    match &decision.command {
        None => say!("no disruption at {at}"),
        Some(c) => {
            say!(
                "{}: remove {} (${:.4}/h), saves ${:.4}/h",
                c.method,
                c.nodes.join(", "),
                c.removed_per_hour,
                c.savings_per_hour
            );
            for (i, r) in c.replacements.iter().enumerate() {
                say!(
                    "  replacement-{i}: {} {} {} ${:.4}/h ({} alternative(s)), NodePool {}",
                    r.instance_type,
                    r.zone,
                    r.capacity_type,
                    r.price_per_hour,
                    r.instance_types.len(),
                    r.nodepool
                );
            }
            for m in &c.moves {
                say!("  {} -> {}", m.pod, m.to);
            }
        }
    }
    say!();
    let rows: Vec<Vec<String>> = decision
        .candidates
        .iter()
        .map(|c| {
            vec![
                c.node.clone(),
                c.nodepool.clone(),
                format!("${:.4}", c.price_per_hour),
                if c.disruptable { "yes" } else { "no" }.to_string(),
                c.blocked_by
                    .as_ref()
                    .map(|b| {
                        format!(
                            "{}: {}",
                            serde_json::to_value(b.kind)
                                .ok()
                                .and_then(|v| v.as_str().map(String::from))
                                .unwrap_or_default(),
                            b.message
                        )
                    })
                    .unwrap_or_default(),
            ]
        })
        .collect();
    say_raw!(
        "{}",
        table::render(&["NODE", "NODEPOOL", "PRICE/H", "DISRUPTABLE", "WHY NOT"], &rows)
    );
    say!(
        "\ndecided at {at} in {elapsed_ms:.1} ms ({} simulation(s))",
        decision.simulations
    );
    Ok(())
}
