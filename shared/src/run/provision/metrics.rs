//! CloudWatch metrics in Embedded Metric Format: one JSON object per batch, one per run
//! for its housekeeping and one for its transient errors, each printed on its own line to stdout, which Lambda forwards to CloudWatch Logs, where CloudWatch turns it
//! into metrics. Written by hand: EMF is a small documented JSON shape, and the crates
//! that emit it are not maintained.

use serde_json::{Value, json};

use super::report::{BatchReport, HousekeepingReport, RunReport};
use crate::decide::status::fleet::FleetLine;
use crate::ports::EpochMillis;
use crate::run::emf::{emf, emf_only_by};

/// The EMF object for one batch of `cluster`, at `timestamp`.
pub fn batch_metrics(cluster: &str, timestamp: EpochMillis, batch: &BatchReport) -> Value {
    let mut metrics = vec![
        ("PendingPods", "Count", json!(batch.pods_seen)),
        ("NodesLaunched", "Count", json!(batch.launched.len())),
        ("LaunchErrors", "Count", json!(batch.launch_errors.len())),
        ("PlanMillis", "Milliseconds", json!(batch.plan_ms)),
        ("CostPerHourAdded", "None", json!(batch.cost_per_hour_added)),
        ("LaunchBackoffs", "Count", json!(batch.launch_backoffs())),
    ];
    // Every pod's wait from its creation to its node's CreateFleet, as values (EMF takes
    // up to 100 per metric, and none is no value), for the dashboard's percentiles.
    if !batch.pending_to_fleet_ms.is_empty() {
        metrics.push((
            "PendingToLaunchMillis",
            "Milliseconds",
            json!(batch.pending_to_fleet_ms.iter().take(100).collect::<Vec<_>>()),
        ));
    }
    emf(cluster, timestamp, &metrics)
}

/// The EMF objects of the fleet a run found: per NodePool and capacity type, `Nodes` and
/// `FleetCostPerHour` (USD per hour, NodeOverlays included) under `Cluster`, `NodePool`
/// and `CapacityType` only; and the whole fleet's, `FleetNodes` and `FleetCostPerHour`,
/// under `Cluster`. Emitted every provisioner run, so that a NodePool's line is a gauge.
/// Nothing when the fleet is unknown (the run could not read it): no data, rather than a
/// false zero.
pub fn fleet_metrics(cluster: &str, timestamp: EpochMillis, fleet: &[FleetLine]) -> Vec<Value> {
    if fleet.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Value> = fleet
        .iter()
        .map(|l| {
            emf_only_by(
                cluster,
                &[("NodePool", &l.nodepool), ("CapacityType", &l.capacity_type)],
                timestamp,
                &[
                    ("Nodes", "Count", json!(l.nodes)),
                    ("FleetCostPerHour", "None", json!(l.cost_per_hour)),
                ],
            )
        })
        .collect();
    out.push(emf(
        cluster,
        timestamp,
        &[
            (
                "FleetNodes",
                "Count",
                json!(fleet.iter().map(|l| l.nodes).sum::<usize>()),
            ),
            (
                "FleetCostPerHour",
                "None",
                json!(fleet.iter().map(|l| l.cost_per_hour).sum::<f64>()),
            ),
        ],
    ));
    out
}

/// The EMF object for the housekeeping rounds of one run of `cluster`, at `timestamp`:
/// instances terminated, terminations held back by the per-round cap (the template alarms
/// on it), launches in flight found lost (their pods planned again), instances that did
/// not become Nodes within the registration TTL (`RegistrationFailures`) and the backoffs
/// those set (`LaunchBackoffs`, also counted per batch), under the `Cluster` dimension.
pub fn housekeeping_metrics(cluster: &str, timestamp: EpochMillis, rounds: &[HousekeepingReport]) -> Value {
    let sum = |f: fn(&HousekeepingReport) -> usize| json!(rounds.iter().map(f).sum::<usize>());
    emf(
        cluster,
        timestamp,
        &[
            ("InstancesTerminated", "Count", sum(|r| r.terminated.len())),
            ("TerminationsHeldBack", "Count", sum(|r| r.held_back.len())),
            ("LaunchesLost", "Count", sum(|r| r.lost.len())),
            ("RegistrationFailures", "Count", sum(|r| r.not_registered.len())),
            ("LaunchBackoffs", "Count", sum(|r| r.backoffs_set.len())),
        ],
    )
}

/// The EMF object for one run of `cluster`, at `timestamp`: the steps it went on past
/// (`TransientErrors`: a failed poll, housekeeping round or batch, each after the
/// adapters' retries) and the requests it sent the apiserver (`ApiserverRequests`).
pub fn run_metrics(cluster: &str, timestamp: EpochMillis, report: &RunReport) -> Value {
    emf(
        cluster,
        timestamp,
        &[
            ("TransientErrors", "Count", json!(report.transient_errors.len())),
            ("ApiserverRequests", "Count", json!(report.apiserver_requests)),
        ],
    )
}

/// The EMF object for items of `cluster`'s state table that do not read (`PoisonItems`),
/// skipped by the store, at `timestamp`.
pub fn poison_item_metrics(cluster: &str, timestamp: EpochMillis, items: usize) -> Value {
    emf(cluster, timestamp, &[("PoisonItems", "Count", json!(items))])
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
    fn a_batch_becomes_an_emf_object_with_its_metrics_under_the_cluster_dimension() {
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
                "CostPerHourAdded",
                "LaunchBackoffs"
            ]
        );
        let launched = BatchReport {
            pending_to_fleet_ms: vec![900, 1_200],
            ..batch.clone()
        };
        let v = batch_metrics("prod", 1_700_000_000_000, &launched);
        assert_eq!(v["PendingToLaunchMillis"], json!([900, 1_200]));
        for name in names {
            assert!(v[name].is_number(), "{name} is a number at the top level");
        }
        assert_eq!(v["Cluster"], "prod");
        assert_eq!(v["PendingPods"], 50);
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000i64);
    }

    #[test]
    fn a_housekeeping_round_counts_its_registration_failures() {
        let round = HousekeepingReport {
            not_registered: vec![("web".into(), "the node did not register within 900s".into())],
            ..HousekeepingReport::default()
        };
        let v = housekeeping_metrics("prod", 1_700_000_000_000, std::slice::from_ref(&round));
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            crate::run::emf::NAMESPACE
        );
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][0], "Cluster");
        assert_eq!(v["RegistrationFailures"], 1);
        assert_eq!(v["LaunchBackoffs"], 0);
    }
}
