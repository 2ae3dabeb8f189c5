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
//!    [`crate::decide::provisioning::packer`]); a per-class cursor skips nodes that already refused the class
//!    for lack of room, which keeps this step amortised O(nodes + pods);
//! 3. a new node from the heaviest NodePool that can take it: the zone and capacity type
//!    that keep its spreads balanced at the lowest price (at equal price, those its
//!    preferred node affinity favours), and the instance type that [`crate::decide::provisioning::packer`]
//!    finds most cost-effective for the pods still waiting.
//!
//! A planned node whose NodePool has `minValues` takes a pod only while enough of its
//! candidate types still hold all its pods (Karpenter's `NodeClaim.Add`), and is packed
//! only up to what those types hold ([`target`]).
//!
//! A pod no node takes is retried with its preferences relaxed, one level at a time, as
//! Karpenter's `Preferences.Relax` does: preferred pod (anti-)affinity, then preferred node
//! affinity (the heaviest term alone, then the next alone, then none), then
//! `ScheduleAnyway` spreads, then, when a NodePool has one, its `PreferNoSchedule` taints.
//! When every level fails, the reasons of the failures are reported, the most relaxed
//! level's last.
//!
//! At the end each new node takes the cheapest instance type that holds its pods, with up
//! to 60 alternatives that also do, for CreateFleet.
//!
//! Complexity: O(P log P) to sort, O(P·(E + C)) for existing nodes and cursors (E existing
//! nodes, C classes), and O(T·C²) per node opened (T candidate types).
//!
//! One concept per file, after Karpenter's `scheduling` package: this file holds the run
//! and its main loop; [`class`] the pod classes, [`relaxation`] the relaxation levels,
//! [`labels`] the label views, [`topology_check`] the topology checks, [`existing_node`]
//! placement on existing nodes and [`new_node`] planned and new nodes (each node type with
//! its own `can_add` and `add`, as Karpenter's `ExistingNode` and `NodeClaim`), [`offer_key`] the
//! zones and capacity types a NodePool offers, [`target`] the choice of a new node's type,
//! [`finish`] the final types and alternatives, and [`index`] the typed indices.

mod class;
mod existing_node;
mod finish;
mod index;
mod labels;
mod new_node;
mod offer_key;
mod relaxation;
mod target;
mod topology_check;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use crate::catalog::RegionCatalog;
use crate::decide::provisioning::daemonsets::DaemonSetInfo;
use crate::decide::provisioning::namespaces::Namespaces;
use crate::decide::provisioning::packer::ResourcePrices;
use crate::decide::provisioning::plan::{ProvisioningPlan, Unschedulable};
use crate::decide::provisioning::pod::{PodInfo, Volumes, is_provisionable, pod_key};
use crate::decide::provisioning::scheduler::class::{Class, ClassState, Classes};
use crate::decide::provisioning::scheduler::existing_node::{ExistingNode, existing_nodes};
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, NewNodeId, OfferKeyId, PodId, TemplateId};
use crate::decide::provisioning::scheduler::new_node::{NewNode, Refusal};
use crate::decide::provisioning::scheduler::offer_key::{Candidates, FitKey, OfferKey, offer_keys};
use crate::decide::provisioning::scheduler::relaxation::soft_only;
use crate::decide::provisioning::scheduler::target::{MatchKey, Planned, Shortlist, ShortlistKey, resource_prices};
use crate::decide::provisioning::templates::{self, Template};
use crate::decide::provisioning::topology::Topology;
use crate::decide::provisioning::unschedulable::Reason;
use crate::model::Resources;
use crate::model::pod::Pod;
use crate::model::well_known as wk;
use crate::snapshot::Snapshot;

/// Why a pod could not be placed, the most relaxed level's reasons last.
#[derive(Default)]
struct Why {
    reasons: Vec<Reason>,
}

impl Why {
    /// Adds a reason, once.
    fn add(&mut self, r: Reason) {
        if !self.reasons.contains(&r) {
            self.reasons.push(r);
        }
    }

