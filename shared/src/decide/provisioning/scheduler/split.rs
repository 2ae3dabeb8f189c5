//! A node's labels in parts, for matching and topology without copying them: the node's
//! own labels over its instance type's, and the requirements on the custom keys its
//! NodePool labels it with at launch (Karpenter matches a NodeClaim's requirements, the
//! NodePool's with its instance types', `Requirements.Compatible` in `NodeClaim.CanAdd`).

use std::collections::BTreeMap;

use crate::decide::provisioning::scheduler::custom_keys::narrowed;
use crate::decide::provisioning::topology::Domains;
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
