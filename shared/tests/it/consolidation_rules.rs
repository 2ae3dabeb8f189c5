//! Issue 27's consolidation rules on snapshots, each after the Karpenter function it
//! follows: pending pods do not block consolidation but keep their room, a multi-node
//! replacement is cheaper than each removed type, spot replaced by spot keeps 15 cheaper
//! types (split too), and a node whose pods pack cheapest on several new nodes is replaced
//! by one when one is cheaper than it.

use std::collections::BTreeSet;
use std::time::SystemTime;

use carpool::catalog::RegionCatalog;
use carpool::decide::disruption::simulate::place;
use carpool::decide::disruption::{BlockKind, Ctx, DisruptionDecision, DisruptionInput, DisruptionSettings, Method};
use carpool::decide::disruption::{decide, split};
use carpool::decide::provisioning_plan;
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::CapacityType;
use carpool::model::well_known as wk;
use carpool::snapshot::Snapshot;
use serde_json::{Value, json};

use crate::support::region;

const NOW: &str = "2026-12-02T12:00:00Z";
const LONG_AGO: &str = "2026-12-01T00:00:00Z";

fn price(it: &str, ct: CapacityType) -> f64 {
    let r = region();
    let t = r.types().iter().find(|t| t.name == it).unwrap();
    r.prices().price(t, "us-east-1a", ct).unwrap()
}

/// A NodePool `default` with `requirements`, consolidating at once, every node at a time.
fn pool(requirements: &[(&str, &[&str])]) -> Value {
    let mut b = NodePoolBuilder::new("default");
    for (k, vs) in requirements {
        b = b.requirement(k, "In", vs);
    }
    let mut v = b.build();
    v["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    v
}

fn on_demand_m5() -> Value {
    pool(&[(wk::CAPACITY_TYPE, &["on-demand"]), (wk::INSTANCE_FAMILY, &["m5"])])
}

/// A Ready node of the pool `default` with its type's allocatable, in us-east-1a.
fn node(name: &str, it: &str, ct: &str) -> Value {
    let r = region();
    let t = r.types().iter().find(|t| t.name == it).unwrap();
    NodeBuilder::new(name)
        .label(wk::NODEPOOL, "default")
        .label("carpool.sh/managed", "true")
        .instance_type(it)
        .zone("us-east-1a")
        .label(wk::CAPACITY_TYPE, ct)
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .provider_id(&format!("aws:///us-east-1a/i-{name}"))
        .allocatable("cpu", &format!("{}m", t.allocatable.cpu_millis))
        .allocatable("memory", &format!("{}", t.allocatable.memory))
        .allocatable("pods", &format!("{}", t.allocatable.get("pods")))
        .ready(true)
        .build()
}

/// A running pod of the `web` ReplicaSet on `node`.
fn pod_on(name: &str, node: &str, cpu: &str, memory: &str) -> PodBuilder {
    PodBuilder::new(name)
        .namespace("shop")
        .label("app", "web")
        .requests(cpu, memory)
        .owner("apps/v1", "ReplicaSet", "web-7d9")
        .spec("nodeName", json!(node))
        .created(LONG_AGO)
        .running()
}

/// A pending pod no node can take: it selects a label that no node and no NodePool has.
fn stuck() -> Value {
    PodBuilder::pending_web("stuck", "1", "1Gi")
        .node_selector("example.com/disk", "nvme-that-nobody-has")
        .build()
}

fn snapshot(items: Vec<Value>) -> Snapshot {
    let mut all = items;
    all.push(EC2NodeClassBuilder::standard().build());
    let s = crate::support::snapshot(&all);
    assert!(s.skipped.is_empty() && s.bad_pods.is_empty(), "{s:?}");
    s
}

fn input<'a>(s: &'a Snapshot, region: &'a RegionCatalog<'a>) -> DisruptionInput<'a> {
    DisruptionInput {
        snapshot: s,
        region,
        now: SystemTime::from(NOW.parse::<jiff::Timestamp>().unwrap()),
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    }
}

