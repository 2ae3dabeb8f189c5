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
//! - a Node Carpool launched that registered, within the registration TTL of its
//!   creation, counts as Ready and without its startup or cloud-init taints, as Karpenter
//!   counts a NodeClaim that is not yet initialized;
//! - such a node that is not yet *initialized* (Karpenter's rule: Ready, no startup nor
//!   known ephemeral taints, and every resource its instance type offers reported; see
//!   [`initialized`]) also counts at its instance type's expected capacity: a resource
//!   its `status.allocatable` (or `capacity`) lacks or reports as 0, such as
//!   `nvidia.com/gpu` before the device plugin runs, counts at the type's amount for the
//!   pool's EC2NodeClass. Room is kept on it for the DaemonSets that will land on it but
//!   whose pod is not bound there yet: their requests are taken off its allocatable, as
//!   for in-flight launches.
//!
//! Past the registration TTL a node counts as it is: a GPU that never showed up is not
//! promised to pods any more (the node is broken, not starting), and pods that need it
//! are planned elsewhere.
//!
//! Nothing here reads the clock: `now` is passed in.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::catalog::RegionCatalog;
use crate::catalog::allocatable::with_settings;
use crate::decide::provisioning::daemonsets::{DaemonSetInfo, overhead};
use crate::decide::provisioning::templates::{node_settings, pool_labels};
use crate::model::node::instance_id_from_provider_id;
use crate::model::pod::Pod;
use crate::model::well_known as wk;
use crate::model::well_known::EPHEMERAL_TAINTS;
use crate::model::{EC2NodeClass, InstanceType, NodePool, Requirements, Resources};
use crate::model::{EpochMillis, LaunchRecord, LaunchState};
use crate::snapshot::Snapshot;

/// Resources a type offers that a node need not report to count as initialized:
/// `vpc.amazonaws.com/pod-eni` appears only where the VPC CNI has security groups for pods
/// enabled, so most nodes never report it.
pub const AWAITED_EXCEPT: &[&str] = &[crate::model::resources::POD_ENI];

/// The name a synthetic node of an in-flight launch carries.
pub fn in_flight_node_name(launch_id: &str) -> String {
    format!("in-flight-{launch_id}")
}

/// The nodes planning should see: the snapshot's, starting Carpool nodes counted as Ready
/// and at their type's expected capacity less the DaemonSets still to land, plus one
/// synthetic node per in-flight launch.
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
        .map(|n| {
            if starting(n, now, registration_ttl_ms) {
                as_started(n, snapshot, region, &daemonsets)
            } else {
                n.clone()
            }
        })
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

/// Whether a node is a Carpool node that is starting: launched by Carpool, not being
/// deleted, and created less than the registration TTL ago.
fn starting(node: &Node, now: EpochMillis, ttl_ms: i64) -> bool {
    if label(node, wk::CARPOOL_MANAGED) != Some("true") || node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0.as_millisecond());
    now.saturating_sub(created) < ttl_ms
}

/// The NodePool a node or launch belongs to, and that pool's EC2NodeClass.
fn pool_and_class<'s>(snapshot: &'s Snapshot, pool: &str) -> (Option<&'s NodePool>, Option<&'s EC2NodeClass>) {
    let pool = snapshot.nodepools.iter().find(|p| p.name() == pool);
    let class = pool.and_then(|p| {
        snapshot
            .nodeclasses
            .iter()
            .find(|c| c.name() == p.spec.template.spec.node_class_ref.name)
    });
    (pool, class)
}

/// An instance type of the catalog, with the capacity and allocatable its nodes have
/// under an EC2NodeClass's settings.
fn expected_type(region: &RegionCatalog<'_>, name: &str, class: Option<&EC2NodeClass>) -> Option<InstanceType> {
    let it = region.types().iter().find(|t| t.name == name)?;
    Some(with_settings(it, &node_settings(class)))
}

fn resources(list: Option<&BTreeMap<String, Quantity>>) -> Option<Resources> {
    list.map_or(Some(Resources::default()), |l| Resources::from_k8s(l).ok())
}

/// `reported`, with every resource it lacks (or has as 0) taken from `expected`, as
/// Karpenter's `StateNode.Allocatable` and `StateNode.Capacity` override the zero
/// quantities of an uninitialized node with its NodeClaim's.
fn fill_unreported(reported: &Resources, expected: &Resources) -> Resources {
    let mut out = reported.clone();
    for name in expected.names() {
        if reported.get(name) <= 0 {
            out.set(name, expected.get(name));
        }
    }
    out
}

