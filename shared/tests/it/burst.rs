//! Issue 27: a burst of spot warnings (a whole pool reclaimed, twenty warnings in one
//! batch) is replaced together: one plan for every reclaimed node's pods, bin-packed as a
//! provisioning batch, from the one read of the cluster the invocation shares, using the
//! free room of the nodes that stay. Karpenter plans such pods in one provisioning batch
//! once they are pending (`Provisioner.Schedule` over every pending pod,
//! kubernetes-sigs/karpenter `pkg/controllers/provisioning/provisioner.go`).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::disruption::replacement::prefer_on_demand;
use carpool::decide::interruption::{InterruptionEvent, parse_event};
use carpool::decide::provisioning_plan;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::CapacityType;
use carpool::model::pod::Pod;
use carpool::model::well_known as wk;
use carpool::ports::{Instance, InstanceState, StateStore};
use carpool::run::disruption::{Disrupter, InterruptionSettings, Outcome};
use carpool::run::provision::Settings;
use carpool::run::shared_snapshot::SharedSnapshot;
use futures_util::future::join_all;
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;
const RECLAIMED: usize = 20;
const DEPLOYMENT: &str = "carpool-test";

fn start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(START)
}

fn instance(i: usize) -> String {
    format!("i-0spot{i:012}")
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

fn add_node(w: &World, name: &str, id: &str, capacity_type: CapacityType) {
    w.cloud.add_instance(Instance {
        id: id.into(),
        instance_type: "m5.xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type,
        nodepool: "general".into(),
        launch_id: format!("run-{name}"),
        deployment: Some(DEPLOYMENT.into()),
        state: InstanceState::Running,
        launched_at: Some(START as i64 * 1000 - 3_600_000),
        network: Default::default(),
    });
    w.cluster.add_node(
        NodeBuilder::new(name)
            .label(wk::NODEPOOL, "general")
            .label(wk::CARPOOL_MANAGED, "true")
            .label(wk::CAPACITY_TYPE, capacity_type.label())
            .label("kubernetes.io/arch", "amd64")
            .label("kubernetes.io/os", "linux")
            .instance_type("m5.xlarge")
            .zone("us-east-1a")
            .provider_id(&format!("aws:///us-east-1a/{id}"))
            .allocatable("cpu", "3920m")
            .allocatable("memory", "14Gi")
            .allocatable("pods", "58")
            .ready(true)
            .node()
            .unwrap(),
    );
}

fn web(name: &str, node: &str) -> Pod {
    PodBuilder::new(name)
        .namespace("shop")
        .uid(name)
        .label("app", "web")
        .requests("500m", "1Gi")
        .owner("apps/v1", "ReplicaSet", "web-rs")
        .spec("nodeName", json!(node))
        .running()
        .pod()
        .unwrap()
}

/// Twenty spot m5.xlarge nodes, each running two `web` pods of 500m (an eighth of the
/// node each: a pool sized for a peak that passed), and one on-demand node that stays,
/// with room for four more.
fn world() -> World {
    let w = World {
        cloud: FakeCloud::new(),
        cluster: FakeCluster::new(),
        store: FakeStore::new(),
        clock: FakeClock::at(start()),
    };
    w.cloud.set_now(START as i64 * 1000);
    w.cluster.add_nodepool(
        NodePoolBuilder::new("general")
            .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
            .requirement("kubernetes.io/arch", "In", &["amd64"])
            .build(),
    );
    w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
    for i in 0..RECLAIMED {
        let node = format!("spot-{i}");
        add_node(&w, &node, &instance(i), CapacityType::Spot);
        w.cluster.add_pod(web(&format!("web-{i}-a"), &node));
        w.cluster.add_pod(web(&format!("web-{i}-b"), &node));
    }
    add_node(&w, "steady", "i-0steady000000001", CapacityType::OnDemand);
    for k in 0..3 {
        w.cluster.add_pod(web(&format!("steady-{k}"), "steady"));
    }
    w
}

fn warning(i: usize) -> InterruptionEvent {
    let mut v: Value = serde_json::from_str(include_str!("../data/events/spot-interruption-warning.json")).unwrap();
    v["id"] = json!(format!("e-{i}"));
    v["detail"]["instance-id"] = json!(instance(i));
    v["resources"] = json!([format!("arn:aws:ec2:us-east-1:123456789012:instance/{}", instance(i))]);
    v["time"] = json!("2026-09-21T12:00:00Z");
    parse_event(&v).unwrap()
}

/// Handles the twenty warnings as one invocation does: concurrently, on one shared read
/// of the cluster, as one burst or not.
fn handle_all(w: &World, burst: bool) {
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let ids: BTreeSet<String> = (0..RECLAIMED).map(instance).collect();
    let shared = if burst {
        SharedSnapshot::new().with_burst(ids)
    } else {
        SharedSnapshot::new()
    };
    let settings = InterruptionSettings {
        provision: Settings {
            deployment: DEPLOYMENT.into(),
            ..Settings::default()
        },
        ..InterruptionSettings::default()
    };
    let events: Vec<InterruptionEvent> = (0..RECLAIMED).map(warning).collect();
    let until = start() + Duration::from_secs(120);
    let reports = block_on(join_all(events.iter().enumerate().map(|(i, e)| {
        let owner = format!("inv-1/{i}");
        let region = &region;
        let shared = &shared;
        let settings = settings.clone();
        async move {
            Disrupter::new(&w.cloud, &w.cluster, &w.store, &w.clock, settings, &owner)
                .with_shared_snapshot(shared)
                .handle(region, e, until)
                .await
                .unwrap()
        }
    })));
    for r in reports.iter().flatten() {
        assert_eq!(r.outcome, Outcome::CleanedUp, "{r:?}");
    }
}

/// The instances launched by the handling: (type, capacity type, price).
fn launched(w: &World) -> Vec<Instance> {
    w.cloud
        .instances()
        .into_iter()
        .filter(|i| !i.id.starts_with("i-0spot") && !i.id.starts_with("i-0steady"))
        .collect()
}

fn cost(instances: &[Instance]) -> f64 {
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    instances
        .iter()
        .map(|i| {
            let t = region.types().iter().find(|t| t.name == i.instance_type).unwrap();
            region.prices().price(t, &i.zone, i.capacity_type).unwrap()
        })
        .sum()
}

#[test]
fn twenty_spot_warnings_are_replaced_together_for_no_more_than_the_provisioners_plan() {
    // The provisioner's plan for the same pods, pending, with the same NodePools (an
    // interrupted spot node's replacement prefers on-demand): read independently of the
    // replacement's own view.
    let reference = world();
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let mut snapshot = block_on(carpool::run::observe::read_snapshot(&reference.cluster)).unwrap();
    snapshot
        .nodes
        .retain(|n| !n.metadata.name.as_deref().is_some_and(|n| n.starts_with("spot-")));
    for p in &mut snapshot.pods {
        let on_spot = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| n.starts_with("spot-"));
        if on_spot {
            *p = PodBuilder::pending_web(p.metadata.name.as_deref().unwrap(), "500m", "1Gi")
                .namespace("shop")
                .label("app", "web")
                .owner("apps/v1", "ReplicaSet", "web-rs")
                .pod()
                .unwrap();
        }
    }
    prefer_on_demand(&mut snapshot.nodepools);
    let plan = provisioning_plan(&snapshot, &region);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let plan_cost: f64 = plan.nodes.iter().map(|n| n.price_per_hour).sum();

    let w = world();
    handle_all(&w, true);
    let together = launched(&w);
    assert!(!together.is_empty());
    assert!(
        together.len() <= plan.nodes.len(),
        "{} replacements, the provisioner plans {}",
        together.len(),
        plan.nodes.len()
    );
    assert!(
        cost(&together) <= plan_cost + 1e-9,
        "{:.4} $/h, the provisioner's plan {plan_cost:.4} $/h",
        cost(&together)
    );
    // The invocation read the cluster's pods once, for all twenty.
    let reads = w.cluster.calls().iter().filter(|c| *c == "scheduled_pods").count();
    assert_eq!(reads, 1, "{:?}", w.cluster.calls());

    // Replaced one by one, each node's pods alone, the same warnings launch more.
    let apart = world();
    handle_all(&apart, false);
    let one_by_one = launched(&apart);
    eprintln!(
        "provisioner's plan {} nodes {plan_cost:.4} $/h; together {} nodes {:.4} $/h; apart {} nodes {:.4} $/h",
        plan.nodes.len(),
        together.len(),
        cost(&together),
        one_by_one.len(),
        cost(&one_by_one)
    );
    assert!(
        one_by_one.len() > together.len() && cost(&one_by_one) > cost(&together),
        "apart {} nodes {:.4} $/h, together {} nodes {:.4} $/h",
        one_by_one.len(),
        cost(&one_by_one),
        together.len(),
        cost(&together)
    );
}

