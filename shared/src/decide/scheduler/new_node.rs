//! New nodes (Karpenter's `nodeclaim.go`): joining a planned node, and opening one from
//! the heaviest NodePool that can take the pod, in the zone and capacity type that keep
//! its spreads balanced at the lowest price, filled towards the type [`super::target`]
//! chooses.

use std::collections::{BTreeMap, HashMap};

use super::index::{ClassId, NewNodeId, OfferKeyId, PodId, TemplateId, TypeId, Types};
use super::labels::{Split, WithHost, matches_split};
use super::{Scheduler, Why};
use crate::decide::pod::HostPort;
use crate::decide::taints::untolerated;
use crate::decide::topology::Domains;
use crate::decide::unschedulable::{Reason, Shortfall};
use crate::decide::volumes::{EBS_CSI_DRIVER, VolumeUsage};
use crate::model::well_known as wk;
use crate::model::{CapacityType, Resources};

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

impl Scheduler {
    /// Places a pod on planned node `n` at level `li`, or says how the node refuses it.
    pub(super) fn try_new_node(&mut self, pod: PodId, n: NewNodeId, li: usize) -> Result<(), Refusal> {
        let p = &self.pods[pod];
        let class = self.class_of[pod];
        let node = &self.new_nodes[n];
        let t = &self.templates[node.template];
        let target = t.ty(node.target);
        let quota = node.quota.get(&class).copied().unwrap_or(0);
        let room = if quota > 0 { &node.free } else { &node.room };
        if p.requests.fits_in(room).is_err() {
            return Err(Refusal::ForGood);
        }
        let count = node.class_count.get(&class).copied().unwrap_or(0);
        if count >= self.classes[class].per_node_cap {
            return Err(Refusal::ForGood);
        }
        if untolerated(&p.tolerations, &t.taints).is_some() {
            return Err(Refusal::ForGood);
        }
        if p.host_ports.iter().any(|a| node.ports.iter().any(|b| a.conflicts(b))) {
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
            };
            branches.iter().any(|b| matches_split(b, &split))
        };
        let seen = count > 0;
        if !seen && !fits_type(&node.target) {
            return Err(Refusal::ForGood);
        }
        let split = Split {
            node: &node.labels,
            instance: &target.labels,
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
            let state = &mut self.progress[class];
            state.reserved = state.reserved.saturating_sub(1);
        } else {
            node.room = node.room.minus(&p.requests);
        }
        node.ports.extend(p.host_ports.iter().cloned());
        node.volumes.add(&p.volumes);
        node.pods.push(pod);
        *node.class_count.entry(class).or_insert(0) += 1;
        let instance = &self.templates[node.template].ty(node.target).labels;
        let split = Split {
            node: &node.labels,
            instance,
        };
        self.topology.record(&p.namespace, &p.labels, &p.anti_affinity, &split);
        let state = &mut self.progress[class];
        state.remaining = state.remaining.saturating_sub(1);
        self.keep_types_holding_volumes(n);
        Ok(())
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
            let mut choices: Vec<(i64, f64, usize, OfferKeyId)> = Vec::new();
            let mut topo_err = None;
            for (&k, types) in by_offer {
                let key = &self.offer_keys[ti][k];
                let t = &self.templates[ti];
                let split = WithHost {
                    hostname: &hostname,
                    labels: Split {
                        node: &key.labels,
                        instance: &t.ty(types[0]).labels,
                    },
                };
                if let Err(e) = self.check_topology(pod, li, &split) {
                    topo_err = Some(e);
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
                choices.push((spread_count, price, in_zone, k));
            }
            choices.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(a.1.total_cmp(&b.1))
                    .then(a.2.cmp(&b.2))
                    .then(a.3.cmp(&b.3))
            });
            let Some(&(_, _, _, k)) = choices.first() else {
                if let Some(rejection) = topo_err {
                    why.add(Reason::Topology { rejection });
                }
                continue;
            };
            let Some((target, quota)) = self.choose_target(ti, &by_offer[&k], k, class, li) else {
                why.add(Reason::Limits {
                    nodepool: self.templates[ti].name.clone(),
                });
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
            let net = t.ty(target).net.clone();
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
