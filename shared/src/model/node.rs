//! A cluster node, as Carpool reads it from a Kubernetes `Node`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node as K8sNode, Taint};
use serde::{Deserialize, Serialize};

use super::resources::{ResourceError, Resources};

/// A node: its labels and taints, and what it can hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The node name.
    pub name: String,
    /// `aws:///<zone>/<instance-id>`, when the node is an EC2 instance.
    pub provider_id: Option<String>,
    /// The node's labels.
    pub labels: BTreeMap<String, String>,
    /// The node's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The node's taints.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Whether the `Ready` condition is `True`.
    pub ready: bool,
    /// What pods can request.
    pub allocatable: Resources,
    /// Whether the node is being deleted.
    pub terminating: bool,
}

/// A `Node` object that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The node has no name.
    #[error("node has no metadata.name")]
    NoName,
    /// A bad quantity in `status.allocatable`.
    #[error("node {node}: status.allocatable")]
    Allocatable {
        /// The node name.
        node: String,
        /// The bad quantity.
        #[source]
        source: ResourceError,
    },
}

impl Node {
    /// Reads a Kubernetes `Node`.
    pub fn from_k8s(n: &K8sNode) -> Result<Self, NodeError> {
        let name = n.metadata.name.clone().ok_or(NodeError::NoName)?;
        let status = n.status.as_ref();
        let allocatable = match status.and_then(|s| s.allocatable.as_ref()) {
            Some(list) => Resources::from_k8s(list).map_err(|source| NodeError::Allocatable {
                node: name.clone(),
                source,
            })?,
            None => Resources::default(),
        };
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let spec = n.spec.as_ref();
        Ok(Node {
            name,
            provider_id: spec.and_then(|s| s.provider_id.clone()),
            labels: n.metadata.labels.clone().unwrap_or_default(),
            annotations: n.metadata.annotations.clone().unwrap_or_default(),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready,
            allocatable,
            terminating: n.metadata.deletion_timestamp.is_some(),
        })
    }

    /// The EC2 instance id from the provider id (`aws:///us-east-1a/i-0abc` → `i-0abc`).
    pub fn instance_id(&self) -> Option<&str> {
        instance_id_from_provider_id(self.provider_id.as_deref()?)
    }
}

/// The EC2 instance id in an `aws:///<zone>/<instance-id>` provider id.
pub fn instance_id_from_provider_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let id = rest.rsplit('/').next()?;
    id.starts_with("i-").then_some(id)
}

/// The EC2 instance id in a Node's `spec.providerID`.
pub fn node_instance_id(node: &K8sNode) -> Option<&str> {
    instance_id_from_provider_id(node.spec.as_ref()?.provider_id.as_deref()?)
}

/// Whether `node` is labelled as a node of one of `waves`.
pub fn in_waves(node: &K8sNode, waves: &[String]) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(super::well_known::WAVE_LABEL))
        .is_some_and(|w| waves.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubectl_node_becomes_a_model_node() {
        let n: K8sNode = serde_json::from_str(
            r#"{"metadata":{"name":"ip-10-0-1-5.ec2.internal","labels":{"kubernetes.io/arch":"arm64"}},
                "spec":{"providerID":"aws:///us-east-1a/i-0123456789abcdef0","taints":[{"key":"k","effect":"NoSchedule"}]},
                "status":{"allocatable":{"cpu":"1930m","memory":"6903Mi","pods":"29"},
                          "conditions":[{"type":"Ready","status":"True"}]}}"#,
        )
        .unwrap();
        let node = Node::from_k8s(&n).unwrap();
        assert_eq!(node.instance_id(), Some("i-0123456789abcdef0"));
        assert_eq!(node.allocatable.cpu_millis, 1930);
        assert_eq!(node.allocatable.pods, 29);
        assert!(node.ready && !node.unschedulable);
        assert_eq!(node.taints.len(), 1);
    }

    #[test]
    fn provider_ids_that_are_not_ec2_have_no_instance_id() {
        assert_eq!(instance_id_from_provider_id("kwok://node-1"), None);
        assert_eq!(instance_id_from_provider_id("aws:///us-east-1a/i-1"), Some("i-1"));
    }
}
