//! The target type of a node being opened: among the types of one offer key that take the
//! opening pod, the one [`crate::decide::provisioning::packer`] finds most cost-effective for the pods
//! still waiting, with the mix of classes it reserves slots for; and the NodePool limits
//! that bound it.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::decide::provisioning::packer::{self, ClassDemand, ResourcePrices, Supply};
use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::Scheduler;
use crate::decide::provisioning::scheduler::index::{
    ClassId, Id, IdVec, NewNodeId, OfferKeyId, PodId, TemplateId, TypeId, Types,
};
use crate::decide::provisioning::scheduler::labels::{Split, custom_fits, matches_split, narrow};
use crate::decide::provisioning::scheduler::new_node::{NewNode, Target};
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::unschedulable::Reason;
use crate::model::Resources;
use crate::model::well_known as wk;

/// Types worth evaluating, with their prices.
pub(super) type Shortlist = Vec<(TypeId, f64)>;

/// A class at a relaxation level, against one offer key of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct ShortlistKey {
    /// The class.
    pub(super) class: ClassId,
    /// The level (an index into the class's levels).
    pub(super) level: usize,
    /// The template.
    pub(super) template: TemplateId,
    /// The offer key.
    pub(super) offer: OfferKeyId,
}

/// A class at a relaxation level, against one type under one offer key of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct MatchKey {
    /// The class.
    pub(super) class: ClassId,
    /// The level (an index into the class's levels).
    pub(super) level: usize,
    /// The template.
    pub(super) template: TemplateId,
    /// The type.
    pub(super) ty: TypeId,
    /// The offer key.
    pub(super) offer: OfferKeyId,
}

/// Capacity and node count of a template's planned nodes, for its limits.
#[derive(Clone, Debug, Default)]
pub(super) struct Planned {
    /// The capacity of their target types.
    pub(super) capacity: Resources,
    /// How many.
    pub(super) nodes: i64,
}

/// Resource prices per template, from the cover LP of all pending demand.
pub(super) fn resource_prices(
    templates: &IdVec<TemplateId, Template>,
    pods: &IdVec<PodId, PodInfo>,
) -> IdVec<TemplateId, Option<ResourcePrices>> {
    let demand = pods.iter().fold(Resources::default(), |acc, p| acc.plus(&p.requests));
    templates
        .iter()
        .map(|t| {
            let supplies: Vec<Supply> = t
                .types
                .iter()
                .map(|o| Supply {
                    cpu: o.net.cpu_millis as f64,
                    memory: o.net.memory as f64,
                    price: o.min_price(),
                })
                .collect();
            packer::cover_lp(&supplies, demand.cpu_millis as f64, demand.memory as f64).map(|(_, y)| y)
        })
        .collect()
}

/// How many of a class's unreserved pods one node in one zone can expect: all of them,
/// or for a class spread across zones its share of one zone.
pub(super) fn per_zone_share(unreserved: u32, pod: &PodInfo, zones: usize) -> u32 {
    if pod.spreads.iter().any(|s| s.hard && s.key == wk::ZONE) && zones > 1 {
        unreserved.div_ceil(zones as u32)
    } else {
        unreserved
    }
}

impl Scheduler {
    /// Whether the template's limits leave room for one more node of `capacity`.
    pub(super) fn limits_allow(&self, t: TemplateId, capacity: &Resources) -> bool {
        let tmpl = &self.templates[t];
        let planned = &self.planned[t];
        tmpl.limits.iter().all(|(name, limit)| {
            let used = tmpl.used.get(name).copied().unwrap_or(0);
            if name == "nodes" {
                used + planned.nodes < *limit
            } else {
                used + planned.capacity.get(name) + capacity.get(name) <= *limit
            }
        })
    }

    /// Whether a pod of `class`, at the level it has reached, matches type `ty` under
    /// offer key `k`.
    fn class_matches(&mut self, class: ClassId, ti: TemplateId, ty: TypeId, k: OfferKeyId) -> bool {
        let li = self.current_level(class);
        let cache_key = MatchKey {
            class,
            level: li,
            template: ti,
            ty,
            offer: k,
        };
        if let Some(&m) = self.match_cache.get(&cache_key) {
            return m;
        }
        let key = &self.offer_keys[ti][k];
        let o = self.templates[ti].ty(ty);
        let split = Split {
            node: &key.labels,
            instance: &o.labels,
            custom: &self.templates[ti].custom,
        };
        let m = self.classes[class].branches[li]
            .iter()
            .any(|b| matches_split(b, &split));
        self.match_cache.insert(cache_key, m);
        m
    }

