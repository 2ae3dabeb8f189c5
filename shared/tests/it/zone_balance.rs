//! Issue 30, zones kept in balance (Carpool's own `carpool.sh/zone-balance`; Karpenter has
//! no answer to aws/karpenter-provider-aws #7311): new nodes go to the zone where the pool
//! has the fewest, within a price tolerance; a zone whose subnets lack the addresses for a
//! node's pods gets none, and the plan says why; consolidation keeps the balance.
//!
//! The addresses follow Karpenter's `ZonalSubnetsForLaunch`
//! (aws/karpenter-provider-aws `pkg/providers/subnet/subnet.go`), which takes each zone's
//! subnet with the most free addresses and counts what its launches will use.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::disruption::{BlockKind, DisruptionInput, DisruptionSettings, decide};
use carpool::decide::provisioning_plan;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known as wk;
use carpool::ports::Cloud;
use carpool::run::provision::{Provisioner, RunReport, Settings};
use carpool::snapshot::Snapshot;
use pollster::block_on;
use serde_json::{Value, json};

use crate::support::region;

const START: u64 = 1_790_000_000;
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// An on-demand pool of m5.xlarge only (one price in every zone), with zone balance at
/// `tolerance` when given.
fn pool(tolerance: Option<&str>) -> Value {
    let mut p = NodePoolBuilder::new("web")
        .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
        .requirement(wk::INSTANCE_TYPE, "In", &["m5.xlarge"])
        .build();
    if let Some(t) = tolerance {
        p["metadata"]["annotations"] = json!({"carpool.sh/zone-balance": t});
    }
    p["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    p
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

impl World {
    fn new(tolerance: Option<&str>) -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
        };
        w.cloud.set_now(START as i64 * 1000);
        w.cloud.set_zones("default", &ZONES);
        w.cluster.add_nodepool(pool(tolerance));
        w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
        w
    }

    /// One batch: one more pod of 3 CPUs, which needs a node of its own.
    fn batch(&self, i: usize) -> RunReport {
        self.cluster
            .add_pod(PodBuilder::pending_web(&format!("web-{i}"), "3", "4Gi").pod().unwrap());
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let settings = Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        };
        let owner = format!("run-{i}");
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, &owner);
        block_on(p.run(&region)).unwrap()
    }

    fn nodes_by_zone(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for i in block_on(self.cloud.list()).unwrap() {
            *out.entry(i.zone).or_insert(0) += 1;
        }
        out
    }
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(z, n)| (z.to_string(), *n)).collect()
}

#[test]
fn twelve_single_node_batches_of_a_balanced_pool_end_with_four_nodes_in_each_of_three_zones() {
    let w = World::new(Some("10%"));
    for i in 0..12 {
        let report = w.batch(i);
        assert_eq!(report.launched().count(), 1, "batch {i}: {:?}", report.batches);
    }
    assert_eq!(
        w.nodes_by_zone(),
        counts(&[("us-east-1a", 4), ("us-east-1b", 4), ("us-east-1c", 4)])
    );
}

#[test]
fn without_the_annotation_the_same_batches_all_go_to_one_zone() {
    let w = World::new(None);
    for i in 0..12 {
        w.batch(i);
    }
    let by_zone = w.nodes_by_zone();
    assert_eq!(by_zone.len(), 1, "{by_zone:?}");
    assert_eq!(by_zone.values().sum::<usize>(), 12);
}

#[test]
fn a_zone_whose_subnet_has_too_few_free_addresses_gets_no_node_and_the_run_says_why() {
    let w = World::new(Some("10%"));
    // A node with its one pod needs two addresses: one for itself, one for the pod.
    w.cloud.set_free_ips("default", "us-east-1c", 1);
    let mut passed_over = Vec::new();
    for i in 0..12 {
        let report = w.batch(i);
        assert_eq!(report.launched().count(), 1, "batch {i}: {:?}", report.batches);
        passed_over.extend(report.batches.iter().flat_map(|b| b.zones_passed_over.clone()));
    }
    assert_eq!(w.nodes_by_zone(), counts(&[("us-east-1a", 6), ("us-east-1b", 6)]));
    let z = passed_over.first().expect("the plan names the zone passed over");
    assert_eq!(
        (z.nodepool.as_str(), z.zone.as_str(), z.available, z.needed),
        ("web", "us-east-1c", 1, 2)
    );
    assert!(z.reason().contains("us-east-1c"), "{}", z.reason());
}

/// A Ready node of the pool `web` (m5.xlarge, on-demand) in `zone`.
fn node(name: &str, zone: &str) -> Value {
    let r = region();
    let t = r.types().iter().find(|t| t.name == "m5.xlarge").unwrap();
    NodeBuilder::new(name)
        .label(wk::NODEPOOL, "web")
        .label("carpool.sh/managed", "true")
        .instance_type("m5.xlarge")
        .zone(zone)
        .label(wk::CAPACITY_TYPE, "on-demand")
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .provider_id(&format!("aws:///{zone}/i-{name}"))
        .allocatable("cpu", &format!("{}m", t.allocatable.cpu_millis))
        .allocatable("memory", &format!("{}", t.allocatable.memory))
        .allocatable("pods", &format!("{}", t.allocatable.get("pods")))
        .ready(true)
        .build()
}

