//! Starting nodes count at their instance type's expected capacity, with room kept for the
//! DaemonSets still to land, until they are initialized ([`carpool::decide::provisioning::in_flight`]).
//!
//! The rule is Karpenter's (kubernetes-sigs/karpenter):
//! - `pkg/controllers/nodeclaim/lifecycle/initialization.go`, `Initialization.Reconcile`:
//!   a node is initialized once it is Ready, `StartupTaintsRemoved`,
//!   `KnownEphemeralTaintsRemoved` and `RequestedResourcesRegistered` (the kubelet zeroes
//!   an extended resource until its device plugin registers it, so a zero allocatable
//!   means "not registered yet");
//! - `pkg/controllers/state/statenode.go`, `StateNode.Allocatable` and
//!   `StateNode.Capacity`: until then, every zero quantity of the Node is overridden by the
//!   NodeClaim's (the instance type's expected amount);
//! - `pkg/controllers/provisioning/scheduling/scheduler.go`,
//!   `Scheduler.calculateExistingNodeClaims`, and `existingnode.go`, `NewExistingNode`: the
//!   requests of the DaemonSets compatible with a node, less the node's
//!   `StateNode.DaemonSetRequests` (those already bound), are kept free on it.
//!
//! Pure table tests plan a snapshot through `capacity_view`; the run-level test reproduces
//! the fault (a GPU node that registers before its GPUs show up) on the in-memory fakes.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use carpool::decide::provisioning::in_flight::capacity_view;
use carpool::decide::{ProvisioningPlan, provisioning_plan};
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::model::pod::Pod;
use carpool::model::{CapacityType, Resources};
use carpool::ports::{Clock, LaunchRecord, LaunchState, StateStore, Timer};
use carpool::run::provision::{Provisioner, Settings};
use carpool::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use pollster::block_on;
use serde_json::{Value, json};

use crate::support::region;

const TTL_MS: i64 = 900_000;
/// 2026-09-21T14:13:20Z.
const START: i64 = 1_790_000_000_000;

fn rfc3339(epoch_ms: i64) -> String {
    Timestamp::from_millisecond(epoch_ms).unwrap().to_string()
}

/// What a node of `instance_type` reports once started: the catalog's allocatable.
fn expected_allocatable(instance_type: &str) -> Resources {
    region()
        .types()
        .iter()
        .find(|t| t.name == instance_type)
        .unwrap()
        .allocatable
        .clone()
}

