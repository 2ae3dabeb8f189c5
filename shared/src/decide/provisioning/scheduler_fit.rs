//! A plan made to fit kube-scheduler's own choices.
//!
//! The planner packs each pod onto the node it chose; kube-scheduler then binds the pods
//! its own way, in the order the launch wave is handed to them (the biggest first,
//! [`crate::decide::waves::hand_tiers`]) and by its own scores (least-allocated, balanced, spread).
//! [`fit`] replays that ([`crate::decide::kube_scheduler::replay`]) and, while the replay strands a pod,
//! grows one new node to the cheapest of its alternatives that takes the pod where the
//! scheduler would leave it room, or gives the pod a node of its own, whichever strands
//! fewest pods, then the cheaper; then replays again. A pod that no fix places is left as
//! planned: the run's re-check launches for it if it stays pending.
//!
//! Growing a node keeps the plan valid: the node still holds the pods the plan put on it
//! (the upgrade asks for them too), and its alternatives are those of its old list that
//! are big enough. The cost of each upgrade is added to the plan's.

use serde::{Deserialize, Serialize};

use std::collections::{HashMap, HashSet};

use crate::catalog::RegionCatalog;
use crate::decide::kube_scheduler::{Order, Stranded, Upgrade, replay, stranded_pods};
use crate::decide::provisioning::plan::{PlannedNode, ProvisioningPlan};
use crate::decide::provisioning::pod::{is_provisionable, pod_key};
use crate::model::CapacityType;
use crate::snapshot::Snapshot;

/// Rounds per plan at most: each fixes one stranded pod.
pub const MAX_ROUNDS: usize = 16;

/// The orders each round replays when the plan's waves are handed to their pods
/// ([`crate::decide::waves::wave::hand_off`]): tier by tier, the biggest first, shuffled within
/// each tier, with ties between nodes broken at random (see [`Order::Tiered`]); a pod
/// stranded in any of them is fixed.
pub const HANDED_ORDERS: [Order; 9] = [
    Order::Tiered(1),
    Order::Tiered(2),
    Order::Tiered(3),
    Order::Tiered(4),
    Order::Tiered(5),
    Order::Tiered(6),
    Order::Tiered(7),
    Order::Tiered(8),
    Order::Tiered(9),
];

/// The orders each round replays when the plan's nodes reach kube-scheduler without
/// a hand-off (launch waves turned off): its queue order and eight shuffles of it (see
/// [`Order::Shuffled`]).
pub const WHOLE_ORDERS: [Order; 9] = [
    Order::Queue,
    Order::Shuffled(1),
    Order::Shuffled(2),
    Order::Shuffled(3),
    Order::Shuffled(4),
    Order::Shuffled(5),
    Order::Shuffled(6),
    Order::Shuffled(7),
    Order::Shuffled(8),
];

/// Above this many pod-by-node checks per replay, only the queue order is replayed, so a
/// plan of thousands of pods stays within the run's time.
pub const SHUFFLE_BUDGET: usize = 2_000_000;

/// Pod-by-node checks one fit may spend over all its replays (about a second); past it,
/// the pods still stranded are left to the run's re-check.
pub const CHECK_BUDGET: usize = 40_000_000;

/// What [`fit`] changed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fitting {
    /// Nodes grown, as `(plan index, from type, to type, for pod)`.
    pub grown: Vec<(usize, String, String, String)>,
    /// Nodes added for a pod of their own, as `(pod, type)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<(String, String)>,
    /// Pods the last replay still strands.
    pub stranded: Vec<String>,
    /// USD per hour the upgrades added.
    pub cost_added: f64,
    /// Replays run.
    pub replays: usize,
    /// Not fitted: one replay would have cost more than [`CHECK_BUDGET`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

/// One way to place a stranded pod.
enum Fix {
    Grow(Upgrade),
    Add(Box<PlannedNode>),
}

/// Whether new nodes of `nodepool` may be fixed: a NodePool with `limits` is left as
/// planned, since a bigger or an added node could take it past them.
fn unlimited(snapshot: &Snapshot, nodepool: &str) -> bool {
    snapshot
        .nodepools
        .iter()
        .find(|p| p.name() == nodepool)
        .is_some_and(|p| p.spec.limits.is_empty())
}

