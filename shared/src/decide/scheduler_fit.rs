//! A plan made to fit kube-scheduler's own choices.
//!
//! The planner packs each pod onto the node it chose; kube-scheduler then binds the pods
//! its own way, by its queue order and its least-allocated scoring, once the launch wave
//! is released. [`fit`] replays that ([`super::checker::replay`]) and, while the replay
//! strands a pod, grows one new node to the cheapest of its alternatives that takes the
//! pod where the scheduler would leave it room (the upgrade that costs least among the
//! nodes that accept the pod but for room), then replays again. A pod that no upgrade
//! places is left as planned: the run's re-check launches for it if it stays pending.
//!
//! Growing a node keeps the plan valid: the node still holds the pods the plan put on it
//! (the upgrade asks for them too), and its alternatives are those of its old list that
//! are big enough. The cost of each upgrade is added to the plan's.

use serde::{Deserialize, Serialize};

use super::checker::{Order, Stranded, Upgrade, replay};
use super::plan::ProvisioningPlan;
use crate::catalog::RegionCatalog;
use crate::snapshot::Snapshot;

/// Rounds per plan at most: each fixes one stranded pod.
pub const MAX_ROUNDS: usize = 16;

/// The orders each round replays: the scheduler's queue order and four shuffles of it
/// (see [`Order::Shuffled`]); a pod stranded in any of them is fixed.
pub const ORDERS: [Order; 5] = [
    Order::Queue,
    Order::Shuffled(1),
    Order::Shuffled(2),
    Order::Shuffled(3),
    Order::Shuffled(4),
];

/// Above this many pod-by-node checks per replay, only the queue order is replayed, so a
/// plan of thousands of pods stays within the run's time.
pub const SHUFFLE_BUDGET: usize = 2_000_000;

/// What [`fit`] changed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fitting {
    /// Nodes grown, as `(plan index, from type, to type, for pod)`.
    pub grown: Vec<(usize, String, String, String)>,
    /// Pods the last replay still strands.
    pub stranded: Vec<String>,
    /// USD per hour the upgrades added.
    pub cost_added: f64,
    /// Replays run.
    pub replays: usize,
}

/// The cheapest upgrade for any stranded pod, by the price it adds.
fn cheapest<'a>(stranded: &'a [Stranded], plan: &ProvisioningPlan) -> Option<(&'a Stranded, &'a Upgrade, f64)> {
    stranded
        .iter()
        .flat_map(|s| {
            s.upgrades.iter().filter_map(move |u| {
                let old = plan.nodes.get(u.node)?;
                Some((s, u, u.price_per_hour - old.price_per_hour))
            })
        })
        .min_by(|a, b| a.2.total_cmp(&b.2))
}

/// `plan`, grown until kube-scheduler's replay strands none of its pods, or no upgrade
/// helps, or [`MAX_ROUNDS`]; and what changed.
pub fn fit(snapshot: &Snapshot, region: &RegionCatalog<'_>, mut plan: ProvisioningPlan) -> (ProvisioningPlan, Fitting) {
    let mut fitting = Fitting::default();
    if plan.nodes.is_empty() {
        return (plan, fitting);
    }
    let pods: usize = plan.nodes.iter().map(|n| n.pods.len()).sum::<usize>()
        + plan.existing.iter().map(|e| e.pods.len()).sum::<usize>();
    let checks = pods.saturating_mul(plan.nodes.len() + snapshot.nodes.len());
    let orders: &[Order] = if checks > SHUFFLE_BUDGET { &ORDERS[..1] } else { &ORDERS };
    for round in 0..=MAX_ROUNDS {
        let mut stranded: Vec<Stranded> = Vec::new();
        for &order in orders {
            stranded.extend(replay(snapshot, region, &plan, order).stranded);
            fitting.replays += 1;
        }
        fitting.stranded = stranded.iter().map(|s| s.pod.clone()).collect();
        fitting.stranded.sort();
        fitting.stranded.dedup();
        if round == MAX_ROUNDS {
            break;
        }
        let Some((s, u, added)) = cheapest(&stranded, &plan) else {
            break;
        };
        let (pod, u) = (s.pod.clone(), u.clone());
        let node = &mut plan.nodes[u.node];
        fitting
            .grown
            .push((u.node, node.instance_type.clone(), u.instance_type.clone(), pod));
        node.instance_type = u.instance_type;
        node.instance_types = u.alternatives;
        node.price_per_hour = u.price_per_hour;
        node.allocatable = u.allocatable;
        plan.cost_per_hour += added;
        fitting.cost_added += added;
    }
    (plan, fitting)
}
