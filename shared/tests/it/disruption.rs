//! The disruption decision on snapshots: each method, each reason a node is kept, budgets,
//! thresholds and `Balanced`, with the upstream rule each follows cited.

use std::time::SystemTime;

use carpool::catalog::RegionCatalog;
use carpool::decide::disruption::drift::template_hash;
use carpool::decide::disruption::savings::balanced_score;
use carpool::decide::disruption::{BlockKind, DisruptionDecision, DisruptionInput, DisruptionSettings, Method, decide};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known::NODEPOOL_HASH as HASH_KEY;
use carpool::model::{CapacityType, EC2NodeClass, NodePool};
use carpool::snapshot::Snapshot;
use serde_json::{Value, json};

use crate::support::region;

const NOW: &str = "2026-12-02T12:00:00Z";
const LONG_AGO: &str = "2026-12-01T00:00:00Z";

fn at(t: &str) -> SystemTime {
    SystemTime::from(t.parse::<jiff::Timestamp>().unwrap())
}

fn price(it: &str, ct: CapacityType) -> f64 {
    let r = region();
    let t = r.types().iter().find(|t| t.name == it).unwrap();
    r.prices().price(t, "us-east-1a", ct).unwrap()
}

/// A NodePool `default` with `requirements` (`[key, op, values]`) and `disruption` (its
/// `spec.disruption`, merged over consolidateAfter 0s).
fn pool(name: &str, requirements: &[(&str, &str, &[&str])], disruption: Value) -> Value {
    let mut b = NodePoolBuilder::new(name);
    for (k, op, vs) in requirements {
        b = b.requirement(k, op, vs);
    }
    let mut v = b.build();
    let mut d = json!({"consolidateAfter": "0s"});
    if let (Some(d), Value::Object(extra)) = (d.as_object_mut(), disruption) {
        d.extend(extra);
    }
    v["spec"]["disruption"] = d;
    v
}

fn on_demand_m5(name: &str) -> Value {
    pool(
        name,
        &[
            ("karpenter.sh/capacity-type", "In", &["on-demand"]),
            ("karpenter.k8s.aws/instance-family", "In", &["m5"]),
        ],
        json!({}),
    )
}

/// A Ready node of `pool` launched long ago, with its type's allocatable.
fn node(name: &str, pool: &str, it: &str, ct: &str) -> Value {
    let r = region();
    let t = r.types().iter().find(|t| t.name == it).unwrap();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": LONG_AGO, "labels": {
            "kubernetes.io/hostname": name,
            "karpenter.sh/nodepool": pool,
            "carpool.sh/managed": "true",
            "node.kubernetes.io/instance-type": it,
            "topology.kubernetes.io/zone": "us-east-1a",
            "karpenter.sh/capacity-type": ct,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        }},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {
            "allocatable": {
                "cpu": format!("{}m", t.allocatable.cpu_millis),
                "memory": format!("{}", t.allocatable.memory),
                "pods": format!("{}", t.allocatable.get("pods")),
            },
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": LONG_AGO}],
        },
    })
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

fn ds_pod_on(name: &str, node: &str) -> Value {
    PodBuilder::new(name)
        .namespace("kube-system")
        .requests("100m", "128Mi")
        .owner("apps/v1", "DaemonSet", "aws-node")
        .spec("nodeName", json!(node))
        .created(LONG_AGO)
        .running()
        .build()
}

fn snapshot(items: Vec<Value>) -> Snapshot {
    let mut s = Snapshot::default();
    let mut all = items;
    all.push(EC2NodeClassBuilder::standard().build());
    s.add_text("test", &json!({"kind": "List", "items": all}).to_string())
        .unwrap();
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    s
}

fn decide_at(s: &Snapshot, now: &str) -> DisruptionDecision {
    decide_with(s, now, |_| {})
}

