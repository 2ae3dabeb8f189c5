//! Capacity reservations (issue 30): the `reserved` capacity type of Karpenter v1.3+. A
//! reservation an EC2NodeClass selects is used first, at its own near-zero price, never
//! past the instances it has left; its launches target it; a launch that finds it full
//! marks the reserved offering unavailable and the plan falls back; a malformed selector
//! term makes its class alone invalid.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::checker::check;
use carpool::decide::provisioning::reserved_capacity::usable;
use carpool::decide::provisioning_plan;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known as wk;
use carpool::model::{CapacityReservation, CapacityType, LaunchRecord, ReservationType};
use carpool::ports::{FailureReason, OfferingKey, StateStore};
use carpool::run::provision::{BatchReport, Provisioner, Settings};
use pollster::block_on;
use serde_json::{Value, json};

use crate::support::{pod, region, snapshot};

const START: u64 = 1_790_000_000;
const ZONE: &str = "us-east-1a";
const CR: &str = "cr-0123456789abcdef0";

fn reservation(available: u32) -> CapacityReservation {
    CapacityReservation {
        id: CR.into(),
        instance_type: "m5.xlarge".into(),
        zone: ZONE.into(),
        owner_id: "123456789012".into(),
        reservation_type: ReservationType::Default,
        instance_match_criteria: "targeted".into(),
        available,
        end_time: None,
        synced_at: START as i64 * 1000,
    }
}

/// A NodePool on class `default` allowing `capacity_types`, of category m.
fn nodepool(name: &str, capacity_types: &[&str]) -> Value {
    NodePoolBuilder::new(name)
        .requirement(wk::CAPACITY_TYPE, "In", capacity_types)
        .requirement("kubernetes.io/arch", "In", &["amd64"])
        .requirement("karpenter.k8s.aws/instance-category", "In", &["m"])
        .build()
}

/// Class `name` selecting the reservation by id.
fn class(name: &str, terms: Value) -> Value {
    EC2NodeClassBuilder::new(name)
        .role("KarpenterNodeRole")
        .discovery("prod")
        .al2023()
        .set("capacityReservationSelectorTerms", terms)
        .build()
}

/// Four pods of 3 CPUs: one per m5.xlarge (4 vCPUs).
fn four_big_pods() -> Vec<Value> {
    (0..4).map(|i| pod(&format!("big-{i}"), "3", "4Gi").build()).collect()
}

/// The must-show on the pure planner: aws/karpenter-provider-aws
/// `ReservedCapacityResolver.ResolveOfferings` prices the reserved offering at on-demand /
/// 10,000,000 so it is chosen first, and kubernetes-sigs/karpenter's `ReservationManager`
/// hands it out at most its available count.
#[test]
fn a_reservation_of_three_takes_the_first_three_nodes_and_the_fourth_is_not_reserved() {
    let mut items = vec![
        nodepool("default", &["reserved", "on-demand", "spot"]),
        class("default", json!([{"id": CR}])),
    ];
    items.extend(four_big_pods());
    let snap = snapshot(&items);
    let mut region = region();
    region.set_capacity_reservations("default", vec![reservation(3)]);
    let plan = provisioning_plan(&snap, &region);
    assert!(
        check(&snap, &region, &plan).is_empty(),
        "{:#?}",
        check(&snap, &region, &plan)
    );
    assert_eq!(plan.nodes.len(), 4, "{plan:#?}");
    let reserved: Vec<_> = plan
        .nodes
        .iter()
        .filter(|n| n.capacity_type == CapacityType::Reserved)
        .collect();
    assert_eq!(reserved.len(), 3, "{plan:#?}");
    for n in &reserved {
        assert_eq!((n.instance_type.as_str(), n.zone.as_str()), ("m5.xlarge", ZONE));
        assert_eq!(
            n.instance_types,
            ["m5.xlarge"],
            "a reserved node is of its reservation's type"
        );
        assert_eq!(n.labels.get(wk::CAPACITY_RESERVATION_ID).map(String::as_str), Some(CR));
        assert_eq!(
            n.labels.get(wk::CAPACITY_RESERVATION_TYPE).map(String::as_str),
            Some("default")
        );
        assert!(
            n.price_per_hour < 0.001,
            "reserved is priced near zero: {}",
            n.price_per_hour
        );
    }
    let fourth = plan
        .nodes
        .iter()
        .find(|n| n.capacity_type != CapacityType::Reserved)
        .unwrap();
    assert!(!fourth.labels.contains_key(wk::CAPACITY_RESERVATION_ID));
}

