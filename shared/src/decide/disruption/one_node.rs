//! A replacement planned as one node: when the cheapest packing of the moving pods needs
//! more new nodes than a method allows (one), they are planned again on one node before the
//! method gives up.
//!
//! Karpenter's scheduler grows one NodeClaim while any type still holds its pods, so a
//! consolidation's simulation gives one replacement whenever one type holds them all, and
//! Karpenter takes it if it is cheaper (`computeConsolidation` in
//! `pkg/controllers/disruption/consolidation.go`). Carpool's packer instead picks the
//! cheapest set of nodes ([`crate::decide::provisioning::packer`]): three small nodes may
//! cost less than the one large node that holds the same pods, and still the one node may
//! cost less than the candidate. So, when the simulation plans too many nodes, every
//! NodePool is narrowed to the instance types that hold, less their DaemonSets, everything
//! the new nodes were planned for (the pools' own requirements still apply), and the
//! simulation runs again: the packer, every type of which holds all the pods, opens one
//! node, and finishes it with the cheapest type that holds them. The simulation checks the
//! result as it checks any; a method compares its price as it compares any
//! ([`super::savings`]), and single-node consolidation lets [`super::split`] compete with
//! it on price.

use std::collections::BTreeSet;

use crate::catalog::RegionCatalog;
use crate::decide::provisioning::daemonsets::DaemonSetInfo;
use crate::decide::provisioning::templates;
use crate::model::well_known as wk;
use crate::model::{NodePool, NodeSelectorRequirement, Operator, Resources};
use crate::snapshot::Snapshot;

/// The types of `pools` that hold `requests` on one node, with the DaemonSets that would
/// land on it, by name.
pub fn holding_types(
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    pools: &[NodePool],
    requests: &Resources,
) -> BTreeSet<String> {
    if pools.is_empty() {
        return BTreeSet::new();
    }
    let daemonsets: Vec<DaemonSetInfo> = snapshot
        .daemonsets
        .iter()
        .filter_map(|d| DaemonSetInfo::from_k8s(d).ok())
        .collect();
    let (templates, _) = templates::build(pools, &snapshot.nodeclasses, region, &daemonsets, &snapshot.nodes);
    templates
        .iter()
        .flat_map(|t| t.types.iter())
        .filter(|o| requests.fits_in(&o.net).is_ok())
        .map(|o| o.instance_type.name.clone())
        .collect()
}

/// `pools`, each narrowed to the types that hold `requests` on one node; `None` when no
/// type does.
pub fn pools(
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    pools: &[NodePool],
    requests: &Resources,
) -> Option<Vec<NodePool>> {
    let names = holding_types(snapshot, region, pools, requests);
    if names.is_empty() {
        return None;
    }
    let mut out = pools.to_vec();
    for p in &mut out {
        p.spec.template.spec.requirements.push(NodeSelectorRequirement {
            key: wk::INSTANCE_TYPE.into(),
            operator: Operator::In,
            values: names.iter().cloned().collect(),
            min_values: None,
        });
    }
    Some(out)
}
