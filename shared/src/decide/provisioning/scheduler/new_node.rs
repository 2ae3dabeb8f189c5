//! A new node the plan launches (Karpenter's `nodeclaim.go`): it decides by itself
//! whether it takes a pod ([`NewNode::can_add`], Karpenter's `NodeClaim.CanAdd`: room, the
//! class's share of the node, host ports, its NodePool's taints, volume attach limits,
//! requirements, topology, `minValues`) and takes it ([`NewNode::add`], `NodeClaim.Add`),
//! narrowing its candidate types and custom keys as pods join. A node that lacks room for
//! a pod that must follow its pods there moves to a larger candidate
//! ([`NewNode::larger_type_for`]). At the end its fitting types are ordered by price, then
//! by what its pods prefer ([`NewNode::prefer_at_equal_price`]). The scheduler opens nodes
//! and chooses among them.

use std::collections::{BTreeMap, HashMap};

use crate::decide::provisioning::pod::{HostPort, PodInfo};
use crate::decide::provisioning::scheduler::class::Class;
use crate::decide::provisioning::scheduler::custom_keys::narrow;
use crate::decide::provisioning::scheduler::index::{ClassId, IdVec, PodId, TemplateId, TypeId, Types};
use crate::decide::provisioning::scheduler::min_values::has_min_values;
use crate::decide::provisioning::scheduler::narrowed::Narrowed;
use crate::decide::provisioning::scheduler::offer_key::OfferKey;
use crate::decide::provisioning::scheduler::planned::Planned;
use crate::decide::provisioning::scheduler::pod_at::PodAt;
use crate::decide::provisioning::scheduler::preference::preference_weight;
use crate::decide::provisioning::scheduler::refusal::Refusal;
use crate::decide::provisioning::scheduler::split::{Split, matches_split};
use crate::decide::provisioning::scheduler::target::Target;
use crate::decide::provisioning::scheduler::topology_check::TopologyCheck;
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::topology::{PlacedPod, Topology};
use crate::decide::provisioning::volumes::{EBS_CSI_DRIVER, VolumeUsage};
use crate::model::well_known as wk;
use crate::model::{CapacityType, Requirements, ReservationTarget, Resources};

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
    /// The capacity reservation a reserved node is launched into
    /// ([`crate::decide::provisioning::scheduler::reserved`]).
    pub(super) reservation: Option<ReservationTarget>,
}

impl NewNode {
    /// A node of template `template` under offer key `key`, named `hostname`, with custom
    /// keys `custom`, filled towards `target`; `reserved` is what its reserved slots hold
    /// (Karpenter's `NewNodeClaim`). It holds no pod yet.
    pub(super) fn new(
        template: TemplateId,
        key: &OfferKey,
        hostname: String,
        custom: Requirements,
        target: Target,
        reserved: &Resources,
    ) -> Self {
        let mut labels = key.labels.clone();
        labels.insert(wk::HOSTNAME.into(), hostname);
        let Target {
            ty,
            quota,
            capacity: net,
        } = target;
        NewNode {
            template,
            zone: key.zone.clone(),
            capacity_type: key.capacity_type,
            labels,
            custom,
            target: ty,
            candidates: key.by_price.clone(),
            used: Resources::default(),
            room: net.minus(reserved),
            free: net,
            ports: Vec::new(),
            volumes: VolumeUsage::default(),
            pods: Vec::new(),
            quota,
            class_count: HashMap::new(),
            reservation: None,
        }
    }

