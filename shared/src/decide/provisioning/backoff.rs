//! Backing off a NodePool and EC2NodeClass whose launches keep failing, as a decision.
//!
//! A pair whose launches fail for another reason than capacity (a bad security group, a
//! launch template EC2 refuses, a misconfigured EC2NodeClass), or whose instances never
//! join the cluster several times in a row (a missing access entry, an AMI the cluster
//! cannot run), would otherwise be launched for again every batch. Instead it is held
//! back for a window that starts at one minute and doubles with each window in a row, up
//! to 30 minutes ([`Policy`]):
//!
//! - a round's launch errors of a pair count as one failure, and set a window at once;
//! - so does a class that could not be resolved (its subnets' zones or its AMIs: an
//!   `ssmParameter` that does not exist, or that the role may not read): its NodePools are
//!   held back, and every other NodePool goes on;
//! - each instance that did not register counts as one failure; the
//!   [`Policy::registration_threshold`]th registration failure in a row, and each after
//!   it, sets a window (one per round);
//! - a node of the pair that registers resets everything (the record is deleted).
//!
//! [`next`] turns the stored [`Backoff`] and one round's [`Round`] into a [`Change`];
//! [`held_back`] says which pairs are held back at `now`; [`hold_back`] drops their
//! NodePools from a snapshot before planning, as [`crate::decide::provisioning::nodepools`] drops those without
//! an EC2NodeClass; [`attribute`] gives the pods the held-back NodePools would have taken
//! a [`Reason::BackedOff`]; [`registration_rounds`] reads a housekeeping plan's
//! registrations and registration failures. The batch and housekeeping store the changes
//! (`BACKOFF#<nodepool>#<nodeclass>`), so a backoff outlives the Lambda invocation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::catalog::RegionCatalog;
use crate::decide::Unschedulable;
use crate::decide::housekeeping::{HousekeepingPlan, TerminationReason};
use crate::decide::provisioning::pod::{is_provisionable, pod_key};
use crate::decide::provisioning::unschedulable::Reason;
use crate::model::NodePool;
use crate::model::{Backoff, EpochMillis, FailureReason};
use crate::snapshot::Snapshot;

/// The first window.
pub const FIRST_WINDOW: Duration = Duration::from_secs(60);
/// The longest window.
pub const MAX_WINDOW: Duration = Duration::from_secs(30 * 60);
/// Registration failures in a row that back a pair off.
pub const REGISTRATION_THRESHOLD: u32 = 3;

/// How failures back off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The first window; each window in a row doubles it.
    pub first: Duration,
    /// The longest window.
    pub max: Duration,
    /// Registration failures in a row that back a pair off (launch errors do at once).
    pub registration_threshold: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            first: FIRST_WINDOW,
            max: MAX_WINDOW,
            registration_threshold: REGISTRATION_THRESHOLD,
        }
    }
}

impl Policy {
    /// The length of the window after `windows` windows in a row.
    pub fn window(&self, windows: u32) -> Duration {
        let factor = 2u32.checked_pow(windows.min(31)).unwrap_or(u32::MAX);
        self.first.checked_mul(factor).unwrap_or(self.max).min(self.max)
    }
}

/// A NodePool with the EC2NodeClass it launches with: what a backoff is kept for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PoolKey {
    /// The NodePool.
    pub nodepool: String,
    /// Its EC2NodeClass.
    pub node_class: String,
}

impl PoolKey {
    /// The key of a NodePool, with the class it refers to.
    pub fn of(pool: &NodePool) -> Self {
        PoolKey {
            nodepool: pool.name().to_string(),
            node_class: pool.spec.template.spec.node_class_ref.name.clone(),
        }
    }

    /// The key of a stored backoff.
    pub fn of_backoff(b: &Backoff) -> Self {
        PoolKey {
            nodepool: b.nodepool.clone(),
            node_class: b.node_class.clone(),
        }
    }
}

/// What one round (a batch's launches, or a housekeeping round) saw of one pair.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// A node of the pair registered.
    pub registered: bool,
    /// A launch failed for another reason than capacity: the first error.
    pub launch_error: Option<String>,
    /// The pair's EC2NodeClass could not be resolved: the error.
    pub node_class_error: Option<String>,
    /// Instances that did not register, each with the reason.
    pub not_registered: Vec<FailureReason>,
}

