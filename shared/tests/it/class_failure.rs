//! One EC2NodeClass that cannot be resolved stops nothing else (issue 26, item 2): its
//! image lookup fails with an error that is not typed as the class's (an `ssmParameter`
//! the role may not read), and yet the other classes' NodePools launch, the bad class's
//! NodePool is backed off with the reason, a spot warning for a node of a good NodePool is
//! still drained and replaced, and a class no managed NodePool refers to (Karpenter's,
//! during a migration) is never even asked about.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::interruption::parse_event;
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fakes::{CloudFault, FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::CapacityType;
use carpool::model::pod::Pod;
use carpool::model::well_known as wk;
use carpool::ports::{FailureReason, Instance, InstanceState, StateStore};
use carpool::run::disruption::{Disrupter, InterruptionSettings, Outcome};
use carpool::run::provision::{BatchReport, Provisioner, Settings};
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;
const DEPLOYMENT: &str = "carpool-test";
const SPOT: &str = "i-0spot0000000000aa";
const NODE: &str = "ip-10-0-9-9.ec2.internal";

fn settings() -> Settings {
    Settings {
        deployment: DEPLOYMENT.into(),
        ..Settings::default()
    }
}

/// A pending pod that only the NodePool `pool` can take.
fn pending_for(pool: &str, name: &str) -> Pod {
    PodBuilder::pending_web(name, "500m", "1Gi")
        .spec("nodeSelector", json!({ wk::NODEPOOL: pool }))
        .pod()
        .unwrap()
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

/// NodePool `web` on class `good`, NodePool `db` on class `bad` (whose AMI lookup fails
/// with an untyped error: access denied), and class `karpenter`, which no NodePool
/// Carpool manages refers to, broken too. Two pending pods for each NodePool.
fn world() -> World {
    world_with(&[("web", "good"), ("db", "bad")])
}

/// [`world`] with only the NodePools `pools` (name, class).
fn world_with(pools: &[(&str, &str)]) -> World {
    let w = World {
        cloud: FakeCloud::new(),
        cluster: FakeCluster::new(),
        store: FakeStore::new(),
        clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
    };
    w.cloud.set_now(START as i64 * 1000);
    for &(pool, class) in pools {
        w.cluster.add_nodepool(
            NodePoolBuilder::new(pool)
                .node_class(class)
                .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
                .requirement("kubernetes.io/arch", "In", &["amd64"])
                .build(),
        );
    }
    for class in ["good", "bad", "karpenter"] {
        w.cluster.add_ec2nodeclass(
            EC2NodeClassBuilder::new(class)
                .role("KarpenterNodeRole")
                .discovery("prod")
                .al2023()
                .build(),
        );
    }
    w.cloud.fail_images("bad", CloudFault::Unauthorized);
    w.cloud.fail_images("karpenter", CloudFault::Api);
    for &(pool, _) in pools {
        for i in 0..2 {
            w.cluster.add_pod(pending_for(pool, &format!("{pool}-{i}")));
        }
    }
    w
}

impl World {
    fn batch(&self, owner: &str) -> BatchReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings(), owner);
        block_on(p.batch(&region)).unwrap()
    }
}

#[test]
fn a_class_whose_images_cannot_be_read_backs_off_its_nodepool_and_the_others_launch() {
    let w = world();
    let b = w.batch("run-1");

    // The good class's NodePool launches for its pods.
    assert!(!b.launched.is_empty(), "{b:#?}");
    assert!(b.launched.iter().all(|l| l.nodepool == "web"), "{:?}", b.launched);
    assert_eq!(b.pods_on_new_nodes, 2);

    // The bad class's NodePool is backed off, with the reason, in the store.
    assert_eq!(b.backoffs_set.len(), 1, "{:?}", b.backoffs_set);
    let stored = block_on(w.store.list_backoffs()).unwrap();
    assert_eq!(stored.len(), 1);
    let backoff = &stored[0];
    assert_eq!((backoff.nodepool.as_str(), backoff.node_class.as_str()), ("db", "bad"));
    assert!(
        matches!(&backoff.reason, FailureReason::NodeClass { error } if error.contains("unauthorized: images bad")),
        "{:?}",
        backoff.reason
    );
    // Its pods say why they wait.
    let db: Vec<_> = b.unschedulable.iter().filter(|u| u.pod.contains("db-")).collect();
    assert_eq!(db.len(), 2, "{:?}", b.unschedulable);
    for u in db {
        assert_eq!(u.kind(), Kind::BackedOff, "{u:?}");
        assert!(
            u.reason().contains("its EC2NodeClass could not be resolved"),
            "{}",
            u.reason()
        );
    }

    // Within the window, the next batch neither asks about the bad class again nor
    // launches for it; the good NodePool still serves new pods.
    let asked_before = w.cloud.images_asked().iter().filter(|c| *c == "bad").count();
    w.cluster.add_pod(pending_for("web", "web-late"));
    w.clock.advance(Duration::from_secs(20));
    let b2 = w.batch("run-2");
    assert_eq!(b2.backed_off.len(), 1);
    assert_eq!(
        w.cloud.images_asked().iter().filter(|c| *c == "bad").count(),
        asked_before,
        "a backed-off class is not resolved again"
    );
    assert!(b2.launched.iter().all(|l| l.nodepool == "web"));
}

