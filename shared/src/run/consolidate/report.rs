//! What a consolidator run did: one summary line per run, and its EMF metrics.

use serde::Serialize;
use serde_json::{Value, json};

use crate::decide::disruption::{BlockKind, DisruptionCommand, DisruptionDecision};
use crate::ports::EpochMillis;
use crate::run::emf::emf_by;

/// A consolidation undone, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RolledBack {
    /// Its nodes.
    pub nodes: Vec<String>,
    /// Why.
    pub reason: String,
}

/// One run's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConsolidationReport {
    /// Another run held the lease.
    pub lease_held_by: Option<String>,
    /// Nodes considered.
    pub candidates: usize,
    /// Nodes a method could have disrupted.
    pub disruptable: usize,
    /// Nodes kept by a PDB.
    pub blocked_by_pdb: usize,
    /// Nodes kept by a budget.
    pub blocked_by_budget: usize,
    /// The first command started this run (in dry run, the one it would start).
    pub command: Option<DisruptionCommand>,
    /// Every command started this run, in order.
    #[serde(default)]
    pub commands: Vec<DisruptionCommand>,
    /// Why the command decided was not started.
    pub abandoned: Option<String>,
    /// The nodes whose disruption this run started.
    pub started: Vec<String>,
    /// Each disruption advanced, and where it stands.
    pub steps: Vec<(String, String)>,
    /// Consolidations rolled back.
    pub rolled_back: Vec<RolledBack>,
    /// Pods evicted this run.
    pub evicted: usize,
    /// Pods whose eviction was refused at the end of this run's drains.
    pub blocked: Vec<String>,
    /// Nodes terminated this run.
    pub nodes_consolidated: usize,
    /// The run's length.
    pub elapsed_ms: u64,
}

impl ConsolidationReport {
    /// Counts what the decision saw.
    pub fn record_decision(&mut self, d: &DisruptionDecision) {
        self.candidates = d.candidates.len();
        self.disruptable = d.candidates.iter().filter(|c| c.disruptable).count();
        let kind = |k| {
            d.candidates
                .iter()
                .filter(|c| c.blocked_by.as_ref().is_some_and(|b| b.kind == k))
                .count()
        };
        self.blocked_by_pdb = kind(BlockKind::Pdb);
        self.blocked_by_budget = kind(BlockKind::Budget);
    }

    /// The summary line (`consolidator run`), at info.
    pub fn log(&self) {
        let command = self.command.as_ref();
        tracing::info!(
            candidates = self.candidates,
            disruptable = self.disruptable,
            method = command.map_or("none", |c| c.method.name()),
            nodes = ?command.map(|c| c.nodes.clone()).unwrap_or_default(),
            replacements = ?command
                .map(|c| c.replacements.iter().map(|r| format!("{} {} {}", r.instance_type, r.zone, r.capacity_type)).collect::<Vec<_>>())
                .unwrap_or_default(),
            savings_per_hour = command.map_or(0.0, |c| c.savings_per_hour),
            abandoned = self.abandoned.as_deref().unwrap_or(""),
            steps = ?self.steps,
            rolled_back = ?self.rolled_back,
            evicted = self.evicted,
            nodes_consolidated = self.nodes_consolidated,
            blocked_by_pdb = self.blocked_by_pdb,
            blocked_by_budget = self.blocked_by_budget,
            elapsed_ms = self.elapsed_ms,
            "consolidator run"
        );
    }

    /// The run's EMF object: `NodesConsolidated`, `SavingsPerHour` (of the command
    /// started), `BlockedByPdb`, `BlockedByBudget`, `RolledBack`.
    pub fn metrics(&self, cluster: &str, timestamp: EpochMillis) -> Value {
        let metrics = [
            ("NodesConsolidated", "Count", json!(self.nodes_consolidated)),
            (
                "SavingsPerHour",
                "None",
                json!(self.command.as_ref().map_or(0.0, |c| c.savings_per_hour)),
            ),
            ("BlockedByPdb", "Count", json!(self.blocked_by_pdb)),
            ("BlockedByBudget", "Count", json!(self.blocked_by_budget)),
            ("RolledBack", "Count", json!(self.rolled_back.len())),
        ];
        emf_by(cluster, &[], timestamp, &metrics)
    }
}
