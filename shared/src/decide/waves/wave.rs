//! Launch waves: the nodes of one batch are handed to kube-scheduler together.
//!
//! kube-scheduler binds a pending pod to the best-scoring node that is Ready when it
//! tries the pod. When the nodes of a plan register one by one, the first to come up
//! takes the pods in the scheduler's queue order, by its own scoring (least-allocated),
//! not the plan's; the pods the plan packed elsewhere find their room taken, stay
//! pending, and the re-check launches again (measured: `docs/src/design/waves-and-fit.md`).
//!
//! So every node a batch launches registers with the startup taint
//! [`WAVE_TAINT`]`=`[`HELD`]`:NoSchedule` (through the kubelet's `--register-with-taints`)
//! and the label [`crate::model::well_known::WAVE_LABEL`]`=`[`HELD`]. The value is the
//! same for every wave: the user data, and so the launch template named by the hash of
//! its content, carries nothing of the batch, and the number of launch templates stays
//! bounded by the NodePools and classes in use. Once the node has registered, Carpool
//! names its wave on it ([`joins`]: the wave of the launch record of its instance, as the
//! taint's value and the label's), before any pod may use it; and it removes the taint
//! from every node of the wave at once ([`releases`]):
//!
//! - when each launch of the wave that has not failed has a Ready node
//!   ([`Release::AllReady`]);
//! - or, once the first node of the wave has been Ready for the grace, from each Ready
//!   node of the wave ([`Release::Grace`]): a slow boot holds the others back only that
//!   long;
//! - or, past the wave's `release_by` stored with its launches, whatever their state
//!   ([`Release::Deadline`]), and at once when no launch record names the wave
//!   ([`Release::Unknown`]). A crash of the function therefore never leaves the taint on
//!   a node: the next run's housekeeping removes it.
//!
//! A wave the run that launched it still holds is first **handed to its pods**
//! ([`hand_off`]): each pod planned into the wave that is still pending gets the
//! toleration [`wave_toleration`], and kube-scheduler places it at once among all the
//! wave's nodes, which it may now use though they are still tainted. The pods are handed
//! in tiers, the biggest first ([`crate::decide::waves::hand_tiers`]), so that the scheduler's spreading
//! of the small ones cannot cut up the room the plan kept for a big one. The taint comes
//! off once none of those pods is pending, or [`HAND_HOLD`] after the last tier.
//!
//! Why by pod and not by node: removing the taint takes one write per node, and
//! kube-scheduler binds the head of its queue to the first node it sees released, before
//! the others' updates reach it (measured: `docs/src/design/waves-and-fit.md`). A pod's own update
//! requeues that pod alone (`TaintToleration`'s `isSchedulableAfterPodTolerationChange`,
//! `pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go`), and it sees
//! every node of the wave as one. The toleration names the wave, so it opens that wave's
//! nodes only, and pods that were not planned into it wait for the taint to come off.
//!
//! The taint is a startup taint as Karpenter means it: the planner counts a node that
//! carries it as starting capacity ([`crate::model::well_known::EPHEMERAL_TAINTS`]), and
//! DaemonSets are placed on new nodes by their tolerance of the pool's `spec.taints`
//! only (Karpenter's `isDaemonPodCompatible`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use serde::{Deserialize, Serialize};

use crate::decide::waves::hand_tiers::TIER_HOLD;
use crate::model::node::instance_id_from_provider_id;
use crate::model::well_known::EPHEMERAL_TAINTS;
use crate::model::well_known::WAVE_TAINT;
use crate::model::{EpochMillis, LaunchRecord, LaunchState};

/// The longest a wave id may be: a taint value is a label value, at most 63 characters.
const MAX_WAVE_ID: usize = 63;

/// A wave id from a run's owner and its batch number: the characters a label value allows,
/// at most 63, ending with the batch number so that two batches of one run differ.
pub fn wave_id(owner: &str, batch: u64) -> String {
    let suffix = format!("-b{batch}");
    let clean: String = owner
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    let keep = MAX_WAVE_ID.saturating_sub(suffix.len());
    // ASCII only, so a byte index is a character index: the last `keep` of them.
    let head = &clean[clean.len().saturating_sub(keep)..];
    let head = head.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let head = if head.is_empty() { "w" } else { head };
    format!("{head}{suffix}")
}

