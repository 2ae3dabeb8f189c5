//! Surge before eviction over the in-memory cluster: a PDB of `minAvailable: 1` on a
//! single-replica Deployment refuses its eviction; a workload that opted in is restarted
//! once (kubectl's `rollout restart` patch, k8s.io/kubectl
//! `pkg/polymorphichelpers/objectrestarter.go` `defaultObjectRestarter`), the drain waits
//! for the rollout and evicts the pod once the PDB allows it (the Eviction API's
//! `checkAndDecrement`, kubernetes `pkg/registry/core/pod/storage/eviction.go`); one that
//! did not is never touched, as Karpenter's drain only evicts
//! (`terminator.Queue.Evict`, kubernetes-sigs/karpenter
//! `pkg/controllers/node/termination/terminator/eviction.go`).

use std::time::{Duration, SystemTime};

use carpool::decide::disruption::drain::DrainRules;
use carpool::decide::disruption::surge::SURGE_ANNOTATION;
use carpool::fakes::{ClusterErrorKind, FakeCluster};
use carpool::fixtures::{PodBuilder, pdb};
use carpool::model::rollout_restart::{RESTARTED_AT, SURGED_FOR};
use carpool::ports::EventReason;
use carpool::run::drain::{DrainPass, drain_pass};
use carpool::run::surge::SurgeOutcome;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use serde_json::json;

const NODE: &str = "old-1";

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// The pod `shop/<name>` (label `app=web`) of the controller `kind/owner` on `node`, with
/// `annotation` of [`SURGE_ANNOTATION`] when given.
fn pod_of(name: &str, kind: &str, owner: &str, node: &str, annotation: Option<&str>) -> PodBuilder {
    let p = PodBuilder::new(name)
        .namespace("shop")
        .uid(name)
        .label("app", "web")
        .owner("apps/v1", kind, owner)
        .spec("nodeName", json!(node))
        .running();
    match annotation {
        Some(v) => p.annotation(SURGE_ANNOTATION, v),
        None => p,
    }
}

/// The pod `shop/<name>` of ReplicaSet `web-rs` on `node`.
fn web_pod(name: &str, node: &str, annotation: Option<&str>) -> PodBuilder {
    pod_of(name, "ReplicaSet", "web-rs", node, annotation)
}

/// The PDB `shop/web`: `minAvailable: 1` of the pods labelled `app=web`.
fn web_pdb() -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
    pdb(
        "shop",
        "web",
        json!({"matchLabels": {"app": "web"}}),
        json!({"minAvailable": 1}),
    )
    .unwrap()
}

fn replica_set() -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": "web-rs", "namespace": "shop",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d", "controller": true}]},
    }))
    .unwrap()
}

/// A settled 1-replica Deployment `shop/web`, as the apiserver defaults it, its pod
/// template annotated [`SURGE_ANNOTATION`] with `annotation` when given (its pods carry it).
fn deployment(annotation: Option<&str>) -> Deployment {
    let template_annotations = match annotation {
        Some(v) => json!({SURGE_ANNOTATION: v}),
        None => json!({}),
    };
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "generation": 1, "resourceVersion": "10"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": "web"}, "annotations": template_annotations}, "spec": {"containers": [{"name": "app", "image": "app"}]}}},
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1},
    }))
    .unwrap()
}

/// A cluster with `shop/web-0` on [`NODE`], its ReplicaSet and Deployment, and a PDB of
/// `minAvailable: 1`.
fn cluster(annotation: Option<&str>) -> FakeCluster {
    let cluster = FakeCluster::new();
    cluster.add_pod(web_pod("web-0", NODE, annotation).pod().unwrap());
    cluster.add_replica_set(replica_set());
    cluster.add_deployment(deployment(annotation));
    cluster.add_pdb(web_pdb());
    cluster
}

fn pass(cluster: &FakeCluster, rules: DrainRules) -> DrainPass {
    pollster::block_on(drain_pass(
        cluster,
        NODE,
        now(),
        now() + Duration::from_secs(600),
        &[],
        rules,
    ))
    .unwrap()
}

fn voluntary() -> DrainRules {
    DrainRules {
        voluntary: true,
        ..DrainRules::default()
    }
}

fn restarts(cluster: &FakeCluster) -> usize {
    cluster
        .calls()
        .iter()
        .filter(|c| c.starts_with("restart_deployment"))
        .count()
}

