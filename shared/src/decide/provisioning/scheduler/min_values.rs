//! A NodePool's `minValues`: whether it has any, the capacity a new node may be filled to
//! while enough of its types still hold its pods (Karpenter refuses a NodeClaim whose
//! types have too few values, `NodeClaim.CanAdd`, `filterInstanceTypesByRequirements`),
//! and the types a finished node keeps so that enough values remain after the cut to the
//! alternatives CreateFleet takes (`InstanceTypes.Truncate` in
//! `Results.TruncateInstanceTypes`).

use std::collections::{BTreeMap, HashMap};

use crate::decide::provisioning::packer::ResourcePrices;
use crate::decide::provisioning::plan::MAX_ALTERNATIVES;
use crate::decide::provisioning::scheduler::index::{TypeId, Types};
use crate::decide::provisioning::templates::Template;
use crate::model::Resources;

/// Whether a template's requirements carry a `minValues`.
pub(super) fn has_min_values(t: &Template) -> bool {
    t.requirements.iter().any(|r| r.min_values().is_some())
}

/// The capacity a node of target type `target` may be filled to while enough of
/// `types` still hold its pods for the template's `minValues`: for each requirement
/// with `minValues`, the target and, for each other value it needs, the type of that
/// value that keeps the most worth; the capacity is what all of them hold. `None` when
/// `types` have too few values (Karpenter refuses such a NodeClaim: `NodeClaim.Add`,
/// "min requirement not met").
pub(super) fn min_values_capacity(
    t: &Template,
    types: &[TypeId],
    target: TypeId,
    prices: &ResourcePrices,
) -> Option<Resources> {
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

/// The smaller amount of each resource.
fn at_most(a: &Resources, b: &Resources) -> Resources {
    a.minus(&a.minus(b).max(&Resources::default()))
}

/// The cheapest `MAX_ALTERNATIVES` of the fitting types, keeping enough distinct values
/// for the template's `minValues`.
pub(super) fn with_min_values(t: &Template, fitting: &[TypeId]) -> Vec<TypeId> {
    let mut chosen: Vec<TypeId> = fitting.iter().copied().take(MAX_ALTERNATIVES).collect();
    for r in t.requirements.iter() {
        let Some(min) = r.min_values() else { continue };
        let distinct = |set: &[TypeId]| {
            let mut v: Vec<&String> = set
                .iter()
                .filter_map(|&i| t.ty(i).labels.get(r.key()))
                .filter(|v| r.has(v))
                .collect();
            v.sort();
            v.dedup();
            v.len()
        };
        if distinct(&chosen) >= min as usize {
            continue;
        }
        for &i in fitting {
            if distinct(&chosen) >= min as usize {
                break;
            }
            let value = t.ty(i).labels.get(r.key());
            let new_value = value.is_some_and(|v| !chosen.iter().any(|&c| t.ty(c).labels.get(r.key()) == Some(v)));
            if new_value {
                chosen.push(i);
            }
        }
    }
    let order: HashMap<TypeId, usize> = fitting.iter().enumerate().map(|(pos, &i)| (i, pos)).collect();
    chosen.sort_by_key(|i| order[i]);
    chosen.dedup();
    while chosen.len() > MAX_ALTERNATIVES {
        // Drop the dearest type whose removal keeps minValues.
        let Some(pos) = (0..chosen.len()).rev().find(|&p| {
            let mut without = chosen.clone();
            without.remove(p);
            let labels: Vec<&BTreeMap<String, String>> = without.iter().map(|&i| &t.ty(i).labels).collect();
            t.requirements.check_min_values(labels.iter().copied()).is_ok()
        }) else {
            break;
        };
        chosen.remove(pos);
    }
    chosen
}
