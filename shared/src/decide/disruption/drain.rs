//! The order of a drain: which pods of a node to evict, in which order, and which stay.
//!
//! A drain evicts tier by tier, as Karpenter's terminator does (`Terminator.Evict` in
//! kubernetes-sigs/karpenter `pkg/controllers/node/termination/terminator/terminator.go`,
//! after the kubelet's graceful node shutdown): the non-critical pods first, the
//! system-critical ones only once no non-critical pod is left to evict. A tier is done
//! when the apiserver has accepted the eviction of each of its pods; it does not wait
//! for them to finish terminating (neither does Karpenter: terminating pods are not
//! evictable, so its next call moves on to the next list).
//!
//! Some pods stay, as `kubectl drain --ignore-daemonsets` leaves them (kubectl's
//! `pkg/drain/filters.go`: `daemonSetFilter`, `mirrorPodFilter`, `skipDeletedFilter`):
//! - DaemonSet pods: their controller would put them back on the node, and they die
//!   with it (Karpenter evicts them in tiers of their own; Carpool leaves them, so node
//!   agents keep running until the end);
//! - mirror pods of static pods: the kubelet owns them, the API cannot delete them;
//! - pods that have finished (Succeeded, Failed): they hold nothing;
//! - pods already terminating: their eviction (or deletion) was accepted;
//! - pods whose eviction an earlier pass had accepted, should a listing still show them
//!   running.
//!
//! Within a tier, the pods whose `terminationGracePeriodSeconds` (30 s unless set)
//! cannot end before the deadline come first, then the longer grace periods before the
//! shorter, so the slowest start stopping the earliest; ties go by namespace and name.

use std::cmp::Reverse;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::decide::provisioning::pod::is_daemonset_pod;
use crate::model::PodRef;
use crate::model::pod::Pod;
use crate::model::well_known::MIRROR_ANNOTATION;

/// The grace period of a pod that sets none (the API's default for
/// `terminationGracePeriodSeconds`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// The lowest priority of a system-critical pod (`scheduling.k8s.io`'s
/// `SystemCriticalPriority`, the value of `system-cluster-critical`).
pub const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// The priority classes Kubernetes ships for system-critical pods.
pub const CRITICAL_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// A pod to evict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainPod {
    /// The pod.
    pub pod: PodRef,
    /// Its `terminationGracePeriodSeconds` ([`DEFAULT_GRACE`] when unset).
    pub grace: Duration,
    /// Whether it is system-critical (see [`is_critical`]).
    pub critical: bool,
    /// Whether its grace period ends before the deadline, were it evicted now.
    pub fits: bool,
}

/// Why a pod of the node is not evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StayReason {
    /// A DaemonSet owns it.
    DaemonSet,
    /// It is the mirror of a static pod (annotation [`MIRROR_ANNOTATION`]).
    Mirror,
    /// It has succeeded.
    Succeeded,
    /// It has failed.
    Failed,
    /// It is terminating already (`deletionTimestamp` set).
    Terminating,
    /// An earlier pass had its eviction accepted.
    AlreadyEvicted,
}

impl fmt::Display for StayReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StayReason::DaemonSet => "owned by a DaemonSet",
            StayReason::Mirror => "mirror of a static pod",
            StayReason::Succeeded => "succeeded",
            StayReason::Failed => "failed",
            StayReason::Terminating => "terminating",
            StayReason::AlreadyEvicted => "eviction already accepted",
        })
    }
}

/// A pod that stays on the node, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staying {
    /// The pod.
    pub pod: PodRef,
    /// Why it is not evicted.
    pub reason: StayReason,
}

/// A node's pods, sorted for a drain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainOrder {
    /// The non-empty tiers, in the order to evict them: the non-critical pods, then the
    /// system-critical ones; each in eviction order.
    pub tiers: Vec<Vec<DrainPod>>,
    /// The pods that stay, sorted by namespace and name.
    pub stay: Vec<Staying>,
}

