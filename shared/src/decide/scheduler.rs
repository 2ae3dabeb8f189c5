//! The scheduling simulation: places pending pods on existing nodes, then on new nodes,
//! honouring every constraint kube-scheduler checks.
//!
//! Pods are grouped into classes of identical scheduling constraints (a Deployment's pods
//! form one) and taken first-fit-decreasing by CPU then memory, as Karpenter does; pods
//! with required pod affinity come last, so that the pods they follow are placed first.
//! Each pod tries, in order:
//!
//! 1. existing nodes (Ready, schedulable) with room, as kube-scheduler would;
//! 2. new nodes already planned, first fit, within each node's reserved mix (see
//!    [`super::packer`]); a per-class cursor skips nodes that already refused the class
//!    for lack of room, which keeps this step amortised O(nodes + pods);
//! 3. a new node from the heaviest NodePool that can take it: the zone and capacity type
//!    that keep its spreads balanced at the lowest price, and the instance type that
//!    [`super::packer`] finds most cost-effective for the pods still waiting.
//!
//! A pod no node takes is retried with its preferences relaxed, one level at a time:
//! preferred pod (anti-)affinity, then preferred node affinity terms (lightest first),
//! then `ScheduleAnyway` spreads. When every level fails, the reason of the most specific
//! failure is reported.
//!
//! At the end each new node takes the cheapest instance type that holds its pods, with up
//! to 60 alternatives that also do, for CreateFleet.
//!
//! Complexity: O(P log P) to sort, O(P·(E + C)) for existing nodes and cursors (E existing
//! nodes, C classes), and O(T·C²) per node opened (T candidate types).

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use k8s_openapi::api::core::v1::{Pod, Taint};

use super::daemonsets::DaemonSetInfo;
use super::packer::{self, ClassDemand, ResourcePrices, Supply};
use super::plan::{ExistingPlacement, MAX_ALTERNATIVES, PlannedNode, ProvisioningPlan, Unschedulable};
use super::pod::{HostPort, PodInfo, Volumes, is_provisionable, pod_key};
use super::taints::untolerated;
use super::templates::{self, Template};
use super::topology::{Domains, PodGroups, Strictness, Topology};
use crate::catalog::RegionCatalog;
use crate::model::pod_requests::effective_requests;
use crate::model::well_known as wk;
use crate::model::{CapacityType, Node, Requirements, Resources};
use crate::snapshot::Snapshot;

/// One relaxation level of a pod's preferences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Level {
    strict: Strictness,
    /// Preferred node affinity terms kept, heaviest first.
    node_prefs: usize,
}

fn levels(pod: &PodInfo) -> Vec<Level> {
    let n = pod.preferred.len();
    let has_pod_prefs = !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
    let has_soft = pod.spreads.iter().any(|s| !s.hard);
    let mut out = vec![Level {
        strict: Strictness {
            preferred_pod_affinity: true,
            soft_spreads: true,
        },
        node_prefs: n,
    }];
    let mut cur = out[0];
    if has_pod_prefs {
        cur.strict.preferred_pod_affinity = false;
        out.push(cur);
    }
    for k in (0..n).rev() {
        cur.node_prefs = k;
        out.push(cur);
    }
    if has_soft {
        cur.strict.soft_spreads = false;
        out.push(cur);
    }
    out
}

/// A pod's requirement branches at a level: each required branch with the kept preferred
/// terms added.
fn branches_at(pod: &PodInfo, level: Level) -> Vec<Requirements> {
    pod.branches
        .iter()
        .map(|b| {
            let mut b = b.clone();
            for (_, pref) in pod.preferred.iter().take(level.node_prefs) {
                b.add_all(pref);
            }
            b
        })
        .collect()
}

/// Labels of a node in two parts: the node's own and its instance type's.
struct Split<'a> {
    node: &'a BTreeMap<String, String>,
    instance: &'a BTreeMap<String, String>,
}

/// A planned node's labels before it has a hostname label of its own.
struct WithHost<'a> {
    hostname: &'a str,
    labels: Split<'a>,
}

impl Domains for WithHost<'_> {
    fn domain(&self, key: &str) -> Option<&str> {
        if key == wk::HOSTNAME {
            Some(self.hostname)
        } else {
            self.labels.domain(key)
        }
    }
}

impl Domains for Split<'_> {
    fn domain(&self, key: &str) -> Option<&str> {
        self.node
            .get(key)
            .or_else(|| self.instance.get(key))
            .map(String::as_str)
    }
}

fn matches_split(req: &Requirements, labels: &Split<'_>) -> bool {
    req.iter().all(|r| match labels.domain(r.key()) {
        Some(v) => r.has(v),
        None => r.allows_absent(),
    })
}

struct ExistingNode {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    free: Resources,
    ports: Vec<HostPort>,
    placed: Vec<usize>,
}

struct NewNode {
    template: usize,
    zone: String,
    capacity_type: CapacityType,
    /// Node labels: the template's, zone, capacity type, region and a hostname.
    labels: BTreeMap<String, String>,
    /// Index (into the template's types) of the type the node is filled towards.
    target: usize,
    /// Types that still satisfy every pod on the node, cheapest first.
    candidates: Vec<usize>,
    used: Resources,
    /// The target's net allocatable less what the pods use: room for reserved slots.
    free: Resources,
    /// `free` less the reserved slots not yet filled: room for any pod.
    room: Resources,
    ports: Vec<HostPort>,
    pods: Vec<usize>,
    /// Slots reserved per class.
    quota: HashMap<usize, u32>,
    /// Pods per class on the node.
    class_count: HashMap<usize, u32>,
}