fn decide_now(s: &Snapshot) -> DisruptionDecision {
    decide(&input(s, &region()))
}

fn blocked(d: &DisruptionDecision, node: &str) -> Option<(BlockKind, String)> {
    let c = d.candidates.iter().find(|c| c.node == node).unwrap();
    c.blocked_by.as_ref().map(|b| (b.kind, b.message.clone()))
}

fn assert_unschedulable(s: &Snapshot, pod: &str) {
    let plan = provisioning_plan(s, &region());
    assert!(
        plan.unschedulable.iter().any(|u| u.pod == pod),
        "the provisioner cannot place {pod}: {plan:?}"
    );
}

// Karpenter `SimulateScheduling` (`pkg/controllers/disruption/helpers.go`) puts the pending
// pods among the pods to place, and `Results.AllNonPendingPodsScheduled`
// (`pkg/controllers/provisioning/scheduling/scheduler.go`) ignores a pod that was pending
// before and still is; emptiness (`emptiness.go`) needs no simulation at all.
#[test]
fn an_empty_node_is_deleted_while_a_pod_no_node_can_take_is_pending() {
    let s = snapshot(vec![
        on_demand_m5(),
        node("empty", "m5.xlarge", "on-demand"),
        node("busy", "m5.large", "on-demand"),
        pod_on("web-1", "busy", "1500m", "4Gi").build(),
        stuck(),
    ]);
    assert_unschedulable(&s, "web/stuck");
    let d = decide_now(&s);
    let cmd = d.command.expect("the empty node goes");
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(cmd.nodes, vec!["empty".to_string()]);
}

// Karpenter `Results.AllNonPendingPodsScheduled`, as `computeConsolidation`
// (`pkg/controllers/disruption/consolidation.go`) and multi-node's
// `firstNConsolidationOption` read it.
#[test]
fn under_used_nodes_are_consolidated_while_a_pod_no_node_can_take_is_pending() {
    let mut items = vec![on_demand_m5(), stuck()];
    for n in ["a", "b", "c"] {
        items.push(node(n, "m5.xlarge", "on-demand"));
        items.push(pod_on(&format!("web-{n}"), n, "500m", "1Gi").build());
    }
    let s = snapshot(items);
    assert_unschedulable(&s, "web/stuck");
    let d = decide_now(&s);
    let cmd = d.command.expect("a consolidation");
    assert_eq!(cmd.method, Method::MultiNode);
    assert_eq!(cmd.nodes.len(), 3, "{cmd:?}");
    assert_eq!(cmd.replacements.len(), 1, "{cmd:?}");
    assert!(cmd.moves.iter().all(|m| m.pod != "web/stuck"), "{cmd:?}");
    // One under-used node alone is consolidated too.
    let s = snapshot(vec![
        on_demand_m5(),
        stuck(),
        node("big", "m5.4xlarge", "on-demand"),
        pod_on("web-a", "big", "1", "2Gi").build(),
    ]);
    let cmd = decide_now(&s).command.expect("a consolidation");
    assert_eq!(cmd.method, Method::SingleNode);
    assert_eq!(cmd.nodes, vec!["big".to_string()]);
}

/// `a` holds one 1.5-CPU pod; `b` one 1-CPU pod that may not be disrupted; `extra` adds
/// the pending pods.
fn room_for_pending(extra: Vec<Value>) -> Snapshot {
    let mut items = vec![
        on_demand_m5(),
        node("a", "m5.xlarge", "on-demand"),
        pod_on("web-a", "a", "1500m", "2Gi").build(),
        node("b", "m5.xlarge", "on-demand"),
        pod_on("web-b", "b", "1", "2Gi")
            .annotation("karpenter.sh/do-not-disrupt", "true")
            .build(),
    ];
    items.extend(extra);
    snapshot(items)
}