/// The node the planner plans for `pod` alone (the other pending pods left out), when
/// that is one new node holding it.
fn own_node(snapshot: &Snapshot, region: &RegionCatalog<'_>, pod: &str) -> Option<PlannedNode> {
    let mut alone = snapshot.clone();
    alone.pods.retain(|p| !is_provisionable(p) || pod_key(p) == pod);
    let mut plan = crate::decide::provisioning_plan(&alone, region);
    (plan.nodes.len() == 1 && plan.nodes[0].pods == [pod] && unlimited(snapshot, &plan.nodes[0].nodepool))
        .then(|| plan.nodes.remove(0))
}

/// Fixes looked ahead at per round: the cheapest by the price they add.
pub const LOOKAHEAD: usize = 8;

/// Orders each fix looked ahead at is replayed in, of those the fit replays.
pub const QUICK_ORDERS: usize = 3;

/// The fixes for the stranded pods, cheapest first, by the price they add.
fn fixes(
    snapshot: &Snapshot,
    stranded: &[Stranded],
    plan: &ProvisioningPlan,
    own: &mut dyn FnMut(&str) -> Option<PlannedNode>,
) -> Vec<(String, Fix, f64)> {
    let mut out: Vec<(String, Fix, f64)> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for s in stranded {
        if !seen.insert(s.pod.as_str()) {
            continue;
        }
        for u in &s.upgrades {
            // A reserved node is of its reservation's type: it does not grow.
            if let Some(old) = plan.nodes.get(u.node)
                && unlimited(snapshot, &old.nodepool)
                && old.capacity_type != CapacityType::Reserved
            {
                out.push((
                    s.pod.clone(),
                    Fix::Grow(u.clone()),
                    u.price_per_hour - old.price_per_hour,
                ));
            }
        }
        // A node planned for the pod alone knows nothing of the reservations' room the
        // plan took already: only unreserved capacity is added.
        if let Some(n) = own(&s.pod).filter(|n| n.capacity_type != CapacityType::Reserved) {
            let price = n.price_per_hour;
            out.push((s.pod.clone(), Fix::Add(Box::new(n)), price));
        }
    }
    out.sort_by(|a, b| a.2.total_cmp(&b.2));
    out.dedup_by(|a, b| matches!((&a.1, &b.1), (Fix::Grow(x), Fix::Grow(y)) if x == y));
    out
}

/// `plan` with `fix` for `pod` applied.
fn apply(plan: &mut ProvisioningPlan, pod: &str, fix: &Fix, added: f64) {
    match fix {
        Fix::Grow(u) => {
            let node = &mut plan.nodes[u.node];
            node.instance_type.clone_from(&u.instance_type);
            node.instance_types.clone_from(&u.alternatives);
            node.price_per_hour = u.price_per_hour;
            node.allocatable = u.allocatable.clone();
        }
        Fix::Add(n) => {
            for other in &mut plan.nodes {
                other.pods.retain(|p| p != pod);
            }
            for e in &mut plan.existing {
                e.pods.retain(|p| p != pod);
            }
            plan.existing.retain(|e| !e.pods.is_empty());
            plan.nodes.push((**n).clone());
        }
    }
    plan.cost_per_hour += added;
}

/// The pods the replays in `orders` strand, sorted, with the upgrades that would place
/// them.
fn stranded_in(
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    plan: &ProvisioningPlan,
    orders: &[Order],
) -> Vec<Stranded> {
    let mut all: Vec<Stranded> = orders
        .iter()
        .flat_map(|&o| replay(snapshot, region, plan, o).stranded)
        .collect();
    all.sort_by(|a, b| a.pod.cmp(&b.pod));
    all
}

/// How many distinct pods the replays in `orders` strand (no upgrades worked out).
fn count_stranded(snapshot: &Snapshot, region: &RegionCatalog<'_>, plan: &ProvisioningPlan, orders: &[Order]) -> usize {
    let pods: HashSet<String> = orders
        .iter()
        .flat_map(|&o| stranded_pods(snapshot, region, plan, o).stranded)
        .map(|s| s.pod)
        .collect();
    pods.len()
}

