//! Properties of the disruption decision on generated clusters: after any command, the pods
//! of the removed nodes fit on what remains plus the replacements, by the independent
//! checker (which reads the raw objects with its own code: kube-scheduler's filters); and
//! no command ever touches a node that is blocked (not managed, `do-not-disrupt` on it or
//! on a pod, a PDB allowing nothing, a bare pod).
//!
//! The number of cases is `CARPOOL_PROPTEST_CASES` (default 32). As in
//! `planner_properties.rs`, CI's cases come from a fixed seed unless
//! `CARPOOL_PROPTEST_SEED` (a number, or `random`) or `CARPOOL_PROPTEST_CASES` is set.

use std::collections::BTreeMap;
use std::time::SystemTime;

use carpool::catalog::Catalog;
use carpool::decide::checker::check;
use carpool::decide::disruption::{DisruptionInput, DisruptionSettings, decide};
use carpool::decide::{ExistingPlacement, ProvisioningPlan};
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::snapshot::Snapshot;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{cases, rng_seed};

const LONG_AGO: &str = "2026-11-30T00:00:00Z";
const NOW: &str = "2026-12-02T12:00:00Z";
const TYPES: [&str; 6] = [
    "m5.large",
    "m5.xlarge",
    "m5.2xlarge",
    "c5.xlarge",
    "r5.xlarge",
    "m6a.xlarge",
];
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

#[derive(Clone, Debug)]
struct PodGen {
    cpu_m: i64,
    mem_mi: i64,
    app: usize,
    do_not_disrupt: bool,
    bare: bool,
}

#[derive(Clone, Debug)]
struct NodeGen {
    it: usize,
    zone: usize,
    spot: bool,
    managed: bool,
    do_not_disrupt: bool,
    pods: Vec<PodGen>,
}

#[derive(Clone, Debug)]
struct WorldGen {
    nodes: Vec<NodeGen>,
    capacity: &'static [&'static str],
    guarded_app: Option<usize>,
    spread_app: Option<usize>,
    pending: bool,
    policy: &'static str,
}

fn arb_pod() -> impl Strategy<Value = PodGen> {
    (
        prop::sample::select(vec![100i64, 250, 500, 1000, 1500]),
        prop::sample::select(vec![128i64, 512, 1024, 2048, 4096]),
        0usize..4,
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(cpu_m, mem_mi, app, do_not_disrupt, bare)| PodGen {
            cpu_m,
            mem_mi,
            app,
            do_not_disrupt,
            bare,
        })
}

fn arb_node() -> impl Strategy<Value = NodeGen> {
    (
        0usize..TYPES.len(),
        0usize..3,
        any::<bool>(),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.05),
        prop::collection::vec(arb_pod(), 0..6),
    )
        .prop_map(|(it, zone, spot, managed, do_not_disrupt, pods)| NodeGen {
            it,
            zone,
            spot,
            managed,
            do_not_disrupt,
            pods,
        })
}

fn arb_world() -> impl Strategy<Value = WorldGen> {
    (
        prop::collection::vec(arb_node(), 1..8),
        prop::sample::select(vec![&["on-demand"][..], &["spot", "on-demand"][..], &["spot"][..]]),
        prop::option::weighted(0.3, 0usize..4),
        prop::option::weighted(0.3, 0usize..4),
        prop::bool::weighted(0.1),
        prop::sample::select(vec!["WhenEmptyOrUnderutilized", "WhenEmpty", "Balanced"]),
    )
        .prop_map(|(nodes, capacity, guarded_app, spread_app, pending, policy)| WorldGen {
            nodes,
            capacity,
            guarded_app,
            spread_app,
            pending,
            policy,
        })
}

/// The world as a snapshot, and the nodes the test itself says are blocked.
fn build(w: &WorldGen) -> (Snapshot, Vec<String>) {
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let mut items = vec![
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": w.capacity},
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5", "r5", "m6a"]}]}},
                "disruption": {"consolidateAfter": "0s", "consolidationPolicy": w.policy, "budgets": [{"nodes": "100%"}]}}}),
        EC2NodeClassBuilder::standard().build(),
    ];
    if let Some(app) = w.guarded_app {
        items.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": format!("app{app}")}}, "maxUnavailable": 0},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}));
    }
    if w.pending {
        items.push(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waiting", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}));
    }
    let mut blocked = Vec::new();
    for (i, n) in w.nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let it = TYPES[n.it];
        let t = region.types().iter().find(|t| t.name == it).unwrap();
        let mut labels = BTreeMap::from([
            ("kubernetes.io/hostname", name.clone()),
            ("node.kubernetes.io/instance-type", it.to_string()),
            ("topology.kubernetes.io/zone", ZONES[n.zone].to_string()),
            (
                "karpenter.sh/capacity-type",
                if n.spot { "spot" } else { "on-demand" }.to_string(),
            ),
            ("kubernetes.io/arch", "amd64".to_string()),
            ("kubernetes.io/os", "linux".to_string()),
        ]);
        if n.managed {
            labels.insert("karpenter.sh/nodepool", "default".to_string());
        }
        let mut node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "creationTimestamp": LONG_AGO, "labels": labels},
            "status": {"allocatable": {"cpu": format!("{}m", t.allocatable.cpu_millis),
                "memory": t.allocatable.memory.to_string(), "pods": t.allocatable.get("pods").to_string()},
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": LONG_AGO}]}});
        let mut is_blocked = !n.managed;
        if n.do_not_disrupt {
            node["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
            is_blocked = true;
        }
        items.push(node);
        let (mut cpu, mut mem) = (0, 0);
        for (j, p) in n.pods.iter().enumerate() {
            // Pods never overfill their node.
            if cpu + p.cpu_m > t.allocatable.cpu_millis || (mem + p.mem_mi) * 1024 * 1024 > t.allocatable.memory {
                continue;
            }
            cpu += p.cpu_m;
            mem += p.mem_mi;
            let app = format!("app{}", p.app);
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{app}-{i}-{j}"), "namespace": "shop", "labels": {"app": app},
                    "creationTimestamp": LONG_AGO,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app, "uid": "u"}]},
                "spec": {"nodeName": format!("node-{i}"), "containers": [{"name": "c", "resources": {"requests": {
                    "cpu": format!("{}m", p.cpu_m), "memory": format!("{}Mi", p.mem_mi)}}}]},
                "status": {"phase": "Running", "startTime": LONG_AGO}});
            if p.do_not_disrupt {
                pod["metadata"]["annotations"] = json!({"carpool.sh/do-not-disrupt": "true"});
                is_blocked = true;
            }
            if p.bare {
                pod["metadata"]["ownerReferences"] = Value::Null;
                is_blocked = true;
            }
            if w.guarded_app == Some(p.app) {
                is_blocked = true;
            }
            if w.spread_app == Some(p.app) {
                pod["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]);
            }
            items.push(pod);
        }
        if is_blocked {
            blocked.push(format!("node-{i}"));
        }
    }
    let mut s = Snapshot::default();
    s.add_text("generated", &json!({"kind": "List", "items": items}).to_string())
        .unwrap();
    (s, blocked)
}

