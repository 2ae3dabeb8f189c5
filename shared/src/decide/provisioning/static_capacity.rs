//! Static capacity: a NodePool with `spec.replicas` (Karpenter's alpha) keeps that many
//! nodes whatever the pods ask for. The provisioner launches what is missing
//! (Karpenter's `static.provisioning` controller,
//! `pkg/controllers/static/provisioning/controller.go`: the nodes and launches in flight
//! are counted, the pool's `limits.nodes` caps the count), and the consolidator removes a
//! surplus ([`crate::decide::disruption::static_scale_down`]); no pending pod launches a
//! node from a static pool, and consolidation leaves its nodes alone.
//!
//! The missing nodes are planned by the planner itself, so that they are what any node of
//! the pool would be (its cheapest type and capacity type that its requirements allow,
//! `minValues`, its custom labels, the zones of its class's subnets): one placeholder pod
//! per missing node, requesting nothing, tolerating everything, each on a node of its own
//! (required anti-affinity on the hostname), planned on the pool alone, with the pool's
//! nodes counted but unusable; the pool is planned with zone balance (at the cheapest
//! price, unless it asks for a tolerance of its own), so that its nodes spread across
//! zones, as Karpenter's design for static capacity has them. The placeholders are not
//! objects anywhere: the launched nodes carry no pod of theirs.

use crate::model::pod::Pod;
use serde_json::json;

use crate::catalog::RegionCatalog;
use crate::decide::provisioning::plan::PlannedNode;
use crate::model::well_known as wk;
use crate::model::{Node, NodePool};
use crate::snapshot::Snapshot;

/// The most nodes a static pool keeps when it sets no `limits.nodes`, and the most
/// missing nodes one run plans for a pool. `spec.replicas` is an int64 with no upper bound
/// in the CRD, and each missing node is a placeholder pod the planner places, so one
/// NodePool could otherwise exhaust the provisioner's memory and stop all scaling; a pool
/// that means more sets `limits.nodes`, and gets its nodes this many a run.
pub const MAX_STATIC_NODES: usize = 1_000;

/// The label of a static pool's placeholder pods.
const PLACEHOLDER: &str = "carpool.sh/static-placeholder";

/// What keeping the static pools' nodes needs now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StaticPlan {
    /// The nodes to launch, without pods.
    pub nodes: Vec<PlannedNode>,
    /// Per static pool short of nodes: `(pool, have, want)`, `want` capped by the pool's
    /// `limits.nodes`.
    pub short: Vec<(String, usize, usize)>,
    /// Why a missing node could not be planned, per pool.
    pub unplanned: Vec<(String, String)>,
}

/// The nodes of pool `name` in `snapshot`, not being deleted (launches in flight count:
/// the provisioner adds them to the snapshot as nodes).
fn pool_nodes<'a>(snapshot: &'a Snapshot, name: &str) -> Vec<&'a k8s_openapi::api::core::v1::Node> {
    snapshot
        .nodes
        .iter()
        .filter(|n| {
            Node::from_k8s(n)
                .is_ok_and(|node| !node.terminating && node.labels.get(wk::NODEPOOL).is_some_and(|p| p == name))
        })
        .collect()
}

/// The placeholder pod of missing node `i` of pool `pool`.
fn placeholder(pool: &str, i: usize) -> Option<Pod> {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("static-{pool}-{i}"),
            "namespace": "carpool-static-capacity",
            "uid": format!("static-{pool}-{i}"),
            "labels": {PLACEHOLDER: pool},
        },
        "spec": {
            "containers": [{"name": "placeholder", "image": "none"}],
            "tolerations": [{"operator": "Exists"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": wk::HOSTNAME,
                "labelSelector": {"matchLabels": {PLACEHOLDER: pool}},
            }]}},
        },
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }))
    .ok()
}

