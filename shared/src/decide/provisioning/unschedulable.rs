//! Why a pod cannot be placed, as types: a [`Reason`] per NodePool or relaxation level that
//! refused it, each with its data, and its [`Kind`]. A reason's `Display` is the message
//! the plan shows (`taints: NodePool gpu has taint ...`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::decide::provisioning::selector::SelectorError;
use crate::model::Resources;
use crate::model::pod_requests::RequestsError;
use crate::model::pod_requirements::PodRequirementError;
use crate::model::requirements::RequirementError;

/// The kind of a [`Reason`]: the constraint that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A NodePool's taint the pod does not tolerate.
    Taints,
    /// The pod's node requirements (selector, affinity, volume zones) against a NodePool's.
    Requirements,
    /// The pod's or its node's requests against the instance types.
    Resources,
    /// A NodePool's limits.
    Limits,
    /// A topology spread or pod (anti-)affinity.
    Topology,
    /// A NodePool's `minValues`.
    MinValues,
    /// A claim the pod mounts keeps it off every node.
    Volume,
    /// A pod that cannot be read.
    InvalidPod,
    /// The launch of the pod's node failed.
    Launch,
    /// The NodePool that would take the pod is backed off after failures in a row.
    BackedOff,
    /// No NodePool in the cluster is valid.
    #[serde(rename = "no_valid_nodepool")]
    NoValidNodePool,
    /// No NodePool could be tried.
    #[serde(rename = "no_nodepool")]
    NoNodePool,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 12] = [
        Kind::Taints,
        Kind::Requirements,
        Kind::Resources,
        Kind::Limits,
        Kind::Topology,
        Kind::MinValues,
        Kind::Volume,
        Kind::InvalidPod,
        Kind::Launch,
        Kind::BackedOff,
        Kind::NoValidNodePool,
        Kind::NoNodePool,
    ];

    /// The kind's snake_case name, as in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Taints => "taints",
            Kind::Requirements => "requirements",
            Kind::Resources => "resources",
            Kind::Limits => "limits",
            Kind::Topology => "topology",
            Kind::MinValues => "min_values",
            Kind::Volume => "volume",
            Kind::InvalidPod => "invalid_pod",
            Kind::Launch => "launch",
            Kind::BackedOff => "backed_off",
            Kind::NoValidNodePool => "no_valid_nodepool",
            Kind::NoNodePool => "no_nodepool",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a NodePool's node requirements fail a pod.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mismatch {
    /// The NodePool's requirements conflict with every branch of the pod's.
    Conflict {
        /// The first branch's conflict.
        detail: String,
    },
    /// No instance type the NodePool offers has the labels the pod requires.
    NoOfferedType,
    /// A DaemonSet that lands on every type with those labels binds a host port the pod
    /// binds (kube-scheduler's `nodeports` filter; Karpenter's `getDaemonHostPortUsage`).
    DaemonSetHostPort {
        /// `protocol/port`.
        port: String,
    },
}

/// How the instance types fall short of the requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shortfall {
    /// No instance type fits the pod alone.
    TooLarge {
        /// The pod's requests.
        requests: Resources,
    },
    /// A node opened for the pod did not take it.
    NotPlaced,
    /// No instance type holds the pods planned together on its node.
    NotHeldTogether,
    /// The EC2NodeClass's subnets in a zone have too few free IP addresses for a node and
    /// its pods.
    SubnetAddresses {
        /// The zone.
        zone: String,
        /// The free addresses left in its subnet with the most.
        available: i64,
        /// What the node and its pods need.
        needed: i64,
    },
}

/// Why a claim a pod mounts keeps it off every node (kube-scheduler's volumebinding
/// PreFilter answers UnschedulableAndUnresolvable; Karpenter's
/// `ValidatePersistentVolumeClaims` skips the pod). A new node would not help.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeProblem {
    /// The claim does not exist ("persistentvolumeclaim not found"), for a generic
    /// ephemeral volume not yet, until the ephemeral volume controller creates it.
    ClaimNotFound,
    /// The claim is being deleted.
    ClaimDeleting,
    /// The claim is `Lost`: bound to a PersistentVolume that is gone.
    ClaimLost,
    /// The claim is bound to a PersistentVolume that does not exist.
    VolumeNotFound {
        /// The PersistentVolume's name.
        volume: String,
    },
    /// The claim is unbound and its StorageClass binds `Immediate` (or it names a volume
    /// not yet bound to it, or has no class): "pod has unbound immediate
    /// PersistentVolumeClaims"; the volume controller must bind it first.
    UnboundImmediate,
    /// The claim is unbound and its StorageClass does not exist (kube-scheduler reads a
    /// missing class as `Immediate`).
    StorageClassNotFound {
        /// The class's name.
        storage_class: String,
    },
}

