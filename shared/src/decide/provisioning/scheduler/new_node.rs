//! New nodes (Karpenter's `nodeclaim.go`): a planned node decides by itself whether it
//! has room and ports for a pod ([`NewNode::can_add`]) and takes it ([`NewNode::add`]);
//! the scheduler adds what reads the template and the other nodes (taints, volumes,
//! requirements, topology, `minValues`). Joining a planned node, and opening one from
//! the heaviest NodePool that can take the pod, in the zone and capacity type that keep
//! its spreads balanced at the lowest price, filled towards the type [`crate::decide::provisioning::scheduler::target`]
//! chooses.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Scheduler, Why};
use crate::decide::provisioning::pod::{HostPort, PodInfo};
use crate::decide::provisioning::scheduler::index::{ClassId, NewNodeId, OfferKeyId, PodId, TemplateId, TypeId, Types};
use crate::decide::provisioning::scheduler::labels::{Split, WithHost, matches_split, narrow, narrowed};
use crate::decide::provisioning::topology::{Domains, PlacedPod};
use crate::decide::provisioning::unschedulable::{Reason, Shortfall};
use crate::decide::provisioning::volumes::{EBS_CSI_DRIVER, VolumeUsage};
use crate::model::well_known as wk;
use crate::model::{CapacityType, Requirement, Requirements, Resources};

/// A node the plan launches.
pub(super) struct NewNode {
    /// Its NodePool's template.
    pub(super) template: TemplateId,
    /// The zone.
    pub(super) zone: String,
    /// Spot or on-demand.
    pub(super) capacity_type: CapacityType,
    /// Node labels: the template's, zone, capacity type, region and a hostname.
    pub(super) labels: BTreeMap<String, String>,
    /// The values its NodePool's custom keys may still take, narrowed by its pods.
    pub(super) custom: Requirements,
    /// The type the node is filled towards.
    pub(super) target: TypeId,
    /// Types that still satisfy every pod on the node, cheapest first.
    pub(super) candidates: Vec<TypeId>,
    /// What its pods request.
    pub(super) used: Resources,
    /// The target's net allocatable less what the pods use: room for reserved slots.
    pub(super) free: Resources,
    /// `free` less the reserved slots not yet filled: room for any pod.
    pub(super) room: Resources,
    /// Host ports in use.
    pub(super) ports: Vec<HostPort>,
    /// The volumes its pods attach.
    pub(super) volumes: VolumeUsage,
    /// Its pods.
    pub(super) pods: Vec<PodId>,
    /// Slots reserved per class.
    pub(super) quota: HashMap<ClassId, u32>,
    /// Pods per class on the node.
    pub(super) class_count: HashMap<ClassId, u32>,
}

/// Why a planned node does not take a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// It refuses the pod's class for good: no room, taints, ports, requirements, hostname
    /// constraints; none of these turn in the class's favour as the plan grows.
    ForGood,
    /// It may take a pod of the class later (zonal spreads, pod affinity).
    ForNow,
}

/// What a new node is opened for: the type it is filled towards, the slots it reserves per
/// class, and the capacity it may be filled to.
pub(super) struct Target {
    /// The type.
    pub(super) ty: TypeId,
    /// Slots reserved per class.
    pub(super) quota: HashMap<ClassId, u32>,
    /// The type's net allocatable, or less where `minValues` needs smaller types to hold
    /// the node's pods too.
    pub(super) capacity: Resources,
}

/// Why a planned node cannot take a pod, by what the node alone decides
/// ([`NewNode::can_add`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cannot {
    /// Not enough room left: a larger type may make it (see `grow_for`).
    NoRoom,
    /// The class's share of the node is taken, or a host port is in use.
    Refused,
}

/// What a pod's placement narrows on its node: the candidate types, the types pinned by
/// `minValues`, the custom keys' values.
pub(super) struct Narrowed {
    /// The types that still fit every pod, when the pod is the first of its class.
    pub(super) candidates: Option<Vec<TypeId>>,
    /// The types `minValues` keeps, when it pins some.
    pub(super) pinned: Option<Vec<TypeId>>,
    /// The custom keys' values, narrowed to the pod's.
    pub(super) custom: Option<Requirements>,
}