fn decide_with(s: &Snapshot, now: &str, tune: impl FnOnce(&mut RegionCatalog<'static>)) -> DisruptionDecision {
    let mut region = region();
    tune(&mut region);
    decide(&DisruptionInput {
        snapshot: s,
        region: &region,
        now: at(now),
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    })
}

fn blocked(d: &DisruptionDecision, node: &str) -> Option<BlockKind> {
    d.candidates
        .iter()
        .find(|c| c.node == node)
        .unwrap_or_else(|| panic!("{node} not reported: {d:#?}"))
        .blocked_by
        .as_ref()
        .map(|b| b.kind)
}

/// Three m5.xlarge, each with one 1-CPU pod: together they fit on one. The pool's budget
/// allows every node (Karpenter's default 10% of three nodes is one).
fn three_underused(extra: Vec<Value>) -> Vec<Value> {
    let mut p = on_demand_m5("default");
    p["spec"]["disruption"]["budgets"] = json!([{"nodes": "100%"}]);
    let mut items = vec![p];
    for n in ["a", "b", "c"] {
        items.push(node(n, "default", "m5.xlarge", "on-demand"));
        // Together they fit one m5.large, cheaper than each removed m5.xlarge.
        items.push(pod_on(&format!("web-{n}"), n, "500m", "1Gi").build());
    }
    items.extend(extra);
    items
}

// Karpenter `emptiness.go` (`Emptiness.ComputeCommands`): a node whose reschedulable pods
// are none is deleted; DaemonSet pods do not count (`pod.IsReschedulable`).
#[test]
fn an_empty_node_past_consolidate_after_is_deleted_and_its_daemonset_pod_does_not_count() {
    let s = snapshot(vec![
        on_demand_m5("default"),
        node("empty", "default", "m5.xlarge", "on-demand"),
        ds_pod_on("aws-node-1", "empty"),
        node("busy", "default", "m5.large", "on-demand"),
        pod_on("web-1", "busy", "1500m", "4Gi").build(),
    ]);
    let d = decide_at(&s, NOW);
    let cmd = d.command.expect("a command");
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(cmd.nodes, vec!["empty".to_string()]);
    assert!(cmd.replacements.is_empty() && cmd.moves.is_empty());
    assert!((cmd.savings_per_hour - price("m5.xlarge", CapacityType::OnDemand)).abs() < 1e-9);
}

// Karpenter disrupts only the nodes it has a NodeClaim of (`pkg/controllers/state/
// statenode.go`, `StateNode.Managed`: `NodeClaim != nil`), not every node that carries
// the `karpenter.sh/nodepool` label. Carpool's equivalent of the NodeClaim is its own
// launch: an instance with its launch-id and deployment tags (`housekeeping::ownership`).
#[test]
fn a_karpenter_labelled_node_that_carpool_did_not_launch_is_never_a_candidate() {
    let mut karpenters = node("karpenter-node", "default", "m5.xlarge", "on-demand");
    karpenters["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("carpool.sh/managed");
    let s = snapshot(three_underused(vec![karpenters]));
    let owned: std::collections::BTreeSet<String> = ["i-a", "i-b", "i-c"].map(String::from).into();
    let region = region();
    let input = |owned: Option<std::collections::BTreeSet<String>>| DisruptionInput {
        snapshot: &s,
        region: &region,
        now: at(NOW),
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned,
        held_back: Default::default(),
    };
    // By its labels alone, the empty Karpenter node would go first.
    let by_label = decide(&input(None));
    assert_eq!(
        by_label.command.expect("a command").nodes,
        vec!["karpenter-node".to_string()]
    );
    // With the instances Carpool launched known, it is not managed, and the command
    // consolidates Carpool's own under-used nodes instead.
    let d = decide(&input(Some(owned)));
    assert_eq!(blocked(&d, "karpenter-node"), Some(BlockKind::NotManaged));
    let report = d.candidates.iter().find(|c| c.node == "karpenter-node").unwrap();
    let why = &report.blocked_by.as_ref().unwrap().message;
    assert!(why.contains("not launched by this Carpool deployment"), "{why}");
    let cmd = d.command.expect("Carpool's own nodes are consolidated");
    assert!(!cmd.nodes.contains(&"karpenter-node".to_string()), "{cmd:?}");
    assert!(
        cmd.nodes.iter().all(|n| ["a", "b", "c"].contains(&n.as_str())),
        "{cmd:?}"
    );
}

// Karpenter `nodeclaim/disruption/consolidation.go`: a node is Consolidatable only once
// `consolidateAfter` has passed since its last pod event.
#[test]
fn a_node_younger_than_consolidate_after_is_kept() {
    let mut p = on_demand_m5("default");
    p["spec"]["disruption"]["consolidateAfter"] = json!("1h");
    let mut young = node("young", "default", "m5.xlarge", "on-demand");
    young["metadata"]["creationTimestamp"] = json!("2026-12-02T11:50:00Z");
    let s = snapshot(vec![p, young]);
    let d = decide_at(&s, NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "young"), Some(BlockKind::ConsolidateAfter));
    // An hour later it goes.
    let d = decide_at(&s, "2026-12-02T12:51:00Z");
    assert_eq!(d.command.unwrap().nodes, vec!["young".to_string()]);
}

// Karpenter `pkg/utils/disruption` (`IsDisruptable`): `karpenter.sh/do-not-disrupt` on a
// pod blocks its node.
#[test]
fn a_pod_annotated_do_not_disrupt_keeps_its_node() {
    let s = snapshot(
        three_underused(vec![])
            .into_iter()
            .map(|mut v| {
                if v["metadata"]["name"] == "web-a" {
                    v["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
                }
                v
            })
            .collect(),
    );
    let d = decide_at(&s, NOW);
    assert_eq!(blocked(&d, "a"), Some(BlockKind::DoNotDisrupt));
    let cmd = d.command.expect("b and c still consolidate");
    assert!(!cmd.nodes.contains(&"a".to_string()), "{cmd:?}");
}

// Karpenter `pdb.Limits.CanEvictPods`: a pod whose PDB allows no disruption blocks its node.
#[test]
fn a_pdb_allowing_no_disruption_keeps_its_node() {
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 3},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 3, "desiredHealthy": 3, "expectedPods": 3}});
    let s = snapshot(three_underused(vec![pdb]));
    let d = decide_at(&s, NOW);
    assert!(d.command.is_none(), "{d:#?}");
    for n in ["a", "b", "c"] {
        assert_eq!(blocked(&d, n), Some(BlockKind::Pdb));
    }
}