impl fmt::Display for VolumeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeProblem::ClaimNotFound => f.write_str("persistentvolumeclaim not found"),
            VolumeProblem::ClaimDeleting => f.write_str("persistentvolumeclaim is being deleted"),
            VolumeProblem::ClaimLost => f.write_str("persistentvolumeclaim bound to non-existent persistentvolume"),
            VolumeProblem::VolumeNotFound { volume } => {
                write!(f, "bound to persistentvolume {volume}, which does not exist")
            }
            VolumeProblem::UnboundImmediate => f.write_str("pod has unbound immediate PersistentVolumeClaims"),
            VolumeProblem::StorageClassNotFound { storage_class } => {
                write!(f, "unbound, and its storageclass {storage_class} does not exist")
            }
        }
    }
}

/// One reason a pod cannot be placed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// The NodePool has a taint the pod does not tolerate.
    Taints {
        /// The NodePool.
        nodepool: String,
        /// The taint's key.
        key: String,
        /// The taint's value (empty if none).
        value: String,
        /// The taint's effect.
        effect: String,
    },
    /// The NodePool's nodes cannot satisfy the pod's node requirements.
    Requirements {
        /// The NodePool.
        nodepool: String,
        /// How.
        mismatch: Mismatch,
    },
    /// The NodePool's instance types cannot hold the requests.
    Resources {
        /// The NodePool.
        nodepool: String,
        /// How.
        shortfall: Shortfall,
    },
    /// The NodePool's limits leave no room for another node.
    Limits {
        /// The NodePool.
        nodepool: String,
    },
    /// A topology spread or pod (anti-)affinity rejects every node tried.
    Topology {
        /// The constraint.
        rejection: Rejection,
    },
    /// The types that hold the node's pods have too few distinct values for `minValues`.
    MinValues {
        /// The NodePool.
        nodepool: String,
        /// The requirement short of values.
        detail: String,
    },
    /// A claim the pod mounts keeps it off every node until the claim changes.
    Volume {
        /// The claim, `namespace/name`.
        claim: String,
        /// What is wrong.
        problem: VolumeProblem,
    },
    /// The pod cannot be read.
    InvalidPod {
        /// What is wrong with it.
        detail: String,
    },
    /// The launch of the pod's node failed.
    Launch {
        /// The launch error.
        error: String,
    },
    /// The NodePool that would take the pod is held back after failures in a row
    /// ([`crate::decide::provisioning::backoff`]).
    BackedOff {
        /// The NodePool.
        nodepool: String,
        /// Until when (epoch milliseconds).
        until: crate::model::EpochMillis,
        /// Failures in a row.
        failures: u32,
        /// The last failure.
        last_reason: String,
    },
    /// No NodePool in the cluster is valid with its EC2NodeClass.
    #[serde(rename = "no_valid_nodepool")]
    NoValidNodePool,
    /// No NodePool could be tried for the pod.
    #[serde(rename = "no_nodepool")]
    NoNodePool,
}

