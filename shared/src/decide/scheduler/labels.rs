//! Label views of a node for matching and topology, without copying its labels: a node's
//! own labels over its instance type's, and a planned node's before it has a hostname.

use std::collections::BTreeMap;

use super::super::topology::Domains;
use crate::model::Requirements;
use crate::model::well_known as wk;

/// Labels of a node in two parts: the node's own and its instance type's.
pub(super) struct Split<'a> {
    /// The node's labels (template, zone, capacity type, region, maybe hostname).
    pub(super) node: &'a BTreeMap<String, String>,
    /// The instance type's labels.
    pub(super) instance: &'a BTreeMap<String, String>,
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
}

impl Domains for Split<'_> {
    fn domain(&self, key: &str) -> Option<&str> {
        self.node
            .get(key)
            .or_else(|| self.instance.get(key))
            .map(String::as_str)
    }
}

/// Whether the labels satisfy every requirement (an absent label satisfies only the
/// requirements that allow absence).
pub(super) fn matches_split(req: &Requirements, labels: &Split<'_>) -> bool {
    req.iter().all(|r| match labels.domain(r.key()) {
        Some(v) => r.has(v),
        None => r.allows_absent(),
    })
}
