//! One relaxation level of a pod's preferences: which of its soft constraints still count
//! (Karpenter's `Preferences`, whose `Relax` gives them up one at a time; the order is
//! [`crate::decide::provisioning::scheduler::relaxation`]'s).

use crate::decide::provisioning::topology::Strictness;

/// One relaxation level of a pod's preferences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Level {
    /// Which soft constraints still count.
    pub(super) strict: Strictness,
    /// The preferred node affinity term required at this level (an index into
    /// [`crate::decide::provisioning::pod::PodInfo::preferred`], heaviest first), or none.
    pub(super) node_pref: Option<usize>,
    /// Whether the NodePools' `PreferNoSchedule` taints are tolerated.
    pub(super) tolerate_prefer_no_schedule: bool,
}