    /// The most cost-effective type among `types` for a node opened by `class`, with the
    /// mix of classes it should hold and the capacity it may be filled to (less than the
    /// type's when the NodePool's `minValues` needs smaller types to hold its pods too).
    /// `cacheable`: `types` are all of the offer key's for the class, so their shortlist is
    /// kept for the next node; lists narrowed by topology are not.
    pub(super) fn choose_target(
        &mut self,
        ti: TemplateId,
        types: &[TypeId],
        k: OfferKeyId,
        class: ClassId,
        li: usize,
        cacheable: bool,
    ) -> Option<Target> {
        let prices = self.prices[ti].unwrap_or(ResourcePrices {
            cpu: 1e-5,
            memory: 1e-12,
        });
        let shares: IdVec<ClassId, u32> = self
            .classes
            .enumerate()
            .map(|(c, cl)| {
                let zones = cl.zones.get(self.current_level(c)).map_or(1, Vec::len);
                per_zone_share(self.progress[c].unreserved(), &self.pods[cl.rep], zones)
            })
            .collect();
        let share = |c: ClassId| shares[c];
        let opening = ClassDemand {
            class: class.index(),
            requests: self.classes[class].requests.clone(),
            remaining: share(class).max(1),
            per_node_cap: self.classes[class].per_node_cap,
        };
        let rep = &self.pods[self.classes[class].rep];
        let tmpl = &self.templates[ti];
        // The values the NodePool's custom keys keep once the opening pod is on the node.
        let custom = if tmpl.custom.is_empty() {
            None
        } else {
            self.classes[class].branches[li]
                .iter()
                .find_map(|b| narrow(&tmpl.custom, b))
        };
        // Classes that may share the node: tolerated, no pod affinity, no mutual hostname
        // anti-affinity with the opening class, custom keys that agree with its.
        let others: Vec<ClassId> = self
            .classes
            .ids()
            .filter(|&c| c != class && self.progress[c].unreserved() > 0)
            .filter(|&c| {
                let q = &self.pods[self.classes[c].rep];
                self.nodepool_taint(c, self.current_level(c), ti).is_none()
                    && q.affinity.is_empty()
                    && !q
                        .anti_affinity
                        .iter()
                        .any(|a| a.key == wk::HOSTNAME && a.matches(&rep.namespace, &rep.labels))
                    && !rep
                        .anti_affinity
                        .iter()
                        .any(|a| a.key == wk::HOSTNAME && a.matches(&q.namespace, &q.labels))
                    && custom
                        .as_ref()
                        .is_none_or(|custom| custom_fits(custom, &self.classes[c].branches[self.current_level(c)]))
            })
            .collect();
        let remaining_value: f64 = std::iter::once(class)
            .chain(others.iter().copied())
            .map(|c| prices.value(&self.classes[c].requests) * f64::from(share(c).max(1)))
            .sum();
        // Evaluate the most promising types first; stop once no type can beat the best.
        let shortlist_key = ShortlistKey {
            class,
            level: li,
            template: ti,
            offer: k,
        };
        let shortlist = match self.pareto_cache.get(&shortlist_key).filter(|_| cacheable) {
            Some(list) => Rc::clone(list),
            None if !cacheable => Rc::new(pareto(tmpl, types, &self.offer_keys[ti][k].prices)),
            None => {
                let list = Rc::new(pareto(tmpl, types, &self.offer_keys[ti][k].prices));
                self.pareto_cache.insert(shortlist_key, Rc::clone(&list));
                list
            }
        };
        let tmpl = &self.templates[ti];
        let mut ranked: Vec<(TypeId, f64, f64)> = shortlist
            .iter()
            .map(|&(i, price)| {
                let cap_value = prices.value(&tmpl.ty(i).net).min(remaining_value);
                (i, price, cap_value / price)
            })
            .collect();
        ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.total_cmp(&b.1)));
        let mut best: Option<(f64, f64, i64, Target)> = None;
        let opener = self.classes[class].rep;
        for (i, price, upper) in ranked {
            if let Some((s, _, _, _)) = &best
                && upper < *s * (1.0 - 1e-9)
            {
                break;
            }
            let capacity = self.templates[ti].ty(i).instance_type.capacity.clone();
            if !self.limits_allow(ti, &capacity) {
                continue;
            }
            let matching: Vec<ClassId> = others
                .clone()
                .into_iter()
                .filter(|&c| self.class_matches(c, ti, i, k))
                .collect();
            let demands: Vec<ClassDemand> = matching
                .iter()
                .map(|&c| ClassDemand {
                    class: c.index(),
                    requests: self.classes[c].requests.clone(),
                    remaining: share(c),
                    per_node_cap: self.classes[c].per_node_cap,
                })
                .collect();
            let Some(net) = self.min_values_capacity(ti, types, i, &prices) else {
                continue;
            };
            let Some(pattern) = packer::fill(&net, &opening, &demands, &prices) else {
                continue;
            };
            let score = pattern.value / price;
            // At the same worth and price, the type the opening pod prefers.
            let preferred = self.preference_weight_at(opener, ti, k, &[i], price);
            let better = best.as_ref().is_none_or(|(s, p, w, _)| {
                score > *s * (1.0 + 1e-9)
                    || (score >= *s * (1.0 - 1e-9) && (price < *p || (price <= *p && preferred > *w)))
            });
            if better {
                let quota = pattern
                    .counts
                    .iter()
                    .map(|&(c, n)| (ClassId::from_index(c), n))
                    .collect();
                let target = Target {
                    ty: i,
                    quota,
                    capacity: net,
                };
                best = Some((score, price, preferred, target));
            }
        }
        best.map(|(_, _, _, target)| target)
    }
}

