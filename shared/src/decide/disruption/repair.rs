//! Repair: a managed node whose Ready condition has been False or Unknown for
//! `repair_after` (30 minutes, as Karpenter's AWS provider's `RepairPolicies`) is replaced,
//! the longest broken first, one at a time. Karpenter's node health controller
//! (`pkg/controllers/node/health`) does this behind its `NodeRepair` feature gate, and
//! stops while more than 20% of a pool's nodes are unhealthy: a fault of the whole pool
//! (a bad AMI, a network outage) is not fixed by replacing nodes one by one.
//!
//! A broken node's pods are replaced whatever their `do-not-disrupt` or PDBs say; budgets
//! and `consolidateAfter` do not apply.

use std::time::{Duration, SystemTime};

use super::Ctx;
use super::candidate::{BlockKind, Blocked};
use super::command::{DisruptionCommand, Method};

/// How long candidate `i` has been unhealthy, if it has.
fn unhealthy_for(ctx: &Ctx<'_>, i: usize) -> Option<Duration> {
    let c = &ctx.candidates[i];
    if c.ready.0 {
        return None;
    }
    let since = c.ready.1.or(c.created).unwrap_or(SystemTime::UNIX_EPOCH);
    Some(ctx.now.duration_since(since).unwrap_or(Duration::ZERO))
}

/// Finds the node to repair now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let mut broken: Vec<(Duration, usize)> = (0..ctx.candidates.len())
        .filter(|&i| ctx.candidates[i].pool.is_some())
        .filter_map(|i| Some((unhealthy_for(ctx, i)?, i)))
        .filter(|(d, _)| *d >= ctx.settings.repair_after)
        .collect();
    broken.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in broken {
        if let Err(b) = ctx.eligible(i, Method::Repair) {
            ctx.decline(i, b);
            continue;
        }
        let pool = ctx.candidates[i].pool_name.clone();
        let (total, unhealthy) = pool_health(ctx, &pool);
        let limit = u64::from(ctx.settings.repair_max_unhealthy_percent);
        if (unhealthy as u64) * 100 > (total as u64) * limit {
            ctx.decline(
                i,
                Blocked::new(
                    BlockKind::Budget,
                    format!("{unhealthy} of NodePool {pool}'s {total} nodes are unhealthy, more than {limit}%: not repaired node by node"),
                ),
            );
            continue;
        }
        let pools = ctx.pools();
        let placed = ctx.place(&[i], pools, usize::MAX)?;
        // Pods that fit nowhere go pending once evicted, and the provisioner plans for them.
        let (replacements, moves) = placed.map_or((Vec::new(), Vec::new()), |p| (p.new_nodes, p.moves));
        let c = &ctx.candidates[i];
        let new_cost: f64 = replacements.iter().map(|n| n.price_per_hour).sum();
        return Some(DisruptionCommand {
            method: Method::Repair,
            nodes: vec![c.name.clone()],
            replacements,
            moves,
            removed_per_hour: c.price,
            savings_per_hour: c.price - new_cost,
        });
    }
    None
}

/// A pool's nodes, and those unhealthy.
fn pool_health(ctx: &Ctx<'_>, pool: &str) -> (usize, usize) {
    let of_pool: Vec<usize> = (0..ctx.candidates.len())
        .filter(|&i| ctx.candidates[i].pool_name == pool)
        .collect();
    let unhealthy = of_pool.iter().filter(|&&i| !ctx.candidates[i].ready.0).count();
    (of_pool.len(), unhealthy)
}
