//! Sorting the pending pods into classes of identical scheduling constraints, and
//! precomputing each class once: its relaxation levels, its requirement branches and
//! eligible zones at each, the domains of its spreads, its topology groups and the hard
//! spreads that count it (Karpenter computes a pod's `PodData` in
//! `Scheduler.updateCachedPodData`, its spreads' domains in `Topology.countDomains` and
//! `TopologyGroup.domainMinCount`).

use std::collections::{BTreeSet, HashMap};

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::class_state::ClassState;
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, PodId, TemplateId};
use crate::decide::provisioning::scheduler::level::Level;
use crate::decide::provisioning::scheduler::node_view::NodeView;
use crate::decide::provisioning::scheduler::relaxation::{branches_at, levels};
use crate::decide::provisioning::scheduler::spread_owner::SpreadOwner;
use crate::decide::provisioning::taints::{untolerated, untolerated_by_nodepool};
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::topology::Topology;
use crate::model::Requirements;
use crate::model::well_known as wk;

/// The pending pods sorted into classes.
pub(super) struct Classes {
    /// Each class.
    pub(super) classes: IdVec<ClassId, Class>,
    /// Each class's state, all pods unplaced.
    pub(super) progress: IdVec<ClassId, ClassState>,
    /// Each pod's class.
    pub(super) class_of: IdVec<PodId, ClassId>,
    /// The hard zonal spreads, by topology group, with the classes that own them.
    pub(super) zonal_owners: Vec<(usize, Vec<SpreadOwner>)>,
}

/// Sorts the pods into classes and precomputes each class. The topology must have every
/// pending pod registered and every bound pod recorded; `existing_zones` are the zones of
/// the usable existing nodes.
pub(super) fn classes(
    pods: &IdVec<PodId, PodInfo>,
    templates: &IdVec<TemplateId, Template>,
    existing_zones: &[String],
    nodes: &[NodeView],
    topology: &Topology,
) -> Classes {
    let mut keys: HashMap<u64, Vec<ClassId>> = HashMap::new();
    let mut reps: IdVec<ClassId, PodId> = IdVec::new();
    let mut progress: IdVec<ClassId, ClassState> = IdVec::new();
    let mut class_of = IdVec::new();
    for (i, p) in pods.enumerate() {
        let same = keys.entry(class_hash(p)).or_default();
        let c = match same.iter().copied().find(|&c| same_class(&pods[reps[c]], p)) {
            Some(c) => c,
            None => {
                let c = reps.push(i);
                progress.push(ClassState::new());
                same.push(c);
                c
            }
        };
        progress[c].remaining += 1;
        class_of.push(c);
    }

    let template_zones: Vec<Vec<String>> = templates
        .iter()
        .map(|t| {
            let mut z: Vec<String> = t
                .types
                .iter()
                .flat_map(|o| o.offers.iter().map(|o| o.zone.clone()))
                .collect();
            z.sort();
            z.dedup();
            z
        })
        .collect();
    let mut classes: IdVec<ClassId, Class> = reps
        .iter()
        .map(|&rep| {
            let pod = &pods[rep];
            let levels = levels(pod, templates.iter().flat_map(|t| t.taints.iter()));
            let branches: Vec<Vec<Requirements>> = levels.iter().map(|l| branches_at(pod, *l)).collect();
            let zones = levels
                .iter()
                .zip(&branches)
                .map(|(l, b)| eligible_zones(pod, *l, b, templates, &template_zones, existing_zones))
                .collect();
            Class {
                rep,
                requests: pod.requests.clone(),
                per_node_cap: pod.per_node_cap(),
                levels,
                branches,
                zones,
                spread_domains: spread_domains(pod, templates, nodes),
                groups: topology.groups_of(pod),
                counted_in_spreads: Vec::new(),
            }
        })
        .collect();

    // Owners of hard spreads over bounded domains (not hostname), by group.
    let mut owners: HashMap<usize, Vec<SpreadOwner>> = HashMap::new();
    for (id, class) in classes.enumerate() {
        for (i, sp) in pods[class.rep].spreads.iter().enumerate() {
            if sp.hard
                && sp.key != wk::HOSTNAME
                && let Some(g) = Topology::spread_group(&class.groups, i)
            {
                owners.entry(g).or_default().push(SpreadOwner {
                    class: id,
                    max_skew: sp.max_skew,
                    domains: class.spread_domains.get(i).cloned().flatten(),
                    min_domains: sp.min_domains,
                    counts_every_node: sp.inclusion.affinity.is_none(),
                });
            }
        }
    }
    for class in classes.iter_mut() {
        let p = &pods[class.rep];
        class.counted_in_spreads = topology
            .groups_counting(&p.namespace, &p.labels)
            .into_iter()
            .filter_map(|g| {
                owners
                    .get(&g)
                    .map(|o| (g, topology.group_key(g).to_string(), o.clone()))
            })
            .collect();
    }
    let mut zonal_owners: Vec<(usize, Vec<SpreadOwner>)> = owners
        .into_iter()
        .filter(|(g, _)| topology.group_key(*g) == wk::ZONE)
        .collect();
    zonal_owners.sort_by_key(|(g, _)| *g);
    Classes {
        classes,
        progress,
        class_of,
        zonal_owners,
    }
}

