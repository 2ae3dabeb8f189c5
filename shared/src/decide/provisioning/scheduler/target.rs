//! The target of a node being opened: among the types of one offer key that take the
//! opening pod, the one [`crate::decide::provisioning::packer`] finds most cost-effective for
//! the pods still waiting, with the mix of classes it reserves slots for and the capacity
//! it may be filled to, within the NodePool's limits and `minValues`. Karpenter opens a
//! NodeClaim with every type that takes the pod (`Scheduler.addToNewNodeClaim`,
//! `NewNodeClaim`) and narrows them as pods join; Carpool fills the node towards the type
//! chosen here ([`Target::choose`]).

use std::collections::HashMap;
use std::rc::Rc;

use crate::decide::provisioning::packer::{self, ClassDemand, ResourcePrices};
use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::custom_keys::{custom_fits, narrow};
use crate::decide::provisioning::scheduler::demand::Demand;
use crate::decide::provisioning::scheduler::index::{ClassId, Id, IdVec, OfferKeyId, TypeId, Types};
use crate::decide::provisioning::scheduler::memo::{MatchKey, Shortlist, ShortlistKey};
use crate::decide::provisioning::scheduler::min_values::min_values_capacity;
use crate::decide::provisioning::scheduler::pool::Pool;
use crate::decide::provisioning::scheduler::preference::preference_weight_at;
use crate::decide::provisioning::scheduler::split::{Split, matches_split};
use crate::decide::provisioning::templates::Template;
use crate::model::Resources;
use crate::model::well_known as wk;

/// What a new node is opened for: the type it is filled towards, the slots it reserves per
/// class, and the capacity it may be filled to.
pub(super) struct Target {
    /// The type.
    pub(super) ty: TypeId,
    /// Slots reserved per class.
    pub(super) quota: HashMap<ClassId, u32>,
    /// The type's net allocatable, or less where `minValues` needs smaller types to hold
    /// the node's pods too.
    pub(super) capacity: Resources,
}