/// The value of the wave taint and label every wave's node registers with, until
/// Carpool names its wave on it ([`joins`]). No wave id is `held`: each ends with `-b<n>`.
pub const HELD: &str = "held";

/// The taint of a node of `wave` ([`HELD`] for the taint a node registers with).
pub fn wave_taint(wave: &str) -> Taint {
    Taint {
        key: WAVE_TAINT.into(),
        value: Some(wave.into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// The toleration that lets a pod planned into `wave` onto the wave's nodes while they
/// still carry [`wave_taint`].
pub fn wave_toleration(wave: &str) -> Toleration {
    Toleration {
        key: Some(WAVE_TAINT.into()),
        operator: Some("Equal".into()),
        value: Some(wave.into()),
        effect: Some("NoSchedule".into()),
        toleration_seconds: None,
    }
}

/// How long a wave keeps its taint once its last tier is handed while some of its pods
/// are still pending: kube-scheduler places a requeued pod within milliseconds, so this
/// only bounds a pod it cannot place; the wave's room then goes to any pod.
pub const HAND_HOLD: Duration = Duration::from_secs(5);

/// One tier of a wave handed to its pods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handed {
    /// The wave.
    pub wave: String,
    /// The tier ([`crate::decide::waves::hand_tiers`]): 0 for the biggest pods.
    #[serde(default)]
    pub tier: usize,
    /// Its pods that were pending and now tolerate it.
    pub pods: usize,
    /// When.
    pub at: EpochMillis,
}

/// How far a wave has been handed: its last tier handed, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handing {
    /// The tier.
    pub tier: usize,
    /// When it was handed.
    pub at: EpochMillis,
}

/// The pending pods of each wave, counted by their tier ([`crate::decide::waves::hand_tiers::tiers`]).
pub type Waiting = BTreeMap<String, BTreeMap<usize, usize>>;

/// What to do with the due releases ([`releases`]) of a run that holds some waves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandOff {
    /// The waves to hand to their pending pods now, each with the tier handed (the
    /// run's own waves, released for [`Release::AllReady`] or [`Release::Grace`]).
    pub hand: Vec<(String, usize)>,
    /// The nodes whose taint comes off now.
    pub untaint: Vec<Untaint>,
}

/// Splits the `due` releases. A wave of the run's `own` that is due for being Ready is
/// handed to its pods first, tier by tier (the biggest first, [`crate::decide::waves::hand_tiers`]),
/// while `pending` counts some of them:
///
/// - not handed yet: its first tier with pods pending is handed;
/// - handed up to a tier (`handed`): the next tier with pods pending is handed once no
///   pod of that tier or an earlier one is pending, or [`TIER_HOLD`] after it;
/// - every tier with pods pending handed: its taint comes off once none is pending, or
///   [`HAND_HOLD`] after the last tier.
///
/// A wave past its deadline, a wave no record names and a wave of another run lose the
/// taint at once.
pub fn hand_off(
    due: Vec<Untaint>,
    own: &BTreeSet<String>,
    handed: &BTreeMap<String, Handing>,
    pending: &Waiting,
    now: EpochMillis,
) -> HandOff {
    let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let empty = BTreeMap::new();
    let mut out = HandOff::default();
    for u in due {
        let ready = matches!(u.why, Release::AllReady | Release::Grace { .. });
        if !ready || !own.contains(&u.wave) {
            out.untaint.push(u);
            continue;
        }
        let tiers: Vec<usize> = pending
            .get(&u.wave)
            .unwrap_or(&empty)
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(t, _)| *t)
            .collect();
        let next = match handed.get(&u.wave) {
            // Nothing of it left pending: nothing to hand.
            _ if tiers.is_empty() => None,
            None => tiers.first().copied(),
            Some(h) => {
                let later = tiers.iter().copied().find(|t| *t > h.tier);
                let placed = tiers.iter().all(|t| *t > h.tier);
                match later {
                    Some(t) if placed || now >= h.at.saturating_add(millis(TIER_HOLD)) => Some(t),
                    Some(_) => continue,
                    None if now >= h.at.saturating_add(millis(HAND_HOLD)) => None,
                    None => continue,
                }
            }
        };
        match next {
            Some(t) => {
                if !out.hand.iter().any(|(w, _)| *w == u.wave) {
                    out.hand.push((u.wave.clone(), t));
                }
            }
            None => out.untaint.push(u),
        }
    }
    out
}

