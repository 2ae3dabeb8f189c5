//! CloudWatch metrics in Embedded Metric Format: one JSON object per batch, printed on its
//! own line to stdout, which Lambda forwards to CloudWatch Logs, where CloudWatch turns it
//! into metrics. Written by hand: EMF is a small documented JSON shape, and the crates
//! that emit it are not maintained.

use serde_json::{Value, json};

use super::report::BatchReport;
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

#[cfg(test)]
mod tests {
    use super::*;

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
