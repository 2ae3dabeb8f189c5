//! A Cluster whose every call takes a turn before it answers, as a call to the apiserver
//! does: concurrent runs over the in-memory fakes then interleave at each call, as they do
//! over the network, instead of each running to its end before the next starts. `carpool
//! bench interruption` runs a batch's records on it, so that what they hold in memory at
//! once is what a Lambda's concurrent records hold.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Taint, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::model::pod::Pod;
use crate::model::{EC2NodeClass, NodeOverlay, NodePool};
use crate::ports::{Cluster, ClusterError, Eviction, MetadataPatch, PodEvent, PodRef, StatusOf, Validated};

/// `inner`, each call answering after one turn.
pub struct Yielding<'a, K> {
    inner: &'a K,
}

impl<'a, K> Yielding<'a, K> {
    /// Wraps `inner`.
    pub fn new(inner: &'a K) -> Self {
        Yielding { inner }
    }
}

/// Pending once (waking itself), then ready: the executor polls the other futures first.
/// Written by hand: `tokio::task::yield_now` needs the tokio runtime, and the fakes run on
/// any executor (pollster in the CLI).
fn yield_once() -> impl Future<Output = ()> {
    struct YieldOnce(bool);
    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                Poll::Ready(())
            } else {
                self.0 = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
    YieldOnce(false)
}

impl<K: Cluster> Cluster for Yielding<'_, K> {
    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        yield_once().await;
        self.inner.pending_pods().await
    }
    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        yield_once().await;
        self.inner.nodes().await
    }
    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        yield_once().await;
        self.inner.scheduled_pods().await
    }
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        yield_once().await;
        self.inner.pods_on_node(node).await
    }
    async fn daemonsets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        yield_once().await;
        self.inner.daemonsets().await
    }
    async fn pdbs(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        yield_once().await;
        self.inner.pdbs().await
    }
    async fn persistent_volumes(&self) -> Result<Vec<PersistentVolume>, ClusterError> {
        yield_once().await;
        self.inner.persistent_volumes().await
    }
    async fn persistent_volume_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        yield_once().await;
        self.inner.persistent_volume_claims().await
    }
    async fn storage_classes(&self) -> Result<Vec<StorageClass>, ClusterError> {
        yield_once().await;
        self.inner.storage_classes().await
    }
    async fn csinodes(&self) -> Result<Vec<CSINode>, ClusterError> {
        yield_once().await;
        self.inner.csinodes().await
    }
    async fn namespaces(&self) -> Result<Vec<Namespace>, ClusterError> {
        yield_once().await;
        self.inner.namespaces().await
    }
    async fn nodepools(&self) -> Result<Validated<NodePool>, ClusterError> {
        yield_once().await;
        self.inner.nodepools().await
    }
    async fn ec2nodeclasses(&self) -> Result<Validated<EC2NodeClass>, ClusterError> {
        yield_once().await;
        self.inner.ec2nodeclasses().await
    }
    async fn nodeoverlays(&self) -> Result<Validated<NodeOverlay>, ClusterError> {
        yield_once().await;
        self.inner.nodeoverlays().await
    }
    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.cordon(node).await
    }
    async fn taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.taint(node, taint).await
    }
    async fn untaint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.untaint(node, taint).await
    }
    async fn tolerate(&self, pod: &Pod, toleration: &Toleration) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.tolerate(pod, toleration).await
    }
    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError> {
        yield_once().await;
        self.inner.evict(pod).await
    }
    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        yield_once().await;
        self.inner.attached_volumes(node).await
    }
    async fn add_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.add_finalizer(node).await
    }
    async fn remove_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.remove_finalizer(node).await
    }
    async fn delete_node(&self, node: &str, uid: &str) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.delete_node(node, uid).await
    }
    async fn patch_labels_annotations(
        &self,
        node: &str,
        labels: &MetadataPatch,
        annotations: &MetadataPatch,
    ) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.patch_labels_annotations(node, labels, annotations).await
    }
    async fn write_status(&self, kind: StatusOf, name: &str, status: &serde_json::Value) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.write_status(kind, name, status).await
    }
    async fn publish_event(&self, event: &PodEvent) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.publish_event(event).await
    }
    async fn replica_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::ReplicaSet>, ClusterError> {
        yield_once().await;
        self.inner.replica_set(namespace, name).await
    }
    async fn deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::Deployment>, ClusterError> {
        yield_once().await;
        self.inner.deployment(namespace, name).await
    }
    async fn restart_deployment(
        &self,
        restart: &crate::model::rollout_restart::RolloutRestart,
    ) -> Result<(), ClusterError> {
        yield_once().await;
        self.inner.restart_deployment(restart).await
    }
}
