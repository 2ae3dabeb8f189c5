//! An independent check of a provisioning plan against its input.
//!
//! It reads the raw Kubernetes objects of the snapshot (Pods, Nodes, DaemonSets,
//! PersistentVolumes and claims, StorageClasses, CSINodes, Namespaces) with its own code,
//! written from the upstream rules, one concept per file: [`requests`] (kube's
//! `resource.PodRequests`), [`selector`] (label selectors and node selector requirements),
//! [`tolerations`], [`node_affinity`], [`volumes`], [`ports`], [`daemonsets`], [`pending`]
//! (which pods the plan must account for), [`nodepools`] (what a NodePool may launch, with
//! its own requirement matching), [`state`] (the final state), [`affinity`], [`spread`] and
//! [`refusal`]. [`replay`] replays kube-scheduler's own placement of a plan's pods, to
//! find those its scoring would strand.
//!
//! **What it shares with the planner**, and a bug in which would escape it: the model's
//! plain types and their parsing (`Quantity` and `Resources` as a container of amounts, the
//! `NodePool` and `EC2NodeClass` structs, `CapacityType`, the `well_known` label names);
//! the catalog (`RegionCatalog`: the types, their labels, their offerings and prices, and
//! allocatable for an EC2NodeClass's settings, `catalog::allocatable`); the plan's types
//! (with `unschedulable::Kind`, to skip the refusals it cannot judge); and the `Snapshot`
//! (with its `namespace_labels`). It shares none of the planner's reading of pods, volumes,
//! DaemonSets, taints, selectors, requirements or topology, and none of its scheduling: it
//! rebuilds every node of the plan, in its final state, from the snapshot and the plan
//! alone, and checks that
//!
//! - every pending pod is placed exactly once or reported unschedulable with a reason, and
//!   no other pod is placed; a preempting pod is never on a new node; a pod whose claims
//!   keep it off every node is not placed;
//! - every new node's instance type, and each of its alternatives, is offered in its zone
//!   and capacity type, meets its NodePool's requirements with the node's labels, takes
//!   each of its pods' node requirements and volumes, and holds its pods plus the DaemonSets
//!   that land on it; the price is the offering's; `minValues` holds over the alternatives;
//!   the NodePool's limits hold; a `reserved` node names a capacity reservation holding its
//!   type in its zone ([`reservations`]), and no reservation is planned past its room;
//! - every pod tolerates its node's `NoSchedule` and `NoExecute` taints, passes its node
//!   selector and required node affinity, gets host ports no other pod (or DaemonSet, on a
//!   new node) binds, and its volumes allow the node and stay within the node's attach
//!   limits;
//! - existing nodes placed onto are usable and keep within their allocatable;
//! - required pod affinity and anti-affinity hold in both directions, and every
//!   `DoNotSchedule` spread's skew is within `maxSkew`;
//! - no pod is refused that fits, alone, a node a NodePool could launch (the wrongful
//!   refusal, [`refusal`], which leaves out the cases it cannot judge).
//!
//! Where it cannot know exactly it is conservative, that is it does not report:
//! the EBS attach limit of a new instance type is taken as 127 volumes, more than any type
//! attaches; the order in which pods were placed is searched for (see [`affinity`]).
//!
//! The result is the list of [`Violation`]s, empty for a valid plan.

mod affinity;
pub(crate) mod daemonsets;
pub(crate) mod node_affinity;
pub(crate) mod nodepools;
pub(crate) mod pending;
mod ports;
mod refusal;
pub(crate) mod requests;
mod reservations;
pub(crate) mod selector;
pub(crate) mod spread;
pub(crate) mod state;
pub(crate) mod tolerations;
mod violation;
pub(crate) mod volumes;

use std::collections::{BTreeMap, HashMap, HashSet};

pub use violation::{NewNode, NodeRef, TypeProblem, Violation};

