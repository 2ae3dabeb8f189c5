//! What replaces a node that is going away: the planner's view in which that node's pods
//! are pending again and nothing else is.
//!
//! Karpenter answers a spot interruption by deleting the node and letting its provisioner
//! react to the pods once they are pending. Carpool plans the replacement at once, from
//! the node's pods, so the new capacity is on its way before the drain starts:
//!
//! - the pods that will move are the node's pods the drain evicts (not its DaemonSet or
//!   mirror pods, nor those finished or terminating: [`moves`]);
//! - they are planned as pending pods, onto new nodes only: the other nodes stay in the
//!   view (their pods still count for topology spread and affinity) but are cordoned in
//!   it, since their free room is the provisioner's to give to the pods pending there,
//!   and a replacement that counted on it would race them;
//! - the other pending pods are left out: the provisioner plans for them;
//! - the disrupted node itself is gone from the view;
//! - a burst (many nodes of a mass reclaim, in one invocation) is planned together
//!   ([`replacement_view_of`]), bin-packed as a provisioning batch would pack the same
//!   pods: one plan, not one per node sized for that node alone. Its pods may take the
//!   other nodes' free room (`free_room`): twenty nodes' pods are evicted at once, and
//!   kube-scheduler puts them wherever there is room; capacity launched for pods that
//!   land elsewhere would stand empty.
//! - [`prefer_on_demand`]: every NodePool that allows on-demand is narrowed to
//!   on-demand (an interrupted spot node is replaced by capacity that will not be
//!   interrupted). A NodePool that forbids on-demand keeps spot; the caller marks the
//!   interrupted offering unavailable, so spot comes from other offerings.
//!
//! The launches the plan makes carry a [reservation](crate::decide::provisioning::reservation) for these pods.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodCondition;

use crate::decide::disruption::drain::stay_reason;
use crate::decide::provisioning::pod::pod_key;
use crate::model::pod::{Pod, PodStatus};
use crate::model::requirements::{NodeSelectorRequirement, Operator};
use crate::model::well_known as wk;
use crate::model::{CapacityType, NodePool};
use crate::snapshot::Snapshot;

fn bound_to(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// Whether a pod of the node moves when the node is drained: the drain evicts it (it is
/// not a DaemonSet's or a mirror pod, and has neither finished nor started terminating:
/// [`crate::decide::disruption::drain::stay_reason`]).
pub fn moves(pod: &Pod) -> bool {
    stay_reason(pod, &[], crate::decide::disruption::drain::DrainRules::default()).is_none()
}

/// The pods of `node` that move when it is drained.
pub fn moving_pods<'a>(snapshot: &'a Snapshot, node: &str) -> Vec<&'a Pod> {
    snapshot
        .pods
        .iter()
        .filter(|p| bound_to(p) == Some(node) && moves(p))
        .collect()
}

/// The pods of `nodes` that move when they are drained.
pub fn moving_pods_of<'a>(snapshot: &'a Snapshot, nodes: &BTreeSet<String>) -> Vec<&'a Pod> {
    snapshot
        .pods
        .iter()
        .filter(|p| bound_to(p).is_some_and(|n| nodes.contains(n)) && moves(p))
        .collect()
}

/// A bound pod as the planner sees a pod to place: unbound, pending, and marked
/// unschedulable by kube-scheduler.
fn as_pending(pod: &Pod) -> Pod {
    let mut out = pod.clone();
    if let Some(spec) = out.spec.as_mut() {
        spec.node_name = None;
    }
    out.status = Some(PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    });
    out
}

/// The view in which to plan the replacement of `node`: see the module doc. The pods it
/// plans for are [`moving_pods`]; their keys are returned with the view.
pub fn replacement_view(snapshot: &Snapshot, node: &str) -> (Snapshot, Vec<String>) {
    replacement_view_of(snapshot, &BTreeSet::from([node.to_string()]), false)
}

/// The view in which to plan the replacement of every node of `nodes` together: their
/// moving pods pending, the nodes gone; the other nodes cordoned unless `free_room`
/// (a burst: see the module doc). The pods' keys are returned with the view.
pub fn replacement_view_of(snapshot: &Snapshot, nodes: &BTreeSet<String>, free_room: bool) -> (Snapshot, Vec<String>) {
    let moving: Vec<Pod> = moving_pods_of(snapshot, nodes).into_iter().map(as_pending).collect();
    let keys = moving.iter().map(pod_key).collect();
    let mut view = snapshot.clone();
    view.pods = snapshot
        .pods
        .iter()
        .filter(|p| bound_to(p).is_some_and(|n| !n.is_empty() && !nodes.contains(n)))
        .cloned()
        .chain(moving)
        .collect();
    view.bad_pods.clear();
    view.nodes
        .retain(|n| n.metadata.name.as_deref().is_none_or(|name| !nodes.contains(name)));
    if !free_room {
        for n in &mut view.nodes {
            n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        }
    }
    (view, keys)
}