// Karpenter `SimulateScheduling` schedules the pending pods with the candidates' pods, so
// a consolidation never counts on room that a pending pod takes; Carpool places them
// first.
#[test]
fn a_removal_never_takes_the_room_a_pending_pod_has_now() {
    // Without a pending pod, a's pod moves onto b and a is deleted.
    let cmd = decide_now(&room_for_pending(vec![]))
        .command
        .expect("a is consolidated");
    assert_eq!(cmd.nodes, vec!["a".to_string()]);
    assert!(cmd.replacements.is_empty(), "{cmd:?}");
    // A pending pod of 2 CPU has room on b (and on a): it keeps b's, and a is replaced by a
    // cheaper node instead of its pod taking that room.
    let pending = PodBuilder::pending_web("waiting", "2", "1Gi").build();
    let s = room_for_pending(vec![pending]);
    let cmd = decide_now(&s).command.expect("a is still consolidated");
    assert_eq!(cmd.method, Method::SingleNode);
    assert_eq!(cmd.nodes, vec!["a".to_string()]);
    assert_eq!(cmd.replacements.len(), 1, "{cmd:?}");
    assert!(
        cmd.moves
            .iter()
            .all(|m| m.to == "replacement-0" && m.pod != "web/waiting"),
        "{cmd:?}"
    );
    assert!(cmd.replacements[0].price_per_hour < price("m5.xlarge", CapacityType::OnDemand));
}

// The flapping Karpenter's `SimulateScheduling` guards against by simulating pending pods:
// Carpool refuses a removal after which a pending pod that has room now would need a new
// node (or fit nowhere).
#[test]
fn a_node_a_pending_pod_has_room_on_is_kept_until_the_pod_lands() {
    // a (1 CPU used of 3.9) has room for the pending 2.5-CPU pod now, b (3 CPU used) has
    // not: without a, the pod would need a new node.
    let pending = PodBuilder::pending_web("waiting", "2500m", "1Gi").build();
    let mut items = vec![
        on_demand_m5(),
        node("a", "m5.xlarge", "on-demand"),
        pod_on("web-a", "a", "1", "2Gi").build(),
        node("b", "m5.xlarge", "on-demand"),
        pod_on("web-b", "b", "3", "2Gi")
            .annotation("karpenter.sh/do-not-disrupt", "true")
            .build(),
    ];
    let d = decide_now(&snapshot(items.clone()));
    assert_eq!(
        d.command.expect("without the pending pod, a goes").nodes,
        vec!["a".to_string()]
    );
    items.push(pending);
    let d = decide_now(&snapshot(items));
    assert!(d.command.is_none(), "{d:#?}");
    let (kind, why) = blocked(&d, "a").expect("a is kept");
    assert_eq!(kind, BlockKind::PendingPods, "{why}");
    assert!(why.contains("web/waiting") && why.contains("has room on a"), "{why}");

    // An empty node the pending pod has room on is not deleted either.
    let s = snapshot(vec![
        on_demand_m5(),
        node("empty", "m5.xlarge", "on-demand"),
        node("b", "m5.xlarge", "on-demand"),
        pod_on("web-b", "b", "3", "2Gi")
            .annotation("karpenter.sh/do-not-disrupt", "true")
            .build(),
        PodBuilder::pending_web("waiting", "2500m", "1Gi").build(),
    ]);
    let d = decide_now(&s);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "empty").map(|b| b.0), Some(BlockKind::PendingPods));
}

/// Two m5.2xlarge and one node of `third`, each with one small pod: the three fit on one
/// m5.large.
fn merge(third: &str) -> Snapshot {
    snapshot(vec![
        on_demand_m5(),
        node("a", "m5.2xlarge", "on-demand"),
        pod_on("web-a", "a", "500m", "1Gi").build(),
        node("b", "m5.2xlarge", "on-demand"),
        pod_on("web-b", "b", "500m", "1Gi").build(),
        node("c", third, "on-demand"),
        pod_on("web-c", "c", "500m", "1Gi").build(),
    ])
}

