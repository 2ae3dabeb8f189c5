//! The simulated world one strategy runs in: the workload's controllers (Deployments and
//! Jobs), the kubelets (boot and registration), spot interruptions and capacity outages,
//! the simulated kube-scheduler, and what is measured. The same world, with the same
//! seed, hosts Carpool and each baseline; only the autoscaler differs.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use carpool::catalog::RegionCatalog;
use carpool::decide::checker::check;
use carpool::decide::{ExistingPlacement, ProvisioningPlan};
use carpool::model::CapacityType;
use carpool::model::pod::Pod;
use carpool::ports::OfferingKey;
use carpool::snapshot::Snapshot;
use serde_json::json;

use super::kube_scheduler;
use super::metrics::Metrics;
use super::node::SimNode;
use super::rng::Rng;
use super::scenario::{Scenario, capacity_type};
use super::workload::{Shape, SimPod, pod_json, timestamp};

/// The spot notice: a reclaimed instance stops two minutes after the warning.
pub const SPOT_NOTICE: f64 = 120.0;
/// How often the world moves: the kubelets, the controllers and kube-scheduler act at
/// this resolution.
pub const STEP: f64 = 5.0;
/// The registration TTL after which an instance that is not a Node must be gone (15
/// min), plus the minute between two housekeeping rounds.
pub const ORPHAN_AFTER: f64 = 15.0 * 60.0 + 120.0;

/// An instance that costs money: booting or running.
#[derive(Clone, Debug)]
pub struct SimInstance {
    /// Its id.
    pub id: String,
    /// Its type.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// Launched at (seconds of the simulation).
    pub launched_at: f64,
}

/// What the world tells the cluster it mirrors (Carpool's fakes), or nothing (a
/// baseline's world is its own cluster).
pub trait Mirror {
    /// The pods the cluster has, when it is not the world itself.
    fn pod_keys(&self) -> Option<BTreeSet<String>>;
    /// Writes a pod as the world has it.
    fn put_pod(&self, pod: &SimPod, shape: &Shape, start: jiff::Timestamp);
    /// Removes a pod.
    fn remove_pod(&self, key: &str);
    /// Evicted pods have been replaced.
    fn settle(&self);
    /// EC2 reclaims a spot instance.
    fn reclaim(&self, instance_id: &str);
    /// An offering runs out of capacity (`true`) or gets it back.
    fn outage(&self, offering: &OfferingKey, on: bool);
}

/// The world of a baseline: it is its own cluster.
pub struct NoMirror;

impl Mirror for NoMirror {
    fn pod_keys(&self) -> Option<BTreeSet<String>> {
        None
    }
    fn put_pod(&self, _: &SimPod, _: &Shape, _: jiff::Timestamp) {}
    fn remove_pod(&self, _: &str) {}
    fn settle(&self) {}
    fn reclaim(&self, _: &str) {}
    fn outage(&self, _: &OfferingKey, _: bool) {}
}

struct JobSlot {
    shape: usize,
    done: bool,
}

/// A spot interruption warning due.
#[derive(Clone, Debug)]
pub struct Warning {
    /// The instance.
    pub instance_id: String,
    /// When it was issued.
    pub at: f64,
}

/// The world.
pub struct World<'a> {
    /// The region's catalog.
    pub region: &'a RegionCatalog<'a>,
    /// The scenario.
    pub scenario: &'a Scenario,
    /// The workloads' pod shapes.
    pub shapes: Vec<Shape>,
    /// Where the clock starts.
    pub start: jiff::Timestamp,
    /// The seed.
    pub seed: u64,
    /// The pods, by key.
    pub pods: BTreeMap<String, SimPod>,
    /// The Nodes.
    pub nodes: Vec<SimNode>,
    /// The instances that cost money.
    pub instances: BTreeMap<String, SimInstance>,
    /// Warnings issued and not yet taken by the strategy.
    pub warnings: Vec<Warning>,
    /// What is measured.
    pub metrics: Metrics,
    /// Offerings out of capacity now.
    pub outages: BTreeSet<OfferingKey>,
    slots: Vec<JobSlot>,
    arrivals: Vec<u32>,
    next_pod: u64,
    rng: Rng,
    last: f64,
    /// Disruptions each PDB'd shape allowed at the end of the last step.
    allowed: HashMap<usize, i64>,
    /// Reclaim time of each warned instance.
    reclaim_at: BTreeMap<String, f64>,
    /// Sampled interruption time of each spot instance.
    interrupt_at: HashMap<String, f64>,
    /// Instances reported as orphans.
    orphans: BTreeSet<String>,
    rendered: HashMap<String, Pod>,
    /// The instance of every node seen.
    node_instance: HashMap<String, String>,
    /// A NodePool that admits no instance type.
    no_launch: Vec<carpool::model::NodePool>,
    prices: HashMap<(String, String, CapacityType), f64>,
    /// The region with nothing offered: the checker judges bindings to nodes that exist,
    /// and needs no offering (computing them all for every check is most of its time).
    no_offers: RegionCatalog<'a>,
}