impl Reason {
    /// The constraint that failed.
    pub fn kind(&self) -> Kind {
        match self {
            Reason::Taints { .. } => Kind::Taints,
            Reason::Requirements { .. } => Kind::Requirements,
            Reason::Resources { .. } => Kind::Resources,
            Reason::Limits { .. } => Kind::Limits,
            Reason::Topology { .. } => Kind::Topology,
            Reason::MinValues { .. } => Kind::MinValues,
            Reason::Volume { .. } => Kind::Volume,
            Reason::InvalidPod { .. } => Kind::InvalidPod,
            Reason::Launch { .. } => Kind::Launch,
            Reason::BackedOff { .. } => Kind::BackedOff,
            Reason::NoValidNodePool => Kind::NoValidNodePool,
            Reason::NoNodePool => Kind::NoNodePool,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Taints {
                nodepool,
                key,
                value,
                effect,
            } => write!(
                f,
                "taints: NodePool {nodepool} has taint {key}={value}:{effect} that the pod does not tolerate"
            ),
            Reason::Requirements { nodepool, mismatch } => match mismatch {
                Mismatch::Conflict { detail } => write!(f, "requirements: NodePool {nodepool}: {detail}"),
                Mismatch::DaemonSetHostPort { port } => write!(
                    f,
                    "host port: NodePool {nodepool}: a DaemonSet on its nodes binds host port {port}, as the pod does"
                ),
                Mismatch::NoOfferedType => write!(
                    f,
                    "requirements: no instance type offered by NodePool {nodepool} matches the pod's node requirements"
                ),
            },
            Reason::Resources { nodepool, shortfall } => match shortfall {
                Shortfall::TooLarge { requests } => write!(
                    f,
                    "resources: no instance type in NodePool {nodepool} fits requests {requests}"
                ),
                Shortfall::NotPlaced => write!(
                    f,
                    "resources: NodePool {nodepool} could not place the pod on a new node"
                ),
                Shortfall::NotHeldTogether => write!(
                    f,
                    "resources: no instance type in NodePool {nodepool} holds the pods planned together"
                ),
                Shortfall::SubnetAddresses {
                    zone,
                    available,
                    needed,
                } => write!(
                    f,
                    "resources: NodePool {nodepool}'s subnets in {zone} have {available} free IP address(es), a node there needs {needed}"
                ),
            },
            Reason::Limits { nodepool } => write!(
                f,
                "limits: NodePool {nodepool} has no room for another node under its limits"
            ),
            Reason::Topology { rejection } => write!(f, "{rejection}"),
            Reason::MinValues { nodepool, detail } => write!(f, "minValues: NodePool {nodepool}: {detail}"),
            Reason::Volume { claim, problem } => write!(f, "volume: persistentvolumeclaim {claim}: {problem}"),
            Reason::InvalidPod { detail } => write!(f, "invalid pod: {detail}"),
            Reason::Launch { error } => write!(f, "launch: {error}"),
            Reason::BackedOff {
                nodepool,
                until,
                failures,
                last_reason,
            } => {
                let until = k8s_openapi::jiff::Timestamp::from_millisecond(*until)
                    .map_or_else(|_| format!("{until} ms"), |t| t.to_string());
                write!(
                    f,
                    "NodePool {nodepool} is backed off until {until} after {failures} failed launches: {last_reason}"
                )
            }
            Reason::NoValidNodePool => f.write_str("no valid NodePool with an EC2NodeClass in the cluster"),
            Reason::NoNodePool => f.write_str("no NodePool can launch a node for it"),
        }
    }
}

/// A pod that cannot be read for scheduling, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// It has no spec.
    #[error("pod has no spec")]
    NoSpec,
    /// Its resource requests cannot be read.
    #[error(transparent)]
    Requests(#[from] RequestsError),
    /// A resource request is negative.
    #[error("negative request for {resource}")]
    NegativeRequest {
        /// The resource.
        resource: String,
    },
    /// Its node requirements cannot be read.
    #[error(transparent)]
    Requirements(#[from] PodRequirementError),
    /// The node affinity of a PersistentVolume it mounts cannot be read.
    #[error("volume {claim}")]
    Volume {
        /// The PersistentVolumeClaim's name.
        claim: String,
        /// The bad requirement.
        #[source]
        source: RequirementError,
    },
    /// A preferred node affinity term cannot be read.
    #[error("preferred node affinity [{index}]")]
    PreferredNodeAffinity {
        /// The term's index.
        index: usize,
        /// The bad requirement.
        #[source]
        source: RequirementError,
    },
    /// A label selector (of a spread or a pod affinity term) cannot be compiled.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// A topology spread constraint's `maxSkew` is below 1.
    #[error("topologySpreadConstraints: maxSkew {max_skew} must be at least 1")]
    MaxSkew {
        /// The `maxSkew` given.
        max_skew: i32,
    },
}

/// Why a pod's topology constraints reject a node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// A spread constraint's skew would exceed maxSkew.
    Spread(String),
    /// A required affinity term finds no matching pod there.
    Affinity(String),
    /// An anti-affinity term (the pod's or a placed pod's) matches a pod there.
    AntiAffinity(String),
}

