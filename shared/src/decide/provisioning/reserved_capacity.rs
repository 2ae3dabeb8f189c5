//! Reserved capacity: how many nodes each capacity reservation can still take, counted
//! across a plan so that it is never planned past its available instances.
//!
//! Karpenter keeps an availability cache per reservation
//! (aws/karpenter-provider-aws `pkg/providers/capacityreservation/types.go`
//! `availabilityCache`): EC2's `AvailableInstanceCount` at each sync, less one for each
//! launch after the sync (`MarkLaunched`), zero once a launch finds it full
//! (`MarkUnavailable`); and its scheduler's `ReservationManager`
//! (kubernetes-sigs/karpenter `pkg/controllers/provisioning/scheduling/reservationmanager.go`)
//! hands each reserved offering out at most that many times per simulation.
//!
//! Carpool does the same without memory between runs:
//! - [`usable`]: each run's reservations as EC2 described them, less the launches recorded
//!   into each since it was described (in flight, or unknown), and without the Capacity
//!   Blocks that are expiring ([`CapacityReservation::is_expiring`]);
//! - [`Ledger`]: the planner takes one slot per reserved node it opens, and gives it back
//!   when the node is not kept. A full reservation found at launch marks the reserved
//!   offering unavailable (the ICE record), so the next round plans without it.

use std::collections::BTreeMap;

use crate::decide::provisioning::templates::Template;
use crate::model::{CapacityReservation, EpochMillis, LaunchRecord, LaunchState, ReservationTarget};

/// The reservations as the plan may use them at `now`: each with its available count less
/// the launches `launches` recorded into it (by their `capacity-reservation-id` label)
/// since EC2 was asked, and none that is expiring or full.
pub fn usable(
    reservations: &[CapacityReservation],
    launches: &[LaunchRecord],
    now: EpochMillis,
) -> Vec<CapacityReservation> {
    reservations
        .iter()
        .filter(|r| !r.is_expiring(now))
        .filter_map(|r| {
            let since = launches
                .iter()
                .filter(|l| !matches!(l.state, LaunchState::Failed { .. }))
                .filter(|l| l.launched_at >= r.synced_at)
                .filter(|l| ReservationTarget::from_labels(&l.labels).is_some_and(|t| t.id == r.id))
                .count();
            let left = r.available.saturating_sub(u32::try_from(since).unwrap_or(u32::MAX));
            (left > 0).then(|| CapacityReservation {
                available: left,
                ..r.clone()
            })
        })
        .collect()
}

/// The room left in each reservation while a plan is made.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    left: BTreeMap<String, u32>,
}

impl Ledger {
    /// The room of every reservation behind the templates' reserved offers (a reservation
    /// two NodePools share is counted once).
    pub fn of<'a>(templates: impl IntoIterator<Item = &'a Template>) -> Self {
        let mut left = BTreeMap::new();
        for t in templates {
            for r in t.reservations.values().flatten() {
                left.entry(r.id.clone()).or_insert(r.available);
            }
        }
        Ledger { left }
    }

    /// Whether `t`'s reservations of `instance_type` in `zone` have room for one more node.
    pub fn has_room(&self, t: &Template, instance_type: &str, zone: &str) -> bool {
        self.first_with_room(t, instance_type, zone).is_some()
    }

    fn first_with_room<'t>(&self, t: &'t Template, instance_type: &str, zone: &str) -> Option<&'t CapacityReservation> {
        t.reservations
            .get(&(instance_type.to_string(), zone.to_string()))?
            .iter()
            .find(|r| self.left.get(&r.id).is_some_and(|&n| n > 0))
    }

    /// Takes one node's room in the first of `t`'s reservations of `instance_type` in
    /// `zone` that has some (ODCRs before Capacity Blocks, as Karpenter's
    /// `CapacityReservationTypeFilter` prefers them): the reservation the node targets.
    pub fn take(&mut self, t: &Template, instance_type: &str, zone: &str) -> Option<ReservationTarget> {
        let r = self.first_with_room(t, instance_type, zone)?;
        let target = ReservationTarget {
            id: r.id.clone(),
            reservation_type: r.reservation_type,
        };
        if let Some(n) = self.left.get_mut(&r.id) {
            *n -= 1;
        }
        Some(target)
    }

    /// Gives back the room a node took that the plan does not keep.
    pub fn give_back(&mut self, target: &ReservationTarget) {
        if let Some(n) = self.left.get_mut(&target.id) {
            *n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CapacityType, ReservationType};

    fn reservation(available: u32, synced_at: EpochMillis) -> CapacityReservation {
        CapacityReservation {
            id: "cr-1".into(),
            instance_type: "m5.xlarge".into(),
            zone: "us-east-1a".into(),
            owner_id: "123456789012".into(),
            reservation_type: ReservationType::Default,
            instance_match_criteria: "targeted".into(),
            available,
            end_time: None,
            synced_at,
        }
    }

    fn launch(id: &str, at: EpochMillis, state: LaunchState) -> LaunchRecord {
        let mut l = crate::fixtures::launch_record(id, Some("i-1"), at, CapacityType::Reserved);
        l.labels = reservation(0, 0).labels();
        l.state = state;
        l
    }

    /// aws/karpenter-provider-aws `availabilityCache.MarkLaunched`: a launch after the
    /// last sync counts against the reservation; one before it is in EC2's count already.
    #[test]
    fn launches_since_the_reservation_was_described_take_its_room() {
        let r = [reservation(3, 1_000)];
        let launches = [
            launch("before", 500, LaunchState::InFlight),
            launch("after", 1_500, LaunchState::InFlight),
            launch(
                "failed",
                1_600,
                LaunchState::Failed {
                    reason: "ReservationCapacityExceeded".into(),
                },
            ),
        ];
        assert_eq!(usable(&r, &launches, 2_000)[0].available, 2);
        let full = [
            launch("a", 1_500, LaunchState::InFlight),
            launch("b", 1_600, LaunchState::InFlight),
        ];
        assert!(usable(&[reservation(2, 1_000)], &full, 2_000).is_empty());
    }

    /// aws/karpenter-provider-aws `ReservedCapacityResolver.ResolveOfferings`: an expiring
    /// Capacity Block offers nothing.
    #[test]
    fn an_expiring_capacity_block_offers_nothing() {
        let end = 100 * 60_000;
        let block = CapacityReservation {
            reservation_type: ReservationType::CapacityBlock,
            end_time: Some(end),
            ..reservation(3, 0)
        };
        assert_eq!(usable(std::slice::from_ref(&block), &[], end - 41 * 60_000).len(), 1);
        assert!(usable(&[block], &[], end - 40 * 60_000).is_empty());
    }
}
