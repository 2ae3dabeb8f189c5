//! Which instances are Carpool's to terminate, and how many at once.
//!
//! The cluster tag says an instance is meant for the cluster, not who launched it: a
//! user's box, or another deployment's node, may carry it too. An instance is this
//! deployment's ([`launched_by`]) only when it carries Carpool's launch-id tag **and** this
//! deployment's tag (`carpool.sh/deployment`, set on every instance it launches). The
//! three functions apply that one rule: housekeeping terminates only such an instance, and
//! only with a launch time (without one its age is unknown) ([`ownership`]); the
//! interruption function disrupts only such an instance; the consolidator disrupts only a
//! node whose instance is such an instance, whatever the node's `karpenter.sh/nodepool`
//! label says (Karpenter, beside it, labels its own nodes so). Instances launched before
//! the deployment tag existed carry none, and are therefore never terminated or disrupted:
//! an operator cleans them up.
//!
//! Terminations per round are capped ([`termination_cap`]), so that a bug or a bad
//! listing that makes every node look orphaned terminates a few, not the cluster.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::Instance;

/// The fewest terminations a round may make, however few nodes Carpool has.
pub const MIN_TERMINATIONS: usize = 3;

/// The share of Carpool's instances, in percent (rounded up), a round may terminate when
/// that is more than [`MIN_TERMINATIONS`].
pub const TERMINATION_SHARE_PERCENT: usize = 10;

/// How many instances one round may terminate when Carpool owns `owned`: at most
/// max([`MIN_TERMINATIONS`], [`TERMINATION_SHARE_PERCENT`]% of `owned`, rounded up).
/// A bug or a bad listing that makes every node look orphaned thus terminates a few,
/// and the rest are held back for someone to look at.
pub fn termination_cap(owned: usize) -> usize {
    MIN_TERMINATIONS.max((owned * TERMINATION_SHARE_PERCENT).div_ceil(100))
}

/// Why an instance that would otherwise be terminated is not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpareReason {
    /// It carries no launch-id tag: Carpool did not launch it.
    NoLaunchIdTag,
    /// It does not carry this deployment's tag: another deployment's, or a box tagged for
    /// the cluster by hand, or launched before the tag existed.
    OtherDeployment {
        /// Its deployment tag, if any.
        deployment: Option<String>,
    },
    /// EC2 gave no launch time, so its age is unknown.
    NoLaunchTime,
}

impl fmt::Display for SpareReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpareReason::NoLaunchIdTag => write!(f, "it has no launch-id tag"),
            SpareReason::OtherDeployment { deployment: Some(d) } => write!(f, "it belongs to deployment {d:?}"),
            SpareReason::OtherDeployment { deployment: None } => write!(f, "it has no deployment tag"),
            SpareReason::NoLaunchTime => write!(f, "it has no launch time"),
        }
    }
}

/// Whether this deployment launched an instance: it carries Carpool's launch-id tag and
/// this deployment's tag. The interruption function and the consolidator act only on such
/// instances.
pub fn launched_by(instance: &Instance, deployment: &str) -> Result<(), SpareReason> {
    if instance.launch_id.is_empty() {
        Err(SpareReason::NoLaunchIdTag)
    } else if instance.deployment.as_deref() != Some(deployment) {
        Err(SpareReason::OtherDeployment {
            deployment: instance.deployment.clone(),
        })
    } else {
        Ok(())
    }
}

/// Whether housekeeping may terminate an instance: this deployment launched it
/// ([`launched_by`]), and it has a launch time.
pub fn ownership(instance: &Instance, deployment: &str) -> Result<(), SpareReason> {
    launched_by(instance, deployment)?;
    if instance.launched_at.is_none() {
        Err(SpareReason::NoLaunchTime)
    } else {
        Ok(())
    }
}
