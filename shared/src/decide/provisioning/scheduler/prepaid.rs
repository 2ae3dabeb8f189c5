//! The room left in the Savings Plan commitments ([`crate::catalog::commitment`]): the
//! usage of the nodes that exist (launches in flight included) is paid first, and what is
//! left makes a covered on-demand offering free for a new node, so the planner fills the
//! commitment before it pays for anything, spot included. Each node planned there takes
//! its price from the room.

use std::collections::BTreeSet;

use crate::catalog::RegionCatalog;
use crate::catalog::commitment::{Commitment, Usage, pay};
use crate::model::well_known as wk;
use crate::model::{CapacityType, Node};
use crate::snapshot::Snapshot;

/// The commitments and the room each has left.
#[derive(Debug, Default)]
pub(super) struct Prepaid {
    commitments: Vec<Commitment>,
    left: Vec<f64>,
}

impl Prepaid {
    /// The room left once the snapshot's nodes (less the `removed` ones and those being
    /// deleted) are paid for.
    pub(super) fn new(snapshot: &Snapshot, region: &RegionCatalog<'_>, removed: Option<&BTreeSet<String>>) -> Self {
        let commitments = region.commitments().to_vec();
        if commitments.is_empty() {
            return Prepaid::default();
        }
        let nodes: Vec<(String, String, CapacityType)> = snapshot
            .nodes
            .iter()
            .filter_map(|n| Node::from_k8s(n).ok())
            .filter(|n| !n.terminating && !removed.is_some_and(|r| r.contains(&n.name)))
            .filter_map(|n| {
                Some((
                    n.labels.get(wk::INSTANCE_TYPE)?.clone(),
                    n.labels.get(wk::ZONE)?.clone(),
                    n.labels.get(wk::CAPACITY_TYPE)?.parse().ok()?,
                ))
            })
            .collect();
        let usage: Vec<Usage<'_>> = nodes
            .iter()
            .filter_map(|(it, zone, ct)| {
                let t = region.types().iter().find(|t| &t.name == it)?;
                Some(Usage {
                    instance_type: it,
                    zone,
                    capacity_type: *ct,
                    price: region.prices().price(t, zone, *ct)?,
                })
            })
            .collect();
        let (_, left) = pay(&commitments, &usage);
        Prepaid { commitments, left }
    }

    /// The commitment whose room pays for a node of `instance_type` in `zone` bought as
    /// `capacity_type` at `price`, if one covers it and has the room.
    pub(super) fn payer(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        price: f64,
    ) -> Option<usize> {
        (0..self.commitments.len())
            .find(|&i| self.left[i] + 1e-9 >= price && self.commitments[i].covers(instance_type, zone, capacity_type))
    }

    /// Takes `price` from commitment `i`'s room.
    pub(super) fn take(&mut self, i: usize, price: f64) {
        if let Some(l) = self.left.get_mut(i) {
            *l -= price;
        }
    }

    /// Whether there is any commitment at all.
    pub(super) fn is_empty(&self) -> bool {
        self.commitments.is_empty()
    }
}
