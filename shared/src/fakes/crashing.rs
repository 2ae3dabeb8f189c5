//! A Cluster that dies mid-drain: after a number of accepted evictions, every call on it
//! never completes. A test drops the invocation's future there (a timeout, or
//! `now_or_never` over the fakes), which is what a Lambda timeout or a crash does to a
//! run: it stops at an await point, with its state as far as it got.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Taint, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::model::pod::Pod;
use crate::model::{EC2NodeClass, NodeOverlay, NodePool};
use crate::ports::{Cluster, ClusterError, Eviction, MetadataPatch, PodEvent, PodRef, StatusOf, Validated};

/// `inner`, until `after` evictions were accepted; then every call hangs.
pub struct Crashing<'a, K> {
    inner: &'a K,
    after: usize,
    evicted: AtomicUsize,
}

impl<'a, K> Crashing<'a, K> {
    /// Dies after `after` accepted evictions.
    pub fn after_evictions(inner: &'a K, after: usize) -> Self {
        Crashing {
            inner,
            after,
            evicted: AtomicUsize::new(0),
        }
    }

    /// The evictions accepted before it died.
    pub fn evictions(&self) -> usize {
        self.evicted.load(Ordering::SeqCst)
    }

    async fn gate(&self) {
        if self.evicted.load(Ordering::SeqCst) >= self.after {
            std::future::pending::<()>().await;
        }
    }
}

impl<K: Cluster> Cluster for Crashing<'_, K> {
    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        self.gate().await;
        self.inner.pending_pods().await
    }
    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        self.gate().await;
        self.inner.nodes().await
    }
    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        self.gate().await;
        self.inner.scheduled_pods().await
    }
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        self.gate().await;
        self.inner.pods_on_node(node).await
    }
    async fn daemonsets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        self.gate().await;
        self.inner.daemonsets().await
    }
    async fn pdbs(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        self.gate().await;
        self.inner.pdbs().await
    }
    async fn persistent_volumes(&self) -> Result<Vec<PersistentVolume>, ClusterError> {
        self.gate().await;
        self.inner.persistent_volumes().await
    }
    async fn persistent_volume_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        self.gate().await;
        self.inner.persistent_volume_claims().await
    }
    async fn storage_classes(&self) -> Result<Vec<StorageClass>, ClusterError> {
        self.gate().await;
        self.inner.storage_classes().await
    }
    async fn csinodes(&self) -> Result<Vec<CSINode>, ClusterError> {
        self.gate().await;
        self.inner.csinodes().await
    }
    async fn namespaces(&self) -> Result<Vec<Namespace>, ClusterError> {
        self.gate().await;
        self.inner.namespaces().await
    }
    async fn nodepools(&self) -> Result<Validated<NodePool>, ClusterError> {
        self.gate().await;
        self.inner.nodepools().await
    }
    async fn ec2nodeclasses(&self) -> Result<Validated<EC2NodeClass>, ClusterError> {
        self.gate().await;
        self.inner.ec2nodeclasses().await
    }
    async fn nodeoverlays(&self) -> Result<Validated<NodeOverlay>, ClusterError> {
        self.gate().await;
        self.inner.nodeoverlays().await
    }
    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.cordon(node).await
    }
    async fn taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.taint(node, taint).await
    }
    async fn untaint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.untaint(node, taint).await
    }
    async fn tolerate(&self, pod: &Pod, toleration: &Toleration) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.tolerate(pod, toleration).await
    }
    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError> {
        self.gate().await;
        let answer = self.inner.evict(pod).await?;
        if answer == Eviction::Evicted {
            self.evicted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(answer)
    }
    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        self.gate().await;
        self.inner.attached_volumes(node).await
    }
    async fn add_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.add_finalizer(node).await
    }
    async fn remove_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.remove_finalizer(node).await
    }
    async fn delete_node(&self, node: &str, uid: &str) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.delete_node(node, uid).await
    }
    async fn patch_labels_annotations(
        &self,
        node: &str,
        labels: &MetadataPatch,
        annotations: &MetadataPatch,
    ) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.patch_labels_annotations(node, labels, annotations).await
    }
    async fn write_status(&self, kind: StatusOf, name: &str, status: &serde_json::Value) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.write_status(kind, name, status).await
    }
    async fn publish_event(&self, event: &PodEvent) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.publish_event(event).await
    }
    async fn replica_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::ReplicaSet>, ClusterError> {
        self.gate().await;
        self.inner.replica_set(namespace, name).await
    }
    async fn deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::Deployment>, ClusterError> {
        self.gate().await;
        self.inner.deployment(namespace, name).await
    }
    async fn restart_deployment(
        &self,
        restart: &crate::model::rollout_restart::RolloutRestart,
    ) -> Result<(), ClusterError> {
        self.gate().await;
        self.inner.restart_deployment(restart).await
    }
}
