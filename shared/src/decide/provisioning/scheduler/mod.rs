//! The scheduling simulation: places pending pods on existing nodes, then on new nodes,
//! honouring every constraint kube-scheduler checks (Karpenter's
//! `pkg/controllers/provisioning/scheduling`).
//!
//! Pods are grouped into classes of identical scheduling constraints (a Deployment's pods
//! form one) and taken first-fit-decreasing by CPU then memory, as Karpenter does; pods
//! with required pod affinity come last, so that the pods they follow are placed first.
//! Each pod tries, in order:
//!
//! 1. existing nodes (Ready, schedulable) with room, as kube-scheduler would;
//! 2. new nodes already planned, first fit, within each node's reserved mix (see
//!    [`crate::decide::provisioning::packer`]); a per-class cursor skips nodes that already
//!    refused the class for good, which keeps this step amortised O(nodes + pods);
//! 3. a new node from the heaviest NodePool that can take it: the zone and capacity type
//!    that keep its spreads balanced at the lowest price (at equal price, those its
//!    preferred node affinity favours; for a NodePool with zone balance, the zone where
//!    it has the fewest nodes within its price tolerance), in a zone whose subnets have
//!    the addresses for the node's pods, and the instance type that
//!    [`crate::decide::provisioning::packer`] finds most cost-effective for the pods still
//!    waiting.
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
//! One concept per file, after Karpenter's `scheduling` package. The [`Scheduler`] only
//! orchestrates, as Karpenter's `scheduler.go` does: this file holds its state, the queue
//! and its passes (`Scheduler.Solve`), each pod's relaxation levels (`trySchedule`) and
//! the order of the nodes it tries (`add`: existing nodes, then planned ones);
//! [`open_node`] opens a new node (`addToNewNodeClaim`) and [`finish`] finishes the plan.
//! The nodes decide for themselves, each with its own `can_add` and `add`:
//! [`existing_node`] (Karpenter's `ExistingNode`) and [`new_node`] (`NodeClaim`), with
//! what they are handed and return: [`pod_at`] the pod at a level, [`topology_check`] the
//! plan's topology, [`narrowed`] what a placement narrows, [`refusal`] why a node refuses.
//! The rest:
//! - pods: [`class`] a class, [`classes`] the pods sorted into classes, [`class_state`]
//!   where a class stands, [`spread_owner`] a hard spread's owner, [`node_view`] a node as
//!   a topology domain, [`demand`] the pods still waiting;
//! - relaxation: [`level`] one level, [`relaxation`] their order, [`preference`] preferred
//!   node affinity at equal price;
//! - NodePools: [`pool`] a NodePool in the run, [`offer_key`] its zones and capacity types,
//!   [`candidates`] its types that take a pod alone, [`planned`] what is planned under its
//!   limits, [`memo`] what the run remembers of it, [`target`] a new node's type,
//!   [`min_values`] its `minValues`, [`zone_ledger`] its nodes per zone for its zone
//!   balance, and its class's free subnet addresses, [`prepaid`] the room left in the
//!   Savings Plan commitments, [`reserved`] the room its reserved offer keys take in
//!   capacity reservations;
//! - labels: [`split`] a node's labels in parts, [`with_host`] with the hostname of a node
//!   being opened, [`custom_keys`] the NodePool's custom keys;
//! - [`index`] the typed indices, [`why`] why a pod was not placed, [`outcome`] the run's
//!   result.

mod candidates;
mod class;
mod class_state;
mod classes;
mod custom_keys;
mod demand;
mod existing_node;
mod finish;
mod index;
mod level;
mod memo;
mod min_values;
mod narrowed;
mod new_node;
mod node_view;
mod offer_key;
mod open_node;
mod outcome;
mod planned;
mod pod_at;
mod pool;
mod preference;
mod prepaid;
mod refusal;
mod relaxation;
mod reserved;
mod split;
mod spread_owner;
mod target;
mod topology_check;
mod why;
mod with_host;
mod zone_ledger;

