//! The records Carpool keeps in its DynamoDB table, and their sort keys (DESIGN.md's schema).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::CapacityType;
use crate::model::time::EpochMillis;

/// The sort keys of the table (the partition key is the cluster), one prefix per kind,
/// shared by every implementation so that they agree on the schema in DESIGN.md.
pub mod sort_key {
    use super::UnavailableOffering;

    /// `LEASE#<job>`.
    pub fn lease(job: &str) -> String {
        format!("LEASE#{job}")
    }
    /// `LAUNCH#<id>`.
    pub fn launch(id: &str) -> String {
        format!("LAUNCH#{id}")
    }
    /// `NODE#<instance-id>`.
    pub fn node(instance_id: &str) -> String {
        format!("NODE#{instance_id}")
    }
    /// `DISRUPT#<instance-id>`.
    pub fn disruption(instance_id: &str) -> String {
        format!("DISRUPT#{instance_id}")
    }
    /// `ICE#<type>#<zone>#<capacity>`, and `…#reclaimed` for a reclaimed offering.
    pub fn unavailable(o: &UnavailableOffering) -> String {
        let reclaimed = if o.reclaimed { "#reclaimed" } else { "" };
        format!(
            "ICE#{}#{}#{}{reclaimed}",
            o.instance_type,
            o.zone,
            o.capacity_type.label()
        )
    }
    /// `EVENT#<event-id>`.
    pub fn event(id: &str) -> String {
        format!("EVENT#{id}")
    }
    /// `BACKOFF#<nodepool>#<nodeclass>`.
    pub fn backoff(nodepool: &str, node_class: &str) -> String {
        format!("BACKOFF#{nodepool}#{node_class}")
    }
    /// The prefixes, for listing a kind.
    pub const LAUNCHES: &str = "LAUNCH#";
    /// Node records.
    pub const NODES: &str = "NODE#";
    /// Disruption records.
    pub const DISRUPTIONS: &str = "DISRUPT#";
    /// Unavailable offerings.
    pub const UNAVAILABLE: &str = "ICE#";
    /// Launch backoffs.
    pub const BACKOFFS: &str = "BACKOFF#";
}

/// A lease held by one runner of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The job (`provisioner`, `consolidator`...).
    pub job: String,
    /// Who holds it (a Lambda request id, say).
    pub owner: String,
    /// When it lapses unless renewed.
    pub expires_at: EpochMillis,
}

/// Where a launch stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum LaunchState {
    /// Launched; the node has not registered yet. Later runs count it as capacity.
    InFlight,
    /// The node registered.
    Registered {
        /// The Node's name.
        node: String,
    },
    /// The launch failed or the instance never registered.
    Failed {
        /// Why.
        reason: String,
    },
}

/// A launch of one planned node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchRecord {
    /// The launch id (unique per planned node and run).
    pub id: String,
    /// The EC2 instance, once CreateFleet answered.
    pub instance_id: Option<String>,
    /// The NodePool.
    pub nodepool: String,
    /// The instance type launched.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// The pods it was planned for, as `namespace/name`.
    pub pods: Vec<String>,
    /// When it was launched.
    pub launched_at: EpochMillis,
    /// Where it stands.
    pub state: LaunchState,
    /// The pods whose room it is, when it replaces a node being disrupted: later runs
    /// count it as capacity for those pods alone (see [`crate::decide::provisioning::reservation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_for: Option<Reservation>,
    /// The labels the node is launched with (the NodePool's, and the values chosen for its
    /// custom keys): a later run counts the node in flight with them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The launch wave the node belongs to: it registers with the wave's startup taint,
    /// removed from every node of the wave together (see [`crate::decide::waves::wave`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<String>,
    /// When the wave taint comes off whatever the wave's state, so that a crash never
    /// leaves it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_by: Option<EpochMillis>,
    /// Incremented by every update; updates are conditional on it.
    pub version: u64,
}

/// The pods a replacement was launched for: the pods of a node being disrupted, named
/// and by their controller, since a Deployment's evicted pod comes back under another
/// name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The instance being disrupted.
    pub disrupted: String,
    /// The pods, as `namespace/name`.
    pub pods: Vec<String>,
    /// Their controllers, as `namespace/Kind/name` (a ReplicaSet, a StatefulSet, a Job).
    pub owners: Vec<String>,
}

/// A node Carpool owns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The EC2 instance.
    pub instance_id: String,
    /// The Node's name.
    pub node: String,
    /// The NodePool.
    pub nodepool: String,
    /// The instance type.
    pub instance_type: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour when launched.
    pub price_per_hour: f64,
    /// When it was launched.
    pub launched_at: EpochMillis,
    /// Incremented by every update.
    pub version: u64,
}

/// The steps of a disruption, in order. Each run advances one record by at least one step,
/// so a crash or a timeout resumes where it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisruptionStep {
    /// The node carries `carpool.sh/disrupted:NoSchedule`.
    Tainted,
    /// Replacement capacity was launched.
    ReplacementLaunched,
    /// The replacement registered and is Ready.
    ReplacementReady,
    /// Pods are being evicted.
    Draining,
    /// Every eviction was accepted: the node waits for its pods to terminate and its
    /// volumes to detach, up to its termination time, before the instance goes.
    Drained,
    /// The instance was terminated.
    Terminated,
    /// The Node object was deleted.
    Deleted,
}

