//! The `kubectl rollout restart` of a Deployment, as a value: what
//! [`crate::ports::Cluster::restart_deployment`] writes when a drain surges a workload
//! before evicting its pod ([`crate::decide::disruption::surge`]).

use serde::{Deserialize, Serialize};

/// The pod-template annotation `kubectl rollout restart` sets to the time of the restart
/// (RFC 3339, seconds): a new template, so the Deployment controller rolls out new pods.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// The Deployment annotation naming the pod (its UID) a restart was made for: a drain
/// that finds the rollout done and that pod still there does not restart again.
pub const SURGED_FOR: &str = "carpool.sh/surged-for";

/// A rollout restart of one Deployment: the template annotation [`RESTARTED_AT`] set to
/// `restarted_at` and the Deployment's [`SURGED_FOR`] to `for_pod`, written only if the
/// Deployment is still at `resource_version` (a conflict otherwise: it changed since it
/// was read, and the drain reads it again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutRestart {
    /// The Deployment's namespace.
    pub namespace: String,
    /// The Deployment's name.
    pub name: String,
    /// The Deployment's `metadata.resourceVersion` when it was read.
    pub resource_version: String,
    /// The value of [`RESTARTED_AT`]: the drain's `now`, RFC 3339 in whole seconds, as
    /// kubectl writes it.
    pub restarted_at: String,
    /// The UID of the pod the restart is for.
    pub for_pod: String,
}

impl RolloutRestart {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