/// Whether a starting node is initialized, by Karpenter's rule
/// (`nodeclaim/lifecycle/initialization.go`, `Initialization.Reconcile`): it is Ready,
/// carries none of its pool's startup taints (`StartupTaintsRemoved`) nor the known
/// ephemeral taints (`KnownEphemeralTaintsRemoved`), and reports every resource it is
/// expected to offer (`RequestedResourcesRegistered`, which waits on allocatable, since
/// the kubelet zeroes extended resources until their device plugin registers them).
///
/// Karpenter waits for the resources the NodeClaim requested; Carpool keeps no claim, so
/// it waits for every resource the instance type offers ([`AWAITED_EXCEPT`] aside). A
/// node whose type is not in the catalog is taken as reporting all it offers.
fn initialized(node: &Node, startup: &[Taint], expected: Option<&InstanceType>) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
    let tainted = taints.iter().any(|t| {
        EPHEMERAL_TAINTS.contains(&t.key.as_str()) || startup.iter().any(|s| s.key == t.key && s.effect == t.effect)
    });
    let reported = resources(node.status.as_ref().and_then(|s| s.allocatable.as_ref())).unwrap_or_default();
    let registered = expected.is_none_or(|it| {
        it.allocatable
            .names()
            .all(|name| AWAITED_EXCEPT.contains(&name) || reported.get(name) > 0)
    });
    is_ready(node) && !tainted && registered
}

/// The DaemonSets (`namespace/name`) with a live pod bound to the node.
fn bound_daemonsets(pods: &[Pod], node: &str) -> HashSet<String> {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_none_or(|phase| phase != "Succeeded" && phase != "Failed")
        })
        .flat_map(|p| {
            let namespace = p.metadata.namespace.as_deref().unwrap_or("default");
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|o| o.kind == "DaemonSet")
                .map(move |o| format!("{namespace}/{}", o.name))
        })
        .collect()
}

/// A starting Carpool node as it will be once started: Ready, without its startup or
/// ephemeral taints; and while it is not [`initialized`], at its type's expected capacity
/// for the resources it does not report yet, less the requests of the DaemonSets that will
/// land on it and are not bound there yet (Karpenter's `Scheduler.calculateExistingNodeClaims`
/// and `NewExistingNode`: the compatible DaemonSets' requests less the node's
/// `DaemonSetRequests`, taken off its available resources).
fn as_started(node: &Node, snapshot: &Snapshot, region: &RegionCatalog<'_>, daemonsets: &[DaemonSetInfo]) -> Node {
    let (pool, class) = label(node, wk::NODEPOOL).map_or((None, None), |p| pool_and_class(snapshot, p));
    let startup: &[Taint] = pool.map_or(&[], |p| p.spec.template.spec.startup_taints.as_slice());
    let expected = label(node, wk::INSTANCE_TYPE).and_then(|t| expected_type(region, t, class));
    let is_initialized = initialized(node, startup, expected.as_ref());
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
    if is_initialized {
        return out;
    }
    let status = node.status.as_ref();
    let (Some(mut allocatable), Some(mut capacity)) = (
        resources(status.and_then(|s| s.allocatable.as_ref())),
        resources(status.and_then(|s| s.capacity.as_ref())),
    ) else {
        return out;
    };
    if let Some(it) = &expected {
        allocatable = fill_unreported(&allocatable, &it.allocatable);
        capacity = fill_unreported(&capacity, &it.capacity);
    }
    // The DaemonSets land once the ephemeral taints are gone, if they tolerate the rest
    // (startup taints included, as for in-flight launches).
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let bound = bound_daemonsets(&snapshot.pods, name);
    let unbound: Vec<DaemonSetInfo> = daemonsets
        .iter()
        .filter(|d| !bound.contains(&d.name))
        .cloned()
        .collect();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|t| !EPHEMERAL_TAINTS.contains(&t.key.as_str()))
        .cloned()
        .collect();
    let free = allocatable
        .minus(&overhead(&unbound, &labels, &Requirements::new(), &taints))
        .max(&Resources::default());
    let status = out.status.get_or_insert_with(NodeStatus::default);
    status.allocatable = Some(free.to_k8s());
    status.capacity = Some(capacity.to_k8s());
    out
}

/// The node an in-flight launch will become; `None` when its type is not in the catalog.
fn synthetic_node(
    launch: &LaunchRecord,
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    daemonsets: &[DaemonSetInfo],
) -> Option<Node> {
    let (pool, class) = pool_and_class(snapshot, &launch.nodepool);
    let it = expected_type(region, &launch.instance_type, class)?;
    let name = in_flight_node_name(&launch.id);
    let mut labels: BTreeMap<String, String> = it.labels();
    match pool {
        Some(p) => labels.extend(pool_labels(p)),
        None => {
            labels.insert(wk::NODEPOOL.into(), launch.nodepool.clone());
            labels.insert(wk::CARPOOL_MANAGED.into(), "true".into());
        }
    }
    // The values chosen for the NodePool's custom keys, and the zone id.
    labels.extend(launch.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(wk::ZONE.into(), launch.zone.clone());
    labels.insert(wk::REGION.into(), region.region().to_string());
    labels.insert(wk::CAPACITY_TYPE.into(), launch.capacity_type.label().to_string());
    labels.insert(wk::HOSTNAME.into(), name.clone());
    let taints: Vec<Taint> = pool.map(|p| p.spec.template.spec.taints.clone()).unwrap_or_default();
    // DaemonSets tolerate the node's taints, not its startup taints (Karpenter's
    // `isDaemonPodCompatible`).
    let free = it
        .allocatable
        .minus(&overhead(daemonsets, &labels, &Requirements::new(), &taints));
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
        crate::fixtures::launch_record(id, instance, launched_at, CapacityType::Spot)
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
