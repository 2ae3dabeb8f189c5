//! A pod's required node affinity, as kube-scheduler's NodeAffinity filter reads it
//! (component-helpers `nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)`): every
//! `nodeSelector` pair, and, when `requiredDuringSchedulingIgnoredDuringExecution` is set,
//! at least one of its terms (none listed: no node).

use crate::model::pod::PodSpec;
use k8s_openapi::api::core::v1::NodeSelectorTerm;

use super::selector::{self, Labels};

/// The required node selector terms, if the pod sets any (an OR).
pub(crate) fn required_terms(spec: &PodSpec) -> Option<&[NodeSelectorTerm]> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
}

/// Whether a node (labels, and its name when it has one) passes the pod's required node
/// affinity.
pub(crate) fn matches(spec: &PodSpec, labels: &Labels, node_name: Option<&str>) -> bool {
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    selector_ok && required_terms(spec).is_none_or(|terms| terms.iter().any(|t| selector::term(t, labels, node_name)))
}
