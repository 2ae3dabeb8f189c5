//! The interruption run over the in-memory ports: a spot warning taints the node,
//! launches an on-demand replacement reserved for its pods, drains it by eviction with
//! the PDBs holding, terminates it and cleans up; duplicates, stale state changes and
//! other deployments' instances do nothing; a crash mid-drain is resumed by the next
//! invocation; the provisioner running during the drain launches nothing for the evicted
//! pods; a forged spot warning (about an on-demand instance, or dated an hour ago) cuts
//! no drain short.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::interruption::{InterruptionEvent, parse_event};
use carpool::fakes::{Crashing, FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder, pdb};
use carpool::model::CapacityType;
use carpool::model::pod::Pod;
use carpool::model::well_known as wk;
use carpool::ports::{
    Cluster, ClusterError, Eviction, Instance, InstanceState, MetadataPatch, PodEvent, PodRef, StateStore, Validated,
};
use carpool::run::disruption::{Disrupter, EventReport, InterruptionSettings, Outcome};
use carpool::run::provision::{Provisioner, Settings};
use futures_util::FutureExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;
const SPOT: &str = "i-0spot000000000001";
const NODE: &str = "ip-10-0-1-1.ec2.internal";
const DEPLOYMENT: &str = "carpool-test";

fn start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(START)
}

fn settings() -> InterruptionSettings {
    InterruptionSettings {
        provision: Settings {
            deployment: DEPLOYMENT.into(),
            ..Settings::default()
        },
        ..InterruptionSettings::default()
    }
}

/// A Running pod `shop/<name>` of the ReplicaSet `<app>-rs` (label `app=<app>`) on `node`.
fn pod_on(node: &str, name: &str, app: &str) -> Pod {
    PodBuilder::new(name)
        .namespace("shop")
        .uid(name)
        .label("app", app)
        .requests("500m", "1Gi")
        .owner("apps/v1", "ReplicaSet", &format!("{app}-rs"))
        .spec("nodeName", json!(node))
        .running()
        .pod()
        .unwrap()
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: Arc<FakeClock>,
}

/// A spot node running 3 `web` pods and 2 `api` pods, the `api` ones under a PDB with
/// `minAvailable: 1` (replicas − 1), in a NodePool that allows spot and on-demand.
fn world() -> World {
    world_of(CapacityType::Spot)
}

/// [`world`], with the instance of the capacity type EC2 says it is (its Node is labelled
/// spot either way).
fn world_of(capacity_type: CapacityType) -> World {
    world_in(capacity_type, false)
}

/// [`world`], with a kubelet: an evicted pod shuts down for its grace period
/// ([`FakeCluster::with_kubelet`]), as on the local stack.
fn world_with_kubelet() -> World {
    world_in(CapacityType::Spot, true)
}

fn world_in(capacity_type: CapacityType, kubelet: bool) -> World {
    let clock = Arc::new(FakeClock::at(start()));
    let cluster = if kubelet {
        FakeCluster::new().with_kubelet(clock.clone())
    } else {
        FakeCluster::new()
    };
    let w = World {
        cloud: FakeCloud::new(),
        cluster,
        store: FakeStore::new(),
        clock,
    };
    w.cloud.set_now(START as i64 * 1000);
    w.cluster.add_nodepool(
        NodePoolBuilder::new("general")
            .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
            .requirement("kubernetes.io/arch", "In", &["amd64"])
            .build(),
    );
    w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
    w.cloud.add_instance(Instance {
        id: SPOT.into(),
        instance_type: "m5.xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type,
        nodepool: "general".into(),
        launch_id: "run-0-0".into(),
        deployment: Some(DEPLOYMENT.into()),
        state: InstanceState::Running,
        launched_at: Some(START as i64 * 1000 - 3_600_000),
        network: Default::default(),
    });
    let node: Node = NodeBuilder::new(NODE)
        .label(wk::NODEPOOL, "general")
        .label(wk::CARPOOL_MANAGED, "true")
        .label(wk::CAPACITY_TYPE, "spot")
        .instance_type("m5.xlarge")
        .zone("us-east-1a")
        .provider_id(&format!("aws:///us-east-1a/{SPOT}"))
        .allocatable("cpu", "3920m")
        .allocatable("memory", "14Gi")
        .allocatable("pods", "58")
        .ready(true)
        .node()
        .unwrap();
    w.cluster.add_node(node);
    for i in 0..3 {
        w.cluster.add_pod(pod_on(NODE, &format!("web-{i}"), "web"));
    }
    for i in 0..2 {
        w.cluster.add_pod(pod_on(NODE, &format!("api-{i}"), "api"));
    }
    w.cluster.add_pdb(
        pdb(
            "shop",
            "api",
            json!({"matchLabels": {"app": "api"}}),
            json!({"minAvailable": 1}),
        )
        .unwrap(),
    );
    w
}