pub use outcome::SchedulerOutcome;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::catalog::RegionCatalog;
use crate::decide::provisioning::daemonsets::DaemonSetInfo;
use crate::decide::provisioning::namespaces::Namespaces;
use crate::decide::provisioning::plan::{ProvisioningPlan, Unschedulable};
use crate::decide::provisioning::pod::{PodInfo, Volumes, is_provisionable, pod_key};
use crate::decide::provisioning::reserved_capacity::Ledger;
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::class_state::ClassState;
use crate::decide::provisioning::scheduler::classes::Classes;
use crate::decide::provisioning::scheduler::existing_node::{ExistingNode, existing_nodes};
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, NewNodeId, PodId, TemplateId, Types};
use crate::decide::provisioning::scheduler::new_node::NewNode;
use crate::decide::provisioning::scheduler::pod_at::PodAt;
use crate::decide::provisioning::scheduler::pool::Pool;
use crate::decide::provisioning::scheduler::refusal::Refusal;
use crate::decide::provisioning::scheduler::relaxation::soft_only;
use crate::decide::provisioning::scheduler::spread_owner::SpreadOwner;
use crate::decide::provisioning::scheduler::topology_check::TopologyCheck;
use crate::decide::provisioning::scheduler::why::Why;
use crate::decide::provisioning::templates::{self, Template};
use crate::decide::provisioning::topology::Topology;
use crate::decide::provisioning::unschedulable::Reason;
use crate::model::Resources;
use crate::model::pod::Pod;
use crate::model::well_known as wk;
use crate::snapshot::Snapshot;

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

