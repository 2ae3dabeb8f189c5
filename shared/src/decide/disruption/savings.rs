//! Whether a consolidation pays: the pool's savings threshold (anti-churn), the price
//! filter on the replacements' alternatives, and `Balanced`'s score.
//!
//! - **Threshold.** A consolidation must save at least the larger of a share of the cost
//!   it removes and an amount per hour, per NodePool (annotations
//!   `carpool.sh/consolidation-min-savings-percent`, default 10, and
//!   `carpool.sh/consolidation-min-savings-per-hour`, default 0.01): Karpenter replaces
//!   for any saving, and its users see nodes churned for $0.006/h (aws/karpenter-provider-aws
//!   #7146; Karpenter's own RFC `designs/consolidation-cost-threshold.md`).
//! - **Price filter.** Every alternative a replacement carries for CreateFleet costs at
//!   most what the removed nodes cost less the threshold, and a single node is never
//!   replaced by its own instance type in its own capacity type.
//! - **Same type, several nodes** (multi-node; Karpenter's `filterOutSameInstanceType` in
//!   `pkg/controllers/disruption/multinodeconsolidation.go`): when a replacement's
//!   alternatives include the type of a removed node, only those cheaper than the cheapest
//!   removed node of such a type stay; none left, the merge is refused, since deleting the
//!   other nodes is the smaller disruption.
//! - **Spot to spot** (Karpenter's `computeSpotToSpotConsolidation` in
//!   `pkg/controllers/disruption/consolidation.go`, `MinInstanceTypesForSpotToSpotConsolidation`):
//!   when every removed node is spot, a spot replacement needs at least
//!   `spot_to_spot_min_types` (15) cheaper types, and carries only the cheapest 15 (or, when
//!   its NodePool sets `minValues`, as many as they need if more), so that the type
//!   CreateFleet picks is among them and the next run does not find it dear again.
//! - **Balanced.** For a pool with `consolidationPolicy: Balanced`, Karpenter v1.14's
//!   `ScoreMove`: (savings / the pool's cost) / (the move's disruption / the pool's
//!   disruption), where a node's disruption is 1 plus its moving pods' positive eviction
//!   costs; the move is approved at a score of at least `1/k` (`k` = the pool's
//!   `carpool.sh/consolidation-threshold` annotation, default 2, Karpenter's fixed `BalancedK`).

use super::Ctx;
use super::candidate::{BlockKind, Blocked, Candidate};
use super::command::{DisruptionCommand, Method};
use super::simulate::Placement;
use crate::decide::provisioning::plan::PlannedNode;
use crate::model::nodepool::{BALANCED_K, SavingsThreshold};
use crate::model::{CapacityType, ConsolidationPolicy, NodePool};

/// The rules a consolidation's replacements follow.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// A single node may not be replaced by its own type in its own capacity type.
    pub forbid_same_type: bool,
    /// When every removed node is spot, each spot replacement needs at least this many
    /// cheaper types, and carries only the cheapest this many (or those its NodePool's
    /// `minValues` need); 0: no such rule.
    pub spot_to_spot_min_types: usize,
    /// A replacement's alternatives are cut below the price of the cheapest removed node
    /// whose type is among them (multi-node's same-type rule).
    pub cheaper_than_removed_types: bool,
}

impl Rules {
    /// The rules of a plain consolidation.
    pub const PLAIN: Rules = Rules {
        forbid_same_type: true,
        spot_to_spot_min_types: 0,
        cheaper_than_removed_types: false,
    };
}

/// How many of `types` (cheapest first), counted from the first, the `minValues` of
/// `pool`'s requirements need; 0 when it sets none or they cannot be met.
fn min_values_prefix(ctx: &Ctx<'_>, pool: &str, types: &[String]) -> usize {
    let Some(reqs) = ctx
        .pools()
        .iter()
        .find(|p| p.name() == pool)
        .and_then(|p| p.requirements().ok())
    else {
        return 0;
    };
    if reqs.iter().all(|r| r.min_values().is_none()) {
        return 0;
    }
    let labels: Vec<_> = types
        .iter()
        .filter_map(|t| ctx.pricer.instance_type(t))
        .map(|t| t.labels())
        .collect();
    (1..=labels.len())
        .find(|&k| reqs.check_min_values(labels[..k].iter()).is_ok())
        .unwrap_or(0)
}

