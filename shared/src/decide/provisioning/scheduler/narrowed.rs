//! What a pod's placement narrows on a planned node, as [`NewNode::can_add`] finds it and
//! [`NewNode::add`] applies it (Karpenter's `NodeClaim.CanAdd` returns the updated
//! requirements and instance types that `NodeClaim.Add` takes).
//!
//! [`NewNode::can_add`]: crate::decide::provisioning::scheduler::new_node::NewNode::can_add
//! [`NewNode::add`]: crate::decide::provisioning::scheduler::new_node::NewNode::add

use crate::decide::provisioning::scheduler::index::TypeId;
use crate::model::Requirements;

/// What a pod's placement narrows on its node: the candidate types, the types pinned by
/// the keys topology reads, the custom keys' values.
pub(super) struct Narrowed {
    /// The types that still fit every pod, when the pod is the first of its class.
    pub(super) candidates: Option<Vec<TypeId>>,
    /// The types that agree with the target on the keys topology reads, when some are read.
    pub(super) pinned: Option<Vec<TypeId>>,
    /// The custom keys' values, narrowed to the pod's.
    pub(super) custom: Option<Requirements>,
}