use self::daemonsets::{Daemon, overhead};
use self::nodepools::Pool;
use self::pending::{Standing, key, standing};
use self::selector::Labels;
use self::state::{FinalState, new_node_labels};
use self::volumes::{EBS_DRIVER, EBS_ZONE, PodVolumes};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::plan::{MAX_ALTERNATIVES, PlannedNode, ProvisioningPlan};
use crate::model::pod::Pod;
use crate::model::{CapacityType, Resources};
use crate::snapshot::Snapshot;

/// More EBS volumes than any instance type attaches (the limit assumed for new nodes).
const EBS_LIMIT_NEW_NODE: i64 = 127;

/// Checks `plan` against `snapshot` and the region's catalog.
pub fn check(snapshot: &Snapshot, region: &RegionCatalog<'_>, plan: &ProvisioningPlan) -> Vec<Violation> {
    let mut v = Vec::new();
    let mut pending: HashMap<String, &Pod> = HashMap::new();
    let mut preempting: HashMap<String, String> = HashMap::new();
    for p in &snapshot.pods {
        match standing(p) {
            Standing::Pending => {
                pending.insert(key(p), p);
            }
            Standing::Preempting => {
                let nominated = p.status.as_ref().and_then(|s| s.nominated_node_name.clone());
                preempting.insert(key(p), nominated.unwrap_or_default());
                pending.insert(key(p), p);
            }
            _ => {}
        }
    }
    accounting(snapshot, plan, &pending, &preempting, &mut v);

    let volumes: HashMap<String, PodVolumes> = pending
        .iter()
        .map(|(k, p)| (k.clone(), PodVolumes::of(p, snapshot)))
        .collect();
    let pools = nodepools::pools(&snapshot.nodepools, &snapshot.nodeclasses, &snapshot.nodes);
    let daemons = Daemon::all(&snapshot.daemonsets);
    let state = state::build(snapshot, region, plan, &pools, &daemons, &pending);

    for node in &state.unknown_nodes {
        v.push(Violation::UnknownNode { node: node.clone() });
    }
    for &i in &state.unknown_pools {
        let pn = &plan.nodes[i];
        v.push(Violation::UnknownNodePool {
            node: label(i, pn),
            nodepool: pn.nodepool.clone(),
        });
    }
    for &i in &state.unknown_types {
        let pn = &plan.nodes[i];
        v.push(Violation::BadType {
            node: label(i, pn),
            alternative: false,
            instance_type: pn.instance_type.clone(),
            problem: TypeProblem::NotInRegion,
        });
    }
    for e in &plan.existing {
        let Some(n) = state
            .nodes
            .iter()
            .find(|n| n.node_name.as_deref() == Some(e.node.as_str()))
        else {
            continue;
        };
        if !n.usable {
            v.push(Violation::UnusableNode { node: e.node.clone() });
        }
        if let Err(r) = n.used.fits_in(&n.allocatable) {
            v.push(Violation::ExistingOverfull {
                node: e.node.clone(),
                resource: r.to_string(),
            });
        }
    }
    new_nodes(plan, region, &pools, &daemons, &pending, &volumes, &state, &mut v);
    limits(plan, region, &pools, &mut v);
    reservations::check(plan, region, &mut v);
    pods_on_nodes(snapshot, &state, &preempting, &volumes, &mut v);
    affinity::check(&state, snapshot, &mut v);
    spread::check(&state, &pools, region, &volumes, &mut v);
    refusal::check(plan, &pending, &volumes, &pools, &daemons, region, &mut v);

    // In the order of their messages, as a list of strings would sort.
    v.sort_by_cached_key(ToString::to_string);
    v.dedup();
    v
}

fn label(index: usize, pn: &PlannedNode) -> NewNode {
    NewNode {
        index,
        instance_type: pn.instance_type.clone(),
        zone: pn.zone.clone(),
    }
}

