//! Issue 31, warm capacity, end to end on the local stack: the provisioner's run against
//! the real apiserver (with Karpenter's NodePool CRD and SIG Autoscaling's CapacityBuffer
//! CRD), moto's EC2 and DynamoDB.
//!
//! - A static NodePool (`spec.replicas: 3`, Karpenter's alpha static capacity: its
//!   `static.provisioning` controller) gets three nodes with no pods, and a second run,
//!   which counts them in flight, launches none.
//! - A CapacityBuffer of four 2-CPU chunks of a PodTemplate (Karpenter's virtual pods,
//!   `BuildVirtualPods`) gets room for 8 CPUs with no pod pending, and a second run
//!   launches none.
//!
//! Both hold the stack alone: a NodePool and a buffer are seen by every run on it.

use std::time::Duration;

use anyhow::{Result, ensure};
use carpool::catalog::Catalog;
use carpool::run::provision::{Provisioner, RunReport, Settings};
use carpool_adapters::clock::TokioClock;
use carpool_adapters::kube_cluster::KubeCluster;
use carpool_tests::scene::Scene;
use carpool_tests::{exclusive, unique};
use k8s_openapi::api::core::v1::PodTemplate;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

/// One provisioner run of the scene, without waves (no harness brings the nodes up).
async fn provision(scene: &Scene) -> Result<RunReport> {
    let cloud = scene.cloud().await?;
    let cluster = KubeCluster::new(scene.kube.clone());
    let store = scene.store().await?;
    let region = Catalog::embedded()?.region("us-east-1")?;
    let mut settings = Settings::from_config(&scene.config()?, Duration::from_secs(3));
    settings.wave_grace = Duration::ZERO;
    let mut p = Provisioner::new(&cloud, &cluster, &store, &TokioClock, settings, &unique("prov"));
    Ok(p.run(&region).await?)
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_static_nodepool_of_three_gets_three_nodes_with_no_pods_once() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::with_pool("e2e-static", |pool| {
        let mut p = pool
            .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
            .requirement("node.kubernetes.io/instance-type", "In", &["m5.large"])
            .build();
        p["spec"]["replicas"] = json!(3);
        p
    })
    .await?;
    let result = async {
        let first = provision(&scene).await?;
        let launched = &first.static_capacity.launched;
        ensure!(launched.len() == 3, "{:?}", first.static_capacity);
        ensure!(
            launched
                .iter()
                .all(|l| l.pods == 0 && l.instance_type == "m5.large" && l.nodepool == scene.name)
        );
        let zones: std::collections::BTreeSet<&str> = launched.iter().map(|l| l.zone.as_str()).collect();
        ensure!(zones.len() == 3, "spread across zones: {zones:?}");
        let second = provision(&scene).await?;
        ensure!(
            second.static_capacity.launched.is_empty(),
            "{:?}",
            second.static_capacity
        );
        ensure!(second.launched().next().is_none());
        Ok(())
    }
    .await;
    scene.finish(None, result).await
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_capacity_buffer_of_four_two_cpu_chunks_gets_room_with_no_pod_pending_once() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::with_pool("e2e-buffer", |pool| {
        pool.requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
            .requirement("karpenter.k8s.aws/instance-family", "In", &["m5"])
            .build()
    })
    .await?;
    let result = async {
        let template: PodTemplate = serde_json::from_value(json!({
            "metadata": {"name": "chunk", "namespace": scene.name},
            "template": {
                "metadata": {"labels": {"app": "chunk"}},
                "spec": {
                    "nodeSelector": {"e2e": scene.name},
                    "containers": [{"name": "c", "image": "nginx",
                        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}],
                },
            },
        }))?;
        Api::<PodTemplate>::namespaced(scene.kube.clone(), &scene.name)
            .create(&PostParams::default(), &template)
            .await?;
        let buffers = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer"),
            "capacitybuffers",
        );
        let buffer = json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "burst", "namespace": scene.name},
            "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 4},
        });
        Api::<DynamicObject>::namespaced_with(scene.kube.clone(), &scene.name, &buffers)
            .create(&PostParams::default(), &serde_json::from_value(buffer)?)
            .await?;

        let first = provision(&scene).await?;
        let key = format!("{}/burst", scene.name);
        ensure!(first.buffers.sizes.contains(&(key, 4)), "{:?}", first.buffers);
        ensure!(!first.buffers.launched.is_empty(), "{:?}", first.buffers);
        let catalog = Catalog::embedded()?;
        let cpu: i64 = first
            .buffers
            .launched
            .iter()
            .filter_map(|l| catalog.get(&l.instance_type))
            .map(|t| t.allocatable.cpu_millis)
            .sum();
        ensure!(
            cpu >= 8_000,
            "room for 4 × 2 CPUs: {cpu} m in {:?}",
            first.buffers.launched
        );
        ensure!(
            first.batches.iter().all(|b| b.launched.is_empty()),
            "no pod was pending"
        );
        let second = provision(&scene).await?;
        ensure!(second.buffers.launched.is_empty(), "{:?}", second.buffers);
        Ok(())
    }
    .await;
    scene.finish(None, result).await
}
