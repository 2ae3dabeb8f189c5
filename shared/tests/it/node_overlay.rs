//! Issue 30, NodeOverlay: the prices the user pays, as Karpenter's alpha
//! `karpenter.sh/v1alpha1` NodeOverlay states them, change what the planner chooses and
//! what consolidation saves. Each rule follows the Karpenter function named beside it
//! (kubernetes-sigs/karpenter `pkg/controllers/nodeoverlay/{controller,store}.go`,
//! `pkg/cloudprovider/types.go`).

use std::time::SystemTime;

use carpool::catalog::RegionCatalog;
use carpool::decide::checker::check;
use carpool::decide::disruption::{DisruptionInput, DisruptionSettings, decide};
use carpool::decide::provisioning_plan_with_bound;
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known as wk;
use carpool::model::{CapacityType, InstanceType, NodeOverlay};
use carpool::snapshot::Snapshot;
use serde_json::{Value, json};

use crate::support::{region, snapshot};

/// A NodeOverlay as a user writes it.
fn overlay(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// The overlay of the issue: `m6i` 30% cheaper.
fn m6i_30_percent_off() -> Value {
    overlay(
        "savings-plan-m6i",
        json!({
            "requirements": [{"key": wk::INSTANCE_FAMILY, "operator": "In", "values": ["m6i"]}],
            "priceAdjustment": "-30%",
        }),
    )
}

fn typed(v: &Value) -> NodeOverlay {
    serde_json::from_value(v.clone()).unwrap()
}

fn instance_type<'a>(r: &RegionCatalog<'a>, name: &str) -> &'a InstanceType {
    r.types().iter().find(|t| t.name == name).copied().unwrap()
}

fn price(r: &RegionCatalog<'_>, it: &str, ct: CapacityType) -> f64 {
    r.prices().price(instance_type(r, it), "us-east-1a", ct).unwrap()
}

fn list_price(r: &RegionCatalog<'_>, it: &str, ct: CapacityType) -> f64 {
    r.prices().list_price(instance_type(r, it), "us-east-1a", ct).unwrap()
}

/// An on-demand pool of the general-purpose families a user would allow, and eight pods
/// of one CPU and 3 GiB.
fn cluster(extra: &[Value]) -> Snapshot {
    let mut items = vec![
        NodePoolBuilder::new("default")
            .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
            .requirement(wk::INSTANCE_FAMILY, "In", &["m5", "m6a", "m6i"])
            .build(),
        EC2NodeClassBuilder::standard().build(),
    ];
    for i in 0..8 {
        items.push(
            PodBuilder::new(&format!("web-{i}"))
                .label("app", "web")
                .requests("1", "3Gi")
                .unschedulable()
                .build(),
        );
    }
    items.extend(extra.iter().cloned());
    snapshot(&items)
}

/// The plan of `s` on `region` with its lower bound, passing the independent checker.
fn plan_on(s: &Snapshot, region: &RegionCatalog<'_>) -> carpool::decide::ProvisioningPlan {
    let plan = provisioning_plan_with_bound(s, region);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(check(s, region, &plan).is_empty());
    assert!(plan.cost_per_hour + 1e-9 >= plan.lower_bound_per_hour.unwrap());
    plan
}

fn families(plan: &carpool::decide::ProvisioningPlan, region: &RegionCatalog<'_>) -> Vec<String> {
    let mut f: Vec<String> = plan
        .nodes
        .iter()
        .map(|n| instance_type(region, &n.instance_type).family.clone())
        .collect();
    f.sort();
    f.dedup();
    f
}

