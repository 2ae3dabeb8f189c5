//! The Cluster port on the local stack's real apiserver: the contract suite, a PDB's 429
//! through a Deployment, and a stale taint update's 409.
//!
//! Start the stack first (`infra/local/up`). kwok runs the pods of the test's node, and
//! kube-controller-manager's disruption controller computes the PDBs.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use carpool::fakes::{ClusterScene, KEEP_LABEL, cluster_contract, disrupted_taint, keep_taint};
use carpool::model::pod::Pod;
use carpool::ports::{Cluster, ClusterError, Eviction, MetadataPatch, PodRef};
use carpool_adapters::kube_cluster::KubeCluster;
use carpool_tests::{Stack, shared, unique, wait};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::json;

/// The longest any single wait may take.
const WAIT: Duration = Duration::from_secs(90);

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What a test created, deleted again whatever the result.
struct Scene {
    kube: Client,
    cluster: KubeCluster,
    scene: ClusterScene,
    cluster_objects: Vec<(ApiResource, String)>,
}

impl Scene {
    async fn new(prefix: &str) -> Result<Self> {
        let kube = Stack::load()?.kube_client().await?;
        Ok(Scene {
            cluster: KubeCluster::new(kube.clone()),
            kube,
            scene: ClusterScene::new(&unique(prefix)),
            cluster_objects: Vec::new(),
        })
    }

    fn ns(&self) -> &str {
        &self.scene.unique
    }

    async fn namespace(&self) -> Result<()> {
        // The scene's namespace, with its label (the contract reads it back).
        Api::<Namespace>::all(self.kube.clone())
            .create(&PostParams::default(), &self.scene.namespace)
            .await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.kube.clone(), self.ns());
        wait::until("the default ServiceAccount", WAIT, async || {
            accounts.get_opt("default").await?.map(|_| ()).context("not yet")
        })
        .await
    }

    /// Creates the scene's node and waits until kwok has it Ready.
    async fn node(&self) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        nodes.create(&PostParams::default(), &self.scene.node).await?;
        let name = self.scene.node_name();
        wait::until(&format!("node {name} Ready, not-ready taint gone"), WAIT, async || {
            let node = nodes.get(&name).await?;
            let is_ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
            if is_ready && !taints.iter().any(|t| t.key.starts_with("node.kubernetes.io/")) {
                Ok(())
            } else {
                bail!("ready {is_ready}, taints {taints:?}")
            }
        })
        .await
    }

    async fn create_cluster_object(&mut self, resource: ApiResource, object: &serde_json::Value) -> Result<()> {
        let api: Api<DynamicObject> = Api::all_with(self.kube.clone(), &resource);
        let object: DynamicObject = serde_json::from_value(object.clone())?;
        let name = object.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating {} {name}", resource.kind))?;
        self.cluster_objects.push((resource, name));
        Ok(())
    }

    /// Waits until the PDB's status is current and says `healthy` / `allowed`.
    async fn wait_pdb(&self, name: &str, healthy: i32, allowed: i32) -> Result<()> {
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.kube.clone(), self.ns());
        wait::pdb_status(&pdbs, name, healthy, allowed, WAIT).await
    }

    /// Waits until `n` pods of the namespace with `labels` are Running and Ready.
    async fn wait_running(&self, labels: &str, n: usize) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), self.ns());
        wait::until(&format!("{n} pods {labels} Running and Ready"), WAIT, async || {
            let list = pods.list(&ListParams::default().labels(labels)).await?.items;
            let running: Vec<Pod> = list
                .iter()
                .filter(|p| phase(p) == "Running" && ready(p) && p.metadata.deletion_timestamp.is_none())
                .cloned()
                .collect();
            if running.len() == n {
                Ok(running)
            } else {
                let seen: Vec<_> = list
                    .iter()
                    .map(|p| (p.metadata.name.clone(), phase(p).to_string()))
                    .collect();
                bail!("{seen:?}")
            }
        })
        .await
    }

    async fn finish(self, result: Result<()>) -> Result<()> {
        let cleanup = self.cleanup().await;
        result?;
        cleanup.context("cleaning up")
    }

    async fn cleanup(&self) -> Result<()> {
        let dp = DeleteParams::background();
        let gone = |r: Result<_, kube::Error>| match r {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        };
        gone(
            Api::<Namespace>::all(self.kube.clone())
                .delete(self.ns(), &dp)
                .await
                .map(drop),
        )?;
        gone(
            Api::<Node>::all(self.kube.clone())
                .delete(&self.scene.node_name(), &dp)
                .await
                .map(drop),
        )?;
        for (resource, name) in &self.cluster_objects {
            let api: Api<DynamicObject> = Api::all_with(self.kube.clone(), resource);
            gone(api.delete(name, &dp).await.map(drop))?;
        }
        Ok(())
    }
}

