//! Housekeeping as a decision: what the cluster, EC2 and the state store hold now in,
//! a [`HousekeepingPlan`] out. [`crate::run`] carries the plan out.
//!
//! - a launch whose Node appeared (matched by providerID) is [registered](Registration),
//!   and a node record is written;
//! - a Node Carpool launched gets the labels of its instance type that the kubelet does
//!   not set (`karpenter.k8s.aws/instance-*`), as Karpenter copies them from the
//!   NodeClaim, since the type is known only once EC2 has chosen it;
//! - an instance whose Node has not registered within the registration TTL is
//!   [terminated](Termination), and its launch marked failed with the reason; so is an
//!   instance of this cluster with no launch record at all (a crash between CreateFleet
//!   and the record) and no Node;
//! - the records of instances that are gone are [forgotten](Forget).
//!
//! The plan is a value (serde), so a test states a situation and the plan it expects, and
//! other jobs follow the same pattern: decide on snapshots, then act.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

use crate::catalog::RegionCatalog;
use crate::model::node::instance_id_from_provider_id;
use crate::model::well_known as wk;
use crate::ports::{EpochMillis, Instance, LaunchRecord, LaunchState, MetadataPatch, NodeRecord};

/// What housekeeping looks at: the objects as listed, and the time.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The cluster's Nodes.
    pub nodes: &'a [Node],
    /// The cluster's instances in EC2 (those not terminated).
    pub instances: &'a [Instance],
    /// The launch records.
    pub launches: &'a [LaunchRecord],
    /// The node records; `None` when they could not be listed, and then none is forgotten.
    pub node_records: Option<&'a [NodeRecord]>,
    /// Now.
    pub now: EpochMillis,
    /// How long an instance has to become a Node.
    pub registration_ttl: Duration,
}

/// Why an instance is terminated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TerminationReason {
    /// A launch in flight whose Node did not register within the TTL.
    NotRegistered {
        /// The registration TTL, in seconds.
        ttl_seconds: u64,
    },
    /// The instance of a launch recorded as failed (a timeout, say) that did start, and
    /// never became a Node.
    FailedLaunchNotRegistered {
        /// The launch.
        launch_id: String,
        /// The registration TTL, in seconds.
        ttl_seconds: u64,
    },
    /// An instance of this cluster that no launch record knows and that never became a
    /// Node (a crash between CreateFleet and the record).
    NoLaunchRecord {
        /// The launch id the instance is tagged with (may be empty).
        launch_id: String,
        /// The registration TTL, in seconds.
        ttl_seconds: u64,
    },
}

impl fmt::Display for TerminationReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TerminationReason::NotRegistered { ttl_seconds } => {
                write!(f, "the node did not register within {ttl_seconds}s")
            }
            TerminationReason::FailedLaunchNotRegistered { launch_id, ttl_seconds } => {
                write!(
                    f,
                    "instance of failed launch {launch_id} did not register within {ttl_seconds}s"
                )
            }
            TerminationReason::NoLaunchRecord { launch_id, ttl_seconds } => write!(
                f,
                "instance of launch {launch_id:?} has no launch record and no node after {ttl_seconds}s"
            ),
        }
    }
}

/// A launch whose Node registered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    /// The launch record to write: registered, with its instance.
    pub launch: LaunchRecord,
    /// The node record to create (one that exists already is left as it is).
    pub node: NodeRecord,
    /// The instance is no longer listed (the Node outlived it): the node record is
    /// forgotten once written.
    pub then_forget: bool,
}

/// An instance to terminate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Termination {
    /// The instance.
    pub instance_id: String,
    /// The launch it belongs to, when a record knows it.
    pub launch_id: Option<String>,
    /// Why.
    pub reason: TerminationReason,
    /// The launch record to write once the instance is terminated (marked failed).
    pub then_write: Option<LaunchRecord>,
}

/// A record to remove, its instance being gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum Forget {
    /// A launch record, by launch id.
    Launch(String),
    /// A node record, by instance id.
    NodeRecord(String),
}

/// Labels to add to a Node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Labelling {
    /// The Node.
    pub node: String,
    /// The labels it lacks.
    pub labels: MetadataPatch,
}

/// What one round of housekeeping does, in the order it is done.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HousekeepingPlan {
    /// Launches to mark registered.
    pub register: Vec<Registration>,
    /// Launch records to mark failed that have no instance to terminate first.
    pub fail: Vec<LaunchRecord>,
    /// Instances to terminate, launches' first, then those no record knows.
    pub terminate: Vec<Termination>,
    /// Records to remove, launch records first.
    pub forget: Vec<Forget>,
    /// Nodes to label.
    pub label: Vec<Labelling>,
}

