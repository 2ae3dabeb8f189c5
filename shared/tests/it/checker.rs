//! The independent checker on hand-written plans: for each rule, a plan that breaks it and
//! is rejected, and a pod refused wrongly that it catches. Each test names the upstream
//! function the rule comes from.

use carpool::decide::checker::{TypeProblem, Violation, check};
use carpool::decide::provisioning::unschedulable::{Reason, Shortfall};
use carpool::decide::{ExistingPlacement, PlannedNode, ProvisioningPlan, Unschedulable};
use carpool::fixtures::{NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::{CapacityType, Resources};
use serde_json::{Value, json};

use crate::support::{region, snapshot};

fn pod(name: &str, cpu: &str) -> PodBuilder {
    PodBuilder::new(name)
        .label("app", "web")
        .requests(cpu, "256Mi")
        .unschedulable()
}

fn pool(name: &str) -> NodePoolBuilder {
    NodePoolBuilder::new(name).requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
}

/// A new node of `pool` with the labels the pool puts on its nodes, and the price of its
/// offering.
fn node(pool: &str, instance_type: &str, zone: &str, ct: CapacityType, pods: &[&str]) -> PlannedNode {
    let region = region();
    let it = region.types().iter().find(|t| t.name == instance_type).unwrap();
    let price = region
        .offerings_of(it)
        .into_iter()
        .find(|o| o.zone == zone && o.capacity_type == ct)
        .unwrap()
        .price;
    PlannedNode {
        nodepool: pool.into(),
        instance_type: instance_type.into(),
        instance_types: vec![instance_type.into()],
        zone: zone.into(),
        capacity_type: ct,
        price_per_hour: price,
        pods: pods.iter().map(|p| format!("default/{p}")).collect(),
        requests: Resources::default(),
        daemonset_overhead: Resources::default(),
        allocatable: Resources::default(),
        labels: [("karpenter.sh/nodepool", pool), ("carpool.sh/managed", "true")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn on_demand(pool: &str, instance_type: &str, zone: &str, pods: &[&str]) -> PlannedNode {
    node(pool, instance_type, zone, CapacityType::OnDemand, pods)
}

fn plan(nodes: Vec<PlannedNode>) -> ProvisioningPlan {
    ProvisioningPlan {
        nodes,
        ..ProvisioningPlan::default()
    }
}

fn refused(pods: &[&str]) -> ProvisioningPlan {
    ProvisioningPlan {
        unschedulable: pods
            .iter()
            .map(|p| {
                Unschedulable::new(
                    format!("default/{p}"),
                    Reason::Resources {
                        nodepool: "general".into(),
                        shortfall: Shortfall::NotPlaced,
                    },
                )
            })
            .collect(),
        ..ProvisioningPlan::default()
    }
}

fn violations(items: &[Value], plan: &ProvisioningPlan) -> Vec<Violation> {
    check(&snapshot(items), &region(), plan)
}

fn existing(name: &str, zone: &str) -> NodeBuilder {
    NodeBuilder::new(name)
        .zone(zone)
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .label("karpenter.sh/capacity-type", "on-demand")
        .instance_type("m5.xlarge")
        .allocatable("cpu", "3900m")
        .allocatable("memory", "14Gi")
        .allocatable("pods", "58")
        .ready(true)
}

fn bound(name: &str, node: &str) -> PodBuilder {
    PodBuilder::new(name)
        .label("app", "web")
        .requests("100m", "128Mi")
        .spec("nodeName", json!(node))
        .running()
}

#[test]
fn a_valid_hand_written_plan_passes() {
    let items = [pool("general").build(), pod("a", "500m").build()];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert_eq!(v, vec![]);
}

// kube: component-helpers resource.PodRequests — max(sum of apps + sidecars, largest init step).
#[test]
fn an_init_container_larger_than_the_apps_must_fit_the_node() {
    let p = pod("a", "100m").spec(
        "initContainers",
        json!([{"name": "init", "resources": {"requests": {"cpu": "3"}}}]),
    );
    let items = [pool("general").build(), p.build()];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::BadType {
                problem: TypeProblem::DoesNotFit { .. },
                ..
            }
        )),
        "{v:?}"
    );
}

// kube: component-helpers resource.PodRequests — restartable init containers (sidecars) add to the sum.
#[test]
fn a_sidecar_adds_to_what_the_node_must_hold() {
    let p = pod("a", "1").spec(
        "initContainers",
        json!([{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1500m"}}}]),
    );
    let items = [pool("general").build(), p.build()];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::NewOverfull { .. })), "{v:?}");
}

// kube: component-helpers resource.PodRequests — spec.overhead is added.
#[test]
fn pod_overhead_counts_against_the_node() {
    let p = pod("a", "1500m").spec("overhead", json!({"cpu": "500m"}));
    let items = [pool("general").build(), p.build()];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::NewOverfull { .. })), "{v:?}");
}

