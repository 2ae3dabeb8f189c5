//! Consolidation and the Savings Plan commitments ([`crate::catalog::commitment`]): what a
//! commitment pays is paid whether the node runs or not, so removing or replacing a
//! covered node saves only what the commitment does not pay of it. Each candidate's price
//! becomes what it costs past the commitment: nodes with pods are paid first (dearest
//! first), empty nodes last, so that an empty node is free only when the commitment has
//! room after every busy one, and deleting it would free nothing another node needs.
//!
//! A node the commitment pays in full costs nothing: no method that looks for savings
//! (multi-node, single-node, split, spot) picks it, and emptiness keeps it while it is
//! free (it is warm capacity the user has paid for). Drift, expiration and repair replace
//! it as ever.

use super::candidate::Candidate;
use crate::catalog::RegionCatalog;
use crate::catalog::commitment::{Usage, pay};

/// Takes off each candidate's price what the region's commitments pay of it.
pub fn apply(candidates: &mut [Candidate<'_>], region: &RegionCatalog<'_>) {
    let commitments = region.commitments();
    if commitments.is_empty() {
        return;
    }
    let mut order: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].capacity_type.is_some())
        .collect();
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&candidates[a], &candidates[b]);
        ca.moving
            .is_empty()
            .cmp(&cb.moving.is_empty())
            .then(cb.price.total_cmp(&ca.price))
            .then(ca.name.cmp(&cb.name))
    });
    let usage: Vec<Usage<'_>> = order
        .iter()
        .filter_map(|&i| {
            let c = &candidates[i];
            Some(Usage {
                instance_type: &c.instance_type,
                zone: &c.zone,
                capacity_type: c.capacity_type?,
                price: c.price,
            })
        })
        .collect();
    let (paid, _) = pay(commitments, &usage);
    for (&i, p) in order.iter().zip(paid) {
        let c = &mut candidates[i];
        c.price = (c.price - p).max(0.0);
    }
}
