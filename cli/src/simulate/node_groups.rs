//! Baseline (a): node groups as Cluster Autoscaler runs them (a simplified model).
//!
//! Rules, from Cluster Autoscaler's FAQ and `core/scaleup`, `expander/waste`,
//! `core/scaledown` (kubernetes/autoscaler, cluster-autoscaler 1.3x defaults):
//! - each node group has one instance type and one capacity type (an ASG), spread over
//!   the region's zones (the ASG's AZ balancing: each new node in the zone where the group
//!   has the fewest);
//! - every 10 s (`--scan-interval`), for the pending pods no upcoming node was started
//!   for, each group that could take them (taints, selectors, room on an empty node of
//!   its type) is sized by packing them first-fit-decreasing onto new nodes of its type,
//!   and the **least-waste expander** picks the group that leaves the smallest share of
//!   cpu and memory unused (`expander/waste`); a group whose launch fails (no capacity)
//!   is backed off for 5 minutes;
//! - **scale-down**: a node whose requested cpu and memory are both under 50% of its
//!   allocatable (`--scale-down-utilization-threshold`) for 10 minutes
//!   (`--scale-down-unneeded-time`), whose pods the simulated kube-scheduler would all bind
//!   to the other nodes (Cluster Autoscaler simulates the scheduler's filters), and without
//!   pods that may not be evicted, is drained through the Eviction API and removed; none
//!   in the 10 minutes after a scale-up (`--scale-down-delay-after-add`); empty nodes go
//!   together, others one per pass;
//! - spot interruptions: an AWS Node Termination Handler cordons and drains the node on
//!   the warning (Cluster Autoscaler itself does nothing).

use std::collections::{BTreeMap, HashMap};

use carpool::model::Resources;
use k8s_openapi::api::core::v1::Taint;

use super::baseline::{Autoscaler, Fleet};
use super::kube_scheduler::{admits, fits};
use super::node::SimNode;
use super::scenario::{NodeGroup, capacity_type, parse_taint};
use super::workload::SimPod;
use super::world::World;

/// The Cluster Autoscaler model.
pub struct NodeGroups {
    groups: Vec<NodeGroup>,
    backoff: HashMap<usize, f64>,
    last_scale_up: f64,
    unneeded_since: BTreeMap<String, f64>,
}

impl NodeGroups {
    /// The groups of a scenario.
    pub fn new(groups: &[NodeGroup]) -> Self {
        NodeGroups {
            groups: groups.to_vec(),
            backoff: HashMap::new(),
            last_scale_up: f64::NEG_INFINITY,
            unneeded_since: BTreeMap::new(),
        }
    }

    fn taints(g: &NodeGroup) -> Vec<Taint> {
        g.taints
            .iter()
            .filter_map(|t| parse_taint(t).ok())
            .map(|(key, value, effect)| Taint {
                key,
                value,
                effect,
                time_added: None,
            })
            .collect()
    }

    fn template(world: &World<'_>, g: &NodeGroup, zone: &str) -> Option<SimNode> {
        let ct = capacity_type(&g.capacity_type).ok()?;
        let mut labels = g.labels.clone();
        labels.insert("eks.amazonaws.com/nodegroup".into(), g.name.clone());
        SimNode::registered(
            world.region,
            "template",
            "template",
            &g.instance_type,
            zone,
            ct,
            &labels,
            Self::taints(g),
        )
    }

