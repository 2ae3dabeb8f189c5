//! Carpool in the simulated world: the real runs of the three functions
//! (`run::provision`, `run::interruption`, `run::consolidate`) over the in-memory ports,
//! on their schedules (the provisioner every minute with its 50 s watch, the interruption
//! function on each warning and its sweep every minute, the consolidator every 5
//! minutes), with a virtual clock whose every sleep moves the world on.
//!
//! The world plays what is outside Carpool: the kubelet registers a Node for each
//! instance once it has booted (with the labels and taints of its launch, as nodeadm
//! reads them), EC2 reclaims spot instances two minutes after their warning and runs
//! offerings out of capacity, the controllers and kube-scheduler act on the pods.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use anyhow::Result;
use carpool::catalog::RegionCatalog;
use carpool::decide::interruption::parse_event;
use carpool::fakes::{FakeCloud, FakeCluster, FakeStore};
use carpool::ports::{Clock, InstanceState, OfferingKey, StateStore, Timer};
use carpool::run::consolidate::{ConsolidationSettings, Consolidator};
use carpool::run::disruption::{Disrupter, InterruptionSettings};
use carpool::run::provision::{Provisioner, Settings};
use serde_json::json;

use super::node::SimNode;
use super::workload::{Shape, SimPod, pod_object};
use super::world::{Mirror, STEP, SimInstance, World};

/// The deployment name the simulated stack runs as.
const DEPLOYMENT: &str = "carpool-sim";
/// How long after its instance is gone the Node object goes (the cloud node lifecycle
/// controller).
const NODE_GONE_AFTER: f64 = 30.0;

struct FakesMirror<'a> {
    cloud: &'a FakeCloud,
    cluster: &'a FakeCluster,
}

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("default", key))
}

impl Mirror for FakesMirror<'_> {
    fn pod_keys(&self) -> Option<BTreeSet<String>> {
        Some(self.cluster.pod_keys())
    }
    fn put_pod(&self, pod: &SimPod, shape: &Shape, start: jiff::Timestamp) {
        if let Some(p) = pod_object(pod, shape, start) {
            self.cluster.add_pod(p);
        }
    }
    fn remove_pod(&self, key: &str) {
        let (ns, name) = split(key);
        self.cluster.remove_pod(ns, name);
    }
    fn settle(&self) {
        self.cluster.settle_disruptions();
    }
    fn reclaim(&self, instance_id: &str) {
        self.cloud.reclaim(instance_id);
    }
    fn outage(&self, offering: &OfferingKey, on: bool) {
        if on {
            self.cloud.exhaust(offering.clone());
        } else {
            self.cloud.restore(offering);
        }
    }
}

/// The world and what the kubelets remember, moved on by the clock.
struct Engine<'w, 'f> {
    world: World<'w>,
    cloud: &'f FakeCloud,
    cluster: &'f FakeCluster,
    store: &'f FakeStore,
    start_ms: i64,
    /// Instances whose Node registered.
    registered: BTreeSet<String>,
    /// When each instance was first seen terminated.
    gone_since: BTreeMap<String, f64>,
    /// The launch each pod was planned into (launch id, instance).
    planned: HashMap<String, (String, Option<String>)>,
    /// Launches a pod of which kube-scheduler bound elsewhere.
    diverged: BTreeSet<String>,
    seen_bound: usize,
    /// Real time spent moving the world (the rest is Carpool's runs).
    step_seconds: f64,
}

impl Engine<'_, '_> {
    fn step(&mut self, t: f64) {
        let timer = std::time::Instant::now();
        self.step_inner(t);
        self.step_seconds += timer.elapsed().as_secs_f64();
    }

