//! Reserved offer keys: a new node opened under a `reserved` (zone, capacity type) takes
//! one node's room in a capacity reservation of its type there, and is never opened once
//! the reservations have none (Karpenter's `ReservationManager.Reserve`,
//! kubernetes-sigs/karpenter `pkg/controllers/provisioning/scheduling/reservationmanager.go`,
//! called from `NodeClaim.CanAdd` for reserved offerings). The room is counted across the
//! plan by [`crate::decide::provisioning::reserved_capacity::Ledger`].
//!
//! A reserved node is launched into one reservation, which holds one instance type: its
//! candidate types are pinned to the type it was opened with (Karpenter launches a
//! reserved NodeClaim with the reserved offerings of its types, each its own reservation;
//! Carpool targets one).

use std::borrow::Cow;

use crate::decide::provisioning::scheduler::Scheduler;
use crate::decide::provisioning::scheduler::index::{NewNodeId, OfferKeyId, TemplateId, TypeId, Types};
use crate::model::CapacityType;

impl Scheduler {
    /// `types`, of offer key `k` of template `ti`, that a new node may open with: all of
    /// them for a key that is not reserved; for a reserved one, those whose reservations
    /// in the key's zone have room, `None` when none has.
    pub(super) fn with_reserved_room<'a>(
        &self,
        ti: TemplateId,
        k: OfferKeyId,
        types: &'a [TypeId],
    ) -> Option<Cow<'a, [TypeId]>> {
        let pool = &self.pools[ti];
        let key = &pool.offer_keys[k];
        if key.capacity_type != CapacityType::Reserved {
            return Some(Cow::Borrowed(types));
        }
        let t = &pool.template;
        let room: Vec<TypeId> = types
            .iter()
            .copied()
            .filter(|&i| self.reserved_room.has_room(t, &t.ty(i).instance_type.name, &key.zone))
            .collect();
        (!room.is_empty()).then_some(Cow::Owned(room))
    }

    /// Takes, for the reserved node `n` just opened, one node's room in a reservation of its
    /// target type and zone, and pins its candidates to that type. A node that is not
    /// reserved is left as it is.
    pub(super) fn take_reservation(&mut self, n: NewNodeId) {
        let node = &self.new_nodes[n];
        if node.capacity_type != CapacityType::Reserved {
            return;
        }
        let t = &self.pools[node.template].template;
        let name = t.ty(node.target).instance_type.name.clone();
        let zone = node.zone.clone();
        let taken = self.reserved_room.take(t, &name, &zone);
        let node = &mut self.new_nodes[n];
        node.candidates = vec![node.target];
        node.reservation = taken;
    }
}