#[test]
fn a_30_percent_overlay_on_m6i_turns_the_plan_to_m6i() {
    // At list prices the pool's cheapest family for these pods is m6a (m6a.2xlarge lists
    // at 10% under m6i.2xlarge).
    let listed = cluster(&[]);
    let list_region = region();
    let list_plan = plan_on(&listed, &list_region);
    assert_eq!(families(&list_plan, &list_region), ["m6a"]);

    // The same cluster with the overlay: read from the dump, applied to the region.
    let s = cluster(&[m6i_30_percent_off()]);
    assert_eq!(s.nodeoverlays.len(), 1, "{:?}", s.skipped);
    let mut r = region();
    let outcome = r.apply_overlays(&s.nodeoverlays);
    assert!(outcome.skipped.is_empty(), "{outcome:?}");
    let plan = plan_on(&s, &r);
    assert_eq!(families(&plan, &r), ["m6i"]);
    for n in &plan.nodes {
        let adjusted = 0.7 * list_price(&r, &n.instance_type, CapacityType::OnDemand);
        assert!((n.price_per_hour - adjusted).abs() < 1e-9, "{n:?}");
        // Every alternative is ordered at the price the user pays.
        assert!(
            n.instance_types
                .iter()
                .all(|t| t.starts_with("m6i.") || price(&r, t, CapacityType::OnDemand) >= n.price_per_hour)
        );
    }
    assert!(plan.cost_per_hour < list_plan.cost_per_hour);
    // Other families keep their listed price.
    assert_eq!(
        price(&r, "m6a.2xlarge", CapacityType::OnDemand),
        list_price(&r, "m6a.2xlarge", CapacityType::OnDemand)
    );
}