// Surge before eviction (crate::decide::disruption::surge): a workload that opted in is
// restarted by the drain instead of waiting for its PDB, so its PDB does not keep the node;
// Karpenter's `pdb.Limits.CanEvictPods` keeps it, and still does here for the rest.
#[test]
fn a_pdb_allowing_no_disruption_does_not_keep_the_node_of_a_workload_that_opted_in_to_a_surge() {
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 3},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 3, "desiredHealthy": 3, "expectedPods": 3}});
    let opted = three_underused(vec![pdb])
        .into_iter()
        .map(|mut v| {
            if v["kind"] == "Pod" && v["metadata"]["name"] == "web-a" {
                v["metadata"]["annotations"] = json!({"carpool.sh/surge-before-eviction": "true"});
            }
            v
        })
        .collect();
    let d = decide_at(&snapshot(opted), NOW);
    assert_ne!(blocked(&d, "a"), Some(BlockKind::Pdb), "{d:#?}");
    assert_eq!(blocked(&d, "b"), Some(BlockKind::Pdb), "not opted in: kept");
}

#[test]
fn a_bare_pod_keeps_its_node_unless_the_nodepool_opts_in() {
    let bare = |v: Vec<Value>| -> Vec<Value> {
        v.into_iter()
            .map(|mut v| {
                if v["metadata"]["name"] == "web-a" {
                    v["metadata"]["ownerReferences"] = Value::Null;
                }
                v
            })
            .collect()
    };
    let d = decide_at(&snapshot(bare(three_underused(vec![]))), NOW);
    assert_eq!(blocked(&d, "a"), Some(BlockKind::BarePod));
    let opted = bare(three_underused(vec![]))
        .into_iter()
        .map(|mut v| {
            if v["kind"] == "NodePool" {
                v["metadata"]["annotations"] = json!({"carpool.sh/disrupt-bare-pods": "true"});
            }
            v
        })
        .collect();
    let d = decide_at(&snapshot(opted), NOW);
    assert!(d.command.unwrap().nodes.contains(&"a".to_string()));
}

// Karpenter `multinodeconsolidation.go` (`firstNConsolidationOption`): several nodes
// removed with at most one replacement, cheaper than they were.
#[test]
fn three_underused_nodes_become_one_cheaper_node() {
    let s = snapshot(three_underused(vec![]));
    let d = decide_at(&s, NOW);
    let cmd = d.command.expect("a command");
    assert_eq!(cmd.method, Method::MultiNode);
    assert_eq!(cmd.nodes.len(), 3);
    assert_eq!(cmd.replacements.len(), 1);
    let removed = 3.0 * price("m5.xlarge", CapacityType::OnDemand);
    for t in &cmd.replacements[0].instance_types {
        assert!(
            price(t, CapacityType::OnDemand) <= removed * 0.9 + 1e-9,
            "{t} is not cheap enough"
        );
    }
    assert_eq!(cmd.moves.len(), 3);
    assert!(cmd.moves.iter().all(|m| m.to == "replacement-0"));
    assert!(cmd.savings_per_hour >= removed * 0.1);
}

// Karpenter `NodePool.GetAllowedDisruptionsByReason`: `nodes: "1"` allows one node at a
// time, and the default `10%` of three nodes rounds up to one.
#[test]
fn the_default_budget_of_ten_percent_rounds_up_to_one_node() {
    let items = three_underused(vec![])
        .into_iter()
        .map(|mut v| {
            if v["kind"] == "NodePool" {
                v["spec"]["disruption"].as_object_mut().unwrap().remove("budgets");
            }
            v
        })
        .collect();
    let cmd = decide_at(&snapshot(items), NOW).command.expect("one node");
    assert_eq!(cmd.nodes.len(), 1, "{cmd:?}");
}