    fn scale_up(&mut self, world: &mut World<'_>, fleet: &mut Fleet, t: f64) {
        let pending = fleet.unprovided(world);
        if pending.is_empty() {
            return;
        }
        let zones = world.region.zones().to_vec();
        let mut best: Option<(f64, usize, Vec<Vec<String>>)> = None;
        for (gi, g) in self.groups.iter().enumerate() {
            if self.backoff.get(&gi).is_some_and(|until| *until > t) {
                continue;
            }
            let Some(template) = Self::template(world, g, zones.first().map_or("", String::as_str)) else {
                continue;
            };
            let mut pods: Vec<(&String, usize, &Resources)> = pending
                .iter()
                .filter_map(|k| world.pods.get(k))
                .filter(|p| admits(&world.shapes[p.shape], &template))
                .filter(|p| world.shapes[p.shape].requests.fits_in(&template.allocatable).is_ok())
                .map(|p| (&p.key, p.shape, &world.shapes[p.shape].requests))
                .collect();
            if pods.is_empty() {
                continue;
            }
            pods.sort_by_key(|p| std::cmp::Reverse((p.2.cpu_millis, p.2.memory)));
            // First-fit decreasing onto new nodes of the group's type.
            let mut bins: Vec<(Resources, Vec<String>, Vec<usize>)> = Vec::new();
            for (key, shape, req) in pods {
                let anti = world.shapes[shape].template.anti_affinity.is_some();
                let slot = bins
                    .iter_mut()
                    .find(|b| req.plus(&b.0).fits_in(&template.allocatable).is_ok() && !(anti && b.2.contains(&shape)));
                match slot {
                    Some(b) => {
                        b.0 = b.0.plus(req);
                        b.1.push(key.clone());
                        b.2.push(shape);
                    }
                    None => bins.push((req.clone(), vec![key.clone()], vec![shape])),
                }
            }
            let existing = world
                .nodes
                .iter()
                .chain(fleet.booting())
                .filter(|n| n.labels.get("eks.amazonaws.com/nodegroup") == Some(&g.name))
                .count();
            let room = (g.max as usize).saturating_sub(existing);
            bins.truncate(room);
            if bins.is_empty() {
                continue;
            }
            let alloc = &template.allocatable;
            let n = bins.len() as f64;
            let used_cpu: f64 = bins.iter().map(|b| b.0.cpu_millis as f64).sum();
            let used_mem: f64 = bins.iter().map(|b| b.0.memory as f64).sum();
            let waste = (1.0 - used_cpu / (n * alloc.cpu_millis as f64)) + (1.0 - used_mem / (n * alloc.memory as f64));
            if best.as_ref().is_none_or(|b| waste < b.0) {
                best = Some((waste, gi, bins.into_iter().map(|b| b.1).collect()));
            }
        }
        let Some((_, gi, nodes)) = best else { return };
        let g = self.groups[gi].clone();
        let Ok(ct) = capacity_type(&g.capacity_type) else {
            return;
        };
        let mut labels = g.labels.clone();
        labels.insert("eks.amazonaws.com/nodegroup".into(), g.name.clone());
        for pods in nodes {
            let mut per_zone: BTreeMap<&str, usize> = zones.iter().map(|z| (z.as_str(), 0)).collect();
            for n in world.nodes.iter().chain(fleet.booting()) {
                if n.labels.get("eks.amazonaws.com/nodegroup") == Some(&g.name)
                    && let Some(c) = per_zone.get_mut(n.zone.as_str())
                {
                    *c += 1;
                }
            }
            let zone = per_zone
                .iter()
                .min_by_key(|(_, c)| **c)
                .map(|(z, _)| z.to_string())
                .unwrap_or_default();
            if fleet
                .launch(world, t, &g.instance_type, &zone, ct, &labels, Self::taints(&g), &pods)
                .is_none()
            {
                self.backoff.insert(gi, t + 300.0);
                return;
            }
            self.last_scale_up = t;
        }
    }

    fn scale_down(&mut self, world: &mut World<'_>, fleet: &mut Fleet, t: f64) {
        // Drains in progress: finish or give up.
        for name in fleet.draining.clone() {
            if world.warned(
                &world
                    .nodes
                    .iter()
                    .find(|n| n.name == name)
                    .map(|n| n.instance_id.clone())
                    .unwrap_or_default(),
            ) {
                continue;
            }
            if fleet.drain(world, &name) {
                fleet.terminate(world, &name);
            }
        }
        if t - self.last_scale_up < 600.0 {
            return;
        }
        let mut removable_empty = Vec::new();
        let mut removable = Vec::new();
        for n in &world.nodes {
            if !n.usable() || fleet.draining.contains(&n.name) || world.warned(&n.instance_id) {
                self.unneeded_since.remove(&n.name);
                continue;
            }
            let pods = world.pods_on(&n.name);
            let used = pods
                .iter()
                .fold(Resources::default(), |a, p| a.plus(&world.shapes[p.shape].requests));
            let util = (used.cpu_millis as f64 / n.allocatable.cpu_millis.max(1) as f64)
                .max(used.memory as f64 / n.allocatable.memory.max(1) as f64);
            if util >= 0.5 {
                self.unneeded_since.remove(&n.name);
                continue;
            }
            let since = *self.unneeded_since.entry(n.name.clone()).or_insert(t);
            if t - since < 600.0 || pods.iter().any(|p| world.shapes[p.shape].template.do_not_disrupt) {
                continue;
            }
            if pods.is_empty() {
                removable_empty.push(n.name.clone());
            } else {
                removable.push(n.name.clone());
            }
        }
        for name in removable_empty {
            fleet.terminate(world, &name);
            self.unneeded_since.remove(&name);
        }
        // One non-empty node per pass, if its pods fit on the others.
        for name in removable {
            let others: Vec<SimNode> = world
                .nodes
                .iter()
                .filter(|n| n.name != name && n.usable() && !fleet.draining.contains(&n.name))
                .cloned()
                .collect();
            let names: std::collections::BTreeSet<&str> = others.iter().map(|n| n.name.as_str()).collect();
            let bound: Vec<&SimPod> = world
                .pods
                .values()
                .filter(|p| p.node.as_deref().is_some_and(|n| names.contains(n)))
                .collect();
            let moving = world.pods_on(&name);
            if fits(&moving, &bound, &others, &world.shapes) {
                self.unneeded_since.remove(&name);
                if fleet.drain(world, &name) {
                    fleet.terminate(world, &name);
                }
                break;
            }
        }
    }
}

impl Autoscaler for NodeGroups {
    fn act(&mut self, world: &mut World<'_>, fleet: &mut Fleet, t: f64) {
        self.scale_up(world, fleet, t);
        self.scale_down(world, fleet, t);
    }
}
