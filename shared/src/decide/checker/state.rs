//! The final state a plan leads to, rebuilt from the snapshot and the plan alone: every
//! existing node with the pods bound to it and the pods the plan adds, and every new node
//! with its labels, taints, allocatable, DaemonSets and pods.
//!
//! A new node's labels are its instance type's, its zone, capacity type and region, the
//! labels the plan gives it (`PlannedNode::labels`), and a hostname of its own. Its taints
//! are its NodePool's `spec.taints`; startup taints are not: an agent removes them, and
//! pods need not tolerate them (Karpenter's `StartupTaints`). An existing node's labels are
//! its own (with `kubernetes.io/hostname` its name if it lacks one), its taints
//! `spec.taints`, and its attach limits its CSINode's `spec.drivers[].allocatable.count`.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Taint;

use super::daemonsets::{Daemon, overhead};
use super::nodepools::Pool;
use super::pending::{Standing, key, standing};
use super::ports::HostPort;
use super::requests::pod_requests;
use super::selector::Labels;
use super::violation::{NewNode, NodeRef};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::plan::ProvisioningPlan;
use crate::model::pod::Pod;
use crate::model::well_known as wk;
use crate::model::{InstanceType, Resources};
use crate::snapshot::Snapshot;

/// A node in the final state.
pub(crate) struct FinalNode<'a> {
    pub name: NodeRef,
    /// An existing node's name (a new one has none yet).
    pub node_name: Option<String>,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// What its pods (and, on a new node, DaemonSets) request.
    pub used: Resources,
    /// An existing node: whether pods may be placed on it (Ready, not cordoned, not deleted).
    pub usable: bool,
    /// Per CSI driver, the attach limit (existing nodes with a CSINode).
    pub attach_limits: BTreeMap<String, i64>,
    /// A new node: its index in the plan, its pool, and its type.
    pub new: Option<(usize, usize, &'a InstanceType)>,
    /// Host ports its DaemonSets take (new nodes).
    pub daemon_ports: Vec<HostPort>,
}

/// A pod on a node of the final state.
pub(crate) struct Placed<'a> {
    pub pod: &'a Pod,
    pub key: String,
    pub node: usize,
    /// Placed by the plan (not already bound).
    pub pending: bool,
    /// Being deleted.
    pub terminating: bool,
}

/// The final state.
pub(crate) struct FinalState<'a> {
    pub nodes: Vec<FinalNode<'a>>,
    pub placed: Vec<Placed<'a>>,
    /// New nodes whose NodePool is unknown: plan index.
    pub unknown_pools: Vec<usize>,
    /// New nodes whose type the region does not have: plan index.
    pub unknown_types: Vec<usize>,
    /// Existing placements on nodes not in the input.
    pub unknown_nodes: Vec<String>,
}

/// The labels of a new node of `it` in a zone and capacity type, with the plan's labels.
pub(crate) fn new_node_labels(
    it: &InstanceType,
    zone: &str,
    capacity_type: &str,
    region: &str,
    extra: &Labels,
    hostname: &str,
) -> Labels {
    let mut labels = it.labels();
    labels.insert(wk::ZONE.into(), zone.into());
    labels.insert(wk::CAPACITY_TYPE.into(), capacity_type.into());
    labels.insert(wk::REGION.into(), region.into());
    labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(wk::HOSTNAME.into(), hostname.into());
    labels
}

/// Rebuilds the final state.
pub(crate) fn build<'a>(
    snapshot: &'a Snapshot,
    region: &RegionCatalog<'a>,
    plan: &ProvisioningPlan,
    pools: &[Pool],
    daemons: &[Daemon],
    pending: &HashMap<String, &'a Pod>,
) -> FinalState<'a> {
    let mut state = FinalState {
        nodes: Vec::new(),
        placed: Vec::new(),
        unknown_pools: Vec::new(),
        unknown_types: Vec::new(),
        unknown_nodes: Vec::new(),
    };
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for n in &snapshot.nodes {
        let Some(name) = n.metadata.name.clone() else { continue };
        let mut labels = n.metadata.labels.clone().unwrap_or_default();
        labels.entry(wk::HOSTNAME.into()).or_insert_with(|| name.clone());
        let spec = n.spec.as_ref();
        let status = n.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let allocatable = status
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| Resources::from_k8s(a).ok())
            .unwrap_or_default();
        let attach_limits = snapshot
            .csinodes
            .iter()
            .filter(|c| c.metadata.name.as_deref() == Some(name.as_str()))
            .flat_map(|c| c.spec.drivers.iter())
            .filter_map(|d| Some((d.name.clone(), i64::from(d.allocatable.as_ref()?.count?))))
            .collect();
        by_name.insert(name.clone(), state.nodes.len());
        state.nodes.push(FinalNode {
            name: NodeRef::Existing(name.clone()),
            node_name: Some(name),
            labels,
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            allocatable,
            used: Resources::default(),
            usable: ready && !cordoned && n.metadata.deletion_timestamp.is_none(),
            attach_limits,
            new: None,
            daemon_ports: Vec::new(),
        });
    }
    for p in &snapshot.pods {
        let Standing::Bound { node, terminating } = standing(p) else {
            continue;
        };
        let Some(&i) = by_name.get(&node) else { continue };
        if let Some(r) = p.spec.as_ref().and_then(|s| pod_requests(s).ok()) {
            state.nodes[i].used = state.nodes[i].used.plus(&r);
        }
        state.placed.push(Placed {
            pod: p,
            key: key(p),
            node: i,
            pending: false,
            terminating,
        });
    }
    let place = |state: &mut FinalState<'a>, k: &str, i: usize| {
        if let Some(&p) = pending.get(k) {
            if let Some(r) = p.spec.as_ref().and_then(|s| pod_requests(s).ok()) {
                state.nodes[i].used = state.nodes[i].used.plus(&r);
            }
            state.placed.push(Placed {
                pod: p,
                key: k.to_string(),
                node: i,
                pending: true,
                terminating: false,
            });
        }
    };
    for e in &plan.existing {
        let Some(&i) = by_name.get(&e.node) else {
            state.unknown_nodes.push(e.node.clone());
            continue;
        };
        for k in &e.pods {
            place(&mut state, k, i);
        }
    }
    for (index, pn) in plan.nodes.iter().enumerate() {
        let Some(pool) = pools.iter().position(|p| p.name == pn.nodepool) else {
            state.unknown_pools.push(index);
            continue;
        };
        let Some(&it) = region.types().iter().find(|t| t.name == pn.instance_type) else {
            state.unknown_types.push(index);
            continue;
        };
        let labels = new_node_labels(
            it,
            &pn.zone,
            pn.capacity_type.label(),
            region.region(),
            &pn.labels,
            &format!("planned-node-{index}"),
        );
        let taints = pools[pool].taints.clone();
        let (ds, daemon_ports) = overhead(daemons, &labels, &taints);
        let i = state.nodes.len();
        state.nodes.push(FinalNode {
            name: NodeRef::New(NewNode {
                index,
                instance_type: pn.instance_type.clone(),
                zone: pn.zone.clone(),
            }),
            node_name: None,
            labels,
            taints,
            allocatable: pools[pool].shaped(it).allocatable,
            used: ds,
            usable: true,
            attach_limits: BTreeMap::new(),
            new: Some((index, pool, it)),
            daemon_ports,
        });
        for k in &pn.pods {
            place(&mut state, k, i);
        }
    }
    state
}
