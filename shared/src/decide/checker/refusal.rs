//! The wrongful refusal: a pod the plan reports unschedulable although, alone, it fits a
//! node some NodePool could launch. Such a node exists when, for some NodePool and some
//! offering the pool allows:
//!
//! - the pod tolerates the pool's `spec.taints` (TaintToleration; startup taints need no
//!   toleration);
//! - its node selector and one of its required node affinity terms hold on the node's
//!   labels (the type's, zone, capacity type, region, the pool's labels, a fresh hostname),
//!   where a key the pool requires but no type defines takes any value both the pool and
//!   the pod allow (Karpenter labels the node with the intersection, `Requirements.Labels`),
//!   and a key neither defines is absent;
//! - its volumes allow the node (see [`super::volumes`]);
//! - its requests plus those of the DaemonSets that land on the node fit the type's
//!   allocatable with the pool's EC2NodeClass settings, and their host ports do not collide;
//! - one more node of that type stays within the pool's limits, counting the pool's existing
//!   nodes and the plan's new ones;
//! - the pool's `minValues` can be met by the types that take the pod.
//!
//! Left out, because the answer depends on other pods or on state the snapshot lacks: pods
//! reported for a NodePool's limits, for a backed-off NodePool or a failed launch, or as
//! unreadable; pods with required pod affinity or anti-affinity or a `DoNotSchedule`
//! spread; preempting pods; pods whose claims keep them off every node.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::affinity::{affinity_terms, anti_affinity_terms};
use super::daemonsets::{Daemon, overhead};
use super::node_affinity::required_terms;
use super::nodepools::{Offer, Pool};
use super::ports;
use super::requests::pod_requests;
use super::selector::{self, Labels};
use super::tolerations;
use super::violation::Violation;
use super::volumes::{EBS_ZONE, PodVolumes};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::plan::{ProvisioningPlan, Unschedulable};
use crate::decide::provisioning::unschedulable::Kind;
use crate::model::Resources;
use crate::model::pod::Pod;
use crate::model::well_known as wk;

/// Whether a pod's node selector and one of its required terms can hold on a new node with
/// `labels`, given the pool's requirements on keys those labels lack.
fn node_requirements_met(pod: &Pod, pool: &Pool, labels: &Labels) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    let selector_reqs: Vec<NodeSelectorRequirement> = spec
        .node_selector
        .iter()
        .flatten()
        .map(|(k, v)| NodeSelectorRequirement {
            key: k.clone(),
            operator: "In".into(),
            values: Some(vec![v.clone()]),
        })
        .collect();
    let branch_ok = |exprs: &[&NodeSelectorRequirement]| {
        let mut keys: Vec<&str> = exprs.iter().map(|e| e.key.as_str()).collect();
        keys.extend(pool.requirements.iter().map(|r| r.key.as_str()));
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter().all(|k| {
            let on_key = exprs.iter().filter(|e| e.key == k);
            if labels.contains_key(k) || wk::OFFERING_LABELS.contains(&k) {
                return on_key.clone().all(|e| selector::requirement(e, labels));
            }
            if pool.on_key(k).next().is_none() {
                // No pool requirement on the key: the node will not carry it.
                return on_key.clone().all(|e| selector::requirement(e, labels));
            }
            let reqs = on_key
                .map(|e| (e.operator.as_str(), e.values.as_deref().unwrap_or_default()))
                .chain(pool.on_key(k).map(|r| (r.operator.as_str(), r.values.as_slice())));
            let reqs: Vec<(&str, &[String])> = reqs.collect();
            selector::satisfiable(reqs.iter().copied())
        })
    };
    match required_terms(spec) {
        None => branch_ok(&selector_reqs.iter().collect::<Vec<_>>()),
        Some(terms) => terms.iter().any(|t| {
            if t.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
                return false;
            }
            let exprs = t.match_expressions.as_deref().unwrap_or_default();
            if exprs.is_empty() {
                return false;
            }
            let all: Vec<&NodeSelectorRequirement> = selector_reqs.iter().chain(exprs).collect();
            branch_ok(&all)
        }),
    }
}

