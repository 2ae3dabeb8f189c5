//! Offer keys: the (zone, capacity type) pairs a template offers, with the labels a node
//! launched there gets; and, per class, which of the template's types take one of its pods
//! alone under each key (or why none does).

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::decide::provisioning::pod::HostPort;
use crate::decide::provisioning::scheduler::Scheduler;
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, OfferKeyId, TemplateId, TypeId, Types, type_ids};
use crate::decide::provisioning::scheduler::labels::{Split, matches_split};
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::unschedulable::{Mismatch, Reason, Shortfall};
use crate::model::well_known as wk;
use crate::model::{CapacityType, Requirements};

/// A (zone, capacity type) pair a template offers, with the node labels of a node there.
pub(super) struct OfferKey {
    /// The zone.
    pub(super) zone: String,
    /// Spot or on-demand.
    pub(super) capacity_type: CapacityType,
    /// The template's labels, with zone, capacity type and region.
    pub(super) labels: BTreeMap<String, String>,
    /// Price of each of the template's types here (None: not offered).
    pub(super) prices: IdVec<TypeId, Option<f64>>,
    /// The types offered here, cheapest first.
    pub(super) by_price: Vec<TypeId>,
}

/// The offer keys of a template, in (zone, capacity type) order.
pub(super) fn offer_keys(t: &Template, region: &str) -> IdVec<OfferKeyId, OfferKey> {
    let mut keys: Vec<(String, CapacityType)> = t
        .types
        .iter()
        .flat_map(|o| o.offers.iter().map(|o| (o.zone.clone(), o.capacity_type)))
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|(zone, capacity_type)| {
            let mut labels = t.labels.clone();
            labels.insert(wk::ZONE.into(), zone.clone());
            labels.insert(wk::CAPACITY_TYPE.into(), capacity_type.label().into());
            labels.insert(wk::REGION.into(), region.into());
            if let Some(id) = t.zone_ids.get(&zone) {
                labels.insert(wk::ZONE_ID.into(), id.clone());
            }
            let prices: IdVec<TypeId, Option<f64>> = t.types.iter().map(|o| o.price(&zone, capacity_type)).collect();
            let mut by_price: Vec<TypeId> = type_ids(t).filter(|&i| prices[i].is_some()).collect();
            by_price.sort_by(|&a, &b| {
                let (pa, pb) = (prices[a].unwrap_or(f64::INFINITY), prices[b].unwrap_or(f64::INFINITY));
                pa.total_cmp(&pb).then(a.cmp(&b))
            });
            OfferKey {
                zone,
                capacity_type,
                labels,
                prices,
                by_price,
            }
        })
        .collect()
}

/// Per offer key, the types that take a pod alone.
pub(super) type Candidates = BTreeMap<OfferKeyId, Vec<TypeId>>;

/// A class at a relaxation level, against a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FitKey {
    /// The class.
    pub(super) class: ClassId,
    /// The level (an index into the class's levels).
    pub(super) level: usize,
    /// The template.
    pub(super) template: TemplateId,
}

impl Scheduler {
    /// The offer keys and types of a template that take a pod of `class` alone; `Err`
    /// says why none does.
    pub(super) fn candidates_for(
        &mut self,
        class: ClassId,
        li: usize,
        ti: TemplateId,
    ) -> Rc<Result<Candidates, Reason>> {
        let fit = FitKey {
            class,
            level: li,
            template: ti,
        };
        if let Some(c) = self.offer_cache.get(&fit) {
            return Rc::clone(c);
        }
        let t = &self.templates[ti];
        let p = &self.pods[self.classes[class].rep];
        let branches = &self.classes[class].branches[li];
        let result = (|| {
            if let Some(taint) = self.nodepool_taint(class, li, ti) {
                return Err(Reason::Taints {
                    nodepool: t.name.clone(),
                    key: taint.key.clone(),
                    value: taint.value.clone().unwrap_or_default(),
                    effect: taint.effect.clone(),
                });
            }
            let compatible: Vec<&Requirements> = branches
                .iter()
                .filter(|b| t.requirements.compatible(b).is_ok())
                .collect();
            if compatible.is_empty() {
                let detail = branches
                    .first()
                    .and_then(|b| t.requirements.compatible(b).err())
                    .map_or_else(
                        || "no node selector term can match any node".to_string(),
                        |e| e.to_string(),
                    );
                return Err(Reason::Requirements {
                    nodepool: t.name.clone(),
                    mismatch: Mismatch::Conflict { detail },
                });
            }
            let mut out = Candidates::new();
            let mut any_label_match = false;
            let mut port_taken = None;
            for (k, key) in self.offer_keys[ti].enumerate() {
                for i in type_ids(t) {
                    if key.prices[i].is_none() {
                        continue;
                    }
                    let o = t.ty(i);
                    let split = Split {
                        node: &key.labels,
                        instance: &o.labels,
                        custom: &t.custom,
                    };
                    if !compatible.iter().any(|b| matches_split(b, &split)) {
                        continue;
                    }
                    if let Some(hp) = HostPort::any_conflict(&p.host_ports, &o.daemon_ports) {
                        port_taken = Some(format!("{}/{}", hp.protocol, hp.port));
                        continue;
                    }
                    any_label_match = true;
                    if p.requests.fits_in(&o.net).is_ok() {
                        out.entry(k).or_default().push(i);
                    }
                }
            }
            if out.is_empty() {
                return Err(if let (false, Some(port)) = (any_label_match, port_taken) {
                    Reason::Requirements {
                        nodepool: t.name.clone(),
                        mismatch: Mismatch::DaemonSetHostPort { port },
                    }
                } else if any_label_match {
                    Reason::Resources {
                        nodepool: t.name.clone(),
                        shortfall: Shortfall::TooLarge {
                            requests: p.requests.clone(),
                        },
                    }
                } else {
                    Reason::Requirements {
                        nodepool: t.name.clone(),
                        mismatch: Mismatch::NoOfferedType,
                    }
                });
            }
            Ok(out)
        })();
        let result = Rc::new(result);
        self.offer_cache.insert(fit, Rc::clone(&result));
        result
    }
}
