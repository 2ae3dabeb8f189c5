//! The planner on table-driven snapshots: each test builds a small cluster dump, plans it,
//! runs the independent checker on the plan, and asserts the behaviour a user expects.

use carpool::catalog::Catalog;
use carpool::decide::checker::{Violation, check};
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::decide::provisioning_plan_with_bound;
use carpool::fixtures::{NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::snapshot::Snapshot;
use serde_json::{Value, json};

use crate::support::{node_of, plan, planned, unschedulable};

fn pod(name: &str, cpu: &str, mem: &str) -> Value {
    PodBuilder::new(name)
        .label("app", name.split('-').next().unwrap())
        .requests(cpu, mem)
        .unschedulable()
        .build()
}

fn pods(prefix: &str, n: usize, cpu: &str, mem: &str) -> Vec<Value> {
    (0..n).map(|i| pod(&format!("{prefix}-{i}"), cpu, mem)).collect()
}

fn with(mut v: Value, path: &[&str], value: Value) -> Value {
    let mut cur = &mut v;
    for (i, k) in path.iter().enumerate() {
        if i == path.len() - 1 {
            cur[*k] = value.clone();
        } else {
            if cur.get(*k).is_none() {
                cur[*k] = json!({});
            }
            cur = &mut cur[*k];
        }
    }
    v
}

fn nodepool(name: &str, requirements: Value) -> Value {
    NodePoolBuilder::new(name).requirements(requirements).build()
}

fn existing_node(name: &str, zone: &str, cpu: &str, mem: &str) -> Value {
    NodeBuilder::new(name)
        .zone(zone)
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .label("karpenter.sh/capacity-type", "on-demand")
        .instance_type("m5.xlarge")
        .provider_id(&format!("aws:///{zone}/i-0{name}"))
        .allocatable("cpu", cpu)
        .allocatable("memory", mem)
        .allocatable("pods", "58")
        .ready(true)
        .build()
}

#[test]
fn every_bundled_example_plans_every_pod_and_passes_the_checker() {
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    for name in ["web-zone-spread", "batch-big-memory", "gpu-inference", "mixed"] {
        let path = format!("{}/../examples/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let mut snapshot = Snapshot::default();
        snapshot
            .add_text(&path, &std::fs::read_to_string(&path).unwrap())
            .unwrap();
        let plan = provisioning_plan_with_bound(&snapshot, &region);
        assert!(plan.unschedulable.is_empty(), "{name}: {:?}", plan.unschedulable);
        assert_eq!(check(&snapshot, &region, &plan), Vec::<Violation>::new(), "{name}");
        assert!(plan.cost_per_hour >= plan.lower_bound_per_hour.unwrap());
        assert!(
            plan.cost_per_hour <= plan.lower_bound_per_hour.unwrap() * 1.35,
            "{name}: cost far above the bound"
        );
    }
}

#[test]
fn pods_use_room_on_existing_nodes_before_new_nodes() {
    let mut items = vec![existing_node("n1", "us-east-1a", "3900m", "14Gi")];
    items.extend(pods("web", 3, "1", "1Gi"));
    items.extend(pods("big", 2, "2", "2Gi"));
    let p = plan(items);
    let on_existing: usize = p.existing.iter().map(|e| e.pods.len()).sum();
    assert!(on_existing >= 2, "{:?}", p.existing);
    assert_eq!(on_existing + p.nodes.iter().map(|n| n.pods.len()).sum::<usize>(), 5);
}

#[test]
fn a_pod_that_tolerates_no_pool_taint_is_unschedulable_naming_the_taint() {
    let pool = with(
        nodepool("gpu", json!([])),
        &["spec", "template", "spec", "taints"],
        json!([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]),
    );
    let p = plan(vec![pool, pod("web-0", "1", "1Gi")]);
    let u = unschedulable(&p, "web-0");
    assert!(
        u.kind() == Kind::Taints && u.reason().contains("nvidia.com/gpu"),
        "{u:?}"
    );
}

#[test]
fn a_node_selector_on_a_label_no_pool_defines_is_unschedulable() {
    let p = plan(vec![with(
        pod("web-0", "1", "1Gi"),
        &["spec", "nodeSelector"],
        json!({"team": "payments"}),
    )]);
    let u = unschedulable(&p, "web-0");
    assert!(u.kind() == Kind::Requirements && u.reason().contains("team"), "{u:?}");
}

#[test]
fn a_pod_larger_than_any_instance_type_is_unschedulable_for_resources() {
    let p = plan(vec![pod("huge-0", "900", "64Gi"), pod("ok-0", "1", "1Gi")]);
    let u = unschedulable(&p, "huge-0");
    assert_eq!(u.kind(), Kind::Resources, "{u:?}");
    assert_eq!(p.nodes.len(), 1, "one bad pod does not spoil the rest");
}

#[test]
fn a_bad_pod_is_reported_and_the_others_are_planned() {
    let p = plan(vec![pod("bad-0", "lots", "1Gi"), pod("good-0", "1", "1Gi")]);
    let u = unschedulable(&p, "bad-0");
    assert_eq!(u.kind(), Kind::InvalidPod, "{u:?}");
    assert_eq!(p.nodes.len(), 1);
}

#[test]
fn a_zone_spread_balances_pods_across_the_allowed_zones() {
    let spread = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                          "labelSelector": {"matchLabels": {"app": "web"}}}]);
    let pool = nodepool(
        "default",
        json!([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b", "us-east-1c"]}]),
    );
    let items: Vec<Value> = std::iter::once(pool)
        .chain((0..9).map(|i| {
            with(
                pod(&format!("web-{i}"), "500m", "512Mi"),
                &["spec", "topologySpreadConstraints"],
                spread.clone(),
            )
        }))
        .collect();
    let p = plan(items);
    let mut per_zone = std::collections::BTreeMap::new();
    for n in &p.nodes {
        *per_zone.entry(n.zone.clone()).or_insert(0) += n.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        [3, 3, 3],
        "{per_zone:?}"
    );
}

#[test]
fn hostname_anti_affinity_puts_each_pod_on_its_own_node() {
    let anti = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}});
    let items: Vec<Value> = (0..4)
        .map(|i| {
            with(
                pod(&format!("db-{i}"), "500m", "1Gi"),
                &["spec", "affinity"],
                anti.clone(),
            )
        })
        .collect();
    let p = plan(items);
    assert_eq!(p.nodes.len(), 4);
}