/// What to store for a pair after a round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// Nothing changes.
    Unchanged,
    /// Store this (created when its version is 0, else updated from its version).
    Put {
        /// The record.
        backoff: Backoff,
        /// Whether this round set a new window.
        window_set: bool,
    },
    /// A node registered: forget the failures.
    Clear,
}

/// The change a round makes to a pair's backoff (`current`, if stored), at `now`. A
/// registration in the round resets the counts first; the round's failures then count
/// from zero.
pub fn next(key: &PoolKey, current: Option<&Backoff>, round: &Round, now: EpochMillis, policy: &Policy) -> Change {
    let failed = round.launch_error.is_some() || round.node_class_error.is_some() || !round.not_registered.is_empty();
    if !failed {
        return match (round.registered, current) {
            (true, Some(_)) => Change::Clear,
            _ => Change::Unchanged,
        };
    }
    let version = current.map_or(0, |c| c.version);
    let mut b = match current {
        Some(c) if !round.registered => c.clone(),
        _ => Backoff {
            nodepool: key.nodepool.clone(),
            node_class: key.node_class.clone(),
            failures: 0,
            registration_failures: 0,
            windows: 0,
            reason: FailureReason::Launch { error: String::new() },
            until: 0,
            version,
        },
    };
    b.version = version;
    let mut window_set = false;
    for reason in &round.not_registered {
        b.failures = b.failures.saturating_add(1);
        b.registration_failures = b.registration_failures.saturating_add(1);
        b.reason = reason.clone();
        window_set |= b.registration_failures >= policy.registration_threshold;
    }
    if let Some(error) = &round.launch_error {
        b.failures = b.failures.saturating_add(1);
        b.reason = FailureReason::Launch { error: error.clone() };
        window_set = true;
    }
    if let Some(error) = &round.node_class_error {
        b.failures = b.failures.saturating_add(1);
        b.reason = FailureReason::NodeClass { error: error.clone() };
        window_set = true;
    }
    if window_set {
        let window = i64::try_from(policy.window(b.windows).as_millis()).unwrap_or(i64::MAX);
        b.until = b.until.max(now.saturating_add(window));
        b.windows = b.windows.saturating_add(1);
    }
    Change::Put { backoff: b, window_set }
}

/// The backoffs whose window is still open at `now`.
pub fn held_back(backoffs: &[Backoff], now: EpochMillis) -> Vec<Backoff> {
    backoffs.iter().filter(|b| b.until > now).cloned().collect()
}

/// A NodePool held back, with its backoff.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldBack {
    /// The NodePool, as dropped from the snapshot.
    pub pool: NodePool,
    /// Its backoff.
    pub backoff: Backoff,
}

/// Drops from the snapshot the NodePools held back at `now` (with the class they refer to
/// now: a pool moved to another class is not held back), and returns them.
pub fn hold_back(snapshot: &mut Snapshot, backoffs: &[Backoff], now: EpochMillis) -> Vec<HeldBack> {
    let open: BTreeMap<PoolKey, Backoff> = held_back(backoffs, now)
        .into_iter()
        .map(|b| (PoolKey::of_backoff(&b), b))
        .collect();
    if open.is_empty() {
        return Vec::new();
    }
    let (kept, held): (Vec<NodePool>, Vec<NodePool>) = std::mem::take(&mut snapshot.nodepools)
        .into_iter()
        .partition(|p| !open.contains_key(&PoolKey::of(p)));
    snapshot.nodepools = kept;
    held.into_iter()
        .filter_map(|pool| {
            let backoff = open.get(&PoolKey::of(&pool))?.clone();
            Some(HeldBack { pool, backoff })
        })
        .collect()
}

/// With every NodePool held back, the pending pods Carpool should provision for, each
/// unschedulable: [`Reason::NoNodePool`], then a [`Reason::BackedOff`] for those a
/// held-back NodePool would take ([`attribute`]).
pub fn all_held_back(snapshot: &Snapshot, held: &[HeldBack], region: &RegionCatalog<'_>) -> Vec<Unschedulable> {
    let mut unschedulable: Vec<Unschedulable> = snapshot
        .pods
        .iter()
        .filter(|p| is_provisionable(p))
        .map(|p| Unschedulable::new(pod_key(p), Reason::NoNodePool))
        .collect();
    attribute(snapshot, held, &mut unschedulable, region);
    unschedulable
}

