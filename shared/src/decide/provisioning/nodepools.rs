//! The NodePools a cluster's batch can launch for: those whose EC2NodeClass exists. A
//! NodePool without one is dropped with the reason, as Karpenter marks such a pool not
//! ready, and the others work; with none left, Carpool launches nothing, as Karpenter
//! (the planner's fallback to a default NodePool is for cluster dumps that have none).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::decide::Unschedulable;
use crate::decide::provisioning::pod::{is_provisionable, pod_key};
use crate::decide::provisioning::selector::Selector;
use crate::decide::provisioning::unschedulable::Reason;
use crate::model::{EC2NodeClass, NodePool};
use crate::snapshot::Snapshot;

/// Why a NodePool is dropped before planning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DropReason {
    /// Its EC2NodeClass is not in the cluster (or did not validate).
    MissingNodeClass {
        /// The EC2NodeClass it refers to.
        node_class: String,
    },
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::MissingNodeClass { node_class } => {
                write!(f, "its EC2NodeClass {node_class:?} does not exist (or is invalid)")
            }
        }
    }
}

/// A NodePool dropped, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// The NodePool's name.
    pub nodepool: String,
    /// Why.
    pub reason: DropReason,
}

impl Dropped {
    /// The object as the snapshot's skipped list names it: `NodePool/<name>`.
    pub fn object(&self) -> String {
        format!("NodePool/{}", self.nodepool)
    }
}

/// Splits NodePools into those whose EC2NodeClass is among `classes`, in their order, and
/// those dropped.
pub fn with_node_class(pools: Vec<NodePool>, classes: &[EC2NodeClass]) -> (Vec<NodePool>, Vec<Dropped>) {
    let (kept, orphans): (Vec<NodePool>, Vec<NodePool>) = pools.into_iter().partition(|p| {
        classes
            .iter()
            .any(|c| c.name() == p.spec.template.spec.node_class_ref.name)
    });
    let dropped = orphans
        .into_iter()
        .map(|p| Dropped {
            nodepool: p.name().to_string(),
            reason: DropReason::MissingNodeClass {
                node_class: p.spec.template.spec.node_class_ref.name.clone(),
            },
        })
        .collect();
    (kept, dropped)
}

/// Keeps the snapshot's NodePools that `selector` picks (by the NodePool's own labels),
/// and returns the names of the others. Those are not Carpool's to launch for (Karpenter,
/// say, serves them while a cluster moves over one NodePool at a time): they are left out
/// quietly, not skipped as invalid. The empty selector picks every NodePool.
pub fn keep_managed(snapshot: &mut Snapshot, selector: &Selector) -> Vec<String> {
    let (kept, unmanaged): (Vec<NodePool>, Vec<NodePool>) = std::mem::take(&mut snapshot.nodepools)
        .into_iter()
        .partition(|p| match &p.metadata.labels {
            Some(labels) => selector.matches(labels),
            None => selector.matches(&BTreeMap::new()),
        });
    snapshot.nodepools = kept;
    unmanaged.iter().map(|p| p.name().to_string()).collect()
}

/// Drops the snapshot's NodePools that have no EC2NodeClass, adding each to its skipped
/// objects with the reason.
pub fn drop_without_node_class(snapshot: &mut Snapshot) {
    let (kept, dropped) = with_node_class(std::mem::take(&mut snapshot.nodepools), &snapshot.nodeclasses);
    snapshot.nodepools = kept;
    snapshot
        .skipped
        .extend(dropped.iter().map(|d| (d.object(), d.reason.to_string())));
}

/// With no valid NodePool left, every pending pod Carpool should provision for is
/// unschedulable, with [`Reason::NoValidNodePool`] as the reason; `None` when some NodePool is
/// valid (then the planner decides).
pub fn without_nodepool(snapshot: &Snapshot) -> Option<Vec<Unschedulable>> {
    if !snapshot.nodepools.is_empty() {
        return None;
    }
    Some(
        snapshot
            .pods
            .iter()
            .filter(|p| is_provisionable(p))
            .map(|p| Unschedulable::new(pod_key(p), Reason::NoValidNodePool))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pool(name: &str, class: &str) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class},
                "requirements": []}}}
        }))
        .unwrap()
    }

    fn pending(name: &str) -> crate::model::pod::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_nodepool_whose_class_is_missing_is_dropped_with_a_typed_reason() {
        let classes = [EC2NodeClass::named("default")];
        let (kept, dropped) = with_node_class(vec![pool("a", "default"), pool("b", "gone")], &classes);
        assert_eq!(kept.iter().map(NodePool::name).collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            dropped,
            [Dropped {
                nodepool: "b".into(),
                reason: DropReason::MissingNodeClass {
                    node_class: "gone".into()
                },
            }]
        );
        assert_eq!(dropped[0].object(), "NodePool/b");
        assert_eq!(
            dropped[0].reason.to_string(),
            "its EC2NodeClass \"gone\" does not exist (or is invalid)"
        );
    }

    #[test]
    fn dropping_from_a_snapshot_adds_the_skipped_objects() {
        let mut snapshot = Snapshot {
            nodepools: vec![pool("a", "gone")],
            ..Snapshot::default()
        };
        drop_without_node_class(&mut snapshot);
        assert!(snapshot.nodepools.is_empty());
        assert_eq!(snapshot.skipped.len(), 1);
        assert_eq!(snapshot.skipped[0].0, "NodePool/a");
    }

    #[test]
    fn with_no_nodepool_every_pending_pod_is_unschedulable_and_with_one_the_planner_decides() {
        let mut snapshot = Snapshot {
            pods: vec![pending("p1"), pending("p2")],
            ..Snapshot::default()
        };
        let unschedulable = without_nodepool(&snapshot).unwrap();
        assert_eq!(
            unschedulable.iter().map(|u| u.pod.as_str()).collect::<Vec<_>>(),
            ["shop/p1", "shop/p2"]
        );
        assert!(
            unschedulable
                .iter()
                .all(|u| u.kind() == crate::decide::provisioning::unschedulable::Kind::NoValidNodePool)
        );
        snapshot.nodepools.push(pool("a", "default"));
        assert_eq!(without_nodepool(&snapshot), None);
    }
}
