//! Surge before eviction: what a drain does, for a workload that opted in, when a
//! PodDisruptionBudget refuses the eviction of its pod.
//!
//! Eviction takes a single-replica Deployment down, and a PDB of `minAvailable: 1` on it
//! holds the node forever (kubernetes-sigs/karpenter #740, #2600, #2897, #2985): Karpenter
//! evicts through the Eviction API and waits (`terminator.Queue.Evict`). A workload can
//! opt in instead, with the annotation [`SURGE_ANNOTATION`]`: "true"` on its pods (its
//! Deployment's pod template) or on its NodePool (every workload of the pool, but a pod
//! annotated `"false"`). Then, when the eviction of its pod is refused by a PDB, Carpool
//! starts a rollout of the pod's Deployment with the patch `kubectl rollout restart`
//! writes (k8s.io/kubectl `pkg/polymorphichelpers/objectrestarter.go`,
//! `defaultObjectRestarter`: the template annotation `kubectl.kubernetes.io/restartedAt`
//! set to now, RFC 3339). The Deployment controller starts a new pod first (its
//! `maxSurge`), on other capacity since the node is tainted, and removes the old one once
//! the new one is available; the drain goes on evicting, and the PDB allows the eviction
//! as soon as the new pod is ready.
//!
//! [`surge`] decides, from the pod and its Deployment, one of:
//! - [`Surge::Restart`]: write the restart ([`RolloutRestart`]);
//! - [`Surge::RollingOut`]: a rollout is under way (ours or anyone's): wait, no second
//!   restart;
//! - [`NoSurge`]: why a restart would not help, so the drain waits for the PDB as
//!   Karpenter does. A StatefulSet never surges: none of its update strategies starts a
//!   pod before deleting the old one (a pod's ordinal identity is unique; `apps/v1`
//!   `StatefulSetUpdateStrategy` has no `maxSurge`). A Deployment whose `maxSurge`
//!   resolves to 0 would delete first (`deploymentutil.ResolveFenceposts`), one paused
//!   would not roll out (kubectl refuses to restart it), one with `Recreate` deletes all
//!   its pods first.

use std::time::SystemTime;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::model::NodePool;
use crate::model::pod::Pod;
use crate::model::rollout_restart::{RolloutRestart, SURGED_FOR};

/// The annotation that opts a workload (on its pods) or a NodePool (on the NodePool) in
/// to a surge before eviction.
pub const SURGE_ANNOTATION: &str = "carpool.sh/surge-before-eviction";

/// A Deployment's `maxSurge` when the object does not say (`SetDefaults_Deployment`).
const DEFAULT_MAX_SURGE_PERCENT: i32 = 25;

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Whether `pool` opts every workload on its nodes in.
pub fn pool_opted_in(pool: &NodePool) -> bool {
    annotation(&pool.metadata, SURGE_ANNOTATION) == Some("true")
}

/// Whether `pod` is opted in: it says `"true"`, or its pool opted in and it does not say
/// `"false"`.
pub fn opted_in(pod: &Pod, pool_opted_in: bool) -> bool {
    match annotation(&pod.metadata, SURGE_ANNOTATION) {
        Some("true") => true,
        Some("false") => false,
        _ => pool_opted_in,
    }
}

/// The controller of an object (its owner reference with `controller: true`): kind and name.
pub fn controller(meta: &ObjectMeta) -> Option<(&str, &str)> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.as_str(), o.name.as_str()))
}

/// Whether an opted-in pod may surge, as far as the pod alone tells: its controller is a
/// ReplicaSet (a Deployment's, which the drain reads). The consolidator does not let such
/// a pod's PDB hold its node back; the drain decides with the Deployment ([`surge`]).
pub fn may_surge(pod: &Pod, pool_opted_in: bool) -> bool {
    opted_in(pod, pool_opted_in) && matches!(controller(&pod.metadata), Some(("ReplicaSet", _)))
}

