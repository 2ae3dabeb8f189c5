//! Hourly prices: the embedded on-demand table, a spot-price model, and live overrides.
//!
//! The embedded data has on-demand prices for us-east-1 and the two GovCloud regions
//! only. Elsewhere the us-east-1 price stands in, and [`PriceBook::is_estimated`] says
//! so. There is no embedded spot price at all: spot is estimated as a share of the
//! on-demand price by instance category ([`SpotModel`]), the same in every zone.
//!
//! Live prices (the Pricing API for on-demand, `DescribeSpotPriceHistory` for spot, per
//! zone) are set with [`PriceBook::set_on_demand`] and [`PriceBook::set_spot`]; they take
//! precedence over the table and the model, and callers that read offerings do not change.
//!
//! NodeOverlays change prices last ([`PriceBook::set_change`], set by
//! [`super::overlay::apply`]): an offering's price is its live or listed price with its
//! overlay's change applied, so a live price read later is still adjusted.

use std::collections::HashMap;

use crate::model::{CapacityType, InstanceType, PriceChange};

/// Spot price as a share of on-demand, by instance category.
///
/// The shares are assumptions, set from the long-run savings the EC2 Spot Instance
/// Advisor shows (about 60–70% for general purpose, compute and memory types, less for
/// accelerated types). They are documented in the README. Real spot prices vary by zone
/// and hour; deploy with live prices for real decisions.
#[derive(Clone, Debug, PartialEq)]
pub struct SpotModel {
    /// The share used for a category not listed.
    pub default_share: f64,
    /// Shares by category (`c`, `m`, `g`...).
    pub by_category: HashMap<String, f64>,
}

impl Default for SpotModel {
    fn default() -> Self {
        let mut by_category = HashMap::new();
        for c in ["c", "m", "r", "t", "a"] {
            by_category.insert(c.to_string(), 0.38);
        }
        for c in ["i", "d", "h", "x", "z", "u", "im", "is", "hpc"] {
            by_category.insert(c.to_string(), 0.40);
        }
        for c in ["g", "p", "inf", "trn", "dl", "vt", "f", "gr"] {
            by_category.insert(c.to_string(), 0.45);
        }
        SpotModel {
            default_share: 0.40,
            by_category,
        }
    }
}

impl SpotModel {
    /// The estimated spot price of a type, from its on-demand price.
    pub fn estimate(&self, it: &InstanceType, on_demand: f64) -> f64 {
        let share = self
            .by_category
            .get(&it.category)
            .copied()
            .unwrap_or(self.default_share);
        round_price(on_demand * share)
    }
}

fn round_price(p: f64) -> f64 {
    (p * 1e5).round() / 1e5
}

/// The prices of one region.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceBook {
    on_demand: HashMap<String, f64>,
    spot: HashMap<(String, String), f64>,
    estimated_on_demand: bool,
    spot_model: SpotModel,
    /// NodeOverlays' price changes, by instance type: per zone and capacity type.
    changes: HashMap<String, Vec<(String, CapacityType, PriceChange)>>,
}

impl PriceBook {
    /// A price book from an on-demand table; `estimated` when the table is another
    /// region's.
    pub fn new(on_demand: HashMap<String, f64>, estimated: bool) -> Self {
        PriceBook {
            on_demand,
            spot: HashMap::new(),
            estimated_on_demand: estimated,
            spot_model: SpotModel::default(),
            changes: HashMap::new(),
        }
    }

    /// Whether on-demand prices are another region's, standing in.
    pub fn is_estimated(&self) -> bool {
        self.estimated_on_demand
    }

    /// Replaces the spot model.
    pub fn set_spot_model(&mut self, model: SpotModel) {
        self.spot_model = model;
    }

    /// Sets a live on-demand price.
    pub fn set_on_demand(&mut self, instance_type: &str, usd_per_hour: f64) {
        self.on_demand.insert(instance_type.to_string(), usd_per_hour);
    }

    /// Sets a live spot price for one zone.
    pub fn set_spot(&mut self, instance_type: &str, zone: &str, usd_per_hour: f64) {
        self.spot
            .insert((instance_type.to_string(), zone.to_string()), usd_per_hour);
    }

    /// The listed (or live) on-demand price of a type, if known, before any NodeOverlay.
    pub fn on_demand(&self, instance_type: &str) -> Option<f64> {
        self.on_demand.get(instance_type).copied()
    }

    /// Sets a NodeOverlay's change of the price of one offering, replacing the one set
    /// before.
    pub fn set_change(&mut self, instance_type: &str, zone: &str, capacity_type: CapacityType, change: PriceChange) {
        let changes = self.changes.entry(instance_type.to_string()).or_default();
        changes.retain(|(z, ct, _)| !(z == zone && *ct == capacity_type));
        changes.push((zone.to_string(), capacity_type, change));
    }

    /// Removes every NodeOverlay's change: prices are listed (or live) again.
    pub fn clear_changes(&mut self) {
        self.changes.clear();
    }

    /// The NodeOverlay change of an offering's price, if one applies.
    pub fn change(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) -> Option<PriceChange> {
        self.changes
            .get(instance_type)?
            .iter()
            .find(|(z, ct, _)| z == zone && *ct == capacity_type)
            .map(|(_, _, c)| *c)
    }

    /// The price of an offering as the user pays it: [`PriceBook::list_price`] with its
    /// NodeOverlay's change, if any. None when the type has no known price (it is then
    /// not offered).
    pub fn price(&self, it: &InstanceType, zone: &str, capacity_type: CapacityType) -> Option<f64> {
        let listed = self.list_price(it, zone, capacity_type)?;
        if self.changes.is_empty() {
            return Some(listed);
        }
        Some(match self.change(&it.name, zone, capacity_type) {
            Some(c) => c.apply(listed),
            None => listed,
        })
    }

    /// The price of an offering before NodeOverlays: live if known, else the table or
    /// the model. None when the type has no known price.
    pub fn list_price(&self, it: &InstanceType, zone: &str, capacity_type: CapacityType) -> Option<f64> {
        match capacity_type {
            CapacityType::OnDemand => self.on_demand(&it.name),
            // Paid for whether used or not: next to free, but keeping the types' order
            // (Karpenter's `ReservedCapacityResolver`: on-demand / 10,000,000). Without an
            // on-demand price it is still offered, at zero.
            CapacityType::Reserved => Some(self.on_demand(&it.name).map_or(0.0, |od| {
                od / crate::model::capacity_reservation::RESERVED_PRICE_DIVISOR
            })),
            CapacityType::Spot => {
                if !it.spot {
                    return None;
                }
                if let Some(p) = self.spot.get(&(it.name.clone(), zone.to_string())) {
                    return Some(*p);
                }
                self.on_demand(&it.name).map(|od| self.spot_model.estimate(it, od))
            }
        }
    }
}
