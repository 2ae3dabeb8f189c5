//! Opening a new node for a pod that no existing or planned node takes (Karpenter's
//! `Scheduler.addToNewNodeClaim`): from the heaviest NodePool that can take it, in the zone
//! and capacity type that keep its spreads balanced, capacity already paid for first (a
//! capacity reservation's, then a Savings Plan commitment's room), then at the lowest price
//! (at equal price, those its preferred node affinity favours), filled towards the type
//! [`crate::decide::provisioning::scheduler::target`] chooses. The node, once opened, takes
//! the pod as any planned node does ([`crate::decide::provisioning::scheduler::new_node`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use crate::decide::provisioning::scheduler::Scheduler;
use crate::decide::provisioning::scheduler::custom_keys::narrowed;
use crate::decide::provisioning::scheduler::demand::Demand;
use crate::decide::provisioning::scheduler::index::{NewNodeId, OfferKeyId, PodId, TemplateId, TypeId, Types};
use crate::decide::provisioning::scheduler::new_node::NewNode;
use crate::decide::provisioning::scheduler::pod_at::PodAt;
use crate::decide::provisioning::scheduler::preference::preference_weight_at;
use crate::decide::provisioning::scheduler::split::Split;
use crate::decide::provisioning::scheduler::target::Target;
use crate::decide::provisioning::scheduler::why::Why;
use crate::decide::provisioning::scheduler::with_host::WithHost;
use crate::decide::provisioning::scheduler::zone_ledger::{AddressShortfall, Choice, balanced, planned_pods};
use crate::decide::provisioning::topology::Domains;
use crate::decide::provisioning::unschedulable::{Reason, Rejection, Shortfall};
use crate::model::well_known as wk;
use crate::model::{CapacityType, Requirement, Requirements, Resources};

