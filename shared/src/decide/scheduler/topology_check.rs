//! A pod's topology constraints against a node, at a relaxation level (Karpenter's
//! `topology.go`): spreads and pod (anti-)affinity, through [`crate::decide::topology`],
//! and the hard zonal spreads of the classes that count the pod.

use std::collections::BTreeMap;

use super::Scheduler;
use super::index::{ClassId, PodId};
use crate::decide::topology::{Domains, Rejection};
use crate::model::well_known as wk;

impl Scheduler {
    /// Whether the pod's topology constraints at level `li` accept `node`.
    pub(super) fn check_topology(&self, pod: PodId, li: usize, node: &impl Domains) -> Result<(), Rejection> {
        let class = self.class_of[pod];
        let c = &self.classes[class];
        let level = c.levels[li];
        self.topology
            .check(&self.pods[pod], &c.groups, node, level.strict, &c.spread_domains)?;
        match node.domain(wk::ZONE) {
            Some(zone) if !self.keeps_owners_balanced(class, zone) => Err(Rejection::Spread(wk::ZONE.to_string())),
            _ => Ok(()),
        }
    }

    /// Whether the pod's zonal constraints allow a node in `zone`.
    pub(super) fn zone_allows(&self, pod: PodId, li: usize, zone: &str) -> bool {
        let class = self.class_of[pod];
        let c = &self.classes[class];
        let level = c.levels[li];
        let node = BTreeMap::from([(wk::ZONE.to_string(), zone.to_string())]);
        self.topology
            .check_keys(
                &self.pods[pod],
                &c.groups,
                &node,
                level.strict,
                &c.spread_domains,
                |k| k == wk::ZONE,
            )
            .is_ok()
            && self.keeps_owners_balanced(class, zone)
    }

    /// Whether one more pod of `class` in `zone` keeps every hard zonal spread that counts
    /// it within maxSkew for the pods that own it, over their own eligible zones. The
    /// scheduler checks a spread only when placing its owner; this keeps the final state
    /// valid for owners placed earlier, whose eligible zones may differ from this pod's.
    fn keeps_owners_balanced(&self, class: ClassId, zone: &str) -> bool {
        self.classes[class].counted_in_zone_spreads.iter().all(|(g, owners)| {
            owners.iter().all(|owner| {
                let Some(eligible) = &owner.domains else {
                    return true;
                };
                if !eligible.iter().any(|z| z == zone) {
                    return true;
                }
                let min = if (eligible.len() as i32) < owner.min_domains.unwrap_or(1) {
                    0
                } else {
                    eligible
                        .iter()
                        .map(|z| self.topology.count_of(*g, z))
                        .min()
                        .unwrap_or(0)
                };
                self.topology.count_of(*g, zone) + 1 - min <= owner.max_skew
            })
        })
    }
}
