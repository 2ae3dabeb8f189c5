//! Capacity that is coming: what planning must count so that pods already provided for
//! are not launched for again.
//!
//! Karpenter keeps in-flight NodeClaims in its cluster state and schedules onto them as if
//! they were nodes. Carpool has no controller memory between runs, so it rebuilds the same
//! view from its launch records each time:
//!
//! - a launch that is in flight (recorded, its instance not yet a Node, and younger than
//!   the registration TTL) becomes a synthetic Node: the instance type's labels and the
//!   NodePool's, its zone and capacity type, the pool's taints (not its startup taints,
//!   which pods need not tolerate), and the type's allocatable for the pool's EC2NodeClass
//!   less what the DaemonSets that will land on it request;
//! - a Node Carpool launched that registered but is still initializing (not Ready yet, or
//!   still carrying startup or cloud-init taints), within the registration TTL of its
//!   creation, counts as Ready and without those taints, as Karpenter counts a NodeClaim
//!   that is not yet initialized.
//!
//! Nothing here reads the clock: `now` is passed in.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::daemonsets::{DaemonSetInfo, overhead};
use super::templates::{node_settings, pool_labels};
use crate::catalog::RegionCatalog;
use crate::catalog::allocatable::with_settings;
use crate::model::node::instance_id_from_provider_id;
use crate::model::well_known as wk;
use crate::ports::{EpochMillis, LaunchRecord, LaunchState};
use crate::snapshot::Snapshot;

/// Taints a node carries while it starts, whatever its NodePool says: the kubelet's and
/// the cloud provider's.
pub const EPHEMERAL_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
];

/// The name a synthetic node of an in-flight launch carries.
pub fn in_flight_node_name(launch_id: &str) -> String {
    format!("in-flight-{launch_id}")
}

/// The nodes planning should see: the snapshot's, initializing Carpool nodes counted as
/// Ready, plus one synthetic node per in-flight launch.
pub fn capacity_view(
    snapshot: &Snapshot,
    launches: &[LaunchRecord],
    region: &RegionCatalog<'_>,
    now: EpochMillis,
    registration_ttl_ms: i64,
) -> Vec<Node> {
    let registered: HashSet<&str> = snapshot
        .nodes
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
        .filter_map(instance_id_from_provider_id)
        .collect();
    let daemonsets: Vec<DaemonSetInfo> = snapshot
        .daemonsets
        .iter()
        .filter_map(|d| DaemonSetInfo::from_k8s(d).ok())
        .collect();
    let mut nodes: Vec<Node> = snapshot
        .nodes
        .iter()
        .map(|n| initializing_as_ready(n, snapshot, now, registration_ttl_ms))
        .collect();
    for launch in launches {
        if launch.state != LaunchState::InFlight
            || now.saturating_sub(launch.launched_at) >= registration_ttl_ms
            || launch.instance_id.as_deref().is_some_and(|id| registered.contains(id))
        {
            continue;
        }
        if let Some(node) = synthetic_node(launch, snapshot, region, &daemonsets) {
            nodes.push(node);
        }
    }
    nodes
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn ready_condition() -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("CarpoolInitializing".into()),
        ..NodeCondition::default()
    }
}

/// A Carpool node that is still starting, as it will be once started; any other node as
/// it is.
fn initializing_as_ready(node: &Node, snapshot: &Snapshot, now: EpochMillis, ttl_ms: i64) -> Node {
    if label(node, wk::CARPOOL_MANAGED) != Some("true") || node.metadata.deletion_timestamp.is_some() {
        return node.clone();
    }
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0.as_millisecond());
    if now.saturating_sub(created) >= ttl_ms {
        return node.clone();
    }
    let startup: Vec<&Taint> = label(node, wk::NODEPOOL)
        .and_then(|pool| snapshot.nodepools.iter().find(|p| p.name() == pool))
        .map(|p| p.spec.template.spec.startup_taints.iter().collect())
        .unwrap_or_default();
    let mut out = node.clone();
    if let Some(spec) = out.spec.as_mut()
        && let Some(taints) = spec.taints.as_mut()
    {
        taints.retain(|t| {
            !EPHEMERAL_TAINTS.contains(&t.key.as_str())
                && !startup.iter().any(|s| s.key == t.key && s.effect == t.effect)
        });
    }
    if !is_ready(&out) {
        let status = out.status.get_or_insert_with(NodeStatus::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(ready_condition());
    }
    out
}

