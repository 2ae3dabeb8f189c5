//! Baseline (b): a model of Karpenter (its rules, simplified; not Karpenter's code, which
//! `bench/vs-karpenter` runs and measures).
//!
//! Provisioning: every 10 s (Karpenter's batch window is 1-10 s), the pending pods no
//! in-flight node was launched for are planned by first-fit decreasing
//! ([`crate::bench::ffd`], Karpenter's `pkg/controllers/provisioning/scheduling` written
//! out), and each planned node is launched at its cheapest offering; an offering out of
//! capacity falls to the next type of the node's list, then to on-demand.
//!
//! Consolidation, every minute, on nodes whose pods may all be disrupted, in Karpenter's
//! method order (`pkg/controllers/disruption`, `NewMethods`): emptiness (every empty
//! node, within the NodePool's budget, default 10% of nodes), then **multi-node** (the
//! largest prefix of the candidates, sorted by disruption cost, here by pod count, whose
//! pods the simulated kube-scheduler would bind to the other nodes, or to them and one
//! cheaper replacement), then
//! **single-node** (each candidate in that order: delete it, or replace it with one
//! cheaper node). Only one replacement node per command, never a split into several; a
//! spot node is never replaced by spot (`SpotToSpotConsolidation` is off by default), so
//! spot nodes are only deleted; no method moves an on-demand node back to spot when spot
//! capacity returns, beyond the price-driven replacement. A command launches its
//! replacement, waits for it to be Ready, then drains the candidates through the
//! Eviction API (a drain blocked by a PDB waits) and terminates them.
//!
//! Interruption: cordon and drain on the spot warning (Karpenter's interruption
//! controller); the pods' new nodes come from provisioning.

use std::collections::BTreeMap;

use carpool::decide::ProvisioningPlan;
use carpool::model::CapacityType;
use carpool::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Taint;
use serde_json::Value;

use super::baseline::{Autoscaler, Fleet};
use super::kube_scheduler::fits;
use super::node::SimNode;
use super::workload::{SimPod, pod_json};
use super::world::World;
use crate::bench::ffd;

/// The Karpenter model.
pub struct Karpenter {
    nodepools: Vec<Value>,
    nodeclasses: Vec<Value>,
    last_consolidation: f64,
    /// A command in progress: its candidates and its replacement's instance.
    command: Option<(Vec<String>, Option<String>)>,
    /// The pending pods of the last plan that launched nothing, and when.
    last_plan: Option<(f64, Vec<String>)>,
}

impl Karpenter {
    /// Karpenter with the scenario's NodePools and EC2NodeClasses.
    pub fn new(nodepools: &[Value], nodeclasses: &[Value]) -> Self {
        Karpenter {
            nodepools: nodepools.to_vec(),
            nodeclasses: nodeclasses.to_vec(),
            last_consolidation: 0.0,
            command: None,
            last_plan: None,
        }
    }

    fn template(&self, nodepool: &str) -> (BTreeMap<String, String>, Vec<Taint>) {
        let np = self.nodepools.iter().find(|n| n["metadata"]["name"] == nodepool);
        let labels = np
            .and_then(|n| serde_json::from_value(n["spec"]["template"]["metadata"]["labels"].clone()).ok())
            .unwrap_or_default();
        let taints = np
            .and_then(|n| serde_json::from_value(n["spec"]["template"]["spec"]["taints"].clone()).ok())
            .unwrap_or_default();
        (labels, taints)
    }