    /// Whether the node, of template `t`, takes the pod at its level, and what taking it
    /// narrows (Karpenter's `NodeClaim.CanAdd`, `pkg/controllers/provisioning/scheduling/
    /// nodeclaim.go`): room (a reserved slot's, or any pod's), the class's share of the
    /// node (`per_node_cap`), host ports (its pods' and the target type's DaemonSets'), its
    /// NodePool's taints, volume attach limits, requirements (the first pod of a class on
    /// the node must match the target type, and narrows the candidates to the types it
    /// matches), topology (`topology`), and enough types left for `minValues`. `type_keys`
    /// are the keys an instance type decides that topology reads.
    pub(super) fn can_add(
        &self,
        at: &PodAt<'_>,
        t: &Template,
        topology: &TopologyCheck<'_>,
        type_keys: &[String],
    ) -> Result<Narrowed, Refusal> {
        let p = at.pod;
        let class = at.class_id;
        let target = t.ty(self.target);
        let quota = self.quota.get(&class).copied().unwrap_or(0);
        let room = if quota > 0 { &self.free } else { &self.room };
        if p.requests.fits_in(room).is_err() {
            return Err(Refusal::NoRoom);
        }
        if self.class_count.get(&class).copied().unwrap_or(0) >= at.class.per_node_cap {
            return Err(Refusal::ForGood);
        }
        if p.host_ports.iter().any(|a| self.ports.iter().any(|b| a.conflicts(b)))
            || HostPort::any_conflict(&p.host_ports, &target.daemon_ports).is_some()
        {
            return Err(Refusal::ForGood);
        }
        if at.nodepool_taint(t).is_some() {
            return Err(Refusal::ForGood);
        }
        if !self.volumes_fit(p, t, self.target) {
            return Err(Refusal::ForGood);
        }
        let branches = at.branches();
        let fits_type = |i: &TypeId| {
            let split = Split {
                node: &self.labels,
                instance: &t.ty(*i).labels,
                custom: &self.custom,
            };
            branches.iter().any(|b| matches_split(b, &split))
                && HostPort::any_conflict(&p.host_ports, &t.ty(*i).daemon_ports).is_none()
        };
        // The first pod of its class on the node narrows the node's candidate types.
        let seen = self.class_count.get(&class).copied().unwrap_or(0) > 0;
        if !seen && !fits_type(&self.target) {
            return Err(Refusal::ForGood);
        }
        let split = Split {
            node: &self.labels,
            instance: &target.labels,
            custom: &self.custom,
        };
        if let Err(e) = topology.check(at, &split) {
            return Err(if e.is_permanent_on_a_node() {
                Refusal::ForGood
            } else {
                Refusal::ForNow
            });
        }
        let candidates: Option<Vec<TypeId>> =
            (!seen).then(|| self.candidates.iter().copied().filter(fits_type).collect());
        if !self.keeps_min_values(t, candidates.as_deref(), &p.requests) {
            return Err(Refusal::MinValues);
        }
        let pinned = self.pinned_candidates(t, type_keys);
        let custom = (!seen && !self.custom.is_empty())
            .then(|| {
                let b = branches.iter().find(|b| matches_split(b, &split))?;
                narrow(&self.custom, b)
            })
            .flatten();
        Ok(Narrowed {
            candidates,
            pinned,
            custom,
        })
    }

    /// Places `pod` (`id`, of `class`) on the node, of template `t`, with what its
    /// placement narrowed: its requests, host ports and volumes are taken, from a slot
    /// reserved for its class when one is left; the pod is recorded in `topology`; and the
    /// candidate types that cannot attach the node's volumes are dropped (Karpenter's
    /// `NodeClaim.Add`). Returns whether it took a reserved slot.
    pub(super) fn add(
        &mut self,
        id: PodId,
        pod: &PodInfo,
        class: ClassId,
        narrowed: Narrowed,
        t: &Template,
        topology: &mut Topology,
    ) -> bool {
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
        let split = Split {
            node: &self.labels,
            instance: &t.ty(self.target).labels,
            custom: &self.custom,
        };
        topology.record(PlacedPod::planned(pod), &split, &t.taints);
        self.keep_types_holding_volumes(t);
        reserved
    }