/// What the static pools of `snapshot` (its NodePools narrowed as for any plan, its nodes
/// with the launches in flight) need launched now.
pub fn plan(snapshot: &Snapshot, region: &RegionCatalog<'_>) -> StaticPlan {
    let mut out = StaticPlan::default();
    for pool in &snapshot.nodepools {
        let Some(replicas) = pool.replicas() else { continue };
        let mine = pool_nodes(snapshot, pool.name());
        let limit = pool
            .spec
            .limits
            .get("nodes")
            .map(|q| usize::try_from(q.units_ceil()).unwrap_or(0));
        let want = replicas.min(limit.unwrap_or(MAX_STATIC_NODES));
        if limit.is_none() && replicas > MAX_STATIC_NODES {
            out.unplanned.push((
                pool.name().to_string(),
                format!(
                    "replicas {replicas} without limits.nodes: Carpool keeps at most {MAX_STATIC_NODES} nodes for it (set limits.nodes for more)"
                ),
            ));
        }
        if mine.len() >= want {
            continue;
        }
        out.short.push((pool.name().to_string(), mine.len(), want));
        let missing = want - mine.len();
        if missing > MAX_STATIC_NODES {
            out.unplanned.push((
                pool.name().to_string(),
                format!("{missing} nodes missing: this run plans {MAX_STATIC_NODES}, the next runs the rest"),
            ));
        }
        let mut dynamic: NodePool = pool.clone();
        dynamic.spec.replicas = None;
        let annotations = dynamic.metadata.annotations.get_or_insert_with(Default::default);
        annotations
            .entry(crate::model::nodepool::ZONE_BALANCE_ANNOTATION.to_string())
            .or_insert_with(|| "true".to_string());
        let nodes = mine
            .iter()
            .map(|n| {
                let mut n = (*n).clone();
                n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
                n
            })
            .collect();
        let view = Snapshot {
            pods: (0..missing.min(MAX_STATIC_NODES))
                .filter_map(|i| placeholder(pool.name(), i))
                .collect(),
            nodes,
            daemonsets: snapshot.daemonsets.clone(),
            nodepools: vec![dynamic],
            nodeclasses: snapshot.nodeclasses.clone(),
            free_ips: snapshot.free_ips.clone(),
            ..Snapshot::default()
        };
        let plan = crate::decide::provisioning::provisioning_plan(&view, region);
        for u in &plan.unschedulable {
            out.unplanned.push((pool.name().to_string(), u.reason()));
        }
        out.nodes.extend(plan.nodes.into_iter().map(|mut n| {
            n.pods.clear();
            n
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder};

    fn snapshot(replicas: i64, limit: Option<i64>, nodes: &[(&str, &str)]) -> Snapshot {
        let mut pool = NodePoolBuilder::new("warm")
            .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
            .requirement(wk::INSTANCE_TYPE, "In", &["m5.large", "m5.xlarge"])
            .build();
        pool["spec"]["replicas"] = json!(replicas);
        if let Some(l) = limit {
            pool["spec"]["limits"] = json!({"nodes": l});
        }
        let mut items = vec![pool, EC2NodeClassBuilder::standard().build()];
        for (name, zone) in nodes {
            items.push(
                NodeBuilder::new(name)
                    .label(wk::NODEPOOL, "warm")
                    .instance_type("m5.large")
                    .zone(zone)
                    .label(wk::CAPACITY_TYPE, "on-demand")
                    .ready(true)
                    .build(),
            );
        }
        let mut s = Snapshot::default();
        s.add_text("test", &json!({"kind": "List", "items": items}).to_string())
            .unwrap();
        assert!(s.skipped.is_empty(), "{:?}", s.skipped);
        crate::decide::provisioning::subnet_zones::narrow_to_subnet_zones(
            &mut s.nodepools,
            &[(
                "default".to_string(),
                vec!["us-east-1a".into(), "us-east-1b".into(), "us-east-1c".into()],
            )]
            .into(),
        );
        s
    }

    #[test]
    fn a_static_pool_gets_its_missing_nodes_of_its_cheapest_type_spread_across_zones() {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let p = plan(&snapshot(3, None, &[]), &region);
        assert_eq!(p.short, vec![("warm".to_string(), 0, 3)]);
        assert_eq!(p.nodes.len(), 3, "{:?}", p.unplanned);
        assert!(
            p.nodes
                .iter()
                .all(|n| n.instance_type == "m5.large" && n.pods.is_empty())
        );
        let zones: std::collections::BTreeSet<&str> = p.nodes.iter().map(|n| n.zone.as_str()).collect();
        assert_eq!(zones.len(), 3, "{:?}", p.nodes);
    }

    #[test]
    fn nodes_it_has_count_and_limits_nodes_caps_it() {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let full = plan(&snapshot(2, None, &[("a", "us-east-1a"), ("b", "us-east-1b")]), &region);
        assert_eq!(full, StaticPlan::default());
        let one_short = plan(&snapshot(3, None, &[("a", "us-east-1a"), ("b", "us-east-1b")]), &region);
        assert_eq!(one_short.nodes.len(), 1);
        assert_eq!(one_short.nodes[0].zone, "us-east-1c", "the zone without one");
        let capped = plan(&snapshot(5, Some(3), &[("a", "us-east-1a")]), &region);
        assert_eq!(capped.short, vec![("warm".to_string(), 1, 3)]);
        assert_eq!(capped.nodes.len(), 2);
    }

    /// Issue 41, item 1: `replicas` is an int64 with no bound; without `limits.nodes`, a
    /// pool of 2⁶³−1 replicas made the provisioner build that many placeholder pods (and
    /// run out of memory). It keeps [`MAX_STATIC_NODES`] nodes, and says why.
    #[test]
    fn a_static_pool_of_unbounded_replicas_without_a_node_limit_keeps_a_bounded_number_and_says_so() {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let p = plan(&snapshot(i64::MAX, None, &[]), &region);
        assert_eq!(p.short, vec![("warm".to_string(), 0, MAX_STATIC_NODES)]);
        assert_eq!(p.nodes.len(), MAX_STATIC_NODES);
        assert_eq!(p.unplanned.len(), 1, "{:?}", p.unplanned);
        assert!(p.unplanned[0].1.contains("without limits.nodes"), "{:?}", p.unplanned);
        // With a node limit the user chose, the limit holds, planned this many a run.
        let limited = plan(&snapshot(i64::MAX, Some(1_000_000), &[]), &region);
        assert_eq!(limited.short, vec![("warm".to_string(), 0, 1_000_000)]);
        assert_eq!(limited.nodes.len(), MAX_STATIC_NODES);
        assert!(
            limited.unplanned[0].1.contains("this run plans 1000"),
            "{:?}",
            limited.unplanned
        );
    }
}