// kube: component-helpers nodeaffinity, nodeSelectorRequirementsAsSelector — Gt compares integers.
#[test]
fn a_gt_node_affinity_on_instance_cpu_rules_out_a_small_type() {
    let p = pod("a", "100m").spec(
        "affinity",
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["4"]}]}]}}}),
    );
    let items = [pool("general").build(), p.build()];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::NoBranch { .. })), "{v:?}");
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.2xlarge", "us-east-1a", &["a"])]),
    );
    assert_eq!(v, vec![]);
}

// kube: nodeaffinity (*NodeAffinity).Filter — nodeSelector must match the node's labels.
#[test]
fn a_node_selector_on_arch_rules_out_a_node_of_another_arch() {
    let items = [
        pool("general").build(),
        pod("a", "100m").node_selector("kubernetes.io/arch", "arm64").build(),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::NoBranch { .. })), "{v:?}");
}

// kube: tainttoleration (*TaintToleration).Filter, v1helper TolerationsTolerateTaint.
#[test]
fn a_pod_that_does_not_tolerate_the_pools_taint_is_rejected_on_its_node() {
    let items = [
        pool("gpu").taint("nvidia.com/gpu", "NoSchedule").build(),
        pod("a", "100m").build(),
        pod("b", "100m")
            .toleration("nvidia.com/gpu", "Exists", None, "")
            .build(),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("gpu", "c5.large", "us-east-1a", &["a", "b"])]),
    );
    assert_eq!(
        v,
        vec![Violation::Untolerated {
            pod: "default/a".into(),
            taint: "nvidia.com/gpu".into(),
            node: carpool::decide::checker::NodeRef::New(carpool::decide::checker::NewNode {
                index: 0,
                instance_type: "c5.large".into(),
                zone: "us-east-1a".into()
            }),
        }]
    );
}

// karpenter: NodePool startupTaints need no toleration (scheduling.Taints of spec.taints only).
#[test]
fn a_startup_taint_needs_no_toleration() {
    let items = [
        pool("general")
            .startup_taint_value("agent.io/not-ready", "true", "NoSchedule")
            .build(),
        pod("a", "100m").build(),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert_eq!(v, vec![]);
}

// karpenter: isDaemonPodCompatible looks at spec.taints only, so a DaemonSet counts on a node
// whose only taint is a startup taint; kube daemon controller NodeShouldRunDaemonPod.
#[test]
fn a_daemonset_counts_on_a_node_with_only_a_startup_taint() {
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}});
    let items = [
        pool("general")
            .startup_taint_value("agent.io/not-ready", "true", "NoSchedule")
            .build(),
        ds,
        pod("a", "1500m").build(),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::NewOverfull { .. })), "{v:?}");
}

// kube: nodeports fitsPorts — a DaemonSet's host port is taken on the new node.
#[test]
fn a_daemonset_host_port_is_taken_on_a_new_node() {
    let port = json!([{"name": "c", "ports": [{"containerPort": 9100, "hostPort": 9100}],
        "resources": {"requests": {"cpu": "10m"}}}]);
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "exporter", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
            "tolerations": [{"operator": "Exists"}], "containers": port}}}});
    let items = [
        pool("general").build(),
        ds,
        pod("a", "100m").spec("containers", port.clone()).build(),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::HostPortConflict { port: 9100, .. })),
        "{v:?}"
    );
}