fn skipped(u: &Unschedulable, pod: &Pod, volumes: &PodVolumes) -> bool {
    let kinds = [
        Kind::Limits,
        Kind::BackedOff,
        Kind::Launch,
        Kind::InvalidPod,
        Kind::NoValidNodePool,
    ];
    let hard_spread = pod
        .spec
        .iter()
        .flat_map(|s| s.topology_spread_constraints.iter().flatten())
        .any(|c| c.when_unsatisfiable == "DoNotSchedule");
    kinds.iter().any(|k| u.has(*k))
        || hard_spread
        || !affinity_terms(pod).is_empty()
        || !anti_affinity_terms(pod).is_empty()
        || volumes.bad.is_some()
}

/// An offering of a pool, prepared once per run.
struct Candidate<'a> {
    offer: Offer<'a>,
    labels: Labels,
    capacity: Resources,
    allocatable: Resources,
    ds: Resources,
    ds_ports: Vec<ports::HostPort>,
}

/// Finds the pods the plan refuses wrongly.
pub(crate) fn check(
    plan: &ProvisioningPlan,
    pending: &std::collections::HashMap<String, &Pod>,
    volumes: &std::collections::HashMap<String, PodVolumes>,
    pools: &[Pool],
    daemons: &[Daemon],
    region: &RegionCatalog<'_>,
    v: &mut Vec<Violation>,
) {
    // Per pool, lazily: each offering with its node's labels, the type's capacity and
    // allocatable under the pool's settings, and the DaemonSets that land on it.
    let mut candidates: Vec<Option<Vec<Candidate<'_>>>> = pools.iter().map(|_| None).collect();
    for u in &plan.unschedulable {
        let (Some(&pod), Some(vols)) = (pending.get(&u.pod), volumes.get(&u.pod)) else {
            continue;
        };
        let Some(spec) = pod.spec.as_ref() else { continue };
        if skipped(u, pod, vols) {
            continue;
        }
        let Ok(requests) = pod_requests(spec) else { continue };
        let tols = spec.tolerations.clone().unwrap_or_default();
        let own_ports = ports::of_spec(spec);
        'pools: for (pi, pool) in pools.iter().enumerate() {
            if tolerations::untolerated(&tols, &pool.taints).is_some() {
                continue;
            }
            let planned = plan.nodes.iter().filter(|n| n.nodepool == pool.name);
            let mut in_use = Resources::default();
            let mut count = 0i64;
            for n in planned {
                if let Some(&it) = region.types().iter().find(|t| t.name == n.instance_type) {
                    in_use = in_use.plus(&pool.shaped(it).capacity);
                }
                count += 1;
            }
            let list = candidates[pi].get_or_insert_with(|| {
                pool.offers(region)
                    .into_iter()
                    .map(|offer| {
                        let mut labels = offer.labels.clone();
                        labels.extend(pool.labels.clone());
                        labels.insert(wk::HOSTNAME.into(), "\u{0}new-node".into());
                        let shaped = pool.shaped(offer.instance_type);
                        let (ds, ds_ports) = overhead(daemons, &labels, &pool.taints);
                        Candidate {
                            offer,
                            labels,
                            capacity: shaped.capacity,
                            allocatable: shaped.allocatable,
                            ds,
                            ds_ports,
                        }
                    })
                    .collect()
            });
            let mut fitting = Vec::new();
            for c in list.iter() {
                if requests.plus(&c.ds).fits_in(&c.allocatable).is_err() {
                    continue;
                }
                if !node_requirements_met(pod, pool, &c.labels) {
                    continue;
                }
                let mut volume_labels = c.labels.clone();
                volume_labels.insert(EBS_ZONE.into(), c.offer.zone.clone());
                if !vols.node_ok(&volume_labels, None) {
                    continue;
                }
                if own_ports.iter().any(|p| c.ds_ports.iter().any(|d| d.conflicts(p))) {
                    continue;
                }
                let within = pool.limits.iter().all(|(name, limit)| {
                    let used = pool.used.get(name).copied().unwrap_or(0);
                    let more = if name == "nodes" {
                        count + 1
                    } else {
                        in_use.get(name) + c.capacity.get(name)
                    };
                    used + more <= *limit
                });
                if within {
                    fitting.push(&c.offer);
                }
            }
            let types: Vec<Labels> = fitting.iter().map(|o| o.labels.clone()).collect();
            if pool.min_values_unmet(types.iter()).is_some() {
                continue;
            }
            if let Some(o) = fitting.first() {
                v.push(Violation::WrongfulRefusal {
                    pod: u.pod.clone(),
                    nodepool: pool.name.clone(),
                    instance_type: o.instance_type.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.label().to_string(),
                });
                break 'pools;
            }
        }
    }
}