/// Why a restart would not help a pod a PDB keeps: the drain waits for the PDB.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoSurge {
    /// The pod has no controller.
    #[error("the pod has no controller to start a replacement")]
    NoController,
    /// The pod belongs to a StatefulSet.
    #[error(
        "its controller is StatefulSet {name}: no StatefulSet update strategy starts a pod before deleting the old one"
    )]
    StatefulSet {
        /// The StatefulSet.
        name: String,
    },
    /// The pod's controller is neither a ReplicaSet nor a StatefulSet.
    #[error("its controller is {kind} {name}, not a Deployment")]
    OtherController {
        /// The controller's kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// The pod's ReplicaSet belongs to no Deployment (or is gone).
    #[error("ReplicaSet {name} belongs to no Deployment")]
    NoDeployment {
        /// The ReplicaSet.
        name: String,
    },
    /// The Deployment is paused: a restart would not roll out.
    #[error("Deployment {name} is paused")]
    Paused {
        /// The Deployment.
        name: String,
    },
    /// The Deployment recreates: its pods go before their replacements start.
    #[error("Deployment {name} uses the Recreate strategy: its pods go before their replacements start")]
    Recreate {
        /// The Deployment.
        name: String,
    },
    /// The Deployment's `maxSurge` resolves to no pod.
    #[error(
        "Deployment {name}'s maxSurge {max_surge} is 0 pods of {replicas}: a rollout would remove a pod before its replacement is ready"
    )]
    NoSurgeRoom {
        /// The Deployment.
        name: String,
        /// Its `maxSurge` as written.
        max_surge: String,
        /// Its replicas.
        replicas: i32,
    },
    /// The Deployment itself did not opt in: its pod template does not say so (or says
    /// `"false"`) and its NodePool does not. A pod's own annotation is not enough: it must
    /// come from the template of the Deployment that is restarted.
    #[error("Deployment {name} did not opt in: its pod template is not annotated {SURGE_ANNOTATION}: \"true\"")]
    NotOptedIn {
        /// The Deployment.
        name: String,
    },
    /// A restart was made for this pod, the rollout is done, and the pod is still there.
    #[error(
        "Deployment {name} was restarted for this pod already and its rollout is done; the PDB still allows no disruption"
    )]
    AlreadySurged {
        /// The Deployment.
        name: String,
    },
}

/// What the drain does for an opted-in pod whose eviction a PDB refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Surge {
    /// Restart the Deployment.
    Restart(RolloutRestart),
    /// A rollout of the Deployment is under way: wait for it, and evict again.
    RollingOut {
        /// The Deployment, `namespace/name`.
        deployment: String,
        /// What it waits for, as `kubectl rollout status` says it.
        waiting: String,
    },
}

/// The Deployment that owns `rs`, or why none.
pub fn deployment_of(rs: &ReplicaSet) -> Result<String, NoSurge> {
    match controller(&rs.metadata) {
        Some(("Deployment", name)) => Ok(name.to_string()),
        _ => Err(NoSurge::NoDeployment {
            name: rs.metadata.name.clone().unwrap_or_default(),
        }),
    }
}

/// The ReplicaSet the drain must read for `pod`, or why the pod cannot surge.
pub fn replica_set_of(pod: &Pod) -> Result<String, NoSurge> {
    match controller(&pod.metadata) {
        Some(("ReplicaSet", name)) => Ok(name.to_string()),
        Some(("StatefulSet", name)) => Err(NoSurge::StatefulSet { name: name.to_string() }),
        Some((kind, name)) => Err(NoSurge::OtherController {
            kind: kind.to_string(),
            name: name.to_string(),
        }),
        None => Err(NoSurge::NoController),
    }
}

/// `value` of `total`, a count or a percentage rounded up
/// (`intstrutil.GetScaledValueFromIntOrPercent(.., roundUp: true)`, as
/// `deploymentutil.ResolveFenceposts` resolves `maxSurge`); `None` when unreadable.
fn scaled_up(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            i32::try_from((percent * i64::from(total) + 99).div_euclid(100)).ok()
        }
    }
}

