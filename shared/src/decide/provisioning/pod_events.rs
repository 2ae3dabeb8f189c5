//! Which Kubernetes Events to publish on pending pods after a batch, so that
//! `kubectl describe pod` shows what Carpool decided, as it does with Karpenter:
//!
//! - `Nominated` (Normal): the pod was planned onto a node this batch launched; the message
//!   names the instance, its type, zone and capacity type, and the NodePool.
//! - `FailedScheduling` (Warning): no node can take the pod; the message is the typed
//!   reasons' `Display` ([`Unschedulable::reason`]).
//! - `LaunchFailed` (Warning): the launch of the pod's node failed; the message has the
//!   error.
//!
//! The names and messages follow Karpenter's (kubernetes-sigs/karpenter,
//! `pkg/controllers/provisioning/scheduling/events.go`: `NominatePodEvent` has reason
//! `Nominated` and message `Pod should schedule on: nodeclaim/<name>, node/<name>`;
//! `PodFailedToScheduleEvent` has reason `FailedScheduling` and message `Failed to schedule
//! pod, <error>`, deduplicated per pod for 5 minutes; `pkg/events/recorder.go` dedupes by
//! reason and pod uid, 2 minutes by default).
//!
//! **Rate limit.** A pod that stays pending is seen by every batch (every 10 s), so an
//! Event is published at most once per pod, reason and message in [`DEDUPE_WINDOW`]
//! (5 minutes, Karpenter's `FailedScheduling` timeout): the same pod and outcome get one
//! Event per window, and a changed outcome (another reason, another instance) gets its
//! Event at once. [`RecentEvents`] remembers what was published, with `now` passed in, and
//! holds at most [`MAX_RECENT`] entries; a batch publishes at most
//! [`MAX_EVENTS_PER_BATCH`] (the rest wait for a later batch).
//!
//! This is a decision: [`pod_events`] takes the batch's outcome, the dedupe state and
//! `now`, and returns the Events; the run publishes them and records those that went out.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use crate::decide::Unschedulable;
use crate::decide::provisioning::pod::pod_key;
use crate::decide::provisioning::unschedulable::Kind;
use crate::model::CapacityType;
use crate::model::pod::Pod;
use crate::model::{EventReason, PodEvent, PodRef};

/// How long an Event is not published again for the same pod, reason and message.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(300);

/// The most Events [`RecentEvents`] remembers; past it, the oldest are forgotten first.
pub const MAX_RECENT: usize = 10_000;

/// The most Events one batch publishes.
pub const MAX_EVENTS_PER_BATCH: usize = 200;

/// A pod planned onto a node this batch launched.
#[derive(Clone, Debug, PartialEq)]
pub struct Nomination {
    /// The pod, as `namespace/name`.
    pub pod: String,
    /// The instance launched.
    pub instance_id: String,
    /// Its NodePool.
    pub nodepool: String,
    /// Its instance type.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
}

impl Nomination {
    /// `Pod should schedule on: instance i-0abc (m5.large, us-east-1a, spot) of NodePool
    /// default`.
    pub fn message(&self) -> String {
        format!(
            "Pod should schedule on: instance {} ({}, {}, {}) of NodePool {}",
            self.instance_id,
            self.instance_type,
            self.zone,
            self.capacity_type.label(),
            self.nodepool
        )
    }
}

/// What a batch decided about its pods.
#[derive(Clone, Copy, Debug)]
pub struct BatchOutcome<'a> {
    /// The pods of the batch's snapshot (for their uids); Events are only about these.
    pub pods: &'a [Pod],
    /// Pods planned onto nodes the batch launched.
    pub nominated: &'a [Nomination],
    /// Pods no node can take, and the pods of nodes whose launch failed.
    pub unschedulable: &'a [Unschedulable],
}

/// The Event's reason for an unschedulable pod, by the kind of its last reason.
fn unschedulable_reason(kind: Kind) -> EventReason {
    match kind {
        Kind::Launch | Kind::BackedOff => EventReason::LaunchFailed,
        Kind::Taints
        | Kind::Requirements
        | Kind::Resources
        | Kind::Limits
        | Kind::Topology
        | Kind::MinValues
        | Kind::Volume
        | Kind::InvalidPod
        | Kind::NoValidNodePool
        | Kind::NoNodePool => EventReason::FailedScheduling,
    }
}

