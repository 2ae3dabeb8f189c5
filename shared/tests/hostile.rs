//! Issue 41, must-show: cluster objects with extreme values (CapacityBuffers, NodePools,
//! EC2NodeClasses, NodeOverlays, pods), as any namespace's user or a bug elsewhere may
//! write them within what the CRDs allow, beside a plain NodePool and a plain pending pod.
//! Whatever they hold, a provisioner run does not panic, does not allocate without bound
//! (the test binary's heap is capped: an allocation past [`HEAP_LIMIT`] fails the test),
//! and the plain pod is still planned on the plain pool.
//!
//! Its own test binary, for the capped global allocator.

mod plain;

use std::alloc::System;

use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known as wk;
use plain::Plain;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};

#[global_allocator]
static HEAP: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// Far above a run's normal peak, far below the machine's memory.
const HEAP_LIMIT: usize = 3 << 30;

/// Quantities at and past the edges: zero, negative, huge, the largest int64, exa.
fn quantity() -> impl Strategy<Value = Value> {
    select(vec![
        json!("0"),
        json!("-1"),
        json!("1n"),
        json!("1000000000"),
        json!("9223372036854775807"),
        json!("1Ei"),
        json!("8E"),
        json!(i64::MAX),
    ])
}

/// Durations at the edges: `Never`, zero, one nanosecond, a thousand years, and more than
/// `SystemTime` can add.
fn duration() -> impl Strategy<Value = Value> {
    select(vec![
        json!("Never"),
        json!("0s"),
        json!("1ns"),
        json!("8760000h"),
        json!("5000000000000000h"),
    ])
}

fn int64() -> impl Strategy<Value = Value> {
    select(vec![
        json!(0),
        json!(1),
        json!(-1),
        json!(i32::MAX),
        json!(i64::MAX),
        json!(i64::MIN),
    ])
}

fn int32() -> impl Strategy<Value = Value> {
    select(vec![json!(0), json!(1), json!(-1), json!(i32::MAX), json!(i32::MIN)])
}

