//! The planner's preferences as Karpenter relaxes them, `PreferNoSchedule` NodePool taints,
//! and `minValues` kept as pods join a node: each test builds a small cluster dump, plans
//! it, runs the independent checker on the plan, and asserts what a user sees.

use std::collections::BTreeSet;

use carpool::catalog::{Catalog, PriceBook};
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fixtures::NodePoolBuilder;
use serde_json::{Value, json};

use crate::support::{node_of, plan, plan_priced, pod};

fn family(instance_type: &str) -> &str {
    instance_type.split('.').next().unwrap_or_default()
}

/// A preferred node affinity term on one key.
fn term(weight: i32, key: &str, values: &[&str]) -> Value {
    json!({"weight": weight, "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}})
}

fn preferring(terms: Vec<Value>) -> Value {
    json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}})
}

// Karpenter: scheduling/requirements.go `newPodRequirements` ("Select heaviest preference
// and treat as a requirement") and provisioning/scheduling/preferences.go
// `removePreferredNodeAffinityTerm` (sorts the terms by weight, heaviest first, and drops
// the first): the heaviest term is required alone, then the next one alone, then none.
#[test]
fn a_lighter_preference_still_counts_when_the_heaviest_is_impossible() {
    let impossible_first = pod("odd-0", "1", "2Gi")
        .spec(
            "affinity",
            preferring(vec![
                term(20, "karpenter.k8s.aws/instance-family", &["m7i"]),
                term(80, "kubernetes.io/arch", &["mips"]),
            ]),
        )
        .build();
    let heaviest_wins = pod("app-0", "1", "2Gi")
        .spec(
            "affinity",
            preferring(vec![
                term(10, "karpenter.k8s.aws/instance-family", &["c7i"]),
                term(90, "karpenter.k8s.aws/instance-family", &["r7i"]),
            ]),
        )
        .build();
    let p = plan(vec![impossible_first, heaviest_wins]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(
        family(&node_of(&p, "odd-0").instance_type),
        "m7i",
        "mips is impossible, so the lighter m7i term is required next (arm64 is cheaper)"
    );
    assert_eq!(
        family(&node_of(&p, "app-0").instance_type),
        "r7i",
        "the heaviest term is tried first, although c7i is cheaper"
    );
}

// kube-scheduler: nodeaffinity `(*NodeAffinity).Score` adds the weight of every preferred
// term a node satisfies; a new node in the preferred zone at the same price is the one
// kube-scheduler would rank higher. (Here the preference is given up before a node is
// opened, because a ScheduleAnyway spread never opens a node of its own; the zone still
// follows it.)
#[test]
fn a_pod_preferring_a_zone_gets_its_node_there_when_it_costs_no_more() {
    let pool = NodePoolBuilder::new("od")
        .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
        .requirement("karpenter.k8s.aws/instance-family", "In", &["m5"])
        .build();
    let spread = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]);
    let web = pod("web-0", "1", "2Gi")
        .spec(
            "affinity",
            preferring(vec![term(10, "topology.kubernetes.io/zone", &["us-east-1d"])]),
        )
        .spec("topologySpreadConstraints", spread)
        .build();
    let p = plan(vec![pool, web]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(node_of(&p, "web-0").zone, "us-east-1d");
}

/// A pod preferring `key` In `values`, with a ScheduleAnyway zone spread: the spread never
/// opens a node of its own, so by the time a node is opened the preference has been
/// relaxed away and only steers the choice at equal price.
fn relaxed_preference(name: &str, key: &str, values: &[&str]) -> Value {
    let spread = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]);
    pod(name, "1", "2Gi")
        .label("app", "web")
        .spec("affinity", preferring(vec![term(10, key, values)]))
        .spec("topologySpreadConstraints", spread)
        .build()
}

// kube-scheduler: nodeaffinity `(*NodeAffinity).Score` sums the weights of the preferred
// terms a node matches, so of two new nodes at the same price the one of the preferred
// family ranks higher. Karpenter orders a NodeClaim's types by price, then name
// (pkg/cloudprovider/types.go `InstanceTypes.OrderByPrice`), and a relaxed preference
// plays no part there; the planner breaks that tie by the Score instead. m5.large and
// m6i.large cost the same on demand in us-east-1; m7i.large costs more.
#[test]
fn a_new_nodes_instance_type_follows_a_relaxed_preference_only_when_it_costs_no_more() {
    let pool = || {
        NodePoolBuilder::new("od")
            .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
            .requirement(
                "node.kubernetes.io/instance-type",
                "In",
                &["m5.large", "m6i.large", "m7i.large"],
            )
            .build()
    };
    for preferred in ["m5", "m6i"] {
        let p = plan(vec![
            pool(),
            relaxed_preference("web-0", "karpenter.k8s.aws/instance-family", &[preferred]),
        ]);
        assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
        let n = node_of(&p, "web-0");
        assert_eq!(family(&n.instance_type), preferred, "{:?}", n.instance_types);
    }
    let p = plan(vec![
        pool(),
        relaxed_preference("web-0", "karpenter.k8s.aws/instance-family", &["m7i"]),
    ]);
    assert_ne!(
        family(&node_of(&p, "web-0").instance_type),
        "m7i",
        "the preferred type costs more, so the relaxed preference does not buy it"
    );
}