/// A disruption in progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisruptionRecord {
    /// The instance being disrupted.
    pub instance_id: String,
    /// The Node's name.
    pub node: String,
    /// Why: `empty`, `underutilized`, `spot-interruption`, ...
    pub reason: String,
    /// The step reached.
    pub step: DisruptionStep,
    /// Launch ids of the replacements.
    pub replacements: Vec<String>,
    /// When it started.
    pub started_at: EpochMillis,
    /// When it last moved.
    pub updated_at: EpochMillis,
    /// The event that started it (empty for the consolidator's).
    #[serde(default)]
    pub event_id: String,
    /// The node's NodePool, when it has one.
    #[serde(default)]
    pub nodepool: Option<String>,
    /// When the drain must end (a hard deadline: the instance goes away then), or when it
    /// should (a soft one: past it, blocked pods are retried by later runs).
    #[serde(default)]
    pub drain_deadline: EpochMillis,
    /// Whether the instance goes away at the deadline whatever the drain (a spot
    /// interruption, an instance stopping): past it, Carpool terminates it.
    #[serde(default)]
    pub hard_deadline: bool,
    /// When the node goes whatever its pods say (Karpenter's NodeClaim termination
    /// time): the start plus its NodePool's `terminationGracePeriod`, for a voluntary
    /// disruption of a pool that sets one; `None` otherwise. A hard deadline is its own.
    #[serde(default)]
    pub terminate_by: Option<EpochMillis>,
    /// Whether the drain waits until the replacements are Ready (a rebalance
    /// recommendation, a scheduled change: there is time).
    #[serde(default)]
    pub wait_for_replacement: bool,
    /// The burst it belongs to (a batch of spot warnings replaced together), whose
    /// launches it adopts (`disrupt-<burst>-<n>`).
    #[serde(default)]
    pub burst: Option<String>,
    /// The pods whose eviction the apiserver accepted so far (not evicted again on resume).
    #[serde(default)]
    pub evicted: Vec<super::PodRef>,
    /// Who is advancing it (an invocation's request id), so that two invocations do not
    /// drain the same node at once; `None` when nobody is.
    #[serde(default)]
    pub held_by: Option<String>,
    /// Until when `held_by` holds it: past this, another invocation takes it over (the
    /// holder crashed or timed out).
    #[serde(default)]
    pub held_until: EpochMillis,
    /// Incremented by every update; updates are conditional on it.
    pub version: u64,
}

/// An offering known to be out of capacity until a time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UnavailableOffering {
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// When it may be tried again.
    pub until: EpochMillis,
    /// A spot interruption reclaimed it: not a capacity error for launches, but an
    /// offering voluntary disruption (returning to spot, spot-to-spot) and interruption
    /// replacements avoid for a while, so that one interruption does not cause two moves.
    /// Kept apart from the offering's capacity record.
    #[serde(default)]
    pub reclaimed: bool,
}

/// Why a NodePool and EC2NodeClass failed last, as a [`Backoff`] keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FailureReason {
    /// A launch failed for another reason than capacity (CreateFleet, the launch
    /// template, a subnet or security group, a misconfigured EC2NodeClass).
    Launch {
        /// The launch error.
        error: String,
    },
    /// Its EC2NodeClass could not be resolved (its subnets' zones, or its AMIs): an
    /// `ssmParameter` that does not exist or that the role may not read, say.
    NodeClass {
        /// The resolution's error, with its causes.
        error: String,
    },
    /// An instance did not become a Node within the registration TTL.
    NotRegistered {
        /// The instance, when one was launched.
        instance_id: Option<String>,
        /// What housekeeping found.
        detail: String,
    },
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureReason::Launch { error } => write!(f, "launch failed: {error}"),
            FailureReason::NodeClass { error } => write!(f, "its EC2NodeClass could not be resolved: {error}"),
            FailureReason::NotRegistered {
                instance_id: Some(id),
                detail,
            } => write!(f, "instance {id} never joined: {detail}"),
            FailureReason::NotRegistered {
                instance_id: None,
                detail,
            } => write!(f, "launch never joined: {detail}"),
        }
    }
}

/// The failures in a row of one NodePool with one EC2NodeClass, and how long its
/// launches are held back (see [`crate::decide::provisioning::backoff`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    /// The NodePool.
    pub nodepool: String,
    /// The EC2NodeClass it launched with.
    pub node_class: String,
    /// Failures in a row (launch errors and registration failures), since the last node
    /// of the pair registered.
    pub failures: u32,
    /// Registration failures in a row, since the last node of the pair registered.
    pub registration_failures: u32,
    /// Backoff windows set in a row: the next one lasts `first * 2^windows`, capped.
    pub windows: u32,
    /// The last failure.
    pub reason: FailureReason,
    /// Until when launches are held back (in the past once the window is over).
    pub until: EpochMillis,
    /// Incremented by every update; updates are conditional on it.
    pub version: u64,
}
