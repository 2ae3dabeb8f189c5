//! When a node's pods last changed: the time `consolidateAfter` counts from, as
//! Karpenter's `NodeClaim.status.lastPodEventTime` (kubernetes-sigs/karpenter
//! `pkg/controllers/nodeclaim/podevents/controller.go`, `Controller.Reconcile`: a pod
//! scheduled to the node, at its `PodScheduled` transition; a pod going terminal or
//! terminating, at the time it is seen so).
//!
//! Carpool has no controller watching pods, so it reads what a snapshot shows and keeps
//! the rest on the Node, where `kubectl get node -o yaml` shows it:
//! - a pod bound to the node counts from its start (or creation);
//! - a pod terminating counts from the start of its termination: its `deletionTimestamp`
//!   less its `deletionGracePeriodSeconds`, exact;
//! - a pod that left between two runs, unseen while it terminated, counts from the run
//!   that saw it gone (never earlier than it was: a node is never consolidated early).
//!
//! The consolidator writes [`PODS_ANNOTATION`] (the node's pods, by the first 8
//! characters of their UIDs, sorted) and [`LAST_POD_EVENT_ANNOTATION`] (the time, RFC
//! 3339) whenever either changes ([`LastPodEvent::record`]); the next run compares.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;

use crate::decide::disruption::drain::{DrainRules, StayReason, stay_reason};
use crate::model::MetadataPatch;
use crate::model::pod::Pod;
use crate::model::time::kube_time;
pub use crate::model::well_known::{LAST_POD_EVENT_ANNOTATION, PODS_ANNOTATION};

/// A node's last pod event, and what to record on the Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastPodEvent {
    /// When the node's pods last changed (its creation when they never did).
    pub at: Option<SystemTime>,
    /// The annotations to write, when they differ from the node's.
    pub record: Option<MetadataPatch>,
}

fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// A pod's token in [`PODS_ANNOTATION`]: the first 8 characters of its UID (its
/// `namespace/name` when it has none).
fn token(pod: &Pod) -> String {
    match pod.metadata.uid.as_deref() {
        Some(uid) => uid.chars().take(8).collect(),
        None => format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// When a terminating pod's termination began.
fn termination_began(pod: &Pod) -> Option<SystemTime> {
    let deletion = time(pod.metadata.deletion_timestamp.as_ref()?);
    let grace = u64::try_from(pod.metadata.deletion_grace_period_seconds.unwrap_or(0)).unwrap_or(0);
    Some(deletion.checked_sub(Duration::from_secs(grace)).unwrap_or(deletion))
}

/// The last pod event of `node`, whose pods are `on_node`, at `now`.
pub fn last_pod_event(node: &Node, on_node: &[&Pod], now: SystemTime) -> LastPodEvent {
    let created = node.metadata.creation_timestamp.as_ref().map(time);
    let mut bound = BTreeSet::new();
    let mut leaving = BTreeSet::new();
    let mut at = created;
    for pod in on_node {
        match stay_reason(pod, &[], DrainRules::default()) {
            Some(StayReason::DaemonSet | StayReason::Mirror) => {}
            Some(StayReason::Terminating) => {
                leaving.insert(token(pod));
                at = at.max(termination_began(pod));
            }
            Some(StayReason::Succeeded | StayReason::Failed) => {
                leaving.insert(token(pod));
            }
            _ => {
                bound.insert(token(pod));
                let started = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .or(pod.metadata.creation_timestamp.as_ref())
                    .map(time);
                at = at.max(started);
            }
        }
    }
    let annotations = node.metadata.annotations.as_ref();
    let recorded_pods: Option<BTreeSet<String>> = annotations
        .and_then(|a| a.get(PODS_ANNOTATION))
        .map(|v| v.split(',').filter(|t| !t.is_empty()).map(str::to_string).collect());
    let recorded_at: Option<SystemTime> = annotations
        .and_then(|a| a.get(LAST_POD_EVENT_ANNOTATION))
        .and_then(|v| v.parse::<jiff::Timestamp>().ok())
        .map(SystemTime::from);
    at = at.max(recorded_at);
    // A pod recorded before and neither bound nor seen leaving now left unseen: it counts
    // from now, the first time it is known gone.
    if let Some(recorded) = &recorded_pods
        && recorded.iter().any(|t| !bound.contains(t) && !leaving.contains(t))
    {
        at = at.max(Some(now));
    }
    let record = (recorded_pods.as_ref() != Some(&bound) || recorded_at != at).then(|| {
        MetadataPatch::from([
            (
                PODS_ANNOTATION.to_string(),
                Some(bound.iter().cloned().collect::<Vec<_>>().join(",")),
            ),
            (
                LAST_POD_EVENT_ANNOTATION.to_string(),
                at.map(|t| kube_time(t).0.to_string()),
            ),
        ])
    });
    LastPodEvent { at, record }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{NodeBuilder, PodBuilder};
    use serde_json::json;

    fn at(s: &str) -> SystemTime {
        SystemTime::from(s.parse::<jiff::Timestamp>().unwrap())
    }

    fn node(annotations: &[(&str, &str)]) -> Node {
        let mut n = NodeBuilder::new("n1").node().unwrap();
        n.metadata.creation_timestamp = Some(kube_time(at("2026-12-02T10:00:00Z")));
        if !annotations.is_empty() {
            n.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        n
    }

    fn web(uid: &str, started: &str) -> PodBuilder {
        PodBuilder::new(&format!("web-{uid}"))
            .namespace("shop")
            .uid(uid)
            .owner("apps/v1", "ReplicaSet", "web")
            .spec("nodeName", json!("n1"))
            .created(started)
            .running()
    }

    /// Karpenter's `podevents.Controller.Reconcile` takes a terminating pod's event at
    /// the time it sees it so; its termination began at `deletionTimestamp` less its
    /// grace period, which Carpool reads exactly.
    #[test]
    fn a_terminating_pod_counts_from_the_start_of_its_termination() {
        let mut leaving = web("aaaaaaaa-1", "2026-12-02T10:05:00Z")
            .deleting("2026-12-02T11:01:00Z")
            .pod()
            .unwrap();
        leaving.metadata.deletion_grace_period_seconds = Some(60);
        let staying = web("bbbbbbbb-2", "2026-12-02T10:06:00Z").pod().unwrap();
        let e = last_pod_event(&node(&[]), &[&leaving, &staying], at("2026-12-02T11:00:30Z"));
        assert_eq!(e.at, Some(at("2026-12-02T11:00:00Z")));
        let record = e.record.expect("first record");
        assert_eq!(record[PODS_ANNOTATION].as_deref(), Some("bbbbbbbb"));
        assert_eq!(
            record[LAST_POD_EVENT_ANNOTATION].as_deref(),
            Some("2026-12-02T11:00:00Z")
        );
    }

    /// A pod that left unseen between two runs counts from the run that saw it gone, and
    /// that time is kept on the node for the next runs.
    #[test]
    fn a_pod_gone_unseen_counts_from_the_run_that_saw_it_gone() {
        let staying = web("bbbbbbbb-2", "2026-12-02T10:06:00Z").pod().unwrap();
        let n = node(&[
            (PODS_ANNOTATION, "aaaaaaaa,bbbbbbbb"),
            (LAST_POD_EVENT_ANNOTATION, "2026-12-02T10:06:00Z"),
        ]);
        let e = last_pod_event(&n, &[&staying], at("2026-12-02T11:00:00Z"));
        assert_eq!(e.at, Some(at("2026-12-02T11:00:00Z")));
        let recorded = node(&[
            (PODS_ANNOTATION, "bbbbbbbb"),
            (LAST_POD_EVENT_ANNOTATION, "2026-12-02T11:00:00Z"),
        ]);
        let later = last_pod_event(&recorded, &[&staying], at("2026-12-02T11:05:00Z"));
        assert_eq!(later.at, Some(at("2026-12-02T11:00:00Z")));
        assert_eq!(later.record, None, "nothing changed: nothing to write");
    }

    #[test]
    fn daemonset_pods_are_no_pod_event() {
        let agent = web("cccccccc-3", "2026-12-02T11:00:00Z")
            .owner("apps/v1", "DaemonSet", "agent")
            .pod()
            .unwrap();
        let e = last_pod_event(&node(&[]), &[&agent], at("2026-12-02T11:01:00Z"));
        assert_eq!(e.at, Some(at("2026-12-02T10:00:00Z")), "the node's creation");
    }
}