fn surge_of(pass: &DrainPass) -> Option<SurgeOutcome> {
    pass.blocked.first().and_then(|b| b.surge.clone())
}

#[test]
fn an_opted_in_single_replica_is_restarted_once_then_evicted_when_its_replacement_is_ready() {
    let cluster = cluster(Some("true"));
    let first = pass(&cluster, voluntary());
    assert!(!first.drained);
    assert_eq!(
        surge_of(&first),
        Some(SurgeOutcome::Restarted {
            deployment: "shop/web".into(),
            restarted_at: "2027-01-15T08:00:00Z".into()
        })
    );
    assert!(
        first.blocked[0]
            .to_string()
            .contains("surge: restarted deployment shop/web"),
        "{}",
        first.blocked[0]
    );
    let d = cluster.deployment_now("shop", "web").unwrap();
    let template = d.spec.unwrap().template.metadata.unwrap().annotations.unwrap();
    assert_eq!(
        template[RESTARTED_AT], "2027-01-15T08:00:00Z",
        "kubectl's rollout restart annotation"
    );
    assert_eq!(
        d.metadata.annotations.unwrap()[SURGED_FOR],
        "web-0",
        "the pod it was for"
    );
    let events = cluster.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, EventReason::SurgeBeforeEviction);
    assert_eq!(events[0].pod.key(), "shop/web-0");
    assert!(
        events[0].message.contains("Deployment shop/web"),
        "{}",
        events[0].message
    );

    // The Deployment controller has not caught up: the drain waits, no second restart.
    let second = pass(&cluster, voluntary());
    assert!(
        matches!(surge_of(&second), Some(SurgeOutcome::RollingOut { .. })),
        "{:?}",
        surge_of(&second)
    );
    assert_eq!(restarts(&cluster), 1);

    // The replacement is up elsewhere: the PDB allows one disruption, the pod goes.
    cluster.add_pod(web_pod("web-1", "new-1", Some("true")).pod().unwrap());
    let third = pass(&cluster, voluntary());
    assert!(third.drained, "{third:?}");
    assert_eq!(third.evicted.len(), 1);
    assert_eq!(restarts(&cluster), 1);
}

#[test]
fn a_workload_that_did_not_opt_in_is_never_restarted_and_waits_for_its_pdb() {
    let cluster = cluster(None);
    for _ in 0..3 {
        let p = pass(&cluster, voluntary());
        assert!(!p.drained);
        assert_eq!(surge_of(&p), None);
    }
    assert_eq!(restarts(&cluster), 0);
    assert!(!cluster.calls().iter().any(|c| c.starts_with("deployment ")));
    assert!(cluster.events().is_empty());
}

#[test]
fn a_pool_that_opted_in_surges_its_workloads_but_not_a_pod_that_opted_out() {
    let pool = DrainRules {
        voluntary: true,
        surge_pool: true,
    };
    let cluster = self::cluster(None);
    assert!(matches!(
        surge_of(&pass(&cluster, pool)),
        Some(SurgeOutcome::Restarted { .. })
    ));
    let opted_out = self::cluster(Some("false"));
    assert_eq!(surge_of(&pass(&opted_out, pool)), None);
    assert_eq!(restarts(&opted_out), 0);
}

#[test]
fn a_pod_annotated_by_itself_does_not_restart_a_deployment_that_did_not_opt_in() {
    // Whoever can create a pod under a ReplicaSet cannot make Carpool restart its
    // Deployment: the Deployment's own template must opt in (or its NodePool).
    let cluster = cluster(None);
    cluster.add_pod(web_pod("web-0", NODE, Some("true")).pod().unwrap());
    let p = pass(&cluster, voluntary());
    assert!(
        matches!(surge_of(&p), Some(SurgeOutcome::Refused { reason }) if reason.contains("did not opt in")),
        "{:?}",
        surge_of(&p)
    );
    assert_eq!(restarts(&cluster), 0);
}

