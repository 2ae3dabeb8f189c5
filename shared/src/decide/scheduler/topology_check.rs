//! A pod's topology constraints against a node, at a relaxation level (Karpenter's
//! `topology.go`): spreads and pod (anti-)affinity, through [`crate::decide::topology`],
//! and the hard spreads of the classes that count the pod.

use std::collections::BTreeMap;

use super::Scheduler;
use super::class::SpreadOwner;
use super::index::{ClassId, PodId};
use crate::decide::topology::{Domains, Rejection};
use crate::model::well_known as wk;

impl Scheduler {
    /// Whether the pod's topology constraints at level `li` accept `node`.
    pub(super) fn check_topology(&self, pod: PodId, li: usize, node: &impl Domains) -> Result<(), Rejection> {
        let class = self.class_of[pod];
        let c = &self.classes[class];
        let level = c.levels[li];
        let with_planned = self.with_planned_zones(pod);
        let domains = with_planned.as_deref().unwrap_or(&c.spread_domains);
        self.topology
            .check(&self.pods[pod], &c.groups, node, level.strict, domains)?;
        match self.unbalanced_owner(class, node) {
            None => Ok(()),
            Some(key) => Err(Rejection::Spread(key.to_string())),
        }
    }

    /// The zones that planned nodes are in: once launched they are domains of every zonal
    /// spread that does not narrow its nodes by node affinity (kube-scheduler counts the
    /// nodes that exist, not only those the pod could use). Under `nodeTaintsPolicy:
    /// Honor` they are counted too, which can only lower the minimum: stricter, never
    /// wrong.
    fn planned_zones(&self) -> impl Iterator<Item = &String> {
        self.zone_nodes.iter().filter(|(_, n)| !n.is_empty()).map(|(z, _)| z)
    }

    /// The pod's spread domains with the zones of planned nodes added to its zonal spreads
    /// that count every node, when that adds any; `None` when the class's own do.
    fn with_planned_zones(&self, pod: PodId) -> Option<Vec<Option<Vec<String>>>> {
        let c = &self.classes[self.class_of[pod]];
        let p = &self.pods[pod];
        let adds = |i: usize| {
            let s = &p.spreads[i];
            s.key == wk::ZONE
                && s.inclusion.affinity.is_none()
                && c.spread_domains[i]
                    .as_ref()
                    .is_some_and(|ds| self.planned_zones().any(|z| !ds.contains(z)))
        };
        if !(0..p.spreads.len()).any(adds) {
            return None;
        }
        Some(
            (0..p.spreads.len())
                .map(|i| {
                    let mut d = c.spread_domains[i].clone();
                    if adds(i)
                        && let Some(ds) = d.as_mut()
                    {
                        for z in self.planned_zones() {
                            if !ds.contains(z) {
                                ds.push(z.clone());
                            }
                        }
                    }
                    d
                })
                .collect(),
        )
    }

    /// Whether the pod's zonal constraints allow a node in `zone`.
    pub(super) fn zone_allows(&self, pod: PodId, li: usize, zone: &str) -> bool {
        let class = self.class_of[pod];
        let c = &self.classes[class];
        let level = c.levels[li];
        let node = BTreeMap::from([(wk::ZONE.to_string(), zone.to_string())]);
        let with_planned = self.with_planned_zones(pod);
        let domains = with_planned.as_deref().unwrap_or(&c.spread_domains);
        self.topology
            .check_keys(&self.pods[pod], &c.groups, &node, level.strict, domains, |k| {
                k == wk::ZONE
            })
            .is_ok()
            && self.unbalanced_owner(class, &node).is_none()
    }

    /// The key of a hard spread that counts `class` (on any key but the hostname) and that
    /// one more pod of it on `node` would take past maxSkew for a pod that owns it, over
    /// that owner's own domains; `None` when every owner stays balanced. kube-scheduler checks a spread only when placing its owner, in an order
    /// the plan cannot know; this keeps the final state valid for every owner, whatever
    /// the order, even where owners differ in the domains they see.
    fn unbalanced_owner<'a>(&'a self, class: ClassId, node: &impl Domains) -> Option<&'a str> {
        let balanced = |g: usize, key: &str, owners: &[SpreadOwner]| {
            let Some(domain) = node.domain(key) else {
                return true;
            };
            if !self.topology.counts_on(g, node) {
                return true;
            }
            owners.iter().all(|owner| {
                let Some(own) = &owner.domains else {
                    return true;
                };
                let mut eligible = own.clone();
                if key == wk::ZONE && owner.counts_every_node {
                    for z in self.planned_zones() {
                        if !eligible.contains(z) {
                            eligible.push(z.clone());
                        }
                    }
                }
                if !eligible.iter().any(|z| z == domain) {
                    return true;
                }
                let min = if (eligible.len() as i32) < owner.min_domains.unwrap_or(1) {
                    0
                } else {
                    eligible.iter().map(|z| self.topology.count_of(g, z)).min().unwrap_or(0)
                };
                self.topology.count_of(g, domain) + 1 - min <= owner.max_skew
            })
        };
        self.classes[class]
            .counted_in_spreads
            .iter()
            .find(|(g, key, owners)| !balanced(*g, key, owners))
            .map(|(_, key, _)| key.as_str())
    }
}
