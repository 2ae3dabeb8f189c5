//! Multi-node consolidation: several nodes removed at once, their pods moved onto the
//! other nodes and at most one new node that costs less than they did (Karpenter's
//! `multinodeconsolidation.go`).
//!
//! Karpenter sorts the candidates by disruption cost and binary-searches the longest
//! prefix that consolidates (`firstNConsolidationOption`). A prefix is not the only set
//! that pays: one node that cannot move early in the order hides every larger set behind
//! it. Carpool runs the same binary search, then grows the best set greedily along the
//! rest of the order, keeping each node whose addition still consolidates and saves more
//! (and, when no prefix pays, starts that greedy walk from the first candidate alone).
//! The search stops at half the decision's simulations, leaving the rest to the
//! single-node methods.
//!
//! A replacement whose alternatives include a removed node's type keeps only those
//! cheaper than that node (Karpenter's `filterOutSameInstanceType`, [`super::savings`]):
//! three nodes merged into one of the third's type at its price are the first two deleted.

use super::Ctx;
use super::candidate::Blocked;
use super::command::{DisruptionCommand, Method};
use super::savings::{Rules, consolidation};

/// What a multi-node set may replace: two nodes onto one of their own type is a
/// consolidation, but only cheaper than the removed node of that type; no spot-to-spot
/// rule (Karpenter checks none for several nodes).
const RULES: Rules = Rules {
    forbid_same_type: false,
    spot_to_spot_min_types: 0,
    cheaper_than_removed_types: true,
};

/// Tries one set; `None` once the simulations are spent.
fn try_set(ctx: &mut Ctx<'_>, set: &[usize], limit: usize) -> Option<Result<DisruptionCommand, Blocked>> {
    if ctx.simulations >= limit {
        return None;
    }
    let pools = ctx.pools();
    Some(match ctx.place(set, pools, 1)? {
        Err(m) => Err(m.blocked()),
        Ok(p) => consolidation(ctx, Method::MultiNode, set, p, RULES),
    })
}

/// Finds the set of nodes to consolidate now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let (ordered, mut allowance) = ctx.ordered(Method::MultiNode, |c| c.price > 0.0);
    let mut list = Vec::new();
    for i in ordered {
        if list.len() >= ctx.settings.multi_node_max_candidates {
            break;
        }
        if allowance.take(&ctx.candidates[i].pool_name) {
            list.push(i);
        }
    }
    if list.len() < 2 {
        return None;
    }
    let limit = ctx.simulations + ctx.settings.max_simulations.saturating_sub(ctx.simulations) / 2;
    let mut best: Option<(Vec<usize>, DisruptionCommand)> = None;
    let (mut lo, mut hi) = (2, list.len());
    while lo <= hi {
        let mid = (lo + hi) / 2;
        match try_set(ctx, &list[..mid], limit) {
            None => break,
            Some(Ok(cmd)) => {
                best = Some((list[..mid].to_vec(), cmd));
                lo = mid + 1;
            }
            Some(Err(_)) => hi = mid - 1,
        }
    }
    let (mut set, start) = match &best {
        Some((set, _)) => (set.clone(), set.len()),
        None => (vec![list[0]], 1),
    };
    for &next in &list[start..] {
        let mut trial = set.clone();
        trial.push(next);
        match try_set(ctx, &trial, limit) {
            None => break,
            Some(Ok(cmd))
                if best
                    .as_ref()
                    .is_none_or(|(_, b)| cmd.savings_per_hour > b.savings_per_hour) =>
            {
                set = trial.clone();
                best = Some((trial, cmd));
            }
            Some(_) => {}
        }
    }
    best.map(|(_, cmd)| cmd)
}
