//! Issue 31, warm capacity: a static NodePool (`spec.replicas`, Karpenter's alpha static
//! capacity) keeps that many nodes with no pods, through consolidation, and replaces one
//! that goes. Karpenter's rules, followed here: `static.provisioning` launches what is
//! missing, counting launches in flight and capped by `limits.nodes`
//! (`pkg/controllers/static/provisioning/controller.go`, `Reconcile`); the dynamic
//! provisioner leaves static pools out (`Provisioner.NewScheduler`); consolidation ignores
//! them (the NodePool CRD: "When replicas is set, ConsolidationPolicy is simply ignored");
//! `static.deprovisioning` removes a surplus, empty nodes first
//! (`getDeprovisioningCandidates`).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::disruption::{BlockKind, DisruptionInput, DisruptionSettings, Method, decide};
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known as wk;
use carpool::ports::{Cloud, Cluster, InstanceState};
use carpool::run::provision::{Provisioner, RunReport, Settings};
use carpool::snapshot::Snapshot;
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;

fn warm_pool(replicas: i64) -> Value {
    let mut p = NodePoolBuilder::new("warm")
        .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
        .requirement(wk::INSTANCE_TYPE, "In", &["m5.large", "m5.xlarge"])
        .build();
    p["spec"]["replicas"] = json!(replicas);
    p["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    p
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
    runs: std::cell::Cell<usize>,
}

impl World {
    fn new(replicas: i64) -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
            runs: std::cell::Cell::new(0),
        };
        w.cloud.set_now(START as i64 * 1000);
        w.cloud
            .set_zones("default", &["us-east-1a", "us-east-1b", "us-east-1c"]);
        w.cluster.add_nodepool(warm_pool(replicas));
        w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
        w
    }

    fn run(&self) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        self.runs.set(self.runs.get() + 1);
        let owner = format!("run-{}", self.runs.get());
        let settings = Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        };
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, &owner);
        block_on(p.run(&region)).unwrap()
    }

    fn running(&self) -> Vec<carpool::ports::Instance> {
        block_on(self.cloud.list())
            .unwrap()
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .collect()
    }

    /// Every running instance becomes a Ready Node of the pool, as its kubelet would make it.
    fn register(&self) {
        let known: BTreeSet<String> = block_on(self.cluster.nodes())
            .unwrap()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        for i in self.running() {
            let name = format!("node-{}", i.id);
            if known.contains(&name) {
                continue;
            }
            self.cluster.add_node(
                NodeBuilder::new(&name)
                    .instance_type(&i.instance_type)
                    .zone(&i.zone)
                    .label(wk::NODEPOOL, "warm")
                    .label(wk::CAPACITY_TYPE, "on-demand")
                    .label("carpool.sh/managed", "true")
                    .provider_id(&format!("aws:///{}/{}", i.zone, i.id))
                    .allocatable("cpu", "1930m")
                    .allocatable("memory", "7Gi")
                    .allocatable("pods", "29")
                    .ready(true)
                    .node()
                    .unwrap(),
            );
        }
    }
}

fn consolidation(world: &World) -> carpool::decide::disruption::DisruptionDecision {
    let mut s = Snapshot::default();
    let nodes = block_on(world.cluster.nodes()).unwrap();
    let items: Vec<Value> = vec![warm_pool_from(world), EC2NodeClassBuilder::standard().build()];
    s.add_text("pools", &json!({"kind": "List", "items": items}).to_string())
        .unwrap();
    s.nodes = nodes;
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    decide(&DisruptionInput {
        snapshot: &s,
        region: &region,
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(START + 3600),
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    })
}

fn warm_pool_from(world: &World) -> Value {
    let pools = block_on(world.cluster.nodepools()).unwrap();
    serde_json::to_value(&pools.valid[0]).unwrap()
}

