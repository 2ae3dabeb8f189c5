//! The fleet at a glance: per NodePool and capacity type, the nodes and what they cost per
//! hour at the prices Carpool knows (NodeOverlays included), for the stack's dashboard
//! (the provisioner emits it every run, as the `Nodes` and `FleetCostPerHour` metrics).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node as K8sNode;
use serde::{Deserialize, Serialize};

use crate::catalog::RegionCatalog;
use crate::model::well_known as wk;
use crate::model::{CapacityType, Node};

/// One NodePool's nodes of one capacity type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetLine {
    /// The NodePool.
    pub nodepool: String,
    /// `spot` or `on-demand` (or what the node's label says).
    pub capacity_type: String,
    /// Its nodes, not being deleted.
    pub nodes: usize,
    /// What they cost, USD per hour; a node whose offering the catalog does not know
    /// counts for nothing.
    pub cost_per_hour: f64,
}

/// The fleet of the `managed` NodePools among `nodes`, priced with `region`, by NodePool
/// and capacity type; every managed NodePool has a line per capacity type it has nodes
/// of, and one of `on-demand` with no node when it has none (so that its dashboard line
/// drops to zero rather than stopping).
pub fn fleet(nodes: &[K8sNode], managed: &BTreeSet<&str>, region: &RegionCatalog<'_>) -> Vec<FleetLine> {
    let mut lines: BTreeMap<(String, String), FleetLine> = BTreeMap::new();
    for pool in managed {
        let key = (pool.to_string(), CapacityType::OnDemand.label().to_string());
        lines.insert(
            key,
            FleetLine {
                nodepool: pool.to_string(),
                capacity_type: CapacityType::OnDemand.label().to_string(),
                nodes: 0,
                cost_per_hour: 0.0,
            },
        );
    }
    for n in nodes {
        let Ok(node) = Node::from_k8s(n) else { continue };
        if node.terminating {
            continue;
        }
        let Some(pool) = node.labels.get(wk::NODEPOOL).filter(|p| managed.contains(p.as_str())) else {
            continue;
        };
        let ct = node.labels.get(wk::CAPACITY_TYPE).cloned().unwrap_or_default();
        let price = (|| {
            let it = region
                .types()
                .iter()
                .find(|t| Some(&t.name) == node.labels.get(wk::INSTANCE_TYPE))?;
            region.prices().price(it, node.labels.get(wk::ZONE)?, ct.parse().ok()?)
        })()
        .unwrap_or(0.0);
        let line = lines.entry((pool.clone(), ct.clone())).or_insert_with(|| FleetLine {
            nodepool: pool.clone(),
            capacity_type: ct,
            nodes: 0,
            cost_per_hour: 0.0,
        });
        line.nodes += 1;
        line.cost_per_hour += price;
    }
    lines.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn node(name: &str, pool: &str, it: &str, ct: &str) -> K8sNode {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": {
            wk::NODEPOOL: pool, wk::INSTANCE_TYPE: it, wk::ZONE: "us-east-1a", wk::CAPACITY_TYPE: ct}}}))
        .unwrap()
    }

    #[test]
    fn the_fleet_is_counted_and_priced_per_nodepool_and_capacity_type() {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let m5 = region.types().iter().find(|t| t.name == "m5.large").unwrap();
        let od = region.prices().price(m5, "us-east-1a", CapacityType::OnDemand).unwrap();
        let nodes = [
            node("a", "web", "m5.large", "on-demand"),
            node("b", "web", "m5.large", "on-demand"),
            node("c", "web", "m5.large", "spot"),
            node("d", "karpenters", "m5.large", "on-demand"),
        ];
        let lines = fleet(&nodes, &["web", "idle"].into(), &region);
        let line = |p: &str, ct: &str| lines.iter().find(|l| l.nodepool == p && l.capacity_type == ct).cloned();
        let web_od = line("web", "on-demand").unwrap();
        assert_eq!(web_od.nodes, 2);
        assert!((web_od.cost_per_hour - 2.0 * od).abs() < 1e-9);
        assert_eq!(line("web", "spot").unwrap().nodes, 1);
        assert_eq!(line("idle", "on-demand").unwrap().nodes, 0);
        assert!(line("karpenters", "on-demand").is_none(), "not Carpool's");
    }
}