fn nodepool(name: &str, categories: &[&str]) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
           "spec": {"template": {"spec": {
               "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
               "requirements": [
                   {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": categories},
                   {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                   {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}})
}

fn nodeclass() -> Value {
    json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
           "spec": {"role": "KarpenterNodeRole",
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                    "amiSelectorTerms": [{"alias": "al2023@latest"}]}})
}

/// A pending pod with these requests (extended resources also as limits).
fn pending(name: &str, requests: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": name, "creationTimestamp": rfc3339(START)},
        "spec": {"containers": [{"name": "c", "image": "x",
                 "resources": {"requests": requests.clone(), "limits": requests}}]},
        "status": {"phase": "Pending",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

fn gpu_pod(name: &str) -> Pod {
    pending(name, json!({"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}))
}

/// A Node Carpool launched, created at `created`, reporting `allocatable` (and the same
/// capacity); Ready or not, untainted.
fn carpool_node(
    name: &str,
    pool: &str,
    instance_type: &str,
    created: i64,
    allocatable: &Resources,
    ready: bool,
) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": rfc3339(created),
                     "labels": {"carpool.sh/managed": "true", "karpenter.sh/nodepool": pool,
                                "node.kubernetes.io/instance-type": instance_type,
                                "topology.kubernetes.io/zone": "us-east-1a", "karpenter.sh/capacity-type": "on-demand",
                                "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                                "kubernetes.io/hostname": name}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-0{name}")},
        "status": {"allocatable": allocatable.to_k8s(), "capacity": allocatable.to_k8s(),
                   "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    }))
    .unwrap()
}

/// `r` without one resource, as a node reports it before its device plugin runs.
fn without(r: &Resources, resource: &str) -> Resources {
    let mut out = r.clone();
    out.set(resource, 0);
    out
}

fn with(r: &Resources, resource: &str, amount: i64) -> Resources {
    let mut out = r.clone();
    out.set(resource, amount);
    out
}

fn snapshot(pools: Vec<Value>, nodes: Vec<Node>, pods: Vec<Pod>, daemonsets: Vec<Value>) -> Snapshot {
    let mut items = pools;
    items.push(nodeclass());
    items.extend(daemonsets);
    let mut s = Snapshot::default();
    s.add_text(
        "test",
        &json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    s.nodes = nodes;
    s.pods = pods;
    s
}

/// Plans the snapshot at `now` as a batch does: the capacity view, then the plan.
fn plan_at(snapshot: &Snapshot, launches: &[LaunchRecord], now: i64) -> (Vec<Node>, ProvisioningPlan) {
    let region = region();
    let mut view = snapshot.clone();
    view.nodes = capacity_view(snapshot, launches, &region, now, TTL_MS);
    let plan = provisioning_plan(&view, &region);
    (view.nodes, plan)
}

fn placed_on<'p>(plan: &'p ProvisioningPlan, node: &str) -> &'p [String] {
    plan.existing
        .iter()
        .find(|e| e.node == node)
        .map_or(&[], |e| e.pods.as_slice())
}

fn allocatable_of(view: &[Node], node: &str) -> Resources {
    let n = view.iter().find(|n| n.metadata.name.as_deref() == Some(node)).unwrap();
    Resources::from_k8s(n.status.as_ref().unwrap().allocatable.as_ref().unwrap()).unwrap()
}

/// `Initialization.Reconcile` / `RequestedResourcesRegistered`: a node whose allocatable
/// lacks `nvidia.com/gpu` (or has it as 0) is not initialized; `StateNode.Allocatable`
/// then counts the instance type's GPUs. The node here is Ready and untainted: only the
/// missing resource keeps it starting.
#[test]
fn a_gpu_node_registered_before_its_device_plugin_takes_the_gpu_pods_and_no_node_is_planned() {
    for (instance_type, gpus) in [("g5.xlarge", 1), ("p4d.24xlarge", 8)] {
        let full = expected_allocatable(instance_type);
        assert_eq!(full.get("nvidia.com/gpu"), gpus, "{instance_type} in the catalog");
        for (how, reported) in [
            ("absent", without(&full, "nvidia.com/gpu")),
            ("zero", {
                let mut r = without(&full, "nvidia.com/gpu");
                r.extended.insert("nvidia.com/gpu".into(), 0);
                r
            }),
        ] {
            let node = carpool_node("gpu-1", "gpu", instance_type, START, &reported, true);
            let pods: Vec<Pod> = (0..gpus).map(|i| gpu_pod(&format!("train-{i}"))).collect();
            let s = snapshot(vec![nodepool("gpu", &["g", "p"])], vec![node], pods, vec![]);
            let (view, plan) = plan_at(&s, &[], START + 60_000);
            assert!(
                plan.nodes.is_empty(),
                "{instance_type}, GPU {how}: no second GPU node: {:?}",
                plan.nodes
            );
            assert_eq!(
                placed_on(&plan, "gpu-1").len(),
                gpus as usize,
                "{instance_type}, GPU {how}"
            );
            assert_eq!(allocatable_of(&view, "gpu-1").get("nvidia.com/gpu"), gpus);
        }
    }
}

/// Once `RequestedResourcesRegistered` holds (every resource reported, Ready, no taints),
/// the node is initialized and counts as it reports, even less than its type offers:
/// `StateNode.Allocatable` overrides only zero quantities.
#[test]
fn once_the_node_reports_its_gpus_it_counts_them_as_reported() {
    let full = expected_allocatable("p4d.24xlarge");
    for reported_gpus in [8, 7] {
        let reported = with(&full, "nvidia.com/gpu", reported_gpus);
        let node = carpool_node("gpu-1", "gpu", "p4d.24xlarge", START, &reported, true);
        let pods: Vec<Pod> = (0..8).map(|i| gpu_pod(&format!("train-{i}"))).collect();
        let s = snapshot(vec![nodepool("gpu", &["g", "p"])], vec![node.clone()], pods, vec![]);
        let (view, plan) = plan_at(&s, &[], START + 60_000);
        assert_eq!(view[0], node, "an initialized node is counted as it is");
        assert_eq!(placed_on(&plan, "gpu-1").len(), reported_gpus as usize);
        assert_eq!(
            plan.nodes.iter().map(|n| n.pods.len()).sum::<usize>(),
            8 - reported_gpus as usize,
            "the pods the reported GPUs cannot take get a new node"
        );
    }
}

/// Carpool's choice past the registration TTL: the node counts as it reports. A GPU that
/// never showed up is a broken node, not a starting one, and the pod gets a new node.
#[test]
fn gpus_still_absent_past_the_registration_ttl_stop_counting() {
    let reported = without(&expected_allocatable("g5.xlarge"), "nvidia.com/gpu");
    let node = carpool_node("gpu-1", "gpu", "g5.xlarge", START, &reported, true);
    let s = snapshot(
        vec![nodepool("gpu", &["g"])],
        vec![node],
        vec![gpu_pod("train-0")],
        vec![],
    );

    let (_, within) = plan_at(&s, &[], START + TTL_MS - 1);
    assert!(within.nodes.is_empty(), "within the TTL the GPU is counted");

    let (view, past) = plan_at(&s, &[], START + TTL_MS);
    assert_eq!(allocatable_of(&view, "gpu-1").get("nvidia.com/gpu"), 0);
    assert!(placed_on(&past, "gpu-1").is_empty());
    assert_eq!(past.nodes.len(), 1, "the GPU pod gets a new node");
}

fn daemonset(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "x",
                                          "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]}}}})
}

/// The pod of DaemonSet `ds` bound to `node`.
fn daemon_pod(ds: &str, node: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{ds}-{node}"), "namespace": "kube-system",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds, "uid": ds,
                                          "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                 "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

/// `Scheduler.calculateExistingNodeClaims` and `NewExistingNode`: the requests of the
/// DaemonSets that land on a starting node, less its `DaemonSetRequests` (the ones bound
/// there), are kept free. An m5.large offers 1930m; the DaemonSet takes 500m.
#[test]
fn an_unbound_daemonsets_requests_stay_free_on_a_starting_node() {
    let full = expected_allocatable("m5.large");
    assert_eq!(full.cpu_millis, 1930);
    let starting = carpool_node("m5-1", "general", "m5.large", START, &full, false);
    // Ready and reporting all it offers: initialized (pod ENIs are not awaited).
    let started = carpool_node(
        "m5-1",
        "general",
        "m5.large",
        START,
        &without(&full, "vpc.amazonaws.com/pod-eni"),
        true,
    );
    struct Case {
        what: &'static str,
        node: Node,
        daemonset: bool,
        bound: bool,
        pod_cpu: &'static str,
        fits: bool,
    }
    let cases = [
        Case {
            what: "no DaemonSet: 1500m fits in 1930m",
            node: starting.clone(),
            daemonset: false,
            bound: false,
            pod_cpu: "1500m",
            fits: true,
        },
        Case {
            what: "unbound DaemonSet: 1500m does not fit in 1930m - 500m",
            node: starting.clone(),
            daemonset: true,
            bound: false,
            pod_cpu: "1500m",
            fits: false,
        },
        Case {
            what: "bound DaemonSet counted once: 1200m fits in 1930m - 500m",
            node: starting.clone(),
            daemonset: true,
            bound: true,
            pod_cpu: "1200m",
            fits: true,
        },
        Case {
            what: "bound DaemonSet: 1500m does not fit in 1930m - 500m",
            node: starting,
            daemonset: true,
            bound: true,
            pod_cpu: "1500m",
            fits: false,
        },
        Case {
            what: "initialized node: no room kept, as before",
            node: started,
            daemonset: true,
            bound: false,
            pod_cpu: "1500m",
            fits: true,
        },
    ];
    for c in cases {
        let mut pods = vec![pending("web-0", json!({"cpu": c.pod_cpu, "memory": "1Gi"}))];
        if c.bound {
            pods.push(daemon_pod("logs", "m5-1", "500m"));
        }
        let daemonsets = if c.daemonset {
            vec![daemonset("logs", "500m")]
        } else {
            vec![]
        };
        let s = snapshot(vec![nodepool("general", &["m"])], vec![c.node], pods, daemonsets);
        let (_, plan) = plan_at(&s, &[], START + 60_000);
        assert_eq!(placed_on(&plan, "m5-1") == ["ml/web-0"], c.fits, "{}: {plan:?}", c.what);
        assert_eq!(
            plan.nodes.len(),
            usize::from(!c.fits),
            "{}: a new node when it does not fit",
            c.what
        );
    }
}

/// In-flight launches already keep the room: their synthetic node's allocatable is the
/// type's less the DaemonSets that land on it (as Karpenter's `NewNodeClaim` takes the
/// template's daemon overhead).
#[test]
fn an_in_flight_launch_keeps_room_for_its_daemonsets() {
    let launch = LaunchRecord {
        wave: None,
        release_by: None,
        id: "l-1".into(),
        instance_id: Some("i-1".into()),
        nodepool: "general".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        pods: vec![],
        launched_at: START,
        state: LaunchState::InFlight,
        reserved_for: None,
        labels: Default::default(),
        version: 1,
    };
    for (daemonsets, fits) in [(vec![], true), (vec![daemonset("logs", "500m")], false)] {
        let s = snapshot(
            vec![nodepool("general", &["m"])],
            vec![],
            vec![pending("web-0", json!({"cpu": "1500m", "memory": "1Gi"}))],
            daemonsets,
        );
        let (view, plan) = plan_at(&s, std::slice::from_ref(&launch), START + 60_000);
        let free = allocatable_of(&view, "in-flight-l-1").cpu_millis;
        assert_eq!(free, if fits { 1930 } else { 1430 });
        assert_eq!(plan.nodes.is_empty(), fits);
    }
}

/// A timer that registers, at its first sleep after a launch, the Node of every instance
/// the cloud launched, as the kubelet would: Ready, reporting all its type offers but the
/// GPUs, which the device plugin has not registered yet.
struct RegisteringTimer<'a> {
    clock: FakeClock,
    cloud: &'a FakeCloud,
    cluster: &'a FakeCluster,
}

impl Clock for RegisteringTimer<'_> {
    fn now(&self) -> SystemTime {
        self.clock.now()
    }
}

impl Timer for RegisteringTimer<'_> {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.clock.advance(duration);
        for i in self.cloud.instances() {
            let name = format!("ip-{}", i.id);
            if self.cluster.node(&name).is_none() {
                let now = self.clock.now().duration_since(SystemTime::UNIX_EPOCH).unwrap();
                let reported = without(&expected_allocatable(&i.instance_type), "nvidia.com/gpu");
                let mut node = carpool_node(
                    &name,
                    &i.nodepool,
                    &i.instance_type,
                    now.as_millis() as i64,
                    &reported,
                    true,
                );
                let labels = node.metadata.labels.as_mut().unwrap();
                labels.insert("topology.kubernetes.io/zone".into(), i.zone.clone());
                // What the kubelet registers with: the launch's labels (`--node-labels`),
                // its wave's among them.
                labels.extend(self.cloud.launch_request(&i.id).map(|r| r.labels).unwrap_or_default());
                node.spec.as_mut().unwrap().provider_id = Some(i.provider_id());
                self.cluster.add_node(node);
            }
        }
        Box::pin(std::future::ready(()))
    }
}

/// The fault, on the fakes: a GPU pod pending; the first batch launches one GPU node; the
/// Node registers without `nvidia.com/gpu` while the pod is still pending (nothing binds
/// it here); the batches that re-check the pod, and the next run, launch nothing more.
#[test]
fn a_gpu_node_that_registers_before_its_gpus_show_up_causes_no_second_launch() {
    let cloud = FakeCloud::new();
    let cluster = FakeCluster::new();
    let store = FakeStore::new();
    cloud.set_now(START);
    cluster.add_nodepool(nodepool("gpu", &["g"]));
    cluster.add_ec2nodeclass(nodeclass());
    cluster.add_pod(gpu_pod("train-0"));
    let timer = RegisteringTimer {
        clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_millis(START as u64)),
        cloud: &cloud,
        cluster: &cluster,
    };
    let settings = Settings {
        registration_ttl: Duration::from_millis(TTL_MS as u64),
        ..Settings::default()
    };
    let region = region();
    let launches = |cloud: &FakeCloud| cloud.calls().iter().filter(|c| c.starts_with("launch ")).count();

    let mut first = Provisioner::new(&cloud, &cluster, &store, &timer, settings.clone(), "run-1");
    let report = block_on(first.run(&region)).unwrap();
    assert_eq!(report.batches[0].launched.len(), 1, "one GPU node for the pod");
    let instances = cloud.instances();
    assert_eq!(instances.len(), 1);
    let node = cluster
        .node(&format!("ip-{}", instances[0].id))
        .expect("the node registered");
    let reported = node.status.unwrap().allocatable.unwrap();
    assert!(!reported.contains_key("nvidia.com/gpu"), "registered without its GPUs");
    assert!(cluster.pod("ml", "train-0").is_some(), "the pod is still pending");
    assert!(
        report.batches.len() >= 3,
        "the pod was re-checked after the node registered: {} batches",
        report.batches.len()
    );
    assert!(
        report.batches[1..]
            .iter()
            .all(|b| b.launched.is_empty() && b.pods_planned == 1)
    );

    let mut second = Provisioner::new(&cloud, &cluster, &store, &timer, settings, "run-2");
    let report = block_on(second.run(&region)).unwrap();
    assert!(
        report
            .batches
            .iter()
            .all(|b| b.launched.is_empty() && b.pods_planned == 1)
    );
    assert_eq!(launches(&cloud), 1, "FakeCloud saw exactly one launch");
    assert_eq!(cloud.instances().len(), 1);
    let records = block_on(store.list_launches()).unwrap();
    assert_eq!(records.len(), 1);
}