/// What a rollout of `d` still waits for, if it is under way: kubectl's
/// `DeploymentStatusViewer.Status` (k8s.io/kubectl `pkg/polymorphichelpers/rollout_status.go`).
fn rolling_out(d: &Deployment) -> Option<String> {
    let status = d.status.clone().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    if generation > status.observed_generation.unwrap_or(0) {
        return Some("the Deployment controller to observe the new template".into());
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if updated < wanted {
        return Some(format!("{updated} of {wanted} new replicas updated"));
    }
    let replicas = status.replicas.unwrap_or(0);
    if replicas > updated {
        return Some(format!("{} old replicas pending termination", replicas - updated));
    }
    let available = status.available_replicas.unwrap_or(0);
    if available < updated {
        return Some(format!("{available} of {updated} updated replicas available"));
    }
    None
}

/// What to do for `pod`, whose eviction a PDB refused, given its Deployment `d` as read
/// and whether the node's NodePool opted in (see the module's documentation). The
/// Deployment's own pod template must opt in (or, under a pool that did, not opt out): the
/// pod's annotation alone never restarts a Deployment. The restart is stamped `now`, in
/// whole seconds.
pub fn surge(pod: &Pod, d: &Deployment, pool_opted_in: bool, now: SystemTime) -> Result<Surge, NoSurge> {
    let name = d.metadata.name.clone().unwrap_or_default();
    let namespace = d.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let key = format!("{namespace}/{name}");
    let template = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
    let says = template.and_then(|m| annotation(m, SURGE_ANNOTATION));
    let workload_opted_in = match says {
        Some("true") => true,
        Some("false") => false,
        _ => pool_opted_in,
    };
    if !workload_opted_in {
        return Err(NoSurge::NotOptedIn { name: key });
    }
    if let Some(waiting) = rolling_out(d) {
        return Ok(Surge::RollingOut {
            deployment: key,
            waiting,
        });
    }
    let spec = d.spec.clone().unwrap_or_default();
    if spec.paused == Some(true) {
        return Err(NoSurge::Paused { name: key });
    }
    let strategy = spec.strategy.unwrap_or_default();
    if strategy.type_.as_deref() == Some("Recreate") {
        return Err(NoSurge::Recreate { name: key });
    }
    let replicas = spec.replicas.unwrap_or(1);
    let max_surge = strategy
        .rolling_update
        .and_then(|r| r.max_surge)
        .unwrap_or(IntOrString::String(format!("{DEFAULT_MAX_SURGE_PERCENT}%")));
    if scaled_up(&max_surge, replicas).is_none_or(|n| n < 1) {
        let written = match &max_surge {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        return Err(NoSurge::NoSurgeRoom {
            name: key,
            max_surge: written,
            replicas,
        });
    }
    let for_pod = pod
        .metadata
        .uid
        .clone()
        .unwrap_or_else(|| crate::decide::provisioning::pod::pod_key(pod));
    if annotation(&d.metadata, SURGED_FOR) == Some(for_pod.as_str()) {
        return Err(NoSurge::AlreadySurged { name: key });
    }
    Ok(Surge::Restart(RolloutRestart {
        namespace,
        name,
        resource_version: d.metadata.resource_version.clone().unwrap_or_default(),
        restarted_at: rfc3339_seconds(now),
        for_pod,
    }))
}

/// `t` as kubectl's `time.Now().Format(time.RFC3339)` writes it, in UTC.
fn rfc3339_seconds(t: SystemTime) -> String {
    let seconds = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus, DeploymentStrategy, RollingUpdateDeployment};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::time::Duration;

    const NOW: SystemTime = SystemTime::UNIX_EPOCH;

    fn now() -> SystemTime {
        NOW + Duration::from_millis(1_796_515_200_500)
    }

    fn owned_by(kind: &str, name: &str) -> Option<Vec<OwnerReference>> {
        Some(vec![OwnerReference {
            kind: kind.into(),
            name: name.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }])
    }

    fn pod(annotation: Option<&str>, owner: Option<(&str, &str)>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-abc".into());
        p.metadata.namespace = Some("shop".into());
        p.metadata.uid = Some("pod-uid".into());
        p.metadata.annotations = annotation.map(|v| [(SURGE_ANNOTATION.to_string(), v.to_string())].into());
        p.metadata.owner_references = owner.and_then(|(k, n)| owned_by(k, n));
        p
    }

    /// A settled 1-replica Deployment with `strategy`.
    fn deployment(strategy: Option<DeploymentStrategy>) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                generation: Some(3),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(1),
                strategy,
                template: k8s_openapi::api::core::v1::PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        annotations: Some([(SURGE_ANNOTATION.to_string(), "true".to_string())].into()),
                        ..ObjectMeta::default()
                    }),
                    spec: None,
                },
                ..DeploymentSpec::default()
            }),
            status: Some(DeploymentStatus {
                observed_generation: Some(3),
                replicas: Some(1),
                updated_replicas: Some(1),
                available_replicas: Some(1),
                ready_replicas: Some(1),
                ..DeploymentStatus::default()
            }),
        }
    }

    fn rolling(max_surge: IntOrString) -> Option<DeploymentStrategy> {
        Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(max_surge),
                max_unavailable: Some(IntOrString::Int(0)),
            }),
        })
    }

    #[test]
    fn only_a_workload_or_pool_that_opted_in_surges_and_a_pod_can_opt_out_of_its_pool() {
        let rs = Some(("ReplicaSet", "web-7d9"));
        assert!(may_surge(&pod(Some("true"), rs), false));
        assert!(
            !may_surge(&pod(None, rs), false),
            "not opted in: evicted as Karpenter does"
        );
        assert!(may_surge(&pod(None, rs), true), "the pool opted in");
        assert!(
            !may_surge(&pod(Some("false"), rs), true),
            "the pod opted out of its pool's"
        );
        assert!(
            !may_surge(&pod(Some("true"), Some(("StatefulSet", "db"))), false),
            "a StatefulSet never surges"
        );
        assert!(!may_surge(&pod(Some("true"), None), false));
    }

    #[test]
    fn a_settled_deployment_is_restarted_with_kubectls_annotation_at_now_in_whole_seconds() {
        // kubectl `defaultObjectRestarter`: restartedAt = time.Now().Format(time.RFC3339).
        let p = pod(Some("true"), Some(("ReplicaSet", "web-7d9")));
        let Ok(Surge::Restart(r)) = surge(&p, &deployment(None), false, now()) else {
            panic!("no restart")
        };
        assert_eq!(r.key(), "shop/web");
        assert_eq!(r.restarted_at, "2026-12-06T00:00:00Z");
        assert_eq!(r.resource_version, "42", "written only if unchanged since read");
        assert_eq!(r.for_pod, "pod-uid");
    }

    #[test]
    fn a_rollout_under_way_is_waited_for_not_restarted_again() {
        // kubectl `DeploymentStatusViewer.Status`: observed generation behind, updated
        // replicas short, old replicas left, updated ones not yet available.
        let p = pod(Some("true"), None);
        let mut d = deployment(None);
        d.metadata.generation = Some(4);
        assert!(matches!(surge(&p, &d, false, now()), Ok(Surge::RollingOut { .. })));
        let mut d = deployment(None);
        d.status.as_mut().unwrap().replicas = Some(2);
        let Ok(Surge::RollingOut {
            deployment: key,
            waiting,
        }) = surge(&p, &d, false, now())
        else {
            panic!("not waiting")
        };
        assert_eq!(
            (key.as_str(), waiting.as_str()),
            ("shop/web", "1 old replicas pending termination")
        );
        let mut d = deployment(None);
        d.status.as_mut().unwrap().available_replicas = Some(0);
        assert!(matches!(surge(&p, &d, false, now()), Ok(Surge::RollingOut { .. })));
    }

    #[test]
    fn max_surge_is_resolved_as_the_deployment_controller_does_rounding_a_percentage_up() {
        // `deploymentutil.ResolveFenceposts`: surge rounded up; 25% of 1 is 1 pod.
        let p = pod(Some("true"), None);
        assert!(matches!(
            surge(
                &p,
                &deployment(rolling(IntOrString::String("25%".into()))),
                false,
                now()
            ),
            Ok(Surge::Restart(_))
        ));
        assert!(matches!(
            surge(&p, &deployment(rolling(IntOrString::Int(1))), false, now()),
            Ok(Surge::Restart(_))
        ));
        assert_eq!(
            surge(&p, &deployment(rolling(IntOrString::Int(0))), false, now()),
            Err(NoSurge::NoSurgeRoom {
                name: "shop/web".into(),
                max_surge: "0".into(),
                replicas: 1
            })
        );
        assert!(matches!(
            surge(&p, &deployment(rolling(IntOrString::String("0%".into()))), false, now()),
            Err(NoSurge::NoSurgeRoom { .. })
        ));
    }

    #[test]
    fn a_paused_or_recreating_deployment_or_a_statefulset_is_not_restarted() {
        let p = pod(Some("true"), None);
        let mut d = deployment(None);
        d.spec.as_mut().unwrap().paused = Some(true);
        assert!(matches!(surge(&p, &d, false, now()), Err(NoSurge::Paused { .. })));
        let recreate = Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        });
        assert!(matches!(
            surge(&p, &deployment(recreate), false, now()),
            Err(NoSurge::Recreate { .. })
        ));
        let sts = pod(Some("true"), Some(("StatefulSet", "db")));
        assert_eq!(replica_set_of(&sts), Err(NoSurge::StatefulSet { name: "db".into() }));
        let job = pod(Some("true"), Some(("Job", "batch")));
        assert!(matches!(replica_set_of(&job), Err(NoSurge::OtherController { .. })));
    }

    #[test]
    fn a_deployment_whose_template_did_not_opt_in_is_not_restarted_for_a_pods_annotation() {
        // A pod's annotation alone (written by whoever created the pod) never restarts a
        // Deployment: its template must say so, or its pool, unless the template opts out.
        let p = pod(Some("true"), None);
        let mut d = deployment(None);
        d.spec.as_mut().unwrap().template.metadata = None;
        assert_eq!(
            surge(&p, &d, false, now()),
            Err(NoSurge::NotOptedIn {
                name: "shop/web".into()
            })
        );
        assert!(
            matches!(surge(&p, &d, true, now()), Ok(Surge::Restart(_))),
            "the pool opted in"
        );
        let mut out = deployment(None);
        out.spec.as_mut().unwrap().template.metadata = Some(ObjectMeta {
            annotations: Some([(SURGE_ANNOTATION.to_string(), "false".to_string())].into()),
            ..ObjectMeta::default()
        });
        assert!(matches!(surge(&p, &out, true, now()), Err(NoSurge::NotOptedIn { .. })));
    }

    #[test]
    fn a_done_rollout_made_for_the_same_pod_is_not_made_again() {
        let p = pod(Some("true"), None);
        let mut d = deployment(None);
        d.metadata.annotations = Some([(SURGED_FOR.to_string(), "pod-uid".to_string())].into());
        assert_eq!(
            surge(&p, &d, false, now()),
            Err(NoSurge::AlreadySurged {
                name: "shop/web".into()
            })
        );
    }

    #[test]
    fn a_replicaset_names_its_deployment() {
        let mut rs = ReplicaSet::default();
        rs.metadata.name = Some("web-7d9".into());
        assert!(matches!(deployment_of(&rs), Err(NoSurge::NoDeployment { .. })));
        rs.metadata.owner_references = owned_by("Deployment", "web");
        assert_eq!(deployment_of(&rs), Ok("web".into()));
    }
}
