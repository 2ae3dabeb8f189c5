//! Reserved capacity: a `reserved` planned node names, in its labels, a capacity
//! reservation of the region's that holds its type in its zone, and no reservation takes
//! more planned nodes than the instances it has left.

use std::collections::BTreeMap;

use crate::catalog::RegionCatalog;
use crate::decide::provisioning::plan::ProvisioningPlan;
use crate::model::{CapacityReservation, CapacityType, ReservationTarget};

use super::violation::Violation;

/// The reservation a reserved planned node of `instance_type` in `zone` names, if the
/// region has one so (of any class: the checker reads no template).
pub fn named<'r>(
    region: &'r RegionCatalog<'_>,
    labels: &BTreeMap<String, String>,
    instance_type: &str,
    zone: &str,
) -> Option<&'r CapacityReservation> {
    let target = ReservationTarget::from_labels(labels)?;
    region
        .all_capacity_reservations()
        .values()
        .flatten()
        .find(|r| r.id == target.id && r.instance_type == instance_type && r.zone == zone && r.available > 0)
}

/// No reservation is planned past the instances it has left.
pub fn check(plan: &ProvisioningPlan, region: &RegionCatalog<'_>, v: &mut Vec<Violation>) {
    let mut taken: BTreeMap<String, u32> = BTreeMap::new();
    for n in plan.nodes.iter().filter(|n| n.capacity_type == CapacityType::Reserved) {
        if let Some(t) = ReservationTarget::from_labels(&n.labels) {
            *taken.entry(t.id).or_default() += 1;
        }
    }
    for (id, planned) in taken {
        let left = region
            .all_capacity_reservations()
            .values()
            .flatten()
            .find(|r| r.id == id)
            .map_or(0, |r| r.available);
        if planned > left {
            v.push(Violation::ReservationOverbooked {
                reservation: id,
                planned,
                available: left,
            });
        }
    }
}