impl Target {
    /// The most cost-effective type among `types` (of offer key `k` of `pool`) for a node
    /// opened by `class` at level `li`, with the mix of classes it should hold and the
    /// capacity it may be filled to (less than the type's when the NodePool's `minValues`
    /// needs smaller types to hold its pods too). `cacheable`: `types` are all of the
    /// offer key's for the class, so their shortlist is kept for the next node; lists
    /// narrowed by topology are not.
    pub(super) fn choose(
        pool: &mut Pool,
        demand: &Demand<'_>,
        class: ClassId,
        li: usize,
        k: OfferKeyId,
        types: &[TypeId],
        cacheable: bool,
    ) -> Option<Target> {
        let prices = pool.prices.unwrap_or(ResourcePrices {
            cpu: 1e-5,
            memory: 1e-12,
        });
        let shares: IdVec<ClassId, u32> = demand
            .classes
            .enumerate()
            .map(|(c, cl)| {
                let zones = cl.zones.get(demand.current_level(c)).map_or(1, Vec::len);
                per_zone_share(demand.progress[c].unreserved(), &demand.pods[cl.rep], zones)
            })
            .collect();
        let share = |c: ClassId| shares[c];
        let opening = ClassDemand {
            class: class.index(),
            requests: demand.classes[class].requests.clone(),
            remaining: share(class).max(1),
            per_node_cap: demand.classes[class].per_node_cap,
        };
        let rep = demand.rep(class);
        let tmpl = &pool.template;
        // The values the NodePool's custom keys keep once the opening pod is on the node.
        let custom = if tmpl.custom.is_empty() {
            None
        } else {
            demand.classes[class].branches[li]
                .iter()
                .find_map(|b| narrow(&tmpl.custom, b))
        };
        // Classes that may share the node: tolerated, no pod affinity, no mutual hostname
        // anti-affinity with the opening class, custom keys that agree with its.
        let others: Vec<ClassId> = demand
            .classes
            .ids()
            .filter(|&c| c != class && demand.progress[c].unreserved() > 0)
            .filter(|&c| {
                let q = demand.rep(c);
                demand.classes[c]
                    .nodepool_taint(demand.current_level(c), &q.tolerations, tmpl)
                    .is_none()
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
                        .is_none_or(|custom| custom_fits(custom, &demand.classes[c].branches[demand.current_level(c)]))
            })
            .collect();
        let remaining_value: f64 = std::iter::once(class)
            .chain(others.iter().copied())
            .map(|c| prices.value(&demand.classes[c].requests) * f64::from(share(c).max(1)))
            .sum();
        // Evaluate the most promising types first; stop once no type can beat the best.
        let shortlist_key = ShortlistKey {
            class,
            level: li,
            offer: k,
        };
        let shortlist = match pool.memo.shortlists.get(&shortlist_key).filter(|_| cacheable) {
            Some(list) => Rc::clone(list),
            None if !cacheable => Rc::new(pareto(&pool.template, types, &pool.offer_keys[k].prices)),
            None => {
                let list = Rc::new(pareto(&pool.template, types, &pool.offer_keys[k].prices));
                pool.memo.shortlists.insert(shortlist_key, Rc::clone(&list));
                list
            }
        };
        let tmpl = &pool.template;
        let mut ranked: Vec<(TypeId, f64, f64)> = shortlist
            .iter()
            .map(|&(i, price)| {
                let cap_value = prices.value(&tmpl.ty(i).net).min(remaining_value);
                (i, price, cap_value / price)
            })
            .collect();
        ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.total_cmp(&b.1)));
        let mut best: Option<(f64, f64, i64, Target)> = None;
        let opener = demand.rep(class);
        for (i, price, upper) in ranked {
            if let Some((s, _, _, _)) = &best
                && upper < *s * (1.0 - 1e-9)
            {
                break;
            }
            let capacity = pool.template.ty(i).instance_type.capacity.clone();
            if !pool.limits_allow(&capacity) {
                continue;
            }
            let matching: Vec<ClassId> = others
                .clone()
                .into_iter()
                .filter(|&c| class_matches(pool, demand, c, i, k))
                .collect();
            let demands: Vec<ClassDemand> = matching
                .iter()
                .map(|&c| ClassDemand {
                    class: c.index(),
                    requests: demand.classes[c].requests.clone(),
                    remaining: share(c),
                    per_node_cap: demand.classes[c].per_node_cap,
                })
                .collect();
            let Some(net) = min_values_capacity(&pool.template, types, i, &prices) else {
                continue;
            };
            let Some(pattern) = packer::fill(&net, &opening, &demands, &prices) else {
                continue;
            };
            let score = pattern.value / price;
            // At the same worth and price, the type the opening pod prefers.
            let preferred = preference_weight_at(&pool.offer_keys[k], &pool.template, opener, &[i], price);
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

/// Whether a pod of `class`, at the level it has reached, matches type `ty` under offer
/// key `k` of `pool`.
fn class_matches(pool: &mut Pool, demand: &Demand<'_>, class: ClassId, ty: TypeId, k: OfferKeyId) -> bool {
    let li = demand.current_level(class);
    let cache_key = MatchKey {
        class,
        level: li,
        ty,
        offer: k,
    };
    if let Some(&m) = pool.memo.matches.get(&cache_key) {
        return m;
    }
    let key = &pool.offer_keys[k];
    let o = pool.template.ty(ty);
    let split = Split {
        node: &key.labels,
        instance: &o.labels,
        custom: &pool.template.custom,
    };
    let m = demand.classes[class].branches[li]
        .iter()
        .any(|b| matches_split(b, &split));
    pool.memo.matches.insert(cache_key, m);
    m
}

/// How many of a class's unreserved pods one node in one zone can expect: all of them,
/// or for a class spread across zones its share of one zone.
fn per_zone_share(unreserved: u32, pod: &PodInfo, zones: usize) -> u32 {
    if pod.spreads.iter().any(|s| s.hard && s.key == wk::ZONE) && zones > 1 {
        unreserved.div_ceil(zones as u32)
    } else {
        unreserved
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
