//! The Cluster port: what Carpool reads from and writes to the Kubernetes API.

use std::future::Future;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Taint, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::model::pod::Pod;
use crate::model::pod_event::{PodEvent, PodRef};
use crate::model::rollout_restart::RolloutRestart;
use crate::model::{EC2NodeClass, NodeOverlay, NodePool};

/// What became of an eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// The apiserver accepted the eviction: the pod is being deleted.
    Evicted,
    /// A PodDisruptionBudget does not allow it now (the apiserver's 429, or its 500 for a
    /// pod covered by more than one PDB). Try again later.
    Blocked {
        /// The apiserver's message, e.g. "Cannot evict pod as it would violate the pod's
        /// disruption budget."
        reason: String,
    },
    /// The pod does not exist (any more).
    Gone,
}

/// An object the API returned that Carpool cannot read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidObject {
    /// The object's name.
    pub name: String,
    /// Why it is invalid, naming the field path (`spec.limits.cpu: must not be negative`).
    pub reason: String,
}

/// Objects read and validated one by one: one bad object does not hide the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Validated<T> {
    /// The objects that read and validated.
    pub valid: Vec<T>,
    /// The objects that did not, with the reason.
    pub invalid: Vec<InvalidObject>,
}

impl<T> Default for Validated<T> {
    fn default() -> Self {
        Validated {
            valid: Vec::new(),
            invalid: Vec::new(),
        }
    }
}

pub use crate::model::metadata_patch::MetadataPatch;

/// The kinds whose `status` Carpool writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StatusOf {
    /// `karpenter.sh/v1` NodePool.
    NodePool,
    /// `karpenter.k8s.aws/v1` EC2NodeClass.
    EC2NodeClass,
}

impl StatusOf {
    /// The kind's name.
    pub fn kind(self) -> &'static str {
        match self {
            StatusOf::NodePool => "NodePool",
            StatusOf::EC2NodeClass => "EC2NodeClass",
        }
    }
}

