//! Offer keys: the (zone, capacity type) pairs a NodePool offers, with the labels a node
//! launched there gets and the price of each of its types there (Karpenter's
//! `InstanceType.Offerings`, which `NodeClaim.CanAdd` narrows by the NodeClaim's zone and
//! capacity type requirements).

use std::collections::BTreeMap;

use crate::decide::provisioning::scheduler::index::{IdVec, OfferKeyId, TypeId, type_ids};
use crate::decide::provisioning::templates::Template;
use crate::model::CapacityType;
use crate::model::well_known as wk;

/// A (zone, capacity type) pair a template offers, with the node labels of a node there.
pub(super) struct OfferKey {
    /// The zone.
    pub(super) zone: String,
    /// Spot or on-demand.
    pub(super) capacity_type: CapacityType,
    /// The template's labels, with zone, capacity type and region.
    pub(super) labels: BTreeMap<String, String>,
    /// Price of each of the template's types here (None: not offered).
    pub(super) prices: IdVec<TypeId, Option<f64>>,
    /// The types offered here, cheapest first.
    pub(super) by_price: Vec<TypeId>,
}

/// The offer keys of a template, in (zone, capacity type) order.
pub(super) fn offer_keys(t: &Template, region: &str) -> IdVec<OfferKeyId, OfferKey> {
    let mut keys: Vec<(String, CapacityType)> = t
        .types
        .iter()
        .flat_map(|o| o.offers.iter().map(|o| (o.zone.clone(), o.capacity_type)))
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|(zone, capacity_type)| {
            let mut labels = t.labels.clone();
            labels.insert(wk::ZONE.into(), zone.clone());
            labels.insert(wk::CAPACITY_TYPE.into(), capacity_type.label().into());
            labels.insert(wk::REGION.into(), region.into());
            if let Some(id) = t.zone_ids.get(&zone) {
                labels.insert(wk::ZONE_ID.into(), id.clone());
            }
            let prices: IdVec<TypeId, Option<f64>> = t.types.iter().map(|o| o.price(&zone, capacity_type)).collect();
            let mut by_price: Vec<TypeId> = type_ids(t).filter(|&i| prices[i].is_some()).collect();
            by_price.sort_by(|&a, &b| {
                let (pa, pb) = (prices[a].unwrap_or(f64::INFINITY), prices[b].unwrap_or(f64::INFINITY));
                pa.total_cmp(&pb).then(a.cmp(&b))
            });
            OfferKey {
                zone,
                capacity_type,
                labels,
                prices,
                by_price,
            }
        })
        .collect()
}