/// A sample event (`text`), made about `instance`, with the id `id`, sent at `time`.
fn sample(text: &str, id: &str, instance: &str, time: SystemTime) -> Value {
    let mut v: Value = serde_json::from_str(text).unwrap();
    v["id"] = json!(id);
    v["detail"]["instance-id"] = json!(instance);
    v["resources"] = json!([format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance}")]);
    v["time"] = json!(rfc3339(time));
    v
}

/// The sample spot warning, about `instance`, sent at `time`.
fn spot_warning(id: &str, instance: &str, time: SystemTime) -> InterruptionEvent {
    let v = sample(
        include_str!("../data/events/spot-interruption-warning.json"),
        id,
        instance,
        time,
    );
    parse_event(&v).unwrap()
}

fn state_change(id: &str, instance: &str, state: &str, time: SystemTime) -> InterruptionEvent {
    let mut v = sample(
        include_str!("../data/events/instance-state-change-terminated.json"),
        id,
        instance,
        time,
    );
    v["detail"]["state"] = json!(state);
    parse_event(&v).unwrap()
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    jiff_like(secs)
}

/// `yyyy-mm-ddThh:mm:ssZ` of epoch seconds (civil-from-days, Howard Hinnant's algorithm).
fn jiff_like(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// How the ReplicaSets answer an eviction.
#[derive(Clone, Copy, PartialEq)]
enum Recreate {
    /// The pod comes back Running on the replacement node (the scheduler placed it).
    Running,
    /// The pod comes back pending, under another name (not yet placed).
    Pending,
}

/// The cluster as a ReplicaSet and kube-scheduler make it: an evicted pod is recreated
/// under another name.
struct Replicas<'a> {
    inner: &'a FakeCluster,
    recreate: Recreate,
    evictions: Mutex<Vec<String>>,
}

impl<'a> Replicas<'a> {
    fn new(inner: &'a FakeCluster, recreate: Recreate) -> Self {
        Replicas {
            inner,
            recreate,
            evictions: Mutex::new(Vec::new()),
        }
    }

    fn evicted(&self) -> Vec<String> {
        self.evictions.lock().unwrap().clone()
    }
}

impl Cluster for Replicas<'_> {
    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        self.inner.pending_pods().await
    }
    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        self.inner.nodes().await
    }
    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        self.inner.scheduled_pods().await
    }
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        self.inner.pods_on_node(node).await
    }
    async fn daemonsets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        self.inner.daemonsets().await
    }
    async fn pdbs(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        self.inner.pdbs().await
    }
    async fn persistent_volumes(&self) -> Result<Vec<k8s_openapi::api::core::v1::PersistentVolume>, ClusterError> {
        self.inner.persistent_volumes().await
    }
    async fn persistent_volume_claims(
        &self,
    ) -> Result<Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>, ClusterError> {
        self.inner.persistent_volume_claims().await
    }
    async fn storage_classes(&self) -> Result<Vec<k8s_openapi::api::storage::v1::StorageClass>, ClusterError> {
        self.inner.storage_classes().await
    }
    async fn csinodes(&self) -> Result<Vec<k8s_openapi::api::storage::v1::CSINode>, ClusterError> {
        self.inner.csinodes().await
    }
    async fn namespaces(&self) -> Result<Vec<k8s_openapi::api::core::v1::Namespace>, ClusterError> {
        self.inner.namespaces().await
    }
    async fn nodepools(&self) -> Result<Validated<carpool::model::NodePool>, ClusterError> {
        self.inner.nodepools().await
    }
    async fn ec2nodeclasses(&self) -> Result<Validated<carpool::model::EC2NodeClass>, ClusterError> {
        self.inner.ec2nodeclasses().await
    }
    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        self.inner.cordon(node).await
    }
    async fn taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        self.inner.taint(node, taint).await
    }
    async fn untaint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        self.inner.untaint(node, taint).await
    }
    async fn tolerate(&self, pod: &Pod, toleration: &Toleration) -> Result<(), ClusterError> {
        self.inner.tolerate(pod, toleration).await
    }
    async fn evict(&self, target: &PodRef) -> Result<Eviction, ClusterError> {
        let (namespace, pod) = (target.namespace.as_str(), target.name.as_str());
        let before = self.inner.pod(namespace, pod);
        let answer = self.inner.evict(target).await?;
        if answer == Eviction::Evicted {
            self.evictions.lock().unwrap().push(format!("{namespace}/{pod}"));
            if let Some(mut p) = before {
                p.metadata.name = Some(format!("{pod}-r"));
                p.metadata.uid = Some(format!("{pod}-r"));
                match self.recreate {
                    Recreate::Running => {
                        p.spec.as_mut().unwrap().node_name = Some("replacement".into());
                    }
                    Recreate::Pending => {
                        p.spec.as_mut().unwrap().node_name = None;
                        p = PodBuilder::pending_web(&format!("{pod}-r"), "500m", "1Gi")
                            .namespace(namespace)
                            .owner(
                                "apps/v1",
                                "ReplicaSet",
                                &format!("{}-rs", pod.split('-').next().unwrap()),
                            )
                            .pod()
                            .unwrap();
                    }
                }
                self.inner.add_pod(p);
            }
        }
        Ok(answer)
    }
    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        self.inner.attached_volumes(node).await
    }
    async fn add_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        self.inner.add_finalizer(node).await
    }
    async fn remove_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        self.inner.remove_finalizer(node).await
    }
    async fn delete_node(&self, node: &str, uid: &str) -> Result<(), ClusterError> {
        self.inner.delete_node(node, uid).await
    }
    async fn patch_labels_annotations(
        &self,
        node: &str,
        labels: &MetadataPatch,
        annotations: &MetadataPatch,
    ) -> Result<(), ClusterError> {
        self.inner.patch_labels_annotations(node, labels, annotations).await
    }
    async fn write_status(
        &self,
        kind: carpool::ports::StatusOf,
        name: &str,
        status: &serde_json::Value,
    ) -> Result<(), ClusterError> {
        self.inner.write_status(kind, name, status).await
    }
    async fn publish_event(&self, event: &PodEvent) -> Result<(), ClusterError> {
        self.inner.publish_event(event).await
    }
}

