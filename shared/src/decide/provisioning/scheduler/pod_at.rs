//! A pending pod as the scheduler offers it to a node at one relaxation level: the pod,
//! its class, and what the class fixes at that level (Karpenter hands a pod and its
//! `PodData`, relaxed by `Preferences.Relax`, to `ExistingNode.CanAdd` and
//! `NodeClaim.CanAdd`).

use k8s_openapi::api::core::v1::Taint;

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, PodId};
use crate::decide::provisioning::scheduler::level::Level;
use crate::decide::provisioning::templates::Template;
use crate::model::Requirements;

/// A pod at a relaxation level of its class.
pub(super) struct PodAt<'a> {
    /// The pod's id.
    pub(super) id: PodId,
    /// The pod.
    pub(super) pod: &'a PodInfo,
    /// Its class's id.
    pub(super) class_id: ClassId,
    /// Its class.
    pub(super) class: &'a Class,
    /// The level (an index into the class's levels).
    pub(super) li: usize,
}

impl<'a> PodAt<'a> {
    /// Pod `id` at level `li` of its class.
    pub(super) fn new(
        id: PodId,
        li: usize,
        pods: &'a IdVec<PodId, PodInfo>,
        class_of: &IdVec<PodId, ClassId>,
        classes: &'a IdVec<ClassId, Class>,
    ) -> Self {
        let class_id = class_of[id];
        PodAt {
            id,
            pod: &pods[id],
            class_id,
            class: &classes[class_id],
            li,
        }
    }

    /// The level.
    pub(super) fn level(&self) -> Level {
        self.class.levels[self.li]
    }

    /// The pod's requirement branches (OR'ed) at the level.
    pub(super) fn branches(&self) -> &'a [Requirements] {
        &self.class.branches[self.li]
    }

    /// The first taint of template `t` that keeps the pod off its nodes at the level.
    pub(super) fn nodepool_taint<'t>(&self, t: &'t Template) -> Option<&'t Taint> {
        self.class.nodepool_taint(self.li, &self.pod.tolerations, t)
    }
}