/// A running `web` pod of 3 CPUs on `node`.
fn pod_on(name: &str, node: &str) -> Value {
    PodBuilder::new(name)
        .namespace("shop")
        .label("app", "web")
        .requests("3", "4Gi")
        .owner("apps/v1", "ReplicaSet", "web-7d9")
        .spec("nodeName", json!(node))
        .created("2026-12-01T00:00:00Z")
        .running()
        .build()
}

fn snapshot(tolerance: Option<&str>, items: Vec<Value>) -> Snapshot {
    let mut all = vec![pool(tolerance), EC2NodeClassBuilder::standard().build()];
    all.extend(items);
    let s = crate::support::snapshot(&all);
    assert!(s.skipped.is_empty() && s.bad_pods.is_empty(), "{s:?}");
    s
}

fn input<'a>(s: &'a Snapshot, region: &'a carpool::catalog::RegionCatalog<'a>) -> DisruptionInput<'a> {
    DisruptionInput {
        snapshot: s,
        region,
        now: SystemTime::from("2026-12-02T12:00:00Z".parse::<jiff::Timestamp>().unwrap()),
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    }
}

/// Two nodes in each zone of `busy` with a pod each, and two empty nodes in us-east-1a.
fn two_empty_in_a(tolerance: Option<&str>, busy: &[&str]) -> Snapshot {
    let mut items = Vec::new();
    for z in busy {
        for k in 0..2 {
            let name = format!("{}-{k}", &z[z.len() - 1..]);
            items.push(node(&name, z));
            items.push(pod_on(&format!("web-{name}"), &name));
        }
    }
    items.push(node("a-empty-0", "us-east-1a"));
    items.push(node("a-empty-1", "us-east-1a"));
    snapshot(tolerance, items)
}

#[test]
fn consolidation_deletes_empty_nodes_only_as_far_as_the_zone_balance_allows() {
    let r = region();
    // us-east-1a's only nodes are the two empty ones: deleting both would leave the
    // pool's zones two nodes apart (0, 2, 2); one goes, one is kept for the balance.
    let s = two_empty_in_a(Some("10%"), &["us-east-1b", "us-east-1c"]);
    let d = decide(&input(&s, &r));
    let cmd = d.command.expect("one empty node goes");
    assert_eq!(cmd.nodes.len(), 1, "{cmd:?}");
    let kept = if cmd.nodes[0] == "a-empty-0" {
        "a-empty-1"
    } else {
        "a-empty-0"
    };
    let c = d.candidates.iter().find(|c| c.node == kept).unwrap();
    let b = c.blocked_by.as_ref().expect("the other is kept for the balance");
    assert_eq!(b.kind, BlockKind::ZoneBalance, "{}", b.message);
    assert!(
        b.message.contains("us-east-1a: 0, us-east-1b: 2, us-east-1c: 2"),
        "{}",
        b.message
    );

    // Without the annotation, both go.
    let s = two_empty_in_a(None, &["us-east-1b", "us-east-1c"]);
    assert_eq!(decide(&input(&s, &r)).command.expect("both go").nodes.len(), 2);

    // With two busy nodes in us-east-1a too, deleting both empty ones balances the
    // zones (4, 2, 2 to 2, 2, 2): both go.
    let s = two_empty_in_a(Some("10%"), &ZONES);
    assert_eq!(decide(&input(&s, &r)).command.expect("both go").nodes.len(), 2);
}

#[test]
fn a_balanced_pools_new_node_goes_to_the_zone_where_it_has_fewest() {
    // Two nodes in us-east-1a, one in us-east-1b, none in us-east-1c: full, so a pending
    // pod needs a new node.
    let mut items = vec![
        node("a-0", "us-east-1a"),
        node("a-1", "us-east-1a"),
        node("b-0", "us-east-1b"),
    ];
    for n in ["a-0", "a-1", "b-0"] {
        items.push(pod_on(&format!("web-{n}"), n));
    }
    items.push(PodBuilder::pending_web("new", "3", "4Gi").build());
    let mut s = snapshot(Some("10%"), items.clone());
    carpool::decide::provisioning::subnet_zones::narrow_to_subnet_zones(
        &mut s.nodepools,
        &[("default".to_string(), ZONES.iter().map(|z| z.to_string()).collect())].into(),
    );
    let plan = provisioning_plan(&s, &region());
    assert_eq!(plan.nodes.len(), 1, "{plan:?}");
    assert_eq!(plan.nodes[0].zone, "us-east-1c");

    // With us-east-1c's subnet full, us-east-1b, and the plan names us-east-1c.
    s.free_ips = [("default".to_string(), [("us-east-1c".to_string(), 0u32)].into())].into();
    let plan = provisioning_plan(&s, &region());
    assert_eq!(plan.nodes[0].zone, "us-east-1b");
    assert_eq!(plan.zones_passed_over.len(), 1, "{plan:?}");
    assert_eq!(plan.zones_passed_over[0].zone, "us-east-1c");
}