fn handle<K: Cluster>(w: &World, cluster: &K, owner: &str, event: &InterruptionEvent) -> Vec<EventReport> {
    block_on(handle_fut(w, cluster, owner, event))
}

async fn handle_fut<K: Cluster>(w: &World, cluster: &K, owner: &str, event: &InterruptionEvent) -> Vec<EventReport> {
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let i = Disrupter::new(&w.cloud, cluster, &w.store, &*w.clock, settings(), owner);
    let until = w.clock_now() + Duration::from_secs(120);
    i.handle(&region, event, until).await.unwrap()
}

fn sweep<K: Cluster>(w: &World, cluster: &K, owner: &str) -> Vec<EventReport> {
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let i = Disrupter::new(&w.cloud, cluster, &w.store, &*w.clock, settings(), owner);
    block_on(i.sweep(&region, w.clock_now() + Duration::from_secs(120))).unwrap()
}

impl World {
    fn clock_now(&self) -> SystemTime {
        use carpool::ports::Clock;
        self.clock.now()
    }

    /// Registers a Ready Node for each of `instances`, `replacement-<n>`.
    fn register(&self, instances: &[Instance]) {
        for (n, i) in instances.iter().enumerate() {
            self.cluster.add_node(
                NodeBuilder::new(&format!("replacement-{n}"))
                    .label(wk::CARPOOL_MANAGED, "true")
                    .provider_id(&i.provider_id())
                    .allocatable("cpu", "4")
                    .allocatable("memory", "16Gi")
                    .allocatable("pods", "58")
                    .ready(true)
                    .node()
                    .unwrap(),
            );
        }
    }

    fn on_demand_instances(&self) -> Vec<Instance> {
        self.cloud.instances().into_iter().filter(|i| i.id != SPOT).collect()
    }
}

#[test]
fn a_spot_warning_taints_replaces_on_demand_drains_and_cleans_up() {
    let w = world();
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let reports = handle(&w, &cluster, "inv-1", &spot_warning("e-1", SPOT, start()));
    let r = &reports[0];
    assert_eq!(r.outcome, Outcome::CleanedUp, "{r:?}");
    assert!(r.drained, "{r:?}");
    assert_eq!(r.evicted, 5);
    assert!(
        w.cluster
            .calls()
            .iter()
            .any(|c| c.starts_with(&format!("taint {NODE}"))),
        "{:?}",
        w.cluster.calls()
    );

    // The cheapest on-demand replacement for the node's 5 pods, every launch of it
    // reserved for them.
    let replacements = w.on_demand_instances();
    assert!(!replacements.is_empty());
    assert!(
        replacements.iter().all(|i| i.capacity_type == CapacityType::OnDemand),
        "{replacements:?}"
    );
    assert_eq!(r.replacements.len(), replacements.len());
    let launches = block_on(w.store.list_launches()).unwrap();
    assert_eq!(launches.len(), replacements.len());
    for l in &launches {
        let reservation = l.reserved_for.as_ref().expect("a reserved launch");
        assert_eq!(reservation.disrupted, SPOT);
        assert_eq!(reservation.pods.len(), 5);
        assert_eq!(
            reservation.owners,
            vec![
                "shop/ReplicaSet/api-rs".to_string(),
                "shop/ReplicaSet/web-rs".to_string()
            ]
        );
    }

    // The interrupted offering is left out for a while, as a capacity error would be, and
    // for an hour from moves back to spot.
    let ice = block_on(w.store.unavailable_offerings(start())).unwrap();
    assert!(
        ice.iter().any(|o| o.instance_type == "m5.xlarge"
            && o.zone == "us-east-1a"
            && o.capacity_type == CapacityType::Spot
            && !o.reclaimed),
        "{ice:?}"
    );
    let later = block_on(w.store.unavailable_offerings(start() + Duration::from_secs(3000))).unwrap();
    assert!(
        later
            .iter()
            .any(|o| o.instance_type == "m5.xlarge" && o.reclaimed && o.capacity_type == CapacityType::Spot),
        "{later:?}"
    );
    // The instance is terminated, its Node and records gone.
    let spot = w.cloud.instances().into_iter().find(|i| i.id == SPOT).unwrap();
    assert_eq!(spot.state, InstanceState::Terminated);
    assert!(w.cluster.node(NODE).is_none());
    assert!(block_on(w.store.list_disruptions()).unwrap().is_empty());
    // Every pod was evicted once, and the PDB was never broken: the fake refuses an
    // eviction that would leave fewer than minAvailable healthy api pods.
    let evicted = cluster.evicted();
    assert_eq!(evicted.len(), 5, "{evicted:?}");
    let unique: std::collections::BTreeSet<&String> = evicted.iter().collect();
    assert_eq!(unique.len(), 5);
}

#[test]
fn the_same_event_delivered_twice_does_nothing_twice() {
    let w = world();
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let event = spot_warning("e-dup", SPOT, start());
    handle(&w, &cluster, "inv-1", &event);
    let calls = w.cloud.calls().len();
    let launched = w.on_demand_instances().len();
    let again = handle(&w, &cluster, "inv-2", &event);
    assert_eq!(again[0].outcome, Outcome::Duplicate);
    assert_eq!(w.on_demand_instances().len(), launched, "no second replacement");
    assert_eq!(w.cloud.calls().len(), calls, "the duplicate calls EC2 for nothing");
    assert_eq!(cluster.evicted().len(), 5, "no pod evicted twice");
}

