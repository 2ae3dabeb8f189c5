//! The consolidator's run over the in-memory ports: an empty node is deleted; three
//! under-used nodes give way to one cheaper replacement once it is Ready; crashes after
//! the taint and after the replacement's launch are resumed (or rolled back) by the next
//! run without launching twice; a failed replacement is rolled back; and a cluster left
//! alone for 30 minutes after consolidating is not disrupted again.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::disruption::drift::HASH_VERSION;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, PodBuilder};
use carpool::model::CapacityType;
use carpool::model::pod::Pod;
use carpool::model::well_known as wk;
use carpool::ports::{Clock, DisruptionStep, Instance, InstanceNetwork, InstanceState, StateStore};
use carpool::run::consolidate::{ConsolidationReport, ConsolidationSettings, Consolidator};
use carpool::run::provision::Settings;
use k8s_openapi::api::core::v1::Node;
use pollster::block_on;
use serde_json::json;

const START: u64 = 1_790_000_000;
const DEPLOYMENT: &str = "carpool-test";

fn start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(START)
}

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t).unwrap().to_string()
}

/// The NodePool `general` of m5 instances of `capacity` types, on the class `default`,
/// with `consolidateAfter` and one budget of `nodes`.
fn general_pool(capacity: &[&str], consolidate_after: &str, nodes: &str) -> serde_json::Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity},
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}]}},
            "disruption": {"consolidateAfter": consolidate_after, "budgets": [{"nodes": nodes}]}}})
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

fn settings() -> ConsolidationSettings {
    ConsolidationSettings {
        provision: Settings {
            deployment: DEPLOYMENT.into(),
            ..Settings::default()
        },
        ..ConsolidationSettings::default()
    }
}

impl World {
    /// An on-demand m5 NodePool whose budget allows every node, and no node yet.
    fn new() -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(start()),
        };
        w.cloud.set_now(START as i64 * 1000);
        w.cluster.add_nodepool(general_pool(&["on-demand"], "0s", "100%"));
        w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
        w
    }

    /// A Ready m5.xlarge node `name`, its instance `i-<name>`, launched an hour ago.
    fn node(&self, name: &str) {
        let id = format!("i-{name}");
        self.cloud.add_instance(Instance {
            id: id.clone(),
            instance_type: "m5.xlarge".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            nodepool: "general".into(),
            launch_id: format!("run-{name}"),
            deployment: Some(DEPLOYMENT.into()),
            state: InstanceState::Running,
            launched_at: Some(START as i64 * 1000 - 3_600_000),
            // Where the fake cloud's default class puts it.
            network: InstanceNetwork {
                subnet: Some("subnet-us-east-1a".into()),
                security_groups: vec![carpool::fakes::DEFAULT_SECURITY_GROUP.into()],
            },
        });
        self.add_node(name, &format!("aws:///us-east-1a/{id}"), "m5.xlarge");
    }

    fn add_node(&self, name: &str, provider_id: &str, instance_type: &str) {
        let ago = rfc3339(start() - Duration::from_secs(3600));
        let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "creationTimestamp": ago, "labels": {
                "kubernetes.io/hostname": name, "karpenter.sh/nodepool": "general", "carpool.sh/managed": "true",
                "node.kubernetes.io/instance-type": instance_type, "topology.kubernetes.io/zone": "us-east-1a",
                "karpenter.sh/capacity-type": "on-demand", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}},
            "spec": {"providerID": provider_id},
            "status": {"allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"},
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ago}]}}))
        .unwrap();
        self.cluster.add_node(node);
    }

    /// A running `web` pod of 1 CPU on `node`.
    fn pod(&self, name: &str, node: &str) {
        self.pod_of(name, node, "1", "2Gi");
    }

    /// A running `web` pod of `cpu` and `memory` on `node`.
    fn pod_of(&self, name: &str, node: &str, cpu: &str, memory: &str) {
        let pod: Pod = PodBuilder::new(name)
            .namespace("shop")
            .uid(name)
            .label("app", "web")
            .requests(cpu, memory)
            .owner("apps/v1", "ReplicaSet", "web-rs")
            .spec("nodeName", json!(node))
            .created(&rfc3339(start() - Duration::from_secs(3600)))
            .running()
            .pod()
            .unwrap();
        self.cluster.add_pod(pod);
    }

    fn daemon_pod(&self, name: &str, node: &str) {
        let pod: Pod = PodBuilder::new(name)
            .namespace("kube-system")
            .requests("100m", "128Mi")
            .owner("apps/v1", "DaemonSet", "aws-node")
            .spec("nodeName", json!(node))
            .running()
            .pod()
            .unwrap();
        self.cluster.add_pod(pod);
    }

    fn run(&self, owner: &str) -> Result<ConsolidationReport, String> {
        self.run_with(owner, settings())
    }

    fn run_with(&self, owner: &str, settings: ConsolidationSettings) -> Result<ConsolidationReport, String> {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let c = Consolidator::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, owner);
        let until = self.clock.now() + Duration::from_secs(240);
        block_on(c.run(&region, until)).map_err(|e| carpool::error_chain::Chain(&e).to_string())
    }

    /// Instances launched by Carpool's consolidations (their launch ids say so).
    fn replacements(&self) -> Vec<Instance> {
        self.cloud
            .instances()
            .into_iter()
            .filter(|i| i.launch_id.starts_with("disrupt-"))
            .collect()
    }

    /// Registers every replacement as a Ready Node.
    fn register_replacements(&self) {
        for i in self.replacements() {
            let name = format!("node-{}", i.id);
            if self.cluster.node(&name).is_none() {
                self.add_node(&name, &i.provider_id(), &i.instance_type);
            }
        }
    }

    fn terminated(&self, id: &str) -> bool {
        self.cloud
            .instances()
            .iter()
            .any(|i| i.id == id && i.state == InstanceState::Terminated)
    }

    fn tainted(&self, node: &str) -> bool {
        self.cluster.node(node).is_some_and(|n| {
            n.spec
                .and_then(|s| s.taints)
                .is_some_and(|ts| ts.iter().any(|t| t.key == "carpool.sh/disrupted"))
        })
    }

    fn disruptions(&self) -> Vec<carpool::ports::DisruptionRecord> {
        block_on(self.store.list_disruptions()).unwrap()
    }

    /// The next run after a crash: the store answers again, and the crashed run's lease
    /// has lapsed.
    fn after_crash(&self) {
        self.store.revive();
        self.clock.advance(Duration::from_secs(600));
    }
}

