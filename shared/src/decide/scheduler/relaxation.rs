//! Relaxation levels: the order in which a pod's preferences are given up when no node
//! takes it (Karpenter's `preferences.go`). Preferred pod (anti-)affinity goes first, then
//! preferred node affinity terms (lightest first), then `ScheduleAnyway` spreads.

use super::super::pod::PodInfo;
use super::super::topology::Strictness;
use crate::model::Requirements;

/// One relaxation level of a pod's preferences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Level {
    /// Which soft constraints still count.
    pub(super) strict: Strictness,
    /// Preferred node affinity terms kept, heaviest first.
    pub(super) node_prefs: usize,
}

/// A pod's relaxation levels, strictest first.
pub(super) fn levels(pod: &PodInfo) -> Vec<Level> {
    let n = pod.preferred.len();
    let has_pod_prefs = !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
    let has_soft = pod.spreads.iter().any(|s| !s.hard);
    let mut out = vec![Level {
        strict: Strictness {
            preferred_pod_affinity: true,
            soft_spreads: true,
        },
        node_prefs: n,
    }];
    let mut cur = out[0];
    if has_pod_prefs {
        cur.strict.preferred_pod_affinity = false;
        out.push(cur);
    }
    for k in (0..n).rev() {
        cur.node_prefs = k;
        out.push(cur);
    }
    if has_soft {
        cur.strict.soft_spreads = false;
        out.push(cur);
    }
    out
}

/// A pod's requirement branches at a level: each required branch with the kept preferred
/// terms added.
pub(super) fn branches_at(pod: &PodInfo, level: Level) -> Vec<Requirements> {
    pod.branches
        .iter()
        .map(|b| {
            let mut b = b.clone();
            for (_, pref) in pod.preferred.iter().take(level.node_prefs) {
                b.add_all(pref);
            }
            b
        })
        .collect()
}

/// Whether, at `level`, the pod's remaining soft constraints only steer the choice among
/// nodes that exist or are planned: preferred pod (anti-)affinity and `ScheduleAnyway`
/// spreads never open a node of their own.
pub(super) fn soft_only(pod: &PodInfo, level: Level) -> bool {
    (level.strict.preferred_pod_affinity
        && (!pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty()))
        || (level.strict.soft_spreads && pod.spreads.iter().any(|s| !s.hard))
}
