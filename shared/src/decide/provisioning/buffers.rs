//! CapacityBuffers as pods to plan room for (Karpenter's virtual pods:
//! kubernetes-sigs/karpenter `pkg/state/virtualpods/utilities.go`, `BuildVirtualPods`, and
//! `pkg/controllers/capacitybuffer`, `computeReplicas`): each chunk of a buffer is a pending
//! pod of the buffer's pod template that never exists. The provisioner plans room for them
//! as for any pending pod, where no existing node or launch in flight has it; the
//! consolidator places them first, as pending pods, so that it never takes their room
//! away (Karpenter: "consolidation naturally accounts for buffer pods because
//! SimulateScheduling injects virtual pods into the pending set").
//!
//! The size: `replicas`, capped by `limits` (each limited resource floored by one chunk's
//! request); with neither `replicas` nor a scheduled size, as many chunks as `limits`
//! allow. While the buffer's schedule (Carpool's annotations,
//! [`crate::model::capacity_buffer::BufferSchedule`]) is open, its scheduled size replaces
//! `replicas`, capped by `limits` the same way.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::PodTemplate;
use serde_json::json;

use crate::model::capacity_buffer::{ACTIVE_CAPACITY, CapacityBuffer};
use crate::model::pod::Pod;
use crate::model::pod_requests::effective_requests;
use crate::model::{Quantity, Resources};

