//! The Cluster contract against the in-memory fake, and the fake's eviction rule.

use carpool::fakes::{ClusterErrorKind, ClusterScene, FakeCluster, SEVERAL_PDBS, cluster_contract};
use carpool::model::pod::Pod;
use carpool::ports::{Cluster, ClusterError, Eviction, PodRef};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

#[test]
fn the_fake_cluster_keeps_the_cluster_contract() {
    let scene = ClusterScene::new("fake");
    let cluster = FakeCluster::new();
    scene.load_into(&cluster);
    pollster::block_on(cluster_contract(&cluster, &scene));
    let calls = cluster.calls();
    assert!(calls.contains(&"evict fake/free-0".to_string()), "{calls:?}");
    assert!(calls.contains(&"delete_node fake-node".to_string()), "{calls:?}");
}

fn pod(name: &str, app: &str, phase: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": app}},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
    }))
    .unwrap()
}

fn pdb(name: &str, app: &str, budget: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
    spec.as_object_mut()
        .unwrap()
        .extend(budget.as_object().unwrap().clone());
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec})).unwrap()
}

/// A cluster with `n` healthy `app=web` pods and one PDB over them.
fn web(n: usize, budget: serde_json::Value) -> FakeCluster {
    let cluster = FakeCluster::new();
    for i in 0..n {
        cluster.add_pod(pod(&format!("web-{i}"), "web", "Running", true));
    }
    cluster.add_pdb(pdb("web", "web", budget));
    cluster
}

fn by_name(namespace: &str, name: &str) -> PodRef {
    PodRef {
        namespace: namespace.into(),
        name: name.into(),
        uid: None,
    }
}

fn evict(cluster: &FakeCluster, name: &str) -> Eviction {
    pollster::block_on(cluster.evict(&by_name("ns", name))).unwrap()
}

fn evicted_until_blocked(cluster: &FakeCluster, n: usize) -> usize {
    (0..n)
        .take_while(|i| evict(cluster, &format!("web-{i}")) == Eviction::Evicted)
        .count()
}

#[test]
fn disruptions_allowed_follow_min_available_and_max_unavailable() {
    for (budget, allowed) in [
        (json!({"minAvailable": 3}), 1),
        (json!({"minAvailable": "50%"}), 2),
        (json!({"minAvailable": "30%"}), 2), // 1.2 rounds up to 2 desired
        (json!({"maxUnavailable": 1}), 1),
        (json!({"maxUnavailable": "30%"}), 2), // 1.2 rounds up to 2 unavailable
        (json!({"maxUnavailable": 0}), 0),
        (json!({"minAvailable": "100%"}), 0),
    ] {
        let cluster = web(4, budget.clone());
        assert_eq!(cluster.disruptions_allowed("ns", "web"), Some(allowed), "{budget}");
        assert_eq!(
            evicted_until_blocked(&cluster, 4),
            allowed as usize,
            "evictions decrement: {budget}"
        );
        assert_eq!(cluster.disruptions_allowed("ns", "web"), Some(0), "{budget}");
    }
}

#[test]
fn the_status_of_listed_pdbs_is_computed() {
    let cluster = web(3, json!({"maxUnavailable": 1}));
    cluster.add_pod(pod("web-3", "web", "Running", false));
    let pdbs = pollster::block_on(cluster.pdbs()).unwrap();
    let status = pdbs[0].status.clone().unwrap();
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (4, 3, 3, 0)
    );
}

#[test]
fn a_pdb_covers_only_its_namespace_and_selector() {
    let cluster = web(1, json!({"minAvailable": 1}));
    cluster.add_pod(pod("api-0", "api", "Running", true));
    let mut other_ns = pod("web-0", "web", "Running", true);
    other_ns.metadata.namespace = Some("other".into());
    cluster.add_pod(other_ns);
    assert!(matches!(evict(&cluster, "web-0"), Eviction::Blocked { .. }));
    assert_eq!(evict(&cluster, "api-0"), Eviction::Evicted);
    assert_eq!(
        pollster::block_on(cluster.evict(&by_name("other", "web-0"))).unwrap(),
        Eviction::Evicted
    );
    assert!(cluster.pod("ns", "web-0").is_some() && cluster.pod("ns", "api-0").is_none());
}

#[test]
fn unhealthy_and_finished_pods_follow_the_apiserver() {
    let cluster = web(2, json!({"minAvailable": 2}));
    cluster.add_pod(pod("done", "web", "Succeeded", false));
    assert_eq!(
        evict(&cluster, "done"),
        Eviction::Evicted,
        "a finished pod ignores PDBs"
    );
    // Not ready, and the healthy ones meet the budget: IfHealthyBudget lets it go.
    cluster.add_pod(pod("sick", "web", "Running", false));
    assert_eq!(evict(&cluster, "sick"), Eviction::Evicted);
    // Budget not met (minAvailable 3 of 2 healthy): an unready pod is blocked...
    let cluster = web(2, json!({"minAvailable": 3}));
    cluster.add_pod(pod("sick", "web", "Running", false));
    assert!(matches!(evict(&cluster, "sick"), Eviction::Blocked { .. }));
    // ...unless the policy is AlwaysAllow.
    let cluster = web(
        2,
        json!({"minAvailable": 3, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
    );
    cluster.add_pod(pod("sick", "web", "Running", false));
    assert_eq!(evict(&cluster, "sick"), Eviction::Evicted);
}

#[test]
fn a_pod_under_two_pdbs_is_blocked_as_the_apiserver_does() {
    let cluster = web(3, json!({"minAvailable": 0}));
    cluster.add_pdb(pdb("web-too", "web", json!({"minAvailable": 0})));
    assert_eq!(
        evict(&cluster, "web-0"),
        Eviction::Blocked {
            reason: SEVERAL_PDBS.to_string()
        }
    );
}

#[test]
fn injected_errors_are_one_shot() {
    let cluster = FakeCluster::new();
    cluster.fail_next(ClusterErrorKind::Throttled);
    cluster.fail_next(ClusterErrorKind::Conflict);
    let r = pollster::block_on(cluster.nodes());
    assert!(matches!(r, Err(ClusterError::Throttled { .. })), "{r:?}");
    let r = pollster::block_on(cluster.cordon("n"));
    assert!(matches!(r, Err(ClusterError::Conflict(_))), "{r:?}");
    let r = pollster::block_on(cluster.cordon("n"));
    assert!(
        matches!(r, Err(ClusterError::NotFound { .. })),
        "then the real answer: {r:?}"
    );
    assert_eq!(cluster.calls(), ["nodes", "cordon n", "cordon n"]);
}