impl<'a> World<'a> {
    /// An empty world at time 0.
    pub fn new(region: &'a RegionCatalog<'a>, scenario: &'a Scenario, seed: u64) -> Result<Self, String> {
        let shapes = Shape::all(scenario)?;
        let start: jiff::Timestamp = scenario.start.parse().map_err(|e| format!("start: {e}"))?;
        Ok(World {
            region,
            scenario,
            start,
            seed,
            pods: BTreeMap::new(),
            nodes: Vec::new(),
            instances: BTreeMap::new(),
            warnings: Vec::new(),
            metrics: Metrics::default(),
            outages: BTreeSet::new(),
            slots: Vec::new(),
            arrivals: vec![0; scenario.jobs.len()],
            next_pod: 0,
            rng: Rng::new(seed),
            last: 0.0,
            allowed: HashMap::new(),
            reclaim_at: BTreeMap::new(),
            interrupt_at: HashMap::new(),
            orphans: BTreeSet::new(),
            rendered: HashMap::new(),
            node_instance: HashMap::new(),
            no_launch: no_launch_pool(),
            prices: HashMap::new(),
            no_offers: {
                let mut r = region.clone();
                r.restrict_to_offered(Vec::new());
                r
            },
            shapes,
        })
    }

    /// The time as RFC 3339.
    pub fn time(&self, t: f64) -> String {
        timestamp(self.start, t)
    }

    /// The boot time of an instance: the same for the same id and seed.
    pub fn boot_seconds(&self, instance_id: &str) -> f64 {
        let [lo, hi] = self.scenario.world.boot_seconds;
        Rng::keyed(self.seed, instance_id).between(lo, hi)
    }

    /// The price of an offering.
    pub fn price(&mut self, instance_type: &str, zone: &str, ct: CapacityType) -> f64 {
        let key = (instance_type.to_string(), zone.to_string(), ct);
        if let Some(p) = self.prices.get(&key) {
            return *p;
        }
        let p = self
            .region
            .types()
            .iter()
            .find(|t| t.name == instance_type)
            .and_then(|it| self.region.prices().price(it, zone, ct))
            .unwrap_or(0.0);
        self.prices.insert(key, p);
        p
    }

    fn spot_rate(&self, i: &SimInstance) -> f64 {
        let w = &self.scenario.world;
        w.spot_pools
            .iter()
            .find(|p| {
                p.instance_type.as_ref().is_none_or(|t| *t == i.instance_type)
                    && p.zone.as_ref().is_none_or(|z| *z == i.zone)
            })
            .map_or(w.spot_interruptions_per_hour, |p| p.per_hour)
    }

    /// Whether an instance has been warned of its reclaim.
    pub fn warned(&self, instance_id: &str) -> bool {
        self.reclaim_at.contains_key(instance_id)
    }

    /// The pods bound to a node.
    pub fn pods_on(&self, node: &str) -> Vec<&SimPod> {
        self.pods.values().filter(|p| p.node.as_deref() == Some(node)).collect()
    }