struct Class {
    pods: Vec<usize>,
    level: usize,
    /// Per zone, the position in that zone's planned nodes before which every node has
    /// refused the class for good.
    cursors: HashMap<String, usize>,
    /// Pods not yet placed.
    remaining: u32,
    /// Slots reserved for the class on planned nodes and not yet filled.
    reserved: u32,
    /// Planned nodes holding such slots, in the order they were opened.
    quota_nodes: Vec<usize>,
    per_node_cap: u32,
}

impl Class {
    /// Pods neither placed nor already provided for by a reserved slot.
    fn unreserved(&self) -> u32 {
        self.remaining.saturating_sub(self.reserved)
    }
}

/// How many of a class's unreserved pods one node in one zone can expect: all of them,
/// or for a class spread across zones its share of one zone.
fn per_zone_share(unreserved: u32, pod: &PodInfo, zones: usize) -> u32 {
    if pod.spreads.iter().any(|s| s.hard && s.key == wk::ZONE) && zones > 1 {
        unreserved.div_ceil(zones as u32)
    } else {
        unreserved
    }
}

/// Why a pod could not be placed, most specific last.
#[derive(Default)]
struct Why {
    reasons: Vec<String>,
}

impl Why {
    fn add(&mut self, r: String) {
        if !self.reasons.contains(&r) {
            self.reasons.push(r);
        }
    }
    fn text(&self) -> String {
        if self.reasons.is_empty() {
            "no NodePool can launch a node for it".into()
        } else {
            self.reasons.join("; ")
        }
    }
}

/// What a run decided, with what the lower bound needs.
pub struct Outcome {
    /// The plan (without its lower bound).
    pub plan: ProvisioningPlan,
    bound: BoundInput,
}

struct BoundInput {
    templates: Vec<Template>,
    pods: Vec<PodInfo>,
    existing_free: Resources,
}

impl Outcome {
    /// The lower bound on the cost of placing the same pods (see [`super::lower_bound`]).
    pub fn lower_bound(&self) -> f64 {
        let pods: Vec<&PodInfo> = self.bound.pods.iter().collect();
        super::lower_bound::lower_bound(&self.bound.templates, &pods, &self.bound.existing_free)
    }
}

/// Per-template precomputations: the (zone, capacity type) pairs it offers, with the node
/// labels of each.
struct OfferKey {
    zone: String,
    capacity_type: CapacityType,
    labels: BTreeMap<String, String>,
    /// Price of each of the template's types here (None: not offered).
    prices: Vec<Option<f64>>,
    /// The types offered here, cheapest first.
    by_price: Vec<usize>,
}

type Candidates = BTreeMap<usize, Vec<usize>>;
/// The classes owning a hard zonal spread on a group, with their maxSkew.
type Owners = Vec<(usize, i32)>;
/// Types worth evaluating, with their prices.
type Shortlist = Vec<(usize, f64)>;

/// The state of one planning run.
pub struct Scheduler {
    templates: Vec<Template>,
    offer_keys: Vec<Vec<OfferKey>>,
    pods: Vec<PodInfo>,
    classes: Vec<Class>,
    class_of: Vec<usize>,
    class_requests: HashMap<usize, Resources>,
    /// Per class: its relaxation levels, and its branches and eligible zones at each.
    class_levels: Vec<Vec<Level>>,
    class_branches: Vec<Vec<Vec<Requirements>>>,
    class_zones: Vec<Vec<Vec<String>>>,
    class_groups: Vec<PodGroups>,
    /// Per class: the zonal spread groups its pods count in, with the classes that own a
    /// hard spread on each (class, maxSkew).
    counted_in_zone_spreads: Vec<Vec<(usize, Owners)>>,
    existing: Vec<ExistingNode>,
    new_nodes: Vec<NewNode>,
    /// Planned nodes per zone, in the order they were opened.
    zone_nodes: BTreeMap<String, Vec<usize>>,
    topology: Topology,
    prices: Vec<Option<ResourcePrices>>,
    /// Per template: capacity and node count of the planned nodes, for limits.
    planned: Vec<(Resources, i64)>,
    /// (class, level, template) → offer key index → types that take the pod alone;
    /// `Err` holds why none does.
    offer_cache: HashMap<(usize, usize, usize), Rc<Result<Candidates, String>>>,
    /// (class, level, template, offer key) → the types worth evaluating for the class.
    pareto_cache: HashMap<(usize, usize, usize, usize), Rc<Shortlist>>,
    /// (class, level, template, type, offer key) → whether the class's branches match.
    match_cache: HashMap<(usize, usize, usize, usize, usize), bool>,
    plan: ProvisioningPlan,
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

fn is_live(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p != "Succeeded" && p != "Failed")
}

