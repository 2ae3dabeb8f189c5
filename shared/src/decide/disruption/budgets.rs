//! NodePool disruption budgets: how many of a pool's nodes a method may disrupt now.
//!
//! Karpenter's `NodePool.GetAllowedDisruptionsByReason` (`pkg/apis/v1/nodepool.go`) and
//! `Budget.IsActive`:
//! - a budget with a `schedule` is active from each time the schedule fires (UTC) for its
//!   `duration`; one without is always active;
//! - a budget with `reasons` limits only those reasons;
//! - `nodes` is a count, or a percentage of the pool's nodes rounded up;
//! - the smallest active budget wins, less the pool's nodes being disrupted already; with
//!   no active budget for the reason, nothing limits it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::model::nodepool::parse_schedule;
use crate::model::{Budget, BudgetNodes, DisruptionReason, NillableDuration, NodePool};

fn utc(t: SystemTime) -> Option<jiff::civil::DateTime> {
    let ts = jiff::Timestamp::try_from(t).ok()?;
    Some(ts.to_zoned(jiff::tz::TimeZone::UTC).datetime())
}

/// Whether a budget is active at `now`: always without a schedule; else when the schedule's
/// first time after `now - duration` is not after `now`. A schedule that does not parse
/// (validation refuses it) counts as active: it then limits rather than allows.
pub fn is_active(budget: &Budget, now: SystemTime) -> bool {
    let (Some(schedule), Some(duration)) = (&budget.schedule, budget.duration) else {
        return true;
    };
    let duration = match duration {
        NillableDuration::Never => return true,
        NillableDuration::After(d) => d,
    };
    let Ok(cron) = parse_schedule(schedule) else {
        return true;
    };
    let (Some(from), Some(now)) = (
        utc(now.checked_sub(duration).unwrap_or(SystemTime::UNIX_EPOCH)),
        utc(now),
    ) else {
        return true;
    };
    cron.find_next_occurrence(&from, false).map_or(true, |next| next <= now)
}

/// How many of a pool's `pool_nodes` nodes may be disrupted for `reason` at `now`, before
/// the ones disrupting already are taken off; `None` when no active budget limits it.
pub fn limit(pool: &NodePool, reason: DisruptionReason, pool_nodes: usize, now: SystemTime) -> Option<u32> {
    pool.spec
        .disruption
        .budgets
        .iter()
        .filter(|b| b.reasons.as_ref().is_none_or(|r| r.contains(&reason)))
        .filter(|b| is_active(b, now))
        .filter_map(|b| match b.parsed_nodes().ok()? {
            BudgetNodes::Count(n) => Some(n),
            BudgetNodes::Percent(p) => {
                let scaled = (pool_nodes as u64 * u64::from(p)).div_ceil(100);
                Some(u32::try_from(scaled).unwrap_or(u32::MAX))
            }
        })
        .min()
}

/// What each pool may still disrupt for one reason.
#[derive(Clone, Debug, Default)]
pub struct Allowance {
    left: BTreeMap<String, Option<u32>>,
}

impl Allowance {
    /// Per pool: its limit for `reason` at `now`, less its nodes disrupting now.
    /// `nodes[pool] = (nodes, disrupting)`.
    pub fn new(
        pools: &[NodePool],
        nodes: &BTreeMap<String, (usize, usize)>,
        reason: DisruptionReason,
        now: SystemTime,
    ) -> Self {
        let left = pools
            .iter()
            .map(|p| {
                let (count, disrupting) = nodes.get(p.name()).copied().unwrap_or((0, 0));
                let left = limit(p, reason, count, now)
                    .map(|l| l.saturating_sub(u32::try_from(disrupting).unwrap_or(u32::MAX)));
                (p.name().to_string(), left)
            })
            .collect();
        Allowance { left }
    }

    /// No limit on any pool (methods that are not budgeted).
    pub fn unlimited() -> Self {
        Allowance::default()
    }

    /// Whether one more node of `pool` may be disrupted.
    pub fn allows(&self, pool: &str) -> bool {
        self.left.get(pool).copied().flatten().is_none_or(|n| n > 0)
    }

    /// Takes one node of `pool`; false when none is left.
    pub fn take(&mut self, pool: &str) -> bool {
        match self.left.get_mut(pool) {
            Some(Some(0)) => false,
            Some(Some(n)) => {
                *n -= 1;
                true
            }
            _ => true,
        }
    }
}