    /// The larger candidate type the node, of template `t`, can move to so that the pod
    /// fits, when the pod can go nowhere else: its required pod affinity by hostname points
    /// at pods on this node (Karpenter keeps every type that fits a NodeClaim's pods, not
    /// one target, so a follower that needs more room than the target has still joins its
    /// leader). The cheapest candidate with room for the node's pods, its reserved slots
    /// and this pod, within the NodePool's limits (`planned` is what they count).
    pub(super) fn larger_type_for(
        &self,
        at: &PodAt<'_>,
        t: &Template,
        planned: &Planned,
        topology: &TopologyCheck<'_>,
    ) -> Option<TypeId> {
        let p = at.pod;
        if !p.affinity.iter().any(|t| t.key == wk::HOSTNAME) {
            return None;
        }
        let split = Split {
            node: &self.labels,
            instance: &t.ty(self.target).labels,
            custom: &self.custom,
        };
        if topology.check(at, &split).is_err() {
            return None;
        }
        let old = t.ty(self.target);
        // Room for what the node holds, its unfilled reserved slots and the pod.
        let reserved = self.free.minus(&self.room);
        let needed = self.used.plus(&reserved).plus(&p.requests);
        let within_limits = |c: &Resources| {
            t.limits
                .iter()
                .filter(|(name, _)| name.as_str() != "nodes")
                .all(|(name, limit)| {
                    let used = t.used.get(name).copied().unwrap_or(0);
                    used + planned.capacity.get(name) + c.get(name) - old.instance_type.capacity.get(name) <= *limit
                })
        };
        self.candidates.iter().copied().find(|&c| {
            let ty = t.ty(c);
            c != self.target && needed.fits_in(&ty.net).is_ok() && within_limits(&ty.instance_type.capacity)
        })
    }

    /// Moves the node, of template `t`, to type `bigger` ([`Self::larger_type_for`]):
    /// its room grows by the difference in net allocatable. Returns the type it had.
    pub(super) fn grow_to(&mut self, bigger: TypeId, t: &Template) -> TypeId {
        let old = self.target;
        let (net, old_net) = (&t.ty(bigger).net, &t.ty(old).net);
        self.target = bigger;
        self.free = self.free.plus(net).minus(old_net);
        self.room = self.room.plus(net).minus(old_net);
        old
    }

    /// Gives up the slots still reserved for `class` on the node, once it can no longer
    /// take its pods (`requests`: one pod's): their room goes back to any pod. Returns how
    /// many it gave up.
    pub(super) fn release_quota(&mut self, class: ClassId, requests: &Resources) -> u32 {
        let Some(q) = self.quota.get_mut(&class) else { return 0 };
        let left = std::mem::take(q);
        for _ in 0..left {
            self.room = self.room.plus(requests);
        }
        left
    }