/// Each pending pod exactly once; nothing else placed; every refusal with a reason.
fn accounting(
    snapshot: &Snapshot,
    plan: &ProvisioningPlan,
    pending: &HashMap<String, &Pod>,
    preempting: &HashMap<String, String>,
    v: &mut Vec<Violation>,
) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let placed = plan
        .nodes
        .iter()
        .flat_map(|n| &n.pods)
        .chain(plan.existing.iter().flat_map(|e| &e.pods));
    for k in placed.chain(plan.unschedulable.iter().map(|u| &u.pod)) {
        *seen.entry(k.as_str()).or_default() += 1;
    }
    for k in pending.keys() {
        match seen.get(k.as_str()) {
            None if !preempting.contains_key(k) => v.push(Violation::Unplanned { pod: k.clone() }),
            Some(n) if *n > 1 => v.push(Violation::Repeated {
                pod: k.clone(),
                times: *n,
            }),
            _ => {}
        }
    }
    let bad: HashSet<&str> = snapshot.bad_pods.iter().map(|(k, _)| k.as_str()).collect();
    let refused: HashSet<&str> = plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    for k in seen.keys() {
        if !pending.contains_key(*k) && !bad.contains(k) && !refused.contains(k) {
            v.push(Violation::NotPending { pod: k.to_string() });
        }
    }
    for u in &plan.unschedulable {
        if u.reasons.is_empty() {
            v.push(Violation::NoReason { pod: u.pod.clone() });
        }
    }
}

/// Every new node's type and alternatives.
#[allow(clippy::too_many_arguments)]
fn new_nodes(
    plan: &ProvisioningPlan,
    region: &RegionCatalog<'_>,
    pools: &[Pool],
    daemons: &[Daemon],
    pending: &HashMap<String, &Pod>,
    volumes: &HashMap<String, PodVolumes>,
    state: &FinalState<'_>,
    v: &mut Vec<Violation>,
) {
    for (i, pn) in plan.nodes.iter().enumerate() {
        let node = label(i, pn);
        let Some(pool) = pools.iter().find(|p| p.name == pn.nodepool) else {
            continue;
        };
        if pn.instance_types.first() != Some(&pn.instance_type) {
            v.push(Violation::TypeNotFirst { node: node.clone() });
        }
        if pn.instance_types.len() > MAX_ALTERNATIVES {
            v.push(Violation::TooManyAlternatives {
                node: node.clone(),
                max: MAX_ALTERNATIVES,
            });
        }
        let pods: Vec<(&str, &Pod)> = pn
            .pods
            .iter()
            .filter_map(|k| pending.get(k).map(|p| (k.as_str(), *p)))
            .collect();
        let requests = pods.iter().fold(Resources::default(), |acc, (_, p)| {
            let r = p.spec.as_ref().and_then(|s| requests::pod_requests(s).ok());
            acc.plus(&r.unwrap_or_default())
        });
        let mut fitting: Vec<Labels> = Vec::new();
        for (a, name) in pn.instance_types.iter().enumerate() {
            match check_type(pool, region, name, i, pn, &pods, volumes, &requests, daemons) {
                Ok(labels) => fitting.push(labels),
                Err(problem) => v.push(Violation::BadType {
                    node: node.clone(),
                    alternative: a != 0,
                    instance_type: name.clone(),
                    problem,
                }),
            }
        }
        if let Some((key, min_values, found)) = pool.min_values_unmet(fitting.iter()) {
            v.push(Violation::MinValues {
                node: node.clone(),
                key,
                min_values,
                found,
            });
        }
        if let Some(n) = state
            .nodes
            .iter()
            .find(|n| n.new.is_some_and(|(index, _, _)| index == i))
            && let Err(r) = n.used.fits_in(&n.allocatable)
        {
            v.push(Violation::NewOverfull {
                node,
                resource: r.to_string(),
            });
        }
    }
}