/// The state of one planning run.
pub struct Scheduler {
    /// The NodePools, heaviest first: each template with its offer keys, resource prices,
    /// what is planned under its limits and what the run remembers of it.
    pools: IdVec<TemplateId, Pool>,
    /// The pods to place.
    pods: IdVec<PodId, PodInfo>,
    /// Each pod's class.
    class_of: IdVec<PodId, ClassId>,
    /// Each class.
    classes: IdVec<ClassId, Class>,
    /// Where each class stands.
    progress: IdVec<ClassId, ClassState>,
    /// The usable existing nodes.
    existing: Vec<ExistingNode>,
    /// The planned nodes, in the order they were opened.
    new_nodes: IdVec<NewNodeId, NewNode>,
    /// Planned nodes per zone, in the order they were opened.
    zone_nodes: BTreeMap<String, Vec<NewNodeId>>,
    /// Each NodePool's nodes per zone, and each class's free addresses per zone.
    zones: zone_ledger::ZoneLedger,
    /// The room left in the Savings Plan commitments.
    prepaid: prepaid::Prepaid,
    /// The hard zonal spreads, by topology group, with the classes that own them.
    zonal_owners: Vec<(usize, Vec<SpreadOwner>)>,
    /// Per hard zonal spread group that narrows its nodes by node affinity: the zones of
    /// the planned nodes it counts.
    counted_zones: HashMap<usize, BTreeSet<String>>,
    /// The pods recorded on every node, existing or planned, by topology group.
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
    /// The plan so far: what was skipped and the pods found unschedulable on the way.
    plan: ProvisioningPlan,
    /// The room left in the capacity reservations behind the reserved offer keys.
    reserved_room: Ledger,
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
        let zones = zone_ledger::ZoneLedger::new(snapshot, &templates, removed);
        let prepaid = prepaid::Prepaid::new(snapshot, region, removed);

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
        } = classes::classes(&pods, &templates, &existing_zones, &node_views, &topology);
        let inclusion_keys = topology.inclusion_keys();
        let type_keys = type_decided(topology.keys().union(&inclusion_keys).cloned().collect(), &templates);
        let demand = pods.iter().fold(Resources::default(), |acc, p| acc.plus(&p.requests));
        let reserved_room = Ledger::of(templates.iter());
        let pools = templates
            .into_vec()
            .into_iter()
            .map(|t| Pool::new(t, region.region(), &demand))
            .collect();

        Scheduler {
            pools,
            pods,
            class_of,
            classes,
            progress,
            existing,
            new_nodes: IdVec::new(),
            zone_nodes: BTreeMap::new(),
            zones,
            prepaid,
            zonal_owners,
            counted_zones: HashMap::new(),
            topology,
            type_keys,
            inclusion_keys,
            plan,
            reserved_room,
        }
    }

    /// Places one pod: at each relaxation level from the one its class has reached
    /// (Karpenter's `Scheduler.trySchedule`), on an existing node, then in a slot reserved
    /// for its class, then on a planned node (first fit, zone by zone), then on a new node
    /// (`Scheduler.add`). `Err` says why every level failed.
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
                let at = PodAt::new(pod, li, &self.pods, &self.class_of, &self.classes);
                if !self.topology_check().zone_allows(&at, &zone) {
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
                            if advancing && refusal.is_for_good() {
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

    /// Places a pod on the first existing node that takes it at level `li` (Karpenter's
    /// `Scheduler.addToExistingNode`).
    fn try_existing(&mut self, pod: PodId, li: usize) -> bool {
        let at = PodAt::new(pod, li, &self.pods, &self.class_of, &self.classes);
        let check = self.topology_check();
        let Some(i) = self.existing.iter().position(|n| n.can_add(&at, &check)) else {
            return false;
        };
        let node = &mut self.existing[i];
        node.add(at.id, at.pod, &mut self.topology);
        let state = &mut self.progress[at.class_id];
        state.remaining = state.remaining.saturating_sub(1);
        state.placed_in(node.labels.get(wk::ZONE));
        true
    }

    /// Places a pod on planned node `n` at level `li`, or says how the node refuses it
    /// (Karpenter's `Scheduler.addToInflightNode`, for one node). A node without room for
    /// a pod that must follow its pods there first moves to a larger type; a node that
    /// would keep too few types for `minValues` gives up the slots it reserved for the
    /// pod's class.
    fn try_new_node(&mut self, pod: PodId, n: NewNodeId, li: usize) -> Result<(), Refusal> {
        let at = PodAt::new(pod, li, &self.pods, &self.class_of, &self.classes);
        let ti = self.new_nodes[n].template;
        let t = &self.pools[ti].template;
        let checked = self.new_nodes[n].can_add(&at, t, &self.topology_check(), &self.type_keys);
        match checked {
            Ok(narrowed) => {
                let node = &mut self.new_nodes[n];
                if node.add(at.id, at.pod, at.class_id, narrowed, t, &mut self.topology) {
                    let state = &mut self.progress[at.class_id];
                    state.reserved = state.reserved.saturating_sub(1);
                }
                let state = &mut self.progress[at.class_id];
                state.remaining = state.remaining.saturating_sub(1);
                state.placed_in(Some(&node.zone));
                Ok(())
            }
            Err(Refusal::NoRoom) => {
                let pool = &self.pools[ti];
                let node = &self.new_nodes[n];
                let Some(bigger) = node.larger_type_for(&at, &pool.template, &pool.planned, &self.topology_check())
                else {
                    return Err(Refusal::NoRoom);
                };
                let pool = &mut self.pools[ti];
                let old = self.new_nodes[n].grow_to(bigger, &pool.template);
                let (from, to) = (pool.template.ty(old), pool.template.ty(bigger));
                pool.planned
                    .regrow(&from.instance_type.capacity, &to.instance_type.capacity);
                self.try_new_node(pod, n, li)
            }
            Err(Refusal::MinValues) => {
                let left = self.new_nodes[n].release_quota(at.class_id, &at.class.requests);
                let state = &mut self.progress[at.class_id];
                state.reserved = state.reserved.saturating_sub(left);
                Err(Refusal::MinValues)
            }
            Err(refusal) => Err(refusal),
        }
    }

    /// The plan's topology, as the nodes check a pod against it.
    fn topology_check(&self) -> TopologyCheck<'_> {
        TopologyCheck {
            topology: &self.topology,
            zone_nodes: &self.zone_nodes,
            counted_zones: &self.counted_zones,
            zonal_owners: &self.zonal_owners,
            progress: &self.progress,
        }
    }

    /// Whether a pod that failed may fit once other pods are placed: it has required pod
    /// affinity, which only more placed pods can satisfy.
    fn waits_for_others(&self, pod: PodId) -> bool {
        !self.pods[pod].affinity.is_empty()
    }

    /// Runs the simulation (Karpenter's `Scheduler.Solve`): every pod in queue order, then
    /// again those that wait for others, while a pass places some; then finishes the plan.
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