impl Scheduler {
    /// Opens a node for a pod from the first template (heaviest NodePool first) that can
    /// take it at level `li`; each template that cannot adds its reason to `why`.
    pub(super) fn open_node(&mut self, pod: PodId, li: usize, why: &mut Why) -> bool {
        let class = self.class_of[pod];
        'pools: for ti in self.pools.ids() {
            let c = &self.classes[class];
            let cached = self.pools[ti].candidates_for(class, li, c, &self.pods[c.rep]);
            let by_offer = match cached.as_ref() {
                Ok(c) => c,
                Err(reason) => {
                    why.add(reason.clone());
                    continue;
                }
            };
            // Pick zone and capacity type: balanced spreads first, then price.
            let hostname = format!("carpool-planned-{}", self.new_nodes.len());
            let custom = self.custom_domains(pod, li, ti);
            let at = PodAt::new(pod, li, &self.pods, &self.class_of, &self.classes);
            let check = self.topology_check();
            let pool = &self.pools[ti];
            let node_class = pool.template.labels.get(wk::EC2NODECLASS).cloned().unwrap_or_default();
            let mut choices: Vec<(i64, f64, i64, usize, OfferKeyId)> = Vec::new();
            let mut narrowed: BTreeMap<OfferKeyId, Vec<TypeId>> = BTreeMap::new();
            let mut topo_err = None;
            let mut short: Vec<(String, AddressShortfall)> = Vec::new();
            // Per offer key whose room in a Savings Plan commitment pays for a node: the
            // types it pays for.
            let mut prepaid: BTreeMap<OfferKeyId, Vec<TypeId>> = BTreeMap::new();
            for (&k, all_types) in by_offer {
                // A reserved key only while its reservations have room, for the types that do.
                let Some(room) = self.with_reserved_room(ti, k, all_types) else {
                    continue;
                };
                let all_types: &[TypeId] = &room;
                let key = &pool.offer_keys[k];
                let t = &pool.template;
                let by_topology = self.topology_types(&at, ti, k, all_types, &hostname, &custom);
                let types = by_topology.as_deref().unwrap_or(all_types);
                // When the topology accepts no type, the cheapest one's rejection says why.
                let Some(&first) = types.first().or(all_types.first()) else {
                    continue;
                };
                let split = WithHost {
                    hostname: &hostname,
                    labels: Split {
                        node: &key.labels,
                        instance: &t.ty(first).labels,
                        custom: &custom,
                    },
                };
                if let Err(e) = check.check(&at, &split) {
                    topo_err = Some(e);
                    continue;
                }
                // A zone that would take a spread placed earlier past its maxSkew breaks
                // the final state for that spread's placed pods: never (kube-scheduler's
                // podtopologyspread `Filter` counts the node once it exists).
                if check.lowers_a_placed_spread(&at, &split) {
                    topo_err = Some(Rejection::Spread(wk::ZONE.to_string()));
                    continue;
                }
                // A zone whose subnets have no address left for a node and this pod.
                if let Err(s) = self.zones.room(&node_class, &key.zone, 1) {
                    short.push((key.zone.clone(), s));
                    continue;
                }
                let groups = &at.class.groups;
                let spread_count: i64 = at
                    .pod
                    .spreads
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.key == wk::ZONE || s.key == wk::CAPACITY_TYPE)
                    .map(|(i, s)| {
                        i64::from(
                            self.topology
                                .spread_count_of(groups, i, split.domain(&s.key).unwrap_or_default()),
                        )
                    })
                    .sum();
                let price = types
                    .iter()
                    .filter_map(|&i| key.prices[i])
                    .fold(f64::INFINITY, f64::min);
                // A commitment with room makes the node free: filled first, after the
                // reservations (paid for too, and of no use to anything else).
                if !self.prepaid.is_empty() {
                    let paid: Vec<TypeId> = types
                        .iter()
                        .copied()
                        .filter(|&i| {
                            key.prices[i].is_some_and(|p| {
                                let name = &t.ty(i).instance_type.name;
                                self.prepaid.payer(name, &key.zone, key.capacity_type, p).is_some()
                            })
                        })
                        .collect();
                    if !paid.is_empty() {
                        prepaid.insert(k, paid);
                    }
                }
                // Capacity already paid for comes first, whatever the price: a
                // reservation's, then a Savings Plan commitment's room; the rest by price.
                let tier = if key.capacity_type == CapacityType::Reserved {
                    0
                } else if prepaid.contains_key(&k) {
                    1
                } else {
                    2
                };
                let in_zone = self.zone_nodes.get(&key.zone).map_or(0, Vec::len);
                // At the same price, the zone and capacity type the pod prefers.
                let preferred = -preference_weight_at(key, t, at.pod, types, price);
                // Spreads first, then the tier: one key orders both.
                choices.push((spread_count * 4 + tier, price, preferred, in_zone, k));
                if let Some(list) = by_topology {
                    narrowed.insert(k, list);
                } else if let Cow::Owned(list) = room {
                    narrowed.insert(k, list);
                }
            }
            choices.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(a.1.total_cmp(&b.1))
                    .then(a.2.cmp(&b.2))
                    .then(a.3.cmp(&b.3))
                    .then(a.4.cmp(&b.4))
            });
            let nodepool = self.pools[ti].template.name.clone();
            loop {
                let Some(pick) = self.zone_pick(ti, &choices) else {
                    if let Some(rejection) = topo_err {
                        why.add(Reason::Topology { rejection });
                    }
                    for (zone, s) in short {
                        why.add(Reason::Resources {
                            nodepool: nodepool.clone(),
                            shortfall: Shortfall::SubnetAddresses {
                                zone: zone.clone(),
                                available: s.available,
                                needed: s.needed,
                            },
                        });
                        self.plan.pass_over_zone(&nodepool, &zone, s.available, s.needed);
                    }
                    continue 'pools;
                };
                let k = choices[pick].4;
                let (types, cacheable) = match prepaid.get(&k).or(narrowed.get(&k)) {
                    Some(types) => (types.clone(), false),
                    None => (by_offer[&k].clone(), true),
                };
                let demand = Demand {
                    pods: &self.pods,
                    classes: &self.classes,
                    progress: &self.progress,
                };
                let Some(target) = Target::choose(&mut self.pools[ti], &demand, class, li, k, &types, cacheable) else {
                    why.add(self.pools[ti].no_target_reason(&types));
                    continue 'pools;
                };
                let zone = self.pools[ti].offer_keys[k].zone.clone();
                let pods = planned_pods(target.quota.values().copied());
                if let Err(s) = self.zones.room(&node_class, &zone, pods) {
                    // The packing's node needs more addresses than the zone has left:
                    // the next zone, as a capacity error would send it.
                    short.push((zone, s));
                    choices.remove(pick);
                    continue;
                }
                for (zone, s) in &short {
                    self.plan.pass_over_zone(&nodepool, zone, s.available, s.needed);
                }
                let payer = prepaid.contains_key(&k).then(|| {
                    let key = &self.pools[ti].offer_keys[k];
                    let price = key.prices[target.ty].unwrap_or_default();
                    let name = &self.pools[ti].template.ty(target.ty).instance_type.name;
                    (self.prepaid.payer(name, &key.zone, key.capacity_type, price), price)
                });
                if self.open_with(pod, li, ti, k, hostname, custom, target, &node_class, pods) {
                    if let Some((Some(i), price)) = payer {
                        self.prepaid.take(i, price);
                    }
                    return true;
                }
                why.add(Reason::Resources {
                    nodepool,
                    shortfall: Shortfall::NotPlaced,
                });
                continue 'pools;
            }
        }
        false
    }

    /// Which of `choices` (sorted) a new node of template `ti` takes: the first, or for a
    /// NodePool with zone balance the zone where it has the fewest nodes among those
    /// priced within its tolerance ([`balanced`]).
    fn zone_pick(&self, ti: TemplateId, choices: &[(i64, f64, i64, usize, OfferKeyId)]) -> Option<usize> {
        let first = choices.first()?;
        let pool = &self.pools[ti];
        let Some(tolerance) = pool.template.zone_balance else {
            return Some(0);
        };
        let ranked: Vec<Choice> = choices
            .iter()
            .enumerate()
            .map(|(rank, c)| Choice {
                rank,
                same_spread: c.0 == first.0,
                price: c.1,
                pool_nodes: self.zones.pool_nodes(ti, &pool.offer_keys[c.4].zone),
            })
            .collect();
        balanced(&ranked, tolerance)
    }

    /// Opens node `n` of template `ti` in offer key `k` for `pod` with `target`, and places
    /// the pod on it; undone (and `false`) when the node does not take the pod.
    #[allow(clippy::too_many_arguments)]
    fn open_with(
        &mut self,
        pod: PodId,
        li: usize,
        ti: TemplateId,
        k: OfferKeyId,
        hostname: String,
        custom: Requirements,
        target: Target,
        node_class: &str,
        pods: usize,
    ) -> bool {
        let pool = &self.pools[ti];
        let key = &pool.offer_keys[k];
        let capacity = pool.template.ty(target.ty).instance_type.capacity.clone();
        let n = self.new_nodes.next_id();
        for (&c, &q) in &target.quota {
            if q > 0 {
                self.progress[c].reserved += q;
                self.progress[c].quota_nodes.push(n);
            }
        }
        let reserved = target.quota.iter().fold(Resources::default(), |acc, (c, q)| {
            let mut acc = acc;
            for _ in 0..*q {
                acc = acc.plus(&self.classes[*c].requests);
            }
            acc
        });
        self.zone_nodes.entry(key.zone.clone()).or_default().push(n);
        self.zones.open(ti, node_class, &key.zone, pods);
        self.new_nodes
            .push(NewNode::new(ti, key, hostname, custom, target, &reserved));
        self.take_reservation(n);
        if self.try_new_node(pod, n, li).is_ok() {
            self.pools[ti].planned.open(&capacity);
            self.record_counted_zone(n);
            return true;
        }
        if let Some(node) = self.new_nodes.pop() {
            if let Some(r) = &node.reservation {
                self.reserved_room.give_back(r);
            }
            if let Some(list) = self.zone_nodes.get_mut(&node.zone) {
                list.retain(|&x| x != n);
            }
            self.zones.close(ti, node_class, &node.zone, pods);
            for (c, q) in node.quota {
                let state = &mut self.progress[c];
                state.reserved = state.reserved.saturating_sub(q);
                state.quota_nodes.retain(|&x| x != n);
            }
        }
        false
    }

    /// The custom-key requirements a new node of template `ti` opens with for `pod`: each
    /// custom key the pod spreads on (at this level) is fixed to one value, the allowed one
    /// with the fewest matching pods, so that the node is in one domain of the spread
    /// (Karpenter's `TopologyGroup.nextDomainTopologySpread` narrows the NodeClaim to the
    /// domain with the minimum count). Then each other custom key that a spread's node
    /// inclusion reads is fixed to a value the pod allows (see [`pin_inclusion_keys`]).
    fn custom_domains(&self, pod: PodId, li: usize, ti: TemplateId) -> Requirements {
        let t = &self.pools[ti].template;
        let mut custom = t.custom.clone();
        let p = &self.pods[pod];
        let class = &self.classes[self.class_of[pod]];
        let strict = class.levels[li].strict;
        for (i, s) in p.spreads.iter().enumerate() {
            if !(s.hard || strict.soft_spreads) {
                continue;
            }
            let Some(r) = custom.get(&s.key) else { continue };
            if r.is_complement() || r.values().len() < 2 {
                continue;
            }
            let best = r
                .values()
                .iter()
                .filter(|v| {
                    class.branches[li]
                        .iter()
                        .any(|b| b.get(&s.key).is_none_or(|q| q.has(v)))
                })
                .min_by_key(|v| self.topology.spread_count_of(&class.groups, i, v))
                .cloned();
            if let Some(v) = best {
                custom.add(Requirement::in_values(&s.key, [v]));
            }
        }
        pin_inclusion_keys(&mut custom, &self.inclusion_keys, &class.branches[li]);
        custom
    }

    /// The types of offer key `k` of template `ti` whose labels the pod's topology
    /// constraints accept on a new node, when some constraint, or a spread's node
    /// inclusion, reads a key the instance type decides (kube-scheduler checks a node's own
    /// labels; Karpenter narrows the NodeClaim's requirements to the domains its topology
    /// allows): anti-affinity to pods on arm64 nodes opens an amd64 node, and a pod counted
    /// by a spread of amd64 pods that one more there would unbalance opens an arm64 node.
    /// `None` when no such key is in play (any type will do; the first is checked).
    fn topology_types(
        &self,
        at: &PodAt<'_>,
        ti: TemplateId,
        k: OfferKeyId,
        types: &[TypeId],
        hostname: &str,
        custom: &Requirements,
    ) -> Option<Vec<TypeId>> {
        if self.type_keys.is_empty() {
            return None;
        }
        let pool = &self.pools[ti];
        let key = &pool.offer_keys[k];
        let t = &pool.template;
        let check = self.topology_check();
        Some(
            types
                .iter()
                .copied()
                .filter(|&i| {
                    let split = WithHost {
                        hostname,
                        labels: Split {
                            node: &key.labels,
                            instance: &t.ty(i).labels,
                            custom,
                        },
                    };
                    check.check(at, &split).is_ok()
                })
                .collect(),
        )
    }

    /// Records the zone of planned node `n`, just opened, for the hard zonal spreads that
    /// narrow their nodes by node affinity and count it
    /// ([`crate::decide::provisioning::scheduler::topology_check::TopologyCheck::counting_zonal_groups`]).
    fn record_counted_zone(&mut self, n: NewNodeId) {
        let node = &self.new_nodes[n];
        let t = &self.pools[node.template].template;
        let split = Split {
            node: &node.labels,
            instance: &t.ty(node.target).labels,
            custom: &node.custom,
        };
        let counting = self.topology_check().counting_zonal_groups(&split);
        let zone = node.zone.clone();
        for g in counting {
            self.counted_zones.entry(g).or_default().insert(zone.clone());
        }
    }
}

/// Fixes each custom key in `keys` that `custom` leaves open to one value, the first that
/// one of the pod's requirement branches allows, as the node will be labelled
/// ([`crate::decide::provisioning::scheduler::custom_keys::custom_labels`]). A spread's node
/// inclusion (kube-scheduler's podtopologyspread `matchNodeInclusionPolicies`,
/// `nodeAffinityPolicy: Honor`) reads the node's label: while the value is open, the
/// planned node could be counted by a spread of pods selecting `b` and then be labelled
/// `a`, which kube-scheduler would not count.
fn pin_inclusion_keys(custom: &mut Requirements, keys: &BTreeSet<String>, branches: &[Requirements]) {
    for key in keys {
        let Some(r) = custom.get(key) else { continue };
        if !r.is_complement() && r.values().len() < 2 {
            continue;
        }
        let value = branches.iter().find_map(|b| match b.get(key) {
            Some(p) => narrowed(r, p)?.any_value(),
            None => r.any_value(),
        });
        if let Some(v) = value {
            custom.add(Requirement::in_values(key, [v]));
        }
    }
}
