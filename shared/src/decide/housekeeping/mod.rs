//! Housekeeping as a decision: what the cluster, EC2 and the state store hold now in,
//! a [`HousekeepingPlan`] out, for the provisioner's run to carry out.
//!
//! - a launch whose Node appeared (matched by providerID) is [registered](Registration),
//!   and a node record is written;
//! - a launch in flight is reconciled with the cloud's list on every run: one whose
//!   instance was found only by its launch-id tag (CreateFleet's answer was lost) is
//!   [recorded with it](HousekeepingPlan::reconcile); one whose instance is gone
//!   (shutting down or terminated, or not found after [`LAUNCH_GRACE`]), or that has no
//!   instance at all after that grace, is [marked failed](LostLaunch) at once, so it stops
//!   counting as capacity and its pods are planned again;
//! - a Node Carpool launched gets the labels of its instance type that the kubelet does
//!   not set (`karpenter.k8s.aws/instance-*`), as Karpenter copies them from the
//!   NodeClaim, since the type is known only once EC2 has chosen it;
//! - an instance whose Node has not registered within the registration TTL is
//!   [terminated](Termination), and its launch marked failed with the reason; so is an
//!   instance of this cluster with no launch record at all (a crash between CreateFleet
//!   and the record) and no Node;
//! - an instance whose Node registered and was then deleted (`kubectl delete node`) is
//!   [terminated](Termination), as Karpenter's termination finalizer would; its pods went
//!   with the Node;
//! - the records of instances that are gone are [forgotten](Forget).
//!
//! Only what Carpool [owns](crate::decide::housekeeping::ownership) is terminated: an instance that carries
//! Carpool's launch-id tag **and** this deployment's tag, with a launch time. Any other instance is
//! [spared](Spared), whatever the cluster tag says. Terminations per round are capped
//! ([`termination_cap`](crate::decide::housekeeping::ownership::termination_cap)); those past the cap are [held back](HousekeepingPlan::held_back)
//! for the run to log and alarm on. In dry-run mode the terminations are planned as
//! [`HousekeepingPlan::would_terminate`] and none is carried out.
//!
//! The plan is a value (serde), so a test states a situation and the plan it expects, and
//! other jobs follow the same pattern: decide on snapshots, then act. The table of
//! situations and plans is in `shared/tests/it/housekeeping.rs`.

pub mod ownership;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

use self::ownership::{SpareReason, ownership, termination_cap};
use crate::catalog::RegionCatalog;
use crate::model::node::instance_id_from_provider_id;
use crate::model::well_known as wk;
use crate::model::{EpochMillis, Instance, LaunchRecord, LaunchState, MetadataPatch, NodeRecord};

/// How long a launch in flight may go without its instance being seen (by id or by its
/// launch-id tag) before it is marked failed: EC2's lists are eventually consistent, and
/// an instance CreateFleet just started may not be listed yet.
pub const LAUNCH_GRACE: Duration = Duration::from_secs(120);

/// What housekeeping looks at: the objects as listed, and the time.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The cluster's Nodes.
    pub nodes: &'a [Node],
    /// The cluster's instances in EC2 (those not terminated).
    pub instances: &'a [Instance],
    /// The instances of launches in flight that the list did not show, read one by one
    /// ([`to_look_up`]): `Some` as found (terminated ones included), `None` when EC2 does
    /// not know the id. An id absent from the map could not be read.
    pub looked_up: &'a BTreeMap<String, Option<Instance>>,
    /// The launch records.
    pub launches: &'a [LaunchRecord],
    /// The node records; `None` when they could not be listed, and then none is forgotten.
    pub node_records: Option<&'a [NodeRecord]>,
    /// This deployment's name: only instances tagged with it are terminated.
    pub deployment: &'a str,
    /// Plan terminations as [`HousekeepingPlan::would_terminate`] only.
    pub dry_run: bool,
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
    /// An instance whose Node registered and was then deleted (`kubectl delete node`):
    /// nothing runs on it any more, and it would run, and cost, until someone noticed.
    NodeDeleted {
        /// The Node it registered as.
        node: String,
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
            TerminationReason::NodeDeleted { node } => {
                write!(f, "its Node {node} registered and was deleted")
            }
        }
    }
}