/// Capacity already paid for comes first: a reservation (of no use to anything else),
/// then a Savings Plan commitment's room (Carpool's own,
/// `carpool.sh/savings-plan-commitment`), then the cheapest capacity.
#[test]
fn a_reservation_is_filled_before_a_savings_plan_commitments_room() {
    let mut items = vec![
        nodepool("default", &["reserved", "on-demand", "spot"]),
        class("default", json!([{"id": CR}])),
        json!({
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": "savings-plan-m5",
                         "annotations": {"carpool.sh/savings-plan-commitment": "10"}},
            "spec": {
                "requirements": [{"key": wk::INSTANCE_FAMILY, "operator": "In", "values": ["m5"]}],
                "priceAdjustment": "-30%",
            },
        }),
    ];
    items.extend(four_big_pods());
    let snap = snapshot(&items);
    let mut region = region();
    region.apply_overlays(&snap.nodeoverlays);
    region.set_capacity_reservations("default", vec![reservation(2)]);
    let plan = provisioning_plan(&snap, &region);
    assert_eq!(plan.nodes.len(), 4, "{plan:#?}");
    let reserved = plan
        .nodes
        .iter()
        .filter(|n| n.capacity_type == CapacityType::Reserved)
        .count();
    assert_eq!(reserved, 2, "the reservation first: {plan:#?}");
    for n in plan.nodes.iter().filter(|n| n.capacity_type != CapacityType::Reserved) {
        assert_eq!(
            n.capacity_type,
            CapacityType::OnDemand,
            "then the commitment's room: {n:?}"
        );
        assert!(n.instance_type.starts_with("m5."), "{n:?}");
    }
}

/// kubernetes-sigs/karpenter `pkg/apis/v1` labels: `reserved` is a capacity type of its
/// own; a NodePool whose `karpenter.sh/capacity-type` requirement leaves it out (as the
/// NodePools written before v1.3 do) never uses a reservation.
#[test]
fn a_nodepool_that_does_not_allow_reserved_never_uses_the_reservation() {
    let mut items = vec![
        nodepool("default", &["on-demand", "spot"]),
        class("default", json!([{"id": CR}])),
    ];
    items.extend(four_big_pods());
    let snap = snapshot(&items);
    let mut region = region();
    region.set_capacity_reservations("default", vec![reservation(3)]);
    let plan = provisioning_plan(&snap, &region);
    assert!(check(&snap, &region, &plan).is_empty());
    assert!(
        plan.nodes.iter().all(|n| n.capacity_type != CapacityType::Reserved),
        "{plan:#?}"
    );
}

/// aws/karpenter-provider-aws `availabilityCache.MarkLaunched`: launches since EC2 was
/// asked count against the reservation, so two in flight leave room for one more.
#[test]
fn launches_in_flight_into_the_reservation_leave_it_less_room() {
    let in_flight: Vec<LaunchRecord> = (0..2)
        .map(|i| {
            let mut l = carpool::fixtures::launch_record(
                &format!("l-{i}"),
                Some(&format!("i-{i}")),
                START as i64 * 1000 + 1,
                CapacityType::Reserved,
            );
            l.labels = reservation(0).labels();
            l
        })
        .collect();
    let mut items = vec![
        nodepool("default", &["reserved", "on-demand"]),
        class("default", json!([{"id": CR}])),
    ];
    items.extend(four_big_pods());
    let snap = snapshot(&items);
    let mut region = region();
    let now = START as i64 * 1000 + 2;
    region.set_capacity_reservations("default", usable(&[reservation(3)], &in_flight, now));
    let plan = provisioning_plan(&snap, &region);
    assert!(check(&snap, &region, &plan).is_empty());
    let reserved = plan
        .nodes
        .iter()
        .filter(|n| n.capacity_type == CapacityType::Reserved)
        .count();
    assert_eq!(reserved, 1, "{plan:#?}");
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

/// NodePool `default` (reserved, on-demand, spot) on class `default`, which selects the
/// reservation by tag; four pods of 3 CPUs; the cloud holds the reservation of 3.
fn world() -> World {
    let w = World {
        cloud: FakeCloud::new(),
        cluster: FakeCluster::new(),
        store: FakeStore::new(),
        clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
    };
    w.cloud.set_now(START as i64 * 1000);
    w.cloud.add_capacity_reservation(reservation(3), &[("team", "ml")]);
    w.cluster
        .add_nodepool(nodepool("default", &["reserved", "on-demand", "spot"]));
    w.cluster
        .add_ec2nodeclass(class("default", json!([{"tags": {"team": "ml"}}])));
    for i in 0..4 {
        w.cluster
            .add_pod(PodBuilder::pending_web(&format!("big-{i}"), "3", "4Gi").pod().unwrap());
    }
    w
}

impl World {
    fn batch(&self, owner: &str) -> BatchReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let settings = Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        };
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, owner);
        block_on(p.batch(&region)).unwrap()
    }
}

