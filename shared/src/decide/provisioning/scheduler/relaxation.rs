//! Relaxation levels: the order in which a pod's preferences are given up when no node
//! takes it (Karpenter's `preferences.go`, `Preferences.Relax`). Preferred pod
//! (anti-)affinity goes first; then the preferred node affinity terms, one at a time: the
//! heaviest alone is required first, then the next heaviest alone, and so on, then none
//! (Karpenter's `newPodRequirements` requires the heaviest term only, and
//! `removePreferredNodeAffinityTerm` drops it); then `ScheduleAnyway` spreads; last, when
//! some NodePool has a `PreferNoSchedule` taint the pod does not tolerate, a toleration of
//! every `PreferNoSchedule` taint (`toleratePreferNoScheduleTaints`). The scheduler tries
//! each level in turn ([`crate::decide::provisioning::scheduler::Scheduler`], as Karpenter's
//! `Scheduler.trySchedule`).

use k8s_openapi::api::core::v1::Taint;

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::level::Level;
use crate::decide::provisioning::taints::untolerated_by_nodepool;
use crate::decide::provisioning::topology::Strictness;
use crate::model::Requirements;

/// A pod's relaxation levels, strictest first. `nodepool_taints` are the taints of every
/// NodePool, for the last level.
pub(super) fn levels<'a>(pod: &PodInfo, nodepool_taints: impl IntoIterator<Item = &'a Taint>) -> Vec<Level> {
    let n = pod.preferred.len();
    let has_pod_prefs = !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
    let has_soft = pod.spreads.iter().any(|s| !s.hard);
    let mut out = vec![Level {
        strict: Strictness {
            preferred_pod_affinity: true,
            soft_spreads: true,
        },
        node_pref: (n > 0).then_some(0),
        tolerate_prefer_no_schedule: false,
    }];
    let mut cur = out[0];
    if has_pod_prefs {
        cur.strict.preferred_pod_affinity = false;
        out.push(cur);
    }
    for k in 1..=n {
        cur.node_pref = (k < n).then_some(k);
        out.push(cur);
    }
    if has_soft {
        cur.strict.soft_spreads = false;
        out.push(cur);
    }
    let repelled = nodepool_taints.into_iter().any(|t| {
        t.effect == "PreferNoSchedule"
            && untolerated_by_nodepool(&pod.tolerations, std::slice::from_ref(t), false).is_some()
    });
    if repelled {
        cur.tolerate_prefer_no_schedule = true;
        out.push(cur);
    }
    out
}

/// A pod's requirement branches at a level: each required branch with the level's
/// preferred term added.
pub(super) fn branches_at(pod: &PodInfo, level: Level) -> Vec<Requirements> {
    let pref = level.node_pref.and_then(|i| pod.preferred.get(i));
    pod.branches
        .iter()
        .map(|b| {
            let mut b = b.clone();
            if let Some((_, pref)) = pref {
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
