//! The planner on NodePool labels and requirements, DaemonSets and well-known labels: each
//! test builds a small cluster dump, plans it, runs the independent checker on the plan,
//! and asserts what a user expects, citing the upstream rule it follows.

use carpool::catalog::Catalog;
use carpool::fixtures::NodePoolBuilder;
use serde_json::{Value, json};

use crate::support::{node_of, plan, pod, unschedulable};

const TEAM: &str = "company.com/team";

fn team_pool(operator: &str, values: &[&str]) -> Value {
    NodePoolBuilder::new("teams")
        .requirement("kubernetes.io/arch", "In", &["amd64"])
        .requirement(TEAM, operator, values)
        .build()
}

fn daemonset(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]);
    }
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

// Karpenter: pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go
// `resolveCustomLabelsFromRequirements` labels the NodeClaim with `Requirement.Any()` of each
// requirement on a key that is neither well known nor restricted; `Requirements.Compatible`
// (pkg/scheduling/requirements.go) lets a pod require a key the NodePool defines.
#[test]
fn a_nodepool_requirement_on_a_custom_label_launches_and_labels_the_node() {
    let p = plan(vec![
        team_pool("In", &["a", "b"]),
        pod("web-0", "1", "1Gi").node_selector(TEAM, "b").build(),
    ]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(node_of(&p, "web-0").labels.get(TEAM).map(String::as_str), Some("b"));

    let p = plan(vec![team_pool("In", &["a", "b"]), pod("web-0", "1", "1Gi").build()]);
    let value = node_of(&p, "web-0").labels.get(TEAM).cloned();
    assert!(
        matches!(value.as_deref(), Some("a" | "b")),
        "a pod that does not mention the key takes any allowed value: {value:?}"
    );

    let p = plan(vec![
        team_pool("Exists", &[]),
        pod("web-0", "1", "1Gi")
            .spec(
                "affinity",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": TEAM, "operator": "Exists"}]}]}}}),
            )
            .build(),
    ]);
    assert!(
        node_of(&p, "web-0").labels.contains_key(TEAM),
        "Exists labels the node with some value"
    );
}

// Karpenter: pkg/scheduling/requirements.go `Requirements.Intersects` (a pod's values must
// meet the NodePool's), and nodeclaim.go `NodeClaim.Add`, which narrows the NodeClaim's
// requirements to the intersection with each pod it takes.
#[test]
fn a_pod_asking_a_custom_value_the_nodepool_does_not_allow_is_not_launched_for() {
    let p = plan(vec![
        team_pool("In", &["a", "b"]),
        pod("web-0", "1", "1Gi").node_selector(TEAM, "c").build(),
    ]);
    assert!(p.nodes.is_empty(), "{:?}", p.nodes);
    let u = unschedulable(&p, "web-0");
    assert!(format!("{u:?}").contains(TEAM), "{u:?}");
}

// Karpenter: nodeclaim.go `NodeClaim.Add` intersects the NodeClaim's requirements with the
// pod's, so a node whose custom label is settled on `a` takes no pod asking `b`; a pod that
// does not mention the key joins either.
#[test]
fn pods_asking_different_custom_values_get_nodes_labelled_with_each() {
    let p = plan(vec![
        team_pool("In", &["a", "b"]),
        pod("a-0", "500m", "128Mi").node_selector(TEAM, "a").build(),
        pod("b-0", "500m", "128Mi").node_selector(TEAM, "b").build(),
        pod("any-0", "500m", "128Mi").build(),
    ]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let (a, b) = (node_of(&p, "a-0"), node_of(&p, "b-0"));
    assert_eq!(a.labels.get(TEAM).map(String::as_str), Some("a"));
    assert_eq!(b.labels.get(TEAM).map(String::as_str), Some("b"));
    assert_eq!(
        p.nodes.len(),
        2,
        "the pod that does not mention the key shares a node: {}",
        serde_json::to_string_pretty(&p).unwrap()
    );
}

// Karpenter: pkg/controllers/provisioning/scheduling/scheduler.go `isDaemonPodCompatible`
// checks `nodeClaimTemplate.Spec.Taints` only: a DaemonSet that does not tolerate a
// startup taint still runs on the node once the taint is removed.
#[test]
fn a_daemonset_counts_on_new_nodes_although_it_does_not_tolerate_a_startup_taint() {
    let pool = NodePoolBuilder::new("cilium")
        .requirement("kubernetes.io/arch", "In", &["amd64"])
        .startup_taint_value("node.cilium.io/agent-not-ready", "true", "NoExecute")
        .build();
    let p = plan(vec![
        pool,
        daemonset("logs", json!({})),
        pod("web-0", "1", "1Gi").build(),
    ]);
    let n = node_of(&p, "web-0");
    assert_eq!(n.daemonset_overhead.cpu_millis, 1000, "{n:?}");
}

fn dedicated_pool() -> Value {
    NodePoolBuilder::new("dedicated")
        .requirement("kubernetes.io/arch", "In", &["amd64"])
        .taint_value("dedicated", "db", "NoSchedule")
        .taint("example.com/soft", "PreferNoSchedule")
        .build()
}

fn dedicated_pod() -> Value {
    pod("db-0", "1", "1Gi")
        .toleration("dedicated", "Equal", Some("db"), "NoSchedule")
        .toleration("example.com/soft", "Exists", None, "PreferNoSchedule")
        .build()
}

// Karpenter: pkg/controllers/provisioning/scheduling/scheduler.go `getDaemonOverhead` sums
// the DaemonSet pods for which `isDaemonPodCompatible` holds, and that first requires
// `scheduling.Taints(nodeClaimTemplate.Spec.Taints).ToleratesPod(pod)`, after
// `toleratePreferNoScheduleTaints`: a DaemonSet tolerating the NodePool's
// `spec.template.spec.taints` adds its requests to the node (a PreferNoSchedule taint
// needs no toleration).
#[test]
fn a_daemonset_tolerating_the_nodepools_taint_counts_on_its_nodes() {
    let ds = daemonset(
        "agent",
        json!({"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}),
    );
    let p = plan(vec![dedicated_pool(), ds, dedicated_pod()]);
    let n = node_of(&p, "db-0");
    assert_eq!(n.nodepool, "dedicated");
    assert_eq!(n.daemonset_overhead.cpu_millis, 1000, "{n:?}");
    assert_eq!(n.daemonset_overhead.memory, 1 << 30, "{n:?}");
}

// Karpenter: scheduler.go `isDaemonPodCompatible` returns false when
// `Taints(nodeClaimTemplate.Spec.Taints).ToleratesPod` fails, so `getDaemonOverhead` leaves
// out a DaemonSet that does not tolerate the NodePool's taint (nor one tolerating another
// value of its key: `Taints.ToleratesPod` uses core's `Toleration.ToleratesTaint`).
#[test]
fn a_daemonset_not_tolerating_the_nodepools_taint_adds_nothing_to_its_nodes() {
    let untolerant = daemonset("agent", json!({}));
    let other_value = daemonset(
        "web-agent",
        json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]}),
    );
    let p = plan(vec![dedicated_pool(), untolerant, other_value, dedicated_pod()]);
    let n = node_of(&p, "db-0");
    assert_eq!(n.nodepool, "dedicated");
    assert_eq!(n.daemonset_overhead, carpool::model::Resources::default(), "{n:?}");
}

// Karpenter: `isDaemonPodCompatible` checks the template's requirements with
// `IsCompatible`: a DaemonSet that selects a value of a custom key the NodePool allows counts.
#[test]
fn a_daemonset_selecting_a_custom_value_the_nodepool_allows_counts_on_its_nodes() {
    let ds = daemonset("agent", json!({"nodeSelector": {TEAM: "a"}}));
    let p = plan(vec![team_pool("In", &["a"]), ds, pod("web-0", "1", "1Gi").build()]);
    assert_eq!(node_of(&p, "web-0").daemonset_overhead.cpu_millis, 1000);
}

// Karpenter: nodeclaimtemplate.go `NewNodeClaimTemplate` puts
// `karpenter.k8s.aws/ec2nodeclass: <nodeClassRef.name>` among the template's labels and
// requirements, so a pod may select it.
#[test]
fn a_pod_selecting_its_nodepools_ec2nodeclass_plans() {
    let pool = NodePoolBuilder::new("general")
        .requirement("kubernetes.io/arch", "In", &["amd64"])
        .build();
    let p = plan(vec![
        pool.clone(),
        pod("web-0", "1", "1Gi")
            .node_selector("karpenter.k8s.aws/ec2nodeclass", "default")
            .build(),
        pod("other-0", "1", "1Gi")
            .node_selector("karpenter.k8s.aws/ec2nodeclass", "gpu")
            .build(),
    ]);
    assert_eq!(
        node_of(&p, "web-0")
            .labels
            .get("karpenter.k8s.aws/ec2nodeclass")
            .map(String::as_str),
        Some("default")
    );
    unschedulable(&p, "other-0");
}

fn binding(port: i64) -> Value {
    json!([{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "ports": [{"containerPort": port, "hostPort": port}]}])
}

// kube-scheduler: pkg/scheduler/framework/plugins/nodeports `Fits` (a pod cannot bind a host
// port a pod on the node binds); Karpenter: scheduler.go `getDaemonHostPortUsage` reserves the
// host ports of the DaemonSets that land on a NodeClaimTemplate's nodes.
#[test]
fn a_pod_binding_a_daemonset_host_port_is_not_launched_for() {
    let exporter = daemonset("node-exporter", json!({"containers": binding(9100)}));
    let p = plan(vec![
        NodePoolBuilder::new("general").build(),
        exporter,
        pod("metrics-0", "100m", "64Mi")
            .spec("containers", binding(9100))
            .build(),
        pod("web-0", "100m", "64Mi").spec("containers", binding(8080)).build(),
    ]);
    let u = unschedulable(&p, "metrics-0");
    assert!(format!("{u:?}").contains("TCP/9100"), "{u:?}");
    assert!(
        node_of(&p, "web-0").daemonset_overhead.cpu_millis == 100,
        "another port is free"
    );
}

// The same rule where the DaemonSet lands on some types only: the pod goes to a type the
// DaemonSet does not land on (kube-scheduler `nodeports`; Karpenter groups daemon overhead
// and host ports by instance type, `getDaemonOverhead`).
#[test]
fn a_pod_binding_a_daemonset_host_port_goes_where_that_daemonset_does_not_land() {
    let arm_agent = daemonset(
        "arm-agent",
        json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}, "containers": binding(9100)}),
    );
    let p = plan(vec![
        NodePoolBuilder::new("general").build(),
        arm_agent,
        pod("metrics-0", "100m", "64Mi")
            .spec("containers", binding(9100))
            .build(),
    ]);
    let n = node_of(&p, "metrics-0");
    let catalog = Catalog::embedded().unwrap();
    for t in &n.instance_types {
        assert_eq!(catalog.get(t).unwrap().arch.label(), "amd64", "{t} is arm64");
    }
}

