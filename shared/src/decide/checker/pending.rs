//! Which pods the plan must account for, read from the Pod objects themselves:
//!
//! - **pending**: no `spec.nodeName`, phase `Pending` (or none), not being deleted, not a
//!   DaemonSet's (the DaemonSet controller places those), and either not yet looked at by
//!   kube-scheduler or marked `PodScheduled=False` with reason `Unschedulable`, the pods
//!   Karpenter provisions for (`pkg/utils/pod.IsProvisionable`);
//! - **preempting**: such a pod with `status.nominatedNodeName` set: kube-scheduler is
//!   evicting lower-priority pods to make room for it, so it must not be launched for
//!   (Karpenter's `IsProvisionable` excludes `IsPreempting` pods); the plan may leave it
//!   out, report it, or place it on an existing node, but not on a new one;
//! - **bound**: on a node, and not finished: kube-scheduler does not even see pods in
//!   phase `Succeeded` or `Failed` (its informer selects `status.phase!=Succeeded,
//!   status.phase!=Failed`). A bound pod being deleted still holds its resources, ports
//!   and affinity, but does not count in topology spread (podtopologyspread
//!   `countPodsMatchSelector` skips pods with a deletion timestamp).

/// What a pod is, for the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// A pod the plan must place or report.
    Pending,
    /// A pending pod that is preempting: never on a new node.
    Preempting,
    /// On an existing node, by name; `terminating` when it is being deleted.
    Bound {
        /// The node's name.
        node: String,
        /// Whether it has a deletion timestamp.
        terminating: bool,
    },
    /// Anything else: finished, deleted while pending, a DaemonSet's pending pod, already
    /// being scheduled.
    Ignored,
}

/// `namespace/name` of a pod.
pub(crate) fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        namespace(pod),
        pod.metadata.name.as_deref().unwrap_or("<unnamed>")
    )
}

/// The pod's namespace (`default` when unset).
pub(crate) fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// Reads a pod's standing.
pub(crate) fn standing(pod: &Pod) -> Standing {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Standing::Ignored;
    }
    let Some(spec) = &pod.spec else {
        return Standing::Ignored;
    };
    if let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Standing::Bound {
            node: node.to_string(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        };
    }
    let daemon = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    if pod.metadata.deletion_timestamp.is_some() || daemon || phase.is_some_and(|p| p != "Pending") {
        return Standing::Ignored;
    }
    let status = pod.status.as_ref();
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    if scheduled.is_some_and(|c| !(c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))) {
        return Standing::Ignored;
    }
    if status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return Standing::Preempting;
    }
    Standing::Pending
}
use crate::model::pod::Pod;