impl DrainOrder {
    /// The tier to evict now: the first that has pods (empty when the node is drained).
    pub fn current(&self) -> &[DrainPod] {
        self.tiers.first().map_or(&[], Vec::as_slice)
    }

    /// Whether no pod is left to evict.
    pub fn is_drained(&self) -> bool {
        self.tiers.iter().all(Vec::is_empty)
    }

    /// How many pods are left to evict, over every tier.
    pub fn to_evict(&self) -> usize {
        self.tiers.iter().map(Vec::len).sum()
    }
}

/// Whether a pod is system-critical: priority class `system-cluster-critical` or
/// `system-node-critical`, or a priority of at least [`CRITICAL_PRIORITY`].
pub fn is_critical(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.priority_class_name
        .as_deref()
        .is_some_and(|c| CRITICAL_CLASSES.contains(&c))
        || spec.priority.is_some_and(|p| p >= CRITICAL_PRIORITY)
}

/// A pod's grace period: `terminationGracePeriodSeconds`, [`DEFAULT_GRACE`] when unset,
/// none when negative.
pub fn grace(pod: &Pod) -> Duration {
    match pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds) {
        Some(seconds) => Duration::from_secs(u64::try_from(seconds).unwrap_or(0)),
        None => DEFAULT_GRACE,
    }
}

/// Why `pod` stays, or `None` when it is to be evicted. `evicted` lists the pods whose
/// eviction was accepted before.
pub fn stay_reason(pod: &Pod, evicted: &[PodRef]) -> Option<StayReason> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if is_daemonset_pod(pod) {
        Some(StayReason::DaemonSet)
    } else if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        Some(StayReason::Mirror)
    } else if phase == Some("Succeeded") {
        Some(StayReason::Succeeded)
    } else if phase == Some("Failed") {
        Some(StayReason::Failed)
    } else if pod.metadata.deletion_timestamp.is_some() {
        Some(StayReason::Terminating)
    } else if evicted.contains(&PodRef::of(pod)) {
        Some(StayReason::AlreadyEvicted)
    } else {
        None
    }
}

