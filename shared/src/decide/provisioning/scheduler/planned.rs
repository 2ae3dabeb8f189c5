//! What is planned under a NodePool's limits: the capacity and count of its planned nodes
//! (Karpenter's `Scheduler.remainingResources`, lowered by `subtractMax` as each NodeClaim
//! is added).

use crate::model::Resources;

/// Capacity and node count of a template's planned nodes, for its limits.
#[derive(Clone, Debug, Default)]
pub(super) struct Planned {
    /// The capacity of their target types.
    pub(super) capacity: Resources,
    /// How many.
    pub(super) nodes: i64,
}

impl Planned {
    /// Counts one more node, of `capacity`.
    pub(super) fn open(&mut self, capacity: &Resources) {
        self.capacity = self.capacity.plus(capacity);
        self.nodes += 1;
    }

    /// Counts a planned node moved from a type of capacity `from` to one of `to`.
    pub(super) fn regrow(&mut self, from: &Resources, to: &Resources) {
        self.capacity = self.capacity.plus(to).minus(from);
    }
}