// --- the contract ------------------------------------------------------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_kube_cluster_keeps_the_cluster_contract() -> Result<()> {
    let _stack = shared().await;
    let mut scene = Scene::new("cc").await?;
    let result = contract(&mut scene).await;
    scene.finish(result).await
}

async fn contract(s: &mut Scene) -> Result<()> {
    s.namespace().await?;
    s.node().await?;
    let ns = s.ns().to_string();
    let scene = s.scene.clone();
    let pods: Api<Pod> = Api::namespaced(s.kube.clone(), &ns);
    for pod in &scene.pods {
        pods.create(&PostParams::default(), pod).await?;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.kube.clone(), &ns);
    for pdb in &scene.pdbs {
        pdbs.create(&PostParams::default(), pdb).await?;
    }
    let daemonsets: Api<DaemonSet> = Api::namespaced(s.kube.clone(), &ns);
    for ds in &scene.daemonsets {
        daemonsets.create(&PostParams::default(), ds).await?;
    }
    for np in &scene.nodepools {
        s.create_cluster_object(resource("karpenter.sh", "NodePool", "nodepools"), np)
            .await?;
    }
    for class in &scene.ec2nodeclasses {
        s.create_cluster_object(resource("karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses"), class)
            .await?;
    }
    for overlay in &scene.nodeoverlays {
        let alpha = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("karpenter.sh", "v1alpha1", "NodeOverlay"),
            "nodeoverlays",
        );
        s.create_cluster_object(alpha, overlay).await?;
    }
    let templates: Api<k8s_openapi::api::core::v1::PodTemplate> = Api::namespaced(s.kube.clone(), &ns);
    for t in &scene.pod_templates {
        templates.create(&PostParams::default(), t).await?;
    }
    let buffers_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer"),
        "capacitybuffers",
    );
    let buffers: Api<kube::api::DynamicObject> = Api::namespaced_with(s.kube.clone(), &ns, &buffers_resource);
    for b in &scene.capacity_buffers {
        buffers
            .create(&PostParams::default(), &serde_json::from_value(b.clone())?)
            .await?;
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.kube.clone(), &ns);
    claims.create(&PostParams::default(), &scene.pvc).await?;
    s.create_cluster_object(
        ApiResource::erase::<StorageClass>(&()),
        &serde_json::to_value(&scene.storage_class)?,
    )
    .await?;
    s.create_cluster_object(
        ApiResource::erase::<PersistentVolume>(&()),
        &serde_json::to_value(&scene.pv)?,
    )
    .await?;
    s.create_cluster_object(
        ApiResource::erase::<CSINode>(&()),
        &serde_json::to_value(&scene.csinode)?,
    )
    .await?;
    s.create_cluster_object(
        ApiResource::erase::<VolumeAttachment>(&()),
        &serde_json::to_value(&scene.attachment)?,
    )
    .await?;
    s.wait_running("app in (guarded, free)", 4).await?;
    s.wait_pdb("guarded", 2, 0).await?;
    s.wait_pdb("free", 2, 1).await?;
    cluster_contract(&s.cluster, &scene).await;
    Ok(())
}

// --- a PDB over a Deployment: 429 is Blocked, an allowed eviction is Evicted -----------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_pdb_blocks_with_429_as_blocked_and_allows_as_evicted() -> Result<()> {
    let _stack = shared().await;
    let mut scene = Scene::new("cc-pdb").await?;
    let result = pdb_eviction(&mut scene).await;
    scene.finish(result).await
}