#[test]
fn zonal_pod_affinity_keeps_the_group_in_one_zone() {
    let aff = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "cache"}}}]}});
    let items: Vec<Value> = (0..12)
        .map(|i| {
            with(
                pod(&format!("cache-{i}"), "2", "4Gi"),
                &["spec", "affinity"],
                aff.clone(),
            )
        })
        .collect();
    let p = plan(items);
    let zones: std::collections::BTreeSet<&str> = p.nodes.iter().map(|n| n.zone.as_str()).collect();
    assert_eq!(zones.len(), 1, "{zones:?}");
}

#[test]
fn pods_binding_the_same_host_port_land_on_different_nodes() {
    let ports = json!([{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}, "ports": [{"containerPort": 80, "hostPort": 8080}]}]);
    let items: Vec<Value> = (0..3)
        .map(|i| {
            with(
                pod(&format!("proxy-{i}"), "100m", "64Mi"),
                &["spec", "containers"],
                ports.clone(),
            )
        })
        .collect();
    let p = plan(items);
    assert_eq!(p.nodes.len(), 3);
}

#[test]
fn a_bound_volume_pins_the_pod_to_its_zone() {
    let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1c"]}]}]}}}});
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1", "resources": {"requests": {"storage": "10Gi"}}}});
    let db = with(
        pod("db-0", "1", "2Gi"),
        &["spec", "volumes"],
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
    );
    let p = plan(vec![pv, pvc, db]);
    assert_eq!(node_of(&p, "db-0").zone, "us-east-1c");
}

#[test]
fn nodepool_limits_stop_launches_and_report_the_rest() {
    let pool = with(
        nodepool(
            "small",
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}]),
        ),
        &["spec", "limits"],
        json!({"cpu": "8"}),
    );
    let mut items = vec![pool];
    items.extend(pods("web", 6, "3", "4Gi"));
    let p = plan(items);
    assert_eq!(p.nodes.len(), 2, "8 cpu of m5.xlarge is two nodes");
    assert_eq!(p.unschedulable.len(), 4);
    assert!(
        p.unschedulable.iter().all(|u| u.has(Kind::Limits)),
        "{:?}",
        p.unschedulable
    );
}

