//! Consolidation keeps the zone balance a NodePool asks for
//! ([`crate::model::nodepool::ZONE_BALANCE_ANNOTATION`], Carpool's own).
//!
//! The provisioner puts each new node of such a pool in the zone where the pool has the
//! fewest nodes (within its price tolerance); consolidation must not undo it. A command
//! that removes nodes of the pool, and perhaps adds replacements, is refused when it
//! leaves the pool's zones further apart than one node and further apart than they were:
//! the difference between the zone with the most of the pool's nodes and the zone with the
//! fewest, over the zones where the pool has a node before or after, may grow up to 1 and
//! never beyond what it was. Nodes being deleted are not counted. An empty node may so be
//! kept: it is what the balance costs, and what the user opted in to.

use std::collections::{BTreeMap, BTreeSet};

use crate::decide::provisioning::plan::PlannedNode;
use crate::model::well_known as wk;
use crate::model::{Node, NodePool};
use crate::snapshot::Snapshot;

/// Why a command breaks a pool's zone balance, for people.
pub fn breaks(
    snapshot: &Snapshot,
    removed: &BTreeSet<String>,
    replacements: &[PlannedNode],
) -> Option<(String, String)> {
    let balanced: BTreeSet<&str> = snapshot
        .nodepools
        .iter()
        .filter(|p| p.zone_balance().ok().flatten().is_some())
        .map(NodePool::name)
        .collect();
    if balanced.is_empty() {
        return None;
    }
    let mut before: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
    let mut after: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
    let mut touched: BTreeSet<&str> = BTreeSet::new();
    for n in &snapshot.nodes {
        let Ok(node) = Node::from_k8s(n) else { continue };
        if node.terminating {
            continue;
        }
        let (Some(pool), Some(zone)) = (node.labels.get(wk::NODEPOOL), node.labels.get(wk::ZONE)) else {
            continue;
        };
        let Some(&pool) = balanced.get(pool.as_str()) else {
            continue;
        };
        *before.entry(pool).or_default().entry(zone.clone()).or_insert(0) += 1;
        let kept = after.entry(pool).or_default().entry(zone.clone()).or_insert(0);
        if removed.contains(&node.name) {
            touched.insert(pool);
        } else {
            *kept += 1;
        }
    }
    for r in replacements {
        if let Some(&pool) = balanced.get(r.nodepool.as_str()) {
            touched.insert(pool);
            before.entry(pool).or_default().entry(r.zone.clone()).or_insert(0);
            *after.entry(pool).or_default().entry(r.zone.clone()).or_insert(0) += 1;
        }
    }
    for pool in touched {
        let skew = |m: Option<&BTreeMap<String, i64>>| {
            let counts: Vec<i64> = m.map(|m| m.values().copied().collect()).unwrap_or_default();
            counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0)
        };
        let (was, would) = (skew(before.get(pool)), skew(after.get(pool)));
        if would > was.max(1) {
            let counts = after.get(pool).map(describe).unwrap_or_default();
            return Some((
                pool.to_string(),
                format!(
                    "NodePool {pool} keeps its zones balanced, and this would leave them {would} node(s) apart ({counts}), {was} before"
                ),
            ));
        }
    }
    None
}

fn describe(counts: &BTreeMap<String, i64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(z, n)| format!("{z}: {n}")).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::manifest::from_yaml;
    use k8s_openapi::api::core::v1::Node as K8sNode;

    fn pool(balanced: bool) -> NodePool {
        let annotations = if balanced {
            "{carpool.sh/zone-balance: \"10%\"}"
        } else {
            "{}"
        };
        from_yaml(&format!(
            "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: web, annotations: {annotations}}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
"
        ))
        .unwrap()
    }

    fn node(name: &str, zone: &str) -> K8sNode {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {wk::NODEPOOL: "web", wk::ZONE: zone}},
        }))
        .unwrap()
    }

    fn snapshot(balanced: bool) -> Snapshot {
        Snapshot {
            nodepools: vec![pool(balanced)],
            nodes: vec![
                node("a1", "us-east-1a"),
                node("a2", "us-east-1a"),
                node("b1", "us-east-1b"),
                node("b2", "us-east-1b"),
                node("c1", "us-east-1c"),
                node("c2", "us-east-1c"),
            ],
            ..Snapshot::default()
        }
    }

    fn removing(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_node_apart_is_kept_two_is_refused_and_naming_the_counts() {
        let s = snapshot(true);
        assert_eq!(breaks(&s, &removing(&["a1"]), &[]), None);
        assert_eq!(breaks(&s, &removing(&["a1", "b1"]), &[]), None);
        let (pool, why) = breaks(&s, &removing(&["a1", "a2"]), &[]).unwrap();
        assert_eq!(pool, "web");
        assert!(why.contains("us-east-1a: 0, us-east-1b: 2, us-east-1c: 2"), "{why}");
    }

    #[test]
    fn a_pool_without_the_annotation_is_not_held_to_any_balance() {
        assert_eq!(breaks(&snapshot(false), &removing(&["a1", "a2"]), &[]), None);
    }
}
