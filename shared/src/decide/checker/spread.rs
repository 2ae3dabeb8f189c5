//! Hard topology spread (`whenUnsatisfiable: DoNotSchedule`) over the final state, as
//! kube-scheduler's PodTopologySpread filter decides it (`podtopologyspread`
//! `(*PodTopologySpread).calPreFilterState` and `Filter`), with Karpenter's domains for the
//! nodes that could still be launched (`scheduling.Topology`, `TopologyGroup`).
//!
//! For a pod placed by the plan and each of its hard constraints:
//!
//! - its node must have the constraint's key;
//! - the nodes that count are those with every hard constraint's key that pass the
//!   inclusion policies (`MatchNodeInclusionPolicies`): `nodeAffinityPolicy: Honor` (the
//!   default) keeps the nodes the pod's node selector and required node affinity accept,
//!   `nodeTaintsPolicy: Honor` (default `Ignore`) the nodes whose taints it tolerates;
//! - on them, the pods counted are those of the pod's namespace whose labels match the
//!   selector (with `matchLabelKeys` as `In` the pod's values), not being deleted
//!   (`countPodsMatchSelector`); finished pods are not seen at all;
//! - the domains are the key's values on those nodes, and the values a new node could
//!   have: per NodePool (whose taints the pod tolerates, under `nodeTaintsPolicy: Honor`)
//!   and offering (that the pod's node affinity and volumes accept, whatever the policy: Karpenter's
//!   `podDomains`), the zone, the capacity type, the type's labels, the pool's labels and its
//!   requirement values on a custom key, and always a fresh hostname;
//! - the global minimum is the least count over those domains, or 0 when there are fewer
//!   than `minDomains`;
//! - the count in the pod's domain (itself included when it matches its own selector, as
//!   `selfMatchNum`) less the minimum must not exceed `maxSkew`.
//!
//! The final state does not say in which order pods were placed; the check holds the final
//! counts to `maxSkew`, which any valid order keeps (the minimum only grows).
//! Approximation: for a NodePool requirement on a custom key other than the constraint's,
//! a potential node takes the pod's `nodeSelector` value when the pool allows it, else the
//! requirement's first value.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

use super::nodepools::Pool;
use super::pending::namespace;
use super::selector::{self, Labels};
use super::state::FinalState;
use super::violation::Violation;
use super::volumes::PodVolumes;
use super::{node_affinity, tolerations};
use crate::catalog::RegionCatalog;
use crate::model::pod::Pod;
use crate::model::well_known as wk;

/// A pod's hard spread as the filter reads it: its selector with `matchLabelKeys` merged
/// in, and its inclusion policies.
pub(crate) struct Constraint<'a> {
    pub c: &'a TopologySpreadConstraint,
    pub selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    pub honor_affinity: bool,
    pub honor_taints: bool,
}

/// The pod's `DoNotSchedule` spreads.
pub(crate) fn constraints(pod: &Pod) -> Vec<Constraint<'_>> {
    constraints_when(pod, "DoNotSchedule")
}