#[test]
fn a_function_killed_mid_drain_is_resumed_by_the_next_invocation() {
    let w = world();
    // Killed after 2 evictions: every call after that never returns, and the invocation's
    // future is dropped (what a timeout or a crash does to a Lambda).
    let replicas = Replicas::new(&w.cluster, Recreate::Running);
    let dying = Crashing::after_evictions(&replicas, 2);
    let event = spot_warning("e-kill", SPOT, start());
    let finished = handle_fut(&w, &dying, "inv-1", &event).now_or_never();
    assert!(finished.is_none(), "the first invocation was killed mid-drain");
    let launched = w.on_demand_instances().len();
    assert_eq!(replicas.evicted().len(), 2);
    let records = block_on(w.store.list_disruptions()).unwrap();
    assert_eq!(records.len(), 1, "the disruption is recorded");
    assert_eq!(records[0].held_by.as_deref(), Some("inv-1"));

    // The next invocation, the scheduled sweep once the dead holder's hold lapsed.
    w.clock.advance(Duration::from_secs(21));
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let reports = sweep(&w, &cluster, "inv-2");
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].outcome, Outcome::CleanedUp, "{:?}", reports[0]);
    let mut all = replicas.evicted();
    all.extend(cluster.evicted());
    let unique: std::collections::BTreeSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 5, "each pod evicted once across both invocations: {all:?}");
    assert_eq!(unique.len(), 5);
    assert_eq!(
        w.on_demand_instances().len(),
        launched,
        "the replacement is not launched again"
    );
    assert!(w.cluster.node(NODE).is_none());
}

#[test]
fn a_sweep_leaves_a_disruption_another_live_invocation_holds() {
    let w = world();
    let replicas = Replicas::new(&w.cluster, Recreate::Running);
    let dying = Crashing::after_evictions(&replicas, 1);
    let event = spot_warning("e-held", SPOT, start());
    assert!(handle_fut(&w, &dying, "inv-1", &event).now_or_never().is_none());
    w.clock.advance(Duration::from_secs(5));
    let reports = sweep(&w, &w.cluster, "inv-2");
    assert!(
        matches!(&reports[0].outcome, Outcome::HeldElsewhere { holder } if holder == "inv-1"),
        "{reports:?}"
    );
}

#[test]
fn a_terminated_state_change_for_a_node_mid_drain_cleans_up() {
    let w = world();
    let replicas = Replicas::new(&w.cluster, Recreate::Running);
    let dying = Crashing::after_evictions(&replicas, 1);
    assert!(
        handle_fut(&w, &dying, "inv-1", &spot_warning("e-1", SPOT, start()))
            .now_or_never()
            .is_none()
    );
    // EC2 reclaims the instance before the drain ends.
    w.cloud.reclaim(SPOT);
    w.clock.advance(Duration::from_secs(3));
    let reports = handle(
        &w,
        &w.cluster,
        "inv-2",
        &state_change("e-2", SPOT, "terminated", w.clock_now()),
    );
    assert_eq!(reports[0].outcome, Outcome::CleanedUp, "{reports:?}");
    assert!(w.cluster.node(NODE).is_none());
    assert!(block_on(w.store.list_disruptions()).unwrap().is_empty());
    assert!(
        block_on(w.store.list_launches())
            .unwrap()
            .iter()
            .all(|l| l.instance_id.as_deref() != Some(SPOT))
    );
}

#[test]
fn a_stopping_event_about_an_instance_running_again_is_stale_and_ignored() {
    let w = world();
    // Karpenter acts on the instance's state as the event gives it; Carpool reads the
    // actual state, because state changes arrive out of order.
    let reports = handle(&w, &w.cluster, "inv-1", &state_change("e-1", SPOT, "stopping", start()));
    assert!(matches!(reports[0].outcome, Outcome::Ignored { .. }), "{reports:?}");
    assert!(w.cluster.node(NODE).is_some());
    assert!(w.on_demand_instances().is_empty());
}

#[test]
fn an_instance_another_deployment_launched_is_left_alone() {
    let w = world();
    w.cloud.add_instance(Instance {
        id: "i-0other".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
        nodepool: "general".into(),
        launch_id: "x-0".into(),
        deployment: Some("carpool-staging".into()),
        state: InstanceState::Running,
        launched_at: None,
        network: Default::default(),
    });
    let reports = handle(&w, &w.cluster, "inv-1", &spot_warning("e-1", "i-0other", start()));
    assert!(matches!(&reports[0].outcome, Outcome::NotOwned { reason } if reason.contains("carpool-staging")));
    assert!(w.on_demand_instances().iter().all(|i| i.id == "i-0other"));
}

