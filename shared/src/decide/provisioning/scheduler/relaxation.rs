//! Relaxation levels: the order in which a pod's preferences are given up when no node
//! takes it (Karpenter's `preferences.go`, `Preferences.Relax`). Preferred pod
//! (anti-)affinity goes first; then the preferred node affinity terms, one at a time: the
//! heaviest alone is required first, then the next heaviest alone, and so on, then none
//! (Karpenter's `newPodRequirements` requires the heaviest term only, and
//! `removePreferredNodeAffinityTerm` drops it); then `ScheduleAnyway` spreads; last, when
//! some NodePool has a `PreferNoSchedule` taint the pod does not tolerate, a toleration of
//! every `PreferNoSchedule` taint (`toleratePreferNoScheduleTaints`).

use k8s_openapi::api::core::v1::Taint;

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::Scheduler;
use crate::decide::provisioning::scheduler::index::{OfferKeyId, PodId, TemplateId, TypeId, Types};
use crate::decide::provisioning::scheduler::labels::{Split, matches_split};
use crate::decide::provisioning::scheduler::new_node::NewNode;
use crate::decide::provisioning::taints::untolerated_by_nodepool;
use crate::decide::provisioning::topology::Strictness;
use crate::model::Requirements;

/// One relaxation level of a pod's preferences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Level {
    /// Which soft constraints still count.
    pub(super) strict: Strictness,
    /// The preferred node affinity term required at this level (an index into
    /// [`PodInfo::preferred`], heaviest first), or none.
    pub(super) node_pref: Option<usize>,
    /// Whether the NodePools' `PreferNoSchedule` taints are tolerated.
    pub(super) tolerate_prefer_no_schedule: bool,
}

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

/// The summed weight of the pod's preferred node affinity terms that a node with these
/// labels satisfies, as kube-scheduler's NodeAffinity plugin scores it
/// (`(*NodeAffinity).Score`): every term counts, whatever the level.
pub(super) fn preference_weight(pod: &PodInfo, split: &Split<'_>) -> i64 {
    pod.preferred
        .iter()
        .filter(|(_, r)| matches_split(r, split))
        .map(|(w, _)| i64::from(*w))
        .sum()
}

impl Scheduler {
    /// The best preference weight of pod `pod` over the types among `types` that cost no
    /// more than `price` under offer key `k` of template `ti`: what a new node there can
    /// satisfy of the pod's preferred node affinity at that price.
    pub(super) fn preference_weight_at(
        &self,
        pod: PodId,
        ti: TemplateId,
        k: OfferKeyId,
        types: &[TypeId],
        price: f64,
    ) -> i64 {
        let p = &self.pods[pod];
        if p.preferred.is_empty() {
            return 0;
        }
        let key = &self.offer_keys[ti][k];
        let t = &self.templates[ti];
        types
            .iter()
            .filter(|&&i| key.prices[i].is_some_and(|q| q <= price * (1.0 + 1e-9)))
            .map(|&i| {
                let split = Split {
                    node: &key.labels,
                    instance: &t.ty(i).labels,
                    custom: &t.custom,
                };
                preference_weight(p, &split)
            })
            .max()
            .unwrap_or(0)
    }
}

impl Scheduler {
    /// Reorders a planned node's fitting types, cheapest first, so that among types of
    /// the same price those its pods prefer (by summed preference weight) come first.
    pub(super) fn prefer_at_equal_price(&self, node: &NewNode, fitting: &mut [TypeId]) {
        let classes: Vec<(&PodInfo, i64)> = node
            .class_count
            .iter()
            .map(|(&c, &n)| (&self.pods[self.classes[c].rep], i64::from(n)))
            .filter(|(p, _)| !p.preferred.is_empty())
            .collect();
        if classes.is_empty() {
            return;
        }
        let t = &self.templates[node.template];
        let price = |i: TypeId| t.ty(i).price(&node.zone, node.capacity_type).unwrap_or(f64::INFINITY);
        let weight = |i: TypeId| {
            let split = Split {
                node: &node.labels,
                instance: &t.ty(i).labels,
                custom: &node.custom,
            };
            classes
                .iter()
                .map(|(p, n)| n * preference_weight(p, &split))
                .sum::<i64>()
        };
        let mut keyed: Vec<(f64, i64, TypeId)> = fitting.iter().map(|&i| (price(i), -weight(i), i)).collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (slot, (_, _, i)) in fitting.iter_mut().zip(keyed) {
            *slot = i;
        }
    }
}