async fn pdb_eviction(s: &mut Scene) -> Result<()> {
    s.namespace().await?;
    s.node().await?;
    let ns = s.ns().to_string();
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": s.scene.node_name()},
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    });
    Api::<Deployment>::namespaced(s.kube.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(deployment)?)
        .await?;
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    });
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.kube.clone(), &ns);
    pdbs.create(&PostParams::default(), &serde_json::from_value(pdb)?)
        .await?;
    let running = s.wait_running("app=web", 2).await?;
    s.wait_pdb("web", 2, 0).await?;

    let victim = running[0].metadata.name.clone().context("a pod without a name")?;
    let target = PodRef::of(&running[0]);
    match s.cluster.evict(&target).await {
        Ok(Eviction::Blocked { reason }) => {
            ensure!(
                reason.contains("disruption budget"),
                "blocked for another reason: {reason}"
            )
        }
        other => bail!("an eviction that breaks the PDB answered {other:?}, not Blocked"),
    }

    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
    )
    .await?;
    s.wait_pdb("web", 2, 1).await?;
    let r = s.cluster.evict(&target).await;
    ensure!(matches!(r, Ok(Eviction::Evicted)), "an allowed eviction answered {r:?}");
    let pods: Api<Pod> = Api::namespaced(s.kube.clone(), &ns);
    wait::until(
        &format!("the evicted pod {victim} to be gone"),
        WAIT,
        async || match pods.get_opt(&victim).await? {
            None => Ok(()),
            Some(p) => bail!("still there, phase {}", phase(&p)),
        },
    )
    .await?;
    let r = s.cluster.evict(&target).await;
    ensure!(matches!(r, Ok(Eviction::Gone)), "evicting it again answered {r:?}");
    Ok(())
}

// --- a stale taint update is a 409 Conflict ----------------------------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_stale_taint_update_is_a_conflict() -> Result<()> {
    let _stack = shared().await;
    let mut scene = Scene::new("cc-409").await?;
    let result = stale_taint(&mut scene).await;
    scene.finish(result).await
}

async fn stale_taint(s: &mut Scene) -> Result<()> {
    s.node().await?;
    let name = s.scene.node_name();
    let nodes: Api<Node> = Api::all(s.kube.clone());
    let stale = nodes.get(&name).await?;

    // Someone else changes the node after our read.
    let labels: MetadataPatch = [("example.com/other-writer".to_string(), Some("yes".to_string()))].into();
    s.cluster
        .patch_labels_annotations(&name, &labels, &MetadataPatch::new())
        .await?;

    let r = s
        .cluster
        .set_taints_as_read(&stale, &[keep_taint(), disrupted_taint()])
        .await;
    ensure!(
        matches!(r, Err(ClusterError::Conflict(_))),
        "a taint update from a stale read answered {r:?}, not Conflict"
    );
    let now = nodes.get(&name).await?;
    let taints = now.spec.clone().and_then(|s| s.taints).unwrap_or_default();
    ensure!(
        !taints.iter().any(|t| t.key == disrupted_taint().key),
        "the stale update was applied: {taints:?}"
    );

    // The port's taint reads again, and keeps the other writer's label.
    s.cluster.taint(&name, &disrupted_taint()).await?;
    let now = nodes.get(&name).await?;
    let taints = now.spec.clone().and_then(|s| s.taints).unwrap_or_default();
    let label = |k: &str| now.metadata.labels.as_ref().and_then(|l| l.get(k).cloned());
    ensure!(
        taints.iter().any(|t| t.key == disrupted_taint().key) && taints.iter().any(|t| t.key == keep_taint().key),
        "{taints:?}"
    );
    ensure!(
        label("example.com/other-writer").as_deref() == Some("yes") && label(KEEP_LABEL).as_deref() == Some("yes"),
        "{:?}",
        now.metadata.labels
    );
    Ok(())
}

// --- a pod's Events, read back from the apiserver ------------------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_nominated_pod_has_the_event_on_the_apiserver() -> Result<()> {
    let _stack = shared().await;
    let mut scene = Scene::new("cc-ev").await?;
    let result = pod_events(&mut scene).await;
    scene.finish(result).await
}