#[test]
fn a_budget_of_one_node_disrupts_at_most_one_node() {
    let items = three_underused(vec![])
        .into_iter()
        .map(|mut v| {
            if v["kind"] == "NodePool" {
                v["spec"]["disruption"]["budgets"] = json!([{"nodes": "1"}]);
            }
            v
        })
        .collect();
    let d = decide_at(&snapshot(items), NOW);
    let cmd = d.command.expect("one node still goes");
    assert_eq!(cmd.nodes.len(), 1, "{cmd:?}");
    assert_eq!(cmd.method, Method::SingleNode);
    assert!(cmd.replacements.is_empty(), "its pod moves onto another node: {cmd:?}");
}

// Karpenter `Budget.IsActive`: a scheduled budget holds from each time its cron schedule
// fires (UTC), for its duration.
#[test]
fn a_budget_scheduled_for_business_hours_blocks_only_then() {
    let items: Vec<Value> = three_underused(vec![])
        .into_iter()
        .map(|mut v| {
            if v["kind"] == "NodePool" {
                v["spec"]["disruption"]["budgets"] =
                    json!([{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]);
            }
            v
        })
        .collect();
    let s = snapshot(items);
    // Wednesday 12:00 UTC: inside 09:00–17:00.
    let d = decide_at(&s, NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "a"), Some(BlockKind::Budget));
    // Wednesday 18:00 UTC: outside.
    assert!(decide_at(&s, "2026-12-02T18:00:00Z").command.is_some());
}

// Karpenter `singlenodeconsolidation.go`, with Carpool's rule that a node is never replaced
// by its own type (aws/karpenter-provider-aws #7146's churn).
#[test]
fn a_node_is_never_replaced_by_its_own_type() {
    let s = snapshot(vec![
        on_demand_m5("default"),
        node("a", "default", "m5.large", "on-demand"),
        pod_on("web-a", "a", "1200m", "5Gi").build(),
    ]);
    let d = decide_at(&s, NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "a"), Some(BlockKind::SameType));
}

#[test]
fn an_oversized_on_demand_node_is_replaced_by_a_cheaper_one_whose_every_alternative_is_cheaper() {
    let s = snapshot(vec![
        on_demand_m5("default"),
        node("big", "default", "m5.4xlarge", "on-demand"),
        pod_on("web-a", "big", "1", "2Gi").build(),
    ]);
    let d = decide_at(&s, NOW);
    let cmd = d.command.expect("a command");
    assert_eq!(cmd.method, Method::SingleNode);
    let r = &cmd.replacements[0];
    assert_eq!(r.capacity_type, CapacityType::OnDemand);
    let removed = price("m5.4xlarge", CapacityType::OnDemand);
    assert!(!r.instance_types.contains(&"m5.4xlarge".to_string()));
    for t in &r.instance_types {
        assert!(price(t, CapacityType::OnDemand) <= removed * 0.9 + 1e-9, "{t}");
    }
}

#[test]
fn a_saving_below_the_nodepools_threshold_is_not_taken() {
    let mut p = on_demand_m5("default");
    p["metadata"]["annotations"] = json!({"carpool.sh/consolidation-min-savings-percent": "90"});
    let s = snapshot(vec![
        p,
        node("big", "default", "m5.xlarge", "on-demand"),
        pod_on("web-a", "big", "1", "2Gi").build(),
    ]);
    let d = decide_at(&s, NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "big"), Some(BlockKind::BelowThreshold));
}

#[test]
fn a_node_being_disrupted_is_not_a_candidate() {
    let items = three_underused(vec![])
        .into_iter()
        .map(|mut v| {
            if v["metadata"]["name"] == "a" {
                v["spec"]["taints"] = json!([{"key": "carpool.sh/disrupted", "effect": "NoSchedule"}]);
            }
            v
        })
        .collect();
    let d = decide_at(&snapshot(items), NOW);
    assert_eq!(blocked(&d, "a"), Some(BlockKind::Disrupting));
    assert!(!d.command.unwrap().nodes.contains(&"a".to_string()));
}

#[test]
fn a_node_no_nodepool_manages_is_never_touched() {
    let mut foreign = node("foreign", "default", "m5.xlarge", "on-demand");
    foreign["metadata"]["labels"] = json!({"kubernetes.io/hostname": "foreign",
        "node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": "us-east-1a"});
    let d = decide_at(&snapshot(vec![on_demand_m5("default"), foreign]), NOW);
    assert!(d.command.is_none());
    assert_eq!(blocked(&d, "foreign"), Some(BlockKind::NotManaged));
}