/// A NodePool `hostile`, its class `hostile`, with extreme values.
fn hostile_pool() -> impl Strategy<Value = Value> {
    (
        int32(),
        quantity(),
        prop::option::of(int64()),
        duration(),
        duration(),
        duration(),
        int32(),
        select(vec!["0", "100%", "1000000000%", "-5", "2147483648"]),
    )
        .prop_map(|(weight, cpu, replicas, expire, tgp, after, min_values, budget)| {
            let mut p = NodePoolBuilder::new("hostile")
                .requirement(wk::CAPACITY_TYPE, "In", &["on-demand", "spot"])
                .build();
            p["spec"]["weight"] = weight;
            p["spec"]["limits"] = json!({"cpu": cpu, "memory": "1Ei", "nodes": cpu});
            if let Some(r) = replicas {
                p["spec"]["replicas"] = r;
            }
            p["spec"]["template"]["spec"]["expireAfter"] = expire;
            p["spec"]["template"]["spec"]["terminationGracePeriod"] = tgp;
            p["spec"]["template"]["spec"]["requirements"][0]["minValues"] = min_values;
            p["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("hostile");
            p["spec"]["disruption"] = json!({"consolidateAfter": after, "budgets": [{"nodes": budget}]});
            p
        })
}

fn hostile_class() -> impl Strategy<Value = Value> {
    (int32(), quantity(), quantity()).prop_map(|(max_pods, reserved, volume)| {
        let mut c = EC2NodeClassBuilder::standard().build();
        c["metadata"]["name"] = json!("hostile");
        c["spec"]["kubelet"] = json!({"maxPods": max_pods, "systemReserved": {"cpu": reserved, "memory": reserved}});
        c["spec"]["blockDeviceMappings"] =
            json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": volume, "volumeType": "gp3"}}]);
        c
    })
}

fn hostile_buffer() -> impl Strategy<Value = Value> {
    (
        prop::option::of(int32()),
        prop::option::of(quantity()),
        prop::option::of(int32()),
    )
        .prop_map(|(replicas, cpu, percentage)| {
            let mut spec = json!({"podTemplateRef": {"name": "chunk"}});
            if let Some(r) = replicas {
                spec["replicas"] = r;
            }
            if let Some(c) = cpu {
                spec["limits"] = json!({"cpu": c, "memory": c});
            }
            if let Some(p) = percentage {
                spec["percentage"] = p;
            }
            json!({
                "apiVersion": "autoscaling.x-k8s.io/v1beta1",
                "kind": "CapacityBuffer",
                "metadata": {"name": "hostile", "namespace": "tenant"},
                "spec": spec,
            })
        })
}

fn hostile_overlay() -> impl Strategy<Value = Value> {
    (
        select(vec!["-100%", "+1000000000%", "-99999999999", "+1e300", "0"]),
        quantity(),
        int32(),
    )
        .prop_map(|(adjustment, capacity, weight)| {
            json!({
                "apiVersion": "karpenter.sh/v1alpha1",
                "kind": "NodeOverlay",
                "metadata": {"name": "hostile"},
                "spec": {
                    "requirements": [{"key": wk::CAPACITY_TYPE, "operator": "In", "values": ["on-demand", "spot"]}],
                    "priceAdjustment": adjustment,
                    "capacity": {"example.com/device": capacity},
                    "weight": weight,
                },
            })
        })
}

fn hostile_pod() -> impl Strategy<Value = (Value, Value, Value, Value)> {
    (quantity(), quantity(), int32(), int64())
}

fn hostile_chunk(cpu: &Value) -> k8s_openapi::api::core::v1::PodTemplate {
    serde_json::from_value(json!({
        "metadata": {"name": "chunk", "namespace": "tenant"},
        "template": {"spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": "1Mi"}}}]}},
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn extreme_objects_neither_panic_nor_exhaust_memory_and_the_plain_pod_is_still_planned(
        pool in hostile_pool(),
        class in hostile_class(),
        buffer in hostile_buffer(),
        overlay in hostile_overlay(),
        (cpu, memory, skew, grace) in hostile_pod(),
    ) {
        let _ = HEAP.set_limit(HEAP_LIMIT);
        let w = Plain::new();
        let cluster = &w.cluster;
        cluster.add_nodepool(pool);
        cluster.add_ec2nodeclass(class);
        cluster.add_capacity_buffer(buffer);
        cluster.add_pod_template(hostile_chunk(&cpu));
        cluster.add_nodeoverlay(overlay);
        let hostile = PodBuilder::new("hostile-0")
            .namespace("tenant")
            .label("app", "hostile")
            .requests("1", "1Gi")
            .spec("containers", json!([{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]))
            .spec("terminationGracePeriodSeconds", grace)
            .spec("topologySpreadConstraints", json!([{"maxSkew": skew, "topologyKey": wk::ZONE,
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "hostile"}}}]))
            .unschedulable()
            .pod();
        if let Ok(p) = hostile {
            cluster.add_pod(p);
        }
        cluster.add_pod(
            PodBuilder::new("plain-0")
                .namespace("api")
                .requests("1", "1Gi")
                .owner("apps/v1", "ReplicaSet", "api-5c4")
                .spec("nodeSelector", json!({wk::NODEPOOL: "general"}))
                .unschedulable()
                .pod()
                .unwrap(),
        );
        let report = w.run();
        let unplaced: Vec<_> = report.batches.iter().flat_map(|b| &b.unschedulable).filter(|u| u.pod == "api/plain-0").collect();
        prop_assert!(unplaced.is_empty(), "the plain pod was not planned: {:?}", unplaced);
        prop_assert!(
            report.batches.iter().any(|b| b.pods_planned >= 1),
            "the plain pod was not planned: {:?}", report.batches
        );
    }
}