#[test]
fn the_provisioner_during_the_drain_launches_nothing_for_the_evicted_pods() {
    let w = world();
    // The ReplicaSets recreate the evicted pods pending, under new names, while the
    // replacement is still on its way. The second api pod stays (its PDB of minAvailable
    // 1 holds it: the first one's replacement is not Ready) until the hard deadline, and
    // goes with the instance.
    let cluster = Replicas::new(&w.cluster, Recreate::Pending);
    let reports = handle(&w, &cluster, "inv-1", &spot_warning("e-1", SPOT, start()));
    assert_eq!(reports[0].blocked.len(), 1, "{reports:?}");
    assert!(reports[0].blocked[0].contains("shop/api"), "{reports:?}");
    let pending = block_on(w.cluster.pending_pods()).unwrap();
    assert_eq!(pending.len(), 4, "the evicted pods are pending again");
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let mut p = Provisioner::new(
        &w.cloud,
        &w.cluster,
        &w.store,
        &*w.clock,
        Settings {
            deployment: DEPLOYMENT.into(),
            ..Settings::default()
        },
        "prov-1",
    );
    let batch = block_on(p.batch(&region)).unwrap();
    assert!(
        batch.launched.is_empty(),
        "the reserved replacement is theirs: {:?}",
        batch.launched
    );
    assert_eq!(batch.pods_planned, 4, "{:?}", batch.unschedulable);

    // A pod of another workload does not get that room.
    w.cluster.add_pod(
        PodBuilder::pending_web("batch-0", "500m", "1Gi")
            .owner("batch/v1", "Job", "nightly")
            .pod()
            .unwrap(),
    );
    let batch = block_on(p.batch(&region)).unwrap();
    assert_eq!(batch.launched.len(), 1, "{batch:?}");
}

fn rebalance(id: &str, instance: &str, time: SystemTime) -> InterruptionEvent {
    let v = sample(
        include_str!("../data/events/rebalance-recommendation.json"),
        id,
        instance,
        time,
    );
    parse_event(&v).unwrap()
}

#[test]
fn a_rebalance_recommendation_is_ignored_unless_the_nodepool_opts_in() {
    let w = world();
    let reports = handle(&w, &w.cluster, "inv-1", &rebalance("e-1", SPOT, start()));
    assert!(
        matches!(&reports[0].outcome, Outcome::Ignored { reason } if reason.contains("carpool.sh/rebalance")),
        "{reports:?}"
    );
    assert!(w.on_demand_instances().is_empty());
    assert!(w.cluster.node(NODE).is_some());
}

#[test]
fn an_opted_in_rebalance_launches_first_and_drains_only_once_the_replacement_is_ready() {
    let w = world();
    w.cluster.add_nodepool(rebalance_pool(None));
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let reports = handle(&w, &cluster, "inv-1", &rebalance("e-1", SPOT, start()));
    assert_eq!(reports[0].outcome, Outcome::WaitingForReplacement, "{reports:?}");
    assert_eq!(
        reports[0].evicted, 0,
        "nothing is evicted before the replacement is Ready"
    );
    let replacements = w.on_demand_instances();
    assert!(!replacements.is_empty());

    // Not Ready yet: the sweep keeps waiting.
    w.clock.advance(Duration::from_secs(30));
    let reports = sweep(&w, &cluster, "inv-2");
    assert_eq!(reports[0].outcome, Outcome::WaitingForReplacement);

    // The replacements register and turn Ready: the next sweep drains.
    w.register(&replacements);
    w.clock.advance(Duration::from_secs(30));
    let reports = sweep(&w, &cluster, "inv-3");
    assert_eq!(reports[0].outcome, Outcome::CleanedUp, "{reports:?}");
    assert_eq!(cluster.evicted().len(), 5);
    assert_eq!(w.on_demand_instances().len(), replacements.len(), "launched once");
}

#[test]
fn an_instance_shutting_down_is_still_drained_before_it_is_cleaned_up() {
    let w = world();
    let mut spot = w.cloud.instances().into_iter().find(|i| i.id == SPOT).unwrap();
    spot.state = InstanceState::ShuttingDown;
    w.cloud.add_instance(spot);
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let reports = handle(
        &w,
        &cluster,
        "inv-1",
        &state_change("e-1", SPOT, "shutting-down", start()),
    );
    assert_eq!(reports[0].outcome, Outcome::CleanedUp, "{reports:?}");
    assert_eq!(cluster.evicted().len(), 5, "its pods were evicted, not dropped");
    assert!(!w.on_demand_instances().is_empty(), "and replaced");
    assert!(w.cluster.node(NODE).is_none());
}

#[test]
fn a_spot_warning_about_an_on_demand_instance_taints_evicts_and_terminates_nothing() {
    // The Node says spot; EC2 says on-demand. EC2 sends spot warnings about spot
    // instances only, so the warning is not genuine, whatever the Node's label.
    let w = world_of(CapacityType::OnDemand);
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let reports = handle(&w, &cluster, "inv-1", &spot_warning("e-forged", SPOT, start()));
    assert!(
        matches!(&reports[0].outcome, Outcome::Ignored { reason } if reason.contains("not a spot instance")),
        "{reports:?}"
    );
    assert!(cluster.evicted().is_empty());
    assert!(
        !w.cluster.calls().iter().any(|c| c.starts_with("taint")),
        "{:?}",
        w.cluster.calls()
    );
    assert!(w.on_demand_instances().is_empty(), "no replacement launched");
    let instance = w.cloud.instances().into_iter().find(|i| i.id == SPOT).unwrap();
    assert_eq!(instance.state, InstanceState::Running);
    assert!(block_on(w.store.list_disruptions()).unwrap().is_empty());
    // Nor is its offering marked unavailable.
    assert!(block_on(w.store.unavailable_offerings(start())).unwrap().is_empty());
}

