//! A pod's effective requests, as kube-scheduler computes them
//! (`k8s.io/component-helpers/resource.PodRequests`).
//!
//! 1. Each container requests what its `requests` say; a resource with a limit and no
//!    request requests its limit (the API server's defaulting, applied here so that
//!    hand-written manifests behave like stored ones).
//! 2. The app containers are summed.
//! 3. Init containers run one at a time, before the app containers. A restartable init
//!    container (`restartPolicy: Always`, a sidecar) keeps running: it is added to the
//!    sum, and to every init container that starts after it.
//! 4. The pod requests the larger of (2 + sidecars) and the largest init step.
//! 5. Pod-level `spec.resources` requests, where set, replace the container total for
//!    that resource.
//! 6. `spec.overhead` (the RuntimeClass overhead) is added.

use crate::model::pod::{Container, PodSpec};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::resources::{ResourceError, Resources};

/// A pod whose resource requests cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}")]
pub struct RequestsError {
    /// The field path of the bad list, e.g. `spec.containers[1].resources.requests`.
    pub field: String,
    /// What is wrong in it.
    #[source]
    pub source: ResourceError,
}

fn container_requests(c: &Container, field: &str) -> Result<Resources, RequestsError> {
    let Some(ResourceRequirements { requests, limits, .. }) = &c.resources else {
        return Ok(Resources::default());
    };
    let mut merged: BTreeMap<String, K8sQuantity> = limits.clone().unwrap_or_default();
    merged.extend(requests.clone().unwrap_or_default());
    Resources::from_k8s(&merged).map_err(|source| RequestsError {
        field: format!("{field}.resources"),
        source,
    })
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The resources the scheduler reserves for a pod (without the pod slot itself).
pub fn effective_requests(spec: &PodSpec) -> Result<Resources, RequestsError> {
    let mut total = Resources::default();
    for (i, c) in spec.containers.iter().enumerate() {
        total = total.plus(&container_requests(c, &format!("spec.containers[{i}]"))?);
    }

    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let own = container_requests(c, &format!("spec.initContainers[{i}]"))?;
        let step = if is_sidecar(c) {
            total = total.plus(&own);
            sidecars = sidecars.plus(&own);
            sidecars.clone()
        } else {
            own.plus(&sidecars)
        };
        init_peak = init_peak.max(&step);
    }
    total = total.max(&init_peak);

    if let Some(pod_level) = &spec.resources {
        let mut merged: BTreeMap<String, K8sQuantity> = pod_level.limits.clone().unwrap_or_default();
        merged.extend(pod_level.requests.clone().unwrap_or_default());
        let pod_level = Resources::from_k8s(&merged).map_err(|source| RequestsError {
            field: "spec.resources".into(),
            source,
        })?;
        for name in pod_level.names().map(str::to_string).collect::<Vec<_>>() {
            total.set(&name, pod_level.get(&name));
        }
    }

    if let Some(overhead) = &spec.overhead {
        let overhead = Resources::from_k8s(overhead).map_err(|source| RequestsError {
            field: "spec.overhead".into(),
            source,
        })?;
        total = total.plus(&overhead);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::{AWS_NEURON, NVIDIA_GPU, POD_ENI};

    fn spec(yaml: &str) -> PodSpec {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn app_containers_are_summed() {
        let s = spec(
            r#"
containers:
- name: a
  resources: {requests: {cpu: 100m, memory: 128Mi}}
- name: b
  resources: {requests: {cpu: "1", memory: 1Gi}}
"#,
        );
        let r = effective_requests(&s).unwrap();
        assert_eq!((r.cpu_millis, r.memory), (1100, (1 << 30) + (128 << 20)));
    }

    #[test]
    fn a_large_init_container_sets_the_request_when_it_exceeds_the_apps() {
        let s = spec(
            r#"
initContainers:
- name: migrate
  resources: {requests: {cpu: "2", memory: 256Mi}}
containers:
- name: app
  resources: {requests: {cpu: 500m, memory: 1Gi}}
"#,
        );
        let r = effective_requests(&s).unwrap();
        assert_eq!(r.cpu_millis, 2000, "init cpu is larger than the app's");
        assert_eq!(r.memory, 1 << 30, "app memory is larger than the init's");
    }

    #[test]
    fn sidecars_add_to_the_apps_and_to_later_init_containers() {
        let s = spec(
            r#"
initContainers:
- name: proxy
  restartPolicy: Always
  resources: {requests: {cpu: 200m, memory: 64Mi}}
- name: setup
  resources: {requests: {cpu: "1", memory: 32Mi}}
containers:
- name: app
  resources: {requests: {cpu: 300m, memory: 512Mi}}
"#,
        );
        let r = effective_requests(&s).unwrap();
        // apps + sidecar = 500m / 576Mi; setup step = 1000m + 200m sidecar = 1200m / 96Mi.
        assert_eq!(r.cpu_millis, 1200);
        assert_eq!(r.memory, 576 << 20);
    }

    #[test]
    fn a_sidecar_started_after_an_init_container_does_not_add_to_it() {
        let s = spec(
            r#"
initContainers:
- name: setup
  resources: {requests: {cpu: "1"}}
- name: proxy
  restartPolicy: Always
  resources: {requests: {cpu: 200m}}
containers:
- name: app
  resources: {requests: {cpu: 100m}}
"#,
        );
        assert_eq!(effective_requests(&s).unwrap().cpu_millis, 1000);
    }

    #[test]
    fn overhead_and_extended_resources_are_counted() {
        let s = spec(
            r#"
overhead: {cpu: 250m, memory: 120Mi}
containers:
- name: infer
  resources:
    limits: {nvidia.com/gpu: "2", aws.amazon.com/neuron: "1", vpc.amazonaws.com/pod-eni: "1"}
    requests: {cpu: "4", memory: 16Gi}
"#,
        );
        let r = effective_requests(&s).unwrap();
        assert_eq!(r.cpu_millis, 4250);
        assert_eq!(r.memory, (16 << 30) + (120 << 20));
        assert_eq!(r.get(NVIDIA_GPU), 2, "a limit with no request requests the limit");
        assert_eq!(r.get(AWS_NEURON), 1);
        assert_eq!(r.get(POD_ENI), 1);
    }

    #[test]
    fn pod_level_requests_replace_the_container_total() {
        let s = spec(
            r#"
resources: {requests: {cpu: "3"}}
containers:
- name: a
  resources: {requests: {cpu: "1", memory: 1Gi}}
"#,
        );
        let r = effective_requests(&s).unwrap();
        assert_eq!((r.cpu_millis, r.memory), (3000, 1 << 30));
    }

    #[test]
    fn a_bad_quantity_names_the_container_field() {
        let s = spec("containers: [{name: a, resources: {requests: {memory: lots}}}]");
        let err = effective_requests(&s).unwrap_err();
        assert_eq!(err.field, "spec.containers[0].resources");
        let message = crate::error_chain::Chain(&err).to_string();
        assert!(message.contains("memory"), "{message}");
    }
}
