//! A node that exists (Karpenter's `existingnode.go`): the Ready, schedulable nodes with
//! room, as kube-scheduler would place a pod on them. A node decides by itself whether it
//! takes a pod ([`ExistingNode::can_add`], Karpenter's `ExistingNode.CanAdd`: room,
//! taints, requirements, host ports, volume attach limits, topology) and takes it
//! ([`ExistingNode::add`], `ExistingNode.Add`). Its volume attach limits are its
//! CSINode's, counted against the volumes of the pods bound to it (kube-scheduler's
//! nodevolumelimits `CSILimits`). [`existing_nodes`] reads them from the snapshot
//! (Karpenter's `Scheduler.calculateExistingNodeClaims`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Taint;

use crate::decide::provisioning::namespaces::Namespaces;
use crate::decide::provisioning::pod::{HostPort, PodInfo, Volumes};
use crate::decide::provisioning::scheduler::index::PodId;
use crate::decide::provisioning::scheduler::node_view::NodeView;
use crate::decide::provisioning::scheduler::pod_at::PodAt;
use crate::decide::provisioning::scheduler::topology_check::TopologyCheck;
use crate::decide::provisioning::taints::untolerated;
use crate::decide::provisioning::topology::{PlacedPod, Topology};
use crate::decide::provisioning::volumes::{VolumeUsage, csinode_limits};
use crate::model::pod::Pod;
use crate::model::pod_requests::effective_requests;
use crate::model::well_known as wk;
use crate::model::{Node, Resources};
use crate::snapshot::Snapshot;

/// A usable existing node.
pub(super) struct ExistingNode {
    /// The node name.
    pub(super) name: String,
    /// Its labels, with a hostname.
    pub(super) labels: BTreeMap<String, String>,
    /// Its taints.
    pub(super) taints: Vec<Taint>,
    /// Allocatable less what its pods request.
    pub(super) free: Resources,
    /// Host ports in use.
    pub(super) ports: Vec<HostPort>,
    /// Volume attach limits per CSI driver, from its CSINode.
    pub(super) volume_limits: BTreeMap<String, u32>,
    /// The volumes its pods attach.
    pub(super) volumes: VolumeUsage,
    /// Pending pods planned onto it.
    pub(super) placed: Vec<PodId>,
}

/// The nodes of the snapshot: the usable ones (Ready, schedulable, not terminating), with
/// what is bound to them taken off their room, and every node as a topology domain
/// (kube-scheduler counts spread domains over all the nodes it knows). Pods bound to any
/// node, usable or not, are recorded in `topology`. The `removed` nodes (a disruption's
/// simulation) are left out, with the pods bound to them.
pub(super) fn existing_nodes(
    snapshot: &Snapshot,
    volumes: &Volumes<'_>,
    namespaces: &Namespaces,
    topology: &mut Topology,
    removed: Option<&std::collections::BTreeSet<String>>,
) -> (Vec<ExistingNode>, Vec<NodeView>) {
    let mut all_nodes = Vec::new();
    let mut by_name = HashMap::new();
    let mut limits = csinode_limits(&snapshot.csinodes);
    for n in &snapshot.nodes {
        let Ok(node) = Node::from_k8s(n) else { continue };
        if removed.is_some_and(|r| r.contains(&node.name)) {
            continue;
        }
        let mut labels = node.labels.clone();
        labels
            .entry(wk::HOSTNAME.to_string())
            .or_insert_with(|| node.name.clone());
        let usable = node.ready && !node.unschedulable && !node.terminating;
        by_name.insert(node.name.clone(), all_nodes.len());
        all_nodes.push((
            usable,
            ExistingNode {
                name: node.name.clone(),
                labels,
                taints: node.taints.clone(),
                free: node.allocatable.clone(),
                ports: Vec::new(),
                volume_limits: limits.remove(&node.name).unwrap_or_default(),
                volumes: VolumeUsage::default(),
                placed: Vec::new(),
            },
        ));
    }
    for p in snapshot.pods.iter().filter(|p| is_live(p)) {
        let Some(name) = p.spec.as_ref().and_then(|s| s.node_name.as_ref()) else {
            continue;
        };
        let Some(&i) = by_name.get(name) else { continue };
        let node: &mut ExistingNode = &mut all_nodes[i].1;
        if let Some(spec) = &p.spec
            && let Ok(mut r) = effective_requests(spec)
        {
            r.pods += 1;
            node.free = node.free.minus(&r);
        }
        if let Ok(info) = PodInfo::from_pod(p, volumes, namespaces) {
            node.ports.extend(info.host_ports.iter().cloned());
            node.volumes.add(&info.volumes);
            let placed = PlacedPod {
                terminating: p.metadata.deletion_timestamp.is_some(),
                ..PlacedPod::planned(&info)
            };
            topology.record(placed, &node.labels, &node.taints);
        }
    }
    let views = all_nodes
        .iter()
        .map(|(_, n)| NodeView {
            labels: n.labels.clone(),
            taints: n.taints.clone(),
        })
        .collect();
    let usable = all_nodes.into_iter().filter(|(u, _)| *u).map(|(_, n)| n).collect();
    (usable, views)
}

/// Whether a pod still holds its node's resources (not Succeeded nor Failed).
fn is_live(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p != "Succeeded" && p != "Failed")
}

impl ExistingNode {
    /// Whether the node takes the pod at its level (Karpenter's `ExistingNode.CanAdd`,
    /// `pkg/controllers/provisioning/scheduling/existingnode.go`): room, taints, labels
    /// against the pod's requirement branches at the level, host ports, volume attach
    /// limits, and topology (`topology`).
    pub(super) fn can_add(&self, at: &PodAt<'_>, topology: &TopologyCheck<'_>) -> bool {
        let pod = at.pod;
        pod.requests.fits_in(&self.free).is_ok()
            && untolerated(&pod.tolerations, &self.taints).is_none()
            && at.branches().iter().any(|b| b.matches_labels(&self.labels).is_ok())
            && !pod.host_ports.iter().any(|a| self.ports.iter().any(|b| a.conflicts(b)))
            && self
                .volumes
                .exceeds(&pod.volumes, |d| self.volume_limits.get(d).copied())
                .is_none()
            && topology.check(at, &self.labels).is_ok()
    }

    /// Places `pod` (`id`) on the node: its requests, host ports and volumes are taken,
    /// and it is recorded in `topology` (Karpenter's `ExistingNode.Add`).
    pub(super) fn add(&mut self, id: PodId, pod: &PodInfo, topology: &mut Topology) {
        self.free = self.free.minus(&pod.requests);
        self.ports.extend(pod.host_ports.iter().cloned());
        self.volumes.add(&pod.volumes);
        self.placed.push(id);
        topology.record(PlacedPod::planned(pod), &self.labels, &self.taints);
    }

    /// What the node has left (negative room counted as none).
    pub(super) fn spare(&self) -> Resources {
        let mut f = self.free.clone();
        for name in f.names().map(str::to_string).collect::<Vec<_>>() {
            f.set(&name, f.get(&name).max(0));
        }
        f
    }
}