impl NewNode {
    /// Whether the node takes a pod of `class` by what the node alone decides: room (a
    /// reserved slot's, or any pod's), the class's share of the node (`per_node_cap`), and
    /// host ports, its pods' and the target type's DaemonSets' (Karpenter's
    /// `NodeClaim.CanAdd`, `pkg/controllers/provisioning/scheduling/nodeclaim.go`). Taints,
    /// volumes, requirements and topology, which read the template and the other nodes,
    /// are the scheduler's to check.
    pub(super) fn can_add(
        &self,
        pod: &PodInfo,
        class: ClassId,
        per_node_cap: u32,
        daemon_ports: &[HostPort],
    ) -> Result<(), Cannot> {
        let quota = self.quota.get(&class).copied().unwrap_or(0);
        let room = if quota > 0 { &self.free } else { &self.room };
        if pod.requests.fits_in(room).is_err() {
            return Err(Cannot::NoRoom);
        }
        if self.class_count.get(&class).copied().unwrap_or(0) >= per_node_cap {
            return Err(Cannot::Refused);
        }
        if pod.host_ports.iter().any(|a| self.ports.iter().any(|b| a.conflicts(b)))
            || HostPort::any_conflict(&pod.host_ports, daemon_ports).is_some()
        {
            return Err(Cannot::Refused);
        }
        Ok(())
    }

    /// Places `pod` (`id`, of `class`) on the node, with what its placement narrowed:
    /// its requests, host ports and volumes are taken, from a slot reserved for its class
    /// when one is left (Karpenter's `NodeClaim.Add`). Returns whether it took a reserved
    /// slot.
    pub(super) fn add(&mut self, id: PodId, pod: &PodInfo, class: ClassId, narrowed: Narrowed) -> bool {
        if let Some(c) = narrowed.candidates {
            self.candidates = c;
        }
        if let Some(keep) = narrowed.pinned {
            self.candidates.retain(|i| keep.contains(i));
        }
        if let Some(c) = narrowed.custom {
            self.custom = c;
        }
        self.used = self.used.plus(&pod.requests);
        self.free = self.free.minus(&pod.requests);
        let reserved = match self.quota.get_mut(&class) {
            Some(q) if *q > 0 => {
                *q -= 1;
                true
            }
            _ => {
                self.room = self.room.minus(&pod.requests);
                false
            }
        };
        self.ports.extend(pod.host_ports.iter().cloned());
        self.volumes.add(&pod.volumes);
        self.pods.push(id);
        *self.class_count.entry(class).or_insert(0) += 1;
        reserved
    }
}