// karpenter: a NodePool requirement on a custom key must hold on the node's labels
// (scheduling.Requirements.Compatible; the NodeClaim is labelled with the intersection).
#[test]
fn a_node_of_a_pool_requiring_a_custom_label_must_carry_it() {
    let items = [
        pool("teams").requirement("company.com/team", "In", &["a", "b"]).build(),
        pod("a", "100m").node_selector("company.com/team", "a").build(),
    ];
    let mut n = on_demand("teams", "c5.large", "us-east-1a", &["a"]);
    let v = violations(&items, &plan(vec![n.clone()]));
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::BadType {
                problem: TypeProblem::NodePoolRequirements { .. },
                ..
            }
        )),
        "{v:?}"
    );
    n.labels.insert("company.com/team".into(), "b".into());
    let v = violations(&items, &plan(vec![n.clone()]));
    assert!(
        v.iter().any(|v| matches!(v, Violation::NoBranch { .. })),
        "team b is not the pod's: {v:?}"
    );
    n.labels.insert("company.com/team".into(), "a".into());
    assert_eq!(violations(&items, &plan(vec![n])), vec![]);
}

// karpenter: NodePool requirements filter the instance types (instance-category In [c, m, r]).
#[test]
fn a_type_the_pool_does_not_allow_is_rejected() {
    let items = [pool("general").build(), pod("a", "100m").build()];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "t3.large", "us-east-1a", &["a"])]),
    );
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::BadType {
                problem: TypeProblem::NodePoolRequirements { .. },
                ..
            }
        )),
        "{v:?}"
    );
}

// karpenter: pkg/utils/pod IsProvisionable excludes IsPreempting (status.nominatedNodeName).
#[test]
fn a_preempting_pod_is_not_launched_for() {
    let mut p = pod("a", "100m").build();
    p["status"]["nominatedNodeName"] = json!("n1");
    let items = [pool("general").build(), p];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::Preempting { .. })), "{v:?}");
    assert_eq!(
        violations(&items, &ProvisioningPlan::default()),
        vec![],
        "left out is fine"
    );
}

fn claim(name: &str, class: Option<&str>, volume: Option<&str>) -> Value {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}});
    if let Some(c) = class {
        spec["storageClassName"] = json!(c);
    }
    if let Some(v) = volume {
        spec["volumeName"] = json!(v);
    }
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn storage_class(name: &str, mode: &str, zones: &[&str]) -> Value {
    let mut sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": mode});
    if !zones.is_empty() {
        sc["allowedTopologies"] =
            json!([{"matchLabelExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "values": zones}]}]);
    }
    sc
}

fn with_claim(name: &str, claim: &str) -> Value {
    pod(name, "100m")
        .spec(
            "volumes",
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]),
        )
        .build()
}

// kube: volumebinding PreFilter — a missing claim keeps the pod off every node.
#[test]
fn a_pod_whose_claim_is_missing_is_not_placed() {
    let items = [pool("general").build(), with_claim("a", "nope")];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::VolumeBlocked { .. })), "{v:?}");
}

// kube: volumebinding PreFilter "pod has unbound immediate PersistentVolumeClaims".
#[test]
fn a_pod_whose_claim_is_unbound_with_immediate_binding_is_not_placed() {
    let items = [
        pool("general").build(),
        storage_class("gp3", "Immediate", &[]),
        claim("data", Some("gp3"), None),
        with_claim("a", "data"),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::VolumeBlocked { .. })), "{v:?}");
}

// kube: volumebinding checkVolumeProvisions, v1helper.MatchTopologySelectorTerms.
#[test]
fn a_wait_for_first_consumer_claim_keeps_the_pod_in_the_allowed_zones() {
    let items = [
        pool("general").build(),
        storage_class("gp3", "WaitForFirstConsumer", &["us-east-1b"]),
        claim("data", Some("gp3"), None),
        with_claim("a", "data"),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::VolumeConflict { .. })), "{v:?}");
    let ok = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1b", &["a"])]),
    );
    assert_eq!(ok, vec![]);
}