fn affinity(key: &str, operator: &str, values: &[&str]) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": operator, "values": values}]}]}}})
}

// Karpenter AWS: pkg/providers/instancetype/types.go `computeRequirements` adds
// `topology.k8s.aws/zone-id` from the EC2NodeClass's `status.subnets[].zoneID`, one per
// zone, so a pod selecting a zone id gets that zone.
#[test]
fn a_pod_selecting_a_zone_id_gets_the_zone_with_that_id() {
    let mut class = carpool::fixtures::EC2NodeClassBuilder::standard().build();
    class["status"] = json!({"subnets": [
        {"id": "subnet-a", "zone": "us-east-1a", "zoneID": "use1-az6"},
        {"id": "subnet-b", "zone": "us-east-1b", "zoneID": "use1-az1"}]});
    let p = plan(vec![
        class,
        NodePoolBuilder::new("general").build(),
        pod("web-0", "1", "1Gi")
            .node_selector("topology.k8s.aws/zone-id", "use1-az1")
            .build(),
        pod("db-0", "1", "1Gi")
            .node_selector("topology.k8s.aws/zone-id", "use1-az9")
            .build(),
    ]);
    let n = node_of(&p, "web-0");
    assert_eq!(n.zone, "us-east-1b");
    assert_eq!(
        n.labels.get("topology.k8s.aws/zone-id").map(String::as_str),
        Some("use1-az1"),
        "the node is launched with its zone id"
    );
    unschedulable(&p, "db-0");
}