    /// The reasons; when no NodePool could be tried, that.
    fn into_reasons(self) -> Vec<Reason> {
        if self.reasons.is_empty() {
            vec![Reason::NoNodePool]
        } else {
            self.reasons
        }
    }
}

/// The keys among `keys` whose value on a new node comes from its instance type's labels,
/// not from its offering (zone, capacity type), its NodePool's labels or its hostname.
fn type_decided(keys: BTreeSet<String>, templates: &IdVec<TemplateId, Template>) -> Vec<String> {
    const OFFERING: [&str; 4] = [wk::ZONE, wk::CAPACITY_TYPE, wk::REGION, wk::HOSTNAME];
    keys.into_iter()
        .filter(|k| !OFFERING.contains(&k.as_str()))
        .filter(|k| {
            templates
                .iter()
                .any(|t| !t.labels.contains_key(k) && t.types.iter().any(|o| o.labels.contains_key(k)))
        })
        .collect()
}

/// What a scheduler run decided, with what the lower bound needs.
pub struct SchedulerOutcome {
    /// The plan (without its lower bound).
    pub plan: ProvisioningPlan,
    bound: BoundInput,
}

struct BoundInput {
    templates: Vec<Template>,
    pods: Vec<PodInfo>,
    existing_free: Resources,
}

impl SchedulerOutcome {
    /// The lower bound on the cost of placing the same pods (see [`crate::decide::provisioning::lower_bound`]).
    pub fn lower_bound(&self) -> f64 {
        let pods: Vec<&PodInfo> = self.bound.pods.iter().collect();
        crate::decide::provisioning::lower_bound::lower_bound(&self.bound.templates, &pods, &self.bound.existing_free)
    }
}

/// The state of one planning run.
pub struct Scheduler {
    templates: IdVec<TemplateId, Template>,
    /// Per template: its offer keys.
    offer_keys: IdVec<TemplateId, IdVec<OfferKeyId, OfferKey>>,
    /// Per template: resource prices for the packer (None: the cover LP failed).
    prices: IdVec<TemplateId, Option<ResourcePrices>>,
    /// Per template: what is planned under its limits.
    planned: IdVec<TemplateId, Planned>,
    pods: IdVec<PodId, PodInfo>,
    class_of: IdVec<PodId, ClassId>,
    classes: IdVec<ClassId, Class>,
    progress: IdVec<ClassId, ClassState>,
    existing: Vec<ExistingNode>,
    new_nodes: IdVec<NewNodeId, NewNode>,
    /// Planned nodes per zone, in the order they were opened.
    zone_nodes: BTreeMap<String, Vec<NewNodeId>>,
    /// The hard zonal spreads, by topology group, with the classes that own them.
    zonal_owners: Vec<(usize, Vec<class::SpreadOwner>)>,
    /// Per hard zonal spread group that narrows its nodes by node affinity: the zones of
    /// the planned nodes it counts.
    counted_zones: HashMap<usize, BTreeSet<String>>,
    topology: Topology,
    /// The keys whose value on a new node its instance type decides (the architecture,
    /// the type, its family...) among the topology keys and the keys the spreads' node
    /// inclusion reads: a new node's types are narrowed to those that keep the node in
    /// the domain its pods were checked against, and in (or out of) the spreads that
    /// counted them.
    type_keys: Vec<String>,
    /// The keys that the spreads' node inclusion reads ([`Topology::inclusion_keys`]): a
    /// new node opens with one value for each that its NodePool leaves open (a custom key).
    inclusion_keys: BTreeSet<String>,
    /// Per class, level and template: the offer keys and types that take the pod alone;
    /// `Err` holds why none does.
    offer_cache: HashMap<FitKey, Rc<Result<Candidates, Reason>>>,
    /// Per class, level, template and offer key: the types worth evaluating for the class.
    pareto_cache: HashMap<ShortlistKey, Rc<Shortlist>>,
    /// Per class, level, template, type and offer key: whether the class's branches match.
    match_cache: HashMap<MatchKey, bool>,
    plan: ProvisioningPlan,
}

impl Scheduler {
    /// Reads the snapshot and prepares the run for its pending pods.
    pub fn new(snapshot: &Snapshot, region: &RegionCatalog<'_>) -> Self {
        Self::build(snapshot, region, None, &snapshot.nodepools)
    }

