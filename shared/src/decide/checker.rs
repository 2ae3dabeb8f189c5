//! An independent check of a provisioning plan against its input.
//!
//! It shares the planner's reading of the input, not its decisions. Beyond the model
//! (quantities, requirements, selectors, the catalog's allocatable formula), it reads pods
//! with [`PodInfo`] (requests, requirement branches with volume zones, spreads, affinity
//! terms, host ports), DaemonSets with [`DaemonSetInfo`], taints with
//! [`untolerated`](super::taints::untolerated), and NodePools with
//! [`templates::build`] (their instance types, offerings, labels, allocatable net of
//! DaemonSets, limits and usage): a mistake in those readings would escape it. It shares
//! none of the scheduling (classes, relaxation, placement, packing): it rebuilds every node
//! of the plan, in its final state, from the snapshot and the plan alone, and checks that
//!
//! - every provisionable pod is placed exactly once or reported unschedulable with a
//!   reason, and no other pod is placed;
//! - every new node's instance type, and each of its alternatives, is offered in its zone
//!   and capacity type, satisfies its NodePool's requirements, and holds its pods plus the
//!   DaemonSets that land on it; the price is the offering's; `minValues` holds over the
//!   alternatives; the NodePool's limits hold;
//! - every pod tolerates its node's taints, matches one of its node requirement branches
//!   (volume zones included), and gets a host port no other pod on the node binds;
//! - existing nodes placed onto are usable and keep within their allocatable;
//! - required pod affinity and anti-affinity hold in both directions, and every
//!   `DoNotSchedule` spread's skew is within `maxSkew` over the domains the pod may use.
//!
//! The result is the list of [`Violation`]s, empty for a valid plan.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, Taint};

mod violation;

pub use violation::{NewNode, NodeRef, TypeProblem, Violation};

use super::daemonsets::DaemonSetInfo;
use super::namespaces::Namespaces;
use super::plan::ProvisioningPlan;
use super::pod::{PodInfo, Volumes, is_provisionable, pod_key};
use super::taints::untolerated;
use super::templates::{self, Template};
use crate::catalog::RegionCatalog;
use crate::model::pod_requests::effective_requests;
use crate::model::well_known as wk;
use crate::model::{Node, Resources};
use crate::snapshot::Snapshot;

/// A pod in its final place.
struct Placed<'a> {
    info: &'a PodInfo,
    node: usize,
}

/// A node in the final state.
struct FinalNode {
    name: NodeRef,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    allocatable: Resources,
    used: Resources,
}

fn pod_infos(snapshot: &Snapshot, volumes: &Volumes<'_>, filter: impl Fn(&Pod) -> bool) -> Vec<(String, PodInfo)> {
    snapshot
        .pods
        .iter()
        .filter(|p| filter(p))
        .filter_map(|p| {
            PodInfo::from_pod(p, volumes, &Namespaces::new(snapshot))
                .ok()
                .map(|i| (pod_key(p), i))
        })
        .collect()
}

