//! What the checker finds wrong with a plan: one variant per broken rule, with the pod, the
//! node and the constraint it names. `Display` gives the message in words.

use std::fmt;

/// A new node of the plan, as the checker names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewNode {
    /// Its position in the plan's `nodes` (from 0; printed from 1).
    pub index: usize,
    /// Its instance type.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
}

impl fmt::Display for NewNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "new node {} ({} {})", self.index + 1, self.instance_type, self.zone)
    }
}

/// A node of the plan's final state: one that exists, or one the plan opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRef {
    /// An existing node, by name.
    Existing(String),
    /// A new node of the plan.
    New(NewNode),
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRef::Existing(name) => f.write_str(name),
            NodeRef::New(n) => n.fmt(f),
        }
    }
}

/// Why an instance type (the node's own or an alternative) cannot be that new node's.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TypeProblem {
    /// The region does not offer the type.
    #[error("not offered in the region")]
    NotInRegion,
    /// The type is not offered in the node's zone and capacity type.
    #[error("no offering in this zone and capacity type")]
    NoOffering,
    /// The plan's price is not the offering's.
    #[error("price {planned} differs from the offering's {offered}")]
    PriceDiffers {
        /// USD per hour in the plan.
        planned: f64,
        /// USD per hour of the offering.
        offered: f64,
    },
    /// The node's labels with this type break a NodePool requirement.
    #[error("NodePool requirement {requirement} unmet")]
    NodePoolRequirements {
        /// The requirement, `key operator [values]`.
        requirement: String,
    },
    /// The type's labels match none of a pod's node requirement branches.
    #[error("pod {pod} requirements do not match")]
    PodRequirements {
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// The pods and the DaemonSets that land on the node do not fit the type.
    #[error("{resource} does not fit with DaemonSets")]
    DoesNotFit {
        /// The first resource that does not fit.
        resource: String,
    },
}