#[test]
fn an_absolute_price_and_an_absolute_delta_set_the_offerings_price() {
    let mut r = region();
    let outcome = r.apply_overlays(&[
        typed(&overlay(
            "m5-xlarge-reserved",
            json!({
                "requirements": [
                    {"key": wk::INSTANCE_TYPE, "operator": "In", "values": ["m5.xlarge"]},
                    {"key": wk::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                ],
                "price": "0.05",
            }),
        )),
        typed(&overlay(
            "c5-cheaper",
            json!({
                "requirements": [{"key": wk::INSTANCE_FAMILY, "operator": "In", "values": ["c5"]}],
                "priceAdjustment": "-0.01",
            }),
        )),
    ]);
    assert!(outcome.skipped.is_empty(), "{outcome:?}");
    assert_eq!(price(&r, "m5.xlarge", CapacityType::OnDemand), 0.05);
    // The spot offering is not selected: its price stays.
    assert_eq!(
        price(&r, "m5.xlarge", CapacityType::Spot),
        list_price(&r, "m5.xlarge", CapacityType::Spot)
    );
    let c5 = list_price(&r, "c5.large", CapacityType::OnDemand);
    assert!((price(&r, "c5.large", CapacityType::OnDemand) - (c5 - 0.01)).abs() < 1e-12);
    // And the planner takes it: a pod that fits an m5.xlarge goes there at $0.05/h.
    let s = snapshot(&[
        NodePoolBuilder::new("default")
            .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
            .requirement(wk::INSTANCE_CATEGORY, "In", &["m", "c", "r"])
            .build(),
        EC2NodeClassBuilder::standard().build(),
        PodBuilder::new("app-0").requests("3", "8Gi").unschedulable().build(),
    ]);
    let plan = plan_on(&s, &r);
    assert_eq!(plan.nodes[0].instance_type, "m5.xlarge");
    assert_eq!(plan.nodes[0].price_per_hour, 0.05);
}

// Karpenter orders overlays with `NodeOverlayList.OrderByWeight` (weight descending, then
// name descending) and stores only the first price update of an offering
// (`InstanceTypeStore.updateInstanceTypeOffering`): the highest weight wins, and changes do
// not compound. Two overlays of one weight on one offering conflict
// (`InstanceTypeStore.isOfferingUpdateConflicting`, from `Controller.validateInstanceTypesOverride`):
// the one ordered second is not applied at all (`validateAndUpdateInstanceTypeOverrides`).
#[test]
fn the_highest_weight_prices_an_offering_and_equal_weights_conflict() {
    let family = |name: &str, weight: i32, adjustment: &str| {
        typed(&overlay(
            name,
            json!({
                "requirements": [{"key": wk::INSTANCE_FAMILY, "operator": "In", "values": ["m6i"]}],
                "priceAdjustment": adjustment,
                "weight": weight,
            }),
        ))
    };
    let one_type = typed(&overlay(
        "m6i-xlarge",
        json!({
            "requirements": [{"key": wk::INSTANCE_TYPE, "operator": "In", "values": ["m6i.xlarge"]}],
            "price": "1.5",
            "weight": 20,
        }),
    ));
    let mut r = region();
    let outcome = r.apply_overlays(&[family("family", 10, "-30%"), one_type.clone()]);
    assert!(outcome.skipped.is_empty(), "{outcome:?}");
    assert_eq!(price(&r, "m6i.xlarge", CapacityType::OnDemand), 1.5);
    let large = list_price(&r, "m6i.large", CapacityType::OnDemand);
    assert!((price(&r, "m6i.large", CapacityType::OnDemand) - 0.7 * large).abs() < 1e-12);

    // Equal weights on the same offerings: `b-family` is ordered first (later name) and
    // applies; `a-family` conflicts and is skipped, with the reason.
    let mut r = region();
    let outcome = r.apply_overlays(&[family("a-family", 10, "-50%"), family("b-family", 10, "-10%")]);
    assert_eq!(outcome.applied.len(), 1);
    assert_eq!(outcome.applied[0].0, "b-family");
    assert_eq!(outcome.skipped.len(), 1, "{outcome:?}");
    assert_eq!(outcome.skipped[0].name, "a-family");
    assert!(outcome.skipped[0].reason.starts_with("Conflict"), "{outcome:?}");
    assert!((price(&r, "m6i.large", CapacityType::OnDemand) - 0.9 * large).abs() < 1e-12);

    // Applying again replaces what was applied before: with none, list prices are back.
    r.apply_overlays(&[]);
    assert_eq!(price(&r, "m6i.large", CapacityType::OnDemand), large);
}

#[test]
fn an_invalid_overlay_is_skipped_with_its_reason_and_a_valid_one_applies() {
    let s = cluster(&[
        m6i_30_percent_off(),
        overlay(
            "both",
            json!({"requirements": [], "price": "0.1", "priceAdjustment": "-10%"}),
        ),
        overlay("unparsable", json!({"priceAdjustment": "half price"})),
    ]);
    assert_eq!(s.nodeoverlays.len(), 1);
    let skipped: Vec<&str> = s.skipped.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(skipped, ["NodeOverlay/both", "NodeOverlay/unparsable"]);
    assert!(
        s.skipped[0].1.contains("cannot set both 'price' and 'priceAdjustment'"),
        "{:?}",
        s.skipped
    );
    assert!(s.skipped[1].1.starts_with("spec.priceAdjustment:"), "{:?}", s.skipped);

    // An overlay Carpool cannot apply region-wide (it selects by NodePool) is skipped when
    // applied, with the reason; the valid one still applies.
    let mut overlays = s.nodeoverlays.clone();
    overlays.push(typed(&overlay(
        "per-pool",
        json!({
            "requirements": [{"key": wk::NODEPOOL, "operator": "In", "values": ["default"]}],
            "priceAdjustment": "-90%",
        }),
    )));
    let mut r = region();
    let outcome = r.apply_overlays(&overlays);
    assert_eq!(outcome.skipped.len(), 1);
    assert_eq!(outcome.skipped[0].name, "per-pool");
    assert!(outcome.skipped[0].reason.contains("karpenter.sh/nodepool"));
    let plan = plan_on(&s, &r);
    assert_eq!(families(&plan, &r), ["m6i"]);
}

// Savings are the removed nodes' price less the replacements', both at the prices the user
// pays (Karpenter's `getCandidatePrices` and `filterByPrice` read the offerings' prices,
// which the overlay store has already changed).
#[test]
fn consolidation_savings_are_at_overlay_prices() {
    let r0 = region();
    let t = instance_type(&r0, "m6i.2xlarge");
    let mut pool = NodePoolBuilder::new("default")
        .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
        .requirement(wk::INSTANCE_FAMILY, "In", &["m6i"])
        .build();
    pool["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    let node = NodeBuilder::new("big")
        .label(wk::NODEPOOL, "default")
        .label("carpool.sh/managed", "true")
        .instance_type("m6i.2xlarge")
        .zone("us-east-1a")
        .label(wk::CAPACITY_TYPE, "on-demand")
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .provider_id("aws:///us-east-1a/i-big")
        .allocatable("cpu", &format!("{}m", t.allocatable.cpu_millis))
        .allocatable("memory", &format!("{}", t.allocatable.memory))
        .allocatable("pods", &format!("{}", t.allocatable.get("pods")))
        .ready(true)
        .build();
    let pod = PodBuilder::new("web-0")
        .namespace("shop")
        .label("app", "web")
        .requests("1", "2Gi")
        .owner("apps/v1", "ReplicaSet", "web-7d9")
        .spec("nodeName", json!("big"))
        .created("2026-12-01T00:00:00Z")
        .running()
        .build();
    let s = snapshot(&[
        pool,
        EC2NodeClassBuilder::standard().build(),
        node,
        pod,
        m6i_30_percent_off(),
    ]);
    let decide_on = |r: &RegionCatalog<'_>| {
        decide(&DisruptionInput {
            snapshot: &s,
            region: r,
            now: SystemTime::from("2026-12-02T12:00:00Z".parse::<jiff::Timestamp>().unwrap()),
            in_progress: Default::default(),
            settings: DisruptionSettings::default(),
            images: Default::default(),
            networks: Default::default(),
            owned: None,
            held_back: Default::default(),
        })
        .command
        .expect("the big node is replaced by a smaller one")
    };
    let listed = decide_on(&r0);
    let mut r = region();
    r.apply_overlays(&s.nodeoverlays);
    let adjusted = decide_on(&r);
    let big = list_price(&r, "m6i.2xlarge", CapacityType::OnDemand);
    assert!((listed.removed_per_hour - big).abs() < 1e-9, "{listed:?}");
    assert!((adjusted.removed_per_hour - 0.7 * big).abs() < 1e-9, "{adjusted:?}");
    let replacement: f64 = adjusted.replacements.iter().map(|x| x.price_per_hour).sum();
    for x in &adjusted.replacements {
        let listed_price = list_price(&r, &x.instance_type, CapacityType::OnDemand);
        assert!((x.price_per_hour - 0.7 * listed_price).abs() < 1e-9, "{x:?}");
    }
    assert!((adjusted.savings_per_hour - (adjusted.removed_per_hour - replacement)).abs() < 1e-9);
    assert!((adjusted.savings_per_hour - 0.7 * listed.savings_per_hour).abs() < 1e-9);
}

// The provisioner over the in-memory ports reads the cluster's NodeOverlays with its
// snapshot: it launches m6i at the adjusted price, and the node that registers is recorded
// at that price.
#[test]
fn the_provisioner_launches_at_overlay_prices_and_records_the_registered_node_at_them() {
    use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
    use carpool::ports::{Cloud as _, StateStore as _};
    use carpool::run::provision::{Provisioner, Settings};
    use pollster::block_on;

    let start = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_790_000_000);
    let (cloud, cluster, store, clock) = (
        FakeCloud::new(),
        FakeCluster::new(),
        FakeStore::new(),
        FakeClock::at(start),
    );
    cloud.set_now(1_790_000_000_000);
    cluster.add_nodepool(
        NodePoolBuilder::new("general")
            .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
            .requirement(wk::INSTANCE_FAMILY, "In", &["m5", "m6a", "m6i"])
            .build(),
    );
    cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
    cluster.add_nodeoverlay(m6i_30_percent_off());
    cluster.add_nodeoverlay(overlay("both", json!({"price": "0.1", "priceAdjustment": "-10%"})));
    for i in 0..8 {
        cluster.add_pod(PodBuilder::pending_web(&format!("web-{i}"), "1", "3Gi").pod().unwrap());
    }
    let settings = Settings {
        deployment: "carpool-test".into(),
        ..Settings::default()
    };
    let r = region();
    let mut p = Provisioner::new(&cloud, &cluster, &store, &clock, settings, "run-1");
    let report = block_on(p.run(&r)).unwrap();
    let batch = &report.batches[0];
    assert_eq!(batch.pods_planned, 8, "{:?}", batch.unschedulable);
    assert!(
        batch.skipped.iter().any(|s| s.object == "NodeOverlay/both"),
        "{:?}",
        batch.skipped
    );
    let launched = &batch.launched;
    assert!(!launched.is_empty());
    for l in launched {
        assert!(l.instance_type.starts_with("m6i."), "{l:?}");
        let list = list_price(&r, &l.instance_type, CapacityType::OnDemand);
        assert!((l.price_per_hour - 0.7 * list).abs() < 1e-9, "{l:?}");
    }
    // The first instance's node registers; housekeeping records it at the adjusted price.
    let instance = block_on(cloud.get(&launched[0].instance_id)).unwrap();
    cluster.add_node(
        NodeBuilder::new("node-0")
            .instance_type(&instance.instance_type)
            .zone(&instance.zone)
            .label(wk::NODEPOOL, "general")
            .label(wk::CAPACITY_TYPE, "on-demand")
            .provider_id(&format!("aws:///{}/{}", instance.zone, instance.id))
            .ready(true)
            .node()
            .unwrap(),
    );
    let p = Provisioner::new(
        &cloud,
        &cluster,
        &store,
        &clock,
        Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        },
        "run-2",
    );
    let housekeeping = block_on(p.housekeeping(&r)).unwrap();
    assert_eq!(housekeeping.registered.len(), 1, "{housekeeping:?}");
    let nodes = block_on(store.list_nodes()).unwrap();
    let record = nodes.iter().find(|n| n.instance_id == instance.id).unwrap();
    assert!(
        (record.price_per_hour - launched[0].price_per_hour).abs() < 1e-9,
        "{record:?} against {:?}",
        launched[0]
    );
    // Issue 31: every run reports the fleet's gauge per NodePool and capacity type, at
    // the prices the user pays.
    let mut p = Provisioner::new(
        &cloud,
        &cluster,
        &store,
        &clock,
        Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        },
        "run-3",
    );
    let report = block_on(p.run(&r)).unwrap();
    let line = report
        .fleet
        .iter()
        .find(|l| l.nodepool == "general" && l.capacity_type == "on-demand")
        .unwrap_or_else(|| panic!("{:?}", report.fleet));
    assert_eq!(line.nodes, 1);
    assert!(
        (line.cost_per_hour - launched[0].price_per_hour).abs() < 1e-9,
        "{line:?}"
    );
}