/// The types worth evaluating, cheapest first: a type is dropped when a type of the same
/// family is as cheap or cheaper and holds at least as much (same family: same labels that
/// pods may select on, but size).
fn pareto(t: &Template, types: &[TypeId], prices: &IdVec<TypeId, Option<f64>>) -> Shortlist {
    let mut sorted: Shortlist = types.iter().filter_map(|&i| prices[i].map(|p| (i, p))).collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut kept: Shortlist = Vec::new();
    for (i, p) in sorted {
        let o = t.ty(i);
        let dominated = kept.iter().any(|(k, _)| {
            let other = t.ty(*k);
            other.instance_type.family == o.instance_type.family && o.net.fits_in(&other.net).is_ok()
        });
        if !dominated {
            kept.push((i, p));
        }
    }
    kept
}

/// The smaller amount of each resource.
fn at_most(a: &Resources, b: &Resources) -> Resources {
    a.minus(&a.minus(b).max(&Resources::default()))
}

/// Whether a template's requirements carry a `minValues`.
pub(super) fn has_min_values(t: &Template) -> bool {
    t.requirements.iter().any(|r| r.min_values().is_some())
}

impl Scheduler {
    /// The capacity a node of target type `target` may be filled to while enough of
    /// `types` still hold its pods for the template's `minValues`: for each requirement
    /// with `minValues`, the target and, for each other value it needs, the type of that
    /// value that keeps the most worth; the capacity is what all of them hold. `None` when
    /// `types` have too few values (Karpenter refuses such a NodeClaim: `NodeClaim.Add`,
    /// "min requirement not met").
    fn min_values_capacity(
        &self,
        ti: TemplateId,
        types: &[TypeId],
        target: TypeId,
        prices: &ResourcePrices,
    ) -> Option<Resources> {
        let t = &self.templates[ti];
        let mut cap = t.ty(target).net.clone();
        if !has_min_values(t) {
            return Some(cap);
        }
        let limit_cap = &t.ty(target).instance_type.capacity;
        let within_limits = |i: TypeId| {
            t.limits
                .keys()
                .filter(|k| *k != "nodes")
                .all(|k| t.ty(i).instance_type.capacity.get(k) <= limit_cap.get(k))
        };
        for r in t.requirements.iter() {
            let Some(min) = r.min_values() else { continue };
            let value_of = |i: TypeId| t.ty(i).labels.get(r.key()).filter(|v| r.has(v));
            let own = value_of(target);
            // Per other value, the type that keeps the most of the capacity.
            let mut best: HashMap<&String, (f64, TypeId)> = HashMap::new();
            for &i in types.iter().filter(|&&i| within_limits(i)) {
                let Some(v) = value_of(i) else { continue };
                if Some(v) == own {
                    continue;
                }
                let worth = prices.value(&at_most(&cap, &t.ty(i).net));
                let e = best.entry(v).or_insert((worth, i));
                if worth > e.0 {
                    *e = (worth, i);
                }
            }
            let needed = (min as usize).saturating_sub(usize::from(own.is_some()));
            if best.len() < needed {
                return None;
            }
            let mut ranked: Vec<(f64, TypeId)> = best.into_values().collect();
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for (_, i) in ranked.into_iter().take(needed) {
                cap = at_most(&cap, &t.ty(i).net);
            }
        }
        Some(cap)
    }