/// Checks `plan` against `snapshot` and the region's catalog.
pub fn check(snapshot: &Snapshot, region: &RegionCatalog<'_>, plan: &ProvisioningPlan) -> Vec<Violation> {
    let mut v = Vec::new();
    let volumes = Volumes::new(&snapshot.pvcs, &snapshot.pvs);
    let pending = pod_infos(snapshot, &volumes, is_provisionable);
    let pending_keys: HashSet<&str> = pending.iter().map(|(k, _)| k.as_str()).collect();

    // 1. Each provisionable pod exactly once.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let placed_keys = plan
        .nodes
        .iter()
        .flat_map(|n| &n.pods)
        .chain(plan.existing.iter().flat_map(|e| &e.pods));
    for k in placed_keys.chain(plan.unschedulable.iter().map(|u| &u.pod)) {
        *seen.entry(k.as_str()).or_default() += 1;
    }
    for (k, _) in &pending {
        match seen.get(k.as_str()) {
            None => v.push(Violation::Unplanned { pod: k.clone() }),
            Some(n) if *n > 1 => v.push(Violation::Repeated {
                pod: k.clone(),
                times: *n,
            }),
            _ => {}
        }
    }
    let bad: HashSet<&str> = snapshot.bad_pods.iter().map(|(k, _)| k.as_str()).collect();
    for k in seen.keys() {
        if !pending_keys.contains(k) && !bad.contains(k) && !plan.unschedulable.iter().any(|u| u.pod == *k) {
            v.push(Violation::NotPending { pod: k.to_string() });
        }
    }
    for u in &plan.unschedulable {
        if u.reasons.is_empty() {
            v.push(Violation::NoReason { pod: u.pod.clone() });
        }
    }

    // 2. Rebuild the final nodes.
    let daemonsets: Vec<DaemonSetInfo> = snapshot
        .daemonsets
        .iter()
        .filter_map(|d| DaemonSetInfo::from_k8s(d).ok())
        .collect();
    let (pools, _) = templates::build(
        &snapshot.nodepools,
        &snapshot.nodeclasses,
        region,
        &daemonsets,
        &snapshot.nodes,
    );
    let mut nodes: Vec<FinalNode> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for n in &snapshot.nodes {
        let Ok(node) = Node::from_k8s(n) else { continue };
        let mut labels = node.labels.clone();
        labels.entry(wk::HOSTNAME.into()).or_insert_with(|| node.name.clone());
        by_name.insert(node.name.clone(), nodes.len());
        nodes.push(FinalNode {
            name: NodeRef::Existing(node.name.clone()),
            labels,
            taints: node.taints.clone(),
            allocatable: node.allocatable.clone(),
            used: Resources::default(),
        });
        if !(node.ready && !node.unschedulable && !node.terminating)
            && plan.existing.iter().any(|e| e.node == node.name)
        {
            v.push(Violation::UnusableNode {
                node: node.name.clone(),
            });
        }
    }
    let bound = pod_infos(snapshot, &volumes, |p| {
        p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
    });
    let mut placed: Vec<Placed<'_>> = Vec::new();
    for (k, info) in &bound {
        let Some(pod) = snapshot.pods.iter().find(|p| pod_key(p) == *k) else {
            continue;
        };
        let live = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_none_or(|p| p != "Succeeded" && p != "Failed");
        let Some(&n) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|name| by_name.get(name))
        else {
            continue;
        };
        if !live {
            continue;
        }
        if let Some(spec) = &pod.spec
            && let Ok(mut r) = effective_requests(spec)
        {
            r.pods += 1;
            nodes[n].used = nodes[n].used.plus(&r);
        }
        placed.push(Placed { info, node: n });
    }
    let existing_count = nodes.len();
    let info_of: HashMap<&str, &PodInfo> = pending.iter().map(|(k, i)| (k.as_str(), i)).collect();

    for e in &plan.existing {
        let Some(&n) = by_name.get(&e.node) else {
            v.push(Violation::UnknownNode { node: e.node.clone() });
            continue;
        };
        for k in &e.pods {
            if let Some(info) = info_of.get(k.as_str()) {
                nodes[n].used = nodes[n].used.plus(&info.requests);
                placed.push(Placed { info, node: n });
            }
        }
    }
    for e in &plan.existing {
        if let Some(&n) = by_name.get(&e.node)
            && let Err(r) = nodes[n].used.fits_in(&nodes[n].allocatable)
        {
            v.push(Violation::ExistingOverfull {
                node: e.node.clone(),
                resource: r.to_string(),
            });
        }
    }

    let mut pool_usage: HashMap<&str, (Resources, i64)> = HashMap::new();
    for (i, pn) in plan.nodes.iter().enumerate() {
        let label = NewNode {
            index: i,
            instance_type: pn.instance_type.clone(),
            zone: pn.zone.clone(),
        };
        let Some(pool) = pools.iter().find(|t| t.name == pn.nodepool) else {
            v.push(Violation::UnknownNodePool {
                node: label,
                nodepool: pn.nodepool.clone(),
            });
            continue;
        };
        if pn.instance_types.first() != Some(&pn.instance_type) {
            v.push(Violation::TypeNotFirst { node: label.clone() });
        }
        if pn.instance_types.len() > super::plan::MAX_ALTERNATIVES {
            v.push(Violation::TooManyAlternatives {
                node: label.clone(),
                max: super::plan::MAX_ALTERNATIVES,
            });
        }
        let pods: Vec<&PodInfo> = pn
            .pods
            .iter()
            .filter_map(|k| info_of.get(k.as_str()).copied())
            .collect();
        let requests = pods.iter().fold(Resources::default(), |acc, p| acc.plus(&p.requests));
        let mut alternative_labels = Vec::new();
        for (a, name) in pn.instance_types.iter().enumerate() {
            match check_type(pool, region, name, pn, &pods, &requests, &daemonsets) {
                Ok(labels) => alternative_labels.push(labels),
                Err(problem) => v.push(Violation::BadType {
                    node: label.clone(),
                    alternative: a != 0,
                    instance_type: name.clone(),
                    problem,
                }),
            }
        }
        if let Err(unmet) = pool.requirements.check_min_values(alternative_labels.iter()) {
            v.push(Violation::MinValues {
                node: label.clone(),
                unmet,
            });
        }
        let Some(it) = pool.types.iter().find(|o| o.instance_type.name == pn.instance_type) else {
            continue;
        };
        let usage = pool_usage.entry(pool.name.as_str()).or_default();
        usage.0 = usage.0.plus(&it.instance_type.capacity);
        usage.1 += 1;
        let mut labels = it.labels.clone();
        labels.extend(pn.labels.clone());
        labels.insert(wk::ZONE.into(), pn.zone.clone());
        labels.insert(wk::CAPACITY_TYPE.into(), pn.capacity_type.label().into());
        labels.insert(wk::REGION.into(), region.region().into());
        labels.insert(wk::HOSTNAME.into(), format!("planned-node-{i}"));
        let n = nodes.len();
        nodes.push(FinalNode {
            name: NodeRef::New(label),
            labels,
            taints: pool.taints.clone(),
            allocatable: it.net.clone(),
            used: requests,
        });
        for p in pods {
            placed.push(Placed { info: p, node: n });
        }
    }
    for t in &pools {
        let (planned, count) = pool_usage.get(t.name.as_str()).cloned().unwrap_or_default();
        for (name, limit) in &t.limits {
            let used = t.used.get(name).copied().unwrap_or(0) + if name == "nodes" { count } else { planned.get(name) };
            if used > *limit {
                v.push(Violation::LimitExceeded {
                    nodepool: t.name.clone(),
                    resource: name.clone(),
                    limit: *limit,
                    used,
                });
            }
        }
    }

    // 3. Per pod on its node.
    let mut ports: HashMap<usize, Vec<&super::pod::HostPort>> = HashMap::new();
    for pl in &placed {
        let node = &nodes[pl.node];
        let is_pending = pending_keys.contains(pl.info.key.as_str());
        if is_pending {
            if let Some(t) = untolerated(&pl.info.tolerations, &node.taints) {
                v.push(Violation::Untolerated {
                    pod: pl.info.key.clone(),
                    taint: t.key.clone(),
                    node: node.name.clone(),
                });
            }
            if !pl.info.branches.iter().any(|b| b.matches_labels(&node.labels).is_ok()) {
                v.push(Violation::NoBranch {
                    pod: pl.info.key.clone(),
                    node: node.name.clone(),
                });
            }
        }
        for hp in &pl.info.host_ports {
            let list = ports.entry(pl.node).or_default();
            if list.iter().any(|o| o.conflicts(hp)) {
                v.push(Violation::HostPortConflict {
                    pod: pl.info.key.clone(),
                    port: hp.port,
                    node: node.name.clone(),
                });
            }
            list.push(hp);
        }
    }
    for node in &nodes {
        if let NodeRef::New(new) = &node.name
            && let Err(r) = node.used.fits_in(&node.allocatable)
        {
            v.push(Violation::NewOverfull {
                node: new.clone(),
                resource: r.to_string(),
            });
        }
    }

    // 4. Pod affinity, anti-affinity and spreads over the final state.
    let domain = |n: usize, key: &str| nodes[n].labels.get(key).cloned();
    for pl in placed.iter().filter(|p| pending_keys.contains(p.info.key.as_str())) {
        let p = pl.info;
        for t in &p.affinity {
            let Some(d) = domain(pl.node, &t.key) else {
                v.push(Violation::NoAffinityDomain {
                    pod: p.key.clone(),
                    key: t.key.clone(),
                });
                continue;
            };
            let others: Vec<&Placed<'_>> = placed
                .iter()
                .filter(|q| !std::ptr::eq(*q, pl) && t.matches(&q.info.namespace, &q.info.labels))
                .collect();
            let here = others
                .iter()
                .any(|q| domain(q.node, &t.key).as_deref() == Some(d.as_str()));
            let alone = t.matches(&p.namespace, &p.labels);
            // Kubernetes lets the first pod of a self-affine group start anywhere.
            if !(here || (alone && others.is_empty())) {
                v.push(Violation::AffinityUnmet {
                    pod: p.key.clone(),
                    key: t.key.clone(),
                    domain: d,
                });
            }
        }
        for q in &placed {
            if std::ptr::eq(q, pl) {
                continue;
            }
            for (a, b) in [(p, q.info), (q.info, p)] {
                for t in &a.anti_affinity {
                    let same = domain(pl.node, &t.key).is_some() && domain(pl.node, &t.key) == domain(q.node, &t.key);
                    if same && t.matches(&b.namespace, &b.labels) {
                        v.push(Violation::AntiAffinity {
                            pod: p.key.clone(),
                            other: q.info.key.clone(),
                            key: t.key.clone(),
                        });
                    }
                }
            }
        }
        for s in p.spreads.iter().filter(|s| s.hard) {
            let count_in = |d: &str| {
                placed
                    .iter()
                    .filter(|q| q.info.namespace == s.namespace && s.selector.matches(&q.info.labels))
                    .filter(|q| domain(q.node, &s.key).as_deref() == Some(d))
                    .count() as i32
            };
            let Some(mine) = domain(pl.node, &s.key) else { continue };
            let eligible: Vec<String> = if s.key == wk::ZONE {
                eligible_zones(p, &pools, &nodes[..existing_count])
            } else {
                // New nodes can always be opened: the minimum over hostnames is 0.
                Vec::new()
            };
            let min = if eligible.len() as i32 >= s.min_domains.unwrap_or(1) && !eligible.is_empty() {
                eligible.iter().map(|d| count_in(d)).min().unwrap_or(0)
            } else {
                0
            };
            let skew = count_in(&mine) - min;
            if skew > s.max_skew {
                v.push(Violation::Skew {
                    pod: p.key.clone(),
                    key: s.key.clone(),
                    skew,
                    max_skew: s.max_skew,
                    domain: mine,
                });
            }
        }
    }
    // In the order of their messages, as a list of strings would sort.
    v.sort_by_cached_key(ToString::to_string);
    v.dedup();
    v
}