// `capacity` adds extended resources to every type the overlay selects
// (`InstanceTypeStore.updateInstanceTypeCapacity`, `InstanceType.ApplyCapacityOverlay`):
// pods that request them become schedulable there. Between weights, the higher weight's
// quantity stands (the API's `weight`: "higher weight wins"); equal weights giving one type
// the same resource conflict (`isCapacityUpdateConflicting`).
#[test]
fn capacity_adds_extended_resources_that_pods_can_request() {
    let dongle = |name: &str, family: &str, weight: i32, amount: &str| {
        overlay(
            name,
            json!({
                "requirements": [{"key": wk::INSTANCE_FAMILY, "operator": "In", "values": [family]}],
                "capacity": {"example.com/dongle": amount},
                "weight": weight,
            }),
        )
    };
    let pods: Vec<Value> = (0..6)
        .map(|i| {
            PodBuilder::new(&format!("dongle-{i}"))
                .requests("500m", "1Gi")
                .request("example.com/dongle", "1")
                .unschedulable()
                .build()
        })
        .collect();
    let mut items = vec![
        NodePoolBuilder::new("default")
            .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
            .requirement(wk::INSTANCE_FAMILY, "In", &["m5", "m6i"])
            .build(),
        EC2NodeClassBuilder::standard().build(),
        dongle("m6i-dongles", "m6i", 10, "2"),
        dongle("m6i-more-dongles", "m6i", 5, "8"),
    ];
    items.extend(pods);
    let s = snapshot(&items);
    // At list capacity no type has the resource.
    let plan = provisioning_plan_with_bound(&s, &region());
    assert_eq!(plan.unschedulable.len(), 6, "{plan:?}");

    let mut r = region();
    let outcome = r.apply_overlays(&s.nodeoverlays);
    assert!(outcome.skipped.is_empty(), "{outcome:?}");
    let m6i = instance_type(&r, "m6i.large");
    assert_eq!(m6i.allocatable.get("example.com/dongle"), 2, "the higher weight stands");
    assert_eq!(instance_type(&r, "m5.large").allocatable.get("example.com/dongle"), 0);
    let plan = plan_on(&s, &r);
    assert_eq!(families(&plan, &r), ["m6i"]);
    for n in &plan.nodes {
        assert!(n.pods.len() <= 2, "two dongles a node: {n:?}");
    }
    // Applied again without overlays, the types are the catalog's again.
    r.apply_overlays(&[]);
    assert_eq!(instance_type(&r, "m6i.large").allocatable.get("example.com/dongle"), 0);

    // Equal weights on one resource of one type conflict; the later name applies.
    let mut r = region();
    let outcome = r.apply_overlays(&[
        typed(&dongle("a-dongles", "m6i", 10, "1")),
        typed(&dongle("b-dongles", "m6i", 10, "3")),
    ]);
    assert_eq!(outcome.skipped.len(), 1, "{outcome:?}");
    assert_eq!(outcome.skipped[0].name, "a-dongles");
    assert!(outcome.skipped[0].reason.starts_with("Conflict"), "{outcome:?}");
    assert_eq!(instance_type(&r, "m6i.large").allocatable.get("example.com/dongle"), 3);

    // Hugepages are taken from the memory pods may use.
    let mut r = region();
    let before = instance_type(&r, "m5.large").allocatable.memory;
    r.apply_overlays(&[typed(&overlay(
        "hugepages",
        json!({
            "requirements": [{"key": wk::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}],
            "capacity": {"hugepages-2Mi": "1Gi"},
        }),
    ))]);
    let m5 = instance_type(&r, "m5.large");
    assert_eq!(m5.allocatable.get("hugepages-2Mi"), 1 << 30);
    assert_eq!(m5.allocatable.memory, before - (1 << 30));
}

