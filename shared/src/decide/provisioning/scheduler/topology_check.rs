//! A pod's topology constraints against a node, at a relaxation level (Karpenter's
//! `topology.go`): spreads and pod (anti-)affinity, through [`crate::decide::provisioning::topology`],
//! and the hard spreads of the classes that count the pod.

use std::collections::BTreeMap;

use crate::decide::provisioning::scheduler::Scheduler;
use crate::decide::provisioning::scheduler::class::SpreadOwner;
use crate::decide::provisioning::scheduler::index::{ClassId, NewNodeId, PodId, Types};
use crate::decide::provisioning::scheduler::labels::Split;
use crate::decide::provisioning::topology::{Domains, Topology};
use crate::decide::provisioning::unschedulable::Rejection;
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

    /// The zones of the planned nodes that spread group `g` counts: every planned node's
    /// when it counts every node, else those its node affinity admits (kube-scheduler's
    /// podtopologyspread `matchNodeInclusionPolicies`).
    fn planned_zones_of(&self, g: Option<usize>, counts_every_node: bool) -> impl Iterator<Item = &String> {
        let all = counts_every_node.then(|| self.planned_zones()).into_iter().flatten();
        let counted = g
            .filter(|_| !counts_every_node)
            .and_then(|g| self.counted_zones.get(&g))
            .into_iter()
            .flatten();
        all.chain(counted)
    }

    /// Records the zone of planned node `n`, just opened, for the hard zonal spreads that
    /// narrow their nodes by node affinity and count it.
    pub(super) fn record_counted_zone(&mut self, n: NewNodeId) {
        let node = &self.new_nodes[n];
        let t = &self.templates[node.template];
        let split = Split {
            node: &node.labels,
            instance: &t.ty(node.target).labels,
            custom: &node.custom,
        };
        let counting: Vec<usize> = self
            .zonal_owners
            .iter()
            .filter(|(g, owners)| owners.iter().any(|o| !o.counts_every_node) && self.topology.counts_on(*g, &split))
            .map(|(g, _)| *g)
            .collect();
        let zone = node.zone.clone();
        for g in counting {
            self.counted_zones.entry(g).or_default().insert(zone.clone());
        }
    }

    /// The pod's spread domains with the zones of the planned nodes its zonal spreads
    /// count added, when that adds any; `None` when the class's own do.
    fn with_planned_zones(&self, pod: PodId) -> Option<Vec<Option<Vec<String>>>> {
        let c = &self.classes[self.class_of[pod]];
        let p = &self.pods[pod];
        let planned = |i: usize| {
            let s = &p.spreads[i];
            let g = Topology::spread_group(&c.groups, i).filter(|_| s.key == wk::ZONE);
            self.planned_zones_of(g, s.key == wk::ZONE && s.inclusion.affinity.is_none())
        };
        let adds = |i: usize| {
            c.spread_domains[i]
                .as_ref()
                .is_some_and(|ds| planned(i).any(|z| !ds.contains(z)))
        };
        if !(0..p.spreads.len()).any(adds) {
            return None;
        }
        Some(
            (0..p.spreads.len())
                .map(|i| {
                    let mut d = c.spread_domains[i].clone();
                    if let Some(ds) = d.as_mut() {
                        for z in planned(i) {
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

    /// Whether opening a node in `node`'s zone for `pod` would take a hard zonal spread
    /// past maxSkew for a pod of it placed earlier. kube-scheduler's podtopologyspread
    /// `calPreFilterState` counts every node that passes the spread's inclusion policies,
    /// whoever it was launched for, with its matching pods (0 when none), and `Filter`
    /// takes the global minimum over them: a zone that none of the spread's domains has
    /// yet is a new domain holding only this pod if it matches, which can lower the
    /// minimum under which the owner's placed pods were admitted (their later pods see
    /// the zone through [`Self::with_planned_zones`]).
    pub(super) fn lowers_a_placed_spread(&self, pod: PodId, node: &impl Domains) -> bool {
        let Some(zone) = node.domain(wk::ZONE) else {
            return false;
        };
        let class = &self.classes[self.class_of[pod]];
        self.zonal_owners.iter().any(|(g, owners)| {
            if !self.topology.counts_on(*g, node) {
                return false;
            }
            let counted = class.counted_in_spreads.iter().any(|(cg, _, _)| cg == g);
            let in_new = self.topology.count_of(*g, zone) + i32::from(counted);
            owners.iter().any(|owner| {
                let Some(own) = &owner.domains else {
                    return false;
                };
                // The owner's domains and the planned zones it counts, without building
                // the union (this runs for every offer of every node opened).
                let planned = || {
                    self.planned_zones_of(Some(*g), owner.counts_every_node)
                        .filter(|z| !own.contains(z))
                };
                if own.iter().any(|z| z == zone) || planned().any(|z| z == zone) {
                    return false;
                }
                let min_over = |n: usize, m: Option<i32>| {
                    if (n as i32) < owner.min_domains.unwrap_or(1) {
                        0
                    } else {
                        m.unwrap_or(0)
                    }
                };
                let mut domains = own.len();
                let mut least = own.iter().map(|z| self.topology.count_of(*g, z)).min();
                for z in planned() {
                    domains += 1;
                    let c = self.topology.count_of(*g, z);
                    least = Some(least.map_or(c, |l| l.min(c)));
                }
                let before = min_over(domains, least);
                let after = min_over(domains + 1, Some(least.map_or(in_new, |l| l.min(in_new))));
                after < before
                    && self
                        .placed_zones(owner.class)
                        .any(|d| self.topology.count_of(*g, d) - after > owner.max_skew)
            })
        })
    }

    /// The zones of the nodes the plan has placed pods of `class` on.
    fn placed_zones(&self, class: ClassId) -> impl Iterator<Item = &str> {
        let planned = self
            .new_nodes
            .iter()
            .filter(move |n| n.class_count.get(&class).is_some_and(|&c| c > 0))
            .map(|n| n.zone.as_str());
        let existing = self
            .existing
            .iter()
            .filter(move |n| n.placed.iter().any(|&p| self.class_of[p] == class))
            .filter_map(|n| n.labels.get(wk::ZONE).map(String::as_str));
        planned.chain(existing)
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
                if key == wk::ZONE {
                    for z in self.planned_zones_of(Some(g), owner.counts_every_node) {
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