/// A PDB that lets no `web` pod go (minAvailable 3 of 3).
fn pdb_holding_every_web_pod(w: &World) {
    w.cluster.add_pdb(
        carpool::fixtures::pdb(
            "shop",
            "web",
            json!({"matchLabels": {"app": "web"}}),
            json!({"minAvailable": 3}),
        )
        .unwrap(),
    );
}

/// Three m5.xlarge nodes, each with one `web` pod of 500m and 1 GiB: together they fit
/// one m5.large, cheaper than each (a merge onto a removed node's own type would be
/// refused, as Karpenter's `filterOutSameInstanceType` refuses it).
fn three_underused() -> World {
    let w = World::new();
    for n in ["a", "b", "c"] {
        w.node(n);
        w.pod_of(&format!("web-{n}"), n, "500m", "1Gi");
        w.daemon_pod(&format!("aws-node-{n}"), n);
    }
    w
}

#[test]
fn an_empty_node_is_drained_terminated_and_deleted_in_one_run() {
    let w = World::new();
    w.node("empty");
    w.daemon_pod("aws-node-1", "empty");
    w.node("busy");
    w.pod("web-1", "busy");
    w.pod("web-2", "busy");
    w.pod("web-3", "busy");
    let r = w.run("run-1").unwrap();
    assert_eq!(r.command.as_ref().unwrap().nodes, vec!["empty".to_string()], "{r:#?}");
    assert!(w.terminated("i-empty"));
    assert!(w.cluster.node("empty").is_none(), "the Node is deleted");
    assert!(w.disruptions().is_empty(), "and its record");
    assert_eq!(r.nodes_consolidated, 1);
    assert!(!w.terminated("i-busy"));
}

#[test]
fn three_underused_nodes_move_onto_one_cheaper_replacement_once_it_is_ready() {
    let w = three_underused();
    let r = w.run("run-1").unwrap();
    let cmd = r.command.clone().expect("a command");
    assert_eq!(cmd.nodes.len(), 3, "{r:#?}");
    assert_eq!(w.replacements().len(), 1);
    for n in ["a", "b", "c"] {
        assert!(w.tainted(n));
    }
    assert_eq!(r.evicted, 0, "nothing is evicted before the replacement is Ready");
    assert!(
        w.disruptions()
            .iter()
            .all(|d| d.step == DisruptionStep::ReplacementLaunched)
    );

    // Not Ready yet: the next run waits, and starts nothing else.
    w.clock.advance(Duration::from_secs(300));
    let r = w.run("run-2").unwrap();
    assert!(r.command.is_none() && r.evicted == 0, "{r:#?}");

    w.register_replacements();
    w.clock.advance(Duration::from_secs(300));
    let r = w.run("run-3").unwrap();
    assert_eq!(r.evicted, 3, "{r:#?}");
    for n in ["a", "b", "c"] {
        assert!(w.terminated(&format!("i-{n}")));
        assert!(w.cluster.node(n).is_none());
    }
    assert!(w.disruptions().is_empty());
    assert_eq!(w.replacements().len(), 1, "launched once");
}