async fn pod_events(s: &mut Scene) -> Result<()> {
    use carpool::decide::Unschedulable;
    use carpool::decide::provisioning::pod_events::{BatchOutcome, Nomination, RecentEvents, pod_events};
    use carpool::decide::provisioning::unschedulable::Reason;
    use carpool::model::CapacityType;
    use carpool::ports::{EventReason, MAX_MESSAGE_BYTES};
    use k8s_openapi::api::core::v1::Event;

    s.namespace().await?;
    let ns = s.ns().to_string();
    // A pod no node takes (its node does not exist): it stays Pending, as the ones Carpool
    // launches for do until their node registers.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "labels": {"app": "web"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": format!("{ns}-no-such-node")},
            "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
        },
    });
    let pods: Api<Pod> = Api::namespaced(s.kube.clone(), &ns);
    let created = pods
        .create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    let uid = created.metadata.uid.clone().context("a pod without a uid")?;

    // The pod as the provisioner's snapshot reads it, through the port.
    let pending: Vec<Pod> = s
        .cluster
        .pending_pods()
        .await?
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .collect();
    ensure!(pending.len() == 1, "pending in {ns}: {}", pending.len());
    let key = format!("{ns}/web-0");
    let nominated = [Nomination {
        pod: key.clone(),
        instance_id: "i-0123456789abcdef0".into(),
        nodepool: "general".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
    }];
    // A long reason: the Events API takes at most 1 kB of message.
    let failed = [Unschedulable::new(
        key.clone(),
        Reason::Launch {
            error: "x".repeat(2 * MAX_MESSAGE_BYTES),
        },
    )];
    let outcome = BatchOutcome {
        pods: &pending,
        nominated: &nominated,
        unschedulable: &failed,
    };
    let events = pod_events(&outcome, &RecentEvents::new(), std::time::SystemTime::now());
    ensure!(events.len() == 2, "{events:?}");
    for event in &events {
        s.cluster.publish_event(event).await?;
    }

    // What `kubectl describe pod` lists: core/v1 Events selected by the pod.
    let api: Api<Event> = Api::namespaced(s.kube.clone(), &ns);
    let listed = wait::until("the pod's two Events", WAIT, async || {
        // kube-scheduler writes its own FailedScheduling Event on the pending pod: count
        // Carpool's alone.
        let list: Vec<Event> = api
            .list(&ListParams::default().fields("involvedObject.kind=Pod,involvedObject.name=web-0"))
            .await?
            .items
            .into_iter()
            .filter(|e| e.reporting_component.as_deref() == Some("carpool"))
            .collect();
        if list.len() == 2 {
            Ok(list)
        } else {
            bail!("{} Events", list.len())
        }
    })
    .await?;
    let nomination = listed
        .iter()
        .find(|e| e.reason.as_deref() == Some(EventReason::Nominated.as_str()))
        .context("no Nominated Event")?;
    ensure!(nomination.type_.as_deref() == Some("Normal"), "{nomination:?}");
    ensure!(
        nomination.message.as_deref()
            == Some(
                "Pod should schedule on: instance i-0123456789abcdef0 (m5.large, us-east-1a, spot) of NodePool general"
            ),
        "{:?}",
        nomination.message
    );
    ensure!(
        nomination.involved_object.uid.as_deref() == Some(uid.as_str()),
        "regarding {:?}, the pod's uid is {uid}",
        nomination.involved_object
    );
    ensure!(
        nomination.reporting_component.as_deref() == Some("carpool"),
        "{:?}",
        nomination.reporting_component
    );
    let launch = listed
        .iter()
        .find(|e| e.reason.as_deref() == Some(EventReason::LaunchFailed.as_str()))
        .context("no LaunchFailed Event")?;
    ensure!(launch.type_.as_deref() == Some("Warning"), "{launch:?}");
    let message = launch.message.clone().unwrap_or_default();
    ensure!(
        message.starts_with("Failed to launch a node for the pod, launch: xxx") && message.len() <= MAX_MESSAGE_BYTES,
        "{} bytes: {message:.80}",
        message.len()
    );
    Ok(())
}