// Karpenter AWS provider `RepairPolicies` (Ready False/Unknown for 30 minutes) and the node
// health controller's 20% limit (`pkg/controllers/node/health`).
#[test]
fn a_node_not_ready_for_thirty_minutes_is_repaired_unless_much_of_its_pool_is_unhealthy() {
    let sick = |name: &str, since: &str| {
        let mut n = node(name, "default", "m5.large", "on-demand");
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "Unknown", "lastTransitionTime": since}]);
        n
    };
    let mut items = vec![on_demand_m5("default"), sick("sick", "2026-12-02T11:20:00Z")];
    for i in 0..5 {
        let n = format!("ok-{i}");
        items.push(node(&n, "default", "m5.large", "on-demand"));
        items.push(pod_on(&format!("web-{i}"), &n, "1500m", "5Gi").build());
    }
    items.push(pod_on("web-sick", "sick", "1500m", "5Gi").build());
    let d = decide_at(&snapshot(items.clone()), NOW);
    let cmd = d.command.expect("repair");
    assert_eq!(cmd.method, Method::Repair);
    assert_eq!(cmd.nodes, vec!["sick".to_string()]);
    assert_eq!(cmd.replacements.len(), 1);
    // 20 minutes is not long enough.
    assert!(
        decide_at(&snapshot(items.clone()), "2026-12-02T11:40:00Z")
            .command
            .is_none()
    );
    // Two of six unhealthy (33%) is a fault of the pool: no repair.
    items.push(sick("sick-2", "2026-12-02T11:00:00Z"));
    let d = decide_at(&snapshot(items), NOW);
    assert!(d.command.as_ref().is_none_or(|c| c.method != Method::Repair), "{d:#?}");
}

// Karpenter `expiration` controller: a NodeClaim older than `expireAfter` is replaced.
#[test]
fn a_node_past_expire_after_is_replaced() {
    let mut p = on_demand_m5("default");
    p["spec"]["template"]["spec"]["expireAfter"] = json!("24h");
    let s = snapshot(vec![
        p,
        node("old", "default", "m5.large", "on-demand"),
        pod_on("web-a", "old", "1500m", "5Gi").build(),
    ]);
    let cmd = decide_at(&s, NOW).command.expect("expired");
    assert_eq!(cmd.method, Method::Expiration);
    assert_eq!(cmd.nodes, vec!["old".to_string()]);
    assert_eq!(cmd.replacements.len(), 1);
    assert_eq!(cmd.moves[0].to, "replacement-0");
}

// Karpenter `drift.go` with `NodePool.Hash` (`karpenter.sh/nodepool-hash`).
#[test]
fn a_node_launched_from_an_older_template_is_replaced_and_a_current_one_is_not() {
    let p = on_demand_m5("default");
    let pool: NodePool = carpool::model::manifest::from_value(&p).unwrap();
    let class: EC2NodeClass = EC2NodeClassBuilder::standard().typed().unwrap();
    let current = template_hash(&pool, Some(&class));
    let with_hash = |name: &str, hash: &str| {
        let mut n = node(name, "default", "m5.large", "on-demand");
        n["metadata"]["labels"][HASH_KEY] = json!(hash);
        n["metadata"]["labels"][carpool::model::well_known::NODEPOOL_HASH_VERSION] =
            json!(carpool::decide::disruption::drift::HASH_VERSION);
        n
    };
    let s = snapshot(vec![
        p,
        with_hash("current", &current),
        pod_on("web-a", "current", "1500m", "5Gi").build(),
        with_hash("stale", "0123456789abcdef"),
        pod_on("web-b", "stale", "1500m", "5Gi").build(),
    ]);
    let cmd = decide_at(&s, NOW).command.expect("drift");
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.nodes, vec!["stale".to_string()]);
}

fn both_capacity_m5() -> Value {
    pool(
        "default",
        &[
            ("karpenter.sh/capacity-type", "In", &["spot", "on-demand"]),
            ("karpenter.k8s.aws/instance-family", "In", &["m5"]),
        ],
        json!({}),
    )
}

// aws/karpenter-provider-aws #3480 and #7832: a node that fell back to on-demand stays
// there under Karpenter; Carpool returns it to spot once spot is available.
#[test]
fn an_on_demand_node_returns_to_spot_once_spot_is_available_again() {
    let s = snapshot(vec![
        both_capacity_m5(),
        node("od", "default", "m5.large", "on-demand"),
        pod_on("web-a", "od", "1500m", "5Gi").build(),
    ]);
    let cmd = decide_at(&s, NOW).command.expect("back to spot");
    assert_eq!(cmd.method, Method::ReturnToSpot);
    assert_eq!(cmd.replacements[0].capacity_type, CapacityType::Spot);
    assert!(cmd.savings_per_hour > 0.1 * price("m5.large", CapacityType::OnDemand));
    // While m5 spot is out of capacity everywhere, the node stays.
    let d = decide_with(&s, NOW, |r| {
        let zones = r.zones().to_vec();
        for t in [
            "m5.large",
            "m5.xlarge",
            "m5.2xlarge",
            "m5.4xlarge",
            "m5.8xlarge",
            "m5.12xlarge",
            "m5.16xlarge",
            "m5.24xlarge",
            "m5.metal",
        ] {
            for z in &zones {
                r.mark_unavailable(t, z, CapacityType::Spot);
            }
        }
    });
    assert!(d.command.is_none(), "{d:#?}");
}

