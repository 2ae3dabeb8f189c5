//! Issue 31, warm capacity: SIG Autoscaling's CapacityBuffer (`autoscaling.x-k8s.io`,
//! whose CRD ships with Karpenter). Its chunks are pending pods that never exist
//! (kubernetes-sigs/karpenter `BuildVirtualPods`, `pkg/state/virtualpods`): room is
//! planned for them, real pods use it, and it is planned again; consolidation places them
//! first, so their room is never taken away (Karpenter's `SimulateScheduling` injects the
//! same virtual pods into its pending pods; `emptiness.go` keeps a node with buffer pods).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::disruption::{DisruptionInput, DisruptionSettings, decide};
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known as wk;
use carpool::ports::{Cloud, Cluster, InstanceState};
use carpool::run::provision::{Provisioner, RunReport, Settings};
use carpool::snapshot::Snapshot;
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;

fn pool() -> Value {
    let mut p = NodePoolBuilder::new("general")
        .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
        .requirement(wk::INSTANCE_FAMILY, "In", &["m5"])
        .build();
    p["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    p
}

fn buffer(replicas: i32) -> Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "burst", "namespace": "web"},
        "spec": {"podTemplateRef": {"name": "web-chunk"}, "replicas": replicas},
    })
}

fn template() -> k8s_openapi::api::core::v1::PodTemplate {
    serde_json::from_value(json!({
        "metadata": {"name": "web-chunk", "namespace": "web"},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx",
                "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}]},
        },
    }))
    .unwrap()
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
    runs: std::cell::Cell<usize>,
}

impl World {
    fn new(with_buffer: bool) -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
            runs: std::cell::Cell::new(0),
        };
        w.cloud.set_now(START as i64 * 1000);
        w.cluster.add_nodepool(pool());
        w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
        if with_buffer {
            w.cluster.add_capacity_buffer(buffer(4));
            w.cluster.add_pod_template(template());
        }
        w
    }

    fn run(&self) -> RunReport {
        self.run_with(Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        })
    }

    fn run_with(&self, settings: Settings) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        self.runs.set(self.runs.get() + 1);
        let owner = format!("run-{}", self.runs.get());
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

    /// Every running instance becomes a Ready Node, with its type's allocatable.
    fn register(&self) {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
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
            let t = region.types().iter().find(|t| t.name == i.instance_type).unwrap();
            self.cluster.add_node(
                NodeBuilder::new(&name)
                    .instance_type(&i.instance_type)
                    .zone(&i.zone)
                    .label(wk::NODEPOOL, "general")
                    .label(wk::CAPACITY_TYPE, "on-demand")
                    .label("carpool.sh/managed", "true")
                    .provider_id(&format!("aws:///{}/{}", i.zone, i.id))
                    .allocatable("cpu", &format!("{}m", t.allocatable.cpu_millis))
                    .allocatable("memory", &format!("{}", t.allocatable.memory))
                    .allocatable("pods", &format!("{}", t.allocatable.get("pods")))
                    .ready(true)
                    .node()
                    .unwrap(),
            );
        }
    }

    /// CPU, in millicores, of the running instances' types.
    fn running_cpu(&self) -> i64 {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        self.running()
            .iter()
            .map(|i| {
                region
                    .types()
                    .iter()
                    .find(|t| t.name == i.instance_type)
                    .unwrap()
                    .allocatable
                    .cpu_millis
            })
            .sum()
    }
}