impl Scheduler {
    /// Places a pod on planned node `n` at level `li`, or says how the node refuses it.
    pub(super) fn try_new_node(&mut self, pod: PodId, n: NewNodeId, li: usize) -> Result<(), Refusal> {
        let p = &self.pods[pod];
        let class = self.class_of[pod];
        let node = &self.new_nodes[n];
        let t = &self.templates[node.template];
        let target = t.ty(node.target);
        match node.can_add(p, class, self.classes[class].per_node_cap, &target.daemon_ports) {
            Err(Cannot::NoRoom) => {
                if !self.grow_for(pod, n, li) {
                    return Err(Refusal::ForGood);
                }
                return self.try_new_node(pod, n, li);
            }
            Err(Cannot::Refused) => return Err(Refusal::ForGood),
            Ok(()) => {}
        }
        if self.nodepool_taint(class, li, node.template).is_some() {
            return Err(Refusal::ForGood);
        }
        if !self.volumes_fit(pod, n, node.target) {
            return Err(Refusal::ForGood);
        }
        let branches = &self.classes[class].branches[li];
        let fits_type = |i: &TypeId| {
            let split = Split {
                node: &node.labels,
                instance: &t.ty(*i).labels,
                custom: &node.custom,
            };
            branches.iter().any(|b| matches_split(b, &split))
                && HostPort::any_conflict(&p.host_ports, &t.ty(*i).daemon_ports).is_none()
        };
        // The first pod of its class on the node narrows the node's candidate types.
        let seen = node.class_count.get(&class).copied().unwrap_or(0) > 0;
        if !seen && !fits_type(&node.target) {
            return Err(Refusal::ForGood);
        }
        let split = Split {
            node: &node.labels,
            instance: &target.labels,
            custom: &node.custom,
        };
        if let Err(e) = self.check_topology(pod, li, &split) {
            return Err(if e.is_permanent_on_a_node() {
                Refusal::ForGood
            } else {
                Refusal::ForNow
            });
        }
        let candidates: Option<Vec<TypeId>> =
            (!seen).then(|| node.candidates.iter().copied().filter(fits_type).collect());
        if !self.keeps_min_values(n, candidates.as_deref(), &p.requests) {
            self.release_quota(n, class);
            return Err(Refusal::ForGood);
        }
        let pinned = self.pinned_candidates(n);
        let custom = (!seen && !node.custom.is_empty())
            .then(|| {
                let split = Split {
                    node: &node.labels,
                    instance: &target.labels,
                    custom: &node.custom,
                };
                let b = branches.iter().find(|b| matches_split(b, &split))?;
                narrow(&node.custom, b)
            })
            .flatten();
        let node = &mut self.new_nodes[n];
        let narrowed = Narrowed {
            candidates,
            pinned,
            custom,
        };
        if node.add(pod, p, class, narrowed) {
            let state = &mut self.progress[class];
            state.reserved = state.reserved.saturating_sub(1);
        }
        let instance = &self.templates[node.template].ty(node.target).labels;
        let split = Split {
            node: &node.labels,
            instance,
            custom: &node.custom,
        };
        let taints = &self.templates[node.template].taints;
        self.topology.record(PlacedPod::planned(p), &split, taints);
        let state = &mut self.progress[class];
        state.remaining = state.remaining.saturating_sub(1);
        self.keep_types_holding_volumes(n);
        Ok(())
    }

    /// The custom-key requirements a new node of template `ti` opens with for `pod`: each
    /// custom key the pod spreads on (at this level) is fixed to one value, the allowed one
    /// with the fewest matching pods, so that the node is in one domain of the spread
    /// (Karpenter's `TopologyGroup.nextDomainTopologySpread` narrows the NodeClaim to the
    /// domain with the minimum count). Then each other custom key that a spread's node
    /// inclusion reads is fixed to a value the pod allows (see [`pin_inclusion_keys`]).
    fn custom_domains(&self, pod: PodId, li: usize, ti: TemplateId) -> Requirements {
        let t = &self.templates[ti];
        let mut custom = t.custom.clone();
        let p = &self.pods[pod];
        let class = &self.classes[self.class_of[pod]];
        let strict = class.levels[li].strict;
        for (i, s) in p.spreads.iter().enumerate() {
            if !(s.hard || strict.soft_spreads) {
                continue;
            }
            let Some(r) = custom.get(&s.key) else { continue };
            if r.is_complement() || r.values().len() < 2 {
                continue;
            }
            let best = r
                .values()
                .iter()
                .filter(|v| {
                    class.branches[li]
                        .iter()
                        .any(|b| b.get(&s.key).is_none_or(|q| q.has(v)))
                })
                .min_by_key(|v| self.topology.spread_count_of(&class.groups, i, v))
                .cloned();
            if let Some(v) = best {
                custom.add(Requirement::in_values(&s.key, [v]));
            }
        }
        pin_inclusion_keys(&mut custom, &self.inclusion_keys, &class.branches[li]);
        custom
    }