/// Sorts a node's `pods` for a drain at `now` that must end by `deadline`; `evicted`
/// lists the pods whose eviction an earlier pass had accepted (compared by namespace,
/// name and uid), which stay. See the module's documentation for the order.
pub fn drain_order(pods: &[Pod], evicted: &[PodRef], now: SystemTime, deadline: SystemTime) -> DrainOrder {
    let left = deadline.duration_since(now).unwrap_or(Duration::ZERO);
    let mut non_critical = Vec::new();
    let mut critical = Vec::new();
    let mut stay = Vec::new();
    for pod in pods {
        let reference = PodRef::of(pod);
        if let Some(reason) = stay_reason(pod, evicted) {
            stay.push(Staying { pod: reference, reason });
            continue;
        }
        let grace = grace(pod);
        let entry = DrainPod {
            pod: reference,
            grace,
            critical: is_critical(pod),
            fits: grace <= left,
        };
        if entry.critical {
            critical.push(entry);
        } else {
            non_critical.push(entry);
        }
    }
    let mut tiers: Vec<Vec<DrainPod>> = [non_critical, critical].into_iter().filter(|t| !t.is_empty()).collect();
    for tier in &mut tiers {
        // `fits` first is implied by the longer grace first; it is kept as the first key
        // so that the rule reads as the issue states it.
        tier.sort_by(|a, b| {
            (a.fits, Reverse(a.grace), &a.pod.namespace, &a.pod.name).cmp(&(
                b.fits,
                Reverse(b.grace),
                &b.pod.namespace,
                &b.pod.name,
            ))
        });
    }
    stay.sort_by(|a, b| (&a.pod.namespace, &a.pod.name).cmp(&(&b.pod.namespace, &b.pod.name)));
    DrainOrder { tiers, stay }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::PodBuilder;
    use proptest::prelude::*;
    use serde_json::json;

    const NOW: SystemTime = SystemTime::UNIX_EPOCH;

    fn deadline(seconds: u64) -> SystemTime {
        NOW + Duration::from_secs(seconds)
    }

    fn web(name: &str) -> PodBuilder {
        PodBuilder::new(name)
            .namespace("shop")
            .uid(name)
            .owner("apps/v1", "ReplicaSet", "web-1")
            .spec("nodeName", json!("n1"))
            .running()
    }

    fn names(tier: &[DrainPod]) -> Vec<&str> {
        tier.iter().map(|p| p.pod.name.as_str()).collect()
    }

    fn order(pods: Vec<PodBuilder>, seconds: u64) -> DrainOrder {
        let pods: Vec<Pod> = pods.into_iter().map(|p| p.pod().unwrap()).collect();
        drain_order(&pods, &[], NOW, deadline(seconds))
    }

    /// Karpenter `pkg/controllers/node/termination/suite_test.go` "should evict
    /// non-critical pods first": `system-node-critical`, `system-cluster-critical` (and,
    /// here, a priority of 2e9 or more) go in a later tier.
    #[test]
    fn non_critical_pods_are_evicted_before_system_critical_ones() {
        let order = order(
            vec![
                web("node-critical").spec("priorityClassName", json!("system-node-critical")),
                web("app"),
                web("cluster-critical").spec("priorityClassName", json!("system-cluster-critical")),
                web("high").spec("priority", json!(2_000_000_000)),
                web("almost").spec("priority", json!(1_999_999_999)),
            ],
            90,
        );
        assert_eq!(order.tiers.len(), 2);
        assert_eq!(names(order.current()), ["almost", "app"]);
        assert_eq!(names(&order.tiers[1]), ["cluster-critical", "high", "node-critical"]);
        assert!(order.tiers[1].iter().all(|p| p.critical));
    }

    /// kubectl `pkg/drain/filters.go` (`daemonSetFilter`, `mirrorPodFilter`,
    /// `skipDeletedFilter`) skips these; a finished pod needs no eviction.
    #[test]
    fn daemonset_mirror_finished_and_terminating_pods_stay() {
        let order = order(
            vec![
                web("agent").owner("apps/v1", "DaemonSet", "agent"),
                web("static").annotation(MIRROR_ANNOTATION, "abc"),
                web("done").phase("Succeeded"),
                web("crashed").phase("Failed"),
                web("leaving").deleting("2026-09-21T12:00:00Z"),
                web("app"),
            ],
            90,
        );
        assert_eq!(names(order.current()), ["app"]);
        let stay: Vec<(&str, StayReason)> = order.stay.iter().map(|s| (s.pod.name.as_str(), s.reason)).collect();
        assert_eq!(
            stay,
            [
                ("agent", StayReason::DaemonSet),
                ("crashed", StayReason::Failed),
                ("done", StayReason::Succeeded),
                ("leaving", StayReason::Terminating),
                ("static", StayReason::Mirror),
            ]
        );
        assert_eq!(StayReason::DaemonSet.to_string(), "owned by a DaemonSet");
    }

    #[test]
    fn pods_whose_grace_cannot_fit_start_first_then_the_longer_grace() {
        let order = order(
            vec![
                web("default"), // 30 s
                web("quick").spec("terminationGracePeriodSeconds", json!(5)),
                web("slow").spec("terminationGracePeriodSeconds", json!(120)),
                web("slower").spec("terminationGracePeriodSeconds", json!(300)),
                web("b-60").spec("terminationGracePeriodSeconds", json!(60)),
                web("a-60").spec("terminationGracePeriodSeconds", json!(60)),
            ],
            90,
        );
        assert_eq!(
            names(order.current()),
            ["slower", "slow", "a-60", "b-60", "default", "quick"]
        );
        let fits: Vec<bool> = order.current().iter().map(|p| p.fits).collect();
        assert_eq!(fits, [false, false, true, true, true, true]);
        assert_eq!(order.current()[4].grace, DEFAULT_GRACE);
    }

    #[test]
    fn a_pod_evicted_before_stays_even_when_still_listed_running() {
        let pods = [web("app").pod().unwrap(), web("other").pod().unwrap()];
        let evicted = [PodRef::of(&pods[0])];
        let order = drain_order(&pods, &evicted, NOW, deadline(90));
        assert_eq!(names(order.current()), ["other"]);
        assert_eq!(order.stay[0].reason, StayReason::AlreadyEvicted);
        // A pod of the same name but another uid (a StatefulSet's new pod) is evicted.
        let recreated = web("app").uid("app-2").pod().unwrap();
        assert_eq!(drain_order(&[recreated], &evicted, NOW, deadline(90)).to_evict(), 1);
    }

    #[test]
    fn a_node_with_only_staying_pods_is_drained() {
        let order = order(vec![web("agent").owner("apps/v1", "DaemonSet", "agent")], 90);
        assert!(order.is_drained());
        assert!(order.current().is_empty());
    }

    fn arbitrary_pod() -> impl Strategy<Value = Pod> {
        (
            prop_oneof![Just("ReplicaSet"), Just("DaemonSet"), Just("StatefulSet"), Just("Job")],
            prop_oneof![
                Just(None),
                Just(Some("system-node-critical")),
                Just(Some("system-cluster-critical")),
                Just(Some("high"))
            ],
            prop::option::of(prop_oneof![
                Just(0i32),
                Just(1_000),
                Just(2_000_000_000),
                Just(2_000_001_000)
            ]),
            prop::option::of(0i64..600),
            prop_oneof![Just("Running"), Just("Pending"), Just("Succeeded"), Just("Failed")],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(kind, class, priority, grace, phase, deleting, mirror)| {
                let mut b = PodBuilder::new("p").owner("apps/v1", kind, "owner").phase(phase);
                if let Some(class) = class {
                    b = b.spec("priorityClassName", json!(class));
                }
                if let Some(priority) = priority {
                    b = b.spec("priority", json!(priority));
                }
                if let Some(grace) = grace {
                    b = b.spec("terminationGracePeriodSeconds", json!(grace));
                }
                if deleting {
                    b = b.deleting("2026-09-21T12:00:00Z");
                }
                if mirror {
                    b = b.annotation(MIRROR_ANNOTATION, "x");
                }
                b.pod().unwrap()
            })
    }

    proptest! {
        /// For any pods: every non-critical pod to evict comes before every critical
        /// one, no DaemonSet pod is evicted, and each pod is either evicted once or stays.
        #[test]
        fn non_critical_pods_always_go_first_and_daemonset_pods_never_go(
            mut pods in prop::collection::vec(arbitrary_pod(), 0..40),
            seconds in 0u64..400,
        ) {
            for (i, pod) in pods.iter_mut().enumerate() {
                pod.metadata.name = Some(format!("p-{i}"));
                pod.metadata.uid = Some(format!("u-{i}"));
            }
            let order = drain_order(&pods, &[], NOW, deadline(seconds));
            let evicted: Vec<&DrainPod> = order.tiers.iter().flatten().collect();
            if let Some(first_critical) = evicted.iter().position(|p| p.critical) {
                prop_assert!(evicted[first_critical..].iter().all(|p| p.critical));
            }
            for pod in &pods {
                let r = PodRef::of(pod);
                let times = evicted.iter().filter(|p| p.pod == r).count();
                let stays = order.stay.iter().filter(|s| s.pod == r).count();
                prop_assert_eq!(times + stays, 1);
                if is_daemonset_pod(pod) {
                    prop_assert_eq!(times, 0);
                }
                if times == 1 {
                    prop_assert_eq!(is_critical(pod), evicted.iter().any(|p| p.pod == r && p.critical));
                }
            }
            for tier in &order.tiers {
                prop_assert!(!tier.is_empty());
                prop_assert!(tier.windows(2).all(|w| w[0].grace >= w[1].grace));
            }
        }
    }
}