    /// Evicts a pod through the Eviction API as a baseline's drain does: refused (false)
    /// when its PDB allows no more disruptions.
    pub fn evict(&mut self, key: &str, mirror: &dyn Mirror) -> bool {
        let Some(p) = self.pods.get(key) else { return true };
        if p.node.is_some() && self.allowed.get(&p.shape).is_some_and(|a| *a <= 0) {
            return false;
        }
        self.remove(key, true, mirror);
        self.metrics.evictions += 1;
        true
    }

    /// A pod gone: removed by the autoscaler (`voluntary`, counted against its PDB) or
    /// with its instance.
    fn remove(&mut self, key: &str, voluntary: bool, mirror: &dyn Mirror) {
        let Some(p) = self.pods.remove(key) else { return };
        self.rendered.remove(key);
        mirror.remove_pod(key);
        if p.node.is_some() && voluntary && self.shapes[p.shape].pdb.is_some() {
            let allowed = self.allowed.entry(p.shape).or_insert(0);
            if *allowed <= 0 {
                self.metrics.pdb_violations += 1;
            }
            *allowed -= 1;
        }
    }

    /// Moves the world to `t`: measures the interval, finds the pods the autoscaler
    /// evicted, warns and reclaims spot instances, starts and ends capacity outages, runs
    /// the controllers and kube-scheduler (its bindings checked), computes the PDBs, and
    /// counts instances that are not Nodes after the registration TTL.
    pub fn step(&mut self, t: f64, mirror: &dyn Mirror) {
        self.measure(t);
        for n in &self.nodes {
            if !self.node_instance.contains_key(&n.name) {
                self.node_instance.insert(n.name.clone(), n.instance_id.clone());
            }
        }
        // Pods the autoscaler evicted (Carpool's runs, through the fake apiserver).
        if let Some(keys) = mirror.pod_keys() {
            let gone: Vec<String> = self.pods.keys().filter(|k| !keys.contains(*k)).cloned().collect();
            for k in gone {
                self.remove(&k, true, mirror);
                self.metrics.evictions += 1;
            }
        }
        // Spot: sample, warn, reclaim.
        let ids: Vec<String> = self.instances.keys().cloned().collect();
        for id in ids {
            let Some(i) = self.instances.get(&id).cloned() else {
                continue;
            };
            if i.capacity_type != CapacityType::Spot {
                continue;
            }
            let at = match self.interrupt_at.get(&id) {
                Some(at) => *at,
                None => {
                    let rate = self.spot_rate(&i);
                    let at = i.launched_at + Rng::keyed(self.seed ^ 0xA5A5, &id).exponential(rate) * 3600.0;
                    self.interrupt_at.insert(id.clone(), at);
                    at
                }
            };
            if at <= t && !self.reclaim_at.contains_key(&id) {
                self.reclaim_at.insert(id.clone(), at + SPOT_NOTICE);
                self.warnings.push(Warning {
                    instance_id: id.clone(),
                    at,
                });
                self.metrics.interruptions += 1;
            }
        }
        let due: Vec<String> = self
            .reclaim_at
            .iter()
            .filter(|(id, at)| **at <= t && self.instances.contains_key(*id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            mirror.reclaim(&id);
            self.instances.remove(&id);
            self.nodes.retain(|n| n.instance_id != id);
        }
        // Pods whose node or instance is gone died with it: by EC2's hand for a warned
        // spot instance, else by the autoscaler's (counted against the PDBs).
        let live: BTreeSet<&str> = self
            .nodes
            .iter()
            .filter(|n| self.instances.contains_key(&n.instance_id))
            .map(|n| n.name.as_str())
            .collect();
        let dead: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.node.as_deref().is_some_and(|n| !live.contains(n)))
            .map(|p| p.key.clone())
            .collect();
        for k in dead {
            let instance = self
                .pods
                .get(&k)
                .and_then(|p| p.node.as_deref())
                .and_then(|n| self.node_instance.get(n));
            let voluntary = instance.is_none_or(|i| !self.reclaim_at.contains_key(i));
            self.remove(&k, voluntary, mirror);
            self.metrics.pods_killed += 1;
        }
        self.outages(t, mirror);
        self.controllers(t, mirror);
        self.schedule(t, mirror);
        self.budgets();
        mirror.settle();
        // Instances that are not Nodes after the registration TTL.
        let registered: BTreeSet<&str> = self.nodes.iter().map(|n| n.instance_id.as_str()).collect();
        for i in self.instances.values() {
            if t - i.launched_at > ORPHAN_AFTER
                && !registered.contains(i.id.as_str())
                && self.orphans.insert(i.id.clone())
            {
                self.metrics.orphan_instances += 1;
            }
        }
    }