    /// Prepares the run of a disruption's simulation: the `removed` nodes are gone, and
    /// the pods a drain would evict from them ([`crate::decide::disruption::replacement::moves`]) are
    /// the pods to place, on the other nodes first, then on new ones. Pending pods are left
    /// out: they are the provisioner's. New nodes come from `nodepools` (the snapshot's, or
    /// some of them narrowed, e.g. to spot).
    pub fn removing(
        snapshot: &Snapshot,
        region: &RegionCatalog<'_>,
        removed: &BTreeSet<String>,
        nodepools: &[crate::model::NodePool],
    ) -> Self {
        Self::build(snapshot, region, Some(removed), nodepools)
    }

    fn build(
        snapshot: &Snapshot,
        region: &RegionCatalog<'_>,
        removed: Option<&BTreeSet<String>>,
        nodepools: &[crate::model::NodePool],
    ) -> Self {
        let mut plan = ProvisioningPlan::default();
        for (object, reason) in &snapshot.skipped {
            plan.skipped.push(templates::Skipped {
                object: object.clone(),
                reason: reason.clone(),
            });
        }
        for (pod, reason) in &snapshot.bad_pods {
            plan.unschedulable.push(Unschedulable::new(
                pod.clone(),
                Reason::InvalidPod { detail: reason.clone() },
            ));
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
        let (templates, skipped) =
            templates::build(nodepools, &snapshot.nodeclasses, region, &daemonsets, &snapshot.nodes);
        plan.skipped.extend(skipped);
        let templates: IdVec<TemplateId, Template> = templates.into_iter().collect();
        let offer_keys = templates.iter().map(|t| offer_keys(t, region.region())).collect();

        let volumes = Volumes::of(snapshot);
        let namespaces = Namespaces::new(snapshot);
        let mut pods = IdVec::new();
        let to_place = |p: &Pod| match removed {
            None => is_provisionable(p),
            Some(removed) => {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| removed.contains(n))
                    && crate::decide::disruption::replacement::moves(p)
            }
        };
        for p in snapshot.pods.iter().filter(|p| to_place(p)) {
            if let Some(b) = volumes.blocked(p) {
                plan.unschedulable.push(Unschedulable::new(
                    pod_key(p),
                    Reason::Volume {
                        claim: b.claim,
                        problem: b.problem,
                    },
                ));
                continue;
            }
            match PodInfo::from_pod(p, &volumes, &namespaces) {
                Ok(info) => {
                    pods.push(info);
                }
                Err(reason) => plan.unschedulable.push(Unschedulable::new(
                    pod_key(p),
                    Reason::InvalidPod {
                        detail: crate::error_chain::Chain(&reason).to_string(),
                    },
                )),
            }
        }

        let mut topology = Topology::default();
        for p in pods.iter() {
            topology.register(p);
        }
        let (existing, node_views) = existing_nodes(snapshot, &volumes, &namespaces, &mut topology, removed);
        let existing_zones: Vec<String> = existing
            .iter()
            .filter_map(|n| n.labels.get(wk::ZONE).cloned())
            .collect();
        let Classes {
            classes,
            progress,
            class_of,
            zonal_owners,
        } = class::classes(&pods, &templates, &existing_zones, &node_views, &topology);
        let prices = resource_prices(&templates, &pods);
        let inclusion_keys = topology.inclusion_keys();
        let type_keys = type_decided(topology.keys().union(&inclusion_keys).cloned().collect(), &templates);
        let planned = templates.iter().map(|_| Planned::default()).collect();

        Scheduler {
            templates,
            offer_keys,
            prices,
            planned,
            pods,
            class_of,
            classes,
            progress,
            existing,
            new_nodes: IdVec::new(),
            zone_nodes: BTreeMap::new(),
            zonal_owners,
            counted_zones: HashMap::new(),
            topology,
            type_keys,
            inclusion_keys,
            offer_cache: HashMap::new(),
            pareto_cache: HashMap::new(),
            match_cache: HashMap::new(),
            plan,
        }
    }

