//! Emptiness: nodes whose pods would all stay (DaemonSet, mirror and finished pods) are
//! deleted, past `consolidateAfter`, as many as the pools' `Empty` budgets allow
//! (Karpenter's `emptiness.go`).
//!
//! A NodePool that keeps its zones balanced keeps an empty node whose deletion would
//! leave them further apart than it allows ([`super::zone_balance`]).
//!
//! Pending pods do not hold it back, unless one has room on an empty node now: that node
//! is about to get it, and is kept. With pods pending, the nodes to delete are checked as
//! any removal is ([`super::pending`]): no pod that can be placed now may lose its room.

use super::Ctx;
use super::candidate::{BlockKind, Blocked};
use super::command::{DisruptionCommand, Method};

/// Finds the empty nodes to delete now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let (ordered, mut allowance) = ctx.ordered(Method::Emptiness, |c| c.moving.is_empty());
    let mut empty = Vec::new();
    for i in ordered {
        if let Some(pod) = ctx.baseline.landing_on(&ctx.candidates[i].name) {
            let why = Blocked::new(
                BlockKind::PendingPods,
                format!("pending pod {pod} has room on it now: it is about to land there"),
            );
            ctx.decline(i, why);
            continue;
        }
        let pool = ctx.candidates[i].pool_name.clone();
        let with: std::collections::BTreeSet<String> = empty
            .iter()
            .chain(std::iter::once(&i))
            .map(|&j| ctx.candidates[j].name.clone())
            .collect();
        if let Some((_, detail)) = super::zone_balance::breaks(ctx.snapshot, &with, &[]) {
            ctx.decline(i, Blocked::new(BlockKind::ZoneBalance, detail));
            continue;
        }
        if allowance.take(&pool) {
            empty.push(i);
        } else {
            ctx.decline(
                i,
                Blocked::new(
                    BlockKind::Budget,
                    format!("NodePool {pool}'s disruption budget for Empty allows no more nodes now"),
                ),
            );
        }
    }
    if empty.is_empty() {
        return None;
    }
    if let Some(m) = ctx.displaces(&empty) {
        for &i in &empty {
            ctx.decline(i, m.blocked());
        }
        return None;
    }
    let removed: f64 = empty.iter().map(|&i| ctx.candidates[i].price).sum();
    let min = empty
        .iter()
        .filter_map(|&i| ctx.candidates[i].pool)
        .filter_map(|p| p.savings_threshold().ok())
        .map(|t| t.per_hour)
        .fold(0.0, f64::max);
    if removed < min {
        for i in empty {
            ctx.decline(
                i,
                Blocked::new(
                    BlockKind::BelowThreshold,
                    format!("deleting saves ${removed:.4}/h, less than ${min:.4}/h"),
                ),
            );
        }
        return None;
    }
    Some(DisruptionCommand {
        method: Method::Emptiness,
        nodes: empty.iter().map(|&i| ctx.candidates[i].name.clone()).collect(),
        replacements: Vec::new(),
        moves: Vec::new(),
        removed_per_hour: removed,
        savings_per_hour: removed,
    })
}
