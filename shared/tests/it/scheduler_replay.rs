//! kube-scheduler's own placement of a plan, replayed, and the plan grown so that the
//! scheduler's choices strand nothing (decide/checker/replay.rs, decide/scheduler_fit.rs).
//! Each test names the upstream code the rule comes from.

use carpool::decide::checker::{NodeRef, check};
use carpool::decide::kube_scheduler::{Order, replay};
use carpool::decide::provisioning::scheduler_fit::{HANDED_ORDERS, WHOLE_ORDERS, fit};
use carpool::decide::{PlannedNode, ProvisioningPlan};
use carpool::fixtures::{NodePoolBuilder, PodBuilder};
use carpool::model::{CapacityType, Resources};
use carpool::snapshot::Snapshot;
use serde_json::{Value, json};

use crate::support::{region, snapshot};

fn pod(name: &str, cpu: &str, created: &str) -> PodBuilder {
    PodBuilder::new(name)
        .label("app", name.trim_end_matches(char::is_numeric))
        .requests(cpu, "512Mi")
        .created(created)
        .unschedulable()
}

fn pool() -> Value {
    NodePoolBuilder::new("general")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
        .build()
}

/// A new on-demand node of `instance_type` (and its `alternatives`) for `pods`.
fn node(instance_type: &str, alternatives: &[&str], pods: &[&str]) -> PlannedNode {
    let region = region();
    let price = |name: &str| {
        let it = region.types().iter().find(|t| t.name == name).unwrap();
        region.prices().price(it, "us-east-1a", CapacityType::OnDemand).unwrap()
    };
    PlannedNode {
        nodepool: "general".into(),
        instance_type: instance_type.into(),
        instance_types: std::iter::once(instance_type)
            .chain(alternatives.iter().copied())
            .map(str::to_string)
            .collect(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        price_per_hour: price(instance_type),
        pods: pods.iter().map(|p| format!("default/{p}")).collect(),
        requests: Resources::default(),
        daemonset_overhead: Resources::default(),
        allocatable: Resources::default(),
        labels: [("karpenter.sh/nodepool", "general"), ("carpool.sh/managed", "true")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn plan(nodes: Vec<PlannedNode>) -> ProvisioningPlan {
    let cost = nodes.iter().map(|n| n.price_per_hour).sum();
    ProvisioningPlan {
        nodes,
        cost_per_hour: cost,
        ..ProvisioningPlan::default()
    }
}

/// Four small pods created first, one big pod last; the plan packs the big one with a
/// small one on an m5.xlarge and the other three small ones on a c5.large.
fn packed() -> (Snapshot, ProvisioningPlan) {
    let items = [
        pool(),
        pod("small1", "500m", "2026-12-01T10:00:00Z").build(),
        pod("small2", "500m", "2026-12-01T10:00:01Z").build(),
        pod("small3", "500m", "2026-12-01T10:00:02Z").build(),
        pod("small4", "500m", "2026-12-01T10:00:03Z").build(),
        pod("big", "3", "2026-12-01T10:00:04Z").build(),
    ];
    let p = plan(vec![
        node("m5.xlarge", &["m5.2xlarge"], &["big", "small1"]),
        node("c5.large", &[], &["small2", "small3", "small4"]),
    ]);
    (snapshot(&items), p)
}

// kube-scheduler: noderesources/least_allocated.go `leastRequestedScore` ((allocatable -
// requested) * 100 / allocatable) and balanced_allocation.go `balancedResourceScorer`
// score the emptier m5.xlarge higher for each small pod, taken first by
// queuesort/priority_sort.go `Less` (same priority: the older first); the big pod, last,
// finds no node with 3 CPUs left in one piece, although the plan's packing fits.
#[test]
fn the_scheduler_spreads_the_first_pods_over_the_emptiest_node_and_strands_the_big_one() {
    let (s, p) = packed();
    assert_eq!(check(&s, &region(), &p), vec![], "the plan itself is valid");
    let r = replay(&s, &region(), &p, Order::Queue);
    let stranded: Vec<&str> = r.stranded.iter().map(|s| s.pod.as_str()).collect();
    assert_eq!(stranded, ["default/big"], "bound: {:?}", r.bound);
    let on_first = r
        .bound
        .iter()
        .filter(|(_, n)| matches!(n, NodeRef::New(n) if n.index == 0))
        .count();
    assert!(on_first >= 2, "small pods went to the emptiest node: {:?}", r.bound);
    let upgrade = &r.stranded[0].upgrades;
    assert_eq!(
        upgrade
            .iter()
            .map(|u| (u.node, u.instance_type.as_str()))
            .collect::<Vec<_>>(),
        [(0, "m5.2xlarge")]
    );
}

// The same plan handed to its pods biggest first (decide/hand_tiers.rs): the big pod is
// requeued alone and bound first, to the emptiest node that fits it
// (`leastRequestedScore`), and the small ones fill what is left, in whatever order the
// scheduler's queues give them back. No order of the small tier strands a pod.
#[test]
fn a_wave_handed_biggest_first_strands_no_pod_where_queue_order_does() {
    let (s, p) = packed();
    for seed in 1..=16 {
        let r = replay(&s, &region(), &p, Order::Tiered(seed));
        assert_eq!(r.stranded, vec![], "seed {seed}, bound: {:?}", r.bound);
        assert_eq!(
            r.bound[0].0, "default/big",
            "seed {seed}: the big pod's tier goes first"
        );
    }
}

// podtopologyspread/scoring.go (`Score`, `NormalizeScore`) with the system default
// constraints (plugin.go `systemDefaultConstraints`: hostname maxSkew 3, zone maxSkew 5),
// weight 2 in default_plugins.go `getDefaultPlugins`: the second pod of a ReplicaSet
// goes to the node without its sibling, though least-allocated alone prefers the bigger
// node that has it. A pod of no controller has no default spread, and follows the room.
#[test]
fn the_scheduler_spreads_a_replicasets_pods_over_nodes_and_a_lone_pod_follows_the_room() {
    let placed = |owned: bool| {
        let web = |name: &str, at: &str| {
            let p = pod(name, "500m", at);
            if owned {
                p.owner("apps/v1", "ReplicaSet", "web-rs")
            } else {
                p
            }
        };
        let items = [
            pool(),
            web("web1", "2026-12-01T10:00:00Z").build(),
            web("web2", "2026-12-01T10:00:01Z").build(),
        ];
        let p = plan(vec![
            node("m5.4xlarge", &[], &["web1"]),
            node("m5.xlarge", &[], &["web2"]),
        ]);
        let r = replay(&snapshot(&items), &region(), &p, Order::Queue);
        assert_eq!(r.stranded, vec![]);
        r.bound
            .iter()
            .map(|(_, n)| match n {
                NodeRef::New(n) => n.index,
                NodeRef::Existing(_) => usize::MAX,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(placed(true), [0, 1], "siblings spread over the nodes");
    assert_eq!(placed(false), [0, 0], "the emptiest node takes both");
}

// queuesort/priority_sort.go `Less`: a higher priority goes first, whatever its age.
#[test]
fn a_higher_priority_pod_is_bound_first_and_finds_its_room() {
    let (mut s, p) = packed();
    for pod in &mut s.pods {
        if pod.metadata.name.as_deref() == Some("big") {
            pod.spec.as_mut().unwrap().priority = Some(1000);
        }
    }
    let r = replay(&s, &region(), &p, Order::Queue);
    assert_eq!(r.stranded, vec![]);
    assert_eq!(r.bound[0].0, "default/big");
}

// What kube-scheduler would strand is provided for, by the cheaper fix: growing the
// m5.xlarge to the m5.2xlarge of its alternatives, or a node of the pod's own (grown in
// turn if the scheduler fills it first). No order of the replay strands a pod, and the
// plan stays valid.
#[test]
fn fit_provides_for_the_stranded_pod_by_the_cheaper_fix_until_no_order_strands_a_pod() {
    let (s, p) = packed();
    let before = p.cost_per_hour;
    let region = region();
    let grow_only = {
        let it = |n: &str| *region.types().iter().find(|t| t.name == n).unwrap();
        let price = |n: &str| {
            region
                .prices()
                .price(it(n), "us-east-1a", CapacityType::OnDemand)
                .unwrap()
        };
        price("m5.2xlarge") - price("m5.xlarge")
    };
    let (fitted, fitting) = fit(&s, &region, p, &WHOLE_ORDERS);
    assert_eq!(fitting.stranded, Vec::<String>::new(), "{fitting:?}");
    assert!(!fitting.grown.is_empty() || !fitting.added.is_empty(), "{fitting:?}");
    assert!(
        fitting.added.len() <= 1,
        "a pod gets one node of its own at most: {fitting:?}"
    );
    assert!(
        fitting.cost_added > 0.0 && fitting.cost_added <= grow_only + 1e-9,
        "{fitting:?}"
    );
    assert!((fitted.cost_per_hour - before - fitting.cost_added).abs() < 1e-9);
    assert_eq!(check(&s, &region, &fitted), vec![]);
    for order in [Order::Queue, Order::Shuffled(1), Order::Shuffled(7)] {
        assert_eq!(replay(&s, &region, &fitted, order).stranded, vec![], "{order:?}");
    }
}

// Growing: where a node of the pod's own would cost more (on-demand only, and the pool
// offers the m5s alone), the m5.xlarge grows to its m5.2xlarge alternative.
#[test]
fn fit_grows_a_node_to_its_cheapest_big_enough_alternative() {
    let (s, p) = packed();
    let mut items = vec![
        NodePoolBuilder::new("general")
            .requirement(
                "node.kubernetes.io/instance-type",
                "In",
                &["m5.xlarge", "m5.2xlarge", "c5.large"],
            )
            .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
            .build(),
    ];
    items.extend(s.pods.iter().map(|p| serde_json::to_value(p).unwrap()));
    let s = snapshot(&items);
    let (fitted, fitting) = fit(&s, &region(), p, &WHOLE_ORDERS);
    assert_eq!(fitting.stranded, Vec::<String>::new(), "{fitting:?}");
    assert_eq!(
        fitting.grown.iter().map(|g| (g.0, g.2.as_str())).collect::<Vec<_>>(),
        [(0, "m5.2xlarge")],
        "{fitting:?}"
    );
    assert!(fitting.added.is_empty(), "{fitting:?}");
    assert_eq!(fitted.nodes[0].instance_types, ["m5.2xlarge"]);
    assert_eq!(check(&s, &region(), &fitted), vec![]);
}

// A NodePool with limits is left as planned: a bigger or an added node could pass them.
#[test]
fn a_nodepool_with_limits_is_not_grown_past_its_plan() {
    let (s, p) = packed();
    let mut items = vec![
        NodePoolBuilder::new("general")
            .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
            .limits(json!({"cpu": "64"}))
            .build(),
    ];
    items.extend(s.pods.iter().map(|p| serde_json::to_value(p).unwrap()));
    let s = snapshot(&items);
    let (fitted, fitting) = fit(&s, &region(), p.clone(), &WHOLE_ORDERS);
    assert_eq!(fitted, p);
    assert_eq!(fitting.stranded, ["default/big"], "{fitting:?}");
}

// A plan whose pods the scheduler places its own way without stranding any is left as is.
#[test]
fn a_plan_the_scheduler_cannot_strand_is_not_changed() {
    let items = [
        pool(),
        pod("a1", "500m", "2026-12-01T10:00:00Z").build(),
        pod("a2", "500m", "2026-12-01T10:00:01Z").build(),
    ];
    let s = snapshot(&items);
    let p = plan(vec![node("c5.large", &["c5.xlarge"], &["a1", "a2"])]);
    for orders in [&HANDED_ORDERS, &WHOLE_ORDERS] {
        let (fitted, fitting) = fit(&s, &region(), p.clone(), orders);
        assert_eq!(fitted, p);
        assert!(fitting.grown.is_empty() && fitting.stranded.is_empty(), "{fitting:?}");
    }
}

// The packed plan that queue order strands (above) costs nothing more when its wave is
// handed to its pods biggest first: the big pod is bound before the small ones can cut
// its room up, whatever order the small tier comes back in, so the fit grows nothing.
#[test]
fn a_plan_handed_biggest_first_is_fitted_without_growing_a_node() {
    let (s, p) = packed();
    let (fitted, fitting) = fit(&s, &region(), p.clone(), &HANDED_ORDERS);
    assert_eq!(fitted, p, "{fitting:?}");
    assert!(fitting.stranded.is_empty() && fitting.cost_added == 0.0, "{fitting:?}");
}