    /// Moves planned node `n` to a larger candidate type so that `pod` fits, when the pod
    /// can go nowhere else: its required pod affinity by hostname points at pods on this
    /// node (Karpenter keeps every type that fits a NodeClaim's pods, not one target, so a
    /// follower that needs more room than the target has still joins its leader). The
    /// cheapest candidate with room for the node's pods, its reserved slots and this pod
    /// becomes the target, within the NodePool's limits.
    fn grow_for(&mut self, pod: PodId, n: NewNodeId, li: usize) -> bool {
        let p = &self.pods[pod];
        if !p.affinity.iter().any(|t| t.key == wk::HOSTNAME) {
            return false;
        }
        let node = &self.new_nodes[n];
        let t = &self.templates[node.template];
        let split = Split {
            node: &node.labels,
            instance: &t.ty(node.target).labels,
            custom: &node.custom,
        };
        if self.check_topology(pod, li, &split).is_err() {
            return false;
        }
        let old = t.ty(node.target);
        // Room for what the node holds, its unfilled reserved slots and the pod.
        let reserved = node.free.minus(&node.room);
        let needed = node.used.plus(&reserved).plus(&p.requests);
        let planned = &self.planned[node.template];
        let within_limits = |c: &Resources| {
            t.limits
                .iter()
                .filter(|(name, _)| name.as_str() != "nodes")
                .all(|(name, limit)| {
                    let used = t.used.get(name).copied().unwrap_or(0);
                    used + planned.capacity.get(name) + c.get(name) - old.instance_type.capacity.get(name) <= *limit
                })
        };
        let Some(&bigger) = node.candidates.iter().find(|&&c| {
            let ty = t.ty(c);
            c != node.target && needed.fits_in(&ty.net).is_ok() && within_limits(&ty.instance_type.capacity)
        }) else {
            return false;
        };
        let grown = t.ty(bigger);
        let (net, capacity) = (grown.net.clone(), grown.instance_type.capacity.clone());
        let (old_net, old_capacity) = (old.net.clone(), old.instance_type.capacity.clone());
        let node = &mut self.new_nodes[n];
        node.target = bigger;
        node.free = node.free.plus(&net).minus(&old_net);
        node.room = node.room.plus(&net).minus(&old_net);
        let planned = &mut self.planned[node.template];
        planned.capacity = planned.capacity.plus(&capacity).minus(&old_capacity);
        true
    }

    /// The candidates of planned node `n` that agree with its target on every key an
    /// instance type decides that a topology constraint or a spread's node inclusion
    /// reads, so that the type finally chosen keeps the node in the domains its pods were
    /// counted in, and in the spreads that counted them (an arm64 node is not counted by a
    /// spread of amd64 pods under `nodeAffinityPolicy: Honor`); `None` when no such key is
    /// read.
    fn pinned_candidates(&self, n: NewNodeId) -> Option<Vec<TypeId>> {
        if self.type_keys.is_empty() {
            return None;
        }
        let node = &self.new_nodes[n];
        let t = &self.templates[node.template];
        let target = &t.ty(node.target).labels;
        Some(
            node.candidates
                .iter()
                .copied()
                .filter(|&i| {
                    let labels = &t.ty(i).labels;
                    self.type_keys.iter().all(|k| labels.get(k) == target.get(k))
                })
                .collect(),
        )
    }

    /// The types of an offer key whose labels the pod's topology constraints accept on a
    /// new node, when some constraint, or a spread's node inclusion, reads a key the
    /// instance type decides (kube-scheduler checks a node's own labels; Karpenter narrows
    /// the NodeClaim's requirements to the domains its topology allows): anti-affinity to
    /// pods on arm64 nodes opens an amd64 node, and a pod counted by a spread of amd64 pods
    /// that one more there would unbalance opens an arm64 node. `None` when no such key is
    /// in play (any type will do; the first is checked).
    #[allow(clippy::too_many_arguments)]
    fn topology_types(
        &self,
        pod: PodId,
        li: usize,
        ti: TemplateId,
        k: OfferKeyId,
        types: &[TypeId],
        hostname: &str,
        custom: &Requirements,
    ) -> Option<Vec<TypeId>> {
        if self.type_keys.is_empty() {
            return None;
        }
        let key = &self.offer_keys[ti][k];
        let t = &self.templates[ti];
        Some(
            types
                .iter()
                .copied()
                .filter(|&i| {
                    let split = WithHost {
                        hostname,
                        labels: Split {
                            node: &key.labels,
                            instance: &t.ty(i).labels,
                            custom,
                        },
                    };
                    self.check_topology(pod, li, &split).is_ok()
                })
                .collect(),
        )
    }

