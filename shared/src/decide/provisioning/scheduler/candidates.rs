//! The offer keys and types of a NodePool that take one pod of a class alone at a
//! relaxation level, or why none does: its taints, its requirements, the DaemonSets' host
//! ports, the pod's size (Karpenter's `NodeClaim.CanAdd` on a fresh NodeClaim of the
//! template, `filterInstanceTypesByRequirements`, in `Scheduler.addToNewNodeClaim`).

use std::collections::BTreeMap;

use crate::decide::provisioning::pod::{HostPort, PodInfo};
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::index::{IdVec, OfferKeyId, TypeId, Types, type_ids};
use crate::decide::provisioning::scheduler::offer_key::OfferKey;
use crate::decide::provisioning::scheduler::split::{Split, matches_split};
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::unschedulable::{Mismatch, Reason, Shortfall};
use crate::model::Requirements;

/// Per offer key, the types that take a pod alone.
pub(super) type Candidates = BTreeMap<OfferKeyId, Vec<TypeId>>;

/// The offer keys (`offer_keys`, template `t`'s) and types that take a pod of `class`
/// alone at level `li`; `p` is the pod that stands for the class. `Err` says why none
/// does.
pub(super) fn candidates(
    t: &Template,
    offer_keys: &IdVec<OfferKeyId, OfferKey>,
    class: &Class,
    li: usize,
    p: &PodInfo,
) -> Result<Candidates, Reason> {
    let branches = &class.branches[li];
    if let Some(taint) = class.nodepool_taint(li, &p.tolerations, t) {
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
    for (k, key) in offer_keys.enumerate() {
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
}
