//! The Cluster port on the Kubernetes API, with `kube`.
//!
//! Build the client with `kube::Config::default_retry = false`: kube 5 otherwise retries
//! every 429 (up to 15 times, backing off towards 1000 s), and a 429 is how the Eviction
//! API says a PDB blocks, which the caller must see at once. Reads are retried here
//! instead ([`crate::kube_retry`]): a 429, a 5xx or a lost connection, a few times within
//! a second.
//!
//! Events are created with the `events.k8s.io/v1` API (reporting controller `carpool`),
//! which `kubectl describe pod` shows as it shows core/v1 Events. Not through
//! `kube::runtime::events::Recorder`: its dedupe key leaves the message out, so a pod whose
//! reason changes within its 6-minute cache would get the old Event's count bumped, with
//! the old message. The core rate-limits instead ([`carpool::decide::provisioning::pod_events`]).

use carpool::model::manifest::{Validate, from_value};
use carpool::model::pod::Pod;
use carpool::model::rollout_restart::{RESTARTED_AT, RolloutRestart, SURGED_FOR};
use carpool::model::well_known::TERMINATION_FINALIZER;
use carpool::model::{EC2NodeClass, NodeOverlay, NodePool};
use carpool::ports::{
    Cluster, ClusterError, Eviction, InvalidObject, MetadataPatch, PodEvent, PodRef, StatusOf, Validated,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Taint, Toleration,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::kube_retry::ReadRetry;
use serde::de::DeserializeOwned;
use serde_json::json;

/// The Events' reporting controller and instance.
pub const REPORTING_CONTROLLER: &str = "carpool";

/// What the adapter drops from a listed object ([`crate::slim`]).
trait Slim {
    fn slim(&mut self);
}

impl Slim for Pod {
    fn slim(&mut self) {
        crate::slim::pod(self);
    }
}

/// Objects whose metadata alone is slimmed.
macro_rules! slim_metadata {
    ($($t:ty),*) => {$(
        impl Slim for $t {
            fn slim(&mut self) {
                crate::slim::metadata(&mut self.metadata);
            }
        }
    )*};
}

slim_metadata!(
    Node,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    CSINode,
    Namespace,
    DynamicObject,
    VolumeAttachment,
    k8s_openapi::api::core::v1::PodTemplate
);

/// Objects per list page.
const PAGE: u32 = 500;
/// How often `taint` and `untaint` read again after a concurrent change of the node.
const CONFLICT_ATTEMPTS: usize = 3;

/// The Cluster port on a Kubernetes apiserver.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    retry: ReadRetry,
    /// Requests sent to the apiserver, each page of a list and each retry counted.
    requests: Arc<AtomicU64>,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster").finish_non_exhaustive()
    }
}

/// `karpenter.sh/v1` NodePools (cluster-scoped).
fn nodepools_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"), "nodepools")
}

/// `karpenter.k8s.aws/v1` EC2NodeClasses (cluster-scoped).
fn ec2nodeclasses_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.k8s.aws", "v1", "EC2NodeClass"),
        "ec2nodeclasses",
    )
}

/// `karpenter.sh/v1alpha1` NodeOverlays (cluster-scoped; alpha, so often not installed).
fn nodeoverlays_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1alpha1", "NodeOverlay"),
        "nodeoverlays",
    )
}

/// `autoscaling.x-k8s.io/v1beta1` CapacityBuffers (namespaced; their CRD ships with
/// Karpenter, so often not installed).
fn capacitybuffers_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer"),
        "capacitybuffers",
    )
}

/// Maps a kube error to the port's, `what` naming the object. The apiserver's `Status`
/// (or kube's error) is the source.
fn map_err(what: &str, e: kube::Error) -> ClusterError {
    let what = what.to_string();
    match e {
        kube::Error::Api(s) => match s.code {
            404 => ClusterError::NotFound { what, source: Some(s) },
            409 => ClusterError::Conflict(format!("{what}: {}", s.message)),
            429 => ClusterError::Throttled { what, source: s },
            401 | 403 => ClusterError::Unauthorized { what, source: s },
            _ => ClusterError::Api(Box::new(kube::Error::Api(s))),
        },
        kube::Error::Auth(e) => ClusterError::Unauthorized {
            what,
            source: Box::new(kube::Error::Auth(e)),
        },
        other => ClusterError::Api(Box::new(other)),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether an eviction error is a PDB saying no: a 429 with the `DisruptionBudget` cause
/// (or, from older servers, its message), or the 500 for a pod under several PDBs.
fn pdb_refusal(s: &kube::core::Status) -> bool {
    let by_cause = s
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "DisruptionBudget"));
    (s.code == 429 && (by_cause || s.message.contains("disruption budget")))
        || (s.code == 500 && s.message.contains("more than one PodDisruptionBudget"))
}

