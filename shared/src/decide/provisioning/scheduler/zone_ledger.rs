//! Zones as a new node's choice of zone must see them beyond price and spreads: each
//! NodePool's nodes per zone, for its zone balance (annotation
//! [`crate::model::nodepool::ZONE_BALANCE_ANNOTATION`], Carpool's own: Karpenter has no
//! answer to aws/karpenter-provider-aws #7311), and the free IP addresses of each
//! EC2NodeClass's subnets per zone, which a node's pods take their addresses from.
//!
//! - **Balance.** Among the zones whose price for the node is within the pool's tolerance
//!   of the cheapest, the node goes where the pool has the fewest nodes (existing ones,
//!   launches in flight and the nodes planned so far in this run); at equal counts, the
//!   cheapest. Hard spreads still come first: balance never breaks a pod's `maxSkew`.
//! - **Addresses.** A node takes one address and one per pod the plan fills it with (its
//!   packing target's pods, the pod that opens it at least). A zone whose subnet with the
//!   most free addresses, less what the nodes planned there already take, cannot hold them
//!   is passed over, and the plan says so ([`crate::decide::provisioning::plan::ZonePassedOver`]).
//!   Karpenter counts the same addresses per launch (`ZonalSubnetsForLaunch`, which picks
//!   each zone's subnet with the most and takes off what its launches in flight will use)
//!   but never passes a zone over; its launch then fails with
//!   `InsufficientFreeAddressesInSubnet`. Host-network pods take an address all the same:
//!   a plan does not tell them apart, and the estimate errs on the side of room.

use std::collections::{BTreeMap, BTreeSet};

use crate::decide::provisioning::scheduler::index::{Id, IdVec, TemplateId};
use crate::decide::provisioning::templates::Template;
use crate::model::Node;
use crate::model::well_known as wk;
use crate::snapshot::Snapshot;

/// Nodes per zone of each NodePool, and free addresses per class and zone.
#[derive(Debug, Default)]
pub(super) struct ZoneLedger {
    /// Per template: its nodes per zone, existing (not removed by the simulation, not
    /// deleting) and planned.
    nodes: Vec<BTreeMap<String, usize>>,
    /// Per (EC2NodeClass, zone): the free addresses left, after the nodes planned there.
    addresses: BTreeMap<(String, String), i64>,
}

/// Why a zone cannot take a new node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct AddressShortfall {
    /// Free addresses left in the zone's subnet with the most.
    pub(super) available: i64,
    /// What the node and its pods need.
    pub(super) needed: i64,
}

impl ZoneLedger {
    /// The ledger of `templates` over the snapshot's nodes, less the `removed` ones.
    pub(super) fn new(
        snapshot: &Snapshot,
        templates: &IdVec<TemplateId, Template>,
        removed: Option<&BTreeSet<String>>,
    ) -> Self {
        let index: BTreeMap<&str, usize> = templates
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let mut nodes = vec![BTreeMap::new(); templates.len()];
        for n in &snapshot.nodes {
            let Ok(node) = Node::from_k8s(n) else { continue };
            if node.terminating || removed.is_some_and(|r| r.contains(&node.name)) {
                continue;
            }
            let (Some(pool), Some(zone)) = (node.labels.get(wk::NODEPOOL), node.labels.get(wk::ZONE)) else {
                continue;
            };
            if let Some(&i) = index.get(pool.as_str()) {
                *nodes[i].entry(zone.clone()).or_insert(0) += 1;
            }
        }
        let addresses = snapshot
            .free_ips
            .iter()
            .flat_map(|(class, zones)| {
                zones
                    .iter()
                    .map(move |(zone, &n)| ((class.clone(), zone.clone()), i64::from(n)))
            })
            .collect();
        ZoneLedger { nodes, addresses }
    }

    /// Template `ti`'s nodes in `zone`.
    pub(super) fn pool_nodes(&self, ti: TemplateId, zone: &str) -> usize {
        self.nodes
            .get(ti.index())
            .and_then(|z| z.get(zone))
            .copied()
            .unwrap_or(0)
    }