    /// Whether planned node `n`, with `extra` more requested and its candidate types
    /// narrowed to `candidates` (or as they are), still has enough types that hold its
    /// pods for the template's `minValues` (Karpenter's `NodeClaim.Add` filters the
    /// instance types by requirements and requests, then refuses the pod when fewer than
    /// `minValues` values remain).
    pub(super) fn keeps_min_values(&self, n: NewNodeId, candidates: Option<&[TypeId]>, extra: &Resources) -> bool {
        let node = &self.new_nodes[n];
        let t = &self.templates[node.template];
        if !has_min_values(t) {
            return true;
        }
        let used = node.used.plus(extra);
        let holding: Vec<&BTreeMap<String, String>> = self
            .holding_types(node, candidates.unwrap_or(&node.candidates), &used)
            .map(|i| &t.ty(i).labels)
            .collect();
        t.requirements.check_min_values(holding.iter().copied()).is_ok()
    }

    /// Of `candidates`, the types that hold `used` on planned node `node` and, under
    /// NodePool limits, exceed in no limited resource the capacity of the type the
    /// limits were checked against when the node was opened.
    pub(super) fn holding_types<'a>(
        &'a self,
        node: &'a NewNode,
        candidates: &'a [TypeId],
        used: &'a Resources,
    ) -> impl Iterator<Item = TypeId> + 'a {
        let t = &self.templates[node.template];
        let target = &t.ty(node.target).instance_type.capacity;
        candidates.iter().copied().filter(move |&i| {
            used.fits_in(&t.ty(i).net).is_ok()
                && t.limits
                    .keys()
                    .filter(|k| *k != "nodes")
                    .all(|k| t.ty(i).instance_type.capacity.get(k) <= target.get(k))
        })
    }

    /// Gives up the slots still reserved for `class` on planned node `n`, once the node
    /// can no longer take its pods.
    pub(super) fn release_quota(&mut self, n: NewNodeId, class: ClassId) {
        let node = &mut self.new_nodes[n];
        let Some(q) = node.quota.get_mut(&class) else { return };
        let left = std::mem::take(q);
        for _ in 0..left {
            node.room = node.room.plus(&self.classes[class].requests);
        }
        let state = &mut self.progress[class];
        state.reserved = state.reserved.saturating_sub(left);
    }
}

impl Scheduler {
    /// Why no type among `types` could be a target for a new node of template `ti`: too
    /// few values for its `minValues`, or else its limits.
    pub(super) fn no_target_reason(&self, ti: TemplateId, types: &[TypeId]) -> Reason {
        let t = &self.templates[ti];
        let labels: Vec<&BTreeMap<String, String>> = types.iter().map(|&i| &t.ty(i).labels).collect();
        match t.requirements.check_min_values(labels.iter().copied()) {
            Err(e) => Reason::MinValues {
                nodepool: t.name.clone(),
                detail: e.to_string(),
            },
            Ok(()) => Reason::Limits {
                nodepool: t.name.clone(),
            },
        }
    }
}