/// The zones a pod with these branches may go to: the existing nodes', and those of every
/// NodePool whose taints it tolerates at `level` and whose requirements and the pod's allow
/// the zone.
fn eligible_zones(
    pod: &PodInfo,
    level: Level,
    branches: &[Requirements],
    templates: &IdVec<TemplateId, Template>,
    template_zones: &[Vec<String>],
    existing_zones: &[String],
) -> Vec<String> {
    let mut out = existing_zones.to_vec();
    for (t, zones) in templates.iter().zip(template_zones) {
        if untolerated_by_nodepool(&pod.tolerations, &t.taints, level.tolerate_prefer_no_schedule).is_some() {
            continue;
        }
        for z in zones {
            let allowed = |r: &Requirements| r.get(wk::ZONE).is_none_or(|r| r.has(z));
            if branches.iter().any(allowed) && allowed(&t.requirements) {
                out.push(z.clone());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The domains of each of a pod's spreads, for its global minimum (kube-scheduler's
/// podtopologyspread `calPreFilterState`; Karpenter's `TopologyGroup.domainMinCount` over
/// the pod's domains):
/// - the values of the nodes that exist, when they have every key the pod spreads on and
///   pass the spread's node inclusion policies;
/// - the values new nodes could take in the NodePools the pod can launch into (it
///   tolerates their taints and its requirements intersect theirs): zones and capacity
///   types from their offerings, other keys from their labels, their instance types'
///   labels or their requirements' values, as far as the pod's own requirements allow them
///   (Karpenter's `podDomains`, whatever the policy).
///
/// `None` for a hostname, or a key a NodePool lets take any value: a new node opens a new
/// domain there, so the minimum is 0. Pods of other NodePools may still open domains this
/// does not count (a tainted pool's nodes, under `nodeTaintsPolicy: Ignore`).
fn spread_domains(
    pod: &PodInfo,
    templates: &IdVec<TemplateId, Template>,
    nodes: &[NodeView],
) -> Vec<Option<Vec<String>>> {
    let usable: Vec<&Template> = templates
        .iter()
        .filter(|t| untolerated(&pod.tolerations, &t.taints).is_none())
        .filter(|t| pod.branches.iter().any(|b| t.requirements.intersects(b).is_ok()))
        .collect();
    pod.spreads
        .iter()
        .map(|s| {
            if s.key == wk::HOSTNAME {
                return None;
            }
            let mut out = BTreeSet::new();
            for n in nodes {
                let has_keys = pod.spreads.iter().all(|o| n.labels.contains_key(&o.key));
                if has_keys
                    && s.inclusion.admits_labels(&n.labels, &n.taints)
                    && let Some(v) = n.labels.get(&s.key)
                {
                    out.insert(v.clone());
                }
            }
            // Karpenter's `podDomains`: the pod's own requirements bound the new domains
            // whatever the policy (a node it cannot go to is opened only for other pods).
            let allowed = |v: &str| pod.branches.iter().any(|b| b.get(&s.key).is_none_or(|r| r.has(v)));
            for t in &usable {
                let values = template_values(t, &s.key)?;
                out.extend(values.into_iter().filter(|v| allowed(v)));
            }
            Some(out.into_iter().collect())
        })
        .collect()
}

/// The values a new node of a template can take for a label key; `None` when any value
/// is possible (a requirement like `Exists` on a key only the NodePool defines).
fn template_values(t: &Template, key: &str) -> Option<BTreeSet<String>> {
    let allowed = |v: &String| t.requirements.get(key).is_none_or(|r| r.has(v));
    let values: BTreeSet<String> = match key {
        wk::ZONE => t
            .types
            .iter()
            .flat_map(|o| o.offers.iter().map(|o| o.zone.clone()))
            .collect(),
        wk::CAPACITY_TYPE => t
            .types
            .iter()
            .flat_map(|o| o.offers.iter().map(|o| o.capacity_type.label().to_string()))
            .collect(),
        _ => match t.labels.get(key) {
            Some(v) => BTreeSet::from([v.clone()]),
            None => {
                let from_types: BTreeSet<String> = t.types.iter().filter_map(|o| o.labels.get(key).cloned()).collect();
                if !from_types.is_empty() {
                    from_types
                } else {
                    match t.requirements.get(key) {
                        Some(r) if !r.is_complement() => r.values().clone(),
                        Some(_) => return None,
                        None => BTreeSet::new(),
                    }
                }
            }
        },
    };
    Some(values.into_iter().filter(allowed).collect())
}

/// A hash of everything that makes two pods schedule alike (all but the name); pods
/// with equal hashes are then compared field by field.
fn class_hash(p: &PodInfo) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        &p.namespace,
        &p.labels,
        &p.requests,
        &p.branches,
        &p.preferred,
        &p.spreads,
    )
        .hash(&mut h);
    (
        &p.affinity,
        &p.anti_affinity,
        &p.preferred_affinity,
        &p.preferred_anti_affinity,
        &p.host_ports,
    )
        .hash(&mut h);
    p.tolerations.len().hash(&mut h);
    h.finish()
}

/// Whether two pods schedule alike.
fn same_class(a: &PodInfo, b: &PodInfo) -> bool {
    a.namespace == b.namespace
        && a.labels == b.labels
        && a.requests == b.requests
        && a.branches == b.branches
        && a.preferred == b.preferred
        && a.tolerations == b.tolerations
        && a.spreads == b.spreads
        && a.affinity == b.affinity
        && a.anti_affinity == b.anti_affinity
        && a.preferred_affinity == b.preferred_affinity
        && a.preferred_anti_affinity == b.preferred_anti_affinity
        && a.host_ports == b.host_ports
}