/// The value of a node's wave taint, when it carries one: its wave, or [`HELD`].
pub fn wave_of(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()?
        .taints
        .as_ref()?
        .iter()
        .find(|t| t.key == WAVE_TAINT)
        .map(|t| t.value.as_deref().unwrap_or_default())
}

/// The wave of each launched instance, from its launch record.
fn waves_by_instance(launches: &[LaunchRecord]) -> BTreeMap<&str, &str> {
    launches
        .iter()
        .filter_map(|l| Some((l.instance_id.as_deref()?, l.wave.as_deref()?)))
        .collect()
}

/// The wave a node is held back for: its taint's value, or, for a node still [`HELD`],
/// the wave of its instance's launch record (`HELD` itself when no record names one).
fn held_for<'a>(node: &'a Node, by_instance: &BTreeMap<&str, &'a str>) -> Option<&'a str> {
    match wave_of(node)? {
        HELD => Some(
            instance_of(node)
                .and_then(|id| by_instance.get(id).copied())
                .unwrap_or(HELD),
        ),
        wave => Some(wave),
    }
}

/// A node that registered [`HELD`] and whose wave is now known: Carpool sets its wave
/// taint's value and its wave label to `wave`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    /// The node.
    pub node: String,
    /// Its wave, from its instance's launch record.
    pub wave: String,
}

/// The nodes still [`HELD`] whose instance's launch record names a wave.
///
/// No pod tolerates `held`, nor the wave's id until the wave is handed ([`hand_off`]), so
/// the write that names the wave on a node never opens it to kube-scheduler: the wave's
/// nodes are still opened all at once, by the hand-off.
pub fn joins(nodes: &[Node], launches: &[LaunchRecord]) -> Vec<Join> {
    let by_instance = waves_by_instance(launches);
    nodes
        .iter()
        .filter(|n| wave_of(n) == Some(HELD))
        .filter_map(|n| {
            let wave = by_instance.get(instance_of(n)?)?;
            Some(Join {
                node: n.metadata.name.clone()?,
                wave: (*wave).to_string(),
            })
        })
        .collect()
}

/// Why a node's wave taint is removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Release {
    /// Every live launch of the wave has a Ready node.
    AllReady,
    /// The wave's first node has been Ready for the grace; this one is Ready too.
    Grace {
        /// When the first node of the wave became Ready.
        first_ready: EpochMillis,
    },
    /// The wave's `release_by` has passed.
    Deadline {
        /// The deadline.
        release_by: EpochMillis,
    },
    /// No launch record names the wave (forgotten, or written by a run that crashed
    /// before it): nothing to wait for.
    Unknown,
}

/// One node to release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Untaint {
    /// The node.
    pub node: String,
    /// Its wave.
    pub wave: String,
    /// Why now.
    pub why: Release,
}

/// When a Ready node became Ready (its condition's `lastTransitionTime`), `None` when it
/// is not Ready, or still carries a taint Kubernetes puts on a starting node.
///
/// The node lifecycle controller removes `node.kubernetes.io/not-ready` only once it sees
/// the Ready condition (`doNoScheduleTaintingPass`,
/// `pkg/controller/nodelifecycle/node_lifecycle_controller.go`), some milliseconds after
/// it. A wave handed meanwhile is used by kube-scheduler without that node (measured:
/// `docs/src/design/waves-and-fit.md`), so such a node is not Ready for its wave yet.
fn ready_since(node: &Node) -> Option<EpochMillis> {
    let starting = node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| {
        ts.iter()
            .any(|t| t.key != WAVE_TAINT && EPHEMERAL_TAINTS.contains(&t.key.as_str()))
    });
    if starting {
        return None;
    }
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(c.last_transition_time.as_ref().map_or(0, |t| t.0.as_millisecond()))
}

fn instance_of(node: &Node) -> Option<&str> {
    instance_id_from_provider_id(node.spec.as_ref()?.provider_id.as_deref()?)
}