/// The message for an unschedulable pod.
fn unschedulable_message(reason: EventReason, u: &Unschedulable) -> String {
    match reason {
        EventReason::LaunchFailed => format!("Failed to launch a node for the pod, {}", u.reason()),
        EventReason::Nominated | EventReason::FailedScheduling | EventReason::SurgeBeforeEviction => {
            format!("Failed to schedule pod, {}", u.reason())
        }
    }
}

/// What identifies an Event for the rate limit: the pod (its uid too, so that a pod
/// created again under the same name gets its Events), the reason and the message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    pod: PodRef,
    reason: EventReason,
    message: String,
}

impl EventKey {
    fn of(event: &PodEvent) -> Self {
        EventKey {
            pod: event.pod.clone(),
            reason: event.reason,
            message: event.message.clone(),
        }
    }
}

/// The Events published lately, and when: the rate limit's state. It lives as long as the
/// process (a warm Lambda keeps it across invocations); it is bounded by
/// [`MAX_RECENT`].
#[derive(Clone, Debug, Default)]
pub struct RecentEvents {
    published: HashMap<EventKey, SystemTime>,
}

impl RecentEvents {
    /// No Event published yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the same Event was published less than [`DEDUPE_WINDOW`] before `now`.
    pub fn is_recent(&self, event: &PodEvent, now: SystemTime) -> bool {
        self.published
            .get(&EventKey::of(event))
            .is_some_and(|&at| within_window(at, now))
    }

    /// Records that `event` was published at `now`; past [`MAX_RECENT`], forgets what is
    /// older than the window, and the oldest.
    pub fn record(&mut self, event: &PodEvent, now: SystemTime) {
        self.published.insert(EventKey::of(event), now);
        if self.published.len() > MAX_RECENT {
            self.forget_old(now);
        }
    }

    /// Forgets the Events older than the window; past [`MAX_RECENT`], also the oldest,
    /// down to nine tenths of it (so that a full state is not sorted on every record).
    pub fn forget_old(&mut self, now: SystemTime) {
        self.published.retain(|_, &mut at| within_window(at, now));
        if self.published.len() > MAX_RECENT {
            let over = self.published.len() - (MAX_RECENT - MAX_RECENT / 10);
            let mut by_age: Vec<(SystemTime, EventKey)> =
                self.published.iter().map(|(k, &at)| (at, k.clone())).collect();
            by_age.sort_by_key(|(at, _)| *at);
            for (_, k) in by_age.into_iter().take(over) {
                self.published.remove(&k);
            }
        }
    }

    /// How many Events are remembered.
    pub fn len(&self) -> usize {
        self.published.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.published.is_empty()
    }
}

fn within_window(at: SystemTime, now: SystemTime) -> bool {
    now.duration_since(at).map_or(true, |age| age < DEDUPE_WINDOW)
}