    fn measure(&mut self, t: f64) {
        let dt = t - self.last;
        if dt <= 0.0 {
            return;
        }
        let cost_per_hour: f64 = self.instances.values().map(|i| i.price).sum();
        let (mut spot, mut od) = (0.0, 0.0);
        for i in self.instances.values() {
            match i.capacity_type {
                CapacityType::Spot => spot += 1.0,
                // A reservation's capacity is on-demand capacity paid for ahead.
                CapacityType::OnDemand | CapacityType::Reserved => od += 1.0,
            }
        }
        let ready: BTreeSet<&str> = self.nodes.iter().filter(|n| n.ready).map(|n| n.name.as_str()).collect();
        let (mut cpu_alloc, mut mem_alloc) = (0.0, 0.0);
        for n in self.nodes.iter().filter(|n| n.ready) {
            cpu_alloc += n.allocatable.cpu_millis as f64;
            mem_alloc += n.allocatable.memory as f64;
        }
        let (mut cpu_req, mut mem_req) = (0.0, 0.0);
        for p in self.pods.values() {
            if p.node.as_deref().is_some_and(|n| ready.contains(n)) {
                cpu_req += self.shapes[p.shape].requests.cpu_millis as f64;
                mem_req += self.shapes[p.shape].requests.memory as f64;
            }
        }
        let m = &mut self.metrics;
        m.cost += cost_per_hour * dt / 3600.0;
        m.spot_node_hours += spot * dt / 3600.0;
        m.on_demand_node_hours += od * dt / 3600.0;
        m.cpu_requested += cpu_req * dt;
        m.cpu_allocatable += cpu_alloc * dt;
        m.memory_requested += mem_req * dt;
        m.memory_allocatable += mem_alloc * dt;
        if m.series.last().is_none_or(|s| t / 3600.0 - s.0 >= 5.0 / 60.0) {
            m.series.push((t / 3600.0, spot + od, cost_per_hour));
        }
        self.last = t;
    }

    fn outages(&mut self, t: f64, mirror: &dyn Mirror) {
        let hour = t / 3600.0;
        for o in &self.scenario.world.capacity_errors {
            let Ok(ct) = capacity_type(&o.capacity_type) else {
                continue;
            };
            let on = hour >= o.from_hour && o.to_hour.is_none_or(|h| hour < h);
            let zones: Vec<String> = match &o.zone {
                Some(z) => vec![z.clone()],
                None => self.region.zones().to_vec(),
            };
            for zone in zones {
                let key = OfferingKey {
                    instance_type: o.instance_type.clone(),
                    zone,
                    capacity_type: ct,
                };
                if on != self.outages.contains(&key) {
                    mirror.outage(&key, on);
                    if on {
                        self.outages.insert(key);
                    } else {
                        self.outages.remove(&key);
                    }
                }
            }
        }
    }

    fn new_pod(&mut self, shape: usize, slot: Option<usize>, t: f64, mirror: &dyn Mirror) {
        self.next_pod += 1;
        let s = &self.shapes[shape];
        let name = format!("{}-{:05}", s.name, self.next_pod);
        let pod = SimPod {
            key: format!("{}/{name}", s.namespace),
            name,
            shape,
            slot,
            created: t,
            node: None,
            bound_at: None,
        };
        mirror.put_pod(&pod, s, self.start);
        self.pods.insert(pod.key.clone(), pod);
    }