#[test]
fn a_spot_warning_dated_an_hour_ago_gets_its_full_deadline_from_arrival() {
    let w = world();
    let hour_ago = start() - Duration::from_secs(3600);
    let event = spot_warning("e-old", SPOT, hour_ago);
    // Stopped after the first eviction, to read the record it wrote.
    let replicas = Replicas::new(&w.cluster, Recreate::Running);
    let dying = Crashing::after_evictions(&replicas, 1);
    assert!(handle_fut(&w, &dying, "inv-1", &event).now_or_never().is_none());
    let records = block_on(w.store.list_disruptions()).unwrap();
    assert_eq!(records.len(), 1);
    assert!(records[0].hard_deadline);
    assert_eq!(
        records[0].drain_deadline,
        carpool::ports::epoch_millis(start() + Duration::from_secs(90)),
        "90 s from arrival, not from the event's time"
    );
}

#[test]
fn a_spot_warning_dated_an_hour_ago_drains_with_the_pdb_holding_until_its_deadline() {
    let w = world();
    // Evicted pods come back pending: the PDB (minAvailable 1 of 2 api pods) refuses the
    // second api eviction for as long as the drain lasts.
    let cluster = Replicas::new(&w.cluster, Recreate::Pending);
    let hour_ago = start() - Duration::from_secs(3600);
    let reports = handle(&w, &cluster, "inv-1", &spot_warning("e-old", SPOT, hour_ago));
    let r = &reports[0];
    assert!(!r.drained, "{r:?}");
    assert!(!r.blocked.is_empty(), "{r:?}");
    // Drained for the deadline's 90 s from arrival, not one pass and terminate.
    assert!(r.drain_seconds >= 89.0, "drained {} s: {r:?}", r.drain_seconds);
    let evicted = cluster.evicted();
    assert_eq!(
        evicted.iter().filter(|p| p.starts_with("shop/api")).count(),
        1,
        "the PDB held: {evicted:?}"
    );
}

#[test]
fn in_dry_run_a_spot_warning_is_reported_and_nothing_is_tainted_evicted_recorded_launched_or_terminated() {
    let w = world();
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let mut dry = settings();
    dry.provision.dry_run = true;
    let d = Disrupter::new(&w.cloud, &cluster, &w.store, &*w.clock, dry, "inv-dry");
    let until = w.clock_now() + Duration::from_secs(120);
    let reports = block_on(d.handle(&region, &spot_warning("e-dry", SPOT, start()), until)).unwrap();
    let would = match &reports[0].outcome {
        Outcome::DryRun { would } => would.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        would.contains("drain it by eviction") && would.contains(NODE),
        "{would}"
    );
    assert!(cluster.evicted().is_empty());
    assert!(
        !w.cluster
            .calls()
            .iter()
            .any(|c| c.starts_with("taint") || c.starts_with("delete")),
        "{:?}",
        w.cluster.calls()
    );
    assert!(w.on_demand_instances().is_empty(), "no replacement launched");
    let instance = w.cloud.instances().into_iter().find(|i| i.id == SPOT).unwrap();
    assert_eq!(instance.state, InstanceState::Running);
    assert!(block_on(w.store.list_disruptions()).unwrap().is_empty());
    assert!(block_on(w.store.unavailable_offerings(start())).unwrap().is_empty());
    // Not remembered either: the real run that follows handles the same event.
    let reports = handle(&w, &cluster, "inv-real", &spot_warning("e-dry", SPOT, start()));
    assert_ne!(reports[0].outcome, Outcome::Duplicate, "{reports:?}");
    // And a dry-run sweep does not advance the disruption the real run started.
    let d = Disrupter::new(
        &w.cloud,
        &cluster,
        &w.store,
        &*w.clock,
        {
            let mut s = settings();
            s.provision.dry_run = true;
            s
        },
        "inv-dry-2",
    );
    let before = block_on(w.store.list_disruptions()).unwrap();
    assert!(block_on(d.sweep(&region, until)).unwrap().is_empty());
    assert_eq!(block_on(w.store.list_disruptions()).unwrap(), before);
}

/// A disruption in progress whose instance is already gone, as a crashed run left it.
fn gone_record(instance_id: &str, hard: bool) -> carpool::ports::DisruptionRecord {
    let now = carpool::ports::epoch_millis(start());
    carpool::ports::DisruptionRecord {
        instance_id: instance_id.into(),
        node: format!("node-{instance_id}"),
        reason: "spot-interruption".into(),
        step: carpool::ports::DisruptionStep::Draining,
        replacements: Vec::new(),
        started_at: now,
        updated_at: now,
        event_id: format!("e-{instance_id}"),
        nodepool: Some("general".into()),
        drain_deadline: now + 90_000,
        hard_deadline: hard,
        wait_for_replacement: !hard,
        terminate_by: None,
        burst: None,
        evicted: Vec::new(),
        held_by: None,
        held_until: 0,
        version: 0,
    }
}

#[test]
fn a_sweep_advances_every_disruption_and_one_failure_stops_none_of_the_others() {
    // Issue 26, item 5: the sweep used to stop at its first error, leaving every drain
    // after it for a minute.
    let w = world();
    for (id, hard) in [("i-gone-1", true), ("i-gone-2", false), ("i-gone-3", true)] {
        block_on(w.store.create_disruption(&gone_record(id, hard))).unwrap();
    }
    w.store
        .fail_on("update DISRUPT#i-gone-1", carpool::fakes::StoreErrorKind::Throttled);
    let reports = sweep(&w, &w.cluster, "inv-sweep");
    let done: Vec<&str> = reports.iter().filter_map(|r| r.instance_id.as_deref()).collect();
    assert_eq!(done.len(), 2, "{reports:?}");
    assert!(done.contains(&"i-gone-2") && done.contains(&"i-gone-3"), "{done:?}");
    let left: Vec<String> = block_on(w.store.list_disruptions())
        .unwrap()
        .into_iter()
        .map(|d| d.instance_id)
        .collect();
    assert_eq!(left, vec!["i-gone-1".to_string()]);
    // The next sweep takes it up.
    sweep(&w, &w.cluster, "inv-sweep-2");
    assert!(block_on(w.store.list_disruptions()).unwrap().is_empty());
}