impl HousekeepingPlan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.register.is_empty()
            && self.fail.is_empty()
            && self.terminate.is_empty()
            && self.forget.is_empty()
            && self.label.is_empty()
    }
}

fn node_name(n: &Node) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

/// The housekeeping plan for what is observed; the catalog gives the labels of each
/// instance type and the price recorded for a registered node.
pub fn plan(observed: &Observed<'_>, region: &RegionCatalog<'_>) -> HousekeepingPlan {
    let mut plan = HousekeepingPlan::default();
    let now = observed.now;
    let ttl_ms = i64::try_from(observed.registration_ttl.as_millis()).unwrap_or(i64::MAX);
    let ttl_seconds = observed.registration_ttl.as_secs();

    let node_of: HashMap<&str, &Node> = observed
        .nodes
        .iter()
        .filter_map(|n| {
            let id = instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?)?;
            Some((id, n))
        })
        .collect();
    let listed: HashSet<&str> = observed.instances.iter().map(|i| i.id.as_str()).collect();
    let by_launch_id: HashMap<&str, &Instance> = observed
        .instances
        .iter()
        .filter(|i| !i.launch_id.is_empty())
        .map(|i| (i.launch_id.as_str(), i))
        .collect();
    let recorded: Option<HashSet<&str>> = observed
        .node_records
        .map(|records| records.iter().map(|r| r.instance_id.as_str()).collect());

    let mut known: HashSet<String> = HashSet::new();
    for launch in observed.launches {
        // A launch interrupted before its instance id was recorded: find it by tag.
        let instance_id = launch
            .instance_id
            .clone()
            .or_else(|| by_launch_id.get(launch.id.as_str()).map(|i| i.id.clone()));
        if let Some(id) = &instance_id {
            known.insert(id.clone());
        }
        let id = instance_id.as_deref();
        let expired = now.saturating_sub(launch.launched_at) >= ttl_ms;
        match &launch.state {
            LaunchState::InFlight => {
                if let Some(id) = id
                    && let Some(node) = node_of.get(id)
                {
                    let name = node_name(node);
                    let mut registered = launch.clone();
                    registered.instance_id = Some(id.to_string());
                    registered.state = LaunchState::Registered { node: name.clone() };
                    let price = region
                        .types()
                        .iter()
                        .find(|t| t.name == launch.instance_type)
                        .and_then(|it| region.prices().price(it, &launch.zone, launch.capacity_type))
                        .unwrap_or_default();
                    plan.register.push(Registration {
                        launch: registered,
                        node: NodeRecord {
                            instance_id: id.to_string(),
                            node: name,
                            nodepool: launch.nodepool.clone(),
                            instance_type: launch.instance_type.clone(),
                            capacity_type: launch.capacity_type,
                            price_per_hour: price,
                            launched_at: launch.launched_at,
                            version: 0,
                        },
                        then_forget: !listed.contains(id) && recorded.as_ref().is_some_and(|r| !r.contains(id)),
                    });
                } else if expired {
                    let reason = TerminationReason::NotRegistered { ttl_seconds };
                    let mut failed = launch.clone();
                    failed.instance_id = instance_id.clone();
                    failed.state = LaunchState::Failed {
                        reason: reason.to_string(),
                    };
                    match id {
                        Some(id) => plan.terminate.push(Termination {
                            instance_id: id.to_string(),
                            launch_id: Some(launch.id.clone()),
                            reason,
                            then_write: Some(failed),
                        }),
                        None => plan.fail.push(failed),
                    }
                }
            }
            LaunchState::Failed { .. } if id.is_some_and(|id| listed.contains(id) && !node_of.contains_key(id)) => {
                if expired && let Some(id) = id {
                    plan.terminate.push(Termination {
                        instance_id: id.to_string(),
                        launch_id: Some(launch.id.clone()),
                        reason: TerminationReason::FailedLaunchNotRegistered {
                            launch_id: launch.id.clone(),
                            ttl_seconds,
                        },
                        then_write: None,
                    });
                }
            }
            LaunchState::Registered { .. } | LaunchState::Failed { .. } => {
                let gone = id.is_none_or(|id| !listed.contains(id));
                if gone && (id.is_some() || expired) {
                    plan.forget.push(Forget::Launch(launch.id.clone()));
                }
            }
        }
    }

    for instance in observed.instances {
        if known.contains(&instance.id)
            || node_of.contains_key(instance.id.as_str())
            || now.saturating_sub(instance.launched_at) < ttl_ms
        {
            continue;
        }
        plan.terminate.push(Termination {
            instance_id: instance.id.clone(),
            launch_id: None,
            reason: TerminationReason::NoLaunchRecord {
                launch_id: instance.launch_id.clone(),
                ttl_seconds,
            },
            then_write: None,
        });
    }

    for record in observed.node_records.unwrap_or_default() {
        if !listed.contains(record.instance_id.as_str()) {
            plan.forget.push(Forget::NodeRecord(record.instance_id.clone()));
        }
    }

    for node in observed.nodes {
        let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
        if labels.get(wk::CARPOOL_MANAGED).map(String::as_str) != Some("true") {
            continue;
        }
        let Some(it) = labels
            .get(wk::INSTANCE_TYPE)
            .and_then(|t| region.types().iter().find(|it| &it.name == t))
        else {
            continue;
        };
        let missing: MetadataPatch = it
            .labels()
            .into_iter()
            .filter(|(k, v)| labels.get(k) != Some(v))
            .map(|(k, v)| (k, Some(v)))
            .collect();
        if !missing.is_empty() {
            plan.label.push(Labelling {
                node: node_name(node),
                labels: missing,
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;
    use crate::catalog::Catalog;
    use crate::model::CapacityType;
    use crate::ports::InstanceState;

    const NOW: EpochMillis = 10_000_000;
    const TTL: Duration = Duration::from_secs(900);
    /// Launched within the TTL.
    const RECENT: EpochMillis = NOW - 60_000;
    /// Launched longer ago than the TTL.
    const OLD: EpochMillis = NOW - 901_000;

    fn node(name: &str, instance: &str, labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": format!("aws:///us-east-1a/{instance}")}
        }))
        .unwrap()
    }

    fn instance(id: &str, launch_id: &str, launched_at: EpochMillis) -> Instance {
        Instance {
            id: id.into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            nodepool: "default".into(),
            launch_id: launch_id.into(),
            state: InstanceState::Running,
            launched_at,
        }
    }

    fn launch(id: &str, instance: Option<&str>, launched_at: EpochMillis, state: LaunchState) -> LaunchRecord {
        LaunchRecord {
            id: id.into(),
            instance_id: instance.map(str::to_string),
            nodepool: "default".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            pods: vec!["shop/api-0".into()],
            launched_at,
            state,
            version: 1,
        }
    }

    fn record(instance: &str) -> NodeRecord {
        NodeRecord {
            instance_id: instance.into(),
            node: format!("node-{instance}"),
            nodepool: "default".into(),
            instance_type: "m5.large".into(),
            capacity_type: CapacityType::OnDemand,
            price_per_hour: 0.096,
            launched_at: OLD,
            version: 1,
        }
    }

    fn m5_large_price(region: &RegionCatalog<'_>) -> f64 {
        let it = region.types().iter().find(|t| t.name == "m5.large").unwrap();
        region.prices().price(it, "us-east-1a", CapacityType::OnDemand).unwrap()
    }

    fn registration(region: &RegionCatalog<'_>, launch_id: &str, instance: &str, then_forget: bool) -> Registration {
        let mut registered = launch(
            launch_id,
            Some(instance),
            RECENT,
            LaunchState::Registered { node: "n1".into() },
        );
        registered.version = 1;
        Registration {
            launch: registered,
            node: NodeRecord {
                instance_id: instance.into(),
                node: "n1".into(),
                nodepool: "default".into(),
                instance_type: "m5.large".into(),
                capacity_type: CapacityType::OnDemand,
                price_per_hour: m5_large_price(region),
                launched_at: RECENT,
                version: 0,
            },
            then_forget,
        }
    }

    fn failed(id: &str, instance: Option<&str>, launched_at: EpochMillis) -> LaunchRecord {
        launch(
            id,
            instance,
            launched_at,
            LaunchState::Failed {
                reason: "the node did not register within 900s".into(),
            },
        )
    }

    /// A situation: what is listed.
    #[derive(Default)]
    struct World {
        nodes: Vec<Node>,
        instances: Vec<Instance>,
        launches: Vec<LaunchRecord>,
        node_records: Option<Vec<NodeRecord>>,
    }

    impl World {
        fn plan(&self, region: &RegionCatalog<'_>) -> HousekeepingPlan {
            let observed = Observed {
                nodes: &self.nodes,
                instances: &self.instances,
                launches: &self.launches,
                node_records: self.node_records.as_deref(),
                now: NOW,
                registration_ttl: TTL,
            };
            plan(&observed, region)
        }
    }

    #[test]
    fn each_situation_gets_its_plan() {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let in_flight = LaunchState::InFlight;
        let gone_failed = LaunchState::Failed {
            reason: "timeout".into(),
        };
        let registered = LaunchState::Registered { node: "n1".into() };
        let full_labels: serde_json::Map<String, serde_json::Value> = region
            .types()
            .iter()
            .find(|t| t.name == "m5.large")
            .unwrap()
            .labels()
            .into_iter()
            .map(|(k, v)| (k, json!(v)))
            .chain([(wk::CARPOOL_MANAGED.to_string(), json!("true"))])
            .collect();
        let cases: Vec<(&str, World, HousekeepingPlan)> = vec![
            (
                "nothing listed: nothing to do",
                World::default(),
                HousekeepingPlan::default(),
            ),
            (
                "a launch in flight whose Node appeared is registered, with a node record at the catalog's price",
                World {
                    nodes: vec![node("n1", "i-1", json!({}))],
                    instances: vec![instance("i-1", "l1", RECENT)],
                    launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                    node_records: Some(vec![]),
                },
                HousekeepingPlan {
                    register: vec![registration(&region, "l1", "i-1", false)],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "a launch interrupted before its instance id was recorded finds its instance by tag",
                World {
                    nodes: vec![node("n1", "i-1", json!({}))],
                    instances: vec![instance("i-1", "l1", RECENT)],
                    launches: vec![launch("l1", None, RECENT, in_flight.clone())],
                    node_records: Some(vec![]),
                },
                HousekeepingPlan {
                    register: vec![registration(&region, "l1", "i-1", false)],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "a Node that outlived its instance registers the launch, and its record is forgotten at once",
                World {
                    nodes: vec![node("n1", "i-1", json!({}))],
                    instances: vec![],
                    launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                    node_records: Some(vec![]),
                },
                HousekeepingPlan {
                    register: vec![registration(&region, "l1", "i-1", true)],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "a launch in flight within the TTL is left alone",
                World {
                    instances: vec![instance("i-1", "l1", RECENT)],
                    launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan::default(),
            ),
            (
                "an instance whose Node did not register within the TTL is terminated, then its launch failed",
                World {
                    instances: vec![instance("i-1", "l1", OLD)],
                    launches: vec![launch("l1", Some("i-1"), OLD, in_flight.clone())],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan {
                    terminate: vec![Termination {
                        instance_id: "i-1".into(),
                        launch_id: Some("l1".into()),
                        reason: TerminationReason::NotRegistered { ttl_seconds: 900 },
                        then_write: Some(failed("l1", Some("i-1"), OLD)),
                    }],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "a launch in flight past the TTL with no instance at all is only marked failed",
                World {
                    launches: vec![launch("l1", None, OLD, in_flight.clone())],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan {
                    fail: vec![failed("l1", None, OLD)],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "the instance of a failed launch that never registered is terminated after the TTL",
                World {
                    instances: vec![instance("i-1", "l1", OLD)],
                    launches: vec![launch("l1", Some("i-1"), OLD, gone_failed.clone())],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan {
                    terminate: vec![Termination {
                        instance_id: "i-1".into(),
                        launch_id: Some("l1".into()),
                        reason: TerminationReason::FailedLaunchNotRegistered {
                            launch_id: "l1".into(),
                            ttl_seconds: 900,
                        },
                        then_write: None,
                    }],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "the instance of a failed launch is left alone within the TTL",
                World {
                    instances: vec![instance("i-1", "l1", RECENT)],
                    launches: vec![launch("l1", Some("i-1"), RECENT, gone_failed.clone())],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan::default(),
            ),
            (
                "records of launches whose instance is gone are forgotten; a failed launch with no instance after the TTL",
                World {
                    launches: vec![
                        launch("l1", Some("i-1"), RECENT, registered.clone()),
                        launch("l2", Some("i-2"), RECENT, gone_failed.clone()),
                        launch("l3", None, OLD, gone_failed.clone()),
                        launch("l4", None, RECENT, gone_failed.clone()),
                    ],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan {
                    forget: vec![
                        Forget::Launch("l1".into()),
                        Forget::Launch("l2".into()),
                        Forget::Launch("l3".into()),
                    ],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "a registered launch whose instance runs is kept",
                World {
                    nodes: vec![node("n1", "i-1", json!({}))],
                    instances: vec![instance("i-1", "l1", OLD)],
                    launches: vec![launch("l1", Some("i-1"), OLD, registered.clone())],
                    node_records: Some(vec![record("i-1")]),
                },
                HousekeepingPlan::default(),
            ),
            (
                "an instance no record knows and with no Node is terminated after the TTL only",
                World {
                    nodes: vec![node("n3", "i-3", json!({}))],
                    instances: vec![
                        instance("i-1", "lost", OLD),
                        instance("i-2", "", RECENT),
                        instance("i-3", "", OLD),
                    ],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan {
                    terminate: vec![Termination {
                        instance_id: "i-1".into(),
                        launch_id: None,
                        reason: TerminationReason::NoLaunchRecord {
                            launch_id: "lost".into(),
                            ttl_seconds: 900,
                        },
                        then_write: None,
                    }],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "node records of instances gone are forgotten, after the launch records",
                World {
                    instances: vec![instance("i-1", "", OLD)],
                    launches: vec![launch("l2", Some("i-2"), OLD, registered.clone())],
                    node_records: Some(vec![record("i-1"), record("i-2")]),
                    nodes: vec![node("n1", "i-1", json!({}))],
                },
                HousekeepingPlan {
                    forget: vec![Forget::Launch("l2".into()), Forget::NodeRecord("i-2".into())],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "no node record is forgotten when they could not be listed",
                World {
                    nodes: vec![node("n1", "i-1", json!({}))],
                    launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                    node_records: None,
                    ..World::default()
                },
                HousekeepingPlan {
                    register: vec![registration(&region, "l1", "i-1", false)],
                    ..HousekeepingPlan::default()
                },
            ),
            (
                "a Carpool node lacking its type's labels gets them; other nodes and complete ones do not",
                World {
                    nodes: vec![
                        node(
                            "managed",
                            "i-1",
                            json!({wk::CARPOOL_MANAGED: "true", wk::INSTANCE_TYPE: "m5.large", wk::ARCH: "amd64"}),
                        ),
                        node("foreign", "i-2", json!({wk::INSTANCE_TYPE: "m5.large"})),
                        node("complete", "i-3", serde_json::Value::Object(full_labels.clone())),
                        node(
                            "unknown-type",
                            "i-4",
                            json!({wk::CARPOOL_MANAGED: "true", wk::INSTANCE_TYPE: "x9.huge"}),
                        ),
                    ],
                    node_records: Some(vec![]),
                    ..World::default()
                },
                HousekeepingPlan {
                    label: vec![Labelling {
                        node: "managed".into(),
                        labels: full_labels
                            .iter()
                            .filter(|(k, _)| ![wk::CARPOOL_MANAGED, wk::INSTANCE_TYPE, wk::ARCH].contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                            .collect(),
                    }],
                    ..HousekeepingPlan::default()
                },
            ),
        ];
        for (name, world, expected) in cases {
            let plan = world.plan(&region);
            assert_eq!(plan, expected, "{name}");
            assert_eq!(plan.is_empty(), expected == HousekeepingPlan::default(), "{name}");
        }
    }

    #[test]
    fn a_plan_is_a_serde_value_with_typed_reasons() {
        let plan = HousekeepingPlan {
            terminate: vec![Termination {
                instance_id: "i-1".into(),
                launch_id: None,
                reason: TerminationReason::NoLaunchRecord {
                    launch_id: "l9".into(),
                    ttl_seconds: 900,
                },
                then_write: None,
            }],
            forget: vec![Forget::NodeRecord("i-2".into())],
            ..HousekeepingPlan::default()
        };
        let value = serde_json::to_value(&plan).unwrap();
        assert_eq!(value["terminate"][0]["reason"]["kind"], "no_launch_record");
        assert_eq!(value["forget"][0], json!({"kind": "node_record", "id": "i-2"}));
        assert_eq!(serde_json::from_value::<HousekeepingPlan>(value).unwrap(), plan);
    }

    #[test]
    fn reasons_read_as_the_reports_and_records_always_said() {
        assert_eq!(
            TerminationReason::NotRegistered { ttl_seconds: 900 }.to_string(),
            "the node did not register within 900s"
        );
        assert_eq!(
            TerminationReason::FailedLaunchNotRegistered {
                launch_id: "l1".into(),
                ttl_seconds: 60
            }
            .to_string(),
            "instance of failed launch l1 did not register within 60s"
        );
        assert_eq!(
            TerminationReason::NoLaunchRecord {
                launch_id: String::new(),
                ttl_seconds: 900
            }
            .to_string(),
            "instance of launch \"\" has no launch record and no node after 900s"
        );
    }
}
