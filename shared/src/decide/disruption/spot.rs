//! Spot: a spot node replaced by a cheaper spot node (spot-to-spot), and an on-demand node
//! returned to spot once a spot offering of its NodePool is available and cheaper again.
//!
//! - **Spot-to-spot** (Karpenter's `designs/spot-consolidation.md` and
//!   `computeSpotToSpotConsolidation`, still behind the `SpotToSpotConsolidation` gate
//!   there): only when at least `spot_to_spot_min_types` (15) cheaper spot types fit, so
//!   that CreateFleet's price-capacity-optimized choice has room and consolidation does
//!   not chase the cheapest, most interrupted pool; the replacement carries only the
//!   cheapest 15 (more if its NodePool's `minValues` need them), so the type launched is
//!   not dear enough to be replaced again ([`super::savings`]). Never to the node's own
//!   type. [`super::split`] follows the same rule when it replaces spot by spot.
//! - **Return to spot** (aws/karpenter-provider-aws #3480, #7832: nodes stay on-demand
//!   after a spot fallback): an on-demand node in a NodePool that allows spot is replaced
//!   by spot when that saves the pool's threshold; its own instance type on spot counts.
//!   While the offering is still out of capacity (the provisioner's `ICE#` records), the
//!   catalog marks it unavailable and the simulation finds no spot node.

use super::Ctx;
use super::candidate::Blocked;
use super::command::{DisruptionCommand, Method};
use super::savings::{Rules, consolidation};
use crate::model::well_known as wk;
use crate::model::{CapacityType, NodePool, NodeSelectorRequirement, Operator};

/// Whether a NodePool may launch spot.
pub fn allows_spot(pool: &NodePool) -> bool {
    pool.requirements().is_ok_and(|r| {
        r.get(wk::CAPACITY_TYPE)
            .is_none_or(|c| c.has(CapacityType::Spot.label()))
    })
}

/// The NodePools that allow spot, narrowed to spot.
fn spot_pools(pools: &[NodePool]) -> Vec<NodePool> {
    let mut out: Vec<NodePool> = pools.iter().filter(|p| allows_spot(p)).cloned().collect();
    for p in &mut out {
        p.spec.template.spec.requirements.push(NodeSelectorRequirement {
            key: wk::CAPACITY_TYPE.into(),
            operator: Operator::In,
            values: vec![CapacityType::Spot.label().into()],
            min_values: None,
        });
    }
    out
}

fn find(ctx: &mut Ctx<'_>, method: Method, capacity: CapacityType, rules: Rules) -> Option<DisruptionCommand> {
    let (ordered, _) = ctx.ordered(method, |c| {
        c.price > 0.0 && !c.moving.is_empty() && c.capacity_type == Some(capacity) && c.pool.is_some_and(allows_spot)
    });
    if ordered.is_empty() {
        return None;
    }
    let pools = spot_pools(ctx.pools());
    for i in ordered {
        match ctx.place(&[i], &pools, 1)? {
            Err(m) => {
                let b = m.blocked();
                ctx.decline(i, Blocked::new(b.kind, format!("on spot: {}", b.message)));
            }
            Ok(p) if p.new_nodes.is_empty() => {
                // Its pods fit on the other nodes: single-node consolidation's to delete it.
            }
            Ok(p) => match consolidation(ctx, method, &[i], p, rules) {
                Ok(cmd) => return Some(cmd),
                Err(b) => ctx.decline(i, b),
            },
        }
    }
    None
}

/// Finds the spot node to replace by cheaper spot now.
pub fn find_spot_to_spot(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let rules = Rules {
        spot_to_spot_min_types: ctx.settings.spot_to_spot_min_types,
        ..Rules::PLAIN
    };
    find(ctx, Method::SpotToSpot, CapacityType::Spot, rules)
}

/// Finds the on-demand node to return to spot now.
pub fn find_return_to_spot(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    find(ctx, Method::ReturnToSpot, CapacityType::OnDemand, Rules::PLAIN)
}