/// The pod's spreads whose `whenUnsatisfiable` is `when`.
pub(crate) fn constraints_when<'a>(pod: &'a Pod, when: &str) -> Vec<Constraint<'a>> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.topology_spread_constraints.iter().flatten())
        .filter(|c| c.when_unsatisfiable == when)
        .map(|c| {
            let selector = c.label_selector.clone().map(|mut s| {
                let exprs = s.match_expressions.get_or_insert_with(Vec::new);
                for k in c.match_label_keys.iter().flatten() {
                    if let Some(v) = labels.get(k) {
                        exprs.push(LabelSelectorRequirement {
                            key: k.clone(),
                            operator: "In".into(),
                            values: Some(vec![v.clone()]),
                        });
                    }
                }
                s
            });
            Constraint {
                c,
                selector,
                honor_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect()
}

/// The values of `key` nodes launched for the pod could have.
fn potential_domains(
    pod: &Pod,
    c: &Constraint<'_>,
    pools: &[Pool],
    region: &RegionCatalog<'_>,
    volumes: Option<&PodVolumes>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Some(spec) = pod.spec.as_ref() else { return out };
    let tols = spec.tolerations.clone().unwrap_or_default();
    let key = c.c.topology_key.as_str();
    for pool in pools {
        if c.honor_taints && tolerations::untolerated(&tols, &pool.taints).is_some() {
            continue;
        }
        if key == wk::HOSTNAME {
            out.insert("\u{0}new-node".into());
            continue;
        }
        for offer in pool.offers(region) {
            let mut labels = offer.labels.clone();
            labels.extend(pool.labels.clone());
            let mut custom: Vec<String> = Vec::new();
            for r in &pool.requirements {
                if labels.contains_key(&r.key) || r.operator != "In" {
                    continue;
                }
                if r.key == key {
                    custom = r.values.clone();
                    continue;
                }
                let wanted = spec.node_selector.as_ref().and_then(|s| s.get(&r.key));
                let value = wanted.filter(|w| r.values.contains(w)).or(r.values.first());
                if let Some(value) = value {
                    labels.insert(r.key.clone(), value.clone());
                }
            }
            let values: Vec<String> = match labels.get(key) {
                Some(v) => vec![v.clone()],
                None => custom,
            };
            for value in values {
                let mut l = labels.clone();
                l.insert(key.to_string(), value.clone());
                // Karpenter's `podDomains`: a node not yet launched is a domain only where
                // the pod itself could go, whatever `nodeAffinityPolicy` says (the policy
                // decides which nodes that exist count).
                if node_affinity::matches(spec, &l, None) && volumes.is_none_or(|v| v.node_ok(&l, None)) {
                    out.insert(value);
                }
            }
        }
    }
    out
}

/// Checks every hard spread of the pods the plan places. `volumes` are the pending pods'
/// (by key): Karpenter's pod domains include its volume requirements.
pub(crate) fn check(
    state: &FinalState<'_>,
    pools: &[Pool],
    region: &RegionCatalog<'_>,
    volumes: &HashMap<String, PodVolumes>,
    v: &mut Vec<Violation>,
) {
    let mut cache: HashMap<String, (BTreeMap<String, i32>, usize)> = HashMap::new();
    for p in state.placed.iter().filter(|p| p.pending) {
        let Some(spec) = p.pod.spec.as_ref() else { continue };
        let cs = constraints(p.pod);
        if cs.is_empty() {
            continue;
        }
        let keys: Vec<&str> = cs.iter().map(|c| c.c.topology_key.as_str()).collect();
        let tols = spec.tolerations.clone().unwrap_or_default();
        let ns = namespace(p.pod);
        for c in &cs {
            let key = c.c.topology_key.as_str();
            let Some(mine) = state.nodes[p.node].labels.get(key) else {
                v.push(Violation::NoSpreadDomain {
                    pod: p.key.clone(),
                    key: key.to_string(),
                });
                continue;
            };
            let vols = volumes.get(&p.key);
            let signature = serde_json::json!([
                ns,
                c.selector,
                keys,
                c.c.min_domains,
                (&spec.node_selector, spec.affinity.as_ref().map(|a| &a.node_affinity)),
                c.honor_affinity,
                vols.filter(|v| v.restricts()).map(|_| &p.key),
                c.honor_taints.then_some(&tols),
                key,
            ])
            .to_string();
            let (counts, domains) = cache.entry(signature).or_insert_with(|| {
                let eligible: Vec<bool> = state
                    .nodes
                    .iter()
                    .map(|n| {
                        keys.iter().all(|k| n.labels.contains_key(*k))
                            && (!c.honor_affinity || node_affinity::matches(spec, &n.labels, n.node_name.as_deref()))
                            && (!c.honor_taints || tolerations::untolerated(&tols, &n.taints).is_none())
                    })
                    .collect();
                let mut counts: BTreeMap<String, i32> = BTreeMap::new();
                for (n, node) in state.nodes.iter().enumerate() {
                    if eligible[n]
                        && let Some(d) = node.labels.get(key)
                    {
                        counts.entry(d.clone()).or_insert(0);
                    }
                }
                for q in &state.placed {
                    if !eligible[q.node] || q.terminating || namespace(q.pod) != ns {
                        continue;
                    }
                    let labels: Labels = q.pod.metadata.labels.clone().unwrap_or_default();
                    if !selector::label_selector(c.selector.as_ref(), &labels) {
                        continue;
                    }
                    if let Some(d) = state.nodes[q.node].labels.get(key) {
                        *counts.entry(d.clone()).or_insert(0) += 1;
                    }
                }
                for d in potential_domains(p.pod, c, pools, region, vols) {
                    counts.entry(d).or_insert(0);
                }
                let domains = counts.len();
                (counts, domains)
            });
            let min = if (*domains as i32) < c.c.min_domains.unwrap_or(1) {
                0
            } else {
                counts.values().copied().min().unwrap_or(0)
            };
            let count = counts.get(mine).copied().unwrap_or(0);
            let skew = count - min;
            if skew > c.c.max_skew {
                v.push(Violation::Skew {
                    pod: p.key.clone(),
                    key: key.to_string(),
                    skew,
                    max_skew: c.c.max_skew,
                    domain: mine.clone(),
                });
            }
        }
    }
}
