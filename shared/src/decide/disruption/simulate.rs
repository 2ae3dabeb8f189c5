//! The scheduling simulation of a disruption: the provisioner's own simulation
//! ([`Scheduler::removing`]) with the removed nodes gone and their pods to place, on the
//! other nodes first, then on new ones (Karpenter's `SimulateScheduling`). A command never
//! moves a pod where the provisioner's simulation, which the independent checker holds to
//! kube-scheduler's rules, would not put it.
//!
//! The view it places them in has the pending pods placed already
//! ([`super::pending::pending_first`]); when their cheapest packing needs more new nodes
//! than the method allows, [`super::one_node`] plans them again on one.

use std::collections::{BTreeSet, HashMap};

use super::candidate::{BlockKind, Blocked};
use super::command::{Move, replacement_name};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::plan::PlannedNode;
use crate::decide::provisioning::scheduler::Scheduler;
use crate::model::{CapacityType, InstanceType, NodePool, Resources};
use crate::snapshot::Snapshot;

/// Where the removed nodes' pods would go.
#[derive(Clone, Debug)]
pub struct Placement {
    /// The new nodes needed, as planned (cheapest type first).
    pub new_nodes: Vec<PlannedNode>,
    /// Each moving pod's destination.
    pub moves: Vec<Move>,
    /// Whether it is the plan made again on one new node ([`super::one_node`]), the
    /// cheapest packing having needed more.
    pub one_node: bool,
}

/// Why the removed nodes' pods do not fit.
#[derive(Clone, Debug, PartialEq)]
pub enum Misfit {
    /// A pod fits nowhere: `pod` and the planner's reason.
    Unschedulable {
        /// `namespace/name`.
        pod: String,
        /// The planner's reason.
        reason: String,
    },
    /// More new nodes than allowed.
    TooManyNodes {
        /// Planned.
        planned: usize,
        /// Allowed.
        allowed: usize,
        /// What the pods planned onto the new nodes request, together.
        requests: Resources,
    },
    /// A pending pod would lose the room it has now, or any room
    /// ([`super::pending`]'s flapping guard).
    Displaces {
        /// `namespace/name`.
        pod: String,
        /// What it has now, and what it would have.
        detail: String,
    },
    /// The command would leave a NodePool's zones out of the balance it asks for
    /// ([`super::zone_balance`]).
    ZoneBalance {
        /// The NodePool.
        nodepool: String,
        /// How.
        detail: String,
    },
}

impl Misfit {
    /// Why a candidate is kept, for people: a displaced pending pod is
    /// [`BlockKind::PendingPods`], a broken zone balance [`BlockKind::ZoneBalance`], the
    /// rest [`BlockKind::NoFit`].
    pub fn blocked(&self) -> Blocked {
        let kind = match self {
            Misfit::Displaces { .. } => BlockKind::PendingPods,
            Misfit::ZoneBalance { .. } => BlockKind::ZoneBalance,
            Misfit::Unschedulable { .. } | Misfit::TooManyNodes { .. } => BlockKind::NoFit,
        };
        Blocked::new(kind, self.to_string())
    }
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Misfit::Unschedulable { pod, reason } => write!(f, "pod {pod} fits nowhere: {reason}"),
            Misfit::TooManyNodes { planned, allowed, .. } => {
                write!(f, "its pods need {planned} new node(s), at most {allowed} allowed")
            }
            Misfit::Displaces { pod, detail } => write!(f, "pending pod {pod} {detail}"),
            Misfit::ZoneBalance { detail, .. } => f.write_str(detail),
        }
    }
}

/// Places the pods of `removed` with at most `max_new` new nodes from `pools`, in
/// `snapshot` (the pending pods, which the provisioner's simulation here leaves out, are
/// placed in it first by [`super::pending::pending_first`]).
pub fn place(
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    pools: &[NodePool],
    removed: &BTreeSet<String>,
    max_new: usize,
) -> Result<Placement, Misfit> {
    let plan = Scheduler::removing(snapshot, region, removed, pools).run().plan;
    if let Some(u) = plan.unschedulable.first() {
        return Err(Misfit::Unschedulable {
            pod: u.pod.clone(),
            reason: u.reason(),
        });
    }
    if plan.nodes.len() > max_new {
        return Err(Misfit::TooManyNodes {
            planned: plan.nodes.len(),
            allowed: max_new,
            requests: plan
                .nodes
                .iter()
                .fold(Resources::default(), |acc, n| acc.plus(&n.requests)),
        });
    }
    let mut moves = Vec::new();
    for e in &plan.existing {
        moves.extend(e.pods.iter().map(|p| Move {
            pod: p.clone(),
            to: e.node.clone(),
        }));
    }
    for (i, n) in plan.nodes.iter().enumerate() {
        moves.extend(n.pods.iter().map(|p| Move {
            pod: p.clone(),
            to: replacement_name(i),
        }));
    }
    moves.sort_by(|a, b| a.pod.cmp(&b.pod));
    Ok(Placement {
        new_nodes: plan.nodes,
        moves,
        one_node: false,
    })
}

/// Prices of the region's offerings by type name.
pub struct Pricer<'r> {
    types: HashMap<&'r str, &'r InstanceType>,
    region: &'r RegionCatalog<'r>,
}

impl<'r> Pricer<'r> {
    /// The region's types.
    pub fn new(region: &'r RegionCatalog<'r>) -> Self {
        Pricer {
            types: region.types().iter().map(|t| (t.name.as_str(), *t)).collect(),
            region,
        }
    }

    /// The region's type of that name.
    pub fn instance_type(&self, name: &str) -> Option<&'r InstanceType> {
        self.types.get(name).copied()
    }

    /// USD per hour of a type in a zone and capacity type.
    pub fn price(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) -> Option<f64> {
        self.region
            .prices()
            .price(self.types.get(instance_type)?, zone, capacity_type)
    }

    /// Keeps the alternatives of a planned node that cost at most `max_price` and that
    /// `allowed` accepts, cheapest first, and reprices the node at the first. `false` when
    /// none is left. Karpenter filters a replacement's instance types the same way
    /// (`filterByPrice` in `disruption/helpers.go`), so that CreateFleet cannot pick a
    /// dearer type than the one the savings were computed for.
    pub fn narrow(&self, node: &mut PlannedNode, max_price: f64, allowed: impl Fn(&str) -> bool) -> bool {
        let mut priced: Vec<(f64, String)> = node
            .instance_types
            .iter()
            .filter(|t| allowed(t))
            .filter_map(|t| Some((self.price(t, &node.zone, node.capacity_type)?, t.clone())))
            .filter(|(p, _)| *p <= max_price + 1e-9)
            .collect();
        priced.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let Some((price, first)) = priced.first().cloned() else {
            return false;
        };
        node.instance_type = first;
        node.price_per_hour = price;
        node.instance_types = priced.into_iter().map(|(_, t)| t).collect();
        true
    }
}
