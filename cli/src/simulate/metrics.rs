//! What one strategy's run measured, and the report made of it.

use serde::Serialize;

/// Accumulated while simulating.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// USD.
    pub cost: f64,
    /// Instance-hours of spot.
    pub spot_node_hours: f64,
    /// Instance-hours of on-demand.
    pub on_demand_node_hours: f64,
    /// Requested cpu over time (millicore-seconds), on Ready nodes.
    pub cpu_requested: f64,
    /// Allocatable cpu over time.
    pub cpu_allocatable: f64,
    /// Requested memory over time (byte-seconds).
    pub memory_requested: f64,
    /// Allocatable memory over time.
    pub memory_allocatable: f64,
    /// Each pod's wait from creation to binding (and of those still pending at the end).
    pub pending_seconds: Vec<f64>,
    /// Pods still pending at the end.
    pub still_pending: usize,
    /// Spot interruption warnings issued.
    pub interruptions: u64,
    /// Warnings the autoscaler acted on.
    pub interruptions_handled: u64,
    /// Pods evicted by the autoscaler.
    pub evictions: u64,
    /// Pods that died with their instance.
    pub pods_killed: u64,
    /// Voluntary removals beyond what a PDB allowed.
    pub pdb_violations: u64,
    /// Bindings the independent checker rejected.
    pub constraint_violations: u64,
    /// Bindings checked.
    pub checked_bindings: u64,
    /// The first few rejections.
    pub violation_examples: Vec<String>,
    /// Instances that were not Nodes after the registration TTL.
    pub orphan_instances: u64,
    /// Instances launched.
    pub launches: u64,
    /// Launches kube-scheduler did not use as planned (Carpool only).
    pub launches_not_as_planned: u64,
    /// Runs of the autoscaler that failed (the next run resumes).
    pub run_errors: u64,
    /// Pods bound, in order (for the planned-vs-bound comparison).
    pub bound: Vec<String>,
    /// (hour, instances, USD per hour), every 5 minutes.
    pub series: Vec<(f64, f64, f64)>,
}

/// A quantile of a sample (nearest rank).
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// One strategy's figures.
#[derive(Clone, Debug, Serialize)]
pub struct StrategyReport {
    /// USD over the run.
    pub total_cost: f64,
    /// The most USD per hour at any sample of the run (every 5 minutes): the fleet at
    /// the peak, to compare with `bench/vs-karpenter`'s provisioning phase.
    pub peak_cost_per_hour: f64,
    /// Instance-hours of spot.
    pub spot_node_hours: f64,
    /// Instance-hours of on-demand.
    pub on_demand_node_hours: f64,
    /// Average requested over allocatable cpu on Ready nodes.
    pub avg_cpu_utilisation: f64,
    /// The same for memory.
    pub avg_memory_utilisation: f64,
    /// Pod pending time, median (seconds).
    pub pending_p50_s: f64,
    /// Pod pending time, 99th percentile.
    pub pending_p99_s: f64,
    /// Pods still pending at the end.
    pub still_pending: usize,
    /// Spot interruption warnings issued.
    pub interruptions: u64,
    /// Warnings acted on.
    pub interruptions_handled: u64,
    /// Pods evicted by the autoscaler.
    pub evictions: u64,
    /// Pods that died with their instance.
    pub pods_killed: u64,
    /// PDB violations (must be 0).
    pub pdb_violations: u64,
    /// Bindings the independent checker rejected (must be 0).
    pub constraint_violations: u64,
    /// Bindings checked by it.
    pub checked_bindings: u64,
    /// The first few rejections.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violation_examples: Vec<String>,
    /// Instances not Nodes after the registration TTL (must be 0).
    pub orphan_instances: u64,
    /// Instances launched.
    pub launches: u64,
    /// Launches kube-scheduler did not use as planned: a pod planned for the node was
    /// bound elsewhere (Carpool only: the baselines keep no plan).
    pub launches_not_as_planned: u64,
    /// Runs that failed.
    pub run_errors: u64,
}

impl StrategyReport {
    /// The report of what was measured.
    pub fn of(m: &Metrics) -> Self {
        let share = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        StrategyReport {
            total_cost: m.cost,
            peak_cost_per_hour: m.series.iter().map(|p| p.2).fold(0.0, f64::max),
            spot_node_hours: m.spot_node_hours,
            on_demand_node_hours: m.on_demand_node_hours,
            avg_cpu_utilisation: share(m.cpu_requested, m.cpu_allocatable),
            avg_memory_utilisation: share(m.memory_requested, m.memory_allocatable),
            pending_p50_s: quantile(&m.pending_seconds, 0.5),
            pending_p99_s: quantile(&m.pending_seconds, 0.99),
            still_pending: m.still_pending,
            interruptions: m.interruptions,
            interruptions_handled: m.interruptions_handled,
            evictions: m.evictions,
            pods_killed: m.pods_killed,
            pdb_violations: m.pdb_violations,
            constraint_violations: m.constraint_violations,
            checked_bindings: m.checked_bindings,
            violation_examples: m.violation_examples.clone(),
            orphan_instances: m.orphan_instances,
            launches: m.launches,
            launches_not_as_planned: m.launches_not_as_planned,
            run_errors: m.run_errors,
        }
    }
}
