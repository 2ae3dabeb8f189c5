//! A static NodePool (`spec.replicas`, Karpenter's alpha static capacity) with more nodes
//! than it keeps: the surplus goes, empty nodes first, then the cheapest to disrupt
//! (Karpenter's `static.deprovisioning` controller,
//! `pkg/controllers/static/deprovisioning/controller.go`, `getDeprovisioningCandidates`).
//! As there, nodes already being disrupted are not counted, and no budget applies; unlike
//! there, a node that `do-not-disrupt`, a PodDisruptionBudget or a bare pod keeps is not
//! picked (Carpool's drain would wait on it) and says why. Growing the pool back is the
//! provisioner's ([`crate::decide::provisioning::static_capacity`]).

use super::Ctx;
use super::candidate::BlockKind;
use super::command::{DisruptionCommand, Method};

/// The surplus of the first static NodePool that has one.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    for pool in ctx.pools() {
        let Some(replicas) = pool.replicas() else { continue };
        let mut members: Vec<usize> = (0..ctx.candidates.len())
            .filter(|&i| {
                let c = &ctx.candidates[i];
                c.pool_name == pool.name() && c.blocked.as_ref().is_none_or(|b| b.kind != BlockKind::Disrupting)
            })
            .collect();
        let surplus = members.len().saturating_sub(replicas);
        if surplus == 0 {
            continue;
        }
        members.retain(|&i| ctx.candidates[i].blocked.is_none());
        members.sort_by(|&a, &b| {
            let (ca, cb) = (&ctx.candidates[a], &ctx.candidates[b]);
            (!ca.moving.is_empty())
                .cmp(&!cb.moving.is_empty())
                .then(ca.disruption_cost.total_cmp(&cb.disruption_cost))
                .then(ca.name.cmp(&cb.name))
        });
        members.truncate(surplus);
        if members.is_empty() {
            continue;
        }
        let removed: f64 = members.iter().map(|&i| ctx.candidates[i].price).sum();
        return Some(DisruptionCommand {
            method: Method::StaticScaleDown,
            nodes: members.iter().map(|&i| ctx.candidates[i].name.clone()).collect(),
            replacements: Vec::new(),
            moves: Vec::new(),
            removed_per_hour: removed,
            savings_per_hour: removed,
        });
    }
    None
}
