//! The interruption function's CloudWatch metrics, in Embedded Metric Format (see
//! [`crate::run::provision::metrics`]): one object per handled instance.
//!
//! - `InterruptionsHandled` (Count), under `Cluster` and under `Cluster` + `Kind`
//!   (`spot_interruption`, `rebalance_recommendation`, `state_change`,
//!   `scheduled_change`, `scheduled` for a sweep's resumed drain);
//! - `DrainSeconds` (Seconds): the time this invocation spent draining;
//! - `EvictionsDone` (Count) and `BlockedEvictions` (Count): the pods evicted, and
//!   those still refused when the invocation's drain ended.

use serde_json::{Value, json};

use super::EventReport;
use crate::ports::EpochMillis;
use crate::run::emf::emf_by;

/// The EMF object for one instance's handling, or `None` for an event that was ignored,
/// a duplicate, or not Carpool's (nothing was handled).
pub fn event_metrics(cluster: &str, timestamp: EpochMillis, report: &EventReport) -> Option<Value> {
    use super::Outcome;
    if matches!(
        report.outcome,
        Outcome::Ignored { .. } | Outcome::Duplicate | Outcome::NotOwned { .. } | Outcome::DryRun { .. }
    ) {
        return None;
    }
    let metrics = [
        ("InterruptionsHandled", "Count", json!(1)),
        ("DrainSeconds", "Seconds", json!(report.drain_seconds)),
        ("EvictionsDone", "Count", json!(report.evicted)),
        ("BlockedEvictions", "Count", json!(report.blocked.len())),
    ];
    Some(emf_by(cluster, &[("Kind", report.kind.as_str())], timestamp, &metrics))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::interruption::EventKind;
    use crate::run::disruption::Outcome;

    #[test]
    fn a_drained_spot_node_counts_under_its_kind_with_its_drain_time_and_blocked_pods() {
        let mut report = EventReport::new(
            "e-1",
            EventKind::SpotInterruption,
            "disrupt",
            Some("i-1"),
            Outcome::CleanedUp,
        );
        report.drain_seconds = 12.5;
        report.evicted = 7;
        report.blocked = vec!["web/api-0: budget".into()];
        let v = event_metrics("prod", 1, &report).unwrap();
        assert_eq!(v["Kind"], "spot_interruption");
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Dimensions"][1][1], "Kind");
        assert_eq!(v["DrainSeconds"], 12.5);
        assert_eq!(v["EvictionsDone"], 7);
        assert_eq!(v["BlockedEvictions"], 1);
        assert_eq!(v["InterruptionsHandled"], 1);
    }

    #[test]
    fn an_ignored_or_duplicate_event_is_not_counted_as_handled() {
        for outcome in [Outcome::Duplicate, Outcome::Ignored { reason: "x".into() }] {
            let report = EventReport::new("e-1", EventKind::Unknown, "ignore", None, outcome);
            assert!(event_metrics("prod", 1, &report).is_none());
        }
    }
}