/// One rule a plan breaks.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Violation {
    /// More reserved nodes planned into a capacity reservation than it has room for.
    #[error("capacity reservation {reservation} takes {planned} planned nodes with room for {available}")]
    ReservationOverbooked {
        /// The reservation's id.
        reservation: String,
        /// Reserved nodes planned into it.
        planned: u32,
        /// Instances it has left.
        available: u32,
    },
    /// A provisionable pod is neither placed nor reported unschedulable.
    #[error("pod {pod} is neither placed nor reported unschedulable")]
    Unplanned {
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// A pod appears more than once (placed or unschedulable).
    #[error("pod {pod} appears {times} times in the plan")]
    Repeated {
        /// The pod, `namespace/name`.
        pod: String,
        /// How many times.
        times: usize,
    },
    /// The plan places a pod that is not a pending pod of the input.
    #[error("pod {pod} is placed but is not a pending pod")]
    NotPending {
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// A pod is reported unschedulable with an empty reason.
    #[error("pod {pod} is unschedulable without a reason")]
    NoReason {
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// The plan places pods on an existing node that is not ready, cordoned or terminating.
    #[error("existing node {node} is not usable (not ready, cordoned or terminating)")]
    UnusableNode {
        /// The node's name.
        node: String,
    },
    /// The plan places pods on a node that is not in the input.
    #[error("existing node {node} is not in the input")]
    UnknownNode {
        /// The node's name.
        node: String,
    },
    /// An existing node's pods exceed its allocatable.
    #[error("existing node {node}: {resource} exceeds allocatable")]
    ExistingOverfull {
        /// The node's name.
        node: String,
        /// The first resource over.
        resource: String,
    },
    /// A new node's NodePool is not in the input.
    #[error("{node}: NodePool {nodepool} is not in the input")]
    UnknownNodePool {
        /// The new node.
        node: NewNode,
        /// Its NodePool's name.
        nodepool: String,
    },
    /// A new node's `instance_types` does not start with its `instance_type`.
    #[error("{node}: instance_types does not start with instance_type")]
    TypeNotFirst {
        /// The new node.
        node: NewNode,
    },
    /// A new node has more alternatives than a launch takes.
    #[error("{node}: more than {max} alternatives")]
    TooManyAlternatives {
        /// The new node.
        node: NewNode,
        /// The most allowed.
        max: usize,
    },
    /// A new node's type, or one of its alternatives, cannot be that node's.
    #[error("{node}: {} {instance_type}: {problem}", if *.alternative { "alternative" } else { "type" })]
    BadType {
        /// The new node.
        node: NewNode,
        /// Whether it is an alternative (not the node's own type).
        alternative: bool,
        /// The instance type.
        instance_type: String,
        /// What is wrong with it.
        problem: TypeProblem,
    },
    /// A new node's alternatives break its NodePool's `minValues`.
    #[error("{node}: minValues for {key:?} needs {min_values} distinct values, and its types span {found}")]
    MinValues {
        /// The new node.
        node: NewNode,
        /// The requirement's key.
        key: String,
        /// Its minValues.
        min_values: u32,
        /// The distinct values the node's types span.
        found: usize,
    },
    /// A NodePool's limit is exceeded by its nodes and the plan's.
    #[error("NodePool {nodepool}: limit {resource}={limit} exceeded ({used})")]
    LimitExceeded {
        /// The NodePool's name.
        nodepool: String,
        /// The resource limited (`nodes` for the node count).
        resource: String,
        /// The limit.
        limit: i64,
        /// What it would use.
        used: i64,
    },
    /// A pending pod does not tolerate a taint of its node.
    #[error("pod {pod} does not tolerate taint {taint} of {node}")]
    Untolerated {
        /// The pod, `namespace/name`.
        pod: String,
        /// The taint's key.
        taint: String,
        /// The node.
        node: NodeRef,
    },
    /// None of a pending pod's node requirement branches matches its node.
    #[error("pod {pod}: no node requirement branch matches {node}")]
    NoBranch {
        /// The pod, `namespace/name`.
        pod: String,
        /// The node.
        node: NodeRef,
    },
    /// A pod's host port is taken by another pod on its node.
    #[error("pod {pod}: host port {port} conflicts on {node}")]
    HostPortConflict {
        /// The pod, `namespace/name`.
        pod: String,
        /// The port.
        port: i32,
        /// The node.
        node: NodeRef,
    },
    /// A new node's pods and DaemonSets exceed its allocatable.
    #[error("{node}: {resource} exceeds allocatable after DaemonSets")]
    NewOverfull {
        /// The new node.
        node: NewNode,
        /// The first resource over.
        resource: String,
    },
    /// A pod with required pod affinity is on a node without the term's topology key.
    #[error("pod {pod}: node has no {key} for pod affinity")]
    NoAffinityDomain {
        /// The pod, `namespace/name`.
        pod: String,
        /// The topology key.
        key: String,
    },
    /// A pod's required pod affinity has no matching pod in its domain.
    #[error("pod {pod}: required pod affinity on {key} has no matching pod in {domain}")]
    AffinityUnmet {
        /// The pod, `namespace/name`.
        pod: String,
        /// The topology key.
        key: String,
        /// The pod's domain (the key's value on its node).
        domain: String,
    },
    /// Two pods share a domain that one's required anti-affinity forbids.
    #[error("pods {pod} and {other}: anti-affinity on {key} violated")]
    AntiAffinity {
        /// The pod checked, `namespace/name`.
        pod: String,
        /// The other pod, `namespace/name`.
        other: String,
        /// The topology key.
        key: String,
    },
    /// A pod with a `DoNotSchedule` spread is on a node without the spread's key.
    #[error("pod {pod}: node has no {key} for its topology spread")]
    NoSpreadDomain {
        /// The pod, `namespace/name`.
        pod: String,
        /// The topology key.
        key: String,
    },
    /// A `DoNotSchedule` spread's skew exceeds its `maxSkew`.
    #[error("pod {pod}: spread on {key} has skew {skew} > maxSkew {max_skew} in {domain}")]
    Skew {
        /// The pod, `namespace/name`.
        pod: String,
        /// The topology key.
        key: String,
        /// The skew found.
        skew: i32,
        /// The spread's `maxSkew`.
        max_skew: i32,
        /// The pod's domain.
        domain: String,
    },
    /// A preempting pod (`status.nominatedNodeName` set) is placed on a new node.
    #[error("pod {pod} is preempting (nominated to {nominated}) and must not be launched for")]
    Preempting {
        /// The pod, `namespace/name`.
        pod: String,
        /// The node it is nominated to.
        nominated: String,
    },
    /// A pod is placed although one of its claims keeps it off every node.
    #[error("pod {pod} is placed on {node}, but {reason}")]
    VolumeBlocked {
        /// The pod, `namespace/name`.
        pod: String,
        /// The node.
        node: NodeRef,
        /// Why its volumes rule every node out.
        reason: String,
    },
    /// A pod's volumes (a bound PV's node affinity, a StorageClass's allowed topologies)
    /// rule out its node.
    #[error("pod {pod}: its volumes do not allow {node}")]
    VolumeConflict {
        /// The pod, `namespace/name`.
        pod: String,
        /// The node.
        node: NodeRef,
    },
    /// A node attaches more volumes of a CSI driver than its limit.
    #[error("{node}: {count} volumes of {driver} exceed its attach limit {limit}")]
    AttachLimit {
        /// The node.
        node: NodeRef,
        /// The CSI driver.
        driver: String,
        /// The volumes attached in the final state.
        count: usize,
        /// The limit.
        limit: i64,
    },
    /// A pod reported unschedulable fits, alone, a node a NodePool could launch.
    #[error(
        "pod {pod} is reported unschedulable, but fits alone a {instance_type} in {zone} ({capacity_type}) of NodePool {nodepool}"
    )]
    WrongfulRefusal {
        /// The pod, `namespace/name`.
        pod: String,
        /// The NodePool.
        nodepool: String,
        /// An instance type that takes it.
        instance_type: String,
        /// The zone.
        zone: String,
        /// The capacity type.
        capacity_type: String,
    },
}