#[test]
fn a_nodepool_with_three_replicas_keeps_three_nodes_with_no_pods_through_consolidation_and_replaces_one_that_goes() {
    let w = World::new(3);
    let first = w.run();
    assert_eq!(first.static_capacity.launched.len(), 3, "{:?}", first.static_capacity);
    assert!(first.static_capacity.launched.iter().all(|l| l.pods == 0));
    let zones: BTreeSet<String> = w.running().into_iter().map(|i| i.zone).collect();
    assert_eq!(zones.len(), 3, "spread across zones: {zones:?}");

    // Launches in flight count: the next run launches none.
    let second = w.run();
    assert!(
        second.static_capacity.launched.is_empty(),
        "{:?}",
        second.static_capacity
    );
    assert_eq!(w.running().len(), 3);

    // Registered and empty, they are kept by consolidation.
    w.register();
    let d = consolidation(&w);
    assert!(d.command.is_none(), "{:?}", d.command);
    for c in &d.candidates {
        let b = c.blocked_by.as_ref().expect("kept");
        assert_eq!(b.kind, BlockKind::Policy, "{}", b.message);
        assert!(b.message.contains("static"), "{}", b.message);
    }

    // One is interrupted: its instance terminated and its Node deleted, as the
    // interruption function ends a drain. The next run replaces it.
    let gone = w.running()[0].clone();
    block_on(w.cloud.terminate(&gone.id)).unwrap();
    let node = w.cluster.node(&format!("node-{}", gone.id)).unwrap();
    block_on(w.cluster.delete_node(
        node.metadata.name.as_deref().unwrap(),
        node.metadata.uid.as_deref().unwrap_or_default(),
    ))
    .unwrap();
    let third = w.run();
    assert_eq!(third.static_capacity.launched.len(), 1, "{:?}", third.static_capacity);
    assert_eq!(third.static_capacity.short, vec![("warm".to_string(), 2, 3)]);
    assert_eq!(w.running().len(), 3);
}

#[test]
fn pending_pods_launch_nothing_from_a_static_nodepool() {
    let w = World::new(0);
    w.cluster
        .add_pod(PodBuilder::pending_web("web-0", "500m", "1Gi").pod().unwrap());
    let report = w.run();
    assert!(report.launched().next().is_none(), "{:?}", report.batches);
    assert!(report.static_capacity.launched.is_empty());
    assert!(w.running().is_empty());
}

#[test]
fn a_static_nodepool_scaled_down_loses_its_empty_nodes_first() {
    let w = World::new(3);
    w.run();
    w.register();
    // One node gets a pod; the pool is scaled down to one.
    let busy = w.running()[0].id.clone();
    w.cluster.add_pod(
        PodBuilder::new("web-0")
            .namespace("shop")
            .label("app", "web")
            .requests("100m", "128Mi")
            .owner("apps/v1", "ReplicaSet", "web-7d9")
            .spec("nodeName", json!(format!("node-{busy}")))
            .created("2026-12-01T00:00:00Z")
            .running()
            .pod()
            .unwrap(),
    );
    let mut s = Snapshot::default();
    s.add_text(
        "pools",
        &json!({"kind": "List", "items": [warm_pool(1), EC2NodeClassBuilder::standard().build()]}).to_string(),
    )
    .unwrap();
    s.nodes = block_on(w.cluster.nodes()).unwrap();
    s.pods = block_on(w.cluster.scheduled_pods()).unwrap();
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let d = decide(&DisruptionInput {
        snapshot: &s,
        region: &region,
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(START + 3600),
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    });
    let cmd = d.command.expect("the surplus goes");
    assert_eq!(cmd.method, Method::StaticScaleDown);
    assert_eq!(cmd.nodes.len(), 2, "{cmd:?}");
    assert!(
        !cmd.nodes.contains(&format!("node-{busy}")),
        "the empty ones go first: {cmd:?}"
    );
}

#[test]
fn a_static_nodepool_with_a_cpu_limit_or_a_weight_is_invalid_with_karpenters_reason() {
    for (field, value, reason) in [
        (
            "limits",
            json!({"cpu": "10"}),
            "only 'limits.nodes' is supported on static NodePools",
        ),
        ("weight", json!(10), "'weight' is not supported on static NodePools"),
    ] {
        let mut p = warm_pool(2);
        p["spec"][field] = value;
        let mut s = Snapshot::default();
        s.add_text("pool", &p.to_string()).unwrap();
        assert!(s.nodepools.is_empty());
        assert!(s.skipped[0].1.contains(reason), "{:?}", s.skipped);
    }
}