/// The cluster after the command: the removed nodes gone, their pods pending again; the
/// command's moves and replacements as a plan for the checker.
fn after(
    s: &Snapshot,
    nodes: &[String],
    replacements: &[carpool::decide::PlannedNode],
    moves: &[carpool::decide::disruption::Move],
) -> (Snapshot, ProvisioningPlan) {
    let mut view = s.clone();
    view.nodes
        .retain(|n| !nodes.contains(n.metadata.name.as_ref().unwrap()));
    for p in &mut view.pods {
        let on = p.spec.as_ref().and_then(|s| s.node_name.clone());
        if on.is_some_and(|n| nodes.contains(&n)) && carpool::decide::disruption::replacement::moves(p) {
            p.spec.as_mut().unwrap().node_name = None;
            p.status = Some(
                serde_json::from_value(json!({"phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))
                .unwrap(),
            );
        }
    }
    // Pods of removed nodes that stay (DaemonSet, finished) go with their node.
    view.pods.retain(|p| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none_or(|n| !nodes.contains(n))
    });
    let mut existing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in moves.iter().filter(|m| !m.to.starts_with("replacement-")) {
        existing.entry(m.to.clone()).or_default().push(m.pod.clone());
    }
    let plan = ProvisioningPlan {
        nodes: replacements.to_vec(),
        existing: existing
            .into_iter()
            .map(|(node, pods)| ExistingPlacement { node, pods })
            .collect(),
        ..ProvisioningPlan::default()
    };
    (view, plan)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), rng_seed: rng_seed(), ..ProptestConfig::default() })]

    #[test]
    fn every_command_fits_by_the_checker_and_spares_blocked_nodes(w in arb_world()) {
        let (s, blocked) = build(&w);
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let now = SystemTime::from(NOW.parse::<jiff::Timestamp>().unwrap());
        let d = decide(&DisruptionInput {
            snapshot: &s,
            region: &region,
            now,
            in_progress: Default::default(),
            settings: DisruptionSettings::default(),
            images: Default::default(),
            networks: Default::default(),
            owned: None,
            held_back: Default::default(),
        });
        let Some(cmd) = d.command else { return Ok(()) };
        for n in &cmd.nodes {
            prop_assert!(!blocked.contains(n), "blocked node {n} in {cmd:?}");
        }
        // A pending pod no longer holds consolidation back (Karpenter's
        // `AllNonPendingPodsScheduled`); that a removal never takes a pending pod's room is
        // shown in consolidation_rules.rs.
        let moving: usize = cmd.moves.len();
        let (view, plan) = after(&s, &cmd.nodes, &cmd.replacements, &cmd.moves);
        let pending = view.pods.iter().filter(|p| carpool::decide::provisioning::pod::is_provisionable(p)).count();
        prop_assert_eq!(moving + usize::from(w.pending), pending, "every moving pod has a destination");
        let violations = check(&view, &region, &plan);
        let real: Vec<_> = violations
            .iter()
            .filter(|v| !(w.pending && format!("{v:?}").contains("waiting")))
            .collect();
        prop_assert!(real.is_empty(), "checker: {real:#?}\ncommand: {cmd:#?}");
        if cmd.method.consolidates() {
            prop_assert!(cmd.savings_per_hour > 0.0);
            for (i, r) in cmd.replacements.iter().enumerate() {
                if cmd.nodes.len() == 1 {
                    let original = s.nodes.iter().find(|n| n.metadata.name.as_ref() == Some(&cmd.nodes[0])).unwrap();
                    let labels = original.metadata.labels.as_ref().unwrap();
                    let same_cap = labels.get("karpenter.sh/capacity-type").map(String::as_str) == Some(r.capacity_type.label());
                    prop_assert!(!(same_cap && r.instance_types.contains(&labels["node.kubernetes.io/instance-type"])),
                        "replacement {i} offers the node's own type: {cmd:?}");
                }
            }
        }
    }
}
