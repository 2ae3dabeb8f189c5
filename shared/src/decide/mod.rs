//! Pure decisions: snapshot in, plan out. No I/O, no clock, no async; `now` is passed in.
//! One folder per job, as Karpenter keeps one package per job:
//!
//! - [`provisioning`]: the scheduling simulation and the packer that turn a
//!   [`Snapshot`] and a region's catalog into a [`ProvisioningPlan`], its lower bound,
//!   and the fit of that plan to kube-scheduler's own placement; the NodePools that can
//!   launch, their backoff, and the capacity already in flight.
//! - [`kube_scheduler`]: one model of kube-scheduler's queue, filters and scores, which
//!   the plan's fit replays and `carpool simulate` schedules with.
//! - [`waves`]: launch waves, and the tiers a wave is handed to its pods in.
//! - [`disruption`]: Karpenter's disruption methods (emptiness, repair, expiration,
//!   drift, multi-node, single-node, split, spot-to-spot), budgets and candidates; the
//!   order a node is drained in, the PDBs that hold it, and what replaces a node.
//! - [`interruption`]: a spot warning, rebalance recommendation, state change, Health
//!   event or scheduled tick read into a typed [`interruption::Action`].
//! - [`housekeeping`]: what to mark registered, label, terminate and forget, as a plan,
//!   and which instances are this deployment's ([`housekeeping::ownership`]).
//! - [`status`]: the `status` of the NodePools and EC2NodeClasses Carpool manages, as
//!   Karpenter writes it, for `kubectl get` and `kubectl describe`.
//! - [`checker`]: the independent plan checker, which shares none of the planner's
//!   reading of the objects.

pub mod checker;
pub mod disruption;
pub mod housekeeping;
pub mod interruption;
pub mod kube_scheduler;
pub mod provisioning;
pub mod status;
pub mod waves;

pub use provisioning::plan::{ExistingPlacement, PlannedNode, ProvisioningPlan, Unschedulable};
pub use provisioning::{provisioning_plan, provisioning_plan_with_bound};

#[cfg(doc)]
use crate::snapshot::Snapshot;