#[test]
fn a_class_no_managed_nodepool_uses_is_never_resolved_and_its_errors_stop_nothing() {
    // Only the good NodePool: the broken classes `bad` and `karpenter` are used by none.
    let w = world_with(&[("web", "good")]);
    let b = w.batch("run-1");
    assert!(!b.launched.is_empty(), "{b:#?}");
    assert!(b.backoffs_set.is_empty(), "{:?}", b.backoffs_set);
    assert!(b.skipped.is_empty(), "{:?}", b.skipped);
    let asked = w.cloud.images_asked();
    assert!(
        asked.iter().all(|c| c == "good"),
        "only the class in use is resolved: {asked:?}"
    );
    assert!(
        !w.cloud
            .calls()
            .iter()
            .any(|c| c == "zones bad" || c == "zones karpenter"),
        "{:?}",
        w.cloud.calls()
    );
}

/// The sample spot warning about `instance`, sent at `time`.
fn spot_warning(instance: &str, time: SystemTime) -> carpool::decide::interruption::InterruptionEvent {
    let mut v: Value = serde_json::from_str(include_str!("../data/events/spot-interruption-warning.json")).unwrap();
    v["id"] = json!("e-class-failure");
    v["detail"]["instance-id"] = json!(instance);
    v["resources"] = json!([format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance}")]);
    v["time"] = json!(jiff::Timestamp::try_from(time).unwrap().to_string());
    parse_event(&v).unwrap()
}

#[test]
fn a_spot_warning_for_a_node_of_a_good_nodepool_is_drained_and_replaced_beside_a_bad_class() {
    let w = world();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(START);
    w.cloud.add_instance(Instance {
        id: SPOT.into(),
        instance_type: "m5.xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
        nodepool: "web".into(),
        launch_id: "run-0-0".into(),
        deployment: Some(DEPLOYMENT.into()),
        state: InstanceState::Running,
        launched_at: Some(START as i64 * 1000 - 3_600_000),
        network: Default::default(),
    });
    w.cluster.add_node(
        NodeBuilder::new(NODE)
            .label(wk::NODEPOOL, "web")
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
            .unwrap(),
    );
    for i in 0..3 {
        w.cluster.add_pod(
            PodBuilder::new(&format!("api-{i}"))
                .namespace("shop")
                .uid(&format!("api-{i}"))
                .requests("500m", "1Gi")
                .owner("apps/v1", "ReplicaSet", "api-rs")
                .spec("nodeName", json!(NODE))
                .running()
                .pod()
                .unwrap(),
        );
    }
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let settings = InterruptionSettings {
        provision: settings(),
        ..InterruptionSettings::default()
    };
    let d = Disrupter::new(&w.cloud, &w.cluster, &w.store, &w.clock, settings, "inv-1");
    let reports = block_on(d.handle(&region, &spot_warning(SPOT, now), now + Duration::from_secs(120))).unwrap();
    let r = &reports[0];
    assert_eq!(r.outcome, Outcome::CleanedUp, "{r:#?}");
    assert!(r.drained && r.evicted == 3, "{r:#?}");
    assert!(
        !r.replacement_instances.is_empty(),
        "a replacement was launched: {r:#?}"
    );
    let replacements: Vec<Instance> = w.cloud.instances().into_iter().filter(|i| i.id != SPOT).collect();
    assert!(replacements.iter().all(|i| i.nodepool == "web"), "{replacements:?}");
    assert!(w.cluster.node(NODE).is_none());
}