/// The nodes whose wave taint comes off now, given the cluster's `nodes`, the `launches`
/// (their `wave` and `release_by`), the time and the grace; see the module doc.
pub fn releases(nodes: &[Node], launches: &[LaunchRecord], now: EpochMillis, grace: Duration) -> Vec<Untaint> {
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let by_instance = waves_by_instance(launches);
    let mut held: BTreeMap<&str, Vec<&Node>> = BTreeMap::new();
    for n in nodes {
        if let Some(w) = held_for(n, &by_instance) {
            held.entry(w).or_default().push(n);
        }
    }
    let mut out = Vec::new();
    for (wave, members) in held {
        let records: Vec<&LaunchRecord> = launches.iter().filter(|l| l.wave.as_deref() == Some(wave)).collect();
        let release = |node: &Node, why: Release| Untaint {
            node: node.metadata.name.clone().unwrap_or_default(),
            wave: wave.to_string(),
            why,
        };
        if records.is_empty() {
            out.extend(members.iter().map(|n| release(n, Release::Unknown)));
            continue;
        }
        let release_by = records.iter().filter_map(|l| l.release_by).min();
        if let Some(by) = release_by
            && now >= by
        {
            out.extend(members.iter().map(|n| release(n, Release::Deadline { release_by: by })));
            continue;
        }
        // The wave's nodes (tainted or already released), by instance.
        let ready: BTreeMap<&str, EpochMillis> = nodes
            .iter()
            .filter_map(|n| Some((instance_of(n)?, ready_since(n)?)))
            .collect();
        let live: Vec<&LaunchRecord> = records
            .iter()
            .copied()
            .filter(|l| !matches!(l.state, LaunchState::Failed { .. }))
            .collect();
        let all_ready = live
            .iter()
            .all(|l| l.instance_id.as_deref().is_some_and(|id| ready.contains_key(id)));
        let tainted_ready: Vec<&Node> = members.iter().copied().filter(|n| ready_since(n).is_some()).collect();
        if all_ready {
            out.extend(tainted_ready.iter().map(|n| release(n, Release::AllReady)));
            continue;
        }
        let ids: BTreeSet<&str> = records.iter().filter_map(|l| l.instance_id.as_deref()).collect();
        let first_ready = ids.iter().filter_map(|id| ready.get(id)).min().copied();
        if let Some(first) = first_ready
            && now >= first.saturating_add(grace_ms)
        {
            out.extend(
                tainted_ready
                    .iter()
                    .map(|n| release(n, Release::Grace { first_ready: first })),
            );
        }
    }
    out
}