/// The Events to publish for a batch's outcome at `now`: one per nominated pod, then one
/// per unschedulable pod, leaving out those published within the window and pods not in
/// the snapshot; at most [`MAX_EVENTS_PER_BATCH`].
pub fn pod_events(outcome: &BatchOutcome<'_>, recent: &RecentEvents, now: SystemTime) -> Vec<PodEvent> {
    let refs: BTreeMap<String, PodRef> = outcome.pods.iter().map(|p| (pod_key(p), PodRef::of(p))).collect();
    let nominated = outcome.nominated.iter().filter_map(|n| {
        Some(PodEvent::new(
            refs.get(&n.pod)?.clone(),
            EventReason::Nominated,
            n.message(),
        ))
    });
    let unschedulable = outcome.unschedulable.iter().filter_map(|u| {
        let reason = unschedulable_reason(u.kind());
        Some(PodEvent::new(
            refs.get(&u.pod)?.clone(),
            reason,
            unschedulable_message(reason, u),
        ))
    });
    let mut seen = std::collections::HashSet::new();
    nominated
        .chain(unschedulable)
        .filter(|e| !recent.is_recent(e, now) && seen.insert(EventKey::of(e)))
        .take(MAX_EVENTS_PER_BATCH)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::provisioning::unschedulable::Reason;
    use crate::fixtures::PodBuilder;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000 + secs)
    }

    fn pod(name: &str) -> Pod {
        PodBuilder::new(name)
            .namespace("web")
            .uid(&format!("{name}-uid"))
            .requests("1", "1Gi")
            .unschedulable()
            .pod()
            .unwrap()
    }

    fn nomination(pod: &str) -> Nomination {
        Nomination {
            pod: pod.into(),
            instance_id: "i-0abc".into(),
            nodepool: "general".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
        }
    }

    #[test]
    fn a_nominated_pod_gets_one_event_naming_its_node_per_window() {
        let pods = [pod("web-0")];
        let nominated = [nomination("web/web-0")];
        let outcome = BatchOutcome {
            pods: &pods,
            nominated: &nominated,
            unschedulable: &[],
        };
        let mut recent = RecentEvents::new();
        let events = pod_events(&outcome, &recent, at(0));
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!(e.reason, EventReason::Nominated);
        assert_eq!(e.pod.uid.as_deref(), Some("web-0-uid"));
        assert_eq!(
            e.message,
            "Pod should schedule on: instance i-0abc (m5.large, us-east-1a, spot) of NodePool general"
        );
        recent.record(e, at(0));
        assert!(pod_events(&outcome, &recent, at(299)).is_empty(), "within the window");
        assert_eq!(pod_events(&outcome, &recent, at(300)).len(), 1, "after it");
    }

    #[test]
    fn unschedulable_pods_get_their_reason_and_a_new_reason_is_published_at_once() {
        let pods = [pod("web-0"), pod("web-1")];
        let limits = [
            Unschedulable::new(
                "web/web-0",
                Reason::Limits {
                    nodepool: "general".into(),
                },
            ),
            Unschedulable::new(
                "web/web-1",
                Reason::Launch {
                    error: "UnauthorizedOperation".into(),
                },
            ),
            Unschedulable::new("web/gone", Reason::NoNodePool),
        ];
        let outcome = BatchOutcome {
            pods: &pods,
            nominated: &[],
            unschedulable: &limits,
        };
        let mut recent = RecentEvents::new();
        let events = pod_events(&outcome, &recent, at(0));
        assert_eq!(events.len(), 2, "a pod not in the snapshot gets none: {events:?}");
        assert_eq!(events[0].reason, EventReason::FailedScheduling);
        assert_eq!(
            events[0].message,
            format!("Failed to schedule pod, {}", limits[0].reason())
        );
        assert_eq!(events[1].reason, EventReason::LaunchFailed);
        assert!(
            events[1].message.contains("UnauthorizedOperation"),
            "{}",
            events[1].message
        );
        for e in &events {
            recent.record(e, at(0));
        }
        let changed = [Unschedulable::new("web/web-0", Reason::NoValidNodePool)];
        let outcome = BatchOutcome {
            unschedulable: &changed,
            ..outcome
        };
        assert_eq!(pod_events(&outcome, &recent, at(10)).len(), 1, "another reason");
    }

    #[test]
    fn the_dedupe_state_is_bounded() {
        let mut recent = RecentEvents::new();
        let event = |i: usize| {
            PodEvent::new(
                PodRef {
                    namespace: "web".into(),
                    name: format!("web-{i}"),
                    uid: None,
                },
                EventReason::FailedScheduling,
                "no",
            )
        };
        for i in 0..MAX_RECENT + 10 {
            recent.record(&event(i), at(0) + Duration::from_millis(i as u64));
        }
        assert!(recent.len() <= MAX_RECENT, "{}", recent.len());
        assert!(!recent.is_recent(&event(0), at(11)), "the oldest were forgotten");
        assert!(recent.is_recent(&event(MAX_RECENT + 9), at(11)));
        recent.forget_old(at(1000));
        assert!(recent.is_empty(), "all expired");
    }

    #[test]
    fn a_batch_publishes_at_most_its_cap() {
        let pods: Vec<Pod> = (0..MAX_EVENTS_PER_BATCH + 5)
            .map(|i| pod(&format!("web-{i}")))
            .collect();
        let nominated: Vec<Nomination> = (0..pods.len()).map(|i| nomination(&format!("web/web-{i}"))).collect();
        let outcome = BatchOutcome {
            pods: &pods,
            nominated: &nominated,
            unschedulable: &[],
        };
        assert_eq!(
            pod_events(&outcome, &RecentEvents::new(), at(0)).len(),
            MAX_EVENTS_PER_BATCH
        );
    }
}
