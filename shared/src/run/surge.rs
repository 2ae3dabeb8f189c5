//! Surge before eviction, over the Cluster port: for an opted-in pod whose eviction a PDB
//! refused, read its ReplicaSet and Deployment, decide
//! ([`crate::decide::disruption::surge`]), and restart the Deployment when that helps,
//! saying so in the drain's log and in an Event on the pod. The drain ([`crate::run::drain`])
//! calls it and goes on evicting; the pod goes once its replacement is ready.

use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::decide::disruption::surge::{NoSurge, Surge, deployment_of, replica_set_of, surge};
use crate::error_chain::Chain;
use crate::model::pod::Pod;
use crate::ports::{Cluster, EventReason, PodEvent, PodRef};

/// What a drain did about a pod it could not evict, its workload having opted in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SurgeOutcome {
    /// The Deployment was restarted: a new pod starts before the old one goes.
    Restarted {
        /// The Deployment, `namespace/name`.
        deployment: String,
        /// The `kubectl.kubernetes.io/restartedAt` written.
        restarted_at: String,
    },
    /// A rollout is under way: the drain waits for it.
    RollingOut {
        /// The Deployment, `namespace/name`.
        deployment: String,
        /// What the rollout waits for.
        waiting: String,
    },
    /// A restart would not help ([`NoSurge`]): the drain waits for the PDB.
    Refused {
        /// Why.
        reason: String,
    },
    /// Reading the workload or writing the restart failed; the next pass tries again.
    Failed {
        /// The error, with its sources.
        error: String,
    },
}

impl fmt::Display for SurgeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SurgeOutcome::Restarted {
                deployment,
                restarted_at,
            } => write!(f, "surge: restarted deployment {deployment} at {restarted_at}"),
            SurgeOutcome::RollingOut { deployment, waiting } => {
                write!(f, "surge: deployment {deployment} is rolling out ({waiting})")
            }
            SurgeOutcome::Refused { reason } => write!(f, "no surge: {reason}"),
            SurgeOutcome::Failed { error } => write!(f, "surge failed: {error}"),
        }
    }
}

fn refused(why: NoSurge) -> SurgeOutcome {
    SurgeOutcome::Refused {
        reason: why.to_string(),
    }
}

fn failed(e: &crate::ports::ClusterError) -> SurgeOutcome {
    SurgeOutcome::Failed {
        error: Chain(e).to_string(),
    }
}

/// Surges `pod` of `node`, whose eviction a PDB refused at `now`, its NodePool having
/// opted in or not: see the module's documentation. Logs `rollout restarted before eviction` (info) with fields `node`,
/// `pod`, `deployment` and `restarted_at`, and publishes a `SurgeBeforeEviction` Event on
/// the pod (a failure to publish is logged; the restart stands).
pub async fn surge_before_eviction<K: Cluster>(
    cluster: &K,
    node: &str,
    pod: &Pod,
    pool_opted_in: bool,
    now: SystemTime,
) -> SurgeOutcome {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let rs_name = match replica_set_of(pod) {
        Ok(name) => name,
        Err(why) => return refused(why),
    };
    let rs = match cluster.replica_set(namespace, &rs_name).await {
        Ok(Some(rs)) => rs,
        Ok(None) => return refused(NoSurge::NoDeployment { name: rs_name }),
        Err(e) => return failed(&e),
    };
    let name = match deployment_of(&rs) {
        Ok(name) => name,
        Err(why) => return refused(why),
    };
    let deployment = match cluster.deployment(namespace, &name).await {
        Ok(Some(d)) => d,
        Ok(None) => return refused(NoSurge::NoDeployment { name: rs_name }),
        Err(e) => return failed(&e),
    };
    let restart = match surge(pod, &deployment, pool_opted_in, now) {
        Ok(Surge::Restart(restart)) => restart,
        Ok(Surge::RollingOut { deployment, waiting }) => return SurgeOutcome::RollingOut { deployment, waiting },
        Err(why) => return refused(why),
    };
    if let Err(e) = cluster.restart_deployment(&restart).await {
        return failed(&e);
    }
    let pod_ref = PodRef::of(pod);
    tracing::info!(node, pod = %pod_ref.key(), deployment = %restart.key(), restarted_at = %restart.restarted_at,
        "rollout restarted before eviction");
    let message = format!(
        "Carpool restarted Deployment {} (kubectl rollout restart) before evicting this pod from node {node}: \
         its PodDisruptionBudget allows no disruption now; the pod is evicted once its replacement is ready",
        restart.key()
    );
    if let Err(e) = cluster
        .publish_event(&PodEvent::new(
            pod_ref.clone(),
            EventReason::SurgeBeforeEviction,
            message,
        ))
        .await
    {
        tracing::warn!(node, pod = %pod_ref.key(), error = %Chain(&e), "could not publish the surge's Event");
    }
    SurgeOutcome::Restarted {
        deployment: restart.key(),
        restarted_at: restart.restarted_at,
    }
}
