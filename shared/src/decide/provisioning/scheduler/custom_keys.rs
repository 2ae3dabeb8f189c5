//! The labels a NodePool itself decides: requirements on custom keys, which no instance
//! type defines, narrowed as pods join a planned node (Karpenter's
//! `Requirements.Compatible` then `Add` on a NodeClaim), and the one value of each the node
//! is labelled with at launch (`NodeClaimTemplate.resolveCustomLabelsFromRequirements`).

use crate::model::{Requirement, Requirements};

/// A custom key's allowed values `node` once a pod needing `pod` joins, or `None` when
/// the pod cannot join (Karpenter's `Requirements.Compatible` on a NodeClaim, then `Add`;
/// the node is labelled with a value of the result, see [`custom_labels`]). A node whose
/// requirement allows no value gets no label, so it takes only pods that allow absence.
pub(super) fn narrowed(node: &Requirement, pod: &Requirement) -> Option<Requirement> {
    if node.is_empty() {
        return pod.allows_absent().then(|| node.clone());
    }
    let both = node.intersection(pod);
    (!both.is_empty()).then_some(both)
}

/// The custom-key requirements of a planned node once a pod of requirement branch
/// `branch` joins, or `None` when the branch conflicts with them.
pub(super) fn narrow(custom: &Requirements, branch: &Requirements) -> Option<Requirements> {
    let mut out = custom.clone();
    for r in custom.iter() {
        if let Some(p) = branch.get(r.key()) {
            out.add(narrowed(r, p)?);
        }
    }
    Some(out)
}

/// Whether some branch of a pod fits the custom-key requirements.
pub(super) fn custom_fits(custom: &Requirements, branches: &[Requirements]) -> bool {
    custom.is_empty() || branches.iter().any(|b| narrow(custom, b).is_some())
}

/// The labels a planned node gets for its custom keys: one allowed value of each
/// (Karpenter's `NodeClaimTemplate.resolveCustomLabelsFromRequirements`, `Any()`).
pub(super) fn custom_labels(custom: &Requirements) -> impl Iterator<Item = (String, String)> + '_ {
    custom
        .iter()
        .filter_map(|r| r.any_value().map(|v| (r.key().to_string(), v)))
}