fn threshold(pool: Option<&NodePool>) -> SavingsThreshold {
    pool.and_then(|p| p.savings_threshold().ok())
        .unwrap_or(SavingsThreshold {
            percent: crate::model::nodepool::DEFAULT_MIN_SAVINGS_PERCENT,
            per_hour: crate::model::nodepool::DEFAULT_MIN_SAVINGS_PER_HOUR,
        })
}

/// The score of a move under `Balanced` (Karpenter's `ScoreMove`): 0 when it saves
/// nothing or the pool costs nothing, infinite when it disrupts nothing.
pub fn balanced_score(savings: f64, disruption: f64, pool_cost: f64, pool_disruption: f64) -> f64 {
    if savings <= 0.0 || pool_cost <= 0.0 {
        return 0.0;
    }
    if disruption <= 0.0 || pool_disruption <= 0.0 {
        return f64::INFINITY;
    }
    (savings / pool_cost) / (disruption / pool_disruption)
}

/// Turns removed candidates and where their pods go into a consolidation command, or says
/// why it does not pay.
pub fn consolidation(
    ctx: &Ctx<'_>,
    method: Method,
    removed: &[usize],
    placement: Placement,
    rules: Rules,
) -> Result<DisruptionCommand, Blocked> {
    let cands: Vec<_> = removed.iter().map(|&i| &ctx.candidates[i]).collect();
    let removed_cost: f64 = cands.iter().map(|c| c.price).sum();
    let required = cands
        .iter()
        .map(|c| threshold(c.pool).required(removed_cost))
        .fold(0.0, f64::max);
    let limit = removed_cost - required;
    let mut replacements = placement.new_nodes;
    let same = |t: &str, ct| {
        rules.forbid_same_type && cands.len() == 1 && cands[0].instance_type == t && cands[0].capacity_type == Some(ct)
    };
    for i in 0..replacements.len() {
        let others: f64 = replacements
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| n.price_per_hour)
            .sum();
        let cap = limit - others;
        let ct = replacements[i].capacity_type;
        if same(&replacements[i].instance_type, ct) {
            return Err(Blocked::new(
                BlockKind::SameType,
                format!(
                    "the cheapest type that fits its pods is its own, {} ({ct})",
                    replacements[i].instance_type
                ),
            ));
        }
        let mut probe = replacements[i].clone();
        if !ctx.pricer.narrow(&mut replacements[i], cap, |t| !same(t, ct)) {
            let kind = if ctx.pricer.narrow(&mut probe, cap, |_| true) {
                BlockKind::SameType
            } else {
                BlockKind::BelowThreshold
            };
            let message = match kind {
                BlockKind::SameType => format!(
                    "the only replacement cheaper than ${removed_cost:.4}/h by ${required:.4}/h is its own type {} ({})",
                    cands[0].instance_type, ct
                ),
                _ => format!(
                    "the cheapest replacement, {} at ${:.4}/h, saves less than ${required:.4}/h of ${removed_cost:.4}/h",
                    probe.instance_type,
                    probe.price_per_hour + others
                ),
            };
            return Err(Blocked::new(kind, message));
        }
        if rules.cheaper_than_removed_types {
            same_type_cut(ctx, &cands, &mut replacements[i])?;
        }
        let all_spot = cands.iter().all(|c| c.capacity_type == Some(CapacityType::Spot));
        if rules.spot_to_spot_min_types > 0 && all_spot && ct == CapacityType::Spot {
            let r = &mut replacements[i];
            if r.instance_types.len() < rules.spot_to_spot_min_types {
                return Err(Blocked::new(
                    BlockKind::BelowThreshold,
                    format!(
                        "{} cheaper spot type(s), {} needed to replace spot by spot",
                        r.instance_types.len(),
                        rules.spot_to_spot_min_types
                    ),
                ));
            }
            let keep = rules
                .spot_to_spot_min_types
                .max(min_values_prefix(ctx, &r.nodepool, &r.instance_types));
            r.instance_types.truncate(keep);
        }
    }
    let new_cost: f64 = replacements.iter().map(|n| n.price_per_hour).sum();
    let savings = removed_cost - new_cost;
    if savings + 1e-9 < required || savings <= 0.0 {
        return Err(Blocked::new(
            BlockKind::BelowThreshold,
            format!("saves ${savings:.4}/h, less than ${required:.4}/h"),
        ));
    }
    balanced(ctx, removed, savings)?;
    Ok(DisruptionCommand {
        method,
        nodes: cands.iter().map(|c| c.name.clone()).collect(),
        replacements,
        moves: placement.moves,
        removed_per_hour: removed_cost,
        savings_per_hour: savings,
    })
}

