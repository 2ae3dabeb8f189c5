//! The order of a drain: which pods of a node to evict, in which order, which stay, and
//! which the node waits for.
//!
//! A drain evicts tier by tier, as Karpenter's terminator does (`Terminator.Drain` in
//! kubernetes-sigs/karpenter `pkg/controllers/node/termination/terminator/terminator.go`,
//! after the kubelet's graceful node shutdown): the non-critical pods first, the
//! system-critical ones only once no non-critical pod is left, terminating ones included
//! (`groupPodsByPriority` over `IsWaitingEviction`).
//!
//! Some pods stay, as `kubectl drain --ignore-daemonsets` leaves them (kubectl's
//! `pkg/drain/filters.go`: `daemonSetFilter`, `mirrorPodFilter`, `skipDeletedFilter`) and
//! as Karpenter's `IsEvictable` does:
//! - DaemonSet pods: their controller would put them back on the node, and they die
//!   with it (Karpenter evicts them in tiers of their own; Carpool leaves them, so node
//!   agents keep running until the end);
//! - mirror pods of static pods: the kubelet owns them, the API cannot delete them;
//! - pods that have finished (Succeeded, Failed): they hold nothing;
//! - pods already terminating: their eviction (or deletion) was accepted;
//! - pods whose eviction an earlier pass had accepted, should a listing still show them
//!   running;
//! - pods that tolerate `carpool.sh/disrupted:NoSchedule`: they could come straight back
//!   (`ToleratesDisruptedNoScheduleTaint`);
//! - in a voluntary drain, pods with `do-not-disrupt` (`IsDoNotDisruptActive`).
//!
//! The node waits ([`DrainOrder::waiting`], Karpenter's `IsWaitingEviction`) for the
//! pods terminating (until a minute past their `deletionTimestamp`: stuck, their kubelet
//! gone), those whose eviction was accepted, and the `do-not-disrupt` ones of a voluntary
//! drain; not for the others that stay, which end with the node.
//!
//! Within a tier, the pods whose `terminationGracePeriodSeconds` (30 s unless set)
//! cannot end before the deadline come first, then the longer grace periods before the
//! shorter, so the slowest start stopping the earliest; ties go by namespace and name.

use std::cmp::Reverse;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::decide::provisioning::pod::is_daemonset_pod;
use crate::decide::provisioning::taints::tolerates;
use crate::model::PodRef;
use crate::model::pod::Pod;
use crate::model::well_known::{DISRUPTED_TAINT, DO_NOT_DISRUPT, MIRROR_ANNOTATION};

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
    /// It tolerates `carpool.sh/disrupted:NoSchedule`: it could come straight back, so it
    /// is neither evicted nor waited for, and ends with the node (Karpenter's
    /// `ToleratesDisruptedNoScheduleTaint` in `IsEvictable` and `IsDrainable`).
    ToleratesDisrupted,
    /// It has `do-not-disrupt` and the drain is voluntary: not evicted, and waited for
    /// (Karpenter's `IsEvictable` leaves it, `IsWaitingEviction` waits for it).
    DoNotDisrupt,
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
            StayReason::ToleratesDisrupted => "tolerates the disrupted taint",
            StayReason::DoNotDisrupt => "do-not-disrupt",
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
    /// The tiers, in the order to evict them: the non-critical pods, then the
    /// system-critical ones; each in eviction order. Only non-empty tiers, but for an
    /// empty first one while the critical tier is held.
    pub tiers: Vec<Vec<DrainPod>>,
    /// The pods that stay, sorted by namespace and name.
    pub stay: Vec<Staying>,
    /// The pods the node waits for before it can go, though they are not evicted now:
    /// those terminating (unless stuck: a minute past their `deletionTimestamp`, so the
    /// kubelet is gone), those whose eviction was accepted and that still run, and
    /// `do-not-disrupt` pods in a voluntary drain. Karpenter's `IsWaitingEviction`.
    pub waiting: Vec<PodRef>,
}

impl DrainOrder {
    /// The tier to evict now: the first (empty when the node is drained, or while the
    /// critical tier waits for the non-critical pods still terminating).
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

    /// Whether the node can go: nothing left to evict, and no pod to wait for.
    pub fn is_empty(&self) -> bool {
        self.is_drained() && self.waiting.is_empty()
    }
}

