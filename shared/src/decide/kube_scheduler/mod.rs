//! One model of kube-scheduler's default profile: how it queues pending pods, which nodes
//! its filters keep, and how it scores them. The plan's fit
//! ([`crate::decide::provisioning::scheduler_fit`]) replays it on a plan's nodes, and
//! `carpool simulate`'s kube-scheduler scores with the same formulas.
//!
//! - [`scores`]: `NodeResourcesFit` (least allocated) and
//!   `NodeResourcesBalancedAllocation`, with the requests kube-scheduler counts for a
//!   container that sets none;
//! - [`spread_score`]: `PodTopologySpread`'s score (soft spreads, or the system defaults);
//! - [`replay`]: a plan's pods bound where the scheduler would bind them, and those it
//!   would strand.
//!
//! The replay reads the objects with the plan checker's readers (requests, selectors,
//! tolerations, node affinity, volumes, the plan's final state): kube's own rules, written
//! once from upstream. The checker itself uses nothing from here, nor from the planner.

pub mod replay;
pub mod scores;
pub mod spread_score;

pub use replay::{Order, Replay, Stranded, Upgrade, replay, stranded_pods};
