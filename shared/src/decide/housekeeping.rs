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
//! other jobs follow the same pattern: decide on snapshots, then act. The table of
//! situations and plans is in `shared/tests/housekeeping.rs`.

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