// The same tie broken on the capacity type by kube-scheduler's nodeaffinity `Score`, with
// m5.large's spot price set to its on-demand price in every zone (Karpenter AWS's
// pkg/providers/instance/instance.go `getCapacityType` would launch spot whenever the
// NodeClaim allows it); at the estimated spot price, cheaper, spot wins whatever the
// relaxed preference.
#[test]
fn a_new_nodes_capacity_type_follows_a_relaxed_preference_only_when_it_costs_no_more() {
    let pool = || {
        NodePoolBuilder::new("both")
            .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
            .requirement("node.kubernetes.io/instance-type", "In", &["m5.large"])
            .build()
    };
    let zones: Vec<String> = Catalog::embedded()
        .unwrap()
        .region("us-east-1")
        .unwrap()
        .zones()
        .to_vec();
    let same_price = |prices: &mut PriceBook| {
        let od = prices.on_demand("m5.large").unwrap();
        for z in &zones {
            prices.set_spot("m5.large", z, od);
        }
    };
    for preferred in ["spot", "on-demand"] {
        let p = plan_priced(
            vec![
                pool(),
                relaxed_preference("web-0", "karpenter.sh/capacity-type", &[preferred]),
            ],
            same_price,
        );
        assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
        assert_eq!(node_of(&p, "web-0").capacity_type.label(), preferred);
    }
    let p = plan(vec![
        pool(),
        relaxed_preference("web-0", "karpenter.sh/capacity-type", &["on-demand"]),
    ]);
    assert_eq!(node_of(&p, "web-0").capacity_type.label(), "spot");
}

// Karpenter: provisioning/scheduling/preferences.go `toleratePreferNoScheduleTaints`, the
// last relaxation, enabled in scheduler.go `NewScheduler` when a NodePool has a
// PreferNoSchedule taint; until then scheduling/taints.go `Taints.ToleratesPod` counts
// every effect, so such a NodePool is used only when no other fits.
#[test]
fn a_prefer_no_schedule_nodepool_is_used_only_when_no_other_fits() {
    let soft = NodePoolBuilder::new("soft")
        .weight(50)
        .requirement("karpenter.k8s.aws/instance-family", "In", &["m5", "m7i"])
        .taint("example.com/batch", "PreferNoSchedule")
        .build();
    let plain = NodePoolBuilder::new("plain")
        .weight(10)
        .requirement("karpenter.k8s.aws/instance-family", "In", &["m5", "c7i"])
        .build();
    let web = pod("web-0", "1", "2Gi").build();
    let only_soft = pod("m7i-0", "1", "2Gi")
        .node_selector("karpenter.k8s.aws/instance-family", "m7i")
        .build();
    let tolerating = pod("batch-0", "1", "2Gi")
        .toleration("example.com/batch", "Exists", None, "PreferNoSchedule")
        .build();
    let p = plan(vec![soft.clone(), plain.clone(), web, only_soft]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(
        node_of(&p, "web-0").nodepool,
        "plain",
        "the lighter untainted pool fits, so the taint keeps the pod off the heavier one"
    );
    assert_eq!(
        node_of(&p, "m7i-0").nodepool,
        "soft",
        "no other pool fits, so the taint is tolerated"
    );
    let p = plan(vec![soft, plain, tolerating]);
    assert_eq!(
        node_of(&p, "batch-0").nodepool,
        "soft",
        "a tolerating pod takes the heavier pool"
    );
}

// Karpenter: provisioning/scheduling/nodeclaim.go `NodeClaim.Add` filters the instance
// types by the merged requirements and the requests
// (`filterInstanceTypesByRequirements`) and refuses the pod with "min requirement not met"
// when fewer values than `minValues` remain; the pod then goes to another NodeClaim.
#[test]
fn pods_that_would_leave_too_few_instance_types_go_to_another_node() {
    let pool = NodePoolBuilder::new("few")
        .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
        .requirement_min_values(
            "node.kubernetes.io/instance-type",
            "In",
            &["m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge"],
            2,
        )
        .build();
    let mut items = vec![pool];
    items.extend((0..24).map(|i| pod(&format!("web-{i}"), "1", "1Gi").build()));
    let p = plan(items);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    for n in &p.nodes {
        let types: BTreeSet<&String> = n.instance_types.iter().collect();
        assert!(types.len() >= 2, "{} pods, types {types:?}", n.pods.len());
    }
}

// Karpenter: nodeclaim.go `NodeClaim.Add` ("min requirement not met"): a pod whose own
// requirements leave one family of a NodePool that needs two cannot join a node nor open
// one; the pods it would have shared a node with are still launched for.
#[test]
fn a_pod_that_breaks_min_values_is_refused_alone_and_its_neighbours_launch() {
    let pool = NodePoolBuilder::new("mixed")
        .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
        .requirement_min_values("karpenter.k8s.aws/instance-family", "In", &["m5", "r5"], 2)
        .build();
    let mut items = vec![pool];
    items.extend((0..3).map(|i| pod(&format!("web-{i}"), "250m", "512Mi").build()));
    items.push(
        pod("picky-0", "250m", "512Mi")
            .node_selector("karpenter.k8s.aws/instance-family", "m5")
            .build(),
    );
    let p = plan(items);
    let refused: Vec<&str> = p.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    assert_eq!(refused, ["default/picky-0"], "{:?}", p.unschedulable);
    assert!(p.unschedulable[0].has(Kind::MinValues), "{:?}", p.unschedulable);
    for i in 0..3 {
        let families: BTreeSet<&str> = node_of(&p, &format!("web-{i}"))
            .instance_types
            .iter()
            .map(|t| family(t))
            .collect();
        assert!(families.len() >= 2, "{families:?}");
    }
}
