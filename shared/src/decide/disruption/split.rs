//! Split: one node replaced by two that cost less in total (Karpenter replaces one node
//! by at most one: aws/karpenter-provider-aws #5304). A node whose pods are of two shapes
//! (CPU-heavy and memory-heavy) is often cheaper on a compute-optimised and a
//! memory-optimised node than on one general-purpose node big enough for both.
//!
//! The provisioner's packer puts the pods on as few nodes as it can, so the simulation is
//! asked for smaller nodes: every NodePool is narrowed to types with fewer vCPUs than the
//! candidate's type, then, separately, to types with less memory. The cheaper of the two
//! splits that plan exactly two new nodes, and pays, acts. A spot node split into spot
//! nodes follows spot-to-spot's rule ([`super::spot`]): each spot replacement needs
//! `spot_to_spot_min_types` cheaper types, and carries the cheapest of them only.
//!
//! Single-node consolidation asks [`for_candidate`] too when it has planned a node's pods
//! again on one node ([`super::one_node`]): the split and the one node compete on price.

use super::Ctx;
use super::candidate::Blocked;
use super::command::{DisruptionCommand, Method};
use super::savings::{Rules, consolidation};
use crate::model::well_known as wk;
use crate::model::{NodePool, NodeSelectorRequirement, Operator};

fn narrowed(pools: &[NodePool], key: &str, below: u64) -> Vec<NodePool> {
    let mut out = pools.to_vec();
    for p in &mut out {
        p.spec.template.spec.requirements.push(NodeSelectorRequirement {
            key: key.into(),
            operator: Operator::Lt,
            values: vec![below.to_string()],
            min_values: None,
        });
    }
    out
}

/// The cheapest split of candidate `i` that pays, or why none does (`Err(None)`: no
/// reason worth reporting); `None` once the simulations are spent.
pub fn for_candidate(ctx: &mut Ctx<'_>, i: usize) -> Option<Result<DisruptionCommand, Option<Blocked>>> {
    let Some(it) = ctx.pricer.instance_type(&ctx.candidates[i].instance_type) else {
        return Some(Err(None));
    };
    let shapes = [
        narrowed(ctx.pools(), wk::INSTANCE_CPU, u64::from(it.vcpu)),
        narrowed(ctx.pools(), wk::INSTANCE_MEMORY, it.memory_mib),
    ];
    let rules = Rules {
        spot_to_spot_min_types: ctx.settings.spot_to_spot_min_types,
        ..Rules::PLAIN
    };
    let mut best: Option<DisruptionCommand> = None;
    let mut why = None;
    for pools in &shapes {
        match ctx.place(&[i], pools, 2)? {
            Ok(p) if p.new_nodes.len() == 2 => match consolidation(ctx, Method::Split, &[i], p, rules) {
                Ok(cmd) if best.as_ref().is_none_or(|b| cmd.savings_per_hour > b.savings_per_hour) => best = Some(cmd),
                Ok(_) => {}
                Err(b) => why = Some(b),
            },
            Ok(_) => {}
            Err(m) => why = why.or(Some(m.blocked())),
        }
    }
    Some(best.ok_or(why))
}

/// Finds the node to split now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let (ordered, _) = ctx.ordered(Method::Split, |c| c.price > 0.0 && c.moving.len() >= 2);
    for i in ordered {
        match for_candidate(ctx, i)? {
            Ok(cmd) => return Some(cmd),
            Err(Some(b)) => ctx.decline(i, b),
            Err(None) => {}
        }
    }
    None
}
