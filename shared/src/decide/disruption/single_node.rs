//! Single-node consolidation: one node deleted, its pods moved onto the other nodes, or
//! replaced by one cheaper node (Karpenter's `singlenodeconsolidation.go`): the candidates
//! are tried cheapest to disrupt first, and the first that pays acts.
//!
//! - A spot node is only deleted here: its replacement by another spot node is
//!   [`super::spot`]'s spot-to-spot, with its own rules (Karpenter too keeps spot-to-spot
//!   apart, behind a feature gate).
//! - An on-demand node is replaced by a cheaper on-demand node; when spot would be cheaper
//!   still, [`super::spot`]'s return to spot takes it, later in the same run.
//! - Never by its own instance type in its own capacity type, and only when it saves the
//!   pool's threshold ([`super::savings`]).
//! - When the cheapest packing of its pods needs several new nodes, they are planned again
//!   on one ([`super::one_node`]); that node and [`super::split`]'s two compete on price,
//!   and the larger saving acts.

use super::Ctx;
use super::candidate::{BlockKind, Blocked};
use super::command::{DisruptionCommand, Method};
use super::savings::{Rules, consolidation};
use super::simulate::Misfit;
use super::split;
use crate::decide::disruption::replacement::prefer_on_demand;
use crate::model::CapacityType;

/// Finds the node to delete or replace now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let (ordered, _) = ctx.ordered(Method::SingleNode, |c| c.price > 0.0 && !c.moving.is_empty());
    let mut on_demand_pools = ctx.pools().to_vec();
    prefer_on_demand(&mut on_demand_pools);
    for i in ordered {
        let spot = ctx.candidates[i].capacity_type == Some(CapacityType::Spot);
        let placed = if spot {
            let pools = ctx.pools();
            ctx.place(&[i], pools, 0)?
        } else {
            ctx.place(&[i], &on_demand_pools, 1)?
        };
        match placed {
            Err(Misfit::TooManyNodes { .. }) if spot => ctx.decline(
                i,
                Blocked::new(
                    BlockKind::NoFit,
                    "its pods fit on no other node, and a spot node is replaced only by spot-to-spot",
                ),
            ),
            Err(m) => ctx.decline(i, m.blocked()),
            Ok(p) if p.new_nodes.iter().any(|n| n.capacity_type == CapacityType::Spot) => ctx.decline(
                i,
                Blocked::new(
                    BlockKind::NoFit,
                    "no cheaper on-demand node fits its pods (its NodePool allows only spot)",
                ),
            ),
            Ok(p) => {
                let one_node = p.one_node;
                match consolidation(ctx, Method::SingleNode, &[i], p, Rules::PLAIN) {
                    Ok(cmd) if one_node && ctx.candidates[i].moving.len() >= 2 => {
                        return Some(match split::for_candidate(ctx, i) {
                            Some(Ok(two)) if two.savings_per_hour > cmd.savings_per_hour => two,
                            _ => cmd,
                        });
                    }
                    Ok(cmd) => return Some(cmd),
                    Err(b) => ctx.decline(i, b),
                }
            }
        }
    }
    None
}
