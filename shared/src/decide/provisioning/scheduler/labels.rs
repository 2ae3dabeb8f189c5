//! Label views of a node for matching and topology, without copying its labels: a node's
//! own labels over its instance type's, and a planned node's before it has a hostname;
//! and the labels a NodePool itself decides (requirements on custom keys, which no
//! instance type defines), narrowed as pods join a planned node.

use std::collections::BTreeMap;

use crate::decide::provisioning::topology::Domains;
use crate::model::well_known as wk;
use crate::model::{Requirement, Requirements};

/// Labels of a node in parts: the node's own, its instance type's, and the requirements on
/// the custom keys its NodePool labels it with at launch.
pub(super) struct Split<'a> {
    /// The node's labels (template, zone, capacity type, region, maybe hostname).
    pub(super) node: &'a BTreeMap<String, String>,
    /// The instance type's labels.
    pub(super) instance: &'a BTreeMap<String, String>,
    /// The values still allowed for each custom key of a planned node (empty for a node
    /// that exists: its labels are known).
    pub(super) custom: &'a Requirements,
}

/// A planned node's labels before it has a hostname label of its own.
pub(super) struct WithHost<'a> {
    /// The hostname it will have.
    pub(super) hostname: &'a str,
    /// Its other labels.
    pub(super) labels: Split<'a>,
}

impl Domains for WithHost<'_> {
    fn domain(&self, key: &str) -> Option<&str> {
        if key == wk::HOSTNAME {
            Some(self.hostname)
        } else {
            self.labels.domain(key)
        }
    }

    fn may_meet(&self, r: &Requirement) -> bool {
        match self.domain(r.key()) {
            Some(v) => r.has(v),
            None => self.labels.may_meet(r),
        }
    }
}

impl Domains for Split<'_> {
    /// A custom key is a domain once the node's requirement on it allows one value only.
    fn domain(&self, key: &str) -> Option<&str> {
        self.node
            .get(key)
            .or_else(|| self.instance.get(key))
            .or_else(|| {
                self.custom
                    .get(key)
                    .filter(|r| !r.is_complement() && r.values().len() == 1)
                    .and_then(|r| r.values().iter().next())
            })
            .map(String::as_str)
    }
    fn may_meet(&self, r: &Requirement) -> bool {
        match self.domain(r.key()) {
            Some(v) => r.has(v),
            None => match self.custom.get(r.key()) {
                Some(c) => narrowed(c, r).is_some(),
                None => r.allows_absent(),
            },
        }
    }
}

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

/// Whether the labels satisfy every requirement (an absent label satisfies only the
/// requirements that allow absence; a custom key, one its allowed values meet).
pub(super) fn matches_split(req: &Requirements, labels: &Split<'_>) -> bool {
    req.iter().all(|r| match labels.domain(r.key()) {
        Some(v) => r.has(v),
        None => match labels.custom.get(r.key()) {
            Some(c) => narrowed(c, r).is_some(),
            None => r.allows_absent(),
        },
    })
}