    fn step_inner(&mut self, t: f64) {
        let now_ms = self.start_ms + (t * 1000.0) as i64;
        self.cloud.set_now(now_ms);
        // The kubelets.
        let mut instances = BTreeMap::new();
        for i in self.cloud.instances() {
            let launched = i.launched_at.map_or(0.0, |ms| (ms - self.start_ms) as f64 / 1000.0);
            if i.state == InstanceState::Terminated {
                let since = *self.gone_since.entry(i.id.clone()).or_insert(t);
                if t - since >= NODE_GONE_AFTER && self.registered.remove(&i.id) {
                    let uid = self
                        .cluster
                        .node(&i.id)
                        .and_then(|n| n.metadata.uid)
                        .unwrap_or_default();
                    let _ = pollster::block_on(carpool::ports::Cluster::delete_node(self.cluster, &i.id, &uid));
                }
                continue;
            }
            if !self.registered.contains(&i.id) && t >= launched + self.world.boot_seconds(&i.id) {
                let request = self.cloud.launch_request(&i.id);
                let labels = request.as_ref().map(|r| r.labels.clone()).unwrap_or_default();
                let taints = request
                    .map(|r| r.taints.into_iter().chain(r.startup_taints).collect())
                    .unwrap_or_default();
                if let Some(node) = SimNode::registered(
                    self.world.region,
                    &i.id,
                    &i.id,
                    &i.instance_type,
                    &i.zone,
                    i.capacity_type,
                    &labels,
                    taints,
                ) && let Ok(n) = serde_json::from_value(node.node_json(&self.world.time(t)))
                {
                    self.cluster.add_node(n);
                    self.registered.insert(i.id.clone());
                }
            }
            if !self.world.instances.contains_key(&i.id) {
                self.world.metrics.launches += 1;
            }
            instances.insert(
                i.id.clone(),
                SimInstance {
                    price: self.world.price(&i.instance_type, &i.zone, i.capacity_type),
                    id: i.id,
                    instance_type: i.instance_type,
                    zone: i.zone,
                    capacity_type: i.capacity_type,
                    launched_at: launched,
                },
            );
        }
        self.world.instances = instances;
        let nodes = pollster::block_on(carpool::ports::Cluster::nodes(self.cluster)).unwrap_or_default();
        self.world.nodes = nodes.iter().filter_map(SimNode::from_node).collect();
        let mirror = FakesMirror {
            cloud: self.cloud,
            cluster: self.cluster,
        };
        self.world.step(t, &mirror);
        self.compare_with_plans();
    }

    /// Each pod bound since the last step, against the launch it was planned into.
    fn compare_with_plans(&mut self) {
        if self.world.metrics.bound.len() == self.seen_bound {
            return;
        }
        if let Ok(launches) = pollster::block_on(self.store.list_launches()) {
            for l in launches {
                for p in &l.pods {
                    self.planned.insert(p.clone(), (l.id.clone(), l.instance_id.clone()));
                }
            }
        }
        let node_instance: HashMap<&str, &str> = self
            .world
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.instance_id.as_str()))
            .collect();
        for key in &self.world.metrics.bound[self.seen_bound..] {
            let Some((launch, instance)) = self.planned.get(key) else {
                continue;
            };
            let bound_to = self
                .world
                .pods
                .get(key)
                .and_then(|p| p.node.as_deref())
                .and_then(|n| node_instance.get(n).copied());
            if instance.as_deref() != bound_to && self.diverged.insert(launch.clone()) {
                self.world.metrics.launches_not_as_planned += 1;
            }
        }
        self.seen_bound = self.world.metrics.bound.len();
    }
}

/// A clock whose sleeps move the world: the runs' waits cost no real time.
struct SimClock<'w, 'f> {
    start: SystemTime,
    t: Mutex<(f64, f64)>,
    engine: Mutex<Engine<'w, 'f>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SimClock<'_, '_> {
    fn seconds(&self) -> f64 {
        lock(&self.t).0
    }

    /// Moves the time on by `by`, stepping the world at each [`STEP`] passed.
    fn advance(&self, by: f64) {
        let steps = {
            let mut t = lock(&self.t);
            t.0 += by;
            let mut steps = Vec::new();
            while t.1 <= t.0 {
                steps.push(t.1);
                t.1 += STEP;
            }
            steps
        };
        for s in steps {
            lock(&self.engine).step(s);
        }
    }
}

impl Clock for SimClock<'_, '_> {
    fn now(&self) -> SystemTime {
        self.start + Duration::from_secs_f64(self.seconds().max(0.0))
    }
}

impl Timer for SimClock<'_, '_> {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.advance(duration.as_secs_f64());
        Box::pin(std::future::ready(()))
    }
}