fn offer_keys(t: &Template, region: &str) -> Vec<OfferKey> {
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
            let prices: Vec<Option<f64>> = t.types.iter().map(|o| o.price(&zone, capacity_type)).collect();
            let mut by_price: Vec<usize> = (0..t.types.len()).filter(|&i| prices[i].is_some()).collect();
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

impl Scheduler {
    /// Reads the snapshot and prepares the run.
    pub fn new(snapshot: &Snapshot, region: &RegionCatalog<'_>) -> Self {
        let mut plan = ProvisioningPlan::default();
        for (object, reason) in &snapshot.skipped {
            plan.skipped.push(templates::Skipped {
                object: object.clone(),
                reason: reason.clone(),
            });
        }
        for (pod, reason) in &snapshot.bad_pods {
            plan.unschedulable.push(Unschedulable {
                pod: pod.clone(),
                reason: format!("invalid pod: {reason}"),
            });
        }
        let mut daemonsets = Vec::new();
        for ds in &snapshot.daemonsets {
            match DaemonSetInfo::from_k8s(ds) {
                Ok(d) => daemonsets.push(d),
                Err(reason) => plan.skipped.push(templates::Skipped {
                    object: "DaemonSet".into(),
                    reason: crate::error_chain::Chain(&reason).to_string(),
                }),
            }
        }
        let (templates, skipped) = templates::build(
            &snapshot.nodepools,
            &snapshot.nodeclasses,
            region,
            &daemonsets,
            &snapshot.nodes,
        );
        plan.skipped.extend(skipped);
        let offer_keys = templates.iter().map(|t| offer_keys(t, region.region())).collect();

        let volumes = Volumes::new(&snapshot.pvcs, &snapshot.pvs);
        let mut pods = Vec::new();
        for p in snapshot.pods.iter().filter(|p| is_provisionable(p)) {
            match PodInfo::from_pod(p, &volumes) {
                Ok(info) => pods.push(info),
                Err(reason) => plan.unschedulable.push(Unschedulable {
                    pod: pod_key(p),
                    reason: format!("invalid pod: {}", crate::error_chain::Chain(&reason)),
                }),
            }
        }

        let mut topology = Topology::default();
        for p in &pods {
            topology.register(p);
        }

        // Existing nodes and what is bound to them.
        let mut all_nodes = Vec::new();
        let mut by_name = HashMap::new();
        for n in &snapshot.nodes {
            let Ok(node) = Node::from_k8s(n) else { continue };
            let mut labels = node.labels.clone();
            labels
                .entry(wk::HOSTNAME.to_string())
                .or_insert_with(|| node.name.clone());
            let usable = node.ready && !node.unschedulable && !node.terminating;
            by_name.insert(node.name.clone(), all_nodes.len());
            all_nodes.push((
                usable,
                ExistingNode {
                    name: node.name.clone(),
                    labels,
                    taints: node.taints.clone(),
                    free: node.allocatable.clone(),
                    ports: Vec::new(),
                    placed: Vec::new(),
                },
            ));
        }
        for p in snapshot.pods.iter().filter(|p| is_live(p)) {
            let Some(name) = p.spec.as_ref().and_then(|s| s.node_name.as_ref()) else {
                continue;
            };
            let Some(&i) = by_name.get(name) else { continue };
            let node = &mut all_nodes[i].1;
            if let Some(spec) = &p.spec
                && let Ok(mut r) = effective_requests(spec)
            {
                r.pods += 1;
                node.free = node.free.minus(&r);
            }
            if let Ok(info) = PodInfo::from_pod(p, &volumes) {
                node.ports.extend(info.host_ports.iter().cloned());
                topology.record(&info.namespace, &info.labels, &info.anti_affinity, &node.labels);
            }
        }
        let existing_zones: Vec<String> = all_nodes
            .iter()
            .filter(|(u, _)| *u)
            .filter_map(|(_, n)| n.labels.get(wk::ZONE).cloned())
            .collect();
        let existing: Vec<ExistingNode> = all_nodes.into_iter().filter(|(u, _)| *u).map(|(_, n)| n).collect();

        // Classes.
        let mut keys: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut classes: Vec<Class> = Vec::new();
        let mut class_of = Vec::with_capacity(pods.len());
        for (i, p) in pods.iter().enumerate() {
            let same = keys.entry(class_hash(p)).or_default();
            let c = match same.iter().copied().find(|&c| same_class(&pods[classes[c].pods[0]], p)) {
                Some(c) => c,
                None => {
                    classes.push(Class {
                        pods: Vec::new(),
                        level: 0,
                        cursors: HashMap::new(),
                        remaining: 0,
                        reserved: 0,
                        quota_nodes: Vec::new(),
                        per_node_cap: p.per_node_cap(),
                    });
                    same.push(classes.len() - 1);
                    classes.len() - 1
                }
            };
            classes[c].pods.push(i);
            classes[c].remaining += 1;
            class_of.push(c);
        }
        let class_requests = classes
            .iter()
            .enumerate()
            .map(|(c, cl)| (c, pods[cl.pods[0]].requests.clone()))
            .collect();
        let class_levels: Vec<Vec<Level>> = classes.iter().map(|c| levels(&pods[c.pods[0]])).collect();
        let class_branches: Vec<Vec<Vec<Requirements>>> = classes
            .iter()
            .zip(&class_levels)
            .map(|(c, ls)| ls.iter().map(|l| branches_at(&pods[c.pods[0]], *l)).collect())
            .collect();
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
        let class_zones = classes
            .iter()
            .zip(&class_branches)
            .map(|(c, per_level)| {
                let pod = &pods[c.pods[0]];
                per_level
                    .iter()
                    .map(|branches| {
                        let mut out = existing_zones.clone();
                        for (t, zones) in templates.iter().zip(&template_zones) {
                            if untolerated(&pod.tolerations, &t.taints).is_some() {
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
                    })
                    .collect()
            })
            .collect();

        let class_groups: Vec<PodGroups> = classes.iter().map(|c| topology.groups_of(&pods[c.pods[0]])).collect();
        // Owners of hard zonal spreads, by group.
        let mut owners: HashMap<usize, Vec<(usize, i32)>> = HashMap::new();
        for (c, cl) in classes.iter().enumerate() {
            for (i, sp) in pods[cl.pods[0]].spreads.iter().enumerate() {
                if sp.hard
                    && sp.key == wk::ZONE
                    && let Some(g) = Topology::spread_group(&class_groups[c], i)
                {
                    owners.entry(g).or_default().push((c, sp.max_skew));
                }
            }
        }
        let counted_in_zone_spreads = classes
            .iter()
            .map(|cl| {
                let p = &pods[cl.pods[0]];
                topology
                    .groups_counting(&p.namespace, &p.labels)
                    .into_iter()
                    .filter_map(|g| owners.get(&g).map(|o| (g, o.clone())))
                    .collect()
            })
            .collect();

        // Resource prices per template, from the cover LP of all pending demand.
        let demand = pods.iter().fold(Resources::default(), |acc, p| acc.plus(&p.requests));
        let prices = templates
            .iter()
            .map(|t| {
                let supplies: Vec<Supply> = t
                    .types
                    .iter()
                    .map(|o| Supply {
                        cpu: o.net.cpu_millis as f64,
                        memory: o.net.memory as f64,
                        price: o.min_price(),
                    })
                    .collect();
                packer::cover_lp(&supplies, demand.cpu_millis as f64, demand.memory as f64).map(|(_, y)| y)
            })
            .collect();
        let planned = vec![(Resources::default(), 0); templates.len()];

        Scheduler {
            templates,
            offer_keys,
            pods,
            classes,
            class_of,
            class_requests,
            class_levels,
            class_branches,
            class_zones,
            class_groups,
            counted_in_zone_spreads,
            existing,
            new_nodes: Vec::new(),
            zone_nodes: BTreeMap::new(),
            topology,
            prices,
            planned,
            offer_cache: HashMap::new(),
            pareto_cache: HashMap::new(),
            match_cache: HashMap::new(),
            plan,
        }
    }

    fn check_topology(&self, pod: usize, li: usize, node: &impl Domains) -> Result<(), super::topology::Rejection> {
        let class = self.class_of[pod];
        let level = self.class_levels[class][li];
        let zones = &self.class_zones[class][li];
        self.topology.check(
            &self.pods[pod],
            &self.class_groups[class],
            node,
            level.strict,
            Some(zones),
        )?;
        match node.domain(wk::ZONE) {
            Some(zone) if !self.keeps_owners_balanced(class, zone) => {
                Err(super::topology::Rejection::Spread(wk::ZONE.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// Whether the pod's zonal constraints allow a node in `zone`.
    fn zone_allows(&self, pod: usize, li: usize, zone: &str) -> bool {
        let class = self.class_of[pod];
        let level = self.class_levels[class][li];
        let zones = &self.class_zones[class][li];
        let node = BTreeMap::from([(wk::ZONE.to_string(), zone.to_string())]);
        self.topology
            .check_keys(
                &self.pods[pod],
                &self.class_groups[class],
                &node,
                level.strict,
                Some(zones),
                |k| k == wk::ZONE,
            )
            .is_ok()
            && self.keeps_owners_balanced(class, zone)
    }

    /// Whether one more pod of `class` in `zone` keeps every hard zonal spread that counts
    /// it within maxSkew for the pods that own it, over their own eligible zones. The
    /// scheduler checks a spread only when placing its owner; this keeps the final state
    /// valid for owners placed earlier, whose eligible zones may differ from this pod's.
    fn keeps_owners_balanced(&self, class: usize, zone: &str) -> bool {
        self.counted_in_zone_spreads[class].iter().all(|(g, owners)| {
            owners.iter().all(|&(owner, max_skew)| {
                let level = self.classes[owner]
                    .level
                    .min(self.class_zones[owner].len().saturating_sub(1));
                let Some(eligible) = self.class_zones[owner].get(level) else {
                    return true;
                };
                if !eligible.iter().any(|z| z == zone) {
                    return true;
                }
                let min = eligible
                    .iter()
                    .map(|z| self.topology.count_of(*g, z))
                    .min()
                    .unwrap_or(0);
                self.topology.count_of(*g, zone) + 1 - min <= max_skew
            })
        })
    }

    fn try_existing(&mut self, pod: usize, li: usize) -> bool {
        let p = &self.pods[pod];
        let branches = &self.class_branches[self.class_of[pod]][li];
        for i in 0..self.existing.len() {
            let n = &self.existing[i];
            if p.requests.fits_in(&n.free).is_err()
                || untolerated(&p.tolerations, &n.taints).is_some()
                || !branches.iter().any(|b| b.matches_labels(&n.labels).is_ok())
                || p.host_ports.iter().any(|a| n.ports.iter().any(|b| a.conflicts(b)))
                || self.check_topology(pod, li, &n.labels).is_err()
            {
                continue;
            }
            let n = &mut self.existing[i];
            n.free = n.free.minus(&p.requests);
            n.ports.extend(p.host_ports.iter().cloned());
            n.placed.push(pod);
            self.topology
                .record(&p.namespace, &p.labels, &p.anti_affinity, &n.labels);
            let class = &mut self.classes[self.class_of[pod]];
            class.remaining = class.remaining.saturating_sub(1);
            return true;
        }
        false
    }

    /// Whether a pod joins a planned node. `Err(true)` when the node refuses the pod's class
    /// for good (no room, taints, ports, requirements, hostname constraints: none of these
    /// turn in the class's favour as the plan grows), `Err(false)` when it may accept later.
    fn try_new_node(&mut self, pod: usize, n: usize, li: usize) -> Result<(), bool> {
        let p = &self.pods[pod];
        let class = self.class_of[pod];
        let node = &self.new_nodes[n];
        let t = &self.templates[node.template];
        let target = &t.types[node.target];
        let quota = node.quota.get(&class).copied().unwrap_or(0);
        let room = if quota > 0 { &node.free } else { &node.room };
        if p.requests.fits_in(room).is_err() {
            return Err(true);
        }
        let count = node.class_count.get(&class).copied().unwrap_or(0);
        if count >= self.classes[class].per_node_cap {
            return Err(true);
        }
        if untolerated(&p.tolerations, &t.taints).is_some() {
            return Err(true);
        }
        if p.host_ports.iter().any(|a| node.ports.iter().any(|b| a.conflicts(b))) {
            return Err(true);
        }
        let branches = &self.class_branches[class][li];
        let fits_type = |i: &usize| {
            let o = &t.types[*i];
            let split = Split {
                node: &node.labels,
                instance: &o.labels,
            };
            branches.iter().any(|b| matches_split(b, &split))
        };
        let seen = count > 0;
        if !seen && !fits_type(&node.target) {
            return Err(true);
        }
        let split = Split {
            node: &node.labels,
            instance: &target.labels,
        };
        if let Err(e) = self.check_topology(pod, li, &split) {
            return Err(e.is_permanent_on_a_node());
        }
        let candidates: Option<Vec<usize>> =
            (!seen).then(|| node.candidates.iter().copied().filter(fits_type).collect());
        let node = &mut self.new_nodes[n];
        if let Some(c) = candidates {
            node.candidates = c;
        }
        node.used = node.used.plus(&p.requests);
        node.free = node.free.minus(&p.requests);
        if let Some(q) = node.quota.get_mut(&class)
            && *q > 0
        {
            *q -= 1;
            self.classes[class].reserved = self.classes[class].reserved.saturating_sub(1);
        } else {
            node.room = node.room.minus(&p.requests);
        }
        node.ports.extend(p.host_ports.iter().cloned());
        node.pods.push(pod);
        *node.class_count.entry(class).or_insert(0) += 1;
        let instance = &self.templates[node.template].types[node.target].labels;
        let split = Split {
            node: &node.labels,
            instance,
        };
        self.topology.record(&p.namespace, &p.labels, &p.anti_affinity, &split);
        self.classes[class].remaining = self.classes[class].remaining.saturating_sub(1);
        Ok(())
    }

    fn limits_allow(&self, t: usize, capacity: &Resources) -> bool {
        let tmpl = &self.templates[t];
        let (planned, planned_nodes) = &self.planned[t];
        tmpl.limits.iter().all(|(name, limit)| {
            let used = tmpl.used.get(name).copied().unwrap_or(0);
            if name == "nodes" {
                used + planned_nodes < *limit
            } else {
                used + planned.get(name) + capacity.get(name) <= *limit
            }
        })
    }

    /// The offer keys and types of a template that take a pod of `class` alone.
    fn candidates_for(&mut self, class: usize, li: usize, ti: usize) -> Rc<Result<Candidates, String>> {
        if let Some(c) = self.offer_cache.get(&(class, li, ti)) {
            return Rc::clone(c);
        }
        let t = &self.templates[ti];
        let p = &self.pods[self.classes[class].pods[0]];
        let branches = &self.class_branches[class][li];
        let result = (|| {
            if let Some(taint) = untolerated(&p.tolerations, &t.taints) {
                return Err(format!(
                    "taints: NodePool {} has taint {}={}:{} that the pod does not tolerate",
                    t.name,
                    taint.key,
                    taint.value.as_deref().unwrap_or_default(),
                    taint.effect
                ));
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
                return Err(format!("requirements: NodePool {}: {detail}", t.name));
            }
            let mut out = Candidates::new();
            let mut any_label_match = false;
            for (k, key) in self.offer_keys[ti].iter().enumerate() {
                for (i, o) in t.types.iter().enumerate() {
                    if key.prices[i].is_none() {
                        continue;
                    }
                    let split = Split {
                        node: &key.labels,
                        instance: &o.labels,
                    };
                    if !compatible.iter().any(|b| matches_split(b, &split)) {
                        continue;
                    }
                    any_label_match = true;
                    if p.requests.fits_in(&o.net).is_ok() {
                        out.entry(k).or_default().push(i);
                    }
                }
            }
            if out.is_empty() {
                return Err(if any_label_match {
                    format!(
                        "resources: no instance type in NodePool {} fits requests {}",
                        t.name, p.requests
                    )
                } else {
                    format!(
                        "requirements: no instance type offered by NodePool {} matches the pod's node requirements",
                        t.name
                    )
                });
            }
            Ok(out)
        })();
        let result = Rc::new(result);
        self.offer_cache.insert((class, li, ti), Rc::clone(&result));
        result
    }

    fn open_node(&mut self, pod: usize, li: usize, why: &mut Why) -> bool {
        let class = self.class_of[pod];
        for ti in 0..self.templates.len() {
            let cached = self.candidates_for(class, li, ti);
            let by_offer = match cached.as_ref() {
                Ok(c) => c,
                Err(reason) => {
                    why.add(reason.clone());
                    continue;
                }
            };
            // Pick zone and capacity type: balanced spreads first, then price.
            let hostname = format!("carpool-planned-{}", self.new_nodes.len());
            let mut choices: Vec<(i64, f64, usize, usize)> = Vec::new();
            let mut topo_err = None;
            for (&k, types) in by_offer {
                let key = &self.offer_keys[ti][k];
                let t = &self.templates[ti];
                let split = WithHost {
                    hostname: &hostname,
                    labels: Split {
                        node: &key.labels,
                        instance: &t.types[types[0]].labels,
                    },
                };
                if let Err(e) = self.check_topology(pod, li, &split) {
                    topo_err = Some(e);
                    continue;
                }
                let groups = &self.class_groups[class];
                let spread_count: i64 = self.pods[pod]
                    .spreads
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.key == wk::ZONE || s.key == wk::CAPACITY_TYPE)
                    .map(|(i, s)| {
                        i64::from(
                            self.topology
                                .spread_count_of(groups, i, split.domain(&s.key).unwrap_or_default()),
                        )
                    })
                    .sum();
                let price = types
                    .iter()
                    .filter_map(|&i| key.prices[i])
                    .fold(f64::INFINITY, f64::min);
                let in_zone = self.zone_nodes.get(&key.zone).map_or(0, Vec::len);
                choices.push((spread_count, price, in_zone, k));
            }
            choices.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(a.1.total_cmp(&b.1))
                    .then(a.2.cmp(&b.2))
                    .then(a.3.cmp(&b.3))
            });
            let Some(&(_, _, _, k)) = choices.first() else {
                if let Some(e) = topo_err {
                    why.add(e.to_string());
                }
                continue;
            };
            let Some((target, quota)) = self.choose_target(ti, &by_offer[&k], k, class, li) else {
                why.add(format!(
                    "limits: NodePool {} has no room for another node under its limits",
                    self.templates[ti].name
                ));
                continue;
            };
            let t = &self.templates[ti];
            let key = &self.offer_keys[ti][k];
            let mut labels = key.labels.clone();
            labels.insert(wk::HOSTNAME.into(), hostname);
            let candidates = key.by_price.clone();
            let capacity = t.types[target].instance_type.capacity.clone();
            let n = self.new_nodes.len();
            for (&c, &q) in &quota {
                if q > 0 {
                    self.classes[c].reserved += q;
                    self.classes[c].quota_nodes.push(n);
                }
            }
            let net = t.types[target].net.clone();
            let reserved = quota.iter().fold(Resources::default(), |acc, (c, q)| {
                let mut acc = acc;
                for _ in 0..*q {
                    acc = acc.plus(&self.class_requests[c]);
                }
                acc
            });
            self.zone_nodes.entry(key.zone.clone()).or_default().push(n);
            self.new_nodes.push(NewNode {
                template: ti,
                zone: key.zone.clone(),
                capacity_type: key.capacity_type,
                labels,
                target,
                candidates,
                used: Resources::default(),
                room: net.minus(&reserved),
                free: net,
                ports: Vec::new(),
                pods: Vec::new(),
                quota,
                class_count: HashMap::new(),
            });
            if self.try_new_node(pod, n, li).is_ok() {
                let planned = &mut self.planned[ti];
                planned.0 = planned.0.plus(&capacity);
                planned.1 += 1;
                return true;
            }
            if let Some(node) = self.new_nodes.pop() {
                if let Some(list) = self.zone_nodes.get_mut(&node.zone) {
                    list.retain(|&x| x != n);
                }
                for (c, q) in node.quota {
                    self.classes[c].reserved = self.classes[c].reserved.saturating_sub(q);
                    self.classes[c].quota_nodes.retain(|&x| x != n);
                }
            }
            why.add(format!(
                "resources: NodePool {} could not place the pod on a new node",
                self.templates[ti].name
            ));
        }
        false
    }

    fn class_matches(&mut self, class: usize, ti: usize, type_idx: usize, k: usize) -> bool {
        let li = self.classes[class].level.min(self.class_levels[class].len() - 1);
        if let Some(&m) = self.match_cache.get(&(class, li, ti, type_idx, k)) {
            return m;
        }
        let key = &self.offer_keys[ti][k];
        let o = &self.templates[ti].types[type_idx];
        let split = Split {
            node: &key.labels,
            instance: &o.labels,
        };
        let m = self.class_branches[class][li].iter().any(|b| matches_split(b, &split));
        self.match_cache.insert((class, li, ti, type_idx, k), m);
        m
    }

    /// The most cost-effective type among `types` for a node opened by `class`, with the
    /// mix of classes it should hold.
    fn choose_target(
        &mut self,
        ti: usize,
        types: &[usize],
        k: usize,
        class: usize,
        li: usize,
    ) -> Option<(usize, HashMap<usize, u32>)> {
        let prices = self.prices[ti].unwrap_or(ResourcePrices {
            cpu: 1e-5,
            memory: 1e-12,
        });
        let shares: Vec<u32> = (0..self.classes.len())
            .map(|c| {
                let level = self.classes[c].level.min(self.class_zones[c].len().saturating_sub(1));
                let zones = self.class_zones[c].get(level).map_or(1, Vec::len);
                per_zone_share(self.classes[c].unreserved(), &self.pods[self.classes[c].pods[0]], zones)
            })
            .collect();
        let share = |c: usize| shares[c];
        let opening = ClassDemand {
            class,
            requests: self.class_requests[&class].clone(),
            remaining: share(class).max(1),
            per_node_cap: self.classes[class].per_node_cap,
        };
        let rep = self.pods[self.classes[class].pods[0]].clone();
        let tmpl = &self.templates[ti];
        // Classes that may share the node: tolerated, no pod affinity, no mutual hostname
        // anti-affinity with the opening class.
        let others: Vec<usize> = (0..self.classes.len())
            .filter(|&c| c != class && self.classes[c].unreserved() > 0)
            .filter(|&c| {
                let q = &self.pods[self.classes[c].pods[0]];
                untolerated(&q.tolerations, &tmpl.taints).is_none()
                    && q.affinity.is_empty()
                    && !q
                        .anti_affinity
                        .iter()
                        .any(|a| a.key == wk::HOSTNAME && a.matches(&rep.namespace, &rep.labels))
                    && !rep
                        .anti_affinity
                        .iter()
                        .any(|a| a.key == wk::HOSTNAME && a.matches(&q.namespace, &q.labels))
            })
            .collect();
        let remaining_value: f64 = std::iter::once(class)
            .chain(others.iter().copied())
            .map(|c| prices.value(&self.class_requests[&c]) * f64::from(share(c).max(1)))
            .sum();
        // Evaluate the most promising types first; stop once no type can beat the best.
        let shortlist = match self.pareto_cache.get(&(class, li, ti, k)) {
            Some(list) => Rc::clone(list),
            None => {
                let list = Rc::new(pareto(tmpl, types, &self.offer_keys[ti][k].prices));
                self.pareto_cache.insert((class, li, ti, k), Rc::clone(&list));
                list
            }
        };
        let tmpl = &self.templates[ti];
        let mut ranked: Vec<(usize, f64, f64)> = shortlist
            .iter()
            .map(|&(i, price)| {
                let cap_value = prices.value(&tmpl.types[i].net).min(remaining_value);
                (i, price, cap_value / price)
            })
            .collect();
        ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.total_cmp(&b.1)));
        let mut best: Option<(f64, f64, usize, HashMap<usize, u32>)> = None;
        for (i, price, upper) in ranked {
            if let Some((s, _, _, _)) = &best
                && upper < *s * (1.0 - 1e-9)
            {
                break;
            }
            let capacity = self.templates[ti].types[i].instance_type.capacity.clone();
            if !self.limits_allow(ti, &capacity) {
                continue;
            }
            let matching: Vec<usize> = others
                .clone()
                .into_iter()
                .filter(|&c| self.class_matches(c, ti, i, k))
                .collect();
            let demands: Vec<ClassDemand> = matching
                .iter()
                .map(|&c| ClassDemand {
                    class: c,
                    requests: self.class_requests[&c].clone(),
                    remaining: share(c),
                    per_node_cap: self.classes[c].per_node_cap,
                })
                .collect();
            let net = &self.templates[ti].types[i].net;
            let Some(pattern) = packer::fill(net, &opening, &demands, &prices) else {
                continue;
            };
            let score = pattern.value / price;
            let better = best
                .as_ref()
                .is_none_or(|(s, p, _, _)| score > *s * (1.0 + 1e-9) || (score >= *s * (1.0 - 1e-9) && price < *p));
            if better {
                best = Some((score, price, i, pattern.counts.iter().copied().collect()));
            }
        }
        best.map(|(_, _, i, quota)| (i, quota))
    }

    fn schedule(&mut self, pod: usize) -> Result<(), String> {
        let class = self.class_of[pod];
        let mut why = Why::default();
        for li in self.classes[class].level..self.class_levels[class].len() {
            if self.try_existing(pod, li) {
                self.classes[class].level = li;
                return Ok(());
            }
            // Slots reserved for this class first, in the order the nodes were opened.
            let mut q = 0;
            while q < self.classes[class].quota_nodes.len() {
                let n = self.classes[class].quota_nodes[q];
                let open = self.new_nodes[n].quota.get(&class).copied().unwrap_or(0) > 0;
                if open && self.try_new_node(pod, n, li).is_ok() {
                    self.classes[class].level = li;
                    return Ok(());
                }
                if open {
                    q += 1;
                } else {
                    self.classes[class].quota_nodes.remove(q);
                }
            }
            // Then first fit, zone by zone, over the zones the pod's zonal constraints allow.
            let zones: Vec<String> = self.zone_nodes.keys().cloned().collect();
            for zone in zones {
                if !self.zone_allows(pod, li, &zone) {
                    continue;
                }
                let mut pos = self.classes[class].cursors.get(&zone).copied().unwrap_or(0);
                let mut advancing = true;
                while let Some(&n) = self.zone_nodes.get(&zone).and_then(|l| l.get(pos)) {
                    match self.try_new_node(pod, n, li) {
                        Ok(()) => {
                            self.classes[class].level = li;
                            return Ok(());
                        }
                        Err(permanent) => {
                            if advancing && permanent {
                                self.classes[class].cursors.insert(zone.clone(), pos + 1);
                            } else {
                                advancing = false;
                            }
                        }
                    }
                    pos += 1;
                }
            }
            // Preferred pod (anti-)affinity and ScheduleAnyway spreads steer the choice
            // among nodes that exist or are planned, but never open a node of their own.
            let level = self.class_levels[class][li];
            let p = &self.pods[pod];
            let soft_only = (level.strict.preferred_pod_affinity
                && (!p.preferred_affinity.is_empty() || !p.preferred_anti_affinity.is_empty()))
                || (level.strict.soft_spreads && p.spreads.iter().any(|s| !s.hard));
            if !soft_only && self.open_node(pod, li, &mut why) {
                self.classes[class].level = li;
                return Ok(());
            }
        }
        Err(why.text())
    }

    /// Runs the simulation.
    pub fn run(mut self) -> Outcome {
        let mut order: Vec<usize> = (0..self.pods.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&self.pods[a], &self.pods[b]);
            (!pa.affinity.is_empty())
                .cmp(&!pb.affinity.is_empty())
                .then(pb.requests.cpu_millis.cmp(&pa.requests.cpu_millis))
                .then(pb.requests.memory.cmp(&pa.requests.memory))
                .then(self.class_of[a].cmp(&self.class_of[b]))
                .then(pa.key.cmp(&pb.key))
        });
        for pod in order {
            if let Err(reason) = self.schedule(pod) {
                let c = self.class_of[pod];
                self.classes[c].remaining = self.classes[c].remaining.saturating_sub(1);
                self.plan.unschedulable.push(Unschedulable {
                    pod: self.pods[pod].key.clone(),
                    reason,
                });
            }
        }
        self.finish()
    }

    fn finish(mut self) -> Outcome {
        for n in &self.existing {
            if !n.placed.is_empty() {
                self.plan.existing.push(ExistingPlacement {
                    node: n.name.clone(),
                    pods: n.placed.iter().map(|&p| self.pods[p].key.clone()).collect(),
                });
            }
        }
        let mut on_new_nodes = Vec::new();
        for node in &self.new_nodes {
            let t = &self.templates[node.template];
            // Under limits, no type (nor alternative) may exceed the capacity the limits
            // were checked against when the node was opened.
            let target = &t.types[node.target].instance_type.capacity;
            let within_limits = |i: usize| {
                t.limits
                    .keys()
                    .filter(|k| *k != "nodes")
                    .all(|k| t.types[i].instance_type.capacity.get(k) <= target.get(k))
            };
            let fitting: Vec<usize> = node
                .candidates
                .iter()
                .copied()
                .filter(|&i| node.used.fits_in(&t.types[i].net).is_ok() && within_limits(i))
                .collect();
            let labels: Vec<&BTreeMap<String, String>> = fitting.iter().map(|&i| &t.types[i].labels).collect();
            if let Err(e) = t.requirements.check_min_values(labels.iter().copied()) {
                for &p in &node.pods {
                    self.plan.unschedulable.push(Unschedulable {
                        pod: self.pods[p].key.clone(),
                        reason: format!("minValues: NodePool {}: {e}", t.name),
                    });
                }
                continue;
            }
            let chosen = with_min_values(t, &fitting);
            let Some(&first) = chosen.first() else {
                for &p in &node.pods {
                    self.plan.unschedulable.push(Unschedulable {
                        pod: self.pods[p].key.clone(),
                        reason: format!(
                            "resources: no instance type in NodePool {} holds the pods planned together",
                            t.name
                        ),
                    });
                }
                continue;
            };
            on_new_nodes.extend(node.pods.iter().copied());
            let o = &t.types[first];
            let price = o.price(&node.zone, node.capacity_type).unwrap_or(f64::NAN);
            self.plan.nodes.push(PlannedNode {
                nodepool: t.name.clone(),
                instance_type: o.instance_type.name.clone(),
                instance_types: chosen.iter().map(|&i| t.types[i].instance_type.name.clone()).collect(),
                zone: node.zone.clone(),
                capacity_type: node.capacity_type,
                price_per_hour: price,
                pods: node.pods.iter().map(|&p| self.pods[p].key.clone()).collect(),
                requests: node.used.clone(),
                daemonset_overhead: o.overhead.clone(),
                allocatable: o.instance_type.allocatable.clone(),
            });
        }
        self.plan.cost_per_hour = self.plan.nodes.iter().map(|n| n.price_per_hour).sum();
        let free = self.existing_free();
        let pods = on_new_nodes.iter().map(|&p| self.pods[p].clone()).collect();
        Outcome {
            plan: self.plan,
            bound: BoundInput {
                templates: self.templates,
                pods,
                existing_free: free,
            },
        }
    }

    fn existing_free(&self) -> Resources {
        self.existing.iter().fold(Resources::default(), |acc, n| {
            let mut f = n.free.clone();
            for name in f.names().map(str::to_string).collect::<Vec<_>>() {
                f.set(&name, f.get(&name).max(0));
            }
            acc.plus(&f)
        })
    }
}

/// The types worth evaluating, cheapest first: a type is dropped when a type of the same
/// family is as cheap or cheaper and holds at least as much (same family: same labels that
/// pods may select on, but size).
fn pareto(t: &Template, types: &[usize], prices: &[Option<f64>]) -> Vec<(usize, f64)> {
    let mut sorted: Vec<(usize, f64)> = types.iter().filter_map(|&i| prices[i].map(|p| (i, p))).collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut kept: Vec<(usize, f64)> = Vec::new();
    for (i, p) in sorted {
        let o = &t.types[i];
        let dominated = kept.iter().any(|(k, _)| {
            let other = &t.types[*k];
            other.instance_type.family == o.instance_type.family && o.net.fits_in(&other.net).is_ok()
        });
        if !dominated {
            kept.push((i, p));
        }
    }
    kept
}

/// The cheapest `MAX_ALTERNATIVES` of the fitting types, keeping enough distinct values
/// for the template's `minValues`.
fn with_min_values(t: &Template, fitting: &[usize]) -> Vec<usize> {
    let mut chosen: Vec<usize> = fitting.iter().copied().take(MAX_ALTERNATIVES).collect();
    for r in t.requirements.iter() {
        let Some(min) = r.min_values() else { continue };
        let distinct = |set: &[usize]| {
            let mut v: Vec<&String> = set
                .iter()
                .filter_map(|&i| t.types[i].labels.get(r.key()))
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
            let value = t.types[i].labels.get(r.key());
            let new_value = value.is_some_and(|v| !chosen.iter().any(|&c| t.types[c].labels.get(r.key()) == Some(v)));
            if new_value {
                chosen.push(i);
            }
        }
    }
    let order: HashMap<usize, usize> = fitting.iter().enumerate().map(|(pos, &i)| (i, pos)).collect();
    chosen.sort_by_key(|i| order[i]);
    chosen.dedup();
    while chosen.len() > MAX_ALTERNATIVES {
        // Drop the dearest type whose removal keeps minValues.
        let Some(pos) = (0..chosen.len()).rev().find(|&p| {
            let mut without = chosen.clone();
            without.remove(p);
            let labels: Vec<&BTreeMap<String, String>> = without.iter().map(|&i| &t.types[i].labels).collect();
            t.requirements.check_min_values(labels.iter().copied()).is_ok()
        }) else {
            break;
        };
        chosen.remove(pos);
    }
    chosen
}