// Karpenter `designs/spot-consolidation.md`: spot-to-spot needs 15 cheaper spot types.
#[test]
fn a_spot_node_moves_to_cheaper_spot_only_with_fifteen_cheaper_types() {
    let all_families = pool("default", &[("karpenter.sh/capacity-type", "In", &["spot"])], json!({}));
    let s = snapshot(vec![
        all_families,
        node("big", "default", "m5.4xlarge", "spot"),
        pod_on("web-a", "big", "500m", "1Gi").build(),
    ]);
    let cmd = decide_at(&s, NOW).command.expect("spot to spot");
    assert_eq!(cmd.method, Method::SpotToSpot);
    assert!(cmd.replacements[0].instance_types.len() >= 15);
    assert!(!cmd.replacements[0].instance_types.contains(&"m5.4xlarge".to_string()));
    // Within the m5 family there are not 15 cheaper types.
    let m5_only = pool(
        "default",
        &[
            ("karpenter.sh/capacity-type", "In", &["spot"]),
            ("karpenter.k8s.aws/instance-family", "In", &["m5"]),
        ],
        json!({}),
    );
    let s = snapshot(vec![
        m5_only,
        node("big", "default", "m5.4xlarge", "spot"),
        pod_on("web-a", "big", "500m", "1Gi").build(),
    ]);
    let d = decide_at(&s, NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "big"), Some(BlockKind::BelowThreshold));
}

// Karpenter v1.14 `ScoreMove` (its test "should approve an oversized node consolidation"
// and "should reject a marginal move", with the RFC's pool of ten nodes).
#[test]
fn balanced_scores_moves_as_karpenter_does() {
    let oversized = balanced_score(7.26, 4.0, 58.08, 90.0);
    assert!(oversized >= 0.5, "{oversized}");
    let marginal = balanced_score(2.42, 9.0, 58.08, 90.0);
    assert!(marginal < 0.5, "{marginal}");
    assert!((marginal - (2.42 / 58.08) / (9.0 / 90.0)).abs() < 1e-9);
    assert!(balanced_score(4.84, 0.0, 58.08, 90.0).is_infinite());
    assert_eq!(balanced_score(0.0, 0.0, 58.08, 90.0), 0.0);
    assert_eq!(balanced_score(4.84, 5.0, 0.0, 90.0), 0.0);
}

#[test]
fn a_balanced_pool_refuses_a_move_that_disrupts_much_for_little() {
    // Ten full m5.large whose pods may not move, and one m5.xlarge whose 16 small pods fit
    // on an m5.large: WhenEmptyOrUnderutilized saves half its cost; Balanced weighs the
    // 17 units of disruption (the node and its pods) against 67 in the pool, and the
    // 8% of the pool's cost saved: score 0.33 < 0.5.
    let build = |policy: &str| {
        let mut items = vec![pool(
            "default",
            &[
                ("karpenter.sh/capacity-type", "In", &["on-demand"]),
                ("karpenter.k8s.aws/instance-family", "In", &["m5"]),
            ],
            json!({"consolidationPolicy": policy, "budgets": [{"nodes": "100%"}]}),
        )];
        for i in 0..10 {
            let n = format!("busy-{i}");
            items.push(node(&n, "default", "m5.large", "on-demand"));
            for j in 0..4 {
                items.push(
                    pod_on(&format!("busy-{i}-{j}"), &n, "450m", "1500Mi")
                        .annotation("karpenter.sh/do-not-disrupt", "true")
                        .build(),
                );
            }
        }
        items.push(node("x", "default", "m5.xlarge", "on-demand"));
        for j in 0..16 {
            items.push(pod_on(&format!("x-{j}"), "x", "100m", "300Mi").build());
        }
        snapshot(items)
    };
    let cmd = decide_at(&build("WhenEmptyOrUnderutilized"), NOW)
        .command
        .expect("underutilized");
    assert_eq!(cmd.nodes, vec!["x".to_string()]);
    let d = decide_at(&build("Balanced"), NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "x"), Some(BlockKind::BelowThreshold));

    // Carpool's own annotation sets k: with k = 4 the threshold is 0.25, and the same move
    // (score 0.33) is made. Karpenter's k is the constant `BalancedK` = 2.
    let mut lenient = build("Balanced");
    for p in lenient.nodepools.iter_mut() {
        p.metadata.annotations.get_or_insert_default().insert(
            carpool::model::nodepool::CONSOLIDATION_THRESHOLD_ANNOTATION.into(),
            "4".into(),
        );
    }
    let cmd = decide_at(&lenient, NOW).command.expect("approved with k = 4");
    assert_eq!(cmd.nodes, vec!["x".to_string()]);
}