/// Whether `wave` needs nothing more: no node carries its taint, and every live launch
/// of it has a node (or none is left); or its `release_by` has passed.
pub fn settled(wave: &str, nodes: &[Node], launches: &[LaunchRecord], now: EpochMillis) -> bool {
    let records: Vec<&LaunchRecord> = launches.iter().filter(|l| l.wave.as_deref() == Some(wave)).collect();
    if records
        .iter()
        .filter_map(|l| l.release_by)
        .min()
        .is_some_and(|by| now >= by)
    {
        return true;
    }
    let by_instance = waves_by_instance(launches);
    if nodes.iter().any(|n| held_for(n, &by_instance) == Some(wave)) {
        return false;
    }
    let registered: BTreeSet<&str> = nodes.iter().filter_map(instance_of).collect();
    records
        .iter()
        .filter(|l| !matches!(l.state, LaunchState::Failed { .. }))
        .all(|l| l.instance_id.as_deref().is_some_and(|id| registered.contains(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wave_id_is_a_valid_label_value_that_keeps_the_batch_number() {
        let long = "0123456789abcdef-0123456789abcdef-0123456789abcdef-0123456789abcdef";
        let id = wave_id(long, 12);
        assert!(id.len() <= 63, "{id}");
        assert!(id.ends_with("-b12"), "{id}");
        assert!(id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()), "{id}");
        assert_eq!(wave_id("run/1 ", 0), "run1-b0");
        assert_eq!(wave_id("", 3), "w-b3");
    }

    fn due(node: &str, wave: &str, why: Release) -> Untaint {
        Untaint {
            node: node.into(),
            wave: wave.into(),
            why,
        }
    }

    fn waiting(wave: &str, tiers: &[(usize, usize)]) -> Waiting {
        [(wave.to_string(), tiers.iter().copied().collect())].into()
    }

    fn handed(wave: &str, tier: usize, at: EpochMillis) -> BTreeMap<String, Handing> {
        [(wave.to_string(), Handing { tier, at })].into()
    }

    #[test]
    fn a_ready_wave_of_the_run_is_handed_to_its_biggest_pods_before_any_node_loses_its_taint() {
        let own: BTreeSet<String> = ["w-b1".to_string()].into();
        let plan = hand_off(
            vec![due("a", "w-b1", Release::AllReady), due("b", "w-b1", Release::AllReady)],
            &own,
            &BTreeMap::new(),
            &waiting("w-b1", &[(0, 2), (2, 3)]),
            1_000,
        );
        assert_eq!(plan.hand, vec![("w-b1".to_string(), 0)]);
        assert!(plan.untaint.is_empty(), "{plan:?}");
    }

    #[test]
    fn the_next_tier_is_handed_once_the_previous_is_placed_or_after_the_tier_hold() {
        let own: BTreeSet<String> = ["w-b1".to_string()].into();
        let both = || vec![due("a", "w-b1", Release::AllReady), due("b", "w-b1", Release::AllReady)];
        let after_first = handed("w-b1", 0, 1_000);
        // The big pods still pending: the small ones wait.
        let waiting_big = waiting("w-b1", &[(0, 1), (1, 4)]);
        assert_eq!(
            hand_off(both(), &own, &after_first, &waiting_big, 1_500),
            HandOff::default()
        );
        // The big pods placed: the next tier with pods pending.
        let placed = hand_off(both(), &own, &after_first, &waiting("w-b1", &[(0, 0), (2, 4)]), 1_500);
        assert_eq!(placed.hand, vec![("w-b1".to_string(), 2)]);
        assert!(placed.untaint.is_empty());
        // A big pod the scheduler does not place holds the others back only so long.
        let hold = i64::try_from(TIER_HOLD.as_millis()).unwrap();
        let late = hand_off(both(), &own, &after_first, &waiting_big, 1_000 + hold);
        assert_eq!(late.hand, vec![("w-b1".to_string(), 1)]);
    }

    #[test]
    fn a_wave_handed_to_every_tier_loses_its_taint_once_its_pods_are_placed_or_after_the_hold() {
        let own: BTreeSet<String> = ["w-b1".to_string()].into();
        let handed = handed("w-b1", 2, 1_000);
        let both = || vec![due("a", "w-b1", Release::AllReady), due("b", "w-b1", Release::AllReady)];
        let waiting = waiting("w-b1", &[(2, 1)]);
        assert_eq!(hand_off(both(), &own, &handed, &waiting, 2_000), HandOff::default());
        let placed = hand_off(both(), &own, &handed, &BTreeMap::new(), 2_000);
        assert_eq!(placed.untaint.len(), 2);
        assert!(placed.hand.is_empty());
        let hold = i64::try_from(HAND_HOLD.as_millis()).unwrap();
        assert_eq!(hand_off(both(), &own, &handed, &waiting, 1_000 + hold).untaint.len(), 2);
    }

    #[test]
    fn a_wave_past_its_deadline_unknown_or_of_another_run_loses_its_taint_at_once() {
        let own: BTreeSet<String> = ["mine-b1".to_string()].into();
        let mut pending = waiting("mine-b1", &[(0, 2)]);
        pending.extend(waiting("theirs-b1", &[(0, 2)]));
        let plan = hand_off(
            vec![
                due("a", "mine-b1", Release::Deadline { release_by: 5 }),
                due("b", "theirs-b1", Release::AllReady),
                due("c", "gone-b1", Release::Unknown),
            ],
            &own,
            &BTreeMap::new(),
            &pending,
            10,
        );
        assert!(plan.hand.is_empty());
        assert_eq!(
            plan.untaint.iter().map(|u| u.node.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn the_wave_toleration_tolerates_the_wave_taint_and_no_other_wave() {
        use crate::decide::provisioning::taints::tolerates;
        let t = wave_toleration("w-b1");
        assert!(tolerates(&t, &wave_taint("w-b1")));
        assert!(!tolerates(&t, &wave_taint("w-b2")));
    }
}