/// One instance type for a planned node; returns its labels.
#[allow(clippy::too_many_arguments)]
fn check_type(
    pool: &Pool,
    region: &RegionCatalog<'_>,
    name: &str,
    index: usize,
    pn: &PlannedNode,
    pods: &[(&str, &Pod)],
    volumes: &HashMap<String, PodVolumes>,
    requests: &Resources,
    daemons: &[Daemon],
) -> Result<Labels, TypeProblem> {
    let it = region
        .types()
        .iter()
        .find(|t| t.name == name)
        .ok_or(TypeProblem::NotInRegion)?;
    let offering = if pn.capacity_type == CapacityType::Reserved {
        // A reserved node's offering is the reservation its labels name.
        reservations::named(region, &pn.labels, name, &pn.zone)
            .and_then(|_| {
                Some(crate::model::Offering {
                    instance_type: name.to_string(),
                    zone: pn.zone.clone(),
                    capacity_type: CapacityType::Reserved,
                    price: region.prices().price(it, &pn.zone, CapacityType::Reserved)?,
                    available: true,
                })
            })
            .ok_or(TypeProblem::NoOffering)?
    } else {
        region
            .offerings_of(it)
            .into_iter()
            .find(|o| o.zone == pn.zone && o.capacity_type == pn.capacity_type)
            .ok_or(TypeProblem::NoOffering)?
    };
    if name == pn.instance_type && (offering.price - pn.price_per_hour).abs() > 1e-9 {
        return Err(TypeProblem::PriceDiffers {
            planned: pn.price_per_hour,
            offered: offering.price,
        });
    }
    let labels = new_node_labels(
        it,
        &pn.zone,
        pn.capacity_type.label(),
        region.region(),
        &pn.labels,
        &format!("planned-node-{index}"),
    );
    if let Some(r) = pool.unmet(&labels) {
        return Err(TypeProblem::NodePoolRequirements {
            requirement: format!("{} {} {:?}", r.key, r.operator, r.values),
        });
    }
    let mut volume_labels = labels.clone();
    volume_labels.insert(EBS_ZONE.into(), pn.zone.clone());
    for (k, p) in pods {
        let affinity_ok = p
            .spec
            .as_ref()
            .is_some_and(|s| node_affinity::matches(s, &labels, None));
        let volumes_ok = volumes.get(*k).is_none_or(|vol| vol.node_ok(&volume_labels, None));
        if !affinity_ok || !volumes_ok {
            return Err(TypeProblem::PodRequirements { pod: k.to_string() });
        }
    }
    let (ds, _) = overhead(daemons, &labels, &pool.taints);
    requests
        .plus(&ds)
        .fits_in(&pool.shaped(it).allocatable)
        .map_err(|r| TypeProblem::DoesNotFit {
            resource: r.to_string(),
        })?;
    Ok(labels)
}

/// Every NodePool's limits, over its existing nodes and the plan's.
fn limits(plan: &ProvisioningPlan, region: &RegionCatalog<'_>, pools: &[Pool], v: &mut Vec<Violation>) {
    for pool in pools.iter().filter(|p| !p.limits.is_empty()) {
        let mut capacity = Resources::default();
        let mut count = 0i64;
        for pn in plan.nodes.iter().filter(|n| n.nodepool == pool.name) {
            if let Some(&it) = region.types().iter().find(|t| t.name == pn.instance_type) {
                capacity = capacity.plus(&pool.shaped(it).capacity);
            }
            count += 1;
        }
        for (name, limit) in &pool.limits {
            let planned = if name == "nodes" { count } else { capacity.get(name) };
            let used = pool.used.get(name).copied().unwrap_or(0) + planned;
            if used > *limit {
                v.push(Violation::LimitExceeded {
                    nodepool: pool.name.clone(),
                    resource: name.clone(),
                    limit: *limit,
                    used,
                });
            }
        }
    }
}