#[test]
fn a_buffer_of_four_two_cpu_chunks_gets_room_that_real_pods_use_and_gets_room_again() {
    let w = World::new(true);
    // Room is planned for the four chunks, with no pod pending.
    let first = w.run();
    assert_eq!(first.buffers.sizes, vec![("web/burst".to_string(), 4)]);
    assert!(!first.buffers.launched.is_empty(), "{:?}", first.buffers);
    assert!(first.buffers.launched.iter().all(|l| l.pods == 0), "no real pod on it");
    assert!(first.batches.iter().all(|b| b.launched.is_empty()), "no batch launched");
    assert!(w.running_cpu() >= 8_000, "room for 4 × 2 CPUs: {} m", w.running_cpu());

    // Launches in flight, then the nodes they became, hold the room: nothing more.
    assert!(w.run().buffers.launched.is_empty());
    w.register();
    let held = w.run();
    assert!(held.buffers.launched.is_empty(), "{:?}", held.buffers);
    assert_eq!(held.buffers.chunks_planned_new, 0);

    // Real pods come and take the room (kube-scheduler binds them to the buffer's nodes).
    let nodes: Vec<String> = block_on(w.cluster.nodes())
        .unwrap()
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let mut k = 0;
    for n in &nodes {
        let node = w.cluster.node(n).unwrap();
        let it = node.metadata.labels.as_ref().unwrap()[wk::INSTANCE_TYPE].clone();
        let cpu = region
            .types()
            .iter()
            .find(|t| t.name == it)
            .unwrap()
            .allocatable
            .cpu_millis;
        for _ in 0..(cpu / 2_000) {
            w.cluster.add_pod(
                PodBuilder::new(&format!("web-{k}"))
                    .namespace("web")
                    .label("app", "web")
                    .requests("2", "2Gi")
                    .owner("apps/v1", "ReplicaSet", "web-7d9")
                    .spec("nodeName", json!(n))
                    .created("2026-12-01T00:00:00Z")
                    .running()
                    .pod()
                    .unwrap(),
            );
            k += 1;
        }
    }
    assert!(k >= 4, "{k} real pods");
    let cpu_before = w.running_cpu();
    // The room is planned again for the four chunks.
    let again = w.run();
    assert!(!again.buffers.launched.is_empty(), "{:?}", again.buffers);
    assert!(w.running_cpu() - cpu_before >= 8_000);
}

fn decision(w: &World, with_chunks: bool) -> carpool::decide::disruption::DisruptionDecision {
    let mut s = Snapshot::default();
    s.add_text(
        "objects",
        &json!({"kind": "List", "items": [pool(), EC2NodeClassBuilder::standard().build()]}).to_string(),
    )
    .unwrap();
    s.nodes = block_on(w.cluster.nodes()).unwrap();
    if with_chunks {
        let templates = block_on(w.cluster.pod_templates()).unwrap();
        let buffers = block_on(w.cluster.capacity_buffers()).unwrap();
        s.pods =
            carpool::decide::provisioning::buffers::virtual_pods(&buffers.valid, &templates, SystemTime::now()).pods;
    }
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

#[test]
fn consolidation_never_takes_a_buffers_room_away() {
    let w = World::new(true);
    w.run();
    w.register();
    // The nodes are empty of real pods; the chunks, placed first, hold them.
    let kept = decision(&w, true);
    assert!(kept.command.is_none(), "{:?}", kept.command);
    // Without the buffer, the same empty nodes go.
    let gone = decision(&w, false);
    assert!(gone.command.is_some(), "{:?}", gone.candidates);
}

#[test]
fn a_buffer_that_cannot_be_read_is_skipped_with_the_reason_and_launches_nothing() {
    let w = World::new(false);
    w.cluster.add_capacity_buffer(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "bad", "namespace": "web"},
        "spec": {"podTemplateRef": {"name": "web-chunk"}, "replicas": -1},
    }));
    w.cluster.add_capacity_buffer(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "orphan", "namespace": "web"},
        "spec": {"podTemplateRef": {"name": "nowhere"}, "replicas": 2},
    }));
    let report = w.run();
    assert!(report.buffers.launched.is_empty());
    let why: Vec<&str> = report.buffers.skipped.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(report.buffers.skipped.len(), 2, "{:?}", report.buffers.skipped);
    assert!(why.iter().any(|b| b.contains("orphan")), "{why:?}");
    assert!(why.iter().any(|b| b.contains("bad")), "{why:?}");
}

#[test]
fn an_adaptive_run_in_a_cluster_with_no_pending_pod_still_gives_a_buffer_its_room() {
    let w = World::new(true);
    let report = w.run_with(Settings {
        deployment: "carpool-test".into(),
        watch_mode: carpool::run::watch_mode::WatchMode::Adaptive {
            quiet_after: Duration::from_secs(600),
        },
        ..Settings::default()
    });
    // No pod is pending, so it would check once and exit; the buffer's room is launched
    // all the same, in its first round.
    assert!(!report.buffers.launched.is_empty(), "{:?}", report.buffers);
    assert!(report.batches.iter().all(|b| b.launched.is_empty()));
}