// Karpenter `filterOutSameInstanceType` (`pkg/controllers/disruption/
// multinodeconsolidation.go`): a replacement whose options include a removed node's type
// keeps only the options cheaper than the cheapest removed node of such a type.
#[test]
fn a_multi_node_replacement_never_lists_a_removed_type_at_its_price_or_above() {
    let cmd = decide_now(&merge("m5.xlarge")).command.expect("a merge");
    assert_eq!(cmd.method, Method::MultiNode);
    assert_eq!(cmd.nodes.len(), 3, "{cmd:?}");
    assert_eq!(cmd.replacements.len(), 1, "{cmd:?}");
    let r = &cmd.replacements[0];
    let cheapest_removed = price("m5.xlarge", CapacityType::OnDemand);
    for t in &r.instance_types {
        assert!(
            !["m5.xlarge", "m5.2xlarge"].contains(&t.as_str()),
            "{t} is a removed type: {r:?}"
        );
        assert!(price(t, CapacityType::OnDemand) < cheapest_removed, "{t}: {r:?}");
    }
    assert_eq!(r.instance_type, "m5.large");
}

// Karpenter `filterOutSameInstanceType`'s own example: [2xlarge, 2xlarge, small] into one
// small is the two 2xlarge deleted.
#[test]
fn a_merge_into_a_removed_nodes_type_is_that_node_kept_and_the_others_deleted() {
    let cmd = decide_now(&merge("m5.large")).command.expect("a consolidation");
    assert_eq!(cmd.method, Method::MultiNode);
    assert_eq!(cmd.nodes, vec!["a".to_string(), "b".to_string()]);
    assert!(cmd.replacements.is_empty(), "{cmd:?}");
    assert!(cmd.moves.iter().all(|m| m.to == "c"), "{cmd:?}");
}

// Karpenter `computeSpotToSpotConsolidation` (`pkg/controllers/disruption/consolidation.go`):
// at least `MinInstanceTypesForSpotToSpotConsolidation` (15) cheaper types, and the
// replacement launched from the cheapest 15 only.
#[test]
fn a_spot_to_spot_replacement_carries_the_fifteen_cheapest_types_only() {
    let s = snapshot(vec![
        pool(&[(wk::CAPACITY_TYPE, &["spot"])]),
        node("big", "m5.4xlarge", "spot"),
        pod_on("web-a", "big", "500m", "1Gi").build(),
    ]);
    let cmd = decide_now(&s).command.expect("spot to spot");
    assert_eq!(cmd.method, Method::SpotToSpot);
    let r = &cmd.replacements[0];
    assert_eq!(r.instance_types.len(), 15, "{r:?}");
    let prices: Vec<f64> = r.instance_types.iter().map(|t| price(t, CapacityType::Spot)).collect();
    assert!(prices.windows(2).all(|w| w[0] <= w[1]), "cheapest first: {prices:?}");
    assert!(!r.instance_types.contains(&"m5.4xlarge".to_string()));
}

/// A node of `ct` whose three pods, two CPU-heavy and one memory-heavy, split onto a
/// compute-optimised and a memory-optimised node; the pool allows `families`.
fn two_shapes(ct: &str, families: &[&str]) -> Snapshot {
    snapshot(vec![
        pool(&[(wk::CAPACITY_TYPE, &[ct]), (wk::INSTANCE_FAMILY, families)]),
        node("big", "m5.4xlarge", ct),
        pod_on("cpu-0", "big", "1400m", "512Mi").build(),
        pod_on("cpu-1", "big", "1400m", "512Mi").build(),
        pod_on("mem-0", "big", "100m", "6Gi").build(),
    ])
}