    fn controllers(&mut self, t: f64, mirror: &dyn Mirror) {
        let hour = t / 3600.0;
        // Deployments: a ReplicaSet scales down pending pods first, then the newest.
        for (d, dep) in self.scenario.deployments.iter().enumerate() {
            let want = dep.replicas.at(hour) as usize;
            let mut have: Vec<(bool, f64, String)> = self
                .pods
                .values()
                .filter(|p| p.shape == d)
                .map(|p| (p.node.is_some(), -p.created, p.key.clone()))
                .collect();
            if have.len() < want {
                for _ in have.len()..want {
                    self.new_pod(d, None, t, mirror);
                }
            } else if have.len() > want {
                have.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
                let extra = have.len() - want;
                for (_, _, k) in have.into_iter().take(extra) {
                    self.remove(&k, false, mirror);
                }
            }
        }
        // Jobs: arrivals, completions, and pods lost before completing started again.
        let base = self.scenario.deployments.len();
        for (j, job) in self.scenario.jobs.iter().enumerate() {
            loop {
                let n = self.arrivals[j];
                let at = job.first_at_hour + f64::from(n) * job.every_hours.unwrap_or(f64::INFINITY);
                if at > hour || (n > 0 && job.every_hours.is_none()) {
                    break;
                }
                self.arrivals[j] += 1;
                for _ in 0..job.parallelism {
                    self.slots.push(JobSlot {
                        shape: base + j,
                        done: false,
                    });
                    let slot = self.slots.len() - 1;
                    self.new_pod(base + j, Some(slot), t, mirror);
                }
            }
        }
        let finished: Vec<(String, Option<usize>)> = self
            .pods
            .values()
            .filter(|p| {
                p.bound_at
                    .zip(self.shapes[p.shape].run_seconds)
                    .is_some_and(|(b, run)| b + run <= t)
            })
            .map(|p| (p.key.clone(), p.slot))
            .collect();
        for (k, slot) in finished {
            self.remove(&k, false, mirror);
            if let Some(s) = slot.and_then(|s| self.slots.get_mut(s)) {
                s.done = true;
            }
        }
        let running: BTreeSet<usize> = self.pods.values().filter_map(|p| p.slot).collect();
        let lost: Vec<(usize, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, s)| !s.done && !running.contains(i))
            .map(|(i, s)| (i, s.shape))
            .collect();
        for (slot, shape) in lost {
            self.new_pod(shape, Some(slot), t, mirror);
        }
    }

    fn schedule(&mut self, t: f64, mirror: &dyn Mirror) {
        let pending: Vec<&SimPod> = self.pods.values().filter(|p| p.node.is_none()).collect();
        if pending.is_empty() || !self.nodes.iter().any(SimNode::usable) {
            return;
        }
        let bound: Vec<&SimPod> = self.pods.values().filter(|p| p.node.is_some()).collect();
        let bindings = kube_scheduler::schedule(&pending, &bound, &self.nodes, &self.shapes, &mut self.rng);
        if bindings.is_empty() {
            return;
        }
        self.check(&bindings);
        for (key, node) in bindings {
            let name = self.nodes[node].name.clone();
            if let Some(p) = self.pods.get_mut(&key) {
                p.node = Some(name);
                p.bound_at = Some(t);
                self.metrics.pending_seconds.push(t - p.created);
                mirror.put_pod(p, &self.shapes[p.shape], self.start);
            }
            self.metrics.bound.push(key);
        }
    }

    /// The independent checker over this round's bindings: the nodes and the pods bound
    /// before as the apiserver holds them, the new bindings as placements on existing
    /// nodes. Only pods on the nodes that take new pods, or of the same workloads, are
    /// needed: every constraint of the scenarios selects the workload's own pods.
    fn check(&mut self, bindings: &[(String, usize)]) {
        let targets: BTreeSet<&str> = bindings.iter().map(|(_, n)| self.nodes[*n].name.as_str()).collect();
        let shapes: BTreeSet<usize> = bindings
            .iter()
            .filter_map(|(k, _)| self.pods.get(k).map(|p| p.shape))
            .collect();
        // kube-scheduler knows only the nodes that exist: a NodePool that can launch
        // nothing keeps the checker from counting, as Karpenter does, the spread domains
        // of nodes that could be launched.
        let mut snapshot = Snapshot {
            nodepools: self.no_launch.clone(),
            ..Snapshot::default()
        };
        let since = self.time(0.0);
        for n in &self.nodes {
            if let Ok(node) = serde_json::from_value(n.node_json(&since)) {
                snapshot.nodes.push(node);
            }
        }
        for p in self.pods.values() {
            let placed = p.node.is_some();
            let relevant = bindings.iter().any(|(k, _)| *k == p.key)
                || (placed && (shapes.contains(&p.shape) || p.node.as_deref().is_some_and(|n| targets.contains(n))));
            if !relevant {
                continue;
            }
            if placed {
                if !self.rendered.contains_key(&p.key)
                    && let Ok(pod) = serde_json::from_value(pod_json(p, &self.shapes[p.shape], self.start))
                {
                    self.rendered.insert(p.key.clone(), pod);
                }
                if let Some(pod) = self.rendered.get(&p.key) {
                    snapshot.pods.push(pod.clone());
                }
            } else if let Ok(pod) = serde_json::from_value(pod_json(p, &self.shapes[p.shape], self.start)) {
                snapshot.pods.push(pod);
            }
        }
        let mut existing: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, n) in bindings {
            existing.entry(self.nodes[*n].name.clone()).or_default().push(k.clone());
        }
        let plan = ProvisioningPlan {
            existing: existing
                .into_iter()
                .map(|(node, pods)| ExistingPlacement { node, pods })
                .collect(),
            ..ProvisioningPlan::default()
        };
        let violations = check(&snapshot, &self.no_offers, &plan);
        // `CARPOOL_SIM_DUMP=file` writes the first rejected round, to see why.
        if !violations.is_empty()
            && let Some(path) = std::env::var_os("CARPOOL_SIM_DUMP")
            && !std::path::Path::new(&path).exists()
        {
            let dump = json!({"nodes": snapshot.nodes, "pods": snapshot.pods, "plan": plan.existing.iter().map(|e| (e.node.clone(), e.pods.clone())).collect::<Vec<_>>()});
            let _ = std::fs::write(path, dump.to_string());
        }
        self.metrics.checked_bindings += bindings.len() as u64;
        for v in violations {
            self.metrics.constraint_violations += 1;
            if self.metrics.violation_examples.len() < 5 {
                self.metrics.violation_examples.push(v.to_string());
            }
        }
    }

    /// The disruptions each PDB allows now, as the disruption controller computes them:
    /// healthy (bound) pods less the desired healthy of the expected (all) pods.
    fn budgets(&mut self) {
        self.allowed.clear();
        for (i, shape) in self.shapes.iter().enumerate() {
            let expected = self.pods.values().filter(|p| p.shape == i).count() as i64;
            let healthy = self.pods.values().filter(|p| p.shape == i && p.node.is_some()).count() as i64;
            if let Some(desired) = shape.desired_healthy(expected) {
                self.allowed.insert(i, (healthy - desired).max(0));
            }
        }
    }

    /// Pending pods now, with how long each has waited.
    pub fn finish(&mut self, t: f64) {
        self.measure(t);
        let waits: Vec<f64> = self
            .pods
            .values()
            .filter(|p| p.node.is_none())
            .map(|p| t - p.created)
            .collect();
        self.metrics.still_pending = waits.len();
        self.metrics.pending_seconds.extend(waits);
    }

    /// The Node JSON of every node (for a baseline's snapshot).
    pub fn node_objects(&self) -> Vec<serde_json::Value> {
        let since = self.time(0.0);
        self.nodes.iter().map(|n| n.node_json(&since)).collect()
    }

    /// The PDB objects.
    pub fn pdb_objects(&self) -> Vec<serde_json::Value> {
        self.shapes.iter().filter_map(super::workload::pdb_json).collect()
    }

    /// A snapshot JSON list of the given pods, nodes, NodePools and EC2NodeClasses.
    pub fn list(items: Vec<serde_json::Value>) -> serde_json::Value {
        json!({"kind": "List", "items": items})
    }
}

/// A NodePool no instance type meets.
fn no_launch_pool() -> Vec<carpool::model::NodePool> {
    let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "simulated-none"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "none"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["none.none"]}]}}}});
    let mut s = Snapshot::default();
    match s.add_text("simulation", &World::list(vec![pool]).to_string()) {
        Ok(()) => s.nodepools,
        Err(_) => Vec::new(),
    }
}