/// `plan`, grown until kube-scheduler's replay in `orders` ([`HANDED_ORDERS`] or
/// [`WHOLE_ORDERS`]) strands none of its pods, or no upgrade helps, or [`MAX_ROUNDS`];
/// and what changed.
pub fn fit(
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    mut plan: ProvisioningPlan,
    orders: &[Order],
) -> (ProvisioningPlan, Fitting) {
    let mut fitting = Fitting::default();
    if plan.nodes.is_empty() {
        return (plan, fitting);
    }
    let pods: usize = plan.nodes.iter().map(|n| n.pods.len()).sum::<usize>()
        + plan.existing.iter().map(|e| e.pods.len()).sum::<usize>();
    // A replay checks each pod against every node, and counts each spread over the pods
    // already placed: in a cluster of many running pods, the latter dominates.
    let checks = pods.saturating_mul(plan.nodes.len() + snapshot.nodes.len() + snapshot.pods.len());
    if checks >= CHECK_BUDGET {
        // One replay alone would spend the budget (thousands of pods in a cluster of
        // tens of thousands): the plan is launched as planned, and the run's re-check
        // launches for what kube-scheduler places otherwise.
        fitting.skipped = true;
        return (plan, fitting);
    }
    let orders: &[Order] = if checks > SHUFFLE_BUDGET {
        &orders[..orders.len().min(1)]
    } else {
        orders
    };
    let quick = &orders[..orders.len().min(QUICK_ORDERS)];
    let mut own_nodes: HashMap<String, Option<PlannedNode>> = HashMap::new();
    let controllers: HashMap<String, String> = snapshot
        .pods
        .iter()
        .filter_map(|p| {
            let owner = p
                .metadata
                .owner_references
                .as_ref()?
                .iter()
                .find(|o| o.controller == Some(true))?;
            Some((pod_key(p), format!("{}/{}", owner.kind, owner.uid)))
        })
        .collect();
    let mut added_for: HashSet<String> = HashSet::new();
    let mut stranded = stranded_in(snapshot, region, &plan, orders);
    fitting.replays += orders.len();
    for _ in 0..MAX_ROUNDS {
        if stranded.is_empty() {
            break;
        }
        // Planning a pod's own node plans the whole snapshot again: it is charged as one
        // replay, and none is planned once the budget is spent.
        let mut spent = fitting.replays;
        let mut own = |pod: &str| {
            if added_for.contains(pod) {
                return None;
            }
            // Pods of one controller share their template, and so their own node.
            let kin = controllers.get(pod).cloned().unwrap_or_else(|| pod.to_string());
            let for_pod = |n: &Option<PlannedNode>| {
                n.clone().map(|mut n| {
                    n.pods = vec![pod.to_string()];
                    n
                })
            };
            if let Some(known) = own_nodes.get(&kin) {
                return for_pod(known);
            }
            if spent.saturating_mul(checks) >= CHECK_BUDGET {
                return None;
            }
            spent += 1;
            for_pod(own_nodes.entry(kin).or_insert_with(|| own_node(snapshot, region, pod)))
        };
        let candidates = fixes(snapshot, &stranded, &plan, &mut own);
        fitting.replays = spent;
        // Each of the cheapest fixes is tried (in the first [`QUICK_ORDERS`] orders; the
        // one chosen is then replayed in all), and the one that leaves the fewest pods
        // stranded wins; on a tie, growing a node before adding one, then the cheaper.
        // The cheapest alone may only move the problem, and an added node is the least
        // predictable fix: empty, it scores best for the scheduler's next small pods
        // (measured: `docs/src/design/waves-and-fit.md`).
        let mut best: Option<(usize, f64, String, Fix, ProvisioningPlan)> = None;
        for (pod, fix, added) in candidates.into_iter().take(LOOKAHEAD) {
            if fitting.replays.saturating_mul(checks) >= CHECK_BUDGET {
                break;
            }
            let mut next = plan.clone();
            apply(&mut next, &pod, &fix, added);
            let distinct = count_stranded(snapshot, region, &next, quick);
            fitting.replays += quick.len();
            let adds = matches!(fix, Fix::Add(_));
            if best
                .as_ref()
                .is_none_or(|b| (distinct, adds, added) < (b.0, matches!(b.3, Fix::Add(_)), b.1))
            {
                best = Some((distinct, added, pod, fix, next));
            }
            // A growth that strands nothing: the candidates after it cost as much or more.
            if distinct == 0 && !adds {
                break;
            }
        }
        let Some((_, added, pod, fix, next)) = best else {
            break;
        };
        // The pods the chosen plan strands in every order, with their upgrades, for the
        // next round.
        let left = stranded_in(snapshot, region, &next, orders);
        fitting.replays += orders.len();
        match &fix {
            Fix::Grow(u) => fitting.grown.push((
                u.node,
                plan.nodes[u.node].instance_type.clone(),
                u.instance_type.clone(),
                pod,
            )),
            Fix::Add(n) => {
                added_for.insert(pod.clone());
                fitting.added.push((pod, n.instance_type.clone()));
            }
        }
        fitting.cost_added += added;
        plan = next;
        stranded = left;
    }
    fitting.stranded = stranded.iter().map(|s| s.pod.clone()).collect();
    fitting.stranded.dedup();
    (plan, fitting)
}