/// How long a terminating pod is waited for past its `deletionTimestamp`: past it, the
/// pod is stuck (its kubelet is gone) and the node no longer waits (Karpenter's
/// `IsStuckTerminating`).
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// What a drain must respect beyond PDBs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainRules {
    /// A voluntary drain (consolidation, drift, expiration): pods with `do-not-disrupt`
    /// are not evicted, and waited for. An interruption's drain evicts them: the
    /// instance goes away whatever they say.
    pub voluntary: bool,
    /// The node's NodePool opts its workloads in to a surge before eviction
    /// ([`crate::decide::disruption::surge`]); a pod opts in or out by its own annotation.
    pub surge_pool: bool,
}

/// Whether `pod` tolerates `carpool.sh/disrupted:NoSchedule`.
pub fn tolerates_disrupted(pod: &Pod) -> bool {
    let taint = k8s_openapi::api::core::v1::Taint {
        key: DISRUPTED_TAINT.into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    };
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| tolerates(t, &taint)))
}

/// Whether `pod` has `do-not-disrupt: "true"` (Karpenter's or Carpool's annotation).
pub fn has_do_not_disrupt(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| DO_NOT_DISRUPT.iter().any(|k| a.get(*k).is_some_and(|v| v == "true")))
}

/// Whether a terminating pod is stuck at `now` (see [`STUCK_AFTER`]).
fn stuck(pod: &Pod, now: SystemTime) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| SystemTime::from(t.0) + STUCK_AFTER < now)
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
pub fn stay_reason(pod: &Pod, evicted: &[PodRef], rules: DrainRules) -> Option<StayReason> {
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
    } else if tolerates_disrupted(pod) {
        Some(StayReason::ToleratesDisrupted)
    } else if rules.voluntary && has_do_not_disrupt(pod) {
        Some(StayReason::DoNotDisrupt)
    } else {
        None
    }
}

