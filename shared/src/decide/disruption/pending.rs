//! Pending pods in a disruption's simulation: they keep the room they have, and a pod that
//! cannot be placed anyway holds nothing back.
//!
//! Karpenter puts the pending pods among the pods to place when it simulates a removal
//! (`SimulateScheduling` in `pkg/controllers/disruption/helpers.go`), and accepts the
//! result when every pod that was not pending is placed
//! (`Results.AllNonPendingPodsScheduled` in `pkg/controllers/provisioning/scheduling/
//! scheduler.go`: "We don't care if a pod was pending before consolidation and will still
//! be pending after"). A pod that no node will take (a selector nothing matches, a claim
//! that cannot bind, a pod of a NodePool Carpool does not manage) therefore does not stop
//! consolidation. Carpool does the same, pending pods first:
//!
//! 1. [`Baseline`]: once per decision, where the provisioner's simulation puts the pending
//!    pods now: on an existing node, on a new node, or nowhere.
//! 2. [`pending_first`]: for each removal, the pending pods are placed before the removed
//!    nodes' pods, on the nodes that stay (the removed ones cordoned), then on new nodes of
//!    the snapshot's own NodePools (the provisioner's to launch, not the command's). Those
//!    placed on an existing node are bound to it in the view in which the moving pods are
//!    then placed ([`super::simulate::place`]): a command never takes the room a pending
//!    pod is about to use.
//!
//! Flapping guard: a removal is refused for a consolidation when a pending pod that the
//! provisioner can place now could not be placed after it, or, having room on an existing
//! node now, would need a new node after it (the removal would take the room it was about
//! to get, and the provisioner would launch for it at once). Karpenter counts that pod's
//! new NodeClaim in the command instead; Carpool keeps the pending pods' capacity the
//! provisioner's and refuses. Pods the provisioner cannot place now are placed in the
//! simulation too (a removal may make room for them, and they then take it), but never
//! make a removal fail.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodCondition;

use super::simulate::Misfit;
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::pod::{is_provisionable, pod_key};
use crate::decide::provisioning::scheduler::Scheduler;
use crate::model::pod::{Pod, PodStatus};
use crate::snapshot::Snapshot;

/// Where the provisioner's simulation puts the pending pods before any removal.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    /// The pending pods (`namespace/name`).
    pub pending: BTreeSet<String>,
    /// Those placed on an existing node, with the node.
    pub on_existing: BTreeMap<String, String>,
    /// Those placed on new nodes.
    pub on_new: BTreeSet<String>,
}

impl Baseline {
    /// The provisioner's simulation of `snapshot`'s pending pods, with its own NodePools;
    /// empty (and not simulated) when no pod is pending.
    pub fn of(snapshot: &Snapshot, region: &RegionCatalog<'_>) -> Self {
        let pending: BTreeSet<String> = snapshot
            .pods
            .iter()
            .filter(|p| is_provisionable(p))
            .map(pod_key)
            .collect();
        if pending.is_empty() {
            return Baseline::default();
        }
        let plan = Scheduler::new(snapshot, region).run().plan;
        let on_existing = plan
            .existing
            .iter()
            .flat_map(|e| e.pods.iter().map(|p| (p.clone(), e.node.clone())))
            .filter(|(p, _)| pending.contains(p))
            .collect();
        let on_new = plan
            .nodes
            .iter()
            .flat_map(|n| n.pods.iter().cloned())
            .filter(|p| pending.contains(p))
            .collect();
        Baseline {
            pending,
            on_existing,
            on_new,
        }
    }

    /// Whether no pod is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// A pending pod that has room on `node` now (the first by name).
    pub fn landing_on(&self, node: &str) -> Option<&str> {
        self.on_existing
            .iter()
            .find(|(_, n)| n.as_str() == node)
            .map(|(p, _)| p.as_str())
    }
}

/// The view a removal's pods are placed in, with the pending pods placed first.
#[derive(Clone, Debug)]
pub struct PendingView {
    /// The snapshot with the removed nodes cordoned and the pending pods that went onto an
    /// existing node bound to it.
    pub snapshot: Snapshot,
    /// The first pending pod the removal would displace (see the module doc), if any.
    pub displaced: Option<Misfit>,
}

/// A pod bound to `node` and running there, as the simulation counts it.
fn bind(pod: &mut Pod, node: &str) {
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    });
}

/// Places `snapshot`'s pending pods as if the `removed` nodes were gone, and returns the
/// view in which the removed nodes' pods are to be placed: see the module doc.
pub fn pending_first(
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    removed: &BTreeSet<String>,
    baseline: &Baseline,
) -> PendingView {
    let mut view = snapshot.clone();
    for n in &mut view.nodes {
        if n.metadata.name.as_ref().is_some_and(|name| removed.contains(name)) {
            n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        }
    }
    let plan = Scheduler::new(&view, region).run().plan;
    let on_existing: BTreeMap<&str, &str> = plan
        .existing
        .iter()
        .flat_map(|e| e.pods.iter().map(|p| (p.as_str(), e.node.as_str())))
        .collect();
    let on_new: BTreeSet<&str> = plan
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter().map(String::as_str))
        .collect();
    let displaced = baseline
        .on_existing
        .iter()
        .find(|(p, _)| !on_existing.contains_key(p.as_str()))
        .map(|(p, node)| Misfit::Displaces {
            pod: p.clone(),
            detail: if on_new.contains(p.as_str()) {
                format!("has room on {node} now and would need a new node without the node(s) removed")
            } else {
                format!("has room on {node} now and would fit nowhere without the node(s) removed")
            },
        })
        .or_else(|| {
            baseline
                .on_new
                .iter()
                .find(|p| !on_existing.contains_key(p.as_str()) && !on_new.contains(p.as_str()))
                .map(|p| Misfit::Displaces {
                    pod: p.clone(),
                    detail: "can be placed now and would fit nowhere without the node(s) removed".into(),
                })
        });
    for p in &mut view.pods {
        if !is_provisionable(p) {
            continue;
        }
        if let Some(node) = on_existing.get(pod_key(p).as_str()) {
            bind(p, node);
        }
    }
    PendingView {
        snapshot: view,
        displaced,
    }
}