// Karpenter `computeSpotToSpotConsolidation`: a spot node is replaced by spot only with 15
// cheaper types; Carpool's split of a spot node into spot nodes follows the same rule.
#[test]
fn a_spot_node_is_split_into_spot_nodes_only_with_fifteen_cheaper_types_each() {
    // On-demand, the three families split it.
    let s = two_shapes("on-demand", &["m5", "c5", "r5"]);
    let cmd = decide_now(&s).command.expect("a split");
    assert_eq!(cmd.method, Method::Split);
    // On spot, each of the two nodes has fewer than 15 cheaper spot types in three
    // families: no split.
    let s = two_shapes("spot", &["m5", "c5", "r5"]);
    let catalog = region();
    let read = input(&s, &catalog);
    let mut ctx = Ctx::new(&read);
    let big = ctx.candidates.iter().position(|c| c.name == "big").unwrap();
    let refused = split::for_candidate(&mut ctx, big).expect("simulations left");
    let why = refused.expect_err("no spot split").expect("a reason");
    assert_eq!(why.kind, BlockKind::BelowThreshold, "{why:?}");
    assert!(why.message.contains("needed to replace spot by spot"), "{why:?}");
    let d = decide_now(&s);
    assert!(d.command.as_ref().is_none_or(|c| c.method != Method::Split), "{d:#?}");
    // With every family, a spot split keeps the 15 cheapest types of each node.
    let s = two_shapes(
        "spot",
        &[
            "m5", "c5", "r5", "m6i", "c6i", "r6i", "m7i", "c7i", "r7i", "m6a", "c6a", "r6a",
        ],
    );
    let catalog = region();
    let read = input(&s, &catalog);
    let mut ctx = Ctx::new(&read);
    let big = ctx.candidates.iter().position(|c| c.name == "big").unwrap();
    if let Ok(cmd) = split::for_candidate(&mut ctx, big).expect("simulations left") {
        assert_eq!(cmd.replacements.len(), 2);
        for r in &cmd.replacements {
            assert_eq!(r.capacity_type, CapacityType::Spot);
            assert_eq!(r.instance_types.len(), 15, "{r:?}");
        }
    } else {
        panic!("with twelve families a spot split pays");
    }
}

// Karpenter `computeConsolidation` takes the one replacement its scheduler plans when it
// is cheaper than the candidate; its scheduler grows one NodeClaim while one type holds the
// pods (`NodeClaim.Add`, `pkg/controllers/provisioning/scheduling/nodeclaim.go`).
#[test]
fn a_node_whose_pods_pack_cheapest_on_three_nodes_is_replaced_by_one_cheaper_node() {
    let s = snapshot(vec![
        pool(&[
            (wk::CAPACITY_TYPE, &["on-demand"]),
            (wk::INSTANCE_FAMILY, &["m5"]),
            (wk::INSTANCE_SIZE, &["large", "2xlarge", "4xlarge"]),
        ]),
        node("big", "m5.4xlarge", "on-demand"),
        pod_on("web-0", "big", "1800m", "1Gi").build(),
        pod_on("web-1", "big", "1800m", "1Gi").build(),
        pod_on("web-2", "big", "1800m", "1Gi").build(),
    ]);
    // The cheapest packing: three m5.large.
    let removed: BTreeSet<String> = ["big".to_string()].into();
    let packed = place(&s, &region(), &s.nodepools, &removed, usize::MAX).expect("they fit");
    assert_eq!(packed.new_nodes.len(), 3, "{:?}", packed.new_nodes);
    // Replaced by one m5.2xlarge, cheaper than the m5.4xlarge.
    let cmd = decide_now(&s).command.expect("one node");
    assert_eq!(cmd.method, Method::SingleNode);
    assert_eq!(cmd.replacements.len(), 1, "{cmd:?}");
    assert_eq!(cmd.replacements[0].instance_type, "m5.2xlarge");
    assert!(cmd.moves.iter().all(|m| m.to == "replacement-0"), "{cmd:?}");
    let saved = price("m5.4xlarge", CapacityType::OnDemand) - price("m5.2xlarge", CapacityType::OnDemand);
    assert!((cmd.savings_per_hour - saved).abs() < 1e-9, "{cmd:?}");
}