/// Sorts a node's `pods` for a drain at `now` that must end by `deadline`; `evicted`
/// lists the pods whose eviction an earlier pass had accepted (compared by namespace,
/// name and uid), which stay. See the module's documentation for the order.
pub fn drain_order(
    pods: &[Pod],
    evicted: &[PodRef],
    now: SystemTime,
    deadline: SystemTime,
    rules: DrainRules,
) -> DrainOrder {
    let left = deadline.duration_since(now).unwrap_or(Duration::ZERO);
    let mut non_critical = Vec::new();
    let mut critical = Vec::new();
    let mut stay = Vec::new();
    let mut waiting = Vec::new();
    let mut noncritical_waiting = false;
    for pod in pods {
        let reference = PodRef::of(pod);
        if let Some(reason) = stay_reason(pod, evicted, rules) {
            let waits = match reason {
                StayReason::Terminating => !stuck(pod, now),
                StayReason::AlreadyEvicted | StayReason::DoNotDisrupt => true,
                _ => false,
            };
            if waits {
                noncritical_waiting |= !is_critical(pod);
                waiting.push(reference.clone());
            }
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
    // The critical tier waits until no non-critical pod is left, terminating ones
    // included, as Karpenter's `Terminator.Drain` evicts a priority group only once the
    // groups before it are gone (`groupPodsByPriority` over `IsWaitingEviction`).
    let held = non_critical.is_empty() && noncritical_waiting && !critical.is_empty();
    let mut tiers: Vec<Vec<DrainPod>> = if held {
        vec![Vec::new(), critical]
    } else {
        [non_critical, critical].into_iter().filter(|t| !t.is_empty()).collect()
    };
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
    waiting.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    DrainOrder { tiers, stay, waiting }
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
        drain_order(&pods, &[], NOW, deadline(seconds), DrainRules::default())
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
        let order = drain_order(&pods, &evicted, NOW, deadline(90), DrainRules::default());
        assert_eq!(names(order.current()), ["other"]);
        assert_eq!(order.stay[0].reason, StayReason::AlreadyEvicted);
        // A pod of the same name but another uid (a StatefulSet's new pod) is evicted.
        let recreated = web("app").uid("app-2").pod().unwrap();
        assert_eq!(
            drain_order(&[recreated], &evicted, NOW, deadline(90), DrainRules::default()).to_evict(),
            1
        );
    }

    #[test]
    fn a_node_with_only_staying_pods_is_drained() {
        let order = order(vec![web("agent").owner("apps/v1", "DaemonSet", "agent")], 90);
        assert!(order.is_drained());
        assert!(order.current().is_empty());
    }

    /// Karpenter `pkg/utils/pod/scheduling.go`: `IsEvictable` and `IsDrainable` both leave
    /// out a pod that tolerates the disrupted taint (`ToleratesDisruptedNoScheduleTaint`),
    /// so that a drain always finishes: it could come straight back.
    #[test]
    fn a_pod_that_tolerates_the_disrupted_taint_is_neither_evicted_nor_waited_for() {
        let order = order(
            vec![
                web("tolerant").toleration(DISRUPTED_TAINT, "Exists", None, "NoSchedule"),
                web("everything").toleration("", "Exists", None, ""),
                web("app"),
            ],
            90,
        );
        assert_eq!(names(order.current()), ["app"]);
        let stay: Vec<(&str, StayReason)> = order.stay.iter().map(|s| (s.pod.name.as_str(), s.reason)).collect();
        assert_eq!(
            stay,
            [
                ("everything", StayReason::ToleratesDisrupted),
                ("tolerant", StayReason::ToleratesDisrupted),
            ]
        );
        assert!(order.waiting.is_empty());
    }

    /// Karpenter `pkg/utils/pod/scheduling.go` `IsWaitingEviction` counts a terminating pod
    /// until `IsStuckTerminating`: a minute past its `deletionTimestamp`.
    #[test]
    fn a_terminating_pod_is_waited_for_until_a_minute_past_its_deletion_timestamp() {
        let pods = [web("leaving").deleting("1970-01-01T00:00:30Z").pod().unwrap()];
        let at = |s: u64| {
            drain_order(
                &pods,
                &[],
                NOW + Duration::from_secs(s),
                deadline(600),
                DrainRules::default(),
            )
        };
        assert!(at(0).is_drained() && !at(0).is_empty());
        assert_eq!(at(89).waiting, vec![PodRef::of(&pods[0])]);
        assert!(at(91).is_empty(), "stuck: its kubelet is gone");
    }

    /// Karpenter's `IsEvictable` leaves a `do-not-disrupt` pod, and `IsWaitingEviction`
    /// waits for it (`pkg/utils/pod/scheduling.go`): a voluntary drain stalls on it. An
    /// interruption's instance goes whatever it says, so Carpool evicts it then.
    #[test]
    fn a_do_not_disrupt_pod_stalls_a_voluntary_drain_and_is_evicted_by_an_interruption() {
        let pods = [web("precious")
            .annotation("karpenter.sh/do-not-disrupt", "true")
            .pod()
            .unwrap()];
        let voluntary = drain_order(
            &pods,
            &[],
            NOW,
            deadline(90),
            DrainRules {
                voluntary: true,
                ..DrainRules::default()
            },
        );
        assert!(voluntary.current().is_empty() && voluntary.is_drained());
        assert_eq!(voluntary.stay[0].reason, StayReason::DoNotDisrupt);
        assert!(!voluntary.is_empty(), "waited for");
        let interruption = drain_order(&pods, &[], NOW, deadline(90), DrainRules::default());
        assert_eq!(names(interruption.current()), ["precious"]);
    }

    /// Karpenter `Terminator.Drain` (`groupPodsByPriority` over `IsWaitingEviction`): a
    /// priority group is evicted only once the groups before it are gone, so the
    /// system-critical pods outlive every other pod's shutdown.
    #[test]
    fn critical_pods_wait_until_the_other_pods_have_terminated() {
        let critical = web("dns").spec("priorityClassName", json!("system-cluster-critical"));
        let order = order(vec![critical.clone(), web("app").deleting("2026-09-21T12:00:00Z")], 90);
        assert!(order.current().is_empty(), "held while app shuts down");
        assert_eq!(order.to_evict(), 1);
        assert!(!order.is_drained());
        let order = super::tests::order(vec![critical], 90);
        assert_eq!(names(order.current()), ["dns"]);
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
            let order = drain_order(&pods, &[], NOW, deadline(seconds), DrainRules::default());
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
            for (i, tier) in order.tiers.iter().enumerate() {
                // Only the first tier may be empty: the critical one held while other
                // pods terminate.
                prop_assert!(!tier.is_empty() || (i == 0 && order.tiers.len() == 2));
                prop_assert!(tier.windows(2).all(|w| w[0].grace >= w[1].grace));
            }
        }
    }
}