#[test]
fn when_empty_pools_only_delete_empty_nodes() {
    let items = three_underused(vec![])
        .into_iter()
        .map(|mut v| {
            if v["kind"] == "NodePool" {
                v["spec"]["disruption"]["consolidationPolicy"] = json!("WhenEmpty");
            }
            v
        })
        .collect();
    let d = decide_at(&snapshot(items), NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "a"), Some(BlockKind::Policy));
}

// aws/karpenter-provider-aws #5304: Karpenter replaces a node by one node at most; two
// smaller nodes of other shapes can cost less.
#[test]
fn a_node_whose_pods_are_cheaper_on_two_nodes_is_split() {
    let mut p = on_demand_m5("default");
    p["spec"]["template"]["spec"]["requirements"][1]["values"] = json!(["m5", "c5", "r5"]);
    let s = snapshot(vec![
        p,
        node("big", "default", "m5.4xlarge", "on-demand"),
        pod_on("cpu-0", "big", "1400m", "512Mi").build(),
        pod_on("cpu-1", "big", "1400m", "512Mi").build(),
        pod_on("mem-0", "big", "100m", "6Gi").build(),
    ]);
    let cmd = decide_at(&s, NOW).command.expect("a split");
    assert_eq!(cmd.method, Method::Split);
    assert_eq!(cmd.replacements.len(), 2);
    let total: f64 = cmd.replacements.iter().map(|r| r.price_per_hour).sum();
    let removed = price("m5.4xlarge", CapacityType::OnDemand);
    assert!(total <= removed * 0.9, "{total} vs {removed}");
    assert!((cmd.savings_per_hour - (removed - total)).abs() < 1e-9);
    let to: std::collections::BTreeSet<&str> = cmd.moves.iter().map(|m| m.to.as_str()).collect();
    assert_eq!(to, ["replacement-0", "replacement-1"].into_iter().collect());
}

// Karpenter `drift.go` `areRequirementsDrifted`: a node label the NodePool no longer allows.
#[test]
fn a_node_whose_labels_its_nodepool_no_longer_allows_is_drifted() {
    let s = snapshot(vec![
        on_demand_m5("default"),
        node("spot", "default", "m5.large", "spot"),
        pod_on("web-a", "spot", "1500m", "5Gi").build(),
    ]);
    let cmd = decide_at(&s, NOW).command.expect("drift");
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.replacements[0].capacity_type, CapacityType::OnDemand);
}

// Karpenter AWS provider `isAMIDrifted`: a node whose AMI its EC2NodeClass no longer
// resolves is drifted.
#[test]
fn a_node_on_an_ami_its_class_no_longer_resolves_is_drifted() {
    use carpool::model::well_known::IMAGE_ID;
    use carpool::ports::ResolvedImage;
    let with_image = |name: &str, ami: &str| {
        let mut n = node(name, "default", "m5.large", "on-demand");
        n["metadata"]["labels"][IMAGE_ID] = json!(ami);
        n
    };
    let s = snapshot(vec![
        on_demand_m5("default"),
        with_image("current", "ami-new"),
        pod_on("web-a", "current", "1500m", "5Gi").build(),
        with_image("old", "ami-old"),
        pod_on("web-b", "old", "1500m", "5Gi").build(),
    ]);
    let region = region();
    let d = decide(&DisruptionInput {
        snapshot: &s,
        region: &region,
        now: at(NOW),
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: [(
            "default".to_string(),
            vec![ResolvedImage::new("ami-new", carpool::model::Arch::Amd64, &[])],
        )]
        .into_iter()
        .collect(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    });
    let cmd = d.command.expect("drift");
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.nodes, vec!["old".to_string()]);
}

/// A node whose last voluntary disruption stalled and was rolled back is left alone until
/// its `carpool.sh/disruption-stalled-until` passes, so that the next run does not launch
/// a fresh replacement for the same stall (issue 27, item 4: Carpool's own rule; a
/// Karpenter command that fails is rolled back by its orchestration queue,
/// `pkg/controllers/disruption/orchestration/queue.go`, with no such memory).
#[test]
fn a_node_whose_drain_stalled_is_left_alone_until_its_annotation_passes() {
    let items = three_underused(vec![])
        .into_iter()
        .map(|mut v| {
            if v["kind"] == "Node" {
                v["metadata"]["annotations"] = json!({"carpool.sh/disruption-stalled-until": "2026-12-02T12:30:00Z"});
            }
            v
        })
        .collect();
    let s = snapshot(items);
    let d = decide_at(&s, NOW);
    assert!(d.command.is_none(), "{d:#?}");
    assert_eq!(blocked(&d, "a"), Some(BlockKind::Stalled));
    let later = decide_at(&s, "2026-12-02T12:31:00Z");
    assert_eq!(later.command.expect("picked again once it passed").nodes.len(), 3);
}