/// A record of a burst resumed by another invocation (the one that planned the burst
/// died after launching) adopts the burst's launches from the store: nothing is launched
/// twice.
#[test]
fn a_burst_record_resumed_elsewhere_adopts_the_bursts_launches() {
    let w = world();
    let now = carpool::ports::epoch_millis(start());
    block_on(w.store.create_launch(&carpool::fixtures::launch_record(
        "disrupt-burst-x-0",
        Some("i-0replacement0001"),
        now,
        CapacityType::OnDemand,
    )))
    .unwrap();
    block_on(w.store.create_disruption(&carpool::ports::DisruptionRecord {
        instance_id: instance(0),
        node: "spot-0".into(),
        reason: "spot-interruption".into(),
        step: carpool::ports::DisruptionStep::Tainted,
        replacements: Vec::new(),
        started_at: now,
        updated_at: now,
        event_id: "e-0".into(),
        nodepool: Some("general".into()),
        drain_deadline: now + 90_000,
        terminate_by: None,
        hard_deadline: true,
        wait_for_replacement: false,
        burst: Some("burst-x".into()),
        evicted: Vec::new(),
        held_by: None,
        held_until: 0,
        version: 0,
    }))
    .unwrap();
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let settings = InterruptionSettings {
        provision: Settings {
            deployment: DEPLOYMENT.into(),
            ..Settings::default()
        },
        ..InterruptionSettings::default()
    };
    let reports = block_on(
        Disrupter::new(&w.cloud, &w.cluster, &w.store, &w.clock, settings, "inv-2")
            .sweep(&region, start() + Duration::from_secs(120)),
    )
    .unwrap();
    assert_eq!(
        reports[0].replacements,
        vec!["disrupt-burst-x-0".to_string()],
        "{reports:?}"
    );
    assert!(launched(&w).is_empty(), "nothing launched again: {:?}", launched(&w));
}