#[test]
fn the_heavier_nodepool_wins_even_when_dearer() {
    let cheap = nodepool(
        "cheap",
        json!([{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m6g"]}]),
    );
    let dear = with(
        nodepool(
            "preferred",
            json!([{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i"]}]),
        ),
        &["spec", "weight"],
        json!(50),
    );
    let p = plan(vec![cheap, dear, pod("web-0", "1", "2Gi")]);
    assert_eq!(node_of(&p, "web-0").nodepool, "preferred");
}

#[test]
fn min_values_keeps_enough_families_among_the_alternatives() {
    let pool = nodepool(
        "flex",
        json!([
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "m6i", "m7i", "c5", "c6i", "r6i"], "minValues": 4},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
    );
    let p = plan(vec![pool, pod("web-0", "1", "2Gi")]);
    let node = node_of(&p, "web-0");
    let families: std::collections::BTreeSet<&str> = node
        .instance_types
        .iter()
        .map(|t| t.split('.').next().unwrap())
        .collect();
    assert!(families.len() >= 4, "{families:?}");
}

#[test]
fn preferred_node_affinity_is_honoured_and_relaxed_when_impossible() {
    let prefer = |arch: &str| {
        json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": [arch]}]}}]}})
    };
    let amd = with(pod("app-0", "1", "2Gi"), &["spec", "affinity"], prefer("amd64"));
    let mips = with(pod("odd-0", "1", "2Gi"), &["spec", "affinity"], prefer("mips"));
    let p = plan(vec![amd, mips]);
    let amd_type = Catalog::embedded()
        .unwrap()
        .get(&node_of(&p, "app-0").instance_type)
        .unwrap();
    assert_eq!(
        amd_type.arch.label(),
        "amd64",
        "arm64 is cheaper, but the preference holds"
    );
    assert!(p.unschedulable.is_empty(), "an impossible preference is relaxed");
}

#[test]
fn only_daemonsets_that_land_count_as_overhead() {
    let ds = |name: &str, selector: Value| {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": {
            "nodeSelector": selector, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}})
    };
    let everywhere = ds("logs", json!({}));
    let gpu_only = ds("dcgm", json!({"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"}));
    let p = plan(vec![everywhere, gpu_only, pod("web-0", "1", "1Gi")]);
    let n = node_of(&p, "web-0");
    assert_eq!(
        n.daemonset_overhead.cpu_millis, 1000,
        "only the DaemonSet for every node lands"
    );
}

#[test]
fn startup_taints_need_not_be_tolerated() {
    let pool = with(
        nodepool("cilium", json!([])),
        &["spec", "template", "spec", "startupTaints"],
        json!([{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}]),
    );
    let p = plan(vec![pool, pod("web-0", "1", "1Gi")]);
    assert_eq!(node_of(&p, "web-0").nodepool, "cilium");
}

#[test]
fn gpu_pods_get_gpu_nodes_and_untolerating_cpu_pods_stay_off_tainted_ones() {
    let gpu_pool = with(
        nodepool(
            "gpu",
            json!([{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["g"]}]),
        ),
        &["spec", "template", "spec", "taints"],
        json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    );
    let cpu_pool = nodepool(
        "default",
        json!([{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m"]}]),
    );
    let gpu = with(
        pod("infer-0", "4", "16Gi"),
        &["spec", "containers"],
        json!([{"name": "c", "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]),
    );
    let gpu = with(
        gpu,
        &["spec", "tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
    );
    let p = plan(vec![gpu_pool, cpu_pool, gpu, pod("web-0", "1", "1Gi")]);
    let catalog = Catalog::embedded().unwrap();
    assert!(catalog.get(&node_of(&p, "infer-0").instance_type).unwrap().gpu_count >= 1);
    assert_eq!(
        catalog.get(&node_of(&p, "web-0").instance_type).unwrap().gpu_count,
        0,
        "a CPU pod is not put on a GPU node"
    );
}

#[test]
fn every_new_node_carries_cheapest_first_alternatives_that_all_fit() {
    let planned = planned(pods("web", 40, "500m", "1Gi"));
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    for n in &planned.plan.nodes {
        assert!(!n.instance_types.is_empty() && n.instance_types.len() <= 60);
        let prices: Vec<f64> = n
            .instance_types
            .iter()
            .map(|t| {
                region
                    .prices()
                    .price(Catalog::embedded().unwrap().get(t).unwrap(), &n.zone, n.capacity_type)
                    .unwrap()
            })
            .collect();
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
    }
    // The checker already verified that each alternative holds the node's pods.
    assert!(check(&planned.snapshot, &region, &planned.plan).is_empty());
}

#[test]
fn with_no_nodepool_the_default_pool_prefers_spot() {
    let p = plan(pods("web", 5, "1", "2Gi"));
    assert!(
        p.nodes
            .iter()
            .all(|n| n.nodepool == "default" && n.capacity_type.label() == "spot")
    );
}

#[test]
fn hostname_pod_affinity_puts_followers_on_the_node_of_the_pod_they_follow() {
    let follow = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}});
    let mut items = vec![pod("db-0", "2", "4Gi")];
    items.extend((0..3).map(|i| {
        with(
            pod(&format!("sidecar-{i}"), "250m", "256Mi"),
            &["spec", "affinity"],
            follow.clone(),
        )
    }));
    let p = plan(items);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let db_node = node_of(&p, "db-0");
    for i in 0..3 {
        assert_eq!(
            node_of(&p, &format!("sidecar-{i}")).pods,
            db_node.pods,
            "sidecar-{i} is with db-0"
        );
    }
}
