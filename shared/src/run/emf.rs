//! CloudWatch metrics in Embedded Metric Format, the shape every function's metrics take:
//! one JSON object printed on its own line to stdout, which Lambda forwards to CloudWatch
//! Logs, where CloudWatch turns it into metrics. Written by hand: EMF is a small documented
//! JSON shape, and the crates that emit it are not maintained.

use serde_json::{Value, json};

use crate::model::EpochMillis;

/// The metrics namespace.
pub const NAMESPACE: &str = "Carpool";

/// An EMF object: `metrics` (name, unit, value) of `cluster` at `timestamp`, in the
/// [`NAMESPACE`] namespace under the `Cluster` dimension.
pub(crate) fn emf(cluster: &str, timestamp: EpochMillis, metrics: &[(&str, &str, Value)]) -> Value {
    emf_by(cluster, &[], timestamp, metrics)
}

/// [`emf`], the metrics under `Cluster` with the dimensions `by` (name, value) only: for
/// metrics that must not be summed into the cluster's (each NodePool's fleet, say).
pub(crate) fn emf_only_by(
    cluster: &str,
    by: &[(&str, &str)],
    timestamp: EpochMillis,
    metrics: &[(&str, &str, Value)],
) -> Value {
    let mut object = emf_by(cluster, by, timestamp, metrics);
    let dimensions = std::iter::once("Cluster")
        .chain(by.iter().map(|(k, _)| *k))
        .collect::<Vec<_>>();
    object["_aws"]["CloudWatchMetrics"][0]["Dimensions"] = json!([dimensions]);
    object
}

/// [`emf`], the metrics also under `Cluster` with the dimensions `by` (name, value),
/// e.g. `[("Kind", "spot_interruption")]`.
pub(crate) fn emf_by(
    cluster: &str,
    by: &[(&str, &str)],
    timestamp: EpochMillis,
    metrics: &[(&str, &str, Value)],
) -> Value {
    let mut dimensions = vec![vec!["Cluster"]];
    if !by.is_empty() {
        dimensions.push(std::iter::once("Cluster").chain(by.iter().map(|(k, _)| *k)).collect());
    }
    let mut object = json!({
        "_aws": {
            "Timestamp": timestamp,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": dimensions,
                "Metrics": metrics
                    .iter()
                    .map(|(name, unit, _)| json!({"Name": name, "Unit": unit}))
                    .collect::<Vec<_>>(),
            }],
        },
        "Cluster": cluster,
    });
    if let Some(fields) = object.as_object_mut() {
        for (name, value) in by {
            fields.insert((*name).to_string(), json!(value));
        }
        for (name, _, value) in metrics {
            fields.insert((*name).to_string(), value.clone());
        }
    }
    object
}