/// The must-show on the fakes, end to end through the provisioner's batch: the selector
/// term resolves the reservation (Karpenter's `capacityreservation.Provider.List`), three
/// launches target it (`CapacityReservationTarget` in the launch template), the fourth
/// is not reserved.
#[test]
fn a_batch_launches_three_nodes_into_the_reservation_and_the_fourth_elsewhere() {
    let w = world();
    let b = w.batch("run-1");
    assert_eq!(b.launched.len(), 4, "{b:#?}");
    let (reserved, other): (Vec<_>, Vec<_>) = b
        .launched
        .iter()
        .partition(|l| l.capacity_type == CapacityType::Reserved);
    assert_eq!(reserved.len(), 3, "{:#?}", b.launched);
    for l in &reserved {
        assert_eq!(w.cloud.reservation_of(&l.instance_id).as_deref(), Some(CR));
        let request = w.cloud.launch_request(&l.instance_id).unwrap();
        assert_eq!(request.capacity_reservation().map(|t| t.id).as_deref(), Some(CR));
        assert_eq!(
            request.labels.get(wk::CAPACITY_TYPE).map(String::as_str),
            Some("reserved")
        );
    }
    assert_eq!(other.len(), 1);
    assert!(w.cloud.reservation_of(&other[0].instance_id).is_none());

    // The reservation is full now: more pods go elsewhere.
    w.cluster
        .add_pod(PodBuilder::pending_web("big-4", "3", "4Gi").pod().unwrap());
    let b = w.batch("run-2");
    assert!(
        b.launched.iter().all(|l| l.capacity_type != CapacityType::Reserved),
        "{b:#?}"
    );
}

/// aws/karpenter-provider-aws `pkg/errors` `IsReservationCapacityExceeded` and
/// `pkg/providers/instance` `updateUnavailableOfferingsCache` (`MarkUnavailable`): a
/// reservation found full at launch is unavailable, and the batch's next round falls back
/// as for any capacity error.
#[test]
fn a_reservation_found_full_at_launch_is_marked_unavailable_and_the_plan_falls_back() {
    let w = world();
    let key = OfferingKey {
        instance_type: "m5.xlarge".into(),
        zone: ZONE.into(),
        capacity_type: CapacityType::Reserved,
    };
    w.cloud.exhaust(key);
    let b = w.batch("run-1");
    assert!(
        b.marked_unavailable.contains(&format!("m5.xlarge/{ZONE}/reserved")),
        "{:?}",
        b.marked_unavailable
    );
    assert_eq!(b.launched.len(), 4, "every pod still gets a node: {b:#?}");
    assert!(b.launched.iter().all(|l| l.capacity_type != CapacityType::Reserved));
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(START);
    let ice = block_on(w.store.unavailable_offerings(now)).unwrap();
    assert!(ice.iter().any(|o| o.capacity_type == CapacityType::Reserved), "{ice:?}");
}

/// aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass.go`
/// `CapacityReservationSelectorTerms` CEL rules, which Carpool checks itself: a malformed
/// term makes its class invalid with the reason, and the other classes' NodePools launch.
#[test]
fn a_malformed_selector_term_makes_its_class_invalid_and_the_others_launch() {
    let w = world();
    w.cluster.add_nodepool(
        NodePoolBuilder::new("bad")
            .node_class("bad")
            .requirement(wk::CAPACITY_TYPE, "In", &["reserved", "on-demand"])
            .build(),
    );
    w.cluster
        .add_ec2nodeclass(class("bad", json!([{"id": "cr-1", "tags": {"team": "ml"}}])));
    w.cluster.add_pod(
        PodBuilder::pending_web("for-bad", "500m", "1Gi")
            .spec("nodeSelector", json!({ wk::NODEPOOL: "bad" }))
            .pod()
            .unwrap(),
    );
    let b = w.batch("run-1");
    assert_eq!(b.launched.len(), 4, "{b:#?}");
    assert!(b.launched.iter().all(|l| l.nodepool == "default"));
    let backoff = b
        .backoffs_set
        .iter()
        .find(|x| x.nodepool == "bad")
        .expect("bad is backed off");
    let reason = backoff.reason.to_string();
    assert!(
        matches!(backoff.reason, FailureReason::NodeClass { .. })
            && reason.contains("capacity reservation selector term")
            && reason.contains("spec.capacityReservationSelectorTerms[0]: id cannot be set"),
        "{reason}"
    );
}

const BLOCK_INSTANCE: &str = "i-0block00000000001";
const BLOCK_NODE: &str = "ip-10-0-2-2.ec2.internal";