#[test]
fn a_crash_after_the_taint_is_rolled_back_and_the_next_run_starts_afresh() {
    let w = three_underused();
    w.store.crash_at("create LAUNCH#");
    assert!(w.run("run-1").is_err(), "the run died at the launch record");
    w.after_crash();
    assert!(w.tainted("a"), "it had tainted its nodes");
    assert!(w.replacements().is_empty(), "and launched nothing");

    let r = w.run("run-2").unwrap();
    assert_eq!(r.rolled_back.len(), 1, "{r:#?}");
    assert!(r.rolled_back[0].reason.contains("before its replacement was launched"));
    // Then it decided again and started the same consolidation, launching once.
    assert_eq!(w.replacements().len(), 1);
    assert_eq!(w.disruptions().len(), 3);
}

#[test]
fn a_crash_after_the_replacement_launch_is_resumed_without_launching_twice() {
    let w = three_underused();
    w.store.crash_at("update DISRUPT#");
    assert!(w.run("run-1").is_err());
    w.after_crash();
    assert_eq!(w.replacements().len(), 1, "the replacement was launched");
    assert!(w.disruptions().iter().all(|d| d.step == DisruptionStep::Tainted));

    w.register_replacements();
    let r = w.run("run-2").unwrap();
    assert!(r.rolled_back.is_empty(), "{r:#?}");
    assert_eq!(r.evicted, 3, "{r:#?}");
    assert_eq!(w.replacements().len(), 1, "never launched twice");
    assert!(w.disruptions().is_empty());
}

#[test]
fn a_replacement_that_cannot_launch_is_rolled_back_and_the_nodes_untainted() {
    let w = three_underused();
    // EC2 has no m5 on-demand capacity in the zone (the catalog does not know it yet).
    for t in [
        "m5.large",
        "m5.xlarge",
        "m5.2xlarge",
        "m5.4xlarge",
        "m5.8xlarge",
        "m5.12xlarge",
        "m5.16xlarge",
        "m5.24xlarge",
        "m5.metal",
    ] {
        for z in ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"] {
            w.cloud.exhaust(carpool::ports::OfferingKey {
                instance_type: t.into(),
                zone: z.into(),
                capacity_type: CapacityType::OnDemand,
            });
        }
    }
    let r = w.run("run-1").unwrap();
    assert_eq!(r.rolled_back.len(), 1, "{r:#?}");
    assert!(r.rolled_back[0].reason.contains("replacement launch failed"));
    for n in ["a", "b", "c"] {
        assert!(!w.tainted(n), "{n} untainted");
        assert!(!w.terminated(&format!("i-{n}")));
    }
    assert!(w.disruptions().is_empty());
}

#[test]
fn thirty_quiet_minutes_after_consolidating_disrupt_nothing_more() {
    let w = three_underused();
    w.run("run-1").unwrap();
    w.register_replacements();
    w.clock.advance(Duration::from_secs(300));
    w.run("run-2").unwrap();
    assert!(w.disruptions().is_empty());
    // The ReplicaSet's pods come back on the replacement.
    let node = format!("node-{}", w.replacements()[0].id);
    for n in ["a", "b", "c"] {
        w.pod(&format!("web-{n}-r"), &node);
    }
    for i in 0..6 {
        w.clock.advance(Duration::from_secs(300));
        let r = w.run(&format!("steady-{i}")).unwrap();
        assert!(r.command.is_none(), "minute {}: {r:#?}", (i + 1) * 5);
    }
    assert!(!w.tainted(&node));
    assert_eq!(w.replacements().len(), 1);
}

/// An on-demand node of a pool that allows spot and on-demand, running 3 `web` pods.
fn on_demand_fallback() -> World {
    let w = World::new();
    w.cluster
        .add_nodepool(general_pool(&["spot", "on-demand"], "0s", "100%"));
    w.node("od");
    for k in 0..3 {
        w.pod(&format!("web-{k}"), "od");
    }
    w
}

