//! A node as the simulated kube-scheduler and the reports see it, and its Node object.

use std::collections::BTreeMap;

use carpool::catalog::RegionCatalog;
use carpool::model::{CapacityType, Resources};
use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{Value, json};

/// A node.
#[derive(Clone, Debug)]
pub struct SimNode {
    /// The Node's name.
    pub name: String,
    /// Its instance.
    pub instance_id: String,
    /// Its zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its taints.
    pub taints: Vec<Taint>,
    /// Its allocatable resources.
    pub allocatable: Resources,
    /// Ready.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
}

impl SimNode {
    /// The node an instance registers as: the type's labels, the zone, the capacity type,
    /// the hostname, and `extra` (a NodePool's or node group's).
    #[allow(clippy::too_many_arguments)]
    pub fn registered(
        region: &RegionCatalog<'_>,
        name: &str,
        instance_id: &str,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        extra: &BTreeMap<String, String>,
        taints: Vec<Taint>,
    ) -> Option<SimNode> {
        let it = region.types().iter().find(|t| t.name == instance_type)?;
        let mut labels = it.labels();
        labels.insert("topology.kubernetes.io/zone".into(), zone.into());
        labels.insert("topology.kubernetes.io/region".into(), region.region().into());
        labels.insert("kubernetes.io/hostname".into(), name.into());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("kubernetes.io/arch".into(), it.arch.label().into());
        labels.insert("node.kubernetes.io/instance-type".into(), instance_type.into());
        labels.insert("karpenter.sh/capacity-type".into(), capacity_type.label().into());
        labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        Some(SimNode {
            name: name.into(),
            instance_id: instance_id.into(),
            zone: zone.into(),
            capacity_type,
            labels,
            taints,
            allocatable: it.allocatable.clone(),
            ready: true,
            unschedulable: false,
        })
    }

    /// The node of a Node object, if it names its instance and type.
    pub fn from_node(node: &Node) -> Option<SimNode> {
        let name = node.metadata.name.clone()?;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        let instance_id = spec
            .provider_id
            .as_deref()
            .and_then(carpool::model::node::instance_id_from_provider_id)?
            .to_string();
        let status = node.status.clone().unwrap_or_default();
        let allocatable = Resources::from_k8s(&status.allocatable.unwrap_or_default()).ok()?;
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Some(SimNode {
            name,
            instance_id,
            zone: labels.get("topology.kubernetes.io/zone").cloned().unwrap_or_default(),
            capacity_type: if labels.get("karpenter.sh/capacity-type").map(String::as_str) == Some("spot") {
                CapacityType::Spot
            } else {
                CapacityType::OnDemand
            },
            labels,
            taints: spec.taints.unwrap_or_default(),
            allocatable,
            ready,
            unschedulable: spec.unschedulable.unwrap_or(false),
        })
    }

    /// The Node object, Ready since `since` (RFC 3339).
    pub fn node_json(&self, since: &str) -> Value {
        let alloc: BTreeMap<String, Value> = self
            .allocatable
            .to_k8s()
            .into_iter()
            .map(|(k, v)| (k, json!(v.0)))
            .collect();
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels, "creationTimestamp": since},
            "spec": {"providerID": format!("aws:///{}/{}", self.zone, self.instance_id),
                     "taints": self.taints, "unschedulable": self.unschedulable},
            "status": {"capacity": alloc.clone(), "allocatable": alloc,
                "conditions": [{"type": "Ready", "status": if self.ready { "True" } else { "False" }, "lastTransitionTime": since}]}})
    }

    /// Whether kube-scheduler may bind pods here: Ready and not cordoned.
    pub fn usable(&self) -> bool {
        self.ready && !self.unschedulable
    }
}
