//! A pod as Carpool holds it: the fields the planner, the checker, the drain and the
//! disruption methods read, under k8s-openapi's names and types, and nothing else.
//!
//! Why not k8s-openapi's `Pod`: it holds every field of the API inline. A `Pod` is 2,248
//! bytes before anything is set, and each `Container` 2,144 more, so a cluster at
//! Kubernetes' published limit (150,000 pods) takes over a gigabyte as k8s-openapi objects
//! even with `managedFields` and the containers' environment dropped. These types keep the
//! same field names and types for what is read, so code written against k8s-openapi's
//! reads them unchanged, and serde ignores the rest of the JSON as it arrives: a page of a
//! list is never held whole.
//!
//! The kube adapter lists them directly (`Api<Pod>`: the type implements k8s-openapi's
//! `Resource` and `Metadata`), and [`From`] takes a k8s-openapi `Pod`, as tests and the
//! end-to-end suites build them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// A pod: `v1/Pod`, with the fields Carpool reads. It serializes with its `apiVersion`
/// and `kind`, as k8s-openapi's does.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    /// The object's metadata (k8s-openapi's, as for every other kind).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the pod asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    /// Where it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// `PodSpec`, with the fields scheduling, draining and disruption read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// Node and pod (anti-)affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<k8s::Affinity>,
    /// The containers.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Whether the pod uses the node's network (its container ports are host ports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    /// The init containers, sidecars among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    /// The node the pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The node labels the pod requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// The RuntimeClass overhead, added to the requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    /// The pod's priority, resolved from its PriorityClass at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The PriorityClass named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Pod-level requests and limits (PodLevelResources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s::ResourceRequirements>,
    /// `Always`, `OnFailure` or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// How long the kubelet waits after SIGTERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// The taints the pod tolerates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<k8s::Toleration>>,
    /// Topology spread constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<k8s::TopologySpreadConstraint>>,
    /// The volumes: what they claim, not how they mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
}

/// `Container`: its name, requests and limits, ports and restart policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// The container's name.
    #[serde(default)]
    pub name: String,
    /// The image, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Ports; those with a `hostPort` take it on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<k8s::ContainerPort>>,
    /// Requests and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s::ResourceRequirements>,
    /// `Always` on an init container makes it a sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// `Volume`: its name and what it claims.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// The volume's name.
    #[serde(default)]
    pub name: String,
    /// A PersistentVolumeClaim it mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<k8s::PersistentVolumeClaimVolumeSource>,
    /// A generic ephemeral volume: a claim made for the pod (boxed: its template is large
    /// and rare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<Box<k8s::EphemeralVolumeSource>>,
}

/// `PodStatus`: the phase, the conditions, the nominated node and the start time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// `PodScheduled`, `Ready` and the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<k8s::PodCondition>>,
    /// The node kube-scheduler nominated for a preempting pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the kubelet acknowledged the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

impl Serialize for Pod {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let fields = 3 + usize::from(self.spec.is_some()) + usize::from(self.status.is_some());
        let mut out = serializer.serialize_struct("Pod", fields)?;
        out.serialize_field("apiVersion", "v1")?;
        out.serialize_field("kind", "Pod")?;
        out.serialize_field("metadata", &self.metadata)?;
        if let Some(spec) = &self.spec {
            out.serialize_field("spec", spec)?;
        }
        if let Some(status) = &self.status {
            out.serialize_field("status", status)?;
        }
        out.end()
    }
}

impl k8s_openapi::Resource for Pod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Pod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<k8s::Container> for Container {
    fn from(c: k8s::Container) -> Self {
        Self {
            name: c.name,
            image: c.image,
            ports: c.ports,
            resources: c.resources,
            restart_policy: c.restart_policy,
        }
    }
}

impl From<k8s::Volume> for Volume {
    fn from(v: k8s::Volume) -> Self {
        Self {
            name: v.name,
            persistent_volume_claim: v.persistent_volume_claim,
            ephemeral: v.ephemeral.map(Box::new),
        }
    }
}

impl From<k8s::PodSpec> for PodSpec {
    fn from(s: k8s::PodSpec) -> Self {
        Self {
            affinity: s.affinity,
            containers: s.containers.into_iter().map(Container::from).collect(),
            host_network: s.host_network,
            init_containers: s.init_containers.map(|c| c.into_iter().map(Container::from).collect()),
            node_name: s.node_name,
            node_selector: s.node_selector,
            overhead: s.overhead,
            priority: s.priority,
            priority_class_name: s.priority_class_name,
            resources: s.resources,
            restart_policy: s.restart_policy,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations,
            topology_spread_constraints: s.topology_spread_constraints,
            volumes: s.volumes.map(|v| v.into_iter().map(Volume::from).collect()),
        }
    }
}

impl From<k8s::PodStatus> for PodStatus {
    fn from(s: k8s::PodStatus) -> Self {
        Self {
            conditions: s.conditions,
            nominated_node_name: s.nominated_node_name,
            phase: s.phase,
            start_time: s.start_time,
        }
    }
}

impl From<k8s::Pod> for Pod {
    fn from(p: k8s::Pod) -> Self {
        Self {
            metadata: p.metadata,
            spec: p.spec.map(PodSpec::from),
            status: p.status.map(PodStatus::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_reads_from_the_apis_json_keeping_what_carpool_reads() {
        let p: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"nodeSelector": {"kubernetes.io/arch": "arm64"},
                "containers": [{"name": "c", "image": "nginx", "command": ["nginx"], "env": [{"name": "A", "value": "b"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                    {"name": "token", "projected": {"sources": []}}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}]},
            "status": {"phase": "Pending", "nominatedNodeName": "n1",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": false, "restartCount": 0}]}
        }))
        .unwrap();
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].ports.as_ref().unwrap()[0].host_port, Some(8080));
        assert_eq!(
            spec.volumes.as_ref().unwrap()[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "data-0"
        );
        assert_eq!(p.status.as_ref().unwrap().nominated_node_name.as_deref(), Some("n1"));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            (v["apiVersion"].as_str(), v["kind"].as_str()),
            (Some("v1"), Some("Pod"))
        );
        assert!(v["spec"]["containers"][0].get("command").is_none());
        assert!(v["status"].get("containerStatuses").is_none());
    }

    #[test]
    fn a_k8s_openapi_pod_converts_with_the_same_fields() {
        let full: k8s::Pod = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "b"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}], "priority": 7,
                "initContainers": [{"name": "side", "restartPolicy": "Always"}]}
        }))
        .unwrap();
        let slim = Pod::from(full.clone());
        let again: Pod = serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        assert_eq!(slim, again);
        assert_eq!(
            slim.spec.unwrap().init_containers.unwrap()[0].restart_policy.as_deref(),
            Some("Always")
        );
    }

    #[test]
    fn a_pod_and_its_container_take_a_fraction_of_k8s_openapis_room() {
        assert!(std::mem::size_of::<Pod>() * 2 < std::mem::size_of::<k8s::Pod>());
        assert!(std::mem::size_of::<Container>() * 8 < std::mem::size_of::<k8s::Container>());
    }
}