/// Marks every m5 spot offering unavailable until `until`: out of capacity, or reclaimed.
fn mark_m5_spot(w: &World, until: i64, reclaimed: bool) {
    for t in [
        "m5.large",
        "m5.xlarge",
        "m5.2xlarge",
        "m5.4xlarge",
        "m5.8xlarge",
        "m5.12xlarge",
        "m5.16xlarge",
        "m5.24xlarge",
        "m5.metal",
    ] {
        for z in [
            "us-east-1a",
            "us-east-1b",
            "us-east-1c",
            "us-east-1d",
            "us-east-1e",
            "us-east-1f",
        ] {
            block_on(w.store.mark_unavailable(&carpool::ports::UnavailableOffering {
                instance_type: t.into(),
                zone: z.into(),
                capacity_type: CapacityType::Spot,
                until,
                reclaimed,
            }))
            .unwrap();
        }
    }
}

/// aws/karpenter-provider-aws #3480 and #7832: a node on-demand only because spot ran out
/// goes back to spot once the provisioner's `ICE#` records for spot have lapsed.
#[test]
fn an_on_demand_fallback_returns_to_spot_once_the_spot_offerings_are_available_again() {
    let w = on_demand_fallback();
    // Spot of every m5 type ran out in every zone a minute ago (what the provisioner records
    // on a capacity error, for 3 minutes).
    mark_m5_spot(
        &w,
        carpool::ports::epoch_millis(start() + Duration::from_secs(120)),
        false,
    );
    let r = w.run("run-1").unwrap();
    assert!(r.command.is_none(), "spot is still out of capacity: {r:#?}");

    w.clock.advance(Duration::from_secs(300));
    let r = w.run("run-2").unwrap();
    let cmd = r.command.expect("back to spot");
    assert_eq!(cmd.method, carpool::decide::disruption::Method::ReturnToSpot);
    let launched = w.replacements();
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0].capacity_type, CapacityType::Spot);
}

/// Issue 27, item 8: after a spot interruption, returning to spot avoids the offerings
/// just reclaimed for an hour (`RECLAIMED_FOR`), long after their 3-minute capacity
/// record (Karpenter's unavailable-offerings TTL, `UnavailableOfferingsTTL`) has lapsed,
/// so that one interruption does not cause two moves.
#[test]
fn returning_to_spot_avoids_the_offerings_just_reclaimed_for_an_hour() {
    let w = on_demand_fallback();
    mark_m5_spot(
        &w,
        carpool::ports::epoch_millis(start() + Duration::from_secs(180)),
        false,
    );
    mark_m5_spot(
        &w,
        carpool::ports::epoch_millis(start() + Duration::from_secs(3600)),
        true,
    );
    w.clock.advance(Duration::from_secs(300));
    let r = w.run("run-1").unwrap();
    assert!(r.command.is_none(), "5 minutes after the reclaim: {r:#?}");

    w.clock.advance(Duration::from_secs(3600));
    let r = w.run("run-2").unwrap();
    assert_eq!(
        r.command.expect("back to spot").method,
        carpool::decide::disruption::Method::ReturnToSpot
    );
}

/// The provisioner's housekeeping marks a launch failed when its instance is gone or never
/// registers: a consolidation waiting on it is rolled back, and the run decides afresh,
/// launching under new ids (never colliding with the failed attempt's records).
#[test]
fn a_replacement_that_fails_to_come_up_is_rolled_back_and_started_afresh() {
    let w = three_underused();
    w.run("run-1").unwrap();
    assert_eq!(w.disruptions().len(), 3);
    for mut launch in block_on(w.store.list_launches()).unwrap() {
        if launch.id.starts_with("disrupt-") {
            launch.state = carpool::ports::LaunchState::Failed {
                reason: "the instance never registered".into(),
            };
            block_on(w.store.update_launch(&launch)).unwrap();
        }
    }
    w.clock.advance(Duration::from_secs(300));
    let r = w.run("run-2").unwrap();
    assert_eq!(r.rolled_back.len(), 1, "{r:#?}");
    assert!(r.rolled_back[0].reason.contains("failed to come up"));
    assert!(r.command.is_some(), "decided afresh: {r:#?}");
    assert_eq!(w.replacements().len(), 2, "a second replacement, under new ids");
    for n in ["a", "b", "c"] {
        assert!(!w.terminated(&format!("i-{n}")));
    }
}