// kube: nodevolumelimits CSILimits.Filter — CSINode spec.drivers[].allocatable.count.
#[test]
fn an_existing_nodes_attach_limit_holds() {
    let csinode = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n1"},
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 1}}]}});
    let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-old"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}});
    let old = bound("old", "n1")
        .spec(
            "volumes",
            json!([{"name": "d", "persistentVolumeClaim": {"claimName": "old"}}]),
        )
        .build();
    let items = [
        pool("general").build(),
        existing("n1", "us-east-1a")
            .label("topology.ebs.csi.aws.com/zone", "us-east-1a")
            .build(),
        csinode,
        pv,
        claim("old", Some("gp3"), Some("pv-old")),
        storage_class("gp3", "WaitForFirstConsumer", &[]),
        claim("data", Some("gp3"), None),
        with_claim("a", "data"),
        old,
    ];
    let p = ProvisioningPlan {
        existing: vec![ExistingPlacement {
            node: "n1".into(),
            pods: vec!["default/a".into()],
        }],
        ..ProvisioningPlan::default()
    };
    let v = violations(&items, &p);
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::AttachLimit { limit: 1, count: 2, .. })),
        "{v:?}"
    );
}

fn spread(key: &str, extra: Value) -> Value {
    let mut c = json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}});
    if let (Value::Object(c), Value::Object(e)) = (&mut c, extra) {
        c.extend(e);
    }
    json!([c])
}

// kube: podtopologyspread calPreFilterState — the domains of every key count, here
// karpenter.sh/capacity-type: spot and on-demand (Karpenter's TopologyGroup domains).
#[test]
fn a_capacity_type_spread_counts_on_demand_as_a_domain() {
    let items = [
        pool("general").build(),
        pod("a", "100m")
            .spec(
                "topologySpreadConstraints",
                spread("karpenter.sh/capacity-type", json!({})),
            )
            .build(),
        pod("b", "100m")
            .spec(
                "topologySpreadConstraints",
                spread("karpenter.sh/capacity-type", json!({})),
            )
            .build(),
    ];
    let spot = |p: &str| node("general", "c5.large", "us-east-1a", CapacityType::Spot, &[p]);
    let v = violations(&items, &plan(vec![spot("a"), spot("b")]));
    assert!(v.iter().any(|v| matches!(v, Violation::Skew { skew: 2, .. })), "{v:?}");
    let v = violations(
        &items,
        &plan(vec![spot("a"), on_demand("general", "c5.large", "us-east-1a", &["b"])]),
    );
    assert_eq!(v, vec![]);
}

// kube: podtopologyspread MatchNodeInclusionPolicies — nodeAffinityPolicy Honor (default)
// counts only the nodes the pod's node affinity accepts.
#[test]
fn a_spread_counts_only_nodes_the_pod_may_use_under_node_affinity_policy_honor() {
    let zone_spread = spread("topology.kubernetes.io/zone", json!({}));
    let items = [
        pool("general")
            .requirement("topology.kubernetes.io/zone", "In", &["us-east-1a", "us-east-1b"])
            .build(),
        pod("a", "100m")
            .spec("topologySpreadConstraints", zone_spread.clone())
            .build(),
        pod("b", "100m")
            .spec("topologySpreadConstraints", zone_spread.clone())
            .build(),
        pod("c", "100m")
            .node_selector("kubernetes.io/arch", "arm64")
            .spec("topologySpreadConstraints", zone_spread.clone())
            .build(),
    ];
    // a on amd64 in 1a, b on amd64 in 1b, c on arm64 in 1a: for c only arm64 nodes count,
    // so 1a holds 1 and 1b 0: fine. Two arm64 pods in 1a would not be.
    let nodes = vec![
        on_demand("general", "c5.large", "us-east-1a", &["a"]),
        on_demand("general", "c5.large", "us-east-1b", &["b"]),
        on_demand("general", "c6g.large", "us-east-1a", &["c"]),
    ];
    assert_eq!(violations(&items, &plan(nodes)), vec![]);
    let items2 = [
        items[0].clone(),
        pod("a", "100m")
            .node_selector("kubernetes.io/arch", "arm64")
            .spec("topologySpreadConstraints", zone_spread.clone())
            .build(),
        pod("b", "100m")
            .spec("topologySpreadConstraints", zone_spread.clone())
            .build(),
        items[3].clone(),
    ];
    let nodes = vec![
        on_demand("general", "c6g.large", "us-east-1a", &["a"]),
        on_demand("general", "c5.large", "us-east-1b", &["b"]),
        on_demand("general", "c6g.large", "us-east-1a", &["c"]),
    ];
    let v = violations(&items2, &plan(nodes));
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::Skew { pod, .. } if pod == "default/c")),
        "{v:?}"
    );
}

