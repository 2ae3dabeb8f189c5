//! Preferred node affinity as a tie-break at equal price: the summed weight of the terms a
//! node satisfies, as kube-scheduler's NodeAffinity plugin scores it
//! (`(*NodeAffinity).Score`), and the best a new node under an offer key can satisfy at a
//! price (a planned node's types are ordered by it at equal price,
//! [`crate::decide::provisioning::scheduler::new_node`]). Karpenter requires the heaviest
//! term and relaxes it (`Preferences.Relax`, see
//! [`crate::decide::provisioning::scheduler::relaxation`]); these only break ties that
//! Karpenter leaves to its ordering.

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::index::{TypeId, Types};
use crate::decide::provisioning::scheduler::offer_key::OfferKey;
use crate::decide::provisioning::scheduler::split::{Split, matches_split};
use crate::decide::provisioning::templates::Template;

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

/// The best preference weight of `pod` over the types among `types` that cost no more
/// than `price` under offer key `key` of template `t`: what a new node there can satisfy
/// of the pod's preferred node affinity at that price.
pub(super) fn preference_weight_at(key: &OfferKey, t: &Template, pod: &PodInfo, types: &[TypeId], price: f64) -> i64 {
    if pod.preferred.is_empty() {
        return 0;
    }
    types
        .iter()
        .filter(|&&i| key.prices[i].is_some_and(|q| q <= price * (1.0 + 1e-9)))
        .map(|&i| {
            let split = Split {
                node: &key.labels,
                instance: &t.ty(i).labels,
                custom: &t.custom,
            };
            preference_weight(pod, &split)
        })
        .max()
        .unwrap_or(0)
}