/// A drain a PDB keeps blocked is rolled back once it has lasted the drain limit, and the
/// nodes are kept, untainted.
#[test]
fn a_drain_blocked_past_the_limit_is_rolled_back() {
    let w = three_underused();
    w.run("run-1").unwrap();
    // After the decision, a PDB that allows no pod of web to go.
    pdb_holding_every_web_pod(&w);
    w.register_replacements();
    w.clock.advance(Duration::from_secs(60));
    let r = w.run("run-2").unwrap();
    assert!(r.rolled_back.is_empty() && r.evicted == 0, "{r:#?}");
    assert!(!r.blocked.is_empty(), "the drain says what blocks it: {r:#?}");
    w.clock.advance(Duration::from_secs(16 * 60));
    let r = w.run("run-3").unwrap();
    assert_eq!(r.rolled_back.len(), 1, "{r:#?}");
    assert!(r.rolled_back[0].reason.contains("did not finish"));
    for n in ["a", "b", "c"] {
        assert!(!w.tainted(n), "{n} untainted");
        let node = w.cluster.node(n).unwrap();
        // The load balancers' label set when its drain began is gone, and the stall is
        // remembered on the node, so that the next runs do not pick it again at once.
        let labels = node.metadata.labels.unwrap_or_default();
        assert!(!labels.contains_key(wk::EXCLUDE_BALANCERS), "{n}: {labels:?}");
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert!(annotations.contains_key(wk::STALLED_UNTIL), "{n}: {annotations:?}");
    }
    assert!(w.disruptions().is_empty());
}

/// While a drain is under way its node carries
/// `node.kubernetes.io/exclude-from-external-load-balancers`, as Karpenter's
/// `Terminator.Taint` sets it before draining
/// (`pkg/controllers/node/termination/terminator/terminator.go`).
#[test]
fn a_node_being_drained_is_taken_out_of_the_load_balancers() {
    let w = three_underused();
    w.run("run-1").unwrap();
    pdb_holding_every_web_pod(&w);
    w.register_replacements();
    w.clock.advance(Duration::from_secs(60));
    w.run("run-2").unwrap();
    for n in ["a", "b", "c"] {
        let labels = w.cluster.node(n).unwrap().metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(wk::EXCLUDE_BALANCERS).map(String::as_str),
            Some(wk::EXCLUDE_BALANCERS_VALUE),
            "{n}: {labels:?}"
        );
    }
}

// Karpenter disrupts only the nodes it has a NodeClaim of (`pkg/controllers/state/
// statenode.go`, `StateNode.Managed`); Carpool, only the nodes whose instance carries its
// launch-id and this deployment's tags, the rule of housekeeping and the interruption
// function (`decide::housekeeping::ownership::launched_by`). Beside Karpenter, with the
// default selector, Karpenter's NodePool name is one Carpool reads too.
#[test]
fn a_karpenter_node_beside_carpools_is_never_selected_even_when_empty() {
    let w = three_underused();
    // Karpenter's node: labelled with a NodePool Carpool reads, empty, and its instance
    // carries none of Carpool's tags.
    w.cloud.add_instance(Instance {
        id: "i-karpenter".into(),
        instance_type: "m5.xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        nodepool: "general".into(),
        launch_id: String::new(),
        deployment: None,
        state: InstanceState::Running,
        launched_at: Some(START as i64 * 1000 - 3_600_000),
        network: Default::default(),
    });
    w.add_node("karpenter-node", "aws:///us-east-1a/i-karpenter", "m5.xlarge");
    let mut node = w.cluster.node("karpenter-node").unwrap();
    node.metadata.labels.as_mut().unwrap().remove("carpool.sh/managed");
    w.cluster.add_node(node);
    w.daemon_pod("aws-node-k", "karpenter-node");

    let mut consolidated = Vec::new();
    for run in 1..=6 {
        let r = w.run(&format!("run-{run}")).unwrap();
        if let Some(cmd) = &r.command {
            assert!(!cmd.nodes.contains(&"karpenter-node".to_string()), "{r:#?}");
            consolidated.extend(cmd.nodes.clone());
        }
        assert!(!w.tainted("karpenter-node"), "run {run}");
        assert!(w.disruptions().iter().all(|d| d.instance_id != "i-karpenter"));
        w.register_replacements();
        w.clock.advance(Duration::from_secs(300));
    }
    assert!(
        !consolidated.is_empty(),
        "Carpool's own under-used nodes are consolidated"
    );
    assert!(!w.terminated("i-karpenter"));
    assert!(w.cluster.node("karpenter-node").is_some());
}

