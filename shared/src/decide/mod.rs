//! Pure decisions: snapshot in, plan out. No I/O, no clock, no async.
//!
//! - [`provisioning_plan`] turns a [`Snapshot`] and a region's catalog into a
//!   [`ProvisioningPlan`]: which new nodes to launch (type, alternatives, zone, capacity
//!   type, pods), which pods go on existing nodes, and which cannot be placed and why.
//! - [`nodepools`] drops the NodePools whose EC2NodeClass is missing, and says what
//!   becomes of the pods when no NodePool is left.
//! - [`backoff`] decides how long a NodePool whose launches keep failing is held back,
//!   and leaves it out of planning meanwhile.
//! - [`subnet_zones`] and [`ami_requirements`] narrow each NodePool, before planning, to
//!   the zones its EC2NodeClass has subnets in and the instance types its AMIs boot.
//! - [`checker`] re-checks a plan against the input, independently of the scheduling.
//! - [`housekeeping`] turns the Nodes, instances and records of a cluster into a
//!   [`housekeeping::HousekeepingPlan`]: launches to mark registered, Nodes to label,
//!   launches reconciled with the cloud, instances to terminate (with the reason; only
//!   those [`ownership`] says are this deployment's, a few per round), records to forget.
//! - [`drain`] sorts a node's pods for a drain: the tiers to evict (non-critical, then
//!   system-critical; the grace periods that cannot fit first) and the pods that stay;
//!   [`pdb`] says which PodDisruptionBudgets cover a pod and what they allow, to explain
//!   a blocked eviction.
//! - [`pod_events`] picks the Kubernetes Events a batch publishes on its pending pods
//!   (nominated, unschedulable, launch failed), rate-limited per pod, reason and message.
//! - [`replacement`] plans what replaces a node going away, from its own pods.
//! - [`reservation`] keeps the room of a disrupted node's replacement, in the planner's
//!   view, for the pods it was launched for.
//! - [`interruption`] reads a spot warning, rebalance recommendation, state change, Health
//!   event or scheduled tick (bare, SQS-wrapped or a Lambda SQS batch) into a typed
//!   [`interruption::Action`]: disrupt, rebalance, clean up, sweep or ignore (and why).
//!
//! - [`volumes`] reads the volumes a pod mounts: the zones they bind it to, the claims
//!   that keep it off every node, and what it attaches per CSI driver.
//!
//! The algorithm is in [`scheduler`] (the simulation, with its complexity) and
//! [`packer`] (the choice of each new node's type); [`lower_bound`] bounds the cost of
//! any valid plan.

pub mod ami_requirements;
pub mod backoff;
pub mod checker;
pub mod daemonsets;
pub mod disruption;
pub mod drain;
pub mod hand_tiers;
pub mod housekeeping;
pub mod in_flight;
pub mod interruption;
pub mod lower_bound;
pub mod namespaces;
pub mod node_inclusion;
pub mod nodepools;
pub mod ownership;
pub mod packer;
pub mod pdb;
pub mod plan;
pub mod pod;
pub mod pod_events;
pub mod replacement;
pub mod reservation;
pub mod scheduler;
pub mod scheduler_fit;
pub mod selector;
pub mod subnet_zones;
pub mod taints;
pub mod templates;
pub mod topology;
pub mod unschedulable;
pub mod volumes;
pub mod wave;

pub use plan::{ExistingPlacement, PlannedNode, ProvisioningPlan, Unschedulable};

use crate::catalog::RegionCatalog;
use crate::snapshot::Snapshot;

/// Plans new nodes for the snapshot's pending pods.
pub fn provisioning_plan(snapshot: &Snapshot, region: &RegionCatalog<'_>) -> ProvisioningPlan {
    scheduler::Scheduler::new(snapshot, region).run().plan
}

/// Plans new nodes and computes the plan's lower bound (an LP; see [`lower_bound`]).
pub fn provisioning_plan_with_bound(snapshot: &Snapshot, region: &RegionCatalog<'_>) -> ProvisioningPlan {
    let outcome = scheduler::Scheduler::new(snapshot, region).run();
    let bound = outcome.lower_bound();
    let mut plan = outcome.plan;
    plan.lower_bound_per_hour = Some(bound);
    plan
}