    /// Places one pod: at each relaxation level from the one its class has reached, on an
    /// existing node, then in a slot reserved for its class, then on a planned node (first
    /// fit, zone by zone), then on a new node. `Err` says why every level failed.
    fn schedule(&mut self, pod: PodId) -> Result<(), Vec<Reason>> {
        let class = self.class_of[pod];
        let mut why = Why::default();
        for li in self.progress[class].level..self.classes[class].levels.len() {
            if self.try_existing(pod, li) {
                self.progress[class].level = li;
                return Ok(());
            }
            // Slots reserved for this class first, in the order the nodes were opened.
            let mut q = 0;
            while q < self.progress[class].quota_nodes.len() {
                let n = self.progress[class].quota_nodes[q];
                let open = self.new_nodes[n].quota.get(&class).copied().unwrap_or(0) > 0;
                if open && self.try_new_node(pod, n, li).is_ok() {
                    self.progress[class].level = li;
                    return Ok(());
                }
                if open {
                    q += 1;
                } else {
                    self.progress[class].quota_nodes.remove(q);
                }
            }
            // Then first fit, zone by zone, over the zones the pod's zonal constraints allow.
            let zones: Vec<String> = self.zone_nodes.keys().cloned().collect();
            for zone in zones {
                if !self.zone_allows(pod, li, &zone) {
                    continue;
                }
                let mut pos = self.progress[class].cursors.get(&zone).copied().unwrap_or(0);
                let mut advancing = true;
                while let Some(&n) = self.zone_nodes.get(&zone).and_then(|l| l.get(pos)) {
                    match self.try_new_node(pod, n, li) {
                        Ok(()) => {
                            self.progress[class].level = li;
                            return Ok(());
                        }
                        Err(refusal) => {
                            if advancing && refusal == Refusal::ForGood {
                                self.progress[class].cursors.insert(zone.clone(), pos + 1);
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
            let level = self.classes[class].levels[li];
            if !soft_only(&self.pods[pod], level) && self.open_node(pod, li, &mut why) {
                self.progress[class].level = li;
                return Ok(());
            }
        }
        Err(why.into_reasons())
    }

    /// Whether a pod that failed may fit once other pods are placed: it has required pod
    /// affinity, which only more placed pods can satisfy.
    fn waits_for_others(&self, pod: PodId) -> bool {
        !self.pods[pod].affinity.is_empty()
    }

    /// Runs the simulation.
    pub fn run(mut self) -> SchedulerOutcome {
        let mut order: Vec<PodId> = self.pods.ids().collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&self.pods[a], &self.pods[b]);
            (!pa.affinity.is_empty())
                .cmp(&!pb.affinity.is_empty())
                .then(pb.requests.cpu_millis.cmp(&pa.requests.cpu_millis))
                .then(pb.requests.memory.cmp(&pa.requests.memory))
                .then(self.class_of[a].cmp(&self.class_of[b]))
                .then(pa.key.cmp(&pb.key))
        });
        // Karpenter's `Scheduler.Solve` puts a pod that fails back on its queue and tries
        // it again after the others, until a whole pass places nothing: a pod whose
        // affinity points at pods still pending waits for them to be placed.
        let mut failed: Vec<(PodId, Vec<Reason>)> = Vec::new();
        loop {
            let mut placed_any = false;
            for pod in order {
                match self.schedule(pod) {
                    Ok(()) => placed_any = true,
                    Err(reasons) => failed.push((pod, reasons)),
                }
            }
            if !placed_any {
                break;
            }
            let (waiting, done): (Vec<_>, Vec<_>) = std::mem::take(&mut failed)
                .into_iter()
                .partition(|(p, _)| self.waits_for_others(*p));
            failed = done;
            if waiting.is_empty() {
                break;
            }
            order = waiting.into_iter().map(|(p, _)| p).collect();
        }
        for (pod, reasons) in failed {
            let state = &mut self.progress[self.class_of[pod]];
            state.remaining = state.remaining.saturating_sub(1);
            self.plan.unschedulable.push(Unschedulable {
                pod: self.pods[pod].key.clone(),
                reasons,
            });
        }
        self.finish()
    }
}
