//! CloudWatch metrics in Embedded Metric Format: one JSON object per batch, and one per
//! run for its housekeeping, each printed on its own line to stdout, which Lambda forwards to CloudWatch Logs, where CloudWatch turns it
//! into metrics. Written by hand: EMF is a small documented JSON shape, and the crates
//! that emit it are not maintained.

use serde_json::{Value, json};

use super::report::{BatchReport, HousekeepingReport};
use crate::ports::EpochMillis;

/// The metrics namespace.
pub const NAMESPACE: &str = "Carpool";

/// The EMF object for one batch of `cluster`, at `timestamp`.
pub fn batch_metrics(cluster: &str, timestamp: EpochMillis, batch: &BatchReport) -> Value {
    json!({
        "_aws": {
            "Timestamp": timestamp,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Cluster"]],
                "Metrics": [
                    {"Name": "PendingPods", "Unit": "Count"},
                    {"Name": "NodesLaunched", "Unit": "Count"},
                    {"Name": "LaunchErrors", "Unit": "Count"},
                    {"Name": "PlanMillis", "Unit": "Milliseconds"},
                    {"Name": "CostPerHourAdded", "Unit": "None"},
                ],
            }],
        },
        "Cluster": cluster,
        "PendingPods": batch.pods_seen,
        "NodesLaunched": batch.launched.len(),
        "LaunchErrors": batch.launch_errors.len(),
        "PlanMillis": batch.plan_ms,
        "CostPerHourAdded": batch.cost_per_hour_added,
    })
}

/// The EMF object for the housekeeping rounds of one run of `cluster`, at `timestamp`:
/// instances terminated, terminations held back by the per-round cap (the template alarms
/// on it), and launches in flight found lost (their pods planned again).
pub fn housekeeping_metrics(cluster: &str, timestamp: EpochMillis, rounds: &[HousekeepingReport]) -> Value {
    let sum = |f: fn(&HousekeepingReport) -> usize| rounds.iter().map(f).sum::<usize>();
    json!({
        "_aws": {
            "Timestamp": timestamp,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Cluster"]],
                "Metrics": [
                    {"Name": "InstancesTerminated", "Unit": "Count"},
                    {"Name": "TerminationsHeldBack", "Unit": "Count"},
                    {"Name": "LaunchesLost", "Unit": "Count"},
                ],
            }],
        },
        "Cluster": cluster,
        "InstancesTerminated": sum(|r| r.terminated.len()),
        "TerminationsHeldBack": sum(|r| r.held_back.len()),
        "LaunchesLost": sum(|r| r.lost.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn housekeeping_rounds_sum_into_one_emf_object() {
        let held = |n: usize| HousekeepingReport {
            held_back: (0..n).map(|i| (format!("i-{i}"), "r".to_string())).collect(),
            terminated: vec![("i-x".into(), "r".into())],
            ..HousekeepingReport::default()
        };
        let v = housekeeping_metrics("prod", 1, &[held(2), held(5)]);
        assert_eq!(v["TerminationsHeldBack"], 7);
        assert_eq!(v["InstancesTerminated"], 2);
        assert_eq!(v["LaunchesLost"], 0);
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Name"],
            "TerminationsHeldBack"
        );
    }

    #[test]
    fn a_batch_becomes_an_emf_object_with_the_five_metrics_under_the_cluster_dimension() {
        let batch = BatchReport {
            pods_seen: 50,
            plan_ms: 12,
            cost_per_hour_added: 0.384,
            ..BatchReport::default()
        };
        let v = batch_metrics("prod", 1_700_000_000_000, &batch);
        let names: Vec<&str> = v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "PendingPods",
                "NodesLaunched",
                "LaunchErrors",
                "PlanMillis",
                "CostPerHourAdded"
            ]
        );
        for name in names {
            assert!(v[name].is_number(), "{name} is a number at the top level");
        }
        assert_eq!(v["Cluster"], "prod");
        assert_eq!(v["PendingPods"], 50);
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000i64);
    }
}
