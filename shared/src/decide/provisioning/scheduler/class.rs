//! A pod class: pods with identical scheduling constraints (a Deployment's pods form one)
//! are scheduled as one, with what the class needs precomputed once (its relaxation
//! levels, its requirement branches and eligible zones at each, its topology groups and
//! the hard spreads that count it), as Karpenter caches a pod's `PodData`
//! (`Scheduler.updateCachedPodData`). [`crate::decide::provisioning::scheduler::classes`] sorts
//! the pods into classes.

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::decide::provisioning::scheduler::index::PodId;
use crate::decide::provisioning::scheduler::level::Level;
use crate::decide::provisioning::scheduler::spread_owner::SpreadOwner;
use crate::decide::provisioning::taints::untolerated_by_nodepool;
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::topology::PodGroups;
use crate::model::{Requirements, Resources};

/// What a class is: fixed for the run.
pub(super) struct Class {
    /// Its first pod, which stands for all of them.
    pub(super) rep: PodId,
    /// One pod's requests.
    pub(super) requests: Resources,
    /// At most this many of its pods on one node.
    pub(super) per_node_cap: u32,
    /// Its relaxation levels, strictest first; never empty.
    pub(super) levels: Vec<Level>,
    /// Per level: its requirement branches.
    pub(super) branches: Vec<Vec<Requirements>>,
    /// Per level: the zones its pods may go to (existing nodes' and the NodePools').
    pub(super) zones: Vec<Vec<String>>,
    /// Per spread: the domains its global minimum is taken over (see
    /// [`crate::decide::provisioning::scheduler::classes`]).
    pub(super) spread_domains: Vec<Option<Vec<String>>>,
    /// The topology groups its constraints refer to.
    pub(super) groups: PodGroups,
    /// The spread groups (not by hostname) its pods count in, with their topology key and
    /// the hard spreads of the classes that own each.
    pub(super) counted_in_spreads: Vec<(usize, String, Vec<SpreadOwner>)>,
}

impl Class {
    /// The first taint of template `t` that keeps pods of the class, whose tolerations
    /// are `tolerations` (every pod of a class tolerates alike), off its nodes at level
    /// `li` (`PreferNoSchedule` counts until the level tolerates it).
    pub(super) fn nodepool_taint<'t>(
        &self,
        li: usize,
        tolerations: &[Toleration],
        t: &'t Template,
    ) -> Option<&'t Taint> {
        let tolerate = self.levels.get(li).is_some_and(|l| l.tolerate_prefer_no_schedule);
        untolerated_by_nodepool(tolerations, &t.taints, tolerate)
    }
}