fn eligible_zones(p: &PodInfo, pools: &[Template], existing: &[FinalNode]) -> Vec<String> {
    let mut zones: Vec<String> = existing
        .iter()
        .filter(|n| p.branches.iter().any(|b| b.matches_labels(&n.labels).is_ok()))
        .filter_map(|n| n.labels.get(wk::ZONE).cloned())
        .collect();
    for t in pools
        .iter()
        .filter(|t| untolerated(&p.tolerations, &t.taints).is_none())
    {
        for o in &t.types {
            for off in &o.offers {
                let mut l = o.labels.clone();
                l.insert(wk::ZONE.into(), off.zone.clone());
                l.insert(wk::CAPACITY_TYPE.into(), off.capacity_type.label().into());
                let fits = p.requests.fits_in(&o.net).is_ok();
                if fits && p.branches.iter().any(|b| b.matches_labels(&l).is_ok()) {
                    zones.push(off.zone.clone());
                }
            }
        }
    }
    zones.sort();
    zones.dedup();
    zones
}

/// Checks one instance type for a planned node; returns its labels.
fn check_type(
    pool: &Template,
    region: &RegionCatalog<'_>,
    name: &str,
    pn: &super::plan::PlannedNode,
    pods: &[&PodInfo],
    requests: &Resources,
    daemonsets: &[DaemonSetInfo],
) -> Result<BTreeMap<String, String>, TypeProblem> {
    let it = region
        .types()
        .iter()
        .find(|t| t.name == name)
        .ok_or(TypeProblem::NotInRegion)?;
    let price = region
        .prices()
        .price(it, &pn.zone, pn.capacity_type)
        .ok_or(TypeProblem::NoOffering)?;
    if name == pn.instance_type && (price - pn.price_per_hour).abs() > 1e-9 {
        return Err(TypeProblem::PriceDiffers {
            planned: pn.price_per_hour,
            offered: price,
        });
    }
    let mut labels = it.labels();
    labels.extend(pool.labels.clone());
    labels.extend(pn.labels.clone());
    labels.insert(wk::ZONE.into(), pn.zone.clone());
    labels.insert(wk::CAPACITY_TYPE.into(), pn.capacity_type.label().into());
    labels.insert(wk::REGION.into(), region.region().into());
    pool.requirements
        .matches_labels(&labels)
        .map_err(TypeProblem::NodePoolRequirements)?;
    for p in pods {
        if !p.branches.iter().any(|b| b.matches_labels(&labels).is_ok()) {
            return Err(TypeProblem::PodRequirements { pod: p.key.clone() });
        }
    }
    let full = crate::catalog::allocatable::with_settings(it, &pool.settings);
    // DaemonSets tolerate the NodePool's taints, not its startup taints.
    let taints: Vec<Taint> = pool.taints.clone();
    let overhead = daemonsets
        .iter()
        .filter(|d| d.lands_on(&labels, &taints))
        .fold(Resources::default(), |acc, d| acc.plus(&d.requests));
    requests
        .plus(&overhead)
        .fits_in(&full.allocatable)
        .map_err(|r| TypeProblem::DoesNotFit {
            resource: r.to_string(),
        })?;
    Ok(labels)
}