// kube: podtopologyspread countPodsMatchSelector skips terminating pods.
#[test]
fn a_terminating_pod_does_not_count_in_a_spread() {
    let zone_spread = spread("topology.kubernetes.io/zone", json!({}));
    let items = [
        pool("general")
            .requirement("topology.kubernetes.io/zone", "In", &["us-east-1a", "us-east-1b"])
            .build(),
        existing("n1", "us-east-1b").build(),
        bound("old", "n1").deleting("2026-01-01T00:00:00Z").build(),
        pod("a", "100m")
            .spec("topologySpreadConstraints", zone_spread.clone())
            .build(),
        pod("b", "100m").spec("topologySpreadConstraints", zone_spread).build(),
    ];
    // With the terminating pod counted 1b would hold 1 and a, b could share 1a... they may
    // not: it does not count, so 1a holding both is a skew of 2.
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a", "b"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::Skew { skew: 2, .. })), "{v:?}");
}

// kube: podtopologyspread Filter — selfMatchNum is 0 for a pod its own selector does not match.
#[test]
fn a_pod_outside_its_own_spread_selector_does_not_count_itself() {
    let other = spread(
        "topology.kubernetes.io/zone",
        json!({"labelSelector": {"matchLabels": {"app": "db"}}}),
    );
    let items = [
        pool("general").build(),
        pod("a", "100m")
            .spec("topologySpreadConstraints", other.clone())
            .build(),
        pod("b", "100m").spec("topologySpreadConstraints", other).build(),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a", "b"])]),
    );
    assert_eq!(v, vec![]);
}

// kube: interpodaffinity satisfyPodAffinity — the first pod of a group is admitted only if it
// matches all of its terms itself.
#[test]
fn the_first_pod_of_a_group_must_match_all_of_its_own_terms() {
    let terms = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}},
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "cache"}}}]}});
    let items = [
        pool("general").build(),
        pod("a", "100m").spec("affinity", terms).build(),
    ];
    let v = violations(
        &items,
        &plan(vec![on_demand("general", "c5.large", "us-east-1a", &["a"])]),
    );
    assert!(v.iter().any(|v| matches!(v, Violation::AffinityUnmet { .. })), "{v:?}");
}

// kube: interpodaffinity GetNamespacesFromPodAffinityTerm — namespaceSelector {} covers all namespaces.
#[test]
fn an_anti_affinity_term_with_an_empty_namespace_selector_covers_other_namespaces() {
    let anti = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "namespaceSelector": {}, "labelSelector": {"matchLabels": {"app": "web"}}}]}});
    let items = [
        pool("general").build(),
        existing("n1", "us-east-1a").build(),
        bound("other", "n1").namespace("shop").build(),
        pod("a", "100m").spec("affinity", anti.clone()).build(),
    ];
    let p = ProvisioningPlan {
        existing: vec![ExistingPlacement {
            node: "n1".into(),
            pods: vec!["default/a".into()],
        }],
        ..ProvisioningPlan::default()
    };
    let v = violations(&items, &p);
    assert!(v.iter().any(|v| matches!(v, Violation::AntiAffinity { .. })), "{v:?}");
    // Without the selector, the term covers its own namespace only.
    let mut own = anti;
    own["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        .as_object_mut()
        .unwrap()
        .remove("namespaceSelector");
    let items = [
        items[0].clone(),
        items[1].clone(),
        items[2].clone(),
        pod("a", "100m").spec("affinity", own).build(),
    ];
    assert_eq!(violations(&items, &p), vec![]);
}