/// Why a launch in flight is marked failed without anything to terminate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LostReason {
    /// Its instance is shutting down or terminated (reclaimed while booting, a bad KMS
    /// key), or EC2 no longer knows it after the grace.
    InstanceGone {
        /// The instance.
        instance_id: String,
    },
    /// No instance is recorded and none carries its launch-id tag after the grace: the
    /// launch never happened.
    NoInstance {
        /// The grace, in seconds.
        grace_seconds: u64,
    },
    /// Its Node did not register within the TTL, and there is no instance Carpool may
    /// terminate for it (not listed, or not Carpool's).
    NotRegistered {
        /// The registration TTL, in seconds.
        ttl_seconds: u64,
    },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::InstanceGone { instance_id } => write!(f, "instance {instance_id} is gone"),
            LostReason::NoInstance { grace_seconds } => {
                write!(f, "no instance carries the launch id after {grace_seconds}s")
            }
            LostReason::NotRegistered { ttl_seconds } => {
                write!(f, "the node did not register within {ttl_seconds}s")
            }
        }
    }
}

/// A launch in flight that is marked failed, its pods to be planned again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LostLaunch {
    /// The launch record to write: failed, with the reason.
    pub launch: LaunchRecord,
    /// Why.
    pub reason: LostReason,
}

/// An instance housekeeping would have terminated, and does not, because it is not
/// Carpool's to terminate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spared {
    /// The instance.
    pub instance_id: String,
    /// Why it would have been terminated.
    pub would_be: TerminationReason,
    /// Why it is not.
    pub reason: SpareReason,
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
    /// Launches in flight whose instance was found by its launch-id tag only: the records
    /// to write with it (id, type, zone, capacity type as EC2 says).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reconcile: Vec<LaunchRecord>,
    /// Launch records to mark failed that have no instance to terminate first.
    pub fail: Vec<LaunchRecord>,
    /// Launches in flight whose instance is gone or never came: marked failed at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<LostLaunch>,
    /// Instances to terminate, launches' first, then those no record knows; at most
    /// [`termination_cap`] of them.
    pub terminate: Vec<Termination>,
    /// Terminations past the cap: not carried out, logged and counted in a metric.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_back: Vec<Termination>,
    /// In dry-run mode, the terminations that would be carried out (and `terminate` is
    /// empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub would_terminate: Vec<Termination>,
    /// Instances that would be terminated but are not Carpool's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spared: Vec<Spared>,
    /// Records to remove, launch records first.
    pub forget: Vec<Forget>,
    /// Nodes to label.
    pub label: Vec<Labelling>,
}

impl HousekeepingPlan {
    /// Whether there is nothing to do, nor anything to report.
    pub fn is_empty(&self) -> bool {
        self.register.is_empty()
            && self.reconcile.is_empty()
            && self.fail.is_empty()
            && self.lost.is_empty()
            && self.terminate.is_empty()
            && self.held_back.is_empty()
            && self.would_terminate.is_empty()
            && self.spared.is_empty()
            && self.forget.is_empty()
            && self.label.is_empty()
    }
}

fn node_name(n: &Node) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

fn nodes_by_instance(nodes: &[Node]) -> HashMap<&str, &Node> {
    nodes
        .iter()
        .filter_map(|n| {
            let id = instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?)?;
            Some((id, n))
        })
        .collect()
}

/// The instances to read one by one before planning: those of launches in flight that
/// the list does not show and that no Node names (a list that lags behind CreateFleet,
/// or an instance already terminated, which the list leaves out).
pub fn to_look_up(nodes: &[Node], instances: &[Instance], launches: &[LaunchRecord]) -> Vec<String> {
    let node_of = nodes_by_instance(nodes);
    let listed: HashSet<&str> = instances.iter().map(|i| i.id.as_str()).collect();
    launches
        .iter()
        .filter(|l| l.state == LaunchState::InFlight)
        .filter_map(|l| l.instance_id.as_deref())
        .filter(|id| !listed.contains(id) && !node_of.contains_key(id))
        .map(str::to_string)
        .collect()
}