/// Whether a NodePool may launch on-demand capacity.
pub fn allows_on_demand(pool: &NodePool) -> bool {
    pool.requirements().is_ok_and(|r| {
        r.get(wk::CAPACITY_TYPE)
            .is_none_or(|c| c.has(CapacityType::OnDemand.label()))
    })
}

/// Narrows every NodePool that allows on-demand to on-demand alone; the others keep what
/// they allow (spot).
pub fn prefer_on_demand(pools: &mut [NodePool]) {
    for pool in pools.iter_mut().filter(|p| allows_on_demand(p)) {
        pool.spec.template.spec.requirements.push(NodeSelectorRequirement {
            key: wk::CAPACITY_TYPE.into(),
            operator: Operator::In,
            values: vec![CapacityType::OnDemand.label().to_string()],
            min_values: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::decide::provisioning_plan;
    use crate::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
    use crate::model::manifest::from_value;
    use crate::model::well_known::MIRROR_ANNOTATION;
    use serde_json::json;

    fn bound(name: &str, node: &str, cpu: &str) -> Pod {
        PodBuilder::new(name)
            .namespace("web")
            .label("app", "web")
            .requests(cpu, "1Gi")
            .owner("apps/v1", "ReplicaSet", "web-7d9")
            .spec("nodeName", json!(node))
            .phase("Running")
            .pod()
            .unwrap()
    }

    fn pool(capacity_types: &[&str]) -> NodePool {
        from_value(
            &NodePoolBuilder::new("default")
                .requirement(wk::CAPACITY_TYPE, "In", capacity_types)
                .build(),
        )
        .unwrap()
    }

    fn cluster(pools: Vec<NodePool>) -> Snapshot {
        let spot = NodeBuilder::new("spot-1")
            .allocatable("cpu", "4")
            .allocatable("memory", "16Gi")
            .allocatable("pods", "110")
            .ready(true)
            .build();
        let other = NodeBuilder::new("od-1")
            .allocatable("cpu", "16")
            .allocatable("memory", "64Gi")
            .allocatable("pods", "110")
            .ready(true)
            .build();
        let mut daemon = bound("aws-node-x", "spot-1", "100m");
        daemon.metadata.owner_references.as_mut().unwrap()[0].kind = "DaemonSet".into();
        Snapshot {
            pods: vec![
                bound("web-1", "spot-1", "1"),
                bound("web-2", "spot-1", "1"),
                daemon,
                bound("web-3", "od-1", "1"),
                PodBuilder::pending_web("other-pending", "1", "1Gi").pod().unwrap(),
            ],
            nodes: vec![
                serde_json::from_value(spot).unwrap(),
                serde_json::from_value(other).unwrap(),
            ],
            nodepools: pools,
            nodeclasses: vec![from_value(&EC2NodeClassBuilder::standard().build()).unwrap()],
            ..Snapshot::default()
        }
    }

    fn plan(view: &Snapshot) -> crate::decide::ProvisioningPlan {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        provisioning_plan(view, &region)
    }

    #[test]
    fn the_replacement_is_planned_for_the_nodes_own_pods_alone_on_new_on_demand_capacity() {
        let mut snapshot = cluster(vec![pool(&["spot", "on-demand"])]);
        prefer_on_demand(&mut snapshot.nodepools);
        let (view, moving) = replacement_view(&snapshot, "spot-1");
        assert_eq!(moving, vec!["web/web-1".to_string(), "web/web-2".to_string()]);
        let plan = plan(&view);
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        let planned: Vec<&String> = plan.nodes.iter().flat_map(|n| &n.pods).collect();
        assert_eq!(
            planned.len(),
            2,
            "the DaemonSet pod and the other pending pod are not planned: {planned:?}"
        );
        assert!(
            plan.nodes.iter().all(|n| n.capacity_type == CapacityType::OnDemand),
            "{plan:?}"
        );
        assert!(
            plan.existing.is_empty(),
            "no room is taken on the other nodes: {:?}",
            plan.existing
        );
    }

    #[test]
    fn a_nodepool_that_forbids_on_demand_keeps_spot() {
        let mut snapshot = cluster(vec![pool(&["spot"])]);
        prefer_on_demand(&mut snapshot.nodepools);
        let (view, _) = replacement_view(&snapshot, "spot-1");
        let plan = plan(&view);
        assert!(!plan.nodes.is_empty());
        assert!(
            plan.nodes.iter().all(|n| n.capacity_type == CapacityType::Spot),
            "{plan:?}"
        );
    }

    #[test]
    fn daemonset_mirror_finished_and_terminating_pods_do_not_move() {
        let mut mirror = bound("kube-proxy", "spot-1", "100m");
        mirror.metadata.owner_references = None;
        mirror
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(MIRROR_ANNOTATION.into(), "abc".into());
        let mut done = bound("job-1", "spot-1", "1");
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut leaving = bound("web-9", "spot-1", "1");
        leaving.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-09-21T12:00:00Z".parse().unwrap(),
        ));
        assert!(!moves(&mirror) && !moves(&done) && !moves(&leaving));
        assert!(moves(&bound("web-1", "spot-1", "1")));
    }
}