    /// FFD's plan for these pods (the pods bound to the nodes counted for zonal spreads).
    fn plan(&self, world: &World<'_>, pods: &[String]) -> ProvisioningPlan {
        let mut items: Vec<Value> = pods
            .iter()
            .filter_map(|k| world.pods.get(k))
            .map(|p| {
                let mut pending = p.clone();
                pending.node = None;
                pod_json(&pending, &world.shapes[p.shape], world.start)
            })
            .collect();
        let spread: std::collections::BTreeSet<usize> = pods
            .iter()
            .filter_map(|k| world.pods.get(k))
            .map(|p| p.shape)
            .filter(|s| !world.shapes[*s].template.spread.is_empty())
            .collect();
        if !spread.is_empty() {
            items.extend(
                world
                    .pods
                    .values()
                    .filter(|p| p.node.is_some() && spread.contains(&p.shape) && !pods.contains(&p.key))
                    .map(|p| pod_json(p, &world.shapes[p.shape], world.start)),
            );
            items.extend(world.node_objects());
        }
        items.extend(self.nodepools.iter().cloned());
        items.extend(self.nodeclasses.iter().cloned());
        let mut snapshot = Snapshot::default();
        if snapshot
            .add_text("simulation", &World::list(items).to_string())
            .is_err()
        {
            return ProvisioningPlan::default();
        }
        ffd::plan(&snapshot, world.region)
    }

