//! Issue 41, item 1: one CapacityBuffer stopped all scaling. A buffer's `replicas` has no
//! upper bound (the CRD allows 2³¹−1), nor has a buffer sized by `limits` alone, and each
//! run of the provisioner built that many virtual pods, so one namespaced object ran it
//! out of memory and nothing scaled anywhere in the cluster.
//!
//! Its own test binary, because it measures the heap: the global allocator counts every
//! byte ([`cap::Cap`]), and it is capped, so that a run that would exhaust the machine's
//! memory fails this test at once (an allocation refused) instead. One test in the binary,
//! so that nothing else allocates beside it.

mod plain;

use std::alloc::System;

use carpool::decide::provisioning::buffers::MAX_CHUNKS_PER_BUFFER;
use carpool::fixtures::PodBuilder;
use carpool::run::provision::RunReport;
use plain::Plain;
use serde_json::{Value, json};

#[global_allocator]
static HEAP: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// Far above a run's normal peak, far below the machine's memory.
const HEAP_LIMIT: usize = 4 << 30;

fn buffer(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "web"},
        "spec": spec,
    })
}

/// A cluster with one NodePool, a pending `api` pod, and `buffers`.
fn run_world(buffers: &[Value]) -> RunReport {
    let w = Plain::new();
    let cluster = &w.cluster;
    cluster.add_pod_template(
        serde_json::from_value(json!({
            "metadata": {"name": "web-chunk", "namespace": "web"},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx",
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]},
            },
        }))
        .unwrap(),
    );
    for b in buffers {
        cluster.add_capacity_buffer(b.clone());
    }
    cluster.add_pod(
        PodBuilder::new("api-0")
            .namespace("api")
            .requests("1", "1Gi")
            .owner("apps/v1", "ReplicaSet", "api-5c4")
            .unschedulable()
            .pod()
            .unwrap(),
    );
    w.run()
}

/// The pending pods the run's batches placed (on new nodes, or on the room launched for
/// the buffers in the same run), none left unschedulable.
fn planned_pods(r: &RunReport) -> usize {
    assert!(r.batches.iter().all(|b| b.unschedulable.is_empty()), "{:?}", r.batches);
    r.batches.iter().map(|b| b.pods_planned).max().unwrap_or(0)
}

#[test]
fn a_buffer_of_two_billion_replicas_or_sized_by_limits_alone_keeps_the_heap_at_its_normal_figure_and_pods_planned() {
    HEAP.set_limit(HEAP_LIMIT).unwrap();
    // The normal figure: the largest buffers a run plans, two of MAX_CHUNKS_PER_BUFFER.
    let most = MAX_CHUNKS_PER_BUFFER as i64;
    let normal = run_world(&[
        buffer("a", json!({"podTemplateRef": {"name": "web-chunk"}, "replicas": most})),
        buffer("b", json!({"podTemplateRef": {"name": "web-chunk"}, "replicas": most})),
    ]);
    let normal_peak = HEAP.max_allocated();
    assert_eq!(planned_pods(&normal), 1, "{:?}", normal.batches);

    // The hostile ones: 2³¹−1 replicas, and a size from limits alone (a million CPUs).
    let hostile = run_world(&[
        buffer(
            "a",
            json!({"podTemplateRef": {"name": "web-chunk"}, "replicas": i32::MAX}),
        ),
        buffer(
            "b",
            json!({"podTemplateRef": {"name": "web-chunk"}, "limits": {"cpu": "1000000", "memory": "1Ei"}}),
        ),
    ]);
    let hostile_peak = HEAP.max_allocated();
    assert!(
        hostile_peak <= normal_peak + normal_peak / 2,
        "the hostile run's heap peaked at {} MiB, the normal one at {} MiB",
        hostile_peak >> 20,
        normal_peak >> 20
    );
    // The other pod is still planned, and each buffer says it was cut.
    assert_eq!(planned_pods(&hostile), 1, "{:?}", hostile.batches);
    assert_eq!(
        hostile.buffers.sizes,
        vec![
            ("web/a".to_string(), MAX_CHUNKS_PER_BUFFER),
            ("web/b".to_string(), MAX_CHUNKS_PER_BUFFER)
        ]
    );
    assert_eq!(hostile.buffers.skipped.len(), 2, "{:?}", hostile.buffers.skipped);
    assert!(
        hostile.buffers.skipped[0].1.contains("planned 1000"),
        "{:?}",
        hostile.buffers.skipped
    );
}
