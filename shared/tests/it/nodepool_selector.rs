//! Side by side with another autoscaler: Carpool launches only for the NodePools its
//! selector (`CARPOOL_NODEPOOL_SELECTOR`) picks, so a cluster can move from Karpenter one
//! NodePool at a time without two autoscalers launching for the same pods.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::selector::Selector;
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::run::provision::{Provisioner, RunReport, Settings};
use pollster::block_on;
use serde_json::json;

const START: u64 = 1_790_000_000;

fn settings(selector: &str) -> Settings {
    Settings {
        watch: Duration::from_secs(5),
        nodepool_selector: Selector::parse(selector).unwrap(),
        ..Settings::default()
    }
}

/// Two NodePools over one EC2NodeClass: `moved` labelled for Carpool (its nodeClassRef in
/// the `carpool.sh` group, so Karpenter ignores it), and `karpenter`, the heavier one, that
/// Karpenter still serves.
fn world(pods: usize) -> (FakeCloud, FakeCluster, FakeStore, FakeClock) {
    let cloud = FakeCloud::new();
    let cluster = FakeCluster::new();
    cloud.set_now(START as i64 * 1000);
    let mut moved = NodePoolBuilder::new("moved")
        .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
        .build();
    moved["metadata"]["labels"] = json!({"carpool.sh/managed": "true"});
    // The README's migration: a copy whose nodeClassRef names a group Karpenter does not
    // manage (`nodepoolutils.IsManaged` in kubernetes-sigs/karpenter compares the group and
    // kind), still pointing at the same EC2NodeClass by name.
    moved["spec"]["template"]["spec"]["nodeClassRef"]["group"] = json!("carpool.sh");
    cluster.add_nodepool(moved);
    cluster.add_nodepool(
        NodePoolBuilder::new("karpenter")
            .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
            .weight(100)
            .build(),
    );
    cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
    for i in 0..pods {
        cluster.add_pod(
            PodBuilder::new(&format!("web-{i}"))
                .namespace("web")
                .uid(&format!("web-{i}"))
                .requests("500m", "1Gi")
                .unschedulable()
                .pod()
                .unwrap(),
        );
    }
    let clock = FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START));
    (cloud, cluster, FakeStore::new(), clock)
}

fn run(selector: &str, pods: usize) -> RunReport {
    let (cloud, cluster, store, clock) = world(pods);
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let mut p = Provisioner::new(&cloud, &cluster, &store, &clock, settings(selector), "run-1");
    block_on(p.run(&region)).unwrap()
}

#[test]
fn only_the_nodepools_the_selector_picks_are_launched_for() {
    // Without the selector, the heavier `karpenter` pool wins (Karpenter's weight order):
    // both autoscalers would launch for these pods.
    let everything = run("", 6);
    assert!(everything.batches[0].launched.iter().all(|l| l.nodepool == "karpenter"));

    let report = run("carpool.sh/managed=true", 6);
    let batch = &report.batches[0];
    assert_eq!(batch.pods_planned, 6, "unschedulable: {:?}", batch.unschedulable);
    assert!(!batch.launched.is_empty());
    assert!(
        batch.launched.iter().all(|l| l.nodepool == "moved"),
        "{:?}",
        batch.launched
    );
    // The pool left to Karpenter is not an invalid one: it is not reported as skipped.
    assert!(
        batch.skipped.iter().all(|s| !s.object.contains("karpenter")),
        "{:?}",
        batch.skipped
    );
}

#[test]
fn a_selector_that_picks_no_nodepool_launches_nothing_and_says_why() {
    let report = run("team=nobody", 3);
    let batch = &report.batches[0];
    assert!(batch.launched.is_empty());
    assert_eq!(batch.unschedulable.len(), 3);
    assert!(batch.unschedulable.iter().all(|u| u.kind() == Kind::NoValidNodePool));
}
