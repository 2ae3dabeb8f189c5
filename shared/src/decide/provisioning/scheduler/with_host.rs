//! A node being opened, before it has a hostname label of its own: its labels in parts
//! ([`crate::decide::provisioning::scheduler::split::Split`]) with the hostname it will have, so
//! that hostname topology counts it as a new domain (Karpenter registers a new NodeClaim's
//! hostname with its topology, `NodeClaim.Add`, `Topology.Register`).

use crate::decide::provisioning::scheduler::split::Split;
use crate::decide::provisioning::topology::Domains;
use crate::model::Requirement;
use crate::model::well_known as wk;

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