impl Rejection {
    /// Whether a node that rejects a pod for this will reject its class for good: counts
    /// of pods on one node only grow, so spreads and anti-affinity by hostname never turn
    /// in the pod's favour there; zones and affinity can.
    pub fn is_permanent_on_a_node(&self) -> bool {
        match self {
            Rejection::Spread(k) | Rejection::AntiAffinity(k) => k == crate::model::well_known::HOSTNAME,
            Rejection::Affinity(_) => false,
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Spread(k) => write!(f, "topology spread on {k}: maxSkew would be exceeded"),
            Rejection::Affinity(k) => write!(f, "pod affinity on {k}: no matching pod in the domain"),
            Rejection::AntiAffinity(k) => write!(f, "pod anti-affinity on {k}: a matching pod is in the domain"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::well_known as wk;

    fn every_reason() -> Vec<Reason> {
        vec![
            Reason::Taints {
                nodepool: "gpu".into(),
                key: "nvidia.com/gpu".into(),
                value: "true".into(),
                effect: "NoSchedule".into(),
            },
            Reason::Requirements {
                nodepool: "a".into(),
                mismatch: Mismatch::Conflict {
                    detail: "no node selector term can match any node".into(),
                },
            },
            Reason::Requirements {
                nodepool: "a".into(),
                mismatch: Mismatch::NoOfferedType,
            },
            Reason::Resources {
                nodepool: "a".into(),
                shortfall: Shortfall::TooLarge {
                    requests: Resources {
                        cpu_millis: 900_000,
                        ..Resources::default()
                    },
                },
            },
            Reason::Resources {
                nodepool: "a".into(),
                shortfall: Shortfall::NotPlaced,
            },
            Reason::Resources {
                nodepool: "a".into(),
                shortfall: Shortfall::NotHeldTogether,
            },
            Reason::Limits { nodepool: "a".into() },
            Reason::Topology {
                rejection: Rejection::Spread(wk::ZONE.into()),
            },
            Reason::MinValues {
                nodepool: "a".into(),
                detail: "x".into(),
            },
            Reason::Volume {
                claim: "ns/data".into(),
                problem: VolumeProblem::ClaimNotFound,
            },
            Reason::Volume {
                claim: "ns/data".into(),
                problem: VolumeProblem::StorageClassNotFound {
                    storage_class: "gp3".into(),
                },
            },
            Reason::InvalidPod { detail: "x".into() },
            Reason::Launch { error: "x".into() },
            Reason::BackedOff {
                nodepool: "a".into(),
                until: 1_700_000_000_000,
                failures: 3,
                last_reason: "x".into(),
            },
            Reason::NoValidNodePool,
            Reason::NoNodePool,
        ]
    }

    #[test]
    fn every_reason_round_trips_through_json_with_its_kind_as_tag() {
        for r in every_reason() {
            let json = serde_json::to_value(&r).unwrap();
            assert_eq!(json["kind"], r.kind().name(), "{json}");
            assert_eq!(serde_json::from_value::<Reason>(json).unwrap(), r);
        }
    }

    #[test]
    fn a_message_starts_with_its_constraint() {
        for r in every_reason() {
            let text = r.to_string();
            let prefix = match r.kind() {
                Kind::Taints => "taints: ",
                Kind::Requirements => "requirements: ",
                Kind::Resources => "resources: ",
                Kind::Limits => "limits: ",
                Kind::Topology => "topology spread on ",
                Kind::MinValues => "minValues: ",
                Kind::Volume => "volume: persistentvolumeclaim ns/data: ",
                Kind::InvalidPod => "invalid pod: ",
                Kind::Launch => "launch: ",
                Kind::BackedOff => "NodePool a is backed off until 2023-11-14T22:13:20Z after 3 failed launches: x",
                Kind::NoValidNodePool => "no valid NodePool",
                Kind::NoNodePool => "no NodePool",
            };
            assert!(text.starts_with(prefix), "{text}");
        }
    }

    #[test]
    fn kind_names_are_their_json() {
        for k in Kind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
        }
    }
}
