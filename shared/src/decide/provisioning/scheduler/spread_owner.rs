//! A hard spread as the class that owns it has it, over a key other than the hostname:
//! what the scheduler needs to keep that spread within its maxSkew for the owner's pods
//! while it places the pods the spread counts (Karpenter's `TopologyGroup` with its
//! owners, `TopologyGroup.AddOwner`, and `domainMinCount`).

use crate::decide::provisioning::scheduler::index::ClassId;

/// A hard zonal spread on a topology group, as a class that owns it has it.
#[derive(Clone, Debug)]
pub(super) struct SpreadOwner {
    /// The class that owns it.
    pub(super) class: ClassId,
    /// The spread's maxSkew.
    pub(super) max_skew: i32,
    /// The owner's zones for that spread's global minimum.
    pub(super) domains: Option<Vec<String>>,
    /// The spread's minDomains.
    pub(super) min_domains: Option<i32>,
    /// Whether it counts nodes whatever their labels (no node affinity it honours).
    pub(super) counts_every_node: bool,
}
