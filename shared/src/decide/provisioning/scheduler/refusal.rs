//! Why a planned node does not take a pod (Karpenter's `NodeClaim.CanAdd` errors), and
//! whether that holds for good: a class's cursor over a zone's planned nodes moves past
//! those that refuse it for good, so that its later pods do not try them again.

/// Why a planned node does not take a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Not enough room left: a larger type may make it (see
    /// [`crate::decide::provisioning::scheduler::new_node::NewNode::larger_type_for`]).
    NoRoom,
    /// Too few of its types would still hold its pods for its NodePool's `minValues`.
    MinValues,
    /// It refuses the pod's class for good: the class's share of the node, taints, ports,
    /// volumes, requirements, hostname constraints; none of these turn in the class's
    /// favour as the plan grows.
    ForGood,
    /// It may take a pod of the class later (zonal spreads, pod affinity).
    ForNow,
}

impl Refusal {
    /// Whether the node refuses the pod's class for good: every refusal but
    /// [`Refusal::ForNow`].
    pub(super) fn is_for_good(self) -> bool {
        self != Refusal::ForNow
    }
}
