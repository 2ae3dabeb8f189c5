//! A NodePool's status as Karpenter writes it (`pkg/apis/v1/nodepool_status.go`):
//! `resources`, the capacity of its nodes summed with `nodes` among them
//! (`nodepool/counter` `Controller.Reconcile`, from `BaseResources`), `nodes`, and the
//! conditions `ValidationSucceeded` and `NodeClassReady` under `Ready`
//! (`nodepool/readiness`).

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use super::condition::{Condition, conditions};
use crate::model::NodePool;
use crate::model::quantity::{Quantity, parse_k8s};
use crate::model::well_known as wk;

/// Where a NodePool's EC2NodeClass stands, for its `NodeClassReady` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassReadiness {
    /// It resolves.
    Ready,
    /// There is no such class (`NodeClassNotFound`, as Karpenter says).
    NotFound,
    /// It does not resolve: its Ready condition's reason and message.
    NotReady {
        /// The reason, e.g. `SecurityGroupsNotFound`.
        reason: String,
        /// Why.
        message: String,
    },
}

/// The resources Karpenter always reports, zero when no node has them.
const BASE: &[&str] = &["cpu", "ephemeral-storage", "memory", "nodes", "pods"];

/// The status of `pool` (which Carpool manages and read as valid) with `nodes` the
/// cluster's nodes (those labelled with the pool count), its class `class`, and its
/// current status `previous`.
pub fn nodepool_status(
    pool: &NodePool,
    nodes: &[Node],
    class: &ClassReadiness,
    previous: Option<&Value>,
    now: SystemTime,
) -> Value {
    let mine: Vec<&Node> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(wk::NODEPOOL))
                .is_some_and(|p| p == pool.name())
        })
        .collect();
    let mut sums: BTreeMap<String, i128> = BASE.iter().map(|r| (r.to_string(), 0)).collect();
    for node in &mine {
        let capacity = node.status.as_ref().and_then(|s| s.capacity.as_ref());
        for (name, q) in capacity.into_iter().flatten() {
            if let Ok(q) = parse_k8s(q) {
                *sums.entry(name.clone()).or_default() += q.nanos();
            }
        }
    }
    let count = i64::try_from(mine.len()).unwrap_or(i64::MAX);
    sums.insert("nodes".into(), i128::from(count) * 1_000_000_000);
    let resources: serde_json::Map<String, Value> = sums
        .into_iter()
        .map(|(name, nanos)| {
            let q = quantity(&name, nanos);
            (name, json!(q.to_string()))
        })
        .collect();
    let class_condition = match class {
        ClassReadiness::Ready => Condition::ok("NodeClassReady"),
        ClassReadiness::NotFound => {
            Condition::failed("NodeClassReady", "NodeClassNotFound", "NodeClass not found on cluster")
        }
        ClassReadiness::NotReady { reason, message } => Condition::failed("NodeClassReady", reason, message.clone()),
    };
    let wanted = [Condition::ok("ValidationSucceeded"), class_condition];
    json!({
        "resources": resources,
        "nodes": count,
        "conditions": conditions(
            &wanted,
            previous.and_then(|p| p.get("conditions")),
            pool.metadata.generation,
            now,
        ),
    })
}

/// A sum in nano-units as Kubernetes prints the resource: CPU in cores or millicores,
/// memory and storage with binary suffixes, counts as integers.
fn quantity(name: &str, nanos: i128) -> Quantity {
    let units = i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX);
    if name == "cpu" {
        Quantity::from_millis(i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX))
    } else if name == "memory" || name == "ephemeral-storage" || name.starts_with("hugepages-") {
        Quantity::from_bytes_binary(units)
    } else {
        Quantity::from_units(units)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::NodePoolBuilder;
    use std::time::Duration;

    fn node(name: &str, pool: &str, cpu: &str, memory: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
            "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "58", "ephemeral-storage": "20Gi"}}
        }))
        .unwrap()
    }

    #[test]
    fn resources_sum_the_capacity_of_the_pools_nodes_only() {
        let pool = serde_json::from_value::<NodePool>(NodePoolBuilder::new("general").build()).unwrap();
        let nodes = [
            node("a", "general", "4", "16Gi"),
            node("b", "general", "3920m", "15Gi"),
            node("c", "other", "96", "384Gi"),
        ];
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let s = nodepool_status(&pool, &nodes, &ClassReadiness::Ready, None, now);
        assert_eq!(s["nodes"], 2);
        assert_eq!(s["resources"]["cpu"], "7920m");
        assert_eq!(s["resources"]["memory"], "31Gi");
        assert_eq!(s["resources"]["pods"], "116");
        assert_eq!(s["resources"]["nodes"], "2");
        assert_eq!(s["resources"]["ephemeral-storage"], "40Gi");
        assert_eq!(s["conditions"][2]["type"], "Ready");
        assert_eq!(s["conditions"][2]["status"], "True");
    }

    #[test]
    fn a_pool_whose_class_is_missing_is_not_ready_and_says_why() {
        let pool = serde_json::from_value::<NodePool>(NodePoolBuilder::new("general").build()).unwrap();
        let now = SystemTime::UNIX_EPOCH;
        let s = nodepool_status(&pool, &[], &ClassReadiness::NotFound, None, now);
        assert_eq!(s["nodes"], 0);
        assert_eq!(s["resources"]["cpu"], "0");
        let ready = &s["conditions"][2];
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "NodeClassNotFound");
    }
}