#[test]
fn in_dry_run_the_consolidator_reports_its_command_and_changes_nothing() {
    let w = three_underused();
    let mut dry = settings();
    dry.provision.dry_run = true;
    let instances_before = w.cloud.instances();
    for run in 1..=3 {
        let r = w.run_with(&format!("dry-{run}"), dry.clone()).unwrap();
        let cmd = r.command.as_ref().expect("the command it would run");
        assert!(!cmd.nodes.is_empty(), "{r:#?}");
        for n in ["a", "b", "c"] {
            assert!(!w.tainted(n), "run {run}: {n} tainted");
        }
        assert!(w.disruptions().is_empty(), "run {run}: a record was written");
        assert_eq!(
            w.cloud.instances(),
            instances_before,
            "run {run}: launched or terminated"
        );
        assert!(
            !w.cluster
                .calls()
                .iter()
                .any(|c| c.starts_with("evict") || c.starts_with("delete")),
            "{:?}",
            w.cluster.calls()
        );
        w.clock.advance(Duration::from_secs(300));
    }
    // The real run that follows starts the same consolidation.
    let r = w.run("real").unwrap();
    assert!(r.command.is_some());
    assert!(!w.disruptions().is_empty() || w.cloud.instances() != instances_before);
}

/// `consolidateAfter` counts from the last pod event, a pod leaving included, as
/// Karpenter's `lastPodEventTime` (kubernetes-sigs/karpenter
/// `pkg/controllers/nodeclaim/podevents/controller.go`, `Controller.Reconcile`: a pod
/// terminating is an event at the time it is seen so). The node's last pod began to
/// leave at 0 s: at 30 s, under `consolidateAfter: 1m`, the node is no candidate; at
/// 70 s, the pod gone, it is deleted.
#[test]
fn a_node_whose_last_pod_left_thirty_seconds_ago_waits_for_consolidate_after() {
    let w = World::new();
    w.cluster.add_nodepool(general_pool(&["on-demand"], "1m", "100%"));
    w.node("a");
    w.pod_of("web-a", "a", "3", "8Gi");
    let r = w.run("run-1").unwrap();
    assert!(r.command.is_none(), "{r:#?}");
    let recorded = w.cluster.node("a").unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(
        recorded.get(wk::PODS_ANNOTATION).map(String::as_str),
        Some("web-a"),
        "{recorded:?}"
    );

    // Its pod is deleted now, with a 60-s grace period.
    let mut leaving = w.cluster.pod("shop", "web-a").unwrap();
    leaving.metadata.deletion_timestamp = Some(carpool::model::time::kube_time(start() + Duration::from_secs(60)));
    leaving.metadata.deletion_grace_period_seconds = Some(60);
    w.cluster.add_pod(leaving);

    w.clock.advance(Duration::from_secs(30));
    let r = w.run("run-2").unwrap();
    assert!(r.command.is_none(), "30 s after its last pod began to leave: {r:#?}");
    assert!(w.cluster.node("a").is_some());
    let recorded = w.cluster.node("a").unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(
        recorded.get(wk::LAST_POD_EVENT_ANNOTATION),
        Some(&rfc3339(start())),
        "the event is the start of the pod's termination: {recorded:?}"
    );

    w.cluster.remove_pod("shop", "web-a");
    w.clock.advance(Duration::from_secs(40));
    let r = w.run("run-3").unwrap();
    let cmd = r.command.expect("70 s on, the empty node goes");
    assert_eq!(cmd.nodes, vec!["a".to_string()]);
    assert!(w.terminated("i-a"));
}

/// Issue 27, item 9: the consolidator plans no replacement in a NodePool held back by
/// launch backoff (the provisioner's rule, `decide::provisioning::backoff::hold_back`):
/// the three under-used nodes are merged onto one of them, and nothing is launched.
#[test]
fn no_replacement_is_planned_in_a_nodepool_held_back_by_launch_backoff() {
    let w = three_underused();
    block_on(w.store.create_backoff(&carpool::ports::Backoff {
        nodepool: "general".into(),
        node_class: "default".into(),
        failures: 3,
        registration_failures: 0,
        windows: 1,
        reason: carpool::ports::FailureReason::Launch {
            error: "InvalidParameterValue".into(),
        },
        until: carpool::ports::epoch_millis(start() + Duration::from_secs(600)),
        version: 0,
    }))
    .unwrap();
    let r = w.run("run-1").unwrap();
    let cmd = r.command.expect("the nodes are merged onto one of them");
    assert!(cmd.replacements.is_empty(), "{cmd:#?}");
    assert!(w.replacements().is_empty(), "nothing launched in a held-back pool");
}