// --- termination: the instance goes once its pods are gone ------------------------------

/// Handles `event` with `until` `seconds` from now.
fn handle_for<K: Cluster>(w: &World, cluster: &K, event: &InterruptionEvent, seconds: u64) -> Vec<EventReport> {
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let i = Disrupter::new(&w.cloud, cluster, &w.store, &*w.clock, settings(), "inv-1");
    block_on(i.handle(&region, event, w.clock_now() + Duration::from_secs(seconds))).unwrap()
}

fn spot_state(w: &World) -> InstanceState {
    w.cloud.instances().into_iter().find(|i| i.id == SPOT).unwrap().state
}

/// Karpenter's termination controller terminates the instance only once `awaitDrain`
/// finds no pod waiting for eviction (`Terminator.Drain`, `podutil.IsWaitingEviction`:
/// terminating pods count until they are gone), kubernetes-sigs/karpenter
/// `pkg/controllers/node/termination/controller.go` `Controller.finalize`.
#[test]
fn a_spot_warning_terminates_the_instance_only_once_its_pods_have_shut_down() {
    let w = world_with_kubelet();
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let r = &handle(&w, &cluster, "inv-1", &spot_warning("e-1", SPOT, start()))[0];
    assert_eq!(r.outcome, Outcome::CleanedUp, "{r:?}");
    assert_eq!(r.evicted, 5);
    let drained = r.event_to_drained_ms.expect("drained");
    let empty = r.event_to_empty_ms.expect("emptied");
    assert!(drained < 5_000, "every eviction accepted at once: {r:?}");
    // The pods' 30-s grace periods ran before the instance went, within the notice.
    assert!((30_000..=90_000).contains(&empty), "empty after {empty} ms: {r:?}");
    assert_eq!(spot_state(&w), InstanceState::Terminated);
    assert!(
        w.cluster.pod_keys().iter().all(|k| k.contains("-r")),
        "{:?}",
        w.cluster.pod_keys()
    );
}

/// The notice's deadline is the ceiling: a pod whose grace period outlasts it is cut
/// there, as the instance would be (Karpenter's node termination time,
/// `Controller.nodeTerminationTime`, plays that part for a NodeClaim).
#[test]
fn a_pod_whose_grace_period_outlasts_the_notice_is_cut_at_the_deadline() {
    let w = world_with_kubelet();
    let mut slow = pod_on(NODE, "slow-0", "slow");
    slow.spec.as_mut().unwrap().termination_grace_period_seconds = Some(600);
    w.cluster.add_pod(slow);
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let r = &handle(&w, &cluster, "inv-1", &spot_warning("e-1", SPOT, start()))[0];
    assert!(r.drained, "{r:?}");
    assert_eq!(r.event_to_empty_ms, None, "{r:?}");
    assert!(r.waiting_for.contains(&"shop/slow-0".to_string()), "{r:?}");
    assert_eq!(spot_state(&w), InstanceState::Terminated);
    let took = w.clock_now().duration_since(start()).unwrap();
    assert!(
        took >= Duration::from_secs(90) && took < Duration::from_secs(100),
        "{took:?}"
    );
}

/// Karpenter's `awaitVolumeDetachment` waits for the node's VolumeAttachments (those of
/// drainable pods, `filterVolumeAttachments`) before `awaitInstanceTermination`.
#[test]
fn the_instance_waits_for_its_volumes_to_detach() {
    let w = world_with_kubelet();
    w.cluster.attach_volume(NODE, "pv-data");
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let r = &handle_for(&w, &cluster, &spot_warning("e-1", SPOT, start()), 45)[0];
    assert_eq!(
        r.outcome,
        Outcome::Draining,
        "pods gone, the volume still attached: {r:?}"
    );
    assert_eq!(r.waiting_for, vec!["pv/pv-data".to_string()], "{r:?}");
    assert_eq!(spot_state(&w), InstanceState::Running);

    w.cluster.detach_volume(NODE, "pv-data");
    let r = &sweep(&w, &cluster, "inv-2")[0];
    assert_eq!(r.outcome, Outcome::CleanedUp, "{r:?}");
    assert_eq!(spot_state(&w), InstanceState::Terminated);
}

fn rebalance_pool(termination_grace: Option<&str>) -> Value {
    let mut pool = NodePoolBuilder::new("general")
        .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
        .requirement("kubernetes.io/arch", "In", &["amd64"])
        .build();
    pool["metadata"]["annotations"] = json!({"carpool.sh/rebalance": "true"});
    if let Some(tgp) = termination_grace {
        pool["spec"]["template"]["spec"]["terminationGracePeriod"] = json!(tgp);
    }
    pool
}

