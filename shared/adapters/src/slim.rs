//! What the kube adapter keeps of the objects it lists: the fields Carpool reads, without
//! the bulk it never does. Each page of a list (500 objects) is slimmed as it arrives, so a
//! cluster's pods are held slim, never whole.
//!
//! Dropped, from every object: `metadata.managedFields` (often the largest part of an
//! object) and the `kubectl.kubernetes.io/last-applied-configuration` annotation (a copy
//! of the object). From pods also: the containers' environment, commands, arguments,
//! probes, lifecycle hooks and volume mounts, and the containers' statuses. Kept: names,
//! labels, other annotations, owners, requests and limits, ports, node selection,
//! affinity, tolerations, spread, volumes, priority, phase, conditions and the nominated
//! node: everything the planner, the drain and the disruption methods read.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The annotation `kubectl apply` keeps a copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what Carpool never reads from an object's metadata.
pub fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

fn container(c: &mut Container) {
    c.env = None;
    c.env_from = None;
    c.command = None;
    c.args = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
    c.volume_mounts = None;
    c.volume_devices = None;
}

/// Drops what Carpool never reads from a pod.
pub fn pod(p: &mut Pod) {
    metadata(&mut p.metadata);
    if let Some(spec) = p.spec.as_mut() {
        spec.containers.iter_mut().for_each(container);
        spec.init_containers.iter_mut().flatten().for_each(container);
        spec.ephemeral_containers = None;
    }
    if let Some(status) = p.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_keeps_what_the_planner_reads_and_loses_the_bulk() {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {LAST_APPLIED: "{...}", "karpenter.sh/do-not-disrupt": "true"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]},
            "spec": {"nodeSelector": {"kubernetes.io/arch": "arm64"},
                "containers": [{"name": "c", "image": "nginx", "command": ["nginx"], "env": [{"name": "A", "value": "b"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}]},
            "status": {"phase": "Pending", "nominatedNodeName": "n1",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": false, "restartCount": 0}]}
        }))
        .unwrap();
        pod(&mut p);
        let v = serde_json::to_value(&p).unwrap();
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(
            v["metadata"]["annotations"],
            json!({"karpenter.sh/do-not-disrupt": "true"})
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        let c = &v["spec"]["containers"][0];
        assert!(c.get("env").is_none() && c.get("command").is_none());
        assert_eq!(c["resources"]["requests"]["cpu"], "1");
        assert_eq!(c["ports"][0]["hostPort"], 8080);
        assert_eq!(v["spec"]["nodeSelector"]["kubernetes.io/arch"], "arm64");
        assert_eq!(v["spec"]["tolerations"][0]["key"], "gpu");
        assert!(v["status"].get("containerStatuses").is_none());
        assert_eq!(v["status"]["nominatedNodeName"], "n1");
        assert_eq!(v["status"]["conditions"][0]["reason"], "Unschedulable");
    }
}