    fn launch_plan(&self, world: &mut World<'_>, fleet: &mut Fleet, t: f64, plan: &ProvisioningPlan) -> Vec<String> {
        let mut launched = Vec::new();
        for n in &plan.nodes {
            let (mut labels, taints) = self.template(&n.nodepool);
            labels.extend(n.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            labels.insert("karpenter.sh/nodepool".into(), n.nodepool.clone());
            let mut tries: Vec<(String, CapacityType)> = n
                .instance_types
                .iter()
                .map(|it| (it.clone(), n.capacity_type))
                .collect();
            if n.capacity_type == CapacityType::Spot {
                tries.push((n.instance_type.clone(), CapacityType::OnDemand));
            }
            for (it, ct) in tries {
                if let Some(id) = fleet.launch(world, t, &it, &n.zone, ct, &labels, taints.clone(), &n.pods) {
                    launched.push(id);
                    break;
                }
            }
        }
        launched
    }

    /// Whether the candidates' pods would all be bound to the other usable nodes (and
    /// `extra`), by the simulated kube-scheduler's filters.
    fn fit_elsewhere(world: &World<'_>, fleet: &Fleet, candidates: &[String], extra: Option<&SimNode>) -> bool {
        let mut others: Vec<SimNode> = world
            .nodes
            .iter()
            .filter(|n| !candidates.contains(&n.name) && n.usable() && !fleet.draining.contains(&n.name))
            .cloned()
            .collect();
        if let Some(e) = extra {
            others.push(e.clone());
        }
        let names: std::collections::BTreeSet<&str> = others.iter().map(|n| n.name.as_str()).collect();
        let bound: Vec<&SimPod> = world
            .pods
            .values()
            .filter(|p| p.node.as_deref().is_some_and(|n| names.contains(n)))
            .collect();
        let moving: Vec<&SimPod> = candidates.iter().flat_map(|c| world.pods_on(c)).collect();
        fits(&moving, &bound, &others, &world.shapes)
    }

    /// Delete (None) or one cheaper replacement (its plan) for the candidates, if either works.
    fn compute(&self, world: &World<'_>, fleet: &Fleet, candidates: &[String]) -> Option<Option<ProvisioningPlan>> {
        if Self::fit_elsewhere(world, fleet, candidates, None) {
            return Some(None);
        }
        let pods: Vec<String> = candidates
            .iter()
            .flat_map(|c| world.pods_on(c))
            .map(|p| p.key.clone())
            .collect();
        let plan = self.plan(world, &pods);
        let [node] = plan.nodes.as_slice() else { return None };
        if !plan.unschedulable.is_empty() {
            return None;
        }
        let cand: Vec<&SimNode> = world.nodes.iter().filter(|n| candidates.contains(&n.name)).collect();
        let price: f64 = cand
            .iter()
            .map(|n| world.instances.get(&n.instance_id).map_or(0.0, |i| i.price))
            .sum();
        let all_spot = cand.iter().all(|n| n.capacity_type == CapacityType::Spot);
        if node.price_per_hour >= price || (all_spot && node.capacity_type == CapacityType::Spot) {
            return None;
        }
        Some(Some(plan))
    }

    fn consolidate(&mut self, world: &mut World<'_>, fleet: &mut Fleet, t: f64) {
        // A command in progress: replacement Ready, then drain, then terminate.
        if let Some((candidates, replacement)) = self.command.clone() {
            let ready = replacement
                .as_ref()
                .is_none_or(|id| world.nodes.iter().any(|n| &n.instance_id == id && n.ready));
            let gone = replacement.as_ref().is_some_and(|id| !world.instances.contains_key(id));
            if gone {
                for c in &candidates {
                    fleet.uncordon(world, c);
                }
                self.command = None;
                return;
            }
            if !ready {
                return;
            }
            let mut done = true;
            for c in &candidates {
                if fleet.drain(world, c) {
                    fleet.terminate(world, c);
                } else {
                    done = false;
                }
            }
            if done {
                self.command = None;
            }
            return;
        }
        let budget = (world.nodes.len() as f64 * 0.1).ceil().max(1.0) as usize;
        let mut candidates: Vec<(usize, String)> = world
            .nodes
            .iter()
            .filter(|n| n.usable() && !fleet.draining.contains(&n.name) && !world.warned(&n.instance_id))
            .filter(|n| {
                !world
                    .pods_on(&n.name)
                    .iter()
                    .any(|p| world.shapes[p.shape].template.do_not_disrupt)
            })
            .map(|n| (world.pods_on(&n.name).len(), n.name.clone()))
            .collect();
        candidates.sort();
        // Emptiness.
        let empty: Vec<String> = candidates
            .iter()
            .filter(|c| c.0 == 0)
            .take(budget)
            .map(|c| c.1.clone())
            .collect();
        if !empty.is_empty() {
            for e in empty {
                fleet.terminate(world, &e);
            }
            return;
        }
        let names: Vec<String> = candidates.iter().map(|c| c.1.clone()).take(100).collect();
        // Multi-node: the largest prefix (binary search, as Karpenter's
        // `firstNConsolidationOption`) that can go, with at most one replacement.
        let (mut lo, mut hi) = (2usize, names.len().min(budget.max(2)));
        let mut best: Option<(Vec<String>, Option<ProvisioningPlan>)> = None;
        while lo <= hi && hi >= 2 {
            let mid = (lo + hi) / 2;
            let prefix = names[..mid].to_vec();
            match self.compute(world, fleet, &prefix) {
                Some(cmd) => {
                    best = Some((prefix, cmd));
                    lo = mid + 1;
                }
                None => hi = mid - 1,
            }
        }
        // Single-node.
        if best.is_none() {
            for n in names.iter().take(budget.max(1)) {
                if let Some(cmd) = self.compute(world, fleet, std::slice::from_ref(n)) {
                    best = Some((vec![n.clone()], cmd));
                    break;
                }
            }
        }
        let Some((cands, plan)) = best else { return };
        for c in &cands {
            if let Some(n) = world.nodes.iter_mut().find(|n| &n.name == c) {
                n.unschedulable = true;
            }
            fleet.draining.insert(c.clone());
        }
        let replacement = match plan {
            Some(plan) => match self.launch_plan(world, fleet, t, &plan).into_iter().next() {
                Some(id) => Some(id),
                None => {
                    for c in &cands {
                        fleet.uncordon(world, c);
                    }
                    return;
                }
            },
            None => None,
        };
        self.command = Some((cands, replacement));
    }
}

impl Autoscaler for Karpenter {
    fn act(&mut self, world: &mut World<'_>, fleet: &mut Fleet, t: f64) {
        let pending = fleet.unprovided(world);
        // The same pods as last time, for which nothing could be launched: wait a minute
        // (Karpenter's batch would see the same unschedulable pods).
        let same = self
            .last_plan
            .as_ref()
            .is_some_and(|(at, p)| *p == pending && t - at < 60.0);
        if !pending.is_empty() && !same {
            let plan = self.plan(world, &pending);
            let launched = self.launch_plan(world, fleet, t, &plan);
            self.last_plan = launched.is_empty().then_some((t, pending));
        }
        if t - self.last_consolidation >= 60.0 {
            self.last_consolidation = t;
            self.consolidate(world, fleet, t);
        }
    }
}