/// Issue 27, item 9: an interruption's replacement, empty while the evicted pods are on
/// their way, is not removed before that drain is done. Carpool's own rule: Karpenter's
/// interruption controller launches no replacement ahead (its provisioner reacts once
/// the evicted pods are pending), so it has no such node to protect.
#[test]
fn an_interruptions_replacement_is_not_removed_while_its_drain_goes_on() {
    let w = World::new();
    w.node("busy");
    w.pod_of("web-0", "busy", "3", "8Gi");
    w.node("replacement");
    let mut launch = carpool::fixtures::launch_record(
        "disrupt-i-spot-0",
        Some("i-replacement"),
        carpool::ports::epoch_millis(start()),
        CapacityType::OnDemand,
    );
    launch.state = carpool::ports::LaunchState::Registered {
        node: "replacement".into(),
    };
    block_on(w.store.create_launch(&launch)).unwrap();
    block_on(w.store.create_disruption(&carpool::ports::DisruptionRecord {
        instance_id: "i-spot".into(),
        node: "spot-node".into(),
        reason: "spot-interruption".into(),
        step: carpool::ports::DisruptionStep::Draining,
        replacements: vec!["disrupt-i-spot-0".into()],
        started_at: carpool::ports::epoch_millis(start()),
        updated_at: carpool::ports::epoch_millis(start()),
        event_id: "e-1".into(),
        nodepool: Some("general".into()),
        drain_deadline: carpool::ports::epoch_millis(start() + Duration::from_secs(90)),
        terminate_by: None,
        hard_deadline: true,
        wait_for_replacement: false,
        burst: None,
        evicted: Vec::new(),
        held_by: Some("another-invocation".into()),
        held_until: carpool::ports::epoch_millis(start() + Duration::from_secs(20)),
        version: 0,
    }))
    .unwrap();
    let r = w.run("run-1").unwrap();
    assert!(
        r.command
            .as_ref()
            .is_none_or(|c| !c.nodes.contains(&"replacement".to_string())),
        "{r:#?}"
    );
    assert!(!w.terminated("i-replacement"));
}

/// Issue 27, item 11: drift is not one node per run. Eight drifted nodes under a
/// `Drifted` budget of 4: one run starts four replacements at once, and the next starts
/// none while they are in flight (the budget counts them). Karpenter's disruption queue
/// runs its commands at once too (`pkg/controllers/disruption/orchestration/queue.go`),
/// each within `NodePool.GetAllowedDisruptionsByReason`.
#[test]
fn drift_of_many_nodes_starts_as_many_replacements_as_the_budget_allows_in_one_run() {
    let w = World::new();
    w.cluster.add_nodepool(general_pool(&["on-demand"], "0s", "4"));
    for i in 0..8 {
        let name = format!("n{i}");
        w.node(&name);
        w.pod_of(&format!("web-{i}"), &name, "3", "8Gi");
        let mut node = w.cluster.node(&name).unwrap();
        let labels = node.metadata.labels.get_or_insert_default();
        labels.insert(wk::NODEPOOL_HASH.into(), "launched-from-an-older-template".into());
        labels.insert(wk::NODEPOOL_HASH_VERSION.into(), HASH_VERSION.into());
        w.cluster.add_node(node);
    }
    let r = w.run("run-1").unwrap();
    let methods: Vec<_> = r.commands.iter().map(|c| c.method).collect();
    assert_eq!(methods, vec![carpool::decide::disruption::Method::Drift; 4], "{r:#?}");
    assert_eq!(w.disruptions().len(), 4);
    assert_eq!(w.replacements().len(), 4);
    let tainted = (0..8).filter(|i| w.tainted(&format!("n{i}"))).count();
    assert_eq!(tainted, 4);

    w.clock.advance(Duration::from_secs(60));
    let r = w.run("run-2").unwrap();
    assert!(
        r.commands.is_empty(),
        "the budget is used by the four in flight: {r:#?}"
    );
    assert_eq!(w.replacements().len(), 4);
}