/// Multi-node's same-type rule (Karpenter's `filterOutSameInstanceType`): when `node`'s
/// alternatives include the type of a removed node, keeps only those cheaper than the
/// cheapest removed node of such a type; an error when none is left.
fn same_type_cut(ctx: &Ctx<'_>, cands: &[&Candidate<'_>], node: &mut PlannedNode) -> Result<(), Blocked> {
    let Some((max_price, removed_type)) = cands
        .iter()
        .filter(|c| node.instance_types.contains(&c.instance_type))
        .map(|c| (c.price, c.instance_type.clone()))
        .min_by(|a, b| a.0.total_cmp(&b.0))
    else {
        return Ok(());
    };
    let (zone, ct) = (node.zone.clone(), node.capacity_type);
    let cheaper = |t: &str| ctx.pricer.price(t, &zone, ct).is_some_and(|p| p < max_price - 1e-9);
    if ctx.pricer.narrow(node, max_price, cheaper) {
        Ok(())
    } else {
        Err(Blocked::new(
            BlockKind::SameType,
            format!(
                "the replacement could be {removed_type}, a type being removed at ${max_price:.4}/h, and nothing cheaper fits: deleting the other nodes disrupts less"
            ),
        ))
    }
}

/// `Balanced`'s check over the removed candidates of Balanced pools (the others pass, as
/// in Karpenter's mixed batches).
fn balanced(ctx: &Ctx<'_>, removed: &[usize], savings: f64) -> Result<(), Blocked> {
    let balanced_pools: Vec<&NodePool> = removed
        .iter()
        .filter_map(|&i| ctx.candidates[i].pool)
        .filter(|p| p.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced)
        .collect();
    if balanced_pools.is_empty() {
        return Ok(());
    }
    let in_pools = |name: &str| balanced_pools.iter().any(|p| p.name() == name);
    let (pool_cost, pool_disruption) = ctx
        .candidates
        .iter()
        .filter(|c| in_pools(&c.pool_name))
        .fold((0.0, 0.0), |(a, b), c| (a + c.price, b + c.balanced_cost));
    let disruption: f64 = removed
        .iter()
        .map(|&i| &ctx.candidates[i])
        .filter(|c| in_pools(&c.pool_name))
        .map(|c| c.balanced_cost)
        .sum();
    let k = balanced_pools
        .iter()
        .map(|p| p.consolidation_threshold().unwrap_or(BALANCED_K))
        .min()
        .unwrap_or(BALANCED_K)
        .max(1);
    let score = balanced_score(savings, disruption, pool_cost, pool_disruption);
    if score >= 1.0 / f64::from(k) {
        Ok(())
    } else {
        Err(Blocked::new(
            BlockKind::BelowThreshold,
            format!(
                "Balanced score {score:.2} < {:.2}: saves {:.1}% of the pool's ${pool_cost:.4}/h for {:.1}% of its disruption",
                1.0 / f64::from(k),
                100.0 * savings / pool_cost,
                100.0 * disruption / pool_disruption
            ),
        ))
    }
}
