//! Savings Plan commitments: what Karpenter's users pay is not a discount per type but an
//! hourly commitment (aws/karpenter-provider-aws #2259, #3860, #4136). Carpool's opt-in is
//! an annotation on a NodeOverlay
//! ([`crate::model::nodeoverlay::SAVINGS_PLAN_COMMITMENT_ANNOTATION`]): the overlay's
//! requirements say which offerings the plan covers and its `price` or `priceAdjustment`
//! the plan's rate, the annotation how many USD per hour of that usage are committed.
//!
//! The model, as AWS bills a Savings Plan: covered usage, at the plan's rate, is paid by
//! the commitment up to its amount per hour, whether used or not; past it, usage is billed
//! at the on-demand rate. Only on-demand usage is covered (a Savings Plan never applies to
//! spot). So, while a commitment has room, a covered node costs nothing more: the planner
//! fills the room first, and consolidation counts no saving on what the commitment pays.
//!
//! Its limits: the commitment is counted per cluster (one deployment's nodes), not across
//! the account the plan spans; the hour is taken as now (a node's cost per hour, not the
//! hour's bill); when several commitments cover a node, the first in the overlays' order
//! (weight, then name) pays; and usage past the commitment is priced at the plan's rate,
//! as the overlay says, not at the on-demand rate AWS would bill.

use std::collections::BTreeSet;

use crate::model::CapacityType;

/// A Savings Plan commitment and the on-demand offerings it covers.
#[derive(Clone, Debug, PartialEq)]
pub struct Commitment {
    /// The NodeOverlay that states it.
    pub overlay: String,
    /// USD per hour committed.
    pub per_hour: f64,
    /// The (instance type, zone) pairs it covers, on-demand.
    pub covers: BTreeSet<(String, String)>,
}

impl Commitment {
    /// Whether it covers `instance_type` in `zone` bought as `capacity_type`.
    pub fn covers(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) -> bool {
        capacity_type == CapacityType::OnDemand && self.covers.contains(&(instance_type.to_string(), zone.to_string()))
    }
}

/// One node's usage: its type, zone, capacity type and price per hour (the plan's rate).
#[derive(Clone, Copy, Debug)]
pub struct Usage<'a> {
    /// The instance type.
    pub instance_type: &'a str,
    /// The zone.
    pub zone: &'a str,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
}

/// What the commitments pay of each usage, in the order given (each paid by the first
/// commitment that covers it and has room, as far as the room goes), and the room each
/// commitment has left.
pub fn pay(commitments: &[Commitment], usage: &[Usage<'_>]) -> (Vec<f64>, Vec<f64>) {
    let mut left: Vec<f64> = commitments.iter().map(|c| c.per_hour).collect();
    let paid = usage
        .iter()
        .map(|u| {
            let Some(i) = (0..commitments.len())
                .find(|&i| left[i] > 0.0 && commitments[i].covers(u.instance_type, u.zone, u.capacity_type))
            else {
                return 0.0;
            };
            let p = u.price.min(left[i]).max(0.0);
            left[i] -= p;
            p
        })
        .collect();
    (paid, left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m6i(per_hour: f64) -> Commitment {
        Commitment {
            overlay: "sp".into(),
            per_hour,
            covers: [("m6i.xlarge".to_string(), "us-east-1a".to_string())].into(),
        }
    }

    fn usage(it: &'static str, ct: CapacityType, price: f64) -> Usage<'static> {
        Usage {
            instance_type: it,
            zone: "us-east-1a",
            capacity_type: ct,
            price,
        }
    }

    #[test]
    fn the_commitment_pays_covered_on_demand_usage_up_to_its_amount() {
        let od = CapacityType::OnDemand;
        let (paid, left) = pay(
            &[m6i(0.25)],
            &[
                usage("m6i.xlarge", od, 0.1),
                usage("m6i.xlarge", CapacityType::Spot, 0.05),
                usage("m5.xlarge", od, 0.1),
                usage("m6i.xlarge", od, 0.1),
                usage("m6i.xlarge", od, 0.1),
            ],
        );
        assert_eq!(paid.len(), 5);
        assert!((paid[0] - 0.1).abs() < 1e-12 && paid[1] == 0.0 && paid[2] == 0.0);
        assert!(
            (paid[3] - 0.1).abs() < 1e-12 && (paid[4] - 0.05).abs() < 1e-12,
            "{paid:?}"
        );
        assert!(left[0].abs() < 1e-12);
    }
}