/// The reason a pod is not launched for while its NodePool is held back.
pub fn reason(b: &Backoff) -> Reason {
    Reason::BackedOff {
        nodepool: b.nodepool.clone(),
        until: b.until,
        failures: b.failures,
        last_reason: b.reason.to_string(),
    }
}

/// Gives the pods that no NodePool left could take, and that the held-back ones would, a
/// [`Reason::BackedOff`] as their last reason: plans `view` (the planning snapshot,
/// without the held-back pools) again with only the held-back pools and only those pods
/// pending.
pub fn attribute(view: &Snapshot, held: &[HeldBack], unschedulable: &mut [Unschedulable], region: &RegionCatalog<'_>) {
    if held.is_empty() || unschedulable.is_empty() {
        return;
    }
    let stuck: BTreeSet<&str> = unschedulable.iter().map(|u| u.pod.as_str()).collect();
    let mut alone = view.clone();
    alone.nodepools = held.iter().map(|h| h.pool.clone()).collect();
    alone
        .pods
        .retain(|p| !is_provisionable(p) || stuck.contains(pod_key(p).as_str()));
    let plan = crate::decide::provisioning_plan(&alone, region);
    let by_pool: BTreeMap<&str, &Backoff> = held.iter().map(|h| (h.backoff.nodepool.as_str(), &h.backoff)).collect();
    let mut taken: BTreeMap<&str, &Backoff> = BTreeMap::new();
    for node in &plan.nodes {
        if let Some(b) = by_pool.get(node.nodepool.as_str()) {
            for pod in &node.pods {
                taken.entry(pod.as_str()).or_insert(b);
            }
        }
    }
    for u in unschedulable.iter_mut() {
        if let Some(b) = taken.get(u.pod.as_str()) {
            u.reasons.push(reason(b));
        }
    }
}