/// Marks a virtual pod (Karpenter's `FakePodAnnotationKey`).
pub const VIRTUAL_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The buffer a virtual pod belongs to (Karpenter's `BufferNameAnnotation`).
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";

/// The most chunks one buffer gives. A buffer's `replicas` has no upper bound (the CRD
/// allows 2³¹−1), nor has a buffer sized by `limits` alone; every chunk is a pod that each
/// run of the provisioner and the consolidator builds and plans, so one namespaced object
/// could otherwise exhaust their memory and stop all scaling in the cluster. A buffer
/// larger than this is planned at this size, and says so.
pub const MAX_CHUNKS_PER_BUFFER: u32 = 1_000;

/// The most chunks all buffers give together, for the same reason: the buffers are
/// sized in order (by namespace and name), and those past this total are cut, each
/// saying so. About the 5,000 pending pods the planner plans in a fraction of a second.
pub const MAX_CHUNKS: u32 = 5_000;

/// The buffers' chunks, and the buffers that give none, with why.
#[derive(Clone, Debug, Default)]
pub struct BufferPods {
    /// One pending pod per chunk.
    pub pods: Vec<Pod>,
    /// Per buffer, `namespace/name` and its chunks.
    pub sizes: Vec<(String, u32)>,
    /// Buffers that give no chunk, or fewer than they ask for, `namespace/name` and why.
    pub skipped: Vec<(String, String)>,
}

/// Whether `pod` is a buffer's chunk.
pub fn is_virtual(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(VIRTUAL_POD_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// How many chunks of `requests` fit in `limits` (the fewest over the resources both
/// name), `None` when the limits name none of them (Karpenter's
/// `calculateLimitReplicas`).
fn limit_replicas(limits: &std::collections::BTreeMap<String, Quantity>, requests: &Resources) -> Option<u32> {
    limits
        .iter()
        .filter_map(|(name, q)| {
            let request = requests.get(name);
            (request > 0).then(|| {
                // cpu in millicores, as requests are counted.
                let limit = if name == "cpu" { q.millis_ceil() } else { q.units_ceil() };
                u32::try_from(limit / request).unwrap_or(u32::MAX)
            })
        })
        .min()
}

/// The chunks of `buffers` at `now`, from their pod templates among `templates`.
///
/// The sizes are capped before any chunk is built: by [`MAX_CHUNKS_PER_BUFFER`] per
/// buffer, then by what is left of [`MAX_CHUNKS`], the buffers taken by namespace and
/// name so that the same ones win every run; a buffer cut is listed in
/// [`BufferPods::skipped`] with the size it asked for and the size it got.
pub fn virtual_pods(buffers: &[CapacityBuffer], templates: &[PodTemplate], now: SystemTime) -> BufferPods {
    let mut out = BufferPods::default();
    let mut left = MAX_CHUNKS;
    let mut ordered: Vec<&CapacityBuffer> = buffers.iter().collect();
    ordered.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
    for b in ordered {
        let key = format!("{}/{}", b.namespace(), b.name());
        let strategy = b.spec.provisioning_strategy.as_deref().unwrap_or(ACTIVE_CAPACITY);
        if strategy != ACTIVE_CAPACITY {
            out.skipped.push((
                key,
                format!("provisioningStrategy {strategy:?}: Carpool keeps {ACTIVE_CAPACITY} buffers only"),
            ));
            continue;
        }
        let Some(reference) = &b.spec.pod_template_ref else {
            out.skipped.push((
                key,
                if b.spec.scalable_ref.is_some() {
                    "scalableRef: Carpool reads buffers of a podTemplateRef only; name the workload's PodTemplate"
                        .into()
                } else {
                    "neither podTemplateRef nor scalableRef is set".into()
                },
            ));
            continue;
        };
        let Some(template) = templates
            .iter()
            .find(|t| {
                t.metadata.name.as_deref() == Some(reference.name.as_str())
                    && t.metadata.namespace.as_deref().unwrap_or("default") == b.namespace()
            })
            .and_then(|t| t.template.clone())
        else {
            out.skipped.push((
                key,
                format!("PodTemplate {}/{} not found", b.namespace(), reference.name),
            ));
            continue;
        };
        let Some(pod) = chunk(b, &template, 0) else {
            out.skipped
                .push((key, "its pod template does not read as a pod".into()));
            continue;
        };
        let scheduled = b
            .schedule()
            .ok()
            .flatten()
            .filter(|s| s.is_open(now))
            .map(|s| s.replicas);
        let wanted = scheduled.or(b.spec.replicas.map(|r| u32::try_from(r).unwrap_or(0)));
        let requests = pod
            .spec
            .as_ref()
            .and_then(|s| effective_requests(s).ok())
            .unwrap_or_default();
        let capped = limit_replicas(&b.spec.limits, &requests);
        let asked = match (wanted, capped) {
            (Some(w), Some(c)) => w.min(c),
            (Some(w), None) => w,
            (None, Some(c)) => c,
            (None, None) => 0,
        };
        let size = asked.min(MAX_CHUNKS_PER_BUFFER).min(left);
        left -= size;
        if size < asked {
            let why = if size < asked.min(MAX_CHUNKS_PER_BUFFER) {
                format!("all buffers together give at most {MAX_CHUNKS} chunks")
            } else {
                format!("a buffer gives at most {MAX_CHUNKS_PER_BUFFER} chunks")
            };
            out.skipped.push((
                key.clone(),
                format!("sized {asked} chunks, planned {size}: {why} (the rest is skipped)"),
            ));
        }
        out.sizes.push((key, size));
        out.pods
            .extend((0..size).filter_map(|i| chunk(b, &template, i as usize + 1)));
    }
    out
}

/// Chunk `i` of buffer `b`: its template's labels and spec, without a node, volumes that
/// would need a claim, or a name kube-scheduler could bind, pending and unschedulable
/// (Karpenter's `BuildVirtualPods`, `sanitizeVirtualPodSpec`).
fn chunk(b: &CapacityBuffer, template: &k8s_openapi::api::core::v1::PodTemplateSpec, i: usize) -> Option<Pod> {
    let mut spec = template.spec.clone()?;
    spec.node_name = None;
    let dropped: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
        .map(|v| v.name.clone())
        .collect();
    if let Some(volumes) = &mut spec.volumes {
        volumes.retain(|v| !dropped.contains(&v.name));
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if let Some(mounts) = &mut c.volume_mounts {
            mounts.retain(|m| !dropped.contains(&m.name));
        }
    }
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("capacity-buffer-{}-{i}", b.name()),
            "namespace": b.namespace(),
            "uid": format!("{}-{i}", b.metadata.uid.as_deref().unwrap_or(b.name())),
            "labels": labels,
            "annotations": {
                VIRTUAL_POD_ANNOTATION: "true",
                BUFFER_NAME_ANNOTATION: b.name(),
            },
        },
        "spec": spec,
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::manifest::from_yaml;

    fn template(cpu: &str) -> PodTemplate {
        serde_json::from_value(json!({
            "metadata": {"name": "web-chunk", "namespace": "web"},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx",
                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            },
        }))
        .unwrap()
    }

    fn buffer(spec: &str) -> CapacityBuffer {
        from_yaml(&format!(
            "apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {{name: burst, namespace: web}}
spec: {spec}
"
        ))
        .unwrap()
    }

    #[test]
    fn a_buffer_of_four_chunks_is_four_pending_virtual_pods_of_its_template() {
        let b = buffer("{podTemplateRef: {name: web-chunk}, replicas: 4}");
        let out = virtual_pods(&[b], &[template("2")], SystemTime::UNIX_EPOCH);
        assert_eq!(out.pods.len(), 4);
        assert_eq!(out.sizes, vec![("web/burst".to_string(), 4)]);
        for p in &out.pods {
            assert!(is_virtual(p));
            assert!(crate::decide::provisioning::pod::is_provisionable(p));
            assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "web");
        }
    }

    #[test]
    fn limits_cap_the_chunks_and_alone_size_the_buffer() {
        let capped = buffer("{podTemplateRef: {name: web-chunk}, replicas: 10, limits: {cpu: \"5\"}}");
        let alone = buffer("{podTemplateRef: {name: web-chunk}, limits: {cpu: \"6\"}}");
        let out = virtual_pods(&[capped, alone], &[template("2")], SystemTime::UNIX_EPOCH);
        assert_eq!(
            out.sizes,
            vec![("web/burst".to_string(), 2), ("web/burst".to_string(), 3)]
        );
    }

    /// Issue 41, item 1: one buffer of 2³¹−1 replicas, or one sized by a huge limit alone,
    /// made every run build that many pods and run out of memory, which stopped scaling
    /// everywhere in the cluster. Each is cut to [`MAX_CHUNKS_PER_BUFFER`] before a pod is
    /// built, and says so.
    #[test]
    fn a_buffer_of_two_billion_replicas_or_sized_by_a_huge_limit_alone_gives_a_bounded_number_of_chunks() {
        let huge = buffer("{podTemplateRef: {name: web-chunk}, replicas: 2147483647}");
        let mut by_limits = buffer("{podTemplateRef: {name: web-chunk}, limits: {cpu: \"1000000000\", memory: 1Ei}}");
        by_limits.metadata.name = Some("by-limits".into());
        let out = virtual_pods(&[huge, by_limits], &[template("2")], SystemTime::UNIX_EPOCH);
        assert_eq!(out.pods.len(), 2 * MAX_CHUNKS_PER_BUFFER as usize);
        assert_eq!(
            out.sizes,
            vec![
                ("web/burst".to_string(), MAX_CHUNKS_PER_BUFFER),
                ("web/by-limits".to_string(), MAX_CHUNKS_PER_BUFFER)
            ]
        );
        assert_eq!(out.skipped.len(), 2, "{:?}", out.skipped);
        assert!(
            out.skipped[0].1.contains("sized 2147483647 chunks, planned 1000"),
            "{:?}",
            out.skipped
        );
        assert!(out.skipped[1].1.contains("at most 1000"), "{:?}", out.skipped);
    }

    /// Many buffers together are cut at [`MAX_CHUNKS`], the same ones every run (by
    /// namespace and name), and the one cut says so.
    #[test]
    fn many_buffers_together_give_at_most_the_total_and_the_last_by_name_is_cut() {
        let buffers: Vec<CapacityBuffer> = (0..7)
            .map(|i| {
                let mut b = buffer("{podTemplateRef: {name: web-chunk}, replicas: 900}");
                b.metadata.name = Some(format!("b{}", 6 - i));
                b
            })
            .collect();
        let out = virtual_pods(&buffers, &[template("100m")], SystemTime::UNIX_EPOCH);
        assert_eq!(out.pods.len(), MAX_CHUNKS as usize);
        let sizes: Vec<u32> = out.sizes.iter().map(|(_, s)| *s).collect();
        assert_eq!(sizes, vec![900, 900, 900, 900, 900, 500, 0]);
        assert_eq!(out.sizes[6].0, "web/b6");
        assert_eq!(out.skipped.len(), 2, "{:?}", out.skipped);
        assert!(
            out.skipped[0]
                .1
                .contains("all buffers together give at most 5000 chunks")
        );
    }

    #[test]
    fn a_buffer_without_its_template_or_of_another_strategy_gives_nothing_and_says_why() {
        let missing = buffer("{podTemplateRef: {name: gone}, replicas: 2}");
        let scalable = buffer("{scalableRef: {apiGroup: apps, kind: Deployment, name: web}, percentage: 10}");
        let passive = buffer("{podTemplateRef: {name: web-chunk}, replicas: 2, provisioningStrategy: other}");
        let out = virtual_pods(&[missing, scalable, passive], &[template("2")], SystemTime::UNIX_EPOCH);
        assert!(out.pods.is_empty());
        assert_eq!(out.skipped.len(), 3, "{:?}", out.skipped);
        assert!(out.skipped[0].1.contains("not found"));
        assert!(out.skipped[1].1.contains("scalableRef"));
        assert!(out.skipped[2].1.contains("provisioningStrategy"));
    }
}