#[test]
fn a_statefulset_pod_is_not_restarted_and_the_drain_says_why() {
    let cluster = FakeCluster::new();
    cluster.add_pod(pod_of("db-0", "StatefulSet", "db", NODE, Some("true")).pod().unwrap());
    cluster.add_pdb(web_pdb());
    let p = pass(&cluster, voluntary());
    let Some(SurgeOutcome::Refused { reason }) = surge_of(&p) else {
        panic!("{:?}", surge_of(&p))
    };
    assert!(reason.contains("StatefulSet db"), "{reason}");
    assert_eq!(restarts(&cluster), 0);
    assert!(cluster.events().is_empty());
}

#[test]
fn a_deployment_that_cannot_surge_is_not_restarted() {
    let cluster = cluster(Some("true"));
    let mut d = deployment(Some("true"));
    d.spec.as_mut().unwrap().strategy =
        serde_json::from_value(json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}))
            .unwrap();
    cluster.add_deployment(d);
    let p = pass(&cluster, voluntary());
    assert!(matches!(surge_of(&p), Some(SurgeOutcome::Refused { reason }) if reason.contains("maxSurge 0")));
    assert_eq!(restarts(&cluster), 0);
}

#[test]
fn a_failed_restart_is_reported_and_tried_again_by_the_next_pass() {
    let cluster = cluster(Some("true"));
    cluster.fail_on("restart_deployment shop/web", ClusterErrorKind::Conflict);
    let first = pass(&cluster, voluntary());
    assert!(
        matches!(surge_of(&first), Some(SurgeOutcome::Failed { .. })),
        "{:?}",
        surge_of(&first)
    );
    assert!(
        cluster.events().is_empty(),
        "no Event for a restart that did not happen"
    );
    let second = pass(&cluster, voluntary());
    assert!(matches!(surge_of(&second), Some(SurgeOutcome::Restarted { .. })));
}

#[test]
fn a_replicaset_whose_deployment_is_gone_is_refused_with_the_reason() {
    let cluster = FakeCluster::new();
    cluster.add_pod(web_pod("web-0", NODE, Some("true")).pod().unwrap());
    cluster.add_replica_set(replica_set());
    cluster.add_pdb(web_pdb());
    let p = pass(&cluster, voluntary());
    assert!(
        matches!(surge_of(&p), Some(SurgeOutcome::Refused { reason }) if reason.contains("ReplicaSet web-rs")),
        "{:?}",
        surge_of(&p)
    );
    assert_eq!(restarts(&cluster), 0);
}

#[test]
fn a_deployment_that_cannot_be_read_is_a_failure_tried_again_by_the_next_pass() {
    let cluster = cluster(Some("true"));
    cluster.fail_on("deployment shop/web", ClusterErrorKind::Throttled);
    assert!(matches!(
        surge_of(&pass(&cluster, voluntary())),
        Some(SurgeOutcome::Failed { .. })
    ));
    assert_eq!(restarts(&cluster), 0);
    assert!(matches!(
        surge_of(&pass(&cluster, voluntary())),
        Some(SurgeOutcome::Restarted { .. })
    ));
}

#[test]
fn an_event_that_cannot_be_published_does_not_undo_the_restart() {
    // Events are best effort (the Cluster contract): the restart stands, and the next
    // pass waits for its rollout instead of restarting again.
    let cluster = cluster(Some("true"));
    cluster.fail_events(Some(ClusterErrorKind::Api));
    assert!(matches!(
        surge_of(&pass(&cluster, voluntary())),
        Some(SurgeOutcome::Restarted { .. })
    ));
    assert!(cluster.events().is_empty());
    assert!(matches!(
        surge_of(&pass(&cluster, voluntary())),
        Some(SurgeOutcome::RollingOut { .. })
    ));
    assert_eq!(restarts(&cluster), 1);
}

#[test]
fn a_restart_read_stale_is_refused_as_a_conflict() {
    // The Deployment changed between the drain's read and its write: the patch carries
    // the version read, so someone else's change is never overwritten.
    let cluster = cluster(Some("true"));
    let stale = carpool::model::rollout_restart::RolloutRestart {
        namespace: "shop".into(),
        name: "web".into(),
        resource_version: "9".into(),
        restarted_at: "2027-01-15T08:00:00Z".into(),
        for_pod: "web-0".into(),
    };
    let result = pollster::block_on(carpool::ports::Cluster::restart_deployment(&cluster, &stale));
    assert!(
        matches!(result, Err(carpool::ports::ClusterError::Conflict(_))),
        "{result:?}"
    );
}
