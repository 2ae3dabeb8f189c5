//! The pods still waiting, by class: what the choice of a new node's type reads to fill
//! it for them (Karpenter fills a NodeClaim pod by pod from its queue, `Scheduler.Solve`;
//! Carpool sizes the node for the classes still waiting,
//! [`crate::decide::provisioning::scheduler::target`]).

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::class_state::ClassState;
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, PodId};

/// The classes, where each stands, and their pods.
pub(super) struct Demand<'a> {
    /// The pending pods.
    pub(super) pods: &'a IdVec<PodId, PodInfo>,
    /// Each class.
    pub(super) classes: &'a IdVec<ClassId, Class>,
    /// Where each class stands.
    pub(super) progress: &'a IdVec<ClassId, ClassState>,
}

impl Demand<'_> {
    /// The level class `c` has reached, as an index into its levels.
    pub(super) fn current_level(&self, c: ClassId) -> usize {
        self.progress[c].current_level(&self.classes[c])
    }

    /// The pod that stands for class `c`.
    pub(super) fn rep(&self, c: ClassId) -> &PodInfo {
        &self.pods[self.classes[c].rep]
    }
}