/// Lists every object, a page at a time, each page retried by `retry`, and slimmed
/// ([`Slim`]) as it arrives.
async fn list_all<K>(
    retry: &ReadRetry,
    requests: &AtomicU64,
    api: &Api<K>,
    params: ListParams,
) -> Result<Vec<K>, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug + Slim,
{
    let mut params = params.limit(PAGE);
    let mut items = Vec::new();
    loop {
        let page = retry
            .run("list", || {
                requests.fetch_add(1, Ordering::Relaxed);
                api.list(&params)
            })
            .await?;
        items.extend(page.items.into_iter().map(|mut o| {
            o.slim();
            o
        }));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

fn current_taints(node: &Node) -> Vec<Taint> {
    node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default()
}

/// The taints with `taint` added, or `None` when the node has it already.
fn with_taint(node: &Node, taint: &Taint) -> Option<Vec<Taint>> {
    let mut taints = current_taints(node);
    match taints.iter_mut().find(|t| same_taint(t, taint)) {
        Some(t) if t.value == taint.value => None,
        Some(t) => {
            *t = taint.clone();
            Some(taints)
        }
        None => {
            taints.push(taint.clone());
            Some(taints)
        }
    }
}

/// The taints with `taint`'s key and effect removed, or `None` when there are none.
fn without_taint(node: &Node, taint: &Taint) -> Option<Vec<Taint>> {
    let taints = current_taints(node);
    let kept: Vec<Taint> = taints.iter().filter(|t| !same_taint(t, taint)).cloned().collect();
    (kept.len() != taints.len()).then_some(kept)
}

/// The `events.k8s.io/v1` Event for `event`, observed at `now`. Its name is the pod's and
/// the time in hex nanoseconds, as client-go names Events.
fn k8s_event(event: &PodEvent, now: Timestamp) -> Event {
    let pod = &event.pod;
    // Room for `.` and 16 hex digits within a name's 253 characters.
    let prefix: String = pod.name.chars().take(236).collect();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}.{:x}", now.as_nanosecond())),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(event.event_type().as_str().to_string()),
        reason: Some(event.reason.as_str().to_string()),
        action: Some(event.reason.action().to_string()),
        note: Some(event.message.clone()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: pod.uid.clone(),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(REPORTING_CONTROLLER.into()),
        ..Event::default()
    }
}

impl KubeCluster {
    /// The port on `client` (built with `default_retry = false`, see the module docs).
    /// Its reads are retried with [`ReadRetry::default`].
    pub fn new(client: Client) -> Self {
        KubeCluster {
            client,
            retry: ReadRetry::default(),
            requests: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The port, its reads retried by `retry` instead.
    #[must_use]
    pub fn with_read_retry(mut self, retry: ReadRetry) -> Self {
        self.retry = retry;
        self
    }

    /// Lists every object of `api` that `params` selects ([`list_all`]), its requests
    /// counted.
    async fn list<K>(&self, api: &Api<K>, params: ListParams) -> Result<Vec<K>, kube::Error>
    where
        K: Clone + DeserializeOwned + std::fmt::Debug + Slim,
    {
        list_all(&self.retry, &self.requests, api, params).await
    }

    /// Sends a strategic merge patch of a node's finalizers; a missing node is success
    /// when `gone_ok`.
    async fn patch_finalizers(&self, node: &str, patch: serde_json::Value, gone_ok: bool) -> Result<(), ClusterError> {
        self.sent();
        match self
            .nodes_api()
            .patch(node, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if gone_ok && is_not_found(&e) => Ok(()),
            Err(e) => Err(map_err(&format!("node {node}"), e)),
        }
    }

    /// Counts one request to the apiserver.
    fn sent(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    async fn validated<T: DeserializeOwned + Validate>(
        &self,
        resource: &ApiResource,
    ) -> Result<Validated<T>, ClusterError> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
        let objects = self
            .list(&api, ListParams::default())
            .await
            .map_err(|e| map_err(&resource.plural, e))?;
        let mut out = Validated::default();
        for object in objects {
            let name = object.metadata.name.clone().unwrap_or_default();
            let read = serde_json::to_value(&object)
                .map_err(|e| e.to_string())
                .and_then(|v| from_value::<T>(&v).map_err(|e| e.to_string()));
            match read {
                Ok(o) => out.valid.push(o),
                Err(reason) => out.invalid.push(InvalidObject { name, reason }),
            }
        }
        Ok(out)
    }

    /// Replaces the taints of the node as `read` saw it, or a `Conflict` if the node has
    /// changed since (another writer got there first).
    ///
    /// Why this patch: a JSON merge patch replaces the whole `spec.taints` list, and
    /// touches no other field (a PUT of the whole Node would drop fields this client's
    /// k8s-openapi does not know, from a newer apiserver). The list is replaced because a
    /// strategic merge patch merges taints by key alone, which would conflate two taints
    /// with one key and different effects. Replacing a list we read is only safe if
    /// nobody changed it meanwhile, so the patch carries the `resourceVersion` we read:
    /// the apiserver then applies it only to that version and answers 409 otherwise.
    pub async fn set_taints_as_read(&self, read: &Node, taints: &[Taint]) -> Result<(), ClusterError> {
        let name = read.metadata.name.clone().unwrap_or_default();
        let taints = if taints.is_empty() { json!(null) } else { json!(taints) };
        let patch = json!({
            "metadata": {"resourceVersion": read.metadata.resource_version},
            "spec": {"taints": taints},
        });
        self.sent();
        self.nodes_api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| map_err(&format!("node {name}"), e))
    }

    /// Reads the node and writes the taints `change` makes of it, reading again when a
    /// concurrent change made the write stale.
    async fn change_taints(
        &self,
        node: &str,
        change: impl Fn(&Node) -> Option<Vec<Taint>>,
    ) -> Result<(), ClusterError> {
        let what = format!("node {node}");
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.sent();
            let read = self.nodes_api().get(node).await.map_err(|e| map_err(&what, e))?;
            let Some(taints) = change(&read) else {
                return Ok(());
            };
            match self.set_taints_as_read(&read, &taints).await {
                Err(ClusterError::Conflict(_)) if attempt < CONFLICT_ATTEMPTS => continue,
                other => return other,
            }
        }
    }
}

impl Cluster for KubeCluster {
    fn requests_sent(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        self.list(
            &api,
            ListParams::default().fields("status.phase=Pending,spec.nodeName="),
        )
        .await
        .map_err(|e| map_err("pending pods", e))
    }

    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        self.list(&self.nodes_api(), ListParams::default())
            .await
            .map_err(|e| map_err("nodes", e))
    }

    async fn nodes_of_waves(&self, waves: &[String]) -> Result<Vec<Node>, ClusterError> {
        if waves.is_empty() {
            return Ok(Vec::new());
        }
        let selector = format!("{} in ({})", carpool::model::well_known::WAVE_LABEL, waves.join(","));
        self.list(&self.nodes_api(), ListParams::default().labels(&selector))
            .await
            .map_err(|e| map_err("nodes of waves", e))
    }

    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        self.list(
            &api,
            ListParams::default().fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"),
        )
        .await
        .map_err(|e| map_err("scheduled pods", e))
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        self.list(&api, ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .map_err(|e| map_err(&format!("pods on node {node}"), e))
    }

    async fn daemonsets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("daemonsets", e))
    }

    async fn pdbs(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("poddisruptionbudgets", e))
    }

    async fn persistent_volumes(&self) -> Result<Vec<PersistentVolume>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("persistentvolumes", e))
    }

    async fn persistent_volume_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("persistentvolumeclaims", e))
    }

    async fn storage_classes(&self) -> Result<Vec<StorageClass>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("storageclasses", e))
    }

    async fn csinodes(&self) -> Result<Vec<CSINode>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("csinodes", e))
    }

    async fn namespaces(&self) -> Result<Vec<Namespace>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("namespaces", e))
    }

    async fn nodepools(&self) -> Result<Validated<NodePool>, ClusterError> {
        self.validated(&nodepools_resource()).await
    }

    async fn ec2nodeclasses(&self) -> Result<Validated<EC2NodeClass>, ClusterError> {
        self.validated(&ec2nodeclasses_resource()).await
    }

    async fn nodeoverlays(&self) -> Result<Validated<NodeOverlay>, ClusterError> {
        match self.validated(&nodeoverlays_resource()).await {
            // The apiserver answers 404 for a kind it does not serve: the cluster has no
            // NodeOverlay CRD, so no overlays.
            Err(ClusterError::NotFound { .. }) => Ok(Validated::default()),
            other => other,
        }
    }

    async fn capacity_buffers(
        &self,
    ) -> Result<Validated<carpool::model::capacity_buffer::CapacityBuffer>, ClusterError> {
        match self.validated(&capacitybuffers_resource()).await {
            // No CapacityBuffer CRD: no buffers.
            Err(ClusterError::NotFound { .. }) => Ok(Validated::default()),
            other => other,
        }
    }

    async fn pod_templates(&self) -> Result<Vec<k8s_openapi::api::core::v1::PodTemplate>, ClusterError> {
        self.list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("podtemplates", e))
    }

    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        // A merge patch of one field: nothing else on the node changes.
        let patch = json!({"spec": {"unschedulable": true}});
        self.sent();
        self.nodes_api()
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| map_err(&format!("node {node}"), e))
    }

    async fn taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        self.change_taints(node, |n| with_taint(n, taint)).await
    }

    async fn untaint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        self.change_taints(node, |n| without_taint(n, taint)).await
    }

    async fn untaint_listed(&self, node: &Node, taint: &Taint) -> Result<(), ClusterError> {
        let Some(kept) = without_taint(node, taint) else {
            return Ok(());
        };
        match self.set_taints_as_read(node, &kept).await {
            Err(ClusterError::Conflict(_)) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                self.change_taints(&name, |n| without_taint(n, taint)).await
            }
            other => other,
        }
    }

    async fn tolerate(&self, pod: &Pod, toleration: &Toleration) -> Result<(), ClusterError> {
        let listed = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        if listed.contains(toleration) {
            return Ok(());
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        // A merge patch replaces the list whole: the listed tolerations and the new one. No
        // precondition on the version (the scheduler writes a pending pod's status often);
        // the apiserver refuses an update that drops a toleration
        // (`ValidateTolerationsInPodUpdate`), so a list that grew since is never shrunk.
        let mut tolerations = listed;
        tolerations.push(toleration.clone());
        let patch = json!({"spec": {"tolerations": tolerations}});
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        self.sent();
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 422 => Err(ClusterError::Conflict(format!(
                "pod {namespace}/{name}: its tolerations changed since it was listed: {}",
                s.message
            ))),
            Err(e) => Err(map_err(&format!("pod {namespace}/{name}"), e)),
        }
    }

    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError> {
        // The Eviction is posted by hand, not with kube's `Api::evict`: kube 5.0's request
        // writes the delete options as `delete_options`, a field the apiserver does not
        // know, so a UID precondition would never reach it (the cluster contract shows it
        // on the local stack's apiserver).
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        self.sent();
        let mut eviction = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        });
        if let Some(uid) = &pod.uid {
            eviction["deleteOptions"] = json!({"preconditions": {"uid": uid}});
        }
        match api
            .create_subresource::<_, serde_json::Value>("eviction", &pod.name, &PostParams::default(), &eviction)
            .await
        {
            Ok(_) => Ok(Eviction::Evicted),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Eviction::Gone),
            Err(kube::Error::Api(s)) if pdb_refusal(&s) => Ok(Eviction::Blocked { reason: s.message }),
            Err(e) => Err(map_err(&format!("pod {}", pod.key()), e)),
        }
    }

    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        // VolumeAttachments have no field selector on spec.nodeName: listed, then filtered.
        let all: Vec<VolumeAttachment> = self
            .list(&Api::all(self.client.clone()), ListParams::default())
            .await
            .map_err(|e| map_err("volumeattachments", e))?;
        Ok(all
            .into_iter()
            .filter(|va| va.spec.node_name == node)
            .filter_map(|va| va.spec.source.persistent_volume_name)
            .collect())
    }

    async fn add_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        // A strategic merge patch: `metadata.finalizers` merges as a set, so the write
        // keeps the finalizers others put there.
        self.patch_finalizers(
            node,
            json!({"metadata": {"finalizers": [TERMINATION_FINALIZER]}}),
            false,
        )
        .await
    }

    async fn remove_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TERMINATION_FINALIZER]}});
        self.patch_finalizers(node, patch, true).await
    }

    async fn delete_node(&self, node: &str, uid: &str) -> Result<(), ClusterError> {
        self.sent();
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.nodes_api().delete(node, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(map_err(&format!("node {node}"), e)),
        }
    }

    async fn patch_labels_annotations(
        &self,
        node: &str,
        labels: &MetadataPatch,
        annotations: &MetadataPatch,
    ) -> Result<(), ClusterError> {
        // A merge patch of the named keys: `null` removes a key, others stay as they are.
        let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
        self.sent();
        self.nodes_api()
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| map_err(&format!("node {node}"), e))
    }

    async fn write_status(&self, kind: StatusOf, name: &str, status: &serde_json::Value) -> Result<(), ClusterError> {
        let resource = match kind {
            StatusOf::NodePool => nodepools_resource(),
            StatusOf::EC2NodeClass => ec2nodeclasses_resource(),
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        // A merge patch of the status subresource: only the fields given change, and the
        // spec cannot be touched by it (RBAC grants `<plural>/status` alone).
        let patch = json!({"status": status});
        self.sent();
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| map_err(&format!("{} {name}", kind.kind()), e))
    }

    async fn replica_set(&self, namespace: &str, name: &str) -> Result<Option<ReplicaSet>, ClusterError> {
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), namespace);
        self.sent();
        api.get_opt(name)
            .await
            .map_err(|e| map_err(&format!("replicaset {namespace}/{name}"), e))
    }

    async fn deployment(&self, namespace: &str, name: &str) -> Result<Option<Deployment>, ClusterError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        self.sent();
        api.get_opt(name)
            .await
            .map_err(|e| map_err(&format!("deployment {namespace}/{name}"), e))
    }

    async fn restart_deployment(&self, restart: &RolloutRestart) -> Result<(), ClusterError> {
        // kubectl's `rollout restart` sends a strategic merge patch of the template
        // annotation; a merge patch of a map's keys is the same write. The resource
        // version in the patch makes it conditional (a 409 when the Deployment changed
        // since it was read), and the ValidatingAdmissionPolicy in
        // infra/rbac/carpool-deployment-restart.yaml refuses any other change.
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &restart.namespace);
        let mut patch = json!({
            "metadata": {"annotations": {SURGED_FOR: restart.for_pod}},
            "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: restart.restarted_at}}}},
        });
        if !restart.resource_version.is_empty() {
            patch["metadata"]["resourceVersion"] = json!(restart.resource_version);
        }
        self.sent();
        api.patch(&restart.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| map_err(&format!("deployment {}", restart.key()), e))
    }

    async fn publish_event(&self, event: &PodEvent) -> Result<(), ClusterError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &event.pod.namespace);
        self.sent();
        api.create(&PostParams::default(), &k8s_event(event, Timestamp::now()))
            .await
            .map(drop)
            .map_err(|e| map_err(&format!("event {} on pod {}", event.reason, event.pod.key()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(str::to_string),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn node(taints: Vec<Taint>) -> Node {
        Node {
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn taints_are_matched_by_key_and_effect() {
        let a = taint("a", None, "NoSchedule");
        let n = node(vec![a.clone()]);
        assert_eq!(with_taint(&n, &a), None, "present: no write");
        let a2 = taint("a", Some("v"), "NoSchedule");
        assert_eq!(with_taint(&n, &a2), Some(vec![a2.clone()]), "new value replaces");
        let a_exec = taint("a", None, "NoExecute");
        assert_eq!(with_taint(&n, &a_exec), Some(vec![a.clone(), a_exec.clone()]));
        assert_eq!(without_taint(&n, &a_exec), None, "absent: no write");
        assert_eq!(without_taint(&n, &a2), Some(vec![]), "value not compared");
    }

    #[test]
    fn an_event_regards_the_pod_by_uid_in_its_namespace() {
        use carpool::ports::{EventReason, PodRef};
        let event = PodEvent::new(
            PodRef {
                namespace: "web".into(),
                name: "web-0".into(),
                uid: Some("u-1".into()),
            },
            EventReason::Nominated,
            "Pod should schedule on: instance i-1 (m5.large, us-east-1a, spot) of NodePool general",
        );
        let now = Timestamp::from_second(1_790_000_000).unwrap();
        let e = k8s_event(&event, now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("web"));
        assert!(e.metadata.name.as_deref().unwrap().starts_with("web-0."));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.reason.as_deref(), Some("Nominated"));
        assert_eq!(e.action.as_deref(), Some("Provision"));
        assert_eq!(e.note.as_deref(), Some(event.message.as_str()));
        assert_eq!(e.reporting_controller.as_deref(), Some("carpool"));
        let regarding = e.regarding.unwrap();
        assert_eq!(
            (
                regarding.kind.as_deref(),
                regarding.name.as_deref(),
                regarding.uid.as_deref()
            ),
            (Some("Pod"), Some("web-0"), Some("u-1"))
        );
        assert_eq!(e.event_time, Some(MicroTime(now)));
    }

    #[test]
    fn only_pdb_refusals_are_blocked() {
        let status = |code: u16, message: &str| kube::core::Status {
            code,
            message: message.into(),
            ..Default::default()
        };
        assert!(pdb_refusal(&status(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget."
        )));
        assert!(pdb_refusal(&status(
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )));
        assert!(!pdb_refusal(&status(429, "Too many requests, please try again later.")));
        assert!(!pdb_refusal(&status(500, "etcd timeout")));
    }
}