    /// The EBS volumes a new node of type `ty` attaches at most, as the EBS CSI driver
    /// will report it in the node's CSINode ([`crate::catalog::allocatable::ebs_volume_limit`]).
    /// Other drivers' limits on a node not yet launched are unknown: none is assumed.
    fn ebs_limit(&self, n: NewNodeId, ty: TypeId) -> u32 {
        let t = &self.templates[self.new_nodes[n].template];
        crate::catalog::allocatable::ebs_volume_limit(&t.ty(ty).instance_type, &t.settings)
    }

    /// Whether planned node `n`, as type `ty`, can attach the volumes of `pod` besides its
    /// pods' (kube-scheduler's `CSILimits`, with the CSINode the node will have).
    fn volumes_fit(&self, pod: PodId, n: NewNodeId, ty: TypeId) -> bool {
        let uses = &self.pods[pod].volumes;
        if !uses.iter().any(|u| u.driver == EBS_CSI_DRIVER) {
            return true;
        }
        let limit = self.ebs_limit(n, ty);
        self.new_nodes[n]
            .volumes
            .exceeds(uses, |d| (d == EBS_CSI_DRIVER).then_some(limit))
            .is_none()
    }

    /// Drops the candidate types of planned node `n` that cannot attach its pods' EBS volumes.
    fn keep_types_holding_volumes(&mut self, n: NewNodeId) {
        let count = self.new_nodes[n].volumes.count_with(EBS_CSI_DRIVER, &[]);
        if count == 0 {
            return;
        }
        let keep: Vec<TypeId> = self.new_nodes[n]
            .candidates
            .iter()
            .copied()
            .filter(|&ty| count <= self.ebs_limit(n, ty) as usize)
            .collect();
        self.new_nodes[n].candidates = keep;
    }

