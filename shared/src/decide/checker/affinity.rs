//! Required inter-pod affinity and anti-affinity over the final state, as kube-scheduler's
//! InterPodAffinity filter decides them (`interpodaffinity` `(*InterPodAffinity).Filter`,
//! `satisfyPodAffinity`, `satisfyPodAntiAffinity`, `satisfyExistingPodsAntiAffinity`).
//!
//! - A term covers a pod when the pod's namespace is in the term's namespaces and its
//!   labels match the term's selector (with `matchLabelKeys` as `In` and
//!   `mismatchLabelKeys` as `NotIn` the owner's values, as the API server merges them). The
//!   namespaces are the term's `namespaces` together with those its `namespaceSelector`
//!   matches (`{}` matches all); with neither, the owner's own
//!   (`GetNamespacesFromPodAffinityTerm`). A namespace's labels are the Namespace object's,
//!   or only `kubernetes.io/metadata.name` when the snapshot lacks it
//!   ([`Snapshot::namespace_labels`]).
//! - Affinity: the node must have every term's topology key, and each term must cover some
//!   other pod in the node's domain; or, the first pod of a group, no pod (on a node with the
//!   key) is covered by **any** of its terms and the pod is covered by **all** of them
//!   itself. In the final state the order of placement is unknown, so the check looks for
//!   one: pods already bound first, then repeatedly any planned pod whose terms are met by
//!   the pods admitted so far, or else one that may start its group, or else the planned
//!   pods without affinity.
//! - Anti-affinity, both ways: no two pods in one domain of a term's key where the term of
//!   one covers the other, unless both were already bound.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodAffinityTerm;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::pending::namespace;
use super::selector::{self, Labels};
use super::state::FinalState;
use super::violation::Violation;
use crate::model::pod::Pod;
use crate::snapshot::Snapshot;

/// A required term, read.
pub(crate) struct Term<'a> {
    pub key: String,
    selector: Option<LabelSelector>,
    namespaces: BTreeSet<String>,
    namespace_selector: Option<&'a LabelSelector>,
}

fn labels_of(pod: &Pod) -> Labels {
    pod.metadata.labels.clone().unwrap_or_default()
}

impl<'a> Term<'a> {
    fn read(t: &'a PodAffinityTerm, owner: &Pod) -> Term<'a> {
        let own = labels_of(owner);
        let selector = t.label_selector.clone().map(|mut s| {
            let exprs = s.match_expressions.get_or_insert_with(Vec::new);
            for (keys, op) in [(&t.match_label_keys, "In"), (&t.mismatch_label_keys, "NotIn")] {
                for k in keys.iter().flatten() {
                    if let Some(v) = own.get(k) {
                        exprs.push(LabelSelectorRequirement {
                            key: k.clone(),
                            operator: op.into(),
                            values: Some(vec![v.clone()]),
                        });
                    }
                }
            }
            s
        });
        let mut namespaces: BTreeSet<String> = t.namespaces.iter().flatten().cloned().collect();
        if namespaces.is_empty() && t.namespace_selector.is_none() {
            namespaces.insert(namespace(owner).to_string());
        }
        Term {
            key: t.topology_key.clone(),
            selector,
            namespaces,
            namespace_selector: t.namespace_selector.as_ref(),
        }
    }

    /// Whether the term covers a pod.
    pub fn covers(&self, pod: &Pod, snapshot: &Snapshot) -> bool {
        let ns = namespace(pod);
        let ns_ok = self.namespaces.contains(ns)
            || self
                .namespace_selector
                .is_some_and(|s| selector::label_selector(Some(s), &snapshot.namespace_labels(ns)));
        ns_ok && selector::label_selector(self.selector.as_ref(), &labels_of(pod))
    }
}

/// A pod's required affinity terms.
pub(crate) fn affinity_terms(pod: &Pod) -> Vec<Term<'_>> {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    terms.into_iter().flatten().map(|t| Term::read(t, pod)).collect()
}

/// A pod's required anti-affinity terms.
pub(crate) fn anti_affinity_terms(pod: &Pod) -> Vec<Term<'_>> {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    terms.into_iter().flatten().map(|t| Term::read(t, pod)).collect()
}

/// Checks required affinity and anti-affinity.
pub(crate) fn check(state: &FinalState<'_>, snapshot: &Snapshot, v: &mut Vec<Violation>) {
    let placed = &state.placed;
    let domain = |i: usize, key: &str| state.nodes[placed[i].node].labels.get(key);
    let terms: Vec<Vec<Term<'_>>> = placed.iter().map(|p| affinity_terms(p.pod)).collect();
    let mut admitted: Vec<bool> = placed.iter().map(|p| !p.pending).collect();
    let waiting: Vec<usize> = (0..placed.len())
        .filter(|&i| placed[i].pending && !terms[i].is_empty())
        .collect();
    for &i in &waiting {
        for t in &terms[i] {
            if domain(i, &t.key).is_none() {
                v.push(Violation::NoAffinityDomain {
                    pod: placed[i].key.clone(),
                    key: t.key.clone(),
                });
            }
        }
    }
    let has_keys = |i: usize| terms[i].iter().all(|t| domain(i, &t.key).is_some());
    loop {
        let mut changed = false;
        for &i in &waiting {
            if admitted[i] || !has_keys(i) {
                continue;
            }
            let met = terms[i].iter().all(|t| {
                (0..placed.len()).any(|j| {
                    j != i && admitted[j] && domain(j, &t.key) == domain(i, &t.key) && t.covers(placed[j].pod, snapshot)
                })
            });
            if met {
                admitted[i] = true;
                changed = true;
            }
        }
        if changed {
            continue;
        }
        for &i in &waiting {
            if admitted[i] || !has_keys(i) {
                continue;
            }
            let none = terms[i].iter().all(|t| {
                (0..placed.len()).all(|j| {
                    !(j != i && admitted[j] && domain(j, &t.key).is_some() && t.covers(placed[j].pod, snapshot))
                })
            });
            if none && terms[i].iter().all(|t| t.covers(placed[i].pod, snapshot)) {
                admitted[i] = true;
                changed = true;
                break;
            }
        }
        if changed {
            continue;
        }
        for i in 0..placed.len() {
            if !admitted[i] && terms[i].is_empty() {
                admitted[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for &i in &waiting {
        if !admitted[i] && has_keys(i) {
            let unmet = terms[i].iter().find(|t| {
                !(0..placed.len())
                    .any(|j| j != i && domain(j, &t.key) == domain(i, &t.key) && t.covers(placed[j].pod, snapshot))
            });
            let Some(t) = unmet.or_else(|| terms[i].first()) else {
                continue;
            };
            v.push(Violation::AffinityUnmet {
                pod: placed[i].key.clone(),
                key: t.key.clone(),
                domain: domain(i, &t.key).cloned().unwrap_or_default(),
            });
        }
    }

    for (a, pa) in placed.iter().enumerate() {
        let anti = anti_affinity_terms(pa.pod);
        if anti.is_empty() {
            continue;
        }
        for (b, pb) in placed.iter().enumerate() {
            if a == b || !(pa.pending || pb.pending) {
                continue;
            }
            for t in &anti {
                let same = domain(a, &t.key).is_some() && domain(a, &t.key) == domain(b, &t.key);
                if same && t.covers(pb.pod, snapshot) {
                    let (pod, other) = if pa.pending { (pa, pb) } else { (pb, pa) };
                    v.push(Violation::AntiAffinity {
                        pod: pod.key.clone(),
                        other: other.key.clone(),
                        key: t.key.clone(),
                    });
                }
            }
        }
    }
}