/// The overlay of a Savings Plan on m6i: the plan's rate 30% below on-demand, and an hourly
/// commitment of `per_hour`.
fn m6i_savings_plan(per_hour: &str) -> Value {
    let mut o = overlay(
        "savings-plan-m6i",
        json!({
            "requirements": [
                {"key": wk::INSTANCE_FAMILY, "operator": "In", "values": ["m6i"]},
                {"key": wk::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            ],
            "priceAdjustment": "-30%",
        }),
    );
    o["metadata"]["annotations"] = json!({"carpool.sh/savings-plan-commitment": per_hour});
    o
}

/// A pool allowing spot and on-demand m5, m6a and m6i, and `pods` pods of one CPU, 3 GiB.
fn spot_or_on_demand(pods: usize, extra: &[Value]) -> Snapshot {
    let mut items = vec![
        NodePoolBuilder::new("default")
            .requirement(wk::CAPACITY_TYPE, "In", &["spot", "on-demand"])
            .requirement(wk::INSTANCE_FAMILY, "In", &["m5", "m6a", "m6i"])
            .build(),
        EC2NodeClassBuilder::standard().build(),
    ];
    for i in 0..pods {
        items.push(
            PodBuilder::new(&format!("web-{i}"))
                .label("app", "web")
                .requests("1", "3Gi")
                .unschedulable()
                .build(),
        );
    }
    items.extend(extra.iter().cloned());
    snapshot(&items)
}

/// The plan's on-demand m6i nodes' cost at the plan's rate, and its spot nodes' count.
fn committed_and_spot(plan: &carpool::decide::ProvisioningPlan) -> (f64, usize) {
    let m6i: f64 = plan
        .nodes
        .iter()
        .filter(|n| n.capacity_type == CapacityType::OnDemand && n.instance_type.starts_with("m6i."))
        .map(|n| n.price_per_hour)
        .sum();
    let spot = plan
        .nodes
        .iter()
        .filter(|n| n.capacity_type == CapacityType::Spot)
        .count();
    (m6i, spot)
}

// Carpool's own (issue 30, "go further than Karpenter"): a Savings Plan is a commitment per
// hour, already paid for, so the planner fills it before anything, spot included; past it,
// the cheapest capacity as ever.
#[test]
fn a_savings_plan_commitment_is_filled_with_covered_on_demand_before_spot() {
    let r0 = region();
    // The discount alone: spot is cheaper than m6i at the plan's rate, so all is spot.
    let discount_only = {
        let mut o = m6i_savings_plan("1");
        o["metadata"]["annotations"] = json!({});
        spot_or_on_demand(24, &[o])
    };
    let plan = plan_on(&discount_only, &r0);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let (m6i, spot_alone) = committed_and_spot(&plan);
    assert_eq!(m6i, 0.0, "{:?}", plan.nodes);
    assert!(spot_alone > 0);

    // With $0.60/h committed: m6i on-demand up to the commitment, the rest on spot.
    let committed = spot_or_on_demand(24, &[m6i_savings_plan("0.60")]);
    let mut r = region();
    r.apply_overlays(&committed.nodeoverlays);
    assert_eq!(r.commitments().len(), 1);
    let plan = plan_on(&committed, &r);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let (m6i, spot) = committed_and_spot(&plan);
    assert!(
        m6i > 0.3 && m6i <= 0.60 + 1e-9,
        "m6i on-demand ${m6i}/h: {:?}",
        plan.nodes
    );
    assert!(
        spot < spot_alone,
        "{spot} spot nodes with the commitment, {spot_alone} without"
    );
}

#[test]
fn a_commitment_used_by_running_nodes_leaves_new_pods_to_the_cheapest_capacity() {
    // The commitment is exactly what two running m6i.2xlarge on-demand nodes cost at the
    // plan's rate: no room is left, so new pods go to spot.
    let mut r = region();
    let rate = 0.7 * list_price(&r, "m6i.2xlarge", CapacityType::OnDemand);
    let t = instance_type(&r, "m6i.2xlarge");
    let running: Vec<Value> = (0..2)
        .map(|i| {
            NodeBuilder::new(&format!("committed-{i}"))
                .label(wk::NODEPOOL, "default")
                .instance_type("m6i.2xlarge")
                .zone("us-east-1a")
                .label(wk::CAPACITY_TYPE, "on-demand")
                .label("kubernetes.io/arch", "amd64")
                .label("kubernetes.io/os", "linux")
                .allocatable("cpu", "0")
                .allocatable("memory", "0")
                .allocatable("pods", &format!("{}", t.allocatable.get("pods")))
                .ready(true)
                .build()
        })
        .collect();
    let mut extra = running;
    extra.push(m6i_savings_plan(&format!("{}", 2.0 * rate)));
    let s = spot_or_on_demand(6, &extra);
    r.apply_overlays(&s.nodeoverlays);
    let plan = plan_on(&s, &r);
    let (m6i, spot) = committed_and_spot(&plan);
    assert_eq!(m6i, 0.0, "{:?}", plan.nodes);
    assert!(spot > 0, "{:?}", plan.nodes);
}

#[test]
fn consolidation_counts_no_saving_on_a_node_the_commitment_pays() {
    let r0 = region();
    let t = instance_type(&r0, "m6i.2xlarge");
    let mut pool = NodePoolBuilder::new("default")
        .requirement(wk::CAPACITY_TYPE, "In", &["spot", "on-demand"])
        .requirement(wk::INSTANCE_FAMILY, "In", &["m6i"])
        .build();
    pool["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    let node = NodeBuilder::new("big")
        .label(wk::NODEPOOL, "default")
        .label("carpool.sh/managed", "true")
        .instance_type("m6i.2xlarge")
        .zone("us-east-1a")
        .label(wk::CAPACITY_TYPE, "on-demand")
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .provider_id("aws:///us-east-1a/i-big")
        .allocatable("cpu", &format!("{}m", t.allocatable.cpu_millis))
        .allocatable("memory", &format!("{}", t.allocatable.memory))
        .allocatable("pods", &format!("{}", t.allocatable.get("pods")))
        .ready(true)
        .build();
    let pod = PodBuilder::new("web-0")
        .namespace("shop")
        .label("app", "web")
        .requests("1", "2Gi")
        .owner("apps/v1", "ReplicaSet", "web-7d9")
        .spec("nodeName", json!("big"))
        .created("2026-12-01T00:00:00Z")
        .running()
        .build();
    let decide_with = |plan: Value| {
        let s = snapshot(&[
            pool.clone(),
            EC2NodeClassBuilder::standard().build(),
            node.clone(),
            pod.clone(),
            plan,
        ]);
        let mut r = region();
        r.apply_overlays(&s.nodeoverlays);
        decide(&DisruptionInput {
            snapshot: &s,
            region: &r,
            now: SystemTime::from("2026-12-02T12:00:00Z".parse::<jiff::Timestamp>().unwrap()),
            in_progress: Default::default(),
            settings: DisruptionSettings::default(),
            images: Default::default(),
            networks: Default::default(),
            owned: None,
            held_back: Default::default(),
        })
    };
    // A commitment far below the node's cost pays part of it: the rest is still saved by
    // a smaller node.
    let partly = decide_with(m6i_savings_plan("0.01"));
    assert!(partly.command.is_some(), "{:?}", partly.candidates);
    // One that pays all of it: replacing the node saves nothing on the bill.
    let fully = decide_with(m6i_savings_plan("10"));
    assert!(fully.command.is_none(), "{:?}", fully.command);
    let big = fully.candidates.iter().find(|c| c.node == "big").unwrap();
    assert_eq!(big.price_per_hour, 0.0, "{big:?}");
}

#[test]
fn a_commitment_without_a_rate_or_with_a_bad_amount_is_skipped_with_the_reason() {
    let mut no_rate = m6i_savings_plan("1");
    no_rate["spec"] = json!({"requirements": [{"key": wk::INSTANCE_FAMILY, "operator": "In", "values": ["m6i"]}]});
    let mut bad = m6i_savings_plan("lots");
    bad["metadata"]["name"] = json!("bad-amount");
    let s = spot_or_on_demand(1, &[no_rate, bad]);
    let mut r = region();
    let outcome = r.apply_overlays(&s.nodeoverlays);
    let skipped: Vec<(String, String)> = s.skipped.iter().cloned().chain(outcome.skipped_objects()).collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped
            .iter()
            .all(|(_, why)| why.contains("carpool.sh/savings-plan-commitment")),
        "{skipped:?}"
    );
    assert!(r.commitments().is_empty());
}
