//! Which nodes a topology spread constraint counts: its `nodeAffinityPolicy` (default
//! `Honor`: only the nodes that the pod's node selector and required node affinity
//! accept) and `nodeTaintsPolicy` (default `Ignore`; `Honor`: only the nodes whose
//! `NoSchedule`/`NoExecute` taints the pod tolerates). Those nodes are the spread's
//! domains, and only the pods on them count (kube-scheduler's podtopologyspread
//! `topologySpreadConstraint.matchNodeInclusionPolicies`; Karpenter's
//! `TopologyNodeFilter`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::decide::provisioning::taints::untolerated;
use crate::model::{Requirement, Requirements};

/// The nodes a spread counts. The default admits every node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeInclusion {
    /// With `nodeAffinityPolicy: Honor` and a pod that has a node selector or required
    /// node affinity: its OR branches (without volume zones, which kube-scheduler's
    /// `GetRequiredNodeAffinity` does not read).
    pub affinity: Option<Vec<Requirements>>,
    /// With `nodeTaintsPolicy: Honor`: the pod's tolerations.
    pub taints: Option<Tolerations>,
}

/// A pod's tolerations, comparable and hashable (k8s-openapi's `Toleration` is neither
/// `Eq` nor `Hash`), by their JSON form.
#[derive(Clone, Debug)]
pub struct Tolerations {
    list: Vec<Toleration>,
    key: String,
}

impl Tolerations {
    /// Wraps a list of tolerations.
    pub fn new(list: Vec<Toleration>) -> Self {
        let key = serde_json::to_string(&list).unwrap_or_default();
        Tolerations { list, key }
    }
}

impl PartialEq for Tolerations {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Tolerations {}

impl std::hash::Hash for Tolerations {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl NodeInclusion {
    /// Whether every node is counted.
    pub fn admits_all(&self) -> bool {
        self.affinity.is_none() && self.taints.is_none()
    }

    /// Whether a node whose labels meet a requirement as `meets` says, with these taints,
    /// is counted. For a planned node whose label on a key is not decided yet, `meets`
    /// answers whether it may still meet it (Karpenter's `TopologyNodeFilter.
    /// MatchesRequirements`: compatible requirements count).
    pub fn admits(&self, meets: impl Fn(&Requirement) -> bool, taints: &[Taint]) -> bool {
        let affinity_ok = self
            .affinity
            .as_ref()
            .is_none_or(|branches| branches.iter().any(|b| b.iter().all(&meets)));
        affinity_ok
            && self
                .taints
                .as_ref()
                .is_none_or(|t| untolerated(&t.list, taints).is_none())
    }

    /// [`NodeInclusion::admits`] for a label map.
    pub fn admits_labels(&self, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
        let meets = |r: &Requirement| match labels.get(r.key()) {
            Some(v) => r.has(v),
            None => r.allows_absent(),
        };
        self.admits(meets, taints)
    }
}