    /// Whether class `class` has room in `zone` for a node with `pods` pods: `Err` with the
    /// figures when not. A zone whose addresses were not reported has room.
    pub(super) fn room(&self, class: &str, zone: &str, pods: usize) -> Result<(), AddressShortfall> {
        let needed = 1 + i64::try_from(pods.max(1)).unwrap_or(i64::MAX);
        match self.addresses.get(&(class.to_string(), zone.to_string())) {
            Some(&available) if available < needed => Err(AddressShortfall { available, needed }),
            _ => Ok(()),
        }
    }

    /// Records a node of template `ti` (class `class`) opened in `zone` with `pods` pods.
    pub(super) fn open(&mut self, ti: TemplateId, class: &str, zone: &str, pods: usize) {
        if let Some(z) = self.nodes.get_mut(ti.index()) {
            *z.entry(zone.to_string()).or_insert(0) += 1;
        }
        if let Some(a) = self.addresses.get_mut(&(class.to_string(), zone.to_string())) {
            *a -= 1 + i64::try_from(pods.max(1)).unwrap_or(i64::MAX);
        }
    }

    /// Undoes [`ZoneLedger::open`].
    pub(super) fn close(&mut self, ti: TemplateId, class: &str, zone: &str, pods: usize) {
        if let Some(n) = self.nodes.get_mut(ti.index()).and_then(|z| z.get_mut(zone)) {
            *n = n.saturating_sub(1);
        }
        if let Some(a) = self.addresses.get_mut(&(class.to_string(), zone.to_string())) {
            *a += 1 + i64::try_from(pods.max(1)).unwrap_or(i64::MAX);
        }
    }
}

/// A zone choice: its place in the price order, its price and the pool's nodes there.
#[derive(Clone, Copy, Debug)]
pub(super) struct Choice {
    /// Its position in the choices sorted by spreads, then price.
    pub(super) rank: usize,
    /// Whether it is as good as the first for the pod's hard spreads.
    pub(super) same_spread: bool,
    /// The cheapest price of its types.
    pub(super) price: f64,
    /// The pool's nodes in its zone.
    pub(super) pool_nodes: usize,
}

/// The choice a balanced pool takes among `choices` (sorted, the first the cheapest at the
/// best spread count): the one with the fewest pool nodes among those as good for the
/// spreads and priced within `tolerance` (a fraction) of the first; at equal counts, the
/// earlier. `None` when there is no choice.
pub(super) fn balanced(choices: &[Choice], tolerance: f64) -> Option<usize> {
    let first = choices.first()?;
    let ceiling = first.price * (1.0 + tolerance) + 1e-12;
    choices
        .iter()
        .filter(|c| c.same_spread && c.price <= ceiling)
        .min_by(|a, b| a.pool_nodes.cmp(&b.pool_nodes).then(a.rank.cmp(&b.rank)))
        .map(|c| c.rank)
}

/// The pods a node opened for `quota` holds: the packing target's pods.
pub(super) fn planned_pods(quota: impl Iterator<Item = u32>) -> usize {
    quota.map(|q| q as usize).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(rank: usize, price: f64, pool_nodes: usize) -> Choice {
        Choice {
            rank,
            same_spread: true,
            price,
            pool_nodes,
        }
    }

    #[test]
    fn a_balanced_pool_takes_the_zone_with_fewest_nodes_within_the_tolerance() {
        let choices = [choice(0, 1.00, 3), choice(1, 1.05, 1), choice(2, 1.20, 0)];
        assert_eq!(balanced(&choices, 0.10), Some(1));
        assert_eq!(balanced(&choices, 0.25), Some(2));
        assert_eq!(balanced(&choices, 0.0), Some(0));
    }

    #[test]
    fn at_equal_counts_the_cheaper_zone_wins_and_spreads_come_first() {
        let choices = [
            choice(0, 1.00, 2),
            choice(1, 1.00, 2),
            Choice {
                same_spread: false,
                ..choice(2, 1.00, 0)
            },
        ];
        assert_eq!(balanced(&choices, 0.5), Some(0));
    }
}
