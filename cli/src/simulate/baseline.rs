//! What the two baselines share: their own cluster in the simulated world (instances
//! that boot into Nodes, with the same boot-time distribution), launches that fail in an
//! offering out of capacity, drains through the Eviction API (PDBs holding), and spot
//! interruption warnings handled as a node termination handler does (cordon, drain).

use std::collections::{BTreeMap, BTreeSet};

use carpool::model::CapacityType;
use carpool::ports::OfferingKey;
use k8s_openapi::api::core::v1::Taint;

use super::node::SimNode;
use super::world::{NoMirror, STEP, SimInstance, World};

/// An autoscaler's loop.
pub trait Autoscaler {
    /// One pass, at `t`: launch and remove through `fleet`.
    fn act(&mut self, world: &mut World<'_>, fleet: &mut Fleet, t: f64);
    /// How often it runs, in seconds.
    fn period(&self) -> f64 {
        10.0
    }
}

struct Booting {
    node: SimNode,
    ready_at: f64,
}

/// A baseline's instances and the pods it launched them for.
#[derive(Default)]
pub struct Fleet {
    next: u64,
    booting: BTreeMap<String, Booting>,
    /// Pods a booting instance was launched for.
    pub nominated: BTreeMap<String, String>,
    /// Nodes being drained for removal.
    pub draining: BTreeSet<String>,
}

impl Fleet {
    /// Launches an instance, unless its offering is out of capacity.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        world: &mut World<'_>,
        t: f64,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        labels: &BTreeMap<String, String>,
        taints: Vec<Taint>,
        pods: &[String],
    ) -> Option<String> {
        let key = OfferingKey {
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type,
        };
        if world.outages.contains(&key) {
            return None;
        }
        self.next += 1;
        let id = format!("i-b{:016x}", self.next);
        let node = SimNode::registered(
            world.region,
            &id,
            &id,
            instance_type,
            zone,
            capacity_type,
            labels,
            taints,
        )?;
        let price = world.price(instance_type, zone, capacity_type);
        world.instances.insert(
            id.clone(),
            SimInstance {
                id: id.clone(),
                instance_type: instance_type.into(),
                zone: zone.into(),
                capacity_type,
                price,
                launched_at: t,
            },
        );
        world.metrics.launches += 1;
        let ready_at = t + world.boot_seconds(&id);
        self.booting.insert(id.clone(), Booting { node, ready_at });
        for p in pods {
            self.nominated.insert(p.clone(), id.clone());
        }
        Some(id)
    }

    /// The instances still booting.
    pub fn booting(&self) -> impl Iterator<Item = &SimNode> {
        self.booting.values().map(|b| &b.node)
    }

    /// Pending pods no booting instance was launched for.
    pub fn unprovided(&self, world: &World<'_>) -> Vec<String> {
        world
            .pods
            .values()
            .filter(|p| p.node.is_none())
            .filter(|p| self.nominated.get(&p.key).is_none_or(|i| !self.booting.contains_key(i)))
            .map(|p| p.key.clone())
            .collect()
    }

    /// Evicts what it can of a node's pods; true once none is left.
    pub fn drain(&mut self, world: &mut World<'_>, node: &str) -> bool {
        if let Some(n) = world.nodes.iter_mut().find(|n| n.name == node) {
            n.unschedulable = true;
        }
        self.draining.insert(node.to_string());
        let keys: Vec<String> = world.pods_on(node).iter().map(|p| p.key.clone()).collect();
        let mut empty = true;
        for k in keys {
            empty &= world.evict(&k, &NoMirror);
        }
        empty
    }

    /// Terminates a node's instance and deletes the Node.
    pub fn terminate(&mut self, world: &mut World<'_>, node: &str) {
        if let Some(n) = world.nodes.iter().find(|n| n.name == node) {
            world.instances.remove(&n.instance_id.clone());
        }
        world.nodes.retain(|n| n.name != node);
        self.draining.remove(node);
    }

    /// Gives a node back to the scheduler (a drain abandoned).
    pub fn uncordon(&mut self, world: &mut World<'_>, node: &str) {
        if let Some(n) = world.nodes.iter_mut().find(|n| n.name == node) {
            n.unschedulable = false;
        }
        self.draining.remove(node);
    }
}

/// Runs a baseline over the world for `seconds`; `tick` is told each simulated minute.
pub fn run<'a>(
    mut world: World<'a>,
    autoscaler: &mut dyn Autoscaler,
    seconds: f64,
    tick: &mut dyn FnMut(u64),
) -> World<'a> {
    let mut fleet = Fleet::default();
    let mut t = 0.0;
    let mut next_act = 0.0;
    let mut minute = 0u64;
    while t < seconds {
        // The kubelets.
        let ready: Vec<String> = fleet
            .booting
            .iter()
            .filter(|(_, b)| b.ready_at <= t)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ready {
            if let Some(b) = fleet.booting.remove(&id)
                && world.instances.contains_key(&id)
            {
                world.nodes.push(b.node);
            }
        }
        world.step(t, &NoMirror);
        fleet.booting.retain(|id, _| world.instances.contains_key(id));
        // The node termination handler: cordon and drain on the warning.
        for w in std::mem::take(&mut world.warnings) {
            world.metrics.interruptions_handled += 1;
            if let Some(name) = world
                .nodes
                .iter()
                .find(|n| n.instance_id == w.instance_id)
                .map(|n| n.name.clone())
            {
                fleet.drain(&mut world, &name);
            }
        }
        if t >= next_act {
            autoscaler.act(&mut world, &mut fleet, t);
            next_act = t + autoscaler.period();
        }
        t += STEP;
        if t >= (minute + 1) as f64 * 60.0 {
            minute += 1;
            tick(minute);
        }
    }
    world.finish(t);
    world
}
