//! The plan's topology as a node checks a pod against it (Karpenter's `topology.go`,
//! `Topology.AddRequirements`, which `ExistingNode.CanAdd` and `NodeClaim.CanAdd` call):
//! spreads and pod (anti-)affinity, through [`crate::decide::provisioning::topology`], with
//! the zones of the planned nodes, and the hard spreads of the classes that count the pod.
//! The scheduler lends it to each node it tries ([`TopologyCheck`]); the pods it places are
//! recorded by the nodes' `add`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::class_state::ClassState;
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, NewNodeId};
use crate::decide::provisioning::scheduler::pod_at::PodAt;
use crate::decide::provisioning::scheduler::spread_owner::SpreadOwner;
use crate::decide::provisioning::topology::{Domains, Topology};
use crate::decide::provisioning::unschedulable::Rejection;
use crate::model::well_known as wk;

/// What a topology check reads of the run: the pods recorded so far, the planned nodes'
/// zones, and the hard zonal spreads with where their owners' pods went.
pub(super) struct TopologyCheck<'a> {
    /// The pods recorded on every node, existing or planned, by topology group.
    pub(super) topology: &'a Topology,
    /// Planned nodes per zone, in the order they were opened.
    pub(super) zone_nodes: &'a BTreeMap<String, Vec<NewNodeId>>,
    /// Per hard zonal spread group that narrows its nodes by node affinity: the zones of
    /// the planned nodes it counts.
    pub(super) counted_zones: &'a HashMap<usize, BTreeSet<String>>,
    /// The hard zonal spreads, by topology group, with the classes that own them.
    pub(super) zonal_owners: &'a [(usize, Vec<SpreadOwner>)],
    /// Where each class stands (the zones its pods were placed in).
    pub(super) progress: &'a IdVec<ClassId, ClassState>,
}

impl<'a> TopologyCheck<'a> {
    /// Whether the pod's topology constraints at its level accept `node`.
    pub(super) fn check(&self, at: &PodAt<'_>, node: &impl Domains) -> Result<(), Rejection> {
        let c = at.class;
        let level = at.level();
        let with_planned = self.with_planned_zones(at.pod, c);
        let domains = with_planned.as_deref().unwrap_or(&c.spread_domains);
        self.topology.check(at.pod, &c.groups, node, level.strict, domains)?;
        match self.unbalanced_owner(c, node) {
            None => Ok(()),
            Some(key) => Err(Rejection::Spread(key.to_string())),
        }
    }

    /// The zones that planned nodes are in: once launched they are domains of every zonal
    /// spread that does not narrow its nodes by node affinity (kube-scheduler counts the
    /// nodes that exist, not only those the pod could use). Under `nodeTaintsPolicy:
    /// Honor` they are counted too, which can only lower the minimum: stricter, never
    /// wrong.
    fn planned_zones(&self) -> impl Iterator<Item = &'a String> + use<'a> {
        self.zone_nodes.iter().filter(|(_, n)| !n.is_empty()).map(|(z, _)| z)
    }

    /// The zones of the planned nodes that spread group `g` counts: every planned node's
    /// when it counts every node, else those its node affinity admits (kube-scheduler's
    /// podtopologyspread `matchNodeInclusionPolicies`).
    fn planned_zones_of(
        &self,
        g: Option<usize>,
        counts_every_node: bool,
    ) -> impl Iterator<Item = &'a String> + use<'a> {
        let all = counts_every_node.then(|| self.planned_zones()).into_iter().flatten();
        let counted_zones = self.counted_zones;
        let counted = g
            .filter(|_| !counts_every_node)
            .and_then(move |g| counted_zones.get(&g))
            .into_iter()
            .flatten();
        all.chain(counted)
    }

    /// The hard zonal spread groups that narrow their nodes by node affinity and count a
    /// planned node with these labels: the node's zone is to be recorded for them, once
    /// it is opened.
    pub(super) fn counting_zonal_groups(&self, node: &impl Domains) -> Vec<usize> {
        self.zonal_owners
            .iter()
            .filter(|(g, owners)| owners.iter().any(|o| !o.counts_every_node) && self.topology.counts_on(*g, node))
            .map(|(g, _)| *g)
            .collect()
    }

    /// The pod's spread domains with the zones of the planned nodes its zonal spreads
    /// count added, when that adds any; `None` when the class's own do.
    fn with_planned_zones(&self, p: &PodInfo, c: &Class) -> Option<Vec<Option<Vec<String>>>> {
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

    /// Whether opening a node in `node`'s zone for the pod would take a hard zonal spread
    /// past maxSkew for a pod of it placed earlier. kube-scheduler's podtopologyspread
    /// `calPreFilterState` counts every node that passes the spread's inclusion policies,
    /// whoever it was launched for, with its matching pods (0 when none), and `Filter`
    /// takes the global minimum over them: a zone that none of the spread's domains has
    /// yet is a new domain holding only this pod if it matches, which can lower the
    /// minimum under which the owner's placed pods were admitted (their later pods see
    /// the zone through [`Self::with_planned_zones`]).
    pub(super) fn lowers_a_placed_spread(&self, at: &PodAt<'_>, node: &impl Domains) -> bool {
        let Some(zone) = node.domain(wk::ZONE) else {
            return false;
        };
        let class = at.class;
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
    fn placed_zones(&self, class: ClassId) -> impl Iterator<Item = &'a str> + use<'a> {
        self.progress[class].placed_zones.iter().map(String::as_str)
    }

    /// Whether the pod's zonal constraints at its level allow a node in `zone`.
    pub(super) fn zone_allows(&self, at: &PodAt<'_>, zone: &str) -> bool {
        let c = at.class;
        let level = at.level();
        let node = BTreeMap::from([(wk::ZONE.to_string(), zone.to_string())]);
        let with_planned = self.with_planned_zones(at.pod, c);
        let domains = with_planned.as_deref().unwrap_or(&c.spread_domains);
        self.topology
            .check_keys(at.pod, &c.groups, &node, level.strict, domains, |k| k == wk::ZONE)
            .is_ok()
            && self.unbalanced_owner(c, &node).is_none()
    }

    /// The key of a hard spread that counts `class` (on any key but the hostname) and that
    /// one more pod of it on `node` would take past maxSkew for a pod that owns it, over
    /// that owner's own domains; `None` when every owner stays balanced. kube-scheduler
    /// checks a spread only when placing its owner, in an order the plan cannot know; this
    /// keeps the final state valid for every owner, whatever the order, even where owners
    /// differ in the domains they see.
    fn unbalanced_owner<'c>(&self, class: &'c Class, node: &impl Domains) -> Option<&'c str> {
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
        class
            .counted_in_spreads
            .iter()
            .find(|(g, key, owners)| !balanced(*g, key, owners))
            .map(|(_, key, _)| key.as_str())
    }
}