/// A Carpool node in a Capacity Block (p-type work on an m5.xlarge, for the test) that
/// ends `ends_in` from now, running two pods; the cloud knows the block.
fn block_world(ends_in: Duration) -> World {
    let w = world();
    let end = START as i64 * 1000 + i64::try_from(ends_in.as_millis()).unwrap();
    w.cloud.add_capacity_reservation(
        CapacityReservation {
            id: "cr-0block".into(),
            reservation_type: ReservationType::CapacityBlock,
            end_time: Some(end),
            available: 0,
            ..reservation(0)
        },
        &[],
    );
    w.cloud.add_instance(carpool::ports::Instance {
        id: BLOCK_INSTANCE.into(),
        instance_type: "m5.xlarge".into(),
        zone: ZONE.into(),
        capacity_type: CapacityType::Reserved,
        nodepool: "default".into(),
        launch_id: "run-0-0".into(),
        deployment: Some("carpool-test".into()),
        state: carpool::ports::InstanceState::Running,
        launched_at: Some(START as i64 * 1000 - 3_600_000),
        network: Default::default(),
    });
    w.cluster.add_node(
        carpool::fixtures::NodeBuilder::new(BLOCK_NODE)
            .label(wk::NODEPOOL, "default")
            .label(wk::CARPOOL_MANAGED, "true")
            .label(wk::CAPACITY_TYPE, "reserved")
            .label(wk::CAPACITY_RESERVATION_ID, "cr-0block")
            .label(wk::CAPACITY_RESERVATION_TYPE, "capacity-block")
            .instance_type("m5.xlarge")
            .zone(ZONE)
            .provider_id(&format!("aws:///{ZONE}/{BLOCK_INSTANCE}"))
            .allocatable("cpu", "3920m")
            .allocatable("memory", "14Gi")
            .allocatable("pods", "58")
            .ready(true)
            .node()
            .unwrap(),
    );
    for i in 0..2 {
        w.cluster.add_pod(
            PodBuilder::new(&format!("train-{i}"))
                .uid(&format!("train-{i}"))
                .requests("1", "2Gi")
                .owner("apps/v1", "ReplicaSet", "train-rs")
                .spec("nodeName", json!(BLOCK_NODE))
                .running()
                .pod()
                .unwrap(),
        );
    }
    w
}

impl World {
    fn sweep(&self) -> Vec<carpool::run::disruption::EventReport> {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let settings = carpool::run::disruption::InterruptionSettings {
            provision: Settings {
                deployment: "carpool-test".into(),
                ..Settings::default()
            },
            ..carpool::run::disruption::InterruptionSettings::default()
        };
        let d = carpool::run::disruption::Disrupter::new(
            &self.cloud,
            &self.cluster,
            &self.store,
            &self.clock,
            settings,
            "sweep-1",
        );
        let until = SystemTime::UNIX_EPOCH + Duration::from_secs(START + 120);
        block_on(d.sweep(&region, until)).unwrap()
    }
}

/// aws/karpenter-provider-aws `pkg/controllers/capacityreservation/expiration`: the nodes
/// of a capacity block are disrupted once it is expiring (40 minutes before its end), as
/// an interruption with a known deadline: replaced, drained, terminated before EC2
/// reclaims the block (30 minutes before its end).
#[test]
fn a_capacity_block_ending_in_35_minutes_has_its_node_replaced_drained_and_terminated() {
    let w = block_world(Duration::from_secs(35 * 60));
    let reports = w.sweep();
    let r = reports
        .iter()
        .find(|r| r.instance_id.as_deref() == Some(BLOCK_INSTANCE))
        .unwrap_or_else(|| panic!("the block's node is disrupted: {reports:#?}"));
    assert_eq!(r.outcome, carpool::run::disruption::Outcome::CleanedUp, "{r:#?}");
    assert_eq!(r.evicted, 2, "{r:#?}");
    let instances = w.cloud.instances();
    let block = instances.iter().find(|i| i.id == BLOCK_INSTANCE).unwrap();
    assert_eq!(block.state, carpool::ports::InstanceState::Terminated);
    let replacements: Vec<_> = instances.iter().filter(|i| i.id != BLOCK_INSTANCE).collect();
    assert!(!replacements.is_empty(), "{instances:#?}");
    assert!(
        replacements.iter().all(|i| i.capacity_type != CapacityType::Reserved
            && i.launch_id.starts_with(&format!("disrupt-{BLOCK_INSTANCE}"))),
        "replaced, not into the expiring block: {replacements:#?}"
    );
    let disruption = w.cluster.calls();
    assert!(disruption.iter().any(|c| c.contains("taint")), "{disruption:?}");
}

/// A capacity block with more than 40 minutes to go keeps its nodes.
#[test]
fn a_capacity_block_ending_in_an_hour_keeps_its_node() {
    let w = block_world(Duration::from_secs(3600));
    let reports = w.sweep();
    assert!(
        reports.iter().all(|r| r.instance_id.as_deref() != Some(BLOCK_INSTANCE)),
        "{reports:#?}"
    );
    assert!(block_on(w.store.list_disruptions()).unwrap().is_empty());
}