/// The spot interruption warning EC2 sends through EventBridge, in its real shape (as
/// `spot-interruption-warning.json` of the sample events).
fn spot_warning(id: &str, instance_id: &str, time: &str) -> serde_json::Value {
    json!({"version": "0", "id": id, "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "account": "123456789012", "time": time, "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}")],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}})
}

/// Runs Carpool over the scenario for `seconds`; `tick` is told each simulated minute.
pub fn run<'a>(
    region: &'a RegionCatalog<'a>,
    world: World<'a>,
    seconds: f64,
    tick: &mut dyn FnMut(u64),
) -> Result<World<'a>> {
    let cloud = FakeCloud::new();
    let cluster = FakeCluster::new();
    let store = FakeStore::new();
    for np in &world.scenario.nodepools {
        cluster.add_nodepool(np.clone());
    }
    for nc in &world.scenario.ec2nodeclasses {
        cluster.add_ec2nodeclass(nc.clone());
    }
    for o in &world.scenario.nodeoverlays {
        cluster.add_nodeoverlay(o.clone());
    }
    for pdb in world.pdb_objects() {
        if let Ok(p) = serde_json::from_value(pdb) {
            cluster.add_pdb(p);
        }
    }
    let start = SystemTime::from(world.start);
    let start_ms = carpool::ports::epoch_millis(start);
    let clock = SimClock {
        start,
        t: Mutex::new((0.0, 0.0)),
        engine: Mutex::new(Engine {
            world,
            cloud: &cloud,
            cluster: &cluster,
            store: &store,
            start_ms,
            registered: BTreeSet::new(),
            gone_since: BTreeMap::new(),
            planned: HashMap::new(),
            diverged: BTreeSet::new(),
            seen_bound: 0,
            step_seconds: 0.0,
        }),
    };
    let provision = Settings {
        deployment: DEPLOYMENT.into(),
        ..Settings::default()
    };
    let interruption = InterruptionSettings {
        provision: provision.clone(),
        ..InterruptionSettings::default()
    };
    let consolidation = ConsolidationSettings {
        provision: provision.clone(),
        ..ConsolidationSettings::default()
    };
    let mut errors = 0u64;
    let mut spent = [0.0f64; 3];
    let mut minute: u64 = 0;
    clock.advance(0.0);
    while clock.seconds() < seconds {
        let t0 = clock.seconds();
        let owner = format!("sim-{minute}");
        let timer = std::time::Instant::now();
        let mut provisioner = Provisioner::new(&cloud, &cluster, &store, &clock, provision.clone(), &owner);
        if let Err(e) = pollster::block_on(provisioner.run(region)) {
            errors += 1;
            tracing_like(&e);
        }
        spent[0] += timer.elapsed().as_secs_f64();
        let timer = std::time::Instant::now();
        let interrupter = Disrupter::new(&cloud, &cluster, &store, &clock, interruption.clone(), &owner);
        let warnings = std::mem::take(&mut lock(&clock.engine).world.warnings);
        for w in warnings {
            let time = lock(&clock.engine).world.time(w.at);
            let event = spot_warning(&format!("sim-spot-{}", w.instance_id), &w.instance_id, &time);
            match parse_event(&event) {
                Ok(event) => {
                    let until = clock.now() + Duration::from_secs(120);
                    match pollster::block_on(interrupter.handle(region, &event, until)) {
                        Ok(_) => lock(&clock.engine).world.metrics.interruptions_handled += 1,
                        Err(e) => {
                            errors += 1;
                            tracing_like(&e);
                        }
                    }
                }
                Err(e) => {
                    errors += 1;
                    tracing_like(&e);
                }
            }
        }
        let until = clock.now() + Duration::from_secs(60);
        if let Err(e) = pollster::block_on(interrupter.sweep(region, until)) {
            errors += 1;
            tracing_like(&e);
        }
        spent[1] += timer.elapsed().as_secs_f64();
        let timer = std::time::Instant::now();
        if minute.is_multiple_of(5) {
            let consolidator = Consolidator::new(&cloud, &cluster, &store, &clock, consolidation.clone(), &owner);
            let until = clock.now() + Duration::from_secs(120);
            if let Err(e) = pollster::block_on(consolidator.run(region, until)) {
                errors += 1;
                tracing_like(&e);
            }
        }
        spent[2] += timer.elapsed().as_secs_f64();
        let next = t0 + 60.0;
        let now = clock.seconds();
        if now < next {
            clock.advance(next - now);
        }
        minute += 1;
        tick(minute);
    }
    let end = clock.seconds();
    let mut engine = clock.engine.into_inner().unwrap_or_else(PoisonError::into_inner);
    engine.world.metrics.run_errors = errors;
    if std::env::var_os("CARPOOL_SIM_DEBUG").is_some() {
        eprintln!(
            "carpool: {:.1} s moving the world; provisioner {:.1} s, interruption {:.1} s, consolidator {:.1} s (the world's moves included)",
            engine.step_seconds, spent[0], spent[1], spent[2]
        );
    }
    engine.world.finish(end.min(seconds.max(end)));
    Ok(engine.world)
}

/// A run's failure is counted and the next run goes on, as the next Lambda invocation
/// would; it is shown when `CARPOOL_SIM_DEBUG` is set.
fn tracing_like(e: &(dyn std::error::Error + 'static)) {
    if std::env::var_os("CARPOOL_SIM_DEBUG").is_some() {
        eprintln!("carpool simulate: a run failed: {}", carpool::error_chain::Chain(e));
    }
}