/// A spot warning for a node whose rebalance is waiting for its replacement: the
/// notice's hard deadline wins, the drain stops waiting, and the node is empty before
/// the notice ends (Karpenter's interruption controller deletes the NodeClaim whatever
/// disruption was under way: `Controller.handleNodeClaim` in aws/karpenter-provider-aws
/// `pkg/controllers/interruption/controller.go`).
#[test]
fn a_spot_warning_escalates_a_rebalance_still_waiting_for_its_replacement() {
    let w = world_with_kubelet();
    w.cluster.add_nodepool(rebalance_pool(None));
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let r = &handle(&w, &cluster, "inv-1", &rebalance("e-1", SPOT, start()))[0];
    assert_eq!(r.outcome, Outcome::WaitingForReplacement, "{r:?}");
    w.clock.advance(Duration::from_secs(60));

    let warned = w.clock_now();
    let r = &handle(&w, &cluster, "inv-2", &spot_warning("e-2", SPOT, warned))[0];
    assert_eq!(r.outcome, Outcome::CleanedUp, "{r:?}");
    assert_eq!(cluster.evicted().len(), 5);
    let empty = r.event_to_empty_ms.expect("emptied before the notice ended");
    assert!(empty < 120_000, "{r:?}");
    assert_eq!(spot_state(&w), InstanceState::Terminated);
    let records = block_on(w.store.list_disruptions()).unwrap();
    assert!(records.is_empty(), "{records:?}");
}

/// A soft disruption waits for its pods up to the NodePool's `terminationGracePeriod`,
/// then the node goes (Karpenter's `Controller.nodeTerminationTime` and the
/// `hasTerminationGracePeriodElapsed` checks of `awaitVolumeDetachment`).
#[test]
fn a_soft_disruption_waits_for_its_pods_up_to_the_nodepools_termination_grace_period() {
    let w = world_with_kubelet();
    w.cluster.add_nodepool(rebalance_pool(Some("3m")));
    let mut slow = pod_on(NODE, "slow-0", "slow");
    slow.spec.as_mut().unwrap().termination_grace_period_seconds = Some(3600);
    w.cluster.add_pod(slow);
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let r = &handle(&w, &cluster, "inv-1", &rebalance("e-1", SPOT, start()))[0];
    assert_eq!(r.outcome, Outcome::WaitingForReplacement, "{r:?}");
    let records = block_on(w.store.list_disruptions()).unwrap();
    assert_eq!(
        records[0].terminate_by,
        Some(carpool::ports::epoch_millis(start() + Duration::from_secs(180)))
    );
    w.register(&w.on_demand_instances());
    // Sweeps every minute: the slow pod is evicted and shuts down for an hour; the node
    // waits for it until 3 minutes after the disruption began, and no longer.
    let mut outcomes = Vec::new();
    while spot_state(&w) == InstanceState::Running && outcomes.len() < 10 {
        w.clock.advance(Duration::from_secs(60));
        outcomes.push(
            sweep(&w, &cluster, &format!("inv-{}", outcomes.len() + 2))[0]
                .outcome
                .clone(),
        );
    }
    assert_eq!(spot_state(&w), InstanceState::Terminated, "{outcomes:?}");
    let took = w.clock_now().duration_since(start()).unwrap();
    assert!(
        took >= Duration::from_secs(180) && took <= Duration::from_secs(240),
        "{took:?} {outcomes:?}"
    );
    assert!(w.cluster.pod("shop", "slow-0").is_some(), "cut short, not waited for");
}

/// Issue 26: a Carpool node someone deleted (`kubectl delete node`) is held by Carpool's
/// finalizer; the sweep drains it (its pods shut down for their grace periods), then
/// terminates its instance and removes the finalizer, and the Node goes, as Karpenter's
/// termination controller finalizes a deleted Node (`Controller.finalize`).
#[test]
fn a_deleted_node_is_drained_before_its_instance_is_terminated_and_the_node_goes() {
    let w = world_with_kubelet();
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    block_on(w.cluster.add_finalizer(NODE)).unwrap();
    let uid = w.cluster.node(NODE).unwrap().metadata.uid.unwrap_or_default();
    block_on(w.cluster.delete_node(NODE, &uid)).unwrap();
    assert!(w.cluster.node(NODE).is_some(), "held by the finalizer");

    let reports = sweep(&w, &cluster, "inv-1");
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].outcome, Outcome::CleanedUp, "{reports:?}");
    assert_eq!(cluster.evicted().len(), 5, "drained first");
    assert!(
        reports[0].event_to_empty_ms.is_some_and(|ms| ms >= 30_000),
        "{reports:?}"
    );
    assert_eq!(spot_state(&w), InstanceState::Terminated);
    assert!(w.cluster.node(NODE).is_none(), "the Node went with its finalizer");
    assert!(
        w.on_demand_instances().is_empty(),
        "no replacement: the provisioner plans for the pods"
    );
}

/// Issue 41, item 10: a NodePool's `terminationGracePeriod` may be any number of hours
/// (the CRD's pattern bounds none). `5000000000000000h` parses, and the handler's
/// `now + terminationGracePeriod` panicked, so every event about the pool's nodes crashed
/// the function. The deadline saturates: the node is handled as with no ceiling.
#[test]
fn a_huge_termination_grace_period_is_handled_without_a_panic() {
    let w = world();
    w.cluster.add_nodepool(rebalance_pool(Some("5000000000000000h")));
    let cluster = Replicas::new(&w.cluster, Recreate::Running);
    let reports = handle(&w, &cluster, "inv-1", &rebalance("e-1", SPOT, start()));
    assert_eq!(reports[0].outcome, Outcome::WaitingForReplacement, "{reports:?}");
    let records = block_on(w.store.list_disruptions()).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].terminate_by, Some(i64::MAX), "{records:?}");
}
