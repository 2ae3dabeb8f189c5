//! A pod's effective requests, as kube-scheduler's NodeResourcesFit computes them
//! (`k8s.io/component-helpers/resource.PodRequests`), written again for the checker:
//!
//! - each container requests its `requests`, and a resource it only limits requests its
//!   limit (the API server's defaulting, `SetDefaults_Pod`, which stored pods have had);
//! - app containers are summed, and so are restartable init containers (sidecars,
//!   `restartPolicy: Always`), which keep running;
//! - each init container runs with the sidecars started before it; the pod requests the
//!   larger, resource by resource, of that peak and the running sum;
//! - pod-level `spec.resources` (PodLevelResources) replaces the containers' total for the
//!   resources it supports (`IsSupportedPodLevelResource`: cpu, memory, hugepages-*);
//! - `spec.overhead` (the RuntimeClass overhead) is added;
//! - the pod takes one `pods` slot.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::model::Resources;
use crate::model::pod::{Container, PodSpec};

fn defaulted(r: Option<&ResourceRequirements>) -> BTreeMap<String, K8sQuantity> {
    let Some(r) = r else { return BTreeMap::new() };
    let mut out = r.limits.clone().unwrap_or_default();
    out.extend(r.requests.clone().unwrap_or_default());
    out
}

fn container(c: &Container) -> Result<Resources, String> {
    Resources::from_k8s(&defaulted(c.resources.as_ref())).map_err(|e| format!("container {}: {e}", c.name))
}

/// What the pod requests, with its pod slot; the error names the unreadable list.
pub(crate) fn pod_requests(spec: &PodSpec) -> Result<Resources, String> {
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum = sum.plus(&container(c)?);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let own = container(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sum = sum.plus(&own);
            sidecars = sidecars.plus(&own);
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&own.plus(&sidecars));
        }
    }
    let mut total = sum.max(&init_peak);
    if let Some(pod_level) = &spec.resources {
        let pod_level = Resources::from_k8s(&defaulted(Some(pod_level))).map_err(|e| format!("spec.resources: {e}"))?;
        let supported: Vec<String> = pod_level
            .names()
            .filter(|n| *n == "cpu" || *n == "memory" || n.starts_with("hugepages-"))
            .map(str::to_string)
            .collect();
        for name in supported {
            total.set(&name, pod_level.get(&name));
        }
    }
    if let Some(o) = &spec.overhead {
        total = total.plus(&Resources::from_k8s(o).map_err(|e| format!("spec.overhead: {e}"))?);
    }
    total.pods += 1;
    Ok(total)
}