/// One housekeeping round's [`Round`]s, per pair: its registrations, and the launches in
/// flight whose instance did not register (terminated, or marked failed with no
/// instance). `class_of` gives a NodePool's EC2NodeClass; launches of NodePools it does
/// not know are left out.
pub fn registration_rounds(
    plan: &HousekeepingPlan,
    class_of: impl Fn(&str) -> Option<String>,
) -> BTreeMap<PoolKey, Round> {
    let mut rounds: BTreeMap<PoolKey, Round> = BTreeMap::new();
    let key = |nodepool: &str| {
        class_of(nodepool).map(|node_class| PoolKey {
            nodepool: nodepool.to_string(),
            node_class,
        })
    };
    for r in &plan.register {
        if let Some(k) = key(&r.launch.nodepool) {
            rounds.entry(k).or_default().registered = true;
        }
    }
    let failed = plan
        .terminate
        .iter()
        .filter(|t| matches!(t.reason, TerminationReason::NotRegistered { .. }))
        .filter_map(|t| {
            let launch = t.then_write.as_ref()?;
            Some((
                launch.nodepool.as_str(),
                FailureReason::NotRegistered {
                    instance_id: Some(t.instance_id.clone()),
                    detail: t.reason.to_string(),
                },
            ))
        })
        .chain(plan.fail.iter().map(|launch| {
            let detail = match &launch.state {
                crate::model::LaunchState::Failed { reason } => reason.clone(),
                _ => String::new(),
            };
            (
                launch.nodepool.as_str(),
                FailureReason::NotRegistered {
                    instance_id: None,
                    detail,
                },
            )
        }));
    for (nodepool, reason) in failed {
        if let Some(k) = key(nodepool) {
            rounds.entry(k).or_default().not_registered.push(reason);
        }
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: EpochMillis = 1_000_000_000;
    const MIN: i64 = 60_000;

    fn key() -> PoolKey {
        PoolKey {
            nodepool: "web".into(),
            node_class: "bad-sg".into(),
        }
    }

    fn launch_error() -> Round {
        Round {
            launch_error: Some("EC2NodeClass bad-sg selects no security group".into()),
            ..Round::default()
        }
    }

    fn not_registered(n: usize) -> Round {
        Round {
            not_registered: (0..n)
                .map(|i| FailureReason::NotRegistered {
                    instance_id: Some(format!("i-{i}")),
                    detail: "the node did not register within 900s".into(),
                })
                .collect(),
            ..Round::default()
        }
    }

    fn put(change: Change) -> (Backoff, bool) {
        match change {
            Change::Put { backoff, window_set } => (backoff, window_set),
            other => panic!("expected a put, got {other:?}"),
        }
    }

    #[test]
    fn windows_start_at_a_minute_double_and_stop_at_thirty() {
        let p = Policy::default();
        let table = [(0, 1), (1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (6, 30), (40, 30)];
        for (windows, minutes) in table {
            assert_eq!(p.window(windows), Duration::from_secs(minutes * 60), "after {windows}");
        }
    }

    #[test]
    fn launch_errors_in_a_row_back_off_at_once_and_doubling() {
        let p = Policy::default();
        let mut current: Option<Backoff> = None;
        // (now, expected until, expected failures)
        let table = [
            (NOW, NOW + MIN, 1),
            (NOW + MIN, NOW + 3 * MIN, 2),
            (NOW + 3 * MIN, NOW + 7 * MIN, 3),
        ];
        for (now, until, failures) in table {
            let (mut b, window_set) = put(next(&key(), current.as_ref(), &launch_error(), now, &p));
            assert!(window_set);
            assert_eq!((b.until, b.failures), (until, failures), "at {now}");
            assert!(matches!(b.reason, FailureReason::Launch { .. }));
            b.version += 1;
            current = Some(b);
        }
    }

    #[test]
    fn registration_failures_back_off_from_the_third_in_a_row() {
        let p = Policy::default();
        let (b1, set1) = put(next(&key(), None, &not_registered(2), NOW, &p));
        assert!(!set1, "two are not enough");
        assert_eq!((b1.registration_failures, b1.until, b1.version), (2, 0, 0));
        let (b2, set2) = put(next(&key(), Some(&b1), &not_registered(1), NOW + MIN, &p));
        assert!(set2, "the third backs off");
        assert_eq!(b2.until, NOW + 2 * MIN);
        assert_eq!(b2.failures, 3);
        let (b3, _) = put(next(&key(), Some(&b2), &not_registered(1), NOW + 3 * MIN, &p));
        assert_eq!(b3.until, NOW + 5 * MIN, "the fourth doubles");
        // Three in one round set one window, not three.
        let (one_round, _) = put(next(&key(), None, &not_registered(3), NOW, &p));
        assert_eq!((one_round.windows, one_round.until), (1, NOW + MIN));
    }

    #[test]
    fn a_registration_resets_and_a_quiet_round_changes_nothing() {
        let p = Policy::default();
        let (b, _) = put(next(&key(), None, &launch_error(), NOW, &p));
        let stored = Backoff { version: 1, ..b };
        let registered = Round {
            registered: true,
            ..Round::default()
        };
        assert_eq!(next(&key(), Some(&stored), &registered, NOW, &p), Change::Clear);
        assert_eq!(next(&key(), None, &registered, NOW, &p), Change::Unchanged);
        assert_eq!(
            next(&key(), Some(&stored), &Round::default(), NOW, &p),
            Change::Unchanged
        );
        // A registration and a failure in one round: counts from zero, version kept.
        let mixed = Round {
            registered: true,
            ..not_registered(1)
        };
        let (after, set) = put(next(&key(), Some(&stored), &mixed, NOW, &p));
        assert!(!set);
        assert_eq!((after.failures, after.windows, after.version), (1, 0, 1));
    }

    #[test]
    fn only_open_windows_hold_back() {
        let p = Policy::default();
        let (b, _) = put(next(&key(), None, &launch_error(), NOW, &p));
        assert_eq!(held_back(std::slice::from_ref(&b), NOW + MIN - 1).len(), 1);
        assert!(held_back(std::slice::from_ref(&b), NOW + MIN).is_empty());
    }

    #[test]
    fn the_reason_says_until_when_and_why() {
        let p = Policy::default();
        let (b, _) = put(next(&key(), None, &launch_error(), NOW, &p));
        let r = reason(&b);
        assert_eq!(r.kind(), crate::decide::provisioning::unschedulable::Kind::BackedOff);
        assert_eq!(
            r.to_string(),
            "NodePool web is backed off until 1970-01-12T13:47:40Z after 1 failed launches: \
             launch failed: EC2NodeClass bad-sg selects no security group"
        );
    }
}
