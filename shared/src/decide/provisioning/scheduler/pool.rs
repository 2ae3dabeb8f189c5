//! A NodePool as the scheduler sees it during a run (Karpenter's `NodeClaimTemplate`, with
//! the scheduler's `remainingResources` for its limits): its template, the offer keys it
//! launches into, the resource prices the packer weighs its types with, what is planned
//! under its limits, and what the run remembers of it. It answers which of its types take
//! a pod of a class alone ([`Pool::candidates_for`]) and whether its limits leave room for
//! one more node (`filterByRemainingResources`).

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::decide::provisioning::packer::{self, ResourcePrices, Supply};
use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::candidates::{Candidates, candidates};
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, OfferKeyId, TypeId, Types};
use crate::decide::provisioning::scheduler::memo::{FitKey, Memo};
use crate::decide::provisioning::scheduler::offer_key::{OfferKey, offer_keys};
use crate::decide::provisioning::scheduler::planned::Planned;
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::unschedulable::Reason;
use crate::model::Resources;

/// A NodePool's template with what the run keeps of it.
pub(super) struct Pool {
    /// The template.
    pub(super) template: Template,
    /// Its offer keys.
    pub(super) offer_keys: IdVec<OfferKeyId, OfferKey>,
    /// Resource prices for the packer (None: the cover LP failed).
    pub(super) prices: Option<ResourcePrices>,
    /// What is planned under its limits.
    pub(super) planned: Planned,
    /// What the run remembers of it.
    pub(super) memo: Memo,
}

impl Pool {
    /// The pool of template `template` in `region`, its resource prices from the cover LP
    /// of `demand`, all the pending pods' requests.
    pub(super) fn new(template: Template, region: &str, demand: &Resources) -> Self {
        let offer_keys = offer_keys(&template, region);
        let supplies: Vec<Supply> = template
            .types
            .iter()
            .map(|o| Supply {
                cpu: o.net.cpu_millis as f64,
                memory: o.net.memory as f64,
                price: o.min_price(),
            })
            .collect();
        let prices = packer::cover_lp(&supplies, demand.cpu_millis as f64, demand.memory as f64).map(|(_, y)| y);
        Pool {
            template,
            offer_keys,
            prices,
            planned: Planned::default(),
            memo: Memo::default(),
        }
    }

    /// The offer keys and types that take a pod of class `class` (`c`, whose pod `rep`
    /// stands for all) alone at level `li`; `Err` says why none does. Kept for the run.
    pub(super) fn candidates_for(
        &mut self,
        class: ClassId,
        li: usize,
        c: &Class,
        rep: &PodInfo,
    ) -> Rc<Result<Candidates, Reason>> {
        let fit = FitKey { class, level: li };
        if let Some(c) = self.memo.candidates.get(&fit) {
            return Rc::clone(c);
        }
        let result = Rc::new(candidates(&self.template, &self.offer_keys, c, li, rep));
        self.memo.candidates.insert(fit, Rc::clone(&result));
        result
    }

    /// Whether the limits leave room for one more node of `capacity`.
    pub(super) fn limits_allow(&self, capacity: &Resources) -> bool {
        let tmpl = &self.template;
        let planned = &self.planned;
        tmpl.limits.iter().all(|(name, limit)| {
            let used = tmpl.used.get(name).copied().unwrap_or(0);
            if name == "nodes" {
                used + planned.nodes < *limit
            } else {
                used + planned.capacity.get(name) + capacity.get(name) <= *limit
            }
        })
    }

    /// Why no type among `types` could be a target for a new node: too few values for its
    /// `minValues`, or else its limits.
    pub(super) fn no_target_reason(&self, types: &[TypeId]) -> Reason {
        let t = &self.template;
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