/// Where the instance of a launch in flight stands.
enum Whereabouts<'a> {
    /// Listed (or read by id) and not on its way out.
    Alive(&'a Instance),
    /// Shutting down or terminated.
    Gone,
    /// EC2 does not know its id.
    Unknown,
    /// Not listed, and could not be read.
    Unread,
    /// No instance recorded, and none carries the launch id.
    NoInstance,
}

/// A termination, or why the instance is spared, for an instance that would otherwise
/// be terminated.
fn terminate_or_spare(plan: &mut HousekeepingPlan, instance: &Instance, deployment: &str, termination: Termination) {
    match ownership(instance, deployment) {
        Ok(()) => plan.terminate.push(termination),
        Err(reason) => plan.spared.push(Spared {
            instance_id: instance.id.clone(),
            would_be: termination.reason,
            reason,
        }),
    }
}

/// The housekeeping plan for what is observed; the catalog gives the labels of each
/// instance type and the price recorded for a registered node.
pub fn plan(observed: &Observed<'_>, region: &RegionCatalog<'_>) -> HousekeepingPlan {
    let mut plan = HousekeepingPlan::default();
    let now = observed.now;
    let ttl_ms = i64::try_from(observed.registration_ttl.as_millis()).unwrap_or(i64::MAX);
    let ttl_seconds = observed.registration_ttl.as_secs();
    let grace_ms = i64::try_from(LAUNCH_GRACE.as_millis()).unwrap_or(i64::MAX);
    let deployment = observed.deployment;

    let node_of = nodes_by_instance(observed.nodes);
    let listed: HashMap<&str, &Instance> = observed.instances.iter().map(|i| (i.id.as_str(), i)).collect();
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
        // A launch interrupted before its instance id was recorded (a crash, or an answer
        // that was lost): find it by tag.
        let instance_id = launch
            .instance_id
            .clone()
            .or_else(|| by_launch_id.get(launch.id.as_str()).map(|i| i.id.clone()));
        if let Some(id) = &instance_id {
            known.insert(id.clone());
        }
        let id = instance_id.as_deref();
        let age = now.saturating_sub(launch.launched_at);
        let expired = age >= ttl_ms;
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
                        then_forget: !listed.contains_key(id) && recorded.as_ref().is_some_and(|r| !r.contains(id)),
                    });
                    continue;
                }
                let whereabouts = match id {
                    None => Whereabouts::NoInstance,
                    Some(id) => match listed.get(id).copied() {
                        Some(i) if i.is_gone() => Whereabouts::Gone,
                        Some(i) => Whereabouts::Alive(i),
                        None => match observed.looked_up.get(id) {
                            Some(Some(i)) if i.is_gone() => Whereabouts::Gone,
                            Some(Some(i)) => Whereabouts::Alive(i),
                            Some(None) => Whereabouts::Unknown,
                            None => Whereabouts::Unread,
                        },
                    },
                };
                let mut failed = launch.clone();
                failed.instance_id = instance_id.clone();
                let mut lose = |reason: LostReason| {
                    failed.state = LaunchState::Failed {
                        reason: reason.to_string(),
                    };
                    plan.lost.push(LostLaunch {
                        launch: failed.clone(),
                        reason,
                    });
                };
                match whereabouts {
                    Whereabouts::Gone => lose(LostReason::InstanceGone {
                        instance_id: id.unwrap_or_default().to_string(),
                    }),
                    Whereabouts::Unknown if age >= grace_ms => lose(LostReason::InstanceGone {
                        instance_id: id.unwrap_or_default().to_string(),
                    }),
                    Whereabouts::NoInstance if expired => {
                        // As before the grace existed: past the TTL, the node did not register.
                        failed.state = LaunchState::Failed {
                            reason: TerminationReason::NotRegistered { ttl_seconds }.to_string(),
                        };
                        plan.fail.push(failed);
                    }
                    Whereabouts::NoInstance if age >= grace_ms => lose(LostReason::NoInstance {
                        grace_seconds: LAUNCH_GRACE.as_secs(),
                    }),
                    Whereabouts::Alive(instance) if expired => {
                        let reason = TerminationReason::NotRegistered { ttl_seconds };
                        failed.state = LaunchState::Failed {
                            reason: reason.to_string(),
                        };
                        match ownership(instance, deployment) {
                            Ok(()) => plan.terminate.push(Termination {
                                instance_id: instance.id.clone(),
                                launch_id: Some(launch.id.clone()),
                                reason,
                                then_write: Some(failed),
                            }),
                            Err(spare) => {
                                plan.spared.push(Spared {
                                    instance_id: instance.id.clone(),
                                    would_be: reason,
                                    reason: spare,
                                });
                                plan.fail.push(failed);
                            }
                        }
                    }
                    Whereabouts::Alive(instance) if launch.instance_id.is_none() => {
                        // CreateFleet's answer was lost: record the instance its tag names.
                        let mut found = launch.clone();
                        found.instance_id = Some(instance.id.clone());
                        if !instance.instance_type.is_empty() {
                            found.instance_type.clone_from(&instance.instance_type);
                        }
                        if !instance.zone.is_empty() {
                            found.zone.clone_from(&instance.zone);
                        }
                        found.capacity_type = instance.capacity_type;
                        plan.reconcile.push(found);
                    }
                    Whereabouts::Unread | Whereabouts::Unknown if expired => {
                        // Not listed: nothing Carpool can show is its own to terminate.
                        lose(LostReason::NotRegistered { ttl_seconds });
                    }
                    _ => {}
                }
            }
            LaunchState::Failed { .. } if id.is_some_and(|id| listed.contains_key(id) && !node_of.contains_key(id)) => {
                if expired
                    && let Some(instance) = id.and_then(|id| listed.get(id))
                    && !instance.is_gone()
                {
                    let termination = Termination {
                        instance_id: instance.id.clone(),
                        launch_id: Some(launch.id.clone()),
                        reason: TerminationReason::FailedLaunchNotRegistered {
                            launch_id: launch.id.clone(),
                            ttl_seconds,
                        },
                        then_write: None,
                    };
                    terminate_or_spare(&mut plan, instance, deployment, termination);
                }
            }
            // Its Node registered (the node record says so) and is gone while the instance
            // runs: someone deleted the Node. Karpenter terminates the instance of a deleted
            // Node (its termination finalizer); so does Carpool, at its next housekeeping.
            LaunchState::Registered { node }
                if id.is_some_and(|id| {
                    !node_of.contains_key(id)
                        && recorded.as_ref().is_some_and(|r| r.contains(id))
                        && listed.get(id).is_some_and(|i| !i.is_gone())
                }) =>
            {
                if let Some(instance) = id.and_then(|id| listed.get(id)) {
                    let termination = Termination {
                        instance_id: instance.id.clone(),
                        launch_id: Some(launch.id.clone()),
                        reason: TerminationReason::NodeDeleted { node: node.clone() },
                        then_write: None,
                    };
                    terminate_or_spare(&mut plan, instance, deployment, termination);
                }
            }
            LaunchState::Registered { .. } | LaunchState::Failed { .. } => {
                let gone = id.is_none_or(|id| !listed.contains_key(id));
                if gone && (id.is_some() || expired) {
                    plan.forget.push(Forget::Launch(launch.id.clone()));
                }
            }
        }
    }

    for instance in observed.instances {
        if known.contains(&instance.id) || node_of.contains_key(instance.id.as_str()) || instance.is_gone() {
            continue;
        }
        if instance.launched_at.is_some_and(|t| now.saturating_sub(t) < ttl_ms) {
            continue;
        }
        let termination = Termination {
            instance_id: instance.id.clone(),
            launch_id: None,
            reason: TerminationReason::NoLaunchRecord {
                launch_id: instance.launch_id.clone(),
                ttl_seconds,
            },
            then_write: None,
        };
        terminate_or_spare(&mut plan, instance, deployment, termination);
    }

    let owned = observed
        .instances
        .iter()
        .filter(|i| !i.is_gone() && ownership(i, deployment).is_ok())
        .count();
    let cap = termination_cap(owned);
    if plan.terminate.len() > cap {
        plan.held_back = plan.terminate.split_off(cap);
    }
    if observed.dry_run {
        plan.would_terminate = std::mem::take(&mut plan.terminate);
    }

    for record in observed.node_records.unwrap_or_default() {
        if !listed.contains_key(record.instance_id.as_str()) {
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
