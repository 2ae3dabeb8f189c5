//! Provisioning: pending pods in, new nodes out. All of the scheduling simulation's parts
//! sit here, as they do in Karpenter's `pkg/controllers/provisioning/scheduling`.
//!
//! The plan and how it is made:
//! - [`plan`]: the [`ProvisioningPlan`]: new nodes, placements on existing nodes, and the
//!   pods that cannot be placed, each with a reason ([`unschedulable`]);
//! - [`scheduler`]: the simulation, with its complexity; [`packer`]: the choice of each
//!   new node's type; [`lower_bound`]: a bound on the cost of any valid plan;
//! - [`batch_plan`]: the one planning path the provisioner and `carpool plan` share;
//! - [`scheduler_fit`]: the plan grown where kube-scheduler's own placement would strand
//!   a pod.
//!
//! What it reads:
//! - [`pod`]: a pod's requests, requirements, tolerations, spreads, affinities, host
//!   ports and volumes, read once; [`selector`], [`namespaces`], [`node_inclusion`] and
//!   [`taints`]: the rules they are matched by; [`topology`]: spreads and pod
//!   (anti-)affinity across domains; [`volumes`]: the zones claims bind a pod to, and what
//!   it attaches per CSI driver;
//! - [`templates`]: what a NodePool and its EC2NodeClass would launch; [`daemonsets`]:
//!   the DaemonSets that land on a node; [`in_flight`]: launches not yet registered, as
//!   capacity; [`reservation`]: room kept for a disrupted node's replacement;
//!   [`reserved_capacity`]: the room left in the capacity reservations (the `reserved`
//!   capacity type), never planned past;
//! - [`nodepools`]: the NodePools that can launch; [`backoff`]: those held back after
//!   failed launches; [`subnet_zones`] and [`ami_requirements`]: each NodePool narrowed to
//!   the zones its subnets are in and the types its AMIs boot;
//! - [`pod_events`]: the Kubernetes Events a batch publishes on its pending pods;
//! - [`static_capacity`]: the nodes a static NodePool (`spec.replicas`) is missing;
//!   [`buffers`]: CapacityBuffers as pending pods to keep room for.

pub mod ami_requirements;

pub mod backoff;
pub mod batch_plan;
pub mod buffers;
pub mod daemonsets;
pub mod in_flight;
pub mod lower_bound;
pub mod namespaces;
pub mod node_inclusion;
pub mod nodepools;
pub mod packer;
pub mod plan;
pub mod pod;
pub mod pod_events;
pub mod reservation;
pub mod reserved_capacity;
pub mod scheduler;
pub mod scheduler_fit;
pub mod selector;
pub mod static_capacity;
pub mod subnet_zones;
pub mod taints;
pub mod templates;
pub mod topology;
pub mod unschedulable;
pub mod volumes;

use self::plan::ProvisioningPlan;
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