/// The node an in-flight launch will become; `None` when its type is not in the catalog.
fn synthetic_node(
    launch: &LaunchRecord,
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    daemonsets: &[DaemonSetInfo],
) -> Option<Node> {
    let it = region.types().iter().find(|t| t.name == launch.instance_type)?;
    let pool = snapshot.nodepools.iter().find(|p| p.name() == launch.nodepool);
    let class = pool.and_then(|p| {
        snapshot
            .nodeclasses
            .iter()
            .find(|c| c.name() == p.spec.template.spec.node_class_ref.name)
    });
    let it = with_settings(it, &node_settings(class));
    let name = in_flight_node_name(&launch.id);
    let mut labels: BTreeMap<String, String> = it.labels();
    match pool {
        Some(p) => labels.extend(pool_labels(p)),
        None => {
            labels.insert(wk::NODEPOOL.into(), launch.nodepool.clone());
            labels.insert(wk::CARPOOL_MANAGED.into(), "true".into());
        }
    }
    labels.insert(wk::ZONE.into(), launch.zone.clone());
    labels.insert(wk::REGION.into(), region.region().to_string());
    labels.insert(wk::CAPACITY_TYPE.into(), launch.capacity_type.label().to_string());
    labels.insert(wk::HOSTNAME.into(), name.clone());
    let taints: Vec<Taint> = pool.map(|p| p.spec.template.spec.taints.clone()).unwrap_or_default();
    let startup: Vec<Taint> = pool
        .map(|p| p.spec.template.spec.startup_taints.clone())
        .unwrap_or_default();
    let all_taints: Vec<Taint> = taints.iter().chain(&startup).cloned().collect();
    let free = it.allocatable.minus(&overhead(daemonsets, &labels, &all_taints));
    Some(Node {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: launch
                .instance_id
                .as_ref()
                .map(|id| format!("aws:///{}/{id}", launch.zone)),
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(it.capacity.to_k8s()),
            allocatable: Some(free.to_k8s()),
            conditions: Some(vec![ready_condition()]),
            ..NodeStatus::default()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::model::CapacityType;

    fn launch(id: &str, instance: Option<&str>, launched_at: EpochMillis) -> LaunchRecord {
        LaunchRecord {
            id: id.into(),
            instance_id: instance.map(str::to_string),
            nodepool: "default".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            pods: vec![],
            launched_at,
            state: LaunchState::InFlight,
            version: 1,
        }
    }

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_in_flight_launch_counts_as_a_ready_node_of_its_type_zone_and_capacity_type() {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let nodes = capacity_view(
            &Snapshot::default(),
            &[launch("a", Some("i-1"), 1_000)],
            &region,
            2_000,
            900_000,
        );
        assert_eq!(nodes.len(), 1);
        let n = crate::model::Node::from_k8s(&nodes[0]).unwrap();
        assert!(n.ready && !n.unschedulable);
        assert_eq!(n.labels[wk::INSTANCE_TYPE], "m5.large");
        assert_eq!(n.labels[wk::ZONE], "us-east-1a");
        assert_eq!(n.labels[wk::CAPACITY_TYPE], "spot");
        assert_eq!(n.labels[wk::NODEPOOL], "default");
        assert_eq!(n.allocatable.pods, 29);
    }

    #[test]
    fn a_launch_whose_node_registered_or_that_expired_or_failed_adds_nothing() {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let snapshot = Snapshot {
            nodes: vec![node(serde_json::json!({
                "metadata": {"name": "ip-10-0-0-1"},
                "spec": {"providerID": "aws:///us-east-1a/i-1"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }))],
            ..Snapshot::default()
        };
        let mut failed = launch("c", Some("i-3"), 1_000);
        failed.state = LaunchState::Failed { reason: "x".into() };
        let nodes = capacity_view(
            &snapshot,
            &[launch("a", Some("i-1"), 1_000), launch("b", Some("i-2"), 0), failed],
            &region,
            900_000,
            900_000,
        );
        assert_eq!(nodes.len(), 1, "only the registered node: {nodes:?}");
    }

    #[test]
    fn a_starting_carpool_node_counts_as_ready_without_its_startup_taints() {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let starting = node(serde_json::json!({
            "metadata": {"name": "n1", "creationTimestamp": "1970-01-01T00:00:01Z",
                         "labels": {"carpool.sh/managed": "true"}},
            "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                                {"key": "dedicated", "value": "x", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }));
        let mut other = starting.clone();
        other.metadata.name = Some("n2".into());
        other.metadata.labels = None;
        let snapshot = Snapshot {
            nodes: vec![starting, other],
            ..Snapshot::default()
        };
        let nodes = capacity_view(&snapshot, &[], &region, 60_000, 900_000);
        let n1 = crate::model::Node::from_k8s(&nodes[0]).unwrap();
        assert!(n1.ready);
        assert_eq!(
            n1.taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["dedicated"]
        );
        let n2 = crate::model::Node::from_k8s(&nodes[1]).unwrap();
        assert!(!n2.ready, "a node Carpool did not launch stays as it is");
        let late = capacity_view(&snapshot, &[], &region, 2_000_000, 900_000);
        assert!(
            !crate::model::Node::from_k8s(&late[0]).unwrap().ready,
            "past the TTL it is broken, not starting"
        );
    }
}