/// Issue 28: what the class's security group selector selects is drift, not only its AMI.
/// A node launched with the class's group `sg-fake` is left alone while the selector still
/// selects exactly that; once the groups are re-tagged so that it selects `sg-new`, the
/// node is drifted and replaced, and the replacement carries `sg-new`. Karpenter's
/// `CloudProvider.areSecurityGroupsDrifted` (aws/karpenter-provider-aws
/// `pkg/cloudprovider/drift.go`) compares the instance's set with the class's.
#[test]
fn a_node_whose_security_groups_its_class_no_longer_selects_is_drifted_and_replaced() {
    let w = World::new();
    w.node("n1");
    w.pod_of("web-1", "n1", "3", "8Gi");
    let r = w.run("run-1").unwrap();
    assert!(r.commands.is_empty(), "nothing drifted yet: {r:#?}");

    w.cloud.set_security_groups("default", &["sg-new"]);
    let r = w.run("run-2").unwrap();
    let drift: Vec<_> = r
        .commands
        .iter()
        .filter(|c| c.method == carpool::decide::disruption::Method::Drift)
        .collect();
    assert_eq!(drift.len(), 1, "{r:#?}");
    assert_eq!(drift[0].nodes, vec!["n1".to_string()]);
    let replacements = w.replacements();
    assert_eq!(replacements.len(), 1);
    assert_eq!(replacements[0].network.security_groups, vec!["sg-new".to_string()]);
}

/// Issue 28: a node in a subnet its class no longer selects is drifted (Karpenter's
/// `CloudProvider.isSubnetDrifted`); a class that still selects it leaves the node alone
/// even when it selects more subnets.
#[test]
fn a_node_in_a_subnet_its_class_no_longer_selects_is_drifted() {
    let w = World::new();
    w.node("n1");
    w.pod_of("web-1", "n1", "3", "8Gi");
    w.cloud.set_subnet("default", "us-east-1b", "subnet-extra");
    let r = w.run("run-1").unwrap();
    assert!(r.commands.is_empty(), "its subnet is still selected: {r:#?}");

    w.cloud.set_subnet("default", "us-east-1a", "subnet-replacing-it");
    let r = w.run("run-2").unwrap();
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    assert_eq!(r.commands[0].method, carpool::decide::disruption::Method::Drift);
    assert_eq!(r.commands[0].nodes, vec!["n1".to_string()]);
}

/// Issue 28: a class whose security group selector matches nothing is the class's error:
/// its NodePools are left out of the decision (their nodes are not candidates, nothing is
/// planned on them), as a class that cannot be resolved is; nothing is drifted for it.
#[test]
fn a_class_whose_security_group_selector_matches_nothing_drifts_nothing() {
    let w = World::new();
    w.node("n1");
    w.pod_of("web-1", "n1", "3", "8Gi");
    w.cloud.set_security_groups("default", &[]);
    let r = w.run("run-1").unwrap();
    assert!(r.commands.is_empty(), "{r:#?}");
    assert!(w.replacements().is_empty());
}

/// Issue 28: a node launched before drift hashes had versions is not drifted by the new
/// hash: the consolidator gives it the current hash and version (as Karpenter's hash
/// controller re-annotates a NodeClaim of an older hash version), and only a change made
/// after that drifts it.
#[test]
fn a_node_with_an_unversioned_hash_is_rebaselined_and_drifts_only_on_a_later_change() {
    let w = World::new();
    w.node("n1");
    w.pod_of("web-1", "n1", "3", "8Gi");
    let mut node = w.cluster.node("n1").unwrap();
    node.metadata
        .labels
        .get_or_insert_default()
        .insert(wk::NODEPOOL_HASH.into(), "hashed-by-an-older-carpool".into());
    w.cluster.add_node(node);

    let r = w.run("run-1").unwrap();
    assert!(r.commands.is_empty(), "{r:#?}");
    let labels = w.cluster.node("n1").unwrap().metadata.labels.unwrap();
    assert_eq!(
        labels.get(wk::NODEPOOL_HASH_VERSION).map(String::as_str),
        Some(HASH_VERSION)
    );
    assert_ne!(
        labels.get(wk::NODEPOOL_HASH).map(String::as_str),
        Some("hashed-by-an-older-carpool")
    );

    w.clock.advance(Duration::from_secs(60));
    let r = w.run("run-2").unwrap();
    assert!(r.commands.is_empty(), "nothing changed since: {r:#?}");

    // The class's tags change: that is drift.
    let mut class = EC2NodeClassBuilder::standard().build();
    class["spec"]["tags"] = json!({"team": "checkout"});
    w.cluster.add_ec2nodeclass(class);
    w.clock.advance(Duration::from_secs(60));
    let r = w.run("run-3").unwrap();
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    assert_eq!(r.commands[0].method, carpool::decide::disruption::Method::Drift);
}
