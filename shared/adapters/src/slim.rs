//! What the kube adapter keeps of the objects it lists: the fields Carpool reads, without
//! the bulk it never does. Each page of a list (500 objects) is slimmed as it arrives, so a
//! cluster's objects are held slim, never whole.
//!
//! Pods are read into Carpool's own [`carpool::model::pod::Pod`], which has only the
//! fields the planner, the drain and the disruption methods read: serde skips the
//! containers' environment, commands, probes and mounts, the volumes' sources other than
//! claims, and the containers' statuses as the page is read. What is left to drop here,
//! from every object, is in the metadata: `metadata.managedFields` (often the largest part
//! of an object) and the `kubectl.kubernetes.io/last-applied-configuration` annotation (a
//! copy of the object).

use carpool::model::pod::Pod;
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

/// Drops what Carpool never reads from a pod: its type has already left out the rest.
pub fn pod(p: &mut Pod) {
    metadata(&mut p.metadata);
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