// kube: interpodaffinity satisfyExistingPodsAntiAffinity — an existing pod's anti-affinity
// keeps the incoming pod away.
#[test]
fn an_existing_pods_anti_affinity_keeps_a_pending_pod_off_its_node() {
    let anti = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}});
    let items = [
        pool("general").build(),
        existing("n1", "us-east-1a").build(),
        bound("old", "n1").label("app", "db").spec("affinity", anti).build(),
        pod("a", "100m").build(),
    ];
    let p = ProvisioningPlan {
        existing: vec![ExistingPlacement {
            node: "n1".into(),
            pods: vec!["default/a".into()],
        }],
        ..ProvisioningPlan::default()
    };
    let v = violations(&items, &p);
    assert!(v.iter().any(|v| matches!(v, Violation::AntiAffinity { .. })), "{v:?}");
}

// Wrongful refusal: a plain pod that fits a c5.large of the pool.
#[test]
fn a_pod_refused_although_it_fits_a_new_node_is_a_wrongful_refusal() {
    let items = [pool("general").build(), pod("a", "1").build()];
    let v = violations(&items, &refused(&["a"]));
    assert!(
        v.iter().any(|v| matches!(v, Violation::WrongfulRefusal { .. })),
        "{v:?}"
    );
}

// Wrongful refusal, custom key: karpenter scheduling.Requirements.Compatible with the pool's
// `company.com/team In [a, b]` and the pod's `company.com/team: a`.
#[test]
fn a_pod_selecting_a_custom_value_its_pool_allows_is_wrongfully_refused() {
    let items = [
        pool("teams").requirement("company.com/team", "In", &["a", "b"]).build(),
        pod("a", "100m").node_selector("company.com/team", "a").build(),
        pod("c", "100m").node_selector("company.com/team", "c").build(),
    ];
    let v = violations(&items, &refused(&["a", "c"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        matches!(&v[0], Violation::WrongfulRefusal { pod, .. } if pod == "default/a"),
        "{v:?}"
    );
}

// Wrongful refusal, startup taint: karpenter StartupTaints need no toleration.
#[test]
fn a_pod_refused_for_a_startup_taint_is_wrongfully_refused() {
    let items = [
        pool("general")
            .startup_taint_value("agent.io/not-ready", "true", "NoSchedule")
            .build(),
        pod("a", "100m").build(),
    ];
    let v = violations(&items, &refused(&["a"]));
    assert!(
        v.iter().any(|v| matches!(v, Violation::WrongfulRefusal { .. })),
        "{v:?}"
    );
}

// Wrongful refusal, volumes: a WaitForFirstConsumer claim allowed in one zone still fits there.
#[test]
fn a_pod_with_a_zonal_claim_refused_although_its_zone_is_offered_is_wrongfully_refused() {
    let items = [
        pool("general").build(),
        storage_class("gp3", "WaitForFirstConsumer", &["us-east-1b"]),
        claim("data", Some("gp3"), None),
        with_claim("a", "data"),
    ];
    let v = violations(&items, &refused(&["a"]));
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::WrongfulRefusal { zone, .. } if zone == "us-east-1b")),
        "{v:?}"
    );
}

// Not a wrongful refusal: too large for any type, untolerated taint, a missing claim.
#[test]
fn pods_that_fit_no_node_are_rightly_refused() {
    let items = [
        pool("general").taint("dedicated", "NoSchedule").build(),
        pod("huge", "900").toleration("dedicated", "Exists", None, "").build(),
        pod("plain", "100m").build(),
        PodBuilder::new("claims")
            .toleration("dedicated", "Exists", None, "")
            .spec(
                "volumes",
                json!([{"name": "d", "persistentVolumeClaim": {"claimName": "nope"}}]),
            )
            .unschedulable()
            .build(),
    ];
    assert_eq!(violations(&items, &refused(&["huge", "plain", "claims"])), vec![]);
}
