//! Where a class stands during the run: the relaxation level it has reached, its pods
//! still to place and the slots reserved for them, the planned nodes that have refused it
//! for good, and the zones its pods were placed in (Karpenter keeps a pod's relaxed state
//! across `Scheduler.Solve`'s queue passes; Carpool keeps it per class).

use std::collections::{BTreeSet, HashMap};

use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::index::NewNodeId;

/// Where a class stands during the run.
pub(super) struct ClassState {
    /// The relaxation level it has reached (an index into [`Class::levels`]).
    pub(super) level: usize,
    /// Per zone, the position in that zone's planned nodes before which every node has
    /// refused the class for good.
    pub(super) cursors: HashMap<String, usize>,
    /// Pods not yet placed.
    pub(super) remaining: u32,
    /// Slots reserved for the class on planned nodes and not yet filled.
    pub(super) reserved: u32,
    /// Planned nodes holding such slots, in the order they were opened.
    pub(super) quota_nodes: Vec<NewNodeId>,
    /// The zones of the nodes, existing or planned, the plan has placed its pods on.
    pub(super) placed_zones: BTreeSet<String>,
}

impl ClassState {
    /// A class with every pod still to place.
    pub(super) fn new() -> Self {
        ClassState {
            level: 0,
            cursors: HashMap::new(),
            remaining: 0,
            reserved: 0,
            quota_nodes: Vec::new(),
            placed_zones: BTreeSet::new(),
        }
    }

    /// Pods neither placed nor already provided for by a reserved slot.
    pub(super) fn unreserved(&self) -> u32 {
        self.remaining.saturating_sub(self.reserved)
    }

    /// The level the class has reached, as an index into `class`'s levels.
    pub(super) fn current_level(&self, class: &Class) -> usize {
        self.level.min(class.levels.len().saturating_sub(1))
    }

    /// Records one of its pods placed on a node in `zone` (none: the node has no zone label).
    pub(super) fn placed_in(&mut self, zone: Option<&String>) {
        if let Some(z) = zone
            && !self.placed_zones.contains(z)
        {
            self.placed_zones.insert(z.clone());
        }
    }
}
