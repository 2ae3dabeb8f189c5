//! The order a launch wave is handed to its pods: the biggest first, in tiers.
//!
//! Handing a wave to all its pods at once ([`crate::decide::waves::wave::hand_off`]) requeues them
//! together, and kube-scheduler then takes them in no order the planner can know: a
//! toleration update puts a pod back in the active queue or, within its backoff, in the
//! backoff queue, which is flushed by when each pod's backoff ends
//! (`pkg/scheduler/backend/queue/scheduling_queue.go`, `movePodsToActiveOrBackoffQueue`
//! and `flushBackoffQCompleted`). Its least-allocated scoring spreads the first pods it
//! takes over the emptiest nodes, and when those are the small ones, the room the plan
//! kept for a big pod is left in pieces (the stress e2e stranded a 1-CPU pod in 1 run of
//! 11 that way).
//!
//! So a wave is handed in tiers: the pods of the biggest requests first, the way the
//! planner packs them (by cpu, then memory, descending: Karpenter's
//! `byCPUAndMemoryDescending`, `pkg/controllers/provisioning/scheduling/queue.go`), and
//! the next tier once none of the previous one is pending, or [`TIER_HOLD`] after it.
//! Higher priority comes before size, as in kube-scheduler's own queue (`PrioritySort`).
//! There are at most [`MAX_TIERS`] tiers, the pods of the smallest sizes sharing the
//! last: the smallest pods wait a poll for each tier before theirs (three at most), or
//! [`TIER_HOLD`] for a tier the scheduler does not place at once. Within a tier of one size the
//! scheduler's order no longer matters; a tier that mixes sizes can still cut up room
//! (measured: `docs/src/design/waves-and-fit.md`).
//!
//! [`crate::decide::provisioning::scheduler_fit`] replays the same order ([`crate::decide::kube_scheduler::Order::Tiered`]).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::decide::provisioning::plan::ProvisioningPlan;
use crate::decide::provisioning::pod::pod_key;
use crate::model::pod::Pod;
use crate::model::pod_requests::effective_requests;
use crate::snapshot::Snapshot;

/// Tiers per wave at most.
pub const MAX_TIERS: usize = 4;

/// How long a tier is given before the next is handed although some of its pods are
/// still pending (one the scheduler holds in its backoff queue, or cannot place).
pub const TIER_HOLD: Duration = Duration::from_secs(2);

/// What orders pods into tiers: priority, cpu and memory, all descending.
type Size = (Reverse<i32>, Reverse<i64>, Reverse<i64>);

fn size(pod: &Pod) -> Size {
    let spec = pod.spec.as_ref();
    let priority = spec.and_then(|s| s.priority).unwrap_or(0);
    let requests = spec.and_then(|s| effective_requests(s).ok()).unwrap_or_default();
    (
        Reverse(priority),
        Reverse(requests.cpu_millis),
        Reverse(requests.memory),
    )
}

/// Each pod's tier, by key: 0 for the pods of the highest priority and biggest
/// requests, one tier per distinct size after, the sizes past [`MAX_TIERS`] sharing the
/// last.
pub fn tiers<'a>(pods: impl IntoIterator<Item = (&'a str, &'a Pod)>) -> HashMap<String, usize> {
    let sized: Vec<(&str, Size)> = pods.into_iter().map(|(k, p)| (k, size(p))).collect();
    let sizes: BTreeSet<Size> = sized.iter().map(|(_, s)| *s).collect();
    let rank: HashMap<Size, usize> = sizes
        .into_iter()
        .enumerate()
        .map(|(i, s)| (s, i.min(MAX_TIERS - 1)))
        .collect();
    sized.into_iter().map(|(k, s)| (k.to_string(), rank[&s])).collect()
}

/// The tiers of the pods `plan` places, as [`tiers`] ranks them (and as the fit's replay
/// does, [`crate::decide::kube_scheduler::Order::Tiered`]).
pub fn of_plan(snapshot: &Snapshot, plan: &ProvisioningPlan) -> HashMap<String, usize> {
    let by_key: HashMap<String, &Pod> = snapshot.pods.iter().map(|p| (pod_key(p), p)).collect();
    let planned = plan
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .chain(plan.existing.iter().flat_map(|e| e.pods.iter()));
    tiers(planned.filter_map(|k| Some((k.as_str(), *by_key.get(k)?))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, cpu: &str, memory: &str, priority: i32) -> (String, Pod) {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"priority": priority, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
        }))
        .expect("pod");
        (format!("default/{name}"), p)
    }

    #[test]
    fn the_biggest_pods_are_handed_first_and_the_smallest_sizes_share_the_last_tier() {
        let pods = [
            pod("tiny", "100m", "256Mi", 0),
            pod("nano", "50m", "64Mi", 0),
            pod("small", "500m", "1Gi", 0),
            pod("mem", "1", "6Gi", 0),
            pod("large", "3", "4Gi", 0),
            pod("large-2", "3", "4Gi", 0),
        ];
        let t = tiers(pods.iter().map(|(k, p)| (k.as_str(), p)));
        assert_eq!(t["default/large"], 0);
        assert_eq!(t["default/large-2"], 0, "pods of one size share a tier");
        assert_eq!(t["default/mem"], 1, "cpu before memory, as the planner packs");
        assert_eq!(t["default/small"], 2);
        assert_eq!(t["default/tiny"], 3);
        assert_eq!(
            t["default/nano"], 3,
            "past four sizes, the smallest share the last tier"
        );
    }

    #[test]
    fn a_higher_priority_pod_is_handed_before_bigger_ones() {
        let pods = [pod("big", "4", "8Gi", 0), pod("urgent", "100m", "64Mi", 1000)];
        let t = tiers(pods.iter().map(|(k, p)| (k.as_str(), p)));
        assert_eq!((t["default/urgent"], t["default/big"]), (0, 1));
    }
}