/// The drift hash leaves the class's selector terms out and carries a version, as
/// Karpenter's `EC2NodeClass.Hash` (`hash:"ignore"` on the selector terms) and
/// `CloudProvider.areStaticFieldsDrifted` (hash versions compared first) do
/// (aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass.go`, `pkg/cloudprovider/drift.go`);
/// a hash of another version is rebaselined, as kubernetes-sigs/karpenter
/// `pkg/controllers/nodepool/hash` `updateNodeClaimHash` re-annotates a NodeClaim.
mod drift_hash {
    use super::*;
    use carpool::decide::disruption::drift::{HASH_VERSION, template_hash};
    use carpool::model::well_known::{NODEPOOL_HASH, NODEPOOL_HASH_VERSION};

    fn with_class(class: Value, hash: Option<(&str, Option<&str>)>) -> Snapshot {
        let mut n = node("old", "default", "m5.large", "on-demand");
        if let Some((hash, version)) = hash {
            n["metadata"]["labels"][NODEPOOL_HASH] = json!(hash);
            if let Some(v) = version {
                n["metadata"]["labels"][NODEPOOL_HASH_VERSION] = json!(v);
            }
        }
        let items = vec![
            on_demand_m5("default"),
            n,
            pod_on("web-a", "old", "1500m", "5Gi").build(),
            class,
        ];
        let mut s = Snapshot::default();
        s.add_text("test", &json!({"kind": "List", "items": items}).to_string())
            .unwrap();
        assert!(s.skipped.is_empty(), "{:?}", s.skipped);
        s
    }

    /// The hash of the standard class and the pool, as a launch records it.
    fn hash() -> String {
        let s = with_class(EC2NodeClassBuilder::standard().build(), None);
        template_hash(&s.nodepools[0], Some(&s.nodeclasses[0]))
    }

    fn drifted(s: &Snapshot) -> bool {
        decide_at(s, NOW).command.is_some_and(|c| c.method == Method::Drift)
    }

    #[test]
    fn a_selector_rewritten_to_select_the_same_resources_drifts_nothing() {
        let hash = hash();
        let mut class = EC2NodeClassBuilder::standard().build();
        class["spec"]["securityGroupSelectorTerms"] = json!([{"id": "sg-0123456789abcdef0"}]);
        class["spec"]["subnetSelectorTerms"] = json!([{"tags": {"Name": "private-*"}}]);
        class["spec"]["amiSelectorTerms"] = json!([{"alias": "al2023@v20250101"}]);
        assert!(!drifted(&with_class(class, Some((&hash, Some(HASH_VERSION))))));
    }

    #[test]
    fn a_change_to_a_field_the_node_boots_with_is_drift() {
        let hash = hash();
        let mut class = EC2NodeClassBuilder::standard().build();
        class["spec"]["tags"] = json!({"team": "checkout"});
        assert!(drifted(&with_class(class, Some((&hash, Some(HASH_VERSION))))));
    }

    #[test]
    fn a_hash_of_an_older_version_is_not_drift_but_is_rebaselined_to_the_current_one() {
        let hash = hash();
        // Launched before hash versions: whatever its hash, it is not drifted...
        let s = with_class(EC2NodeClassBuilder::standard().build(), Some(("an-older-hash", None)));
        let d = decide_at(&s, NOW);
        assert!(d.command.is_none(), "{d:#?}");
        // ...and the decision gives it the current hash and version.
        let (node, labels) = &d.hash_records[0];
        assert_eq!(node, "old");
        assert_eq!(labels.get(NODEPOOL_HASH), Some(&Some(hash.clone())));
        assert_eq!(labels.get(NODEPOOL_HASH_VERSION), Some(&Some(HASH_VERSION.to_string())));
        // A node with the current version needs nothing.
        let s = with_class(
            EC2NodeClassBuilder::standard().build(),
            Some((&hash, Some(HASH_VERSION))),
        );
        assert!(decide_at(&s, NOW).hash_records.is_empty());
    }

    #[test]
    fn a_hash_of_another_version_is_not_compared() {
        let standard = EC2NodeClassBuilder::standard().build();
        let s = with_class(standard, Some(("some-other-hash", Some("v99"))));
        assert!(!drifted(&s));
        assert_eq!(decide_at(&s, NOW).hash_records.len(), 1);
    }
}
