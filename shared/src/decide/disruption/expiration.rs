//! Expiration: a node older than its NodePool's `expireAfter` (default 720h) is replaced,
//! the oldest first, one at a time (Karpenter's `expiration` controller). As in Karpenter
//! v1, budgets and `consolidateAfter` do not apply; unlike it, `do-not-disrupt`, PDBs that
//! allow nothing and bare pods still keep the node (Carpool drains by eviction only), and a
//! node whose pods would fit nowhere is kept, with the reason.

use std::time::Duration;

use super::Ctx;
use super::command::{DisruptionCommand, Method};
use crate::model::NillableDuration;

/// Finds the expired node to replace now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let mut expired: Vec<(Duration, usize)> = (0..ctx.candidates.len())
        .filter_map(|i| {
            let c = &ctx.candidates[i];
            let NillableDuration::After(limit) = c.pool?.spec.template.spec.expire_after else {
                return None;
            };
            let age = ctx.now.duration_since(c.created?).ok()?;
            (age >= limit).then_some((age, i))
        })
        .collect();
    expired.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in expired {
        if let Err(b) = ctx.eligible(i, Method::Expiration) {
            ctx.decline(i, b);
            continue;
        }
        match ctx.replace(i, Method::Expiration, "expired")? {
            Ok(cmd) => return Some(cmd),
            Err(b) => ctx.decline(i, b),
        }
    }
    None
}