/// Each placed pod against its node: preemption, volumes, taints, node affinity, host
/// ports, attach limits.
fn pods_on_nodes(
    snapshot: &Snapshot,
    state: &FinalState<'_>,
    preempting: &HashMap<String, String>,
    volumes: &HashMap<String, PodVolumes>,
    v: &mut Vec<Violation>,
) {
    for p in state.placed.iter().filter(|p| p.pending) {
        let node = &state.nodes[p.node];
        if node.new.is_some()
            && let Some(nominated) = preempting.get(&p.key)
        {
            v.push(Violation::Preempting {
                pod: p.key.clone(),
                nominated: nominated.clone(),
            });
        }
        let Some(spec) = p.pod.spec.as_ref() else { continue };
        let vol = volumes.get(&p.key);
        if let Some(reason) = vol.and_then(|vol| vol.bad.clone()) {
            v.push(Violation::VolumeBlocked {
                pod: p.key.clone(),
                node: node.name.clone(),
                reason,
            });
        }
        let tols = spec.tolerations.clone().unwrap_or_default();
        if let Some(t) = tolerations::untolerated(&tols, &node.taints) {
            v.push(Violation::Untolerated {
                pod: p.key.clone(),
                taint: t.key.clone(),
                node: node.name.clone(),
            });
        }
        if !node_affinity::matches(spec, &node.labels, node.node_name.as_deref()) {
            v.push(Violation::NoBranch {
                pod: p.key.clone(),
                node: node.name.clone(),
            });
        }
        let mut labels = node.labels.clone();
        if node.new.is_some()
            && let Some(zone) = labels.get(crate::model::well_known::ZONE).cloned()
        {
            labels.insert(EBS_ZONE.into(), zone);
        }
        if vol.is_some_and(|vol| !vol.node_ok(&labels, node.node_name.as_deref())) {
            v.push(Violation::VolumeConflict {
                pod: p.key.clone(),
                node: node.name.clone(),
            });
        }
    }

    // Host ports and attached volumes, node by node.
    let mut by_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, p) in state.placed.iter().enumerate() {
        by_node.entry(p.node).or_default().push(i);
    }
    for (n, list) in &by_node {
        let node = &state.nodes[*n];
        if !list.iter().any(|&i| state.placed[i].pending) {
            continue;
        }
        let mut taken: Vec<ports::HostPort> = node.daemon_ports.clone();
        for &i in list.iter().filter(|&&i| !state.placed[i].pending) {
            taken.extend(state.placed[i].pod.spec.iter().flat_map(ports::of_spec));
        }
        for &i in list.iter().filter(|&&i| state.placed[i].pending) {
            let p = &state.placed[i];
            for hp in p.pod.spec.iter().flat_map(ports::of_spec) {
                if taken.iter().any(|t| t.conflicts(&hp)) {
                    v.push(Violation::HostPortConflict {
                        pod: p.key.clone(),
                        port: hp.port,
                        node: node.name.clone(),
                    });
                }
                taken.push(hp);
            }
        }
        // Bound pods' volumes count too where the node has limits (kube's CSILimits counts
        // every pod on the node).
        let bound: Vec<(usize, PodVolumes)> = if node.attach_limits.is_empty() {
            Vec::new()
        } else {
            list.iter()
                .filter(|&&i| !state.placed[i].pending)
                .map(|&i| (i, PodVolumes::of(state.placed[i].pod, snapshot)))
                .collect()
        };
        let mut attached: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
        let mut added: HashSet<&str> = HashSet::new();
        for (_, vol) in &bound {
            for (driver, id) in &vol.attached {
                attached.entry(driver.as_str()).or_default().insert(id.as_str());
            }
        }
        for &i in list {
            let p = &state.placed[i];
            let Some(vol) = volumes.get(&p.key).filter(|_| p.pending) else {
                continue;
            };
            for (driver, id) in &vol.attached {
                if attached.entry(driver.as_str()).or_default().insert(id.as_str()) {
                    added.insert(driver.as_str());
                }
            }
        }
        for (driver, ids) in &attached {
            let limit = node
                .attach_limits
                .get(*driver)
                .copied()
                .or((node.new.is_some() && *driver == EBS_DRIVER).then_some(EBS_LIMIT_NEW_NODE));
            if let Some(limit) = limit
                && ids.len() as i64 > limit
                && added.contains(driver)
            {
                v.push(Violation::AttachLimit {
                    node: node.name.clone(),
                    driver: driver.to_string(),
                    count: ids.len(),
                    limit,
                });
            }
        }
    }
}