    /// Opens a node for a pod from the first template (heaviest NodePool first) that can
    /// take it at level `li`; each template that cannot adds its reason to `why`.
    pub(super) fn open_node(&mut self, pod: PodId, li: usize, why: &mut Why) -> bool {
        let class = self.class_of[pod];
        for ti in self.templates.ids() {
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
            let custom = self.custom_domains(pod, li, ti);
            let mut choices: Vec<(i64, f64, i64, usize, OfferKeyId)> = Vec::new();
            let mut narrowed: BTreeMap<OfferKeyId, Vec<TypeId>> = BTreeMap::new();
            let mut topo_err = None;
            for (&k, all_types) in by_offer {
                let key = &self.offer_keys[ti][k];
                let t = &self.templates[ti];
                let by_topology = self.topology_types(pod, li, ti, k, all_types, &hostname, &custom);
                let types = by_topology.as_deref().unwrap_or(all_types);
                // When the topology accepts no type, the cheapest one's rejection says why.
                let Some(&first) = types.first().or(all_types.first()) else {
                    continue;
                };
                let split = WithHost {
                    hostname: &hostname,
                    labels: Split {
                        node: &key.labels,
                        instance: &t.ty(first).labels,
                        custom: &custom,
                    },
                };
                if let Err(e) = self.check_topology(pod, li, &split) {
                    topo_err = Some(e);
                    continue;
                }
                // A zone that would take a spread placed earlier past its maxSkew breaks
                // the final state for that spread's placed pods: never (kube-scheduler's
                // podtopologyspread `Filter` counts the node once it exists).
                if self.lowers_a_placed_spread(pod, &split) {
                    topo_err = Some(crate::decide::provisioning::unschedulable::Rejection::Spread(
                        wk::ZONE.to_string(),
                    ));
                    continue;
                }
                let groups = &self.classes[class].groups;
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
                // At the same price, the zone and capacity type the pod prefers.
                let preferred = -self.preference_weight_at(pod, ti, k, types, price);
                choices.push((spread_count, price, preferred, in_zone, k));
                if let Some(list) = by_topology {
                    narrowed.insert(k, list);
                }
            }
            choices.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(a.1.total_cmp(&b.1))
                    .then(a.2.cmp(&b.2))
                    .then(a.3.cmp(&b.3))
                    .then(a.4.cmp(&b.4))
            });
            let Some(&(_, _, _, _, k)) = choices.first() else {
                if let Some(rejection) = topo_err {
                    why.add(Reason::Topology { rejection });
                }
                continue;
            };
            let (types, cacheable) = match narrowed.get(&k) {
                Some(types) => (types.clone(), false),
                None => (by_offer[&k].clone(), true),
            };
            let Some(Target {
                ty: target,
                quota,
                capacity: net,
            }) = self.choose_target(ti, &types, k, class, li, cacheable)
            else {
                why.add(self.no_target_reason(ti, &types));
                continue;
            };
            let t = &self.templates[ti];
            let key = &self.offer_keys[ti][k];
            let mut labels = key.labels.clone();
            labels.insert(wk::HOSTNAME.into(), hostname);
            let candidates = key.by_price.clone();
            let capacity = t.ty(target).instance_type.capacity.clone();
            let n = self.new_nodes.next_id();
            for (&c, &q) in &quota {
                if q > 0 {
                    self.progress[c].reserved += q;
                    self.progress[c].quota_nodes.push(n);
                }
            }
            let reserved = quota.iter().fold(Resources::default(), |acc, (c, q)| {
                let mut acc = acc;
                for _ in 0..*q {
                    acc = acc.plus(&self.classes[*c].requests);
                }
                acc
            });
            self.zone_nodes.entry(key.zone.clone()).or_default().push(n);
            self.new_nodes.push(NewNode {
                template: ti,
                zone: key.zone.clone(),
                capacity_type: key.capacity_type,
                labels,
                custom,
                target,
                candidates,
                used: Resources::default(),
                room: net.minus(&reserved),
                free: net,
                ports: Vec::new(),
                volumes: VolumeUsage::default(),
                pods: Vec::new(),
                quota,
                class_count: HashMap::new(),
            });
            if self.try_new_node(pod, n, li).is_ok() {
                let planned = &mut self.planned[ti];
                planned.capacity = planned.capacity.plus(&capacity);
                planned.nodes += 1;
                self.record_counted_zone(n);
                return true;
            }
            if let Some(node) = self.new_nodes.pop() {
                if let Some(list) = self.zone_nodes.get_mut(&node.zone) {
                    list.retain(|&x| x != n);
                }
                for (c, q) in node.quota {
                    let state = &mut self.progress[c];
                    state.reserved = state.reserved.saturating_sub(q);
                    state.quota_nodes.retain(|&x| x != n);
                }
            }
            why.add(Reason::Resources {
                nodepool: self.templates[ti].name.clone(),
                shortfall: Shortfall::NotPlaced,
            });
        }
        false
    }
}

/// Fixes each custom key in `keys` that `custom` leaves open to one value, the first that
/// one of the pod's requirement branches allows, as the node will be labelled
/// ([`crate::decide::provisioning::scheduler::labels::custom_labels`]). A spread's node inclusion (kube-scheduler's
/// podtopologyspread `matchNodeInclusionPolicies`, `nodeAffinityPolicy: Honor`) reads the
/// node's label: while the value is open, the planned node could be counted by a spread of
/// pods selecting `b` and then be labelled `a`, which kube-scheduler would not count.
fn pin_inclusion_keys(custom: &mut Requirements, keys: &BTreeSet<String>, branches: &[Requirements]) {
    for key in keys {
        let Some(r) = custom.get(key) else { continue };
        if !r.is_complement() && r.values().len() < 2 {
            continue;
        }
        let value = branches.iter().find_map(|b| match b.get(key) {
            Some(p) => narrowed(r, p)?.any_value(),
            None => r.any_value(),
        });
        if let Some(v) = value {
            custom.add(Requirement::in_values(key, [v]));
        }
    }
}
