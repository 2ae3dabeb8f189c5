//! Issue 31, surge before eviction, end to end on the local stack: a single-replica
//! Deployment with a PDB of `minAvailable: 1`, opted in, on a node being consolidated. The
//! eviction alone would take it down, and the PDB would hold the node forever (Karpenter's
//! `pdb.Limits.CanEvictPods` keeps such a node out of consolidation, kubernetes-sigs/karpenter
//! `pkg/utils/pdb/pdb.go`). The consolidator's drain restarts the Deployment instead
//! (kubectl's `rollout restart` patch, k8s.io/kubectl
//! `pkg/polymorphichelpers/objectrestarter.go`); the real Deployment controller starts the
//! new pod on the replacement, kwok makes it Ready, and only then the old pod goes. A
//! watcher polls the Deployment's pods every 200 ms throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Result, ensure};
use carpool::decide::disruption::surge::SURGE_ANNOTATION;
use carpool::model::rollout_restart::RESTARTED_AT;
use carpool_tests::{exclusive, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::e2e::{Scene, WAIT};

/// Whether the pod serves: Ready, and not terminating.
fn serving(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What the watcher saw: the fewest and most serving replicas, and the polls made.
struct Watch {
    stop: Arc<AtomicBool>,
    fewest: Arc<AtomicI32>,
    most: Arc<AtomicI32>,
    polls: Arc<AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

/// Polls the pods labelled `app=web` every 200 ms until stopped.
fn watch_web(scene: &Scene) -> Watch {
    let stop = Arc::new(AtomicBool::new(false));
    let fewest = Arc::new(AtomicI32::new(i32::MAX));
    let most = Arc::new(AtomicI32::new(0));
    let polls = Arc::new(AtomicU32::new(0));
    let pods: Api<Pod> = Api::namespaced(scene.kube.clone(), &scene.name);
    let (s, f, m, n) = (stop.clone(), fewest.clone(), most.clone(), polls.clone());
    let task = tokio::spawn(async move {
        while !s.load(Ordering::SeqCst) {
            if let Ok(list) = pods.list(&ListParams::default().labels("app=web")).await {
                let up = i32::try_from(list.items.iter().filter(|p| serving(p)).count()).unwrap_or(i32::MAX);
                f.fetch_min(up, Ordering::SeqCst);
                m.fetch_max(up, Ordering::SeqCst);
                n.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    Watch {
        stop,
        fewest,
        most,
        polls,
        task,
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_single_replica_that_opted_in_to_a_surge_keeps_a_ready_replica_while_its_node_is_consolidated() -> Result<()>
{
    let _stack = exclusive().await;
    let scene = Scene::build("e2e-surge", "100%", &["on-demand"], Some(&["c6a"])).await?;
    let harness = scene.harness().await?;
    let result = surged(&scene).await;
    scene.finish(harness, result).await
}

async fn web_pods(scene: &Scene) -> Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(scene.kube.clone(), &scene.name)
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items)
}

async fn surged(scene: &Scene) -> Result<()> {
    // `web`: one replica, opted in, guarded by a PDB of minAvailable 1. `filler`: three
    // 1-CPU pods, so that web's first node is larger than web alone needs.
    scene
        .deployment("web", 1, "500m", json!({SURGE_ANNOTATION: "true"}))
        .await?;
    scene.deployment("filler", 3, "1", json!({})).await?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": scene.name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))?;
    Api::<PodDisruptionBudget>::namespaced(scene.kube.clone(), &scene.name)
        .create(&PostParams::default(), &pdb)
        .await?;
    wait::unschedulable(&scene.kube, &scene.name, 4, WAIT).await?;
    scene.base.provision(Duration::from_secs(20)).await?;
    scene.wait_running(4).await?;
    let web = web_pods(scene).await?;
    ensure!(web.len() == 1, "{} web pods", web.len());
    let first_node = web[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let first_pod = web[0].metadata.name.clone().unwrap_or_default();
    scene.scale("filler", 0).await?;
    scene.wait_running(1).await?;

    let watch = watch_web(scene);
    let settled = scene.settle("surge", 30, Duration::from_secs(2)).await;
    watch.stop.store(true, Ordering::SeqCst);
    watch.task.await?;
    let (fewest, most, polls) = (
        watch.fewest.load(Ordering::SeqCst),
        watch.most.load(Ordering::SeqCst),
        watch.polls.load(Ordering::SeqCst),
    );
    eprintln!("watcher: {polls} polls, fewest serving replicas {fewest}, most {most}");

    let methods = settled?;
    ensure!(!methods.is_empty(), "nothing was consolidated");
    eprintln!("consolidation methods: {methods:?}");
    ensure!(
        Api::<Node>::all(scene.kube.clone())
            .get_opt(&first_node)
            .await?
            .is_none(),
        "web's first node {first_node} is still there"
    );
    ensure!(polls >= 10, "the watcher polled {polls} times");
    ensure!(fewest >= 1, "a poll saw {fewest} serving replicas of web");
    let now = web_pods(scene).await?;
    ensure!(
        now.len() == 1 && serving(&now[0]) && now[0].metadata.name.as_deref() != Some(first_pod.as_str()),
        "web is not one new serving replica: {:?}",
        now.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
    let d = Api::<Deployment>::namespaced(scene.kube.clone(), &scene.name)
        .get("web")
        .await?;
    let restarted = d
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .and_then(|a| a.get(RESTARTED_AT).cloned());
    ensure!(restarted.is_some(), "the Deployment was not restarted");
    let events = Api::<Event>::namespaced(scene.kube.clone(), &scene.name)
        .list(&ListParams::default())
        .await?;
    let surge_events: Vec<&Event> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("SurgeBeforeEviction"))
        .collect();
    ensure!(
        surge_events
            .iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(first_pod.as_str())),
        "no SurgeBeforeEviction Event on {first_pod}"
    );
    Ok(())
}