// Karpenter AWS: pkg/apis/v1/labels.go `WellKnownLabels` and types.go `computeRequirements`
// (instance-ebs-bandwidth from EbsOptimizedInfo.MaximumBandwidthInMbps, instance-cpu-
// sustained-clock-speed-mhz, instance-encryption-in-transit-supported,
// instance-capability-flex, instance-accelerator-*): pods select types on them.
#[test]
fn pods_select_instance_types_on_the_labels_karpenters_aws_provider_sets() {
    let catalog = Catalog::embedded().unwrap();
    type Holds = fn(&carpool::model::InstanceType) -> bool;
    let cases: [(&str, Value, Holds); 5] = [
        (
            "ebs",
            affinity("karpenter.k8s.aws/instance-ebs-bandwidth", "Gt", &["15000"]),
            |t| t.label_facts.ebs_bandwidth_mbps.is_some_and(|b| b > 15000),
        ),
        (
            "clock",
            affinity(
                "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
                "Gte",
                &["3500"],
            ),
            |t| t.label_facts.cpu_sustained_clock_mhz.is_some_and(|c| c >= 3500),
        ),
        (
            "eit",
            affinity(
                "karpenter.k8s.aws/instance-encryption-in-transit-supported",
                "In",
                &["true"],
            ),
            |t| t.label_facts.encryption_in_transit == Some(true),
        ),
        (
            "flex",
            affinity("karpenter.k8s.aws/instance-capability-flex", "In", &["true"]),
            |t| t.family.ends_with("-flex"),
        ),
        (
            "inferentia",
            affinity("karpenter.k8s.aws/instance-accelerator-name", "In", &["inferentia2"]),
            |t| t.family == "inf2",
        ),
    ];
    for (name, aff, holds) in cases {
        let p = plan(vec![
            NodePoolBuilder::new("general").build(),
            pod(&format!("{name}-0"), "1", "1Gi").spec("affinity", aff).build(),
        ]);
        let n = node_of(&p, &format!("{name}-0"));
        for t in &n.instance_types {
            assert!(holds(catalog.get(t).unwrap()), "{name}: {t}");
        }
    }
}