/// A Kubernetes API call that failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The object does not exist.
    #[error("{what} not found")]
    NotFound {
        /// The object (and the call).
        what: String,
        /// The apiserver's answer, when it gave one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The object changed between read and write (HTTP 409).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The apiserver throttled the call (HTTP 429 not caused by a PDB) and retries ran out.
    #[error("throttled: {what}")]
    Throttled {
        /// The object (and the call).
        what: String,
        /// The apiserver's answer.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The credentials were refused (HTTP 401) or lack the permission (HTTP 403).
    #[error("unauthorized: {what}")]
    Unauthorized {
        /// The object (and the call).
        what: String,
        /// The apiserver's (or the credentials') error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Any other failure: transport, decoding, another status.
    #[error("kubernetes api")]
    Api(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The Kubernetes cluster, as Carpool reads and changes it.
///
/// Contract (checked by [`crate::fakes::cluster_contract`] against every implementation):
/// - Reads list the whole cluster (all namespaces). `pending_pods` returns the pods in
///   phase Pending with no node (`status.phase=Pending,spec.nodeName=`); `pods_on_node`
///   the pods bound to a node (empty for an unknown node). `persistent_volumes`,
///   `persistent_volume_claims`, `storage_classes`, `csinodes` and `namespaces` return
///   every object of the kind as the apiserver holds it (what the planner needs to read
///   volume zones, claims' binding, attach limits and namespace labels).
/// - `nodepools`, `ec2nodeclasses` and `nodeoverlays` read each object through
///   [`crate::model::manifest::from_value`]; one that does not read or validate is
///   returned in [`Validated::invalid`] with its name and the field path at fault.
/// - `cordon` sets `spec.unschedulable` and touches nothing else.
/// - `taint` adds the taint unless a taint with the same key and effect is there; a
///   taint with the same key and effect but another value is replaced. Other taints,
///   labels and annotations are kept. `untaint` removes the taints with the taint's key
///   and effect (the value is not compared); absent, it succeeds.
/// - `patch_labels_annotations` sets and removes only the keys it names.
/// - Writes to a missing node are `NotFound`, except `delete_node`, which is idempotent.
/// - `evict` goes through the Eviction API: a pod that a PDB protects is evicted only if
///   the PDB allows a disruption now (`Blocked` otherwise, a value, not an error); a
///   missing pod is `Gone`. Pods that are Pending, Succeeded, Failed or already
///   terminating are evicted regardless of PDBs, as the apiserver does.
/// - A write whose read went stale (a concurrent change) is a `Conflict`; implementations
///   may retry it a few times first.
/// - `publish_event` creates one Kubernetes Event about the pod (reporting controller
///   `carpool`), so that `kubectl describe pod` shows it: its type, reason and message as
///   given, regarding the pod by namespace, name and uid. It does not check that the pod
///   exists and does not deduplicate (the caller rate-limits). Events are best effort: a
///   caller logs a failure to publish and goes on; it never fails a batch.
pub trait Cluster: Send + Sync {
    /// How many requests this port has sent the apiserver so far: each page of a list, each
    /// retry and each write. A run reports the difference (`ApiserverRequests`). By
    /// default 0: not counted.
    fn requests_sent(&self) -> u64 {
        0
    }
    /// Pods in phase Pending that are not bound to a node.
    fn pending_pods(&self) -> impl Future<Output = Result<Vec<Pod>, ClusterError>> + Send;
    /// Every node.
    fn nodes(&self) -> impl Future<Output = Result<Vec<Node>, ClusterError>> + Send;
    /// The nodes labelled [`crate::model::well_known::WAVE_LABEL`] with one of `waves`: the
    /// nodes of launch waves still held back, which a run watches for every few seconds.
    /// By default, every node, filtered; the Kubernetes adapter asks the apiserver with a
    /// label selector, so that a run waiting on its wave does not list the whole cluster at
    /// each poll.
    fn nodes_of_waves(&self, waves: &[String]) -> impl Future<Output = Result<Vec<Node>, ClusterError>> + Send {
        let waves = waves.to_vec();
        async move {
            let mut nodes = self.nodes().await?;
            nodes.retain(|n| crate::model::node::in_waves(n, &waves));
            Ok(nodes)
        }
    }
    /// Every pod bound to a node that has not finished (phase neither Succeeded nor
    /// Failed), in every namespace: what uses the nodes' room.
    fn scheduled_pods(&self) -> impl Future<Output = Result<Vec<Pod>, ClusterError>> + Send;
    /// The pods bound to a node, in every namespace.
    fn pods_on_node(&self, node: &str) -> impl Future<Output = Result<Vec<Pod>, ClusterError>> + Send;
    /// Every DaemonSet.
    fn daemonsets(&self) -> impl Future<Output = Result<Vec<DaemonSet>, ClusterError>> + Send;
    /// Every PodDisruptionBudget, with the status the disruption controller computed.
    fn pdbs(&self) -> impl Future<Output = Result<Vec<PodDisruptionBudget>, ClusterError>> + Send;
    /// Every PersistentVolume.
    fn persistent_volumes(&self) -> impl Future<Output = Result<Vec<PersistentVolume>, ClusterError>> + Send;
    /// Every PersistentVolumeClaim, in every namespace.
    fn persistent_volume_claims(&self)
    -> impl Future<Output = Result<Vec<PersistentVolumeClaim>, ClusterError>> + Send;
    /// Every StorageClass.
    fn storage_classes(&self) -> impl Future<Output = Result<Vec<StorageClass>, ClusterError>> + Send;
    /// Every CSINode: the volume attach limits of the nodes, per CSI driver.
    fn csinodes(&self) -> impl Future<Output = Result<Vec<CSINode>, ClusterError>> + Send;
    /// Every Namespace, for the labels a pod affinity term's `namespaceSelector` reads.
    fn namespaces(&self) -> impl Future<Output = Result<Vec<Namespace>, ClusterError>> + Send;
    /// Every `karpenter.sh/v1` NodePool, the invalid ones apart.
    fn nodepools(&self) -> impl Future<Output = Result<Validated<NodePool>, ClusterError>> + Send;
    /// Every `karpenter.k8s.aws/v1` EC2NodeClass, the invalid ones apart.
    fn ec2nodeclasses(&self) -> impl Future<Output = Result<Validated<EC2NodeClass>, ClusterError>> + Send;
    /// Every `karpenter.sh/v1alpha1` NodeOverlay, the invalid ones apart. A cluster
    /// without the NodeOverlay CRD has none: that is not an error. By default, none.
    fn nodeoverlays(&self) -> impl Future<Output = Result<Validated<NodeOverlay>, ClusterError>> + Send {
        async { Ok(Validated::default()) }
    }
    /// Every `autoscaling.x-k8s.io/v1beta1` CapacityBuffer, the invalid ones apart. A
    /// cluster without the CRD has none: that is not an error. By default, none.
    fn capacity_buffers(
        &self,
    ) -> impl Future<Output = Result<Validated<crate::model::capacity_buffer::CapacityBuffer>, ClusterError>> + Send
    {
        async { Ok(Validated::default()) }
    }
    /// Every PodTemplate (a CapacityBuffer's chunk). By default, none.
    fn pod_templates(
        &self,
    ) -> impl Future<Output = Result<Vec<k8s_openapi::api::core::v1::PodTemplate>, ClusterError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Marks a node unschedulable.
    fn cordon(&self, node: &str) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Adds a taint to a node unless it has it (idempotent).
    fn taint(&self, node: &str, taint: &Taint) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Removes the taints with `taint`'s key and effect (idempotent).
    fn untaint(&self, node: &str, taint: &Taint) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Removes the taints with `taint`'s key and effect from `node` as it was listed, in
    /// one write where it can (conditional on the listed version; read again when it went
    /// stale), so that the writes of many nodes land together. By default, `untaint`.
    fn untaint_listed(&self, node: &Node, taint: &Taint) -> impl Future<Output = Result<(), ClusterError>> + Send {
        let name = node.metadata.name.clone().unwrap_or_default();
        let taint = taint.clone();
        async move { self.untaint(&name, &taint).await }
    }
    /// Adds `toleration` to a pod as listed, unless it has it (idempotent). Kubernetes
    /// lets a pod's tolerations grow and never shrink, so the write cannot take one away:
    /// a pod whose tolerations changed since it was listed refuses it, as a conflict.
    fn tolerate(&self, pod: &Pod, toleration: &Toleration) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Evicts a pod through the Eviction API, with the pod's UID as a precondition when
    /// the reference has one, as Karpenter's eviction queue sends it
    /// (`terminator.Queue.Evict` in kubernetes-sigs/karpenter
    /// `pkg/controllers/node/termination/terminator/eviction.go`): a pod re-created under
    /// the same name since it was listed is left alone, and the answer is a `Conflict`.
    fn evict(&self, pod: &PodRef) -> impl Future<Output = Result<Eviction, ClusterError>> + Send;
    /// The PersistentVolumes attached to `node`: its VolumeAttachments'
    /// `spec.source.persistentVolumeName` (Karpenter's `nodeutils.GetVolumeAttachments`).
    fn attached_volumes(&self, node: &str) -> impl Future<Output = Result<Vec<String>, ClusterError>> + Send;
    /// Deletes the Node object `node` whose UID is `uid` (a precondition, as Karpenter's
    /// terminator deletes with): a Node re-created under the same name since it was read
    /// is left alone, and the answer is a `Conflict`. A missing node is success. A node
    /// with finalizers is marked for deletion and stays until they are removed.
    fn delete_node(&self, node: &str, uid: &str) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Adds Carpool's termination finalizer
    /// ([`crate::model::well_known::TERMINATION_FINALIZER`]) to a node, unless it has it
    /// (idempotent).
    fn add_finalizer(&self, node: &str) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Removes Carpool's termination finalizer from a node (idempotent; a missing node is
    /// success): a node being deleted then goes.
    fn remove_finalizer(&self, node: &str) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Sets and removes labels and annotations of a node.
    fn patch_labels_annotations(
        &self,
        node: &str,
        labels: &MetadataPatch,
        annotations: &MetadataPatch,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Merges `status` (an object) into the `status` of the NodePool or EC2NodeClass
    /// `name`, through its status subresource only: the fields given replace theirs, the
    /// others stay. A missing object is `NotFound`.
    fn write_status(
        &self,
        kind: StatusOf,
        name: &str,
        status: &serde_json::Value,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Publishes a Kubernetes Event about a pod (best effort: see the contract).
    fn publish_event(&self, event: &PodEvent) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// The ReplicaSet `namespace/name`, or `None` when there is none (a drain reads the
    /// Deployment of a pod it surges: [`crate::decide::disruption::surge`]). By default,
    /// none.
    fn replica_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ReplicaSet>, ClusterError>> + Send {
        let _ = (namespace, name);
        async { Ok(None) }
    }
    /// The Deployment `namespace/name`, or `None` when there is none. By default, none.
    fn deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Deployment>, ClusterError>> + Send {
        let _ = (namespace, name);
        async { Ok(None) }
    }
    /// Writes `restart` (`kubectl rollout restart`'s template annotation, and Carpool's
    /// note of the pod it was for) with a merge patch conditional on its resource version:
    /// a Deployment changed since it was read is a `Conflict`, a missing one `NotFound`.
    /// Nothing else of the Deployment changes. By default, unsupported (an `Api` error).
    fn restart_deployment(&self, restart: &RolloutRestart) -> impl Future<Output = Result<(), ClusterError>> + Send {
        let what = format!("rollout restart of deployment {}: not supported here", restart.key());
        async move { Err(ClusterError::Api(what.into())) }
    }
}