    /// Of `candidates`, the types that hold `used` on the node, of template `t`, and, under
    /// NodePool limits, exceed in no limited resource the capacity of the type the limits
    /// were checked against when the node was opened.
    pub(super) fn holding_types<'a>(
        &'a self,
        t: &'a Template,
        candidates: &'a [TypeId],
        used: &'a Resources,
    ) -> impl Iterator<Item = TypeId> + 'a {
        let target = &t.ty(self.target).instance_type.capacity;
        candidates.iter().copied().filter(move |&i| {
            used.fits_in(&t.ty(i).net).is_ok()
                && t.limits
                    .keys()
                    .filter(|k| *k != "nodes")
                    .all(|k| t.ty(i).instance_type.capacity.get(k) <= target.get(k))
        })
    }

    /// Reorders the node's fitting types (of template `t`), cheapest first, so that among
    /// types of the same price those its pods prefer (by summed preference weight,
    /// [`preference_weight`]) come first; `classes` and `pods` give each class's pod.
    pub(super) fn prefer_at_equal_price(
        &self,
        t: &Template,
        classes: &IdVec<ClassId, Class>,
        pods: &IdVec<PodId, PodInfo>,
        fitting: &mut [TypeId],
    ) {
        let classes: Vec<(&PodInfo, i64)> = self
            .class_count
            .iter()
            .map(|(&c, &n)| (&pods[classes[c].rep], i64::from(n)))
            .filter(|(p, _)| !p.preferred.is_empty())
            .collect();
        if classes.is_empty() {
            return;
        }
        let price = |i: TypeId| t.ty(i).price(&self.zone, self.capacity_type).unwrap_or(f64::INFINITY);
        let weight = |i: TypeId| {
            let split = Split {
                node: &self.labels,
                instance: &t.ty(i).labels,
                custom: &self.custom,
            };
            classes
                .iter()
                .map(|(p, n)| n * preference_weight(p, &split))
                .sum::<i64>()
        };
        let mut keyed: Vec<(f64, i64, TypeId)> = fitting.iter().map(|&i| (price(i), -weight(i), i)).collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (slot, (_, _, i)) in fitting.iter_mut().zip(keyed) {
            *slot = i;
        }
    }

    /// Whether the node, of template `t`, with `extra` more requested and its candidate
    /// types narrowed to `candidates` (or as they are), still has enough types that hold
    /// its pods for the template's `minValues` (Karpenter's `NodeClaim.Add` filters the
    /// instance types by requirements and requests, then refuses the pod when fewer than
    /// `minValues` values remain).
    fn keeps_min_values(&self, t: &Template, candidates: Option<&[TypeId]>, extra: &Resources) -> bool {
        if !has_min_values(t) {
            return true;
        }
        let used = self.used.plus(extra);
        let holding: Vec<&BTreeMap<String, String>> = self
            .holding_types(t, candidates.unwrap_or(&self.candidates), &used)
            .map(|i| &t.ty(i).labels)
            .collect();
        t.requirements.check_min_values(holding.iter().copied()).is_ok()
    }

    /// The node's candidates that agree with its target on every key in `type_keys` (the
    /// keys an instance type decides that a topology constraint or a spread's node
    /// inclusion reads), so that the type finally chosen keeps the node in the domains its
    /// pods were counted in, and in the spreads that counted them (an arm64 node is not
    /// counted by a spread of amd64 pods under `nodeAffinityPolicy: Honor`); `None` when no
    /// such key is read.
    fn pinned_candidates(&self, t: &Template, type_keys: &[String]) -> Option<Vec<TypeId>> {
        if type_keys.is_empty() {
            return None;
        }
        let target = &t.ty(self.target).labels;
        Some(
            self.candidates
                .iter()
                .copied()
                .filter(|&i| {
                    let labels = &t.ty(i).labels;
                    type_keys.iter().all(|k| labels.get(k) == target.get(k))
                })
                .collect(),
        )
    }

    /// The EBS volumes the node, of template `t`, attaches at most as type `ty`, as the
    /// EBS CSI driver will report it in the node's CSINode
    /// ([`crate::catalog::allocatable::ebs_volume_limit`]). Other drivers' limits on a node
    /// not yet launched are unknown: none is assumed.
    fn ebs_limit(t: &Template, ty: TypeId) -> u32 {
        crate::catalog::allocatable::ebs_volume_limit(&t.ty(ty).instance_type, &t.settings)
    }

    /// Whether the node, as type `ty` of template `t`, can attach the volumes of `pod`
    /// besides its pods' (kube-scheduler's `CSILimits`, with the CSINode the node will
    /// have).
    fn volumes_fit(&self, pod: &PodInfo, t: &Template, ty: TypeId) -> bool {
        let uses = &pod.volumes;
        if !uses.iter().any(|u| u.driver == EBS_CSI_DRIVER) {
            return true;
        }
        let limit = Self::ebs_limit(t, ty);
        self.volumes
            .exceeds(uses, |d| (d == EBS_CSI_DRIVER).then_some(limit))
            .is_none()
    }

    /// Drops the candidate types, of template `t`, that cannot attach the node's pods' EBS
    /// volumes.
    fn keep_types_holding_volumes(&mut self, t: &Template) {
        let count = self.volumes.count_with(EBS_CSI_DRIVER, &[]);
        if count == 0 {
            return;
        }
        let keep: Vec<TypeId> = self
            .candidates
            .iter()
            .copied()
            .filter(|&ty| count <= Self::ebs_limit(t, ty) as usize)
            .collect();
        self.candidates = keep;
    }
}
