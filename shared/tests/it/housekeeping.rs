//! Housekeeping as a pure decision: a situation (Nodes, instances, launch and node
//! records, now) in, the plan out ([`carpool::decide::housekeeping`]).

use std::collections::BTreeMap;
use std::time::Duration;

use carpool::catalog::{Catalog, RegionCatalog};
use carpool::decide::housekeeping::ownership::{SpareReason, termination_cap};
use carpool::decide::housekeeping::{
    Forget, HousekeepingPlan, Labelling, LostLaunch, LostReason, Observed, Registration, Spared, Termination,
    TerminationReason, plan, to_look_up,
};
use carpool::fixtures::launch_record;
use carpool::model::CapacityType;
use carpool::model::well_known as wk;
use carpool::ports::{EpochMillis, Instance, InstanceState, LaunchRecord, LaunchState, NodeRecord};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

const NOW: EpochMillis = 10_000_000;
/// This deployment.
const DEPLOYMENT: &str = "carpool-prod";
const TTL: Duration = Duration::from_secs(900);
/// Launched within the TTL.
const RECENT: EpochMillis = NOW - 60_000;
/// Launched longer ago than the TTL.
const OLD: EpochMillis = NOW - 901_000;

fn node(name: &str, instance: &str, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": format!("aws:///us-east-1a/{instance}")}
    }))
    .unwrap()
}

fn instance(id: &str, launch_id: &str, launched_at: EpochMillis) -> Instance {
    Instance {
        id: id.into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        nodepool: "default".into(),
        launch_id: launch_id.into(),
        deployment: Some(DEPLOYMENT.into()),
        state: InstanceState::Running,
        launched_at: Some(launched_at),
        network: Default::default(),
    }
}

fn launch(id: &str, instance: Option<&str>, launched_at: EpochMillis, state: LaunchState) -> LaunchRecord {
    LaunchRecord {
        pods: vec!["shop/api-0".into()],
        state,
        ..launch_record(id, instance, launched_at, CapacityType::OnDemand)
    }
}

fn record(instance: &str) -> NodeRecord {
    NodeRecord {
        instance_id: instance.into(),
        node: format!("node-{instance}"),
        nodepool: "default".into(),
        instance_type: "m5.large".into(),
        capacity_type: CapacityType::OnDemand,
        price_per_hour: 0.096,
        launched_at: OLD,
        version: 1,
    }
}

fn m5_large_price(region: &RegionCatalog<'_>) -> f64 {
    let it = region.types().iter().find(|t| t.name == "m5.large").unwrap();
    region.prices().price(it, "us-east-1a", CapacityType::OnDemand).unwrap()
}

fn registration(region: &RegionCatalog<'_>, launch_id: &str, instance: &str, then_forget: bool) -> Registration {
    let mut registered = launch(
        launch_id,
        Some(instance),
        RECENT,
        LaunchState::Registered { node: "n1".into() },
    );
    registered.version = 1;
    Registration {
        launch: registered,
        node: NodeRecord {
            instance_id: instance.into(),
            node: "n1".into(),
            nodepool: "default".into(),
            instance_type: "m5.large".into(),
            capacity_type: CapacityType::OnDemand,
            price_per_hour: m5_large_price(region),
            launched_at: RECENT,
            version: 0,
        },
        then_forget,
    }
}

fn failed(id: &str, instance: Option<&str>, launched_at: EpochMillis) -> LaunchRecord {
    launch(
        id,
        instance,
        launched_at,
        LaunchState::Failed {
            reason: "the node did not register within 900s".into(),
        },
    )
}

/// The termination of `instance` (of launch `launch`), and the record written after it.
fn terminate(
    instance: &str,
    launch: Option<&str>,
    reason: TerminationReason,
    then_write: Option<LaunchRecord>,
) -> Termination {
    Termination {
        instance_id: instance.into(),
        launch_id: launch.map(str::to_string),
        reason,
        then_write,
    }
}

/// A situation: what is listed (by default, no node records at all, listed fine).
struct World {
    nodes: Vec<Node>,
    instances: Vec<Instance>,
    launches: Vec<LaunchRecord>,
    node_records: Option<Vec<NodeRecord>>,
    looked_up: BTreeMap<String, Option<Instance>>,
    dry_run: bool,
}

impl Default for World {
    fn default() -> Self {
        World {
            nodes: Vec::new(),
            instances: Vec::new(),
            launches: Vec::new(),
            node_records: Some(Vec::new()),
            looked_up: BTreeMap::new(),
            dry_run: false,
        }
    }
}

impl World {
    fn plan(&self, region: &RegionCatalog<'_>) -> HousekeepingPlan {
        let observed = Observed {
            nodes: &self.nodes,
            instances: &self.instances,
            looked_up: &self.looked_up,
            launches: &self.launches,
            node_records: self.node_records.as_deref(),
            deployment: DEPLOYMENT,
            dry_run: self.dry_run,
            now: NOW,
            registration_ttl: TTL,
        };
        plan(&observed, region)
    }
}

#[test]
fn each_situation_gets_its_plan() {
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let in_flight = LaunchState::InFlight;
    let gone_failed = LaunchState::Failed {
        reason: "timeout".into(),
    };
    let registered = LaunchState::Registered { node: "n1".into() };
    let full_labels: serde_json::Map<String, serde_json::Value> = region
        .types()
        .iter()
        .find(|t| t.name == "m5.large")
        .unwrap()
        .labels()
        .into_iter()
        .map(|(k, v)| (k, json!(v)))
        .chain([(wk::CARPOOL_MANAGED.to_string(), json!("true"))])
        .collect();
    let cases: Vec<(&str, World, HousekeepingPlan)> = vec![
        (
            "nothing listed: nothing to do",
            World::default(),
            HousekeepingPlan::default(),
        ),
        (
            "a launch in flight whose Node appeared is registered, with a node record at the catalog's price",
            World {
                nodes: vec![node("n1", "i-1", json!({}))],
                instances: vec![instance("i-1", "l1", RECENT)],
                launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                register: vec![registration(&region, "l1", "i-1", false)],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch interrupted before its instance id was recorded finds its instance by tag",
            World {
                nodes: vec![node("n1", "i-1", json!({}))],
                instances: vec![instance("i-1", "l1", RECENT)],
                launches: vec![launch("l1", None, RECENT, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                register: vec![registration(&region, "l1", "i-1", false)],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a Node that outlived its instance registers the launch, and its record is forgotten at once",
            World {
                nodes: vec![node("n1", "i-1", json!({}))],
                instances: vec![],
                launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                register: vec![registration(&region, "l1", "i-1", true)],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch in flight within the TTL is left alone",
            World {
                instances: vec![instance("i-1", "l1", RECENT)],
                launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan::default(),
        ),
        (
            "an instance whose Node did not register within the TTL is terminated, then its launch failed",
            World {
                instances: vec![instance("i-1", "l1", OLD)],
                launches: vec![launch("l1", Some("i-1"), OLD, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                terminate: vec![terminate(
                    "i-1",
                    Some("l1"),
                    TerminationReason::NotRegistered { ttl_seconds: 900 },
                    Some(failed("l1", Some("i-1"), OLD)),
                )],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch in flight past the TTL with no instance at all is only marked failed",
            World {
                launches: vec![launch("l1", None, OLD, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                fail: vec![failed("l1", None, OLD)],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "the instance of a failed launch that never registered is terminated after the TTL",
            World {
                instances: vec![instance("i-1", "l1", OLD)],
                launches: vec![launch("l1", Some("i-1"), OLD, gone_failed.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                terminate: vec![terminate(
                    "i-1",
                    Some("l1"),
                    TerminationReason::FailedLaunchNotRegistered {
                        launch_id: "l1".into(),
                        ttl_seconds: 900,
                    },
                    None,
                )],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "the instance of a failed launch is left alone within the TTL",
            World {
                instances: vec![instance("i-1", "l1", RECENT)],
                launches: vec![launch("l1", Some("i-1"), RECENT, gone_failed.clone())],
                ..World::default()
            },
            HousekeepingPlan::default(),
        ),
        (
            "records of launches whose instance is gone are forgotten; a failed launch with no instance after the TTL",
            World {
                launches: vec![
                    launch("l1", Some("i-1"), RECENT, registered.clone()),
                    launch("l2", Some("i-2"), RECENT, gone_failed.clone()),
                    launch("l3", None, OLD, gone_failed.clone()),
                    launch("l4", None, RECENT, gone_failed.clone()),
                ],
                ..World::default()
            },
            HousekeepingPlan {
                forget: vec![
                    Forget::Launch("l1".into()),
                    Forget::Launch("l2".into()),
                    Forget::Launch("l3".into()),
                ],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a registered launch whose instance runs is kept",
            World {
                nodes: vec![node("n1", "i-1", json!({}))],
                instances: vec![instance("i-1", "l1", OLD)],
                launches: vec![launch("l1", Some("i-1"), OLD, registered.clone())],
                node_records: Some(vec![record("i-1")]),
                ..World::default()
            },
            HousekeepingPlan::default(),
        ),
        (
            // Karpenter's termination finalizer (kubernetes-sigs/karpenter
            // `pkg/controllers/node/termination`) deletes the instance of a deleted Node.
            "an instance whose Node registered and was deleted (kubectl delete node) is terminated",
            World {
                instances: vec![instance("i-1", "l1", OLD)],
                launches: vec![launch("l1", Some("i-1"), OLD, registered.clone())],
                node_records: Some(vec![record("i-1")]),
                ..World::default()
            },
            HousekeepingPlan {
                terminate: vec![terminate(
                    "i-1",
                    Some("l1"),
                    TerminationReason::NodeDeleted { node: "n1".into() },
                    None,
                )],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a registered launch with no node record (the records could not be read) terminates nothing",
            World {
                instances: vec![instance("i-1", "l1", OLD)],
                launches: vec![launch("l1", Some("i-1"), OLD, registered.clone())],
                node_records: None,
                ..World::default()
            },
            HousekeepingPlan::default(),
        ),
        (
            "an instance no record knows and with no Node is terminated after the TTL only",
            World {
                nodes: vec![node("n3", "i-3", json!({}))],
                instances: vec![
                    instance("i-1", "lost", OLD),
                    instance("i-2", "", RECENT),
                    instance("i-3", "", OLD),
                ],
                ..World::default()
            },
            HousekeepingPlan {
                terminate: vec![terminate(
                    "i-1",
                    None,
                    TerminationReason::NoLaunchRecord {
                        launch_id: "lost".into(),
                        ttl_seconds: 900,
                    },
                    None,
                )],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "node records of instances gone are forgotten, after the launch records",
            World {
                instances: vec![instance("i-1", "", OLD)],
                launches: vec![launch("l2", Some("i-2"), OLD, registered.clone())],
                node_records: Some(vec![record("i-1"), record("i-2")]),
                nodes: vec![node("n1", "i-1", json!({}))],
                ..World::default()
            },
            HousekeepingPlan {
                forget: vec![Forget::Launch("l2".into()), Forget::NodeRecord("i-2".into())],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "no node record is forgotten when they could not be listed",
            World {
                nodes: vec![node("n1", "i-1", json!({}))],
                launches: vec![launch("l1", Some("i-1"), RECENT, in_flight.clone())],
                node_records: None,
                ..World::default()
            },
            HousekeepingPlan {
                register: vec![registration(&region, "l1", "i-1", false)],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a Carpool node lacking its type's labels gets them; other nodes and complete ones do not",
            World {
                nodes: vec![
                    node(
                        "managed",
                        "i-1",
                        json!({wk::CARPOOL_MANAGED: "true", wk::INSTANCE_TYPE: "m5.large", wk::ARCH: "amd64"}),
                    ),
                    node("foreign", "i-2", json!({wk::INSTANCE_TYPE: "m5.large"})),
                    node("complete", "i-3", serde_json::Value::Object(full_labels.clone())),
                    node(
                        "unknown-type",
                        "i-4",
                        json!({wk::CARPOOL_MANAGED: "true", wk::INSTANCE_TYPE: "x9.huge"}),
                    ),
                ],
                ..World::default()
            },
            HousekeepingPlan {
                label: vec![Labelling {
                    node: "managed".into(),
                    labels: full_labels
                        .iter()
                        .filter(|(k, _)| ![wk::CARPOOL_MANAGED, wk::INSTANCE_TYPE, wk::ARCH].contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                        .collect(),
                }],
                ..HousekeepingPlan::default()
            },
        ),
    ];
    for (name, world, expected) in cases {
        let plan = world.plan(&region);
        assert_eq!(plan, expected, "{name}");
        assert_eq!(plan.is_empty(), expected == HousekeepingPlan::default(), "{name}");
    }
}

#[test]
fn a_plan_is_a_serde_value_with_typed_reasons() {
    let plan = HousekeepingPlan {
        terminate: vec![terminate(
            "i-1",
            None,
            TerminationReason::NoLaunchRecord {
                launch_id: "l9".into(),
                ttl_seconds: 900,
            },
            None,
        )],
        forget: vec![Forget::NodeRecord("i-2".into())],
        ..HousekeepingPlan::default()
    };
    let value = serde_json::to_value(&plan).unwrap();
    assert_eq!(value["terminate"][0]["reason"]["kind"], "no_launch_record");
    assert_eq!(value["forget"][0], json!({"kind": "node_record", "id": "i-2"}));
    assert_eq!(serde_json::from_value::<HousekeepingPlan>(value).unwrap(), plan);
}

#[test]
fn reasons_read_as_the_reports_and_records_always_said() {
    assert_eq!(
        TerminationReason::NotRegistered { ttl_seconds: 900 }.to_string(),
        "the node did not register within 900s"
    );
    assert_eq!(
        TerminationReason::FailedLaunchNotRegistered {
            launch_id: "l1".into(),
            ttl_seconds: 60
        }
        .to_string(),
        "instance of failed launch l1 did not register within 60s"
    );
    assert_eq!(
        TerminationReason::NoLaunchRecord {
            launch_id: String::new(),
            ttl_seconds: 900
        }
        .to_string(),
        "instance of launch \"\" has no launch record and no node after 900s"
    );
}

fn foreign(id: &str, launch_id: &str, deployment: Option<&str>, launched_at: Option<EpochMillis>) -> Instance {
    Instance {
        deployment: deployment.map(str::to_string),
        launched_at,
        ..instance(id, launch_id, 0)
    }
}

fn orphan(id: &str, launch_id: &str) -> Termination {
    terminate(
        id,
        None,
        TerminationReason::NoLaunchRecord {
            launch_id: launch_id.into(),
            ttl_seconds: 900,
        },
        None,
    )
}

fn spared(id: &str, launch_id: &str, reason: SpareReason) -> Spared {
    Spared {
        instance_id: id.into(),
        would_be: orphan(id, launch_id).reason,
        reason,
    }
}

/// A launch lost because its instance is gone.
fn gone(launch: &LaunchRecord) -> LostLaunch {
    let instance_id = launch.instance_id.clone().unwrap_or_default();
    lost(launch, LostReason::InstanceGone { instance_id })
}

fn lost(launch: &LaunchRecord, reason: LostReason) -> LostLaunch {
    let mut failed = launch.clone();
    failed.state = LaunchState::Failed {
        reason: reason.to_string(),
    };
    LostLaunch { launch: failed, reason }
}

/// Within the grace of a launch.
const JUST_NOW: EpochMillis = NOW - 30_000;
/// Past the grace, within the TTL.
const PAST_GRACE: EpochMillis = NOW - 180_000;

#[test]
fn only_what_this_deployment_owns_is_terminated_a_few_at_a_time_and_launches_are_reconciled() {
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let in_flight = LaunchState::InFlight;
    let shutting_down = Instance {
        state: InstanceState::ShuttingDown,
        ..instance("i-1", "l1", RECENT)
    };
    let terminated = Instance {
        state: InstanceState::Terminated,
        ..instance("i-1", "l1", RECENT)
    };
    let no_instance = launch("l1", None, PAST_GRACE, in_flight.clone());
    let with_instance = launch("l1", Some("i-1"), PAST_GRACE, in_flight.clone());
    let mut found = launch("l1", Some("i-9"), JUST_NOW, in_flight.clone());
    found.instance_type = "c5.large".into();
    found.zone = "us-east-1b".into();
    let mut found_instance = instance("i-9", "l1", JUST_NOW);
    found_instance.instance_type = "c5.large".into();
    found_instance.zone = "us-east-1b".into();
    let five_orphans: Vec<Instance> = (1..=5)
        .map(|n| instance(&format!("i-{n}"), &format!("lost-{n}"), OLD))
        .collect();
    let cases: Vec<(&str, World, HousekeepingPlan)> = vec![
        (
            "an instance tagged for the cluster with no deployment tag survives, past the TTL",
            World {
                instances: vec![foreign("i-1", "l9", None, Some(OLD))],
                ..World::default()
            },
            HousekeepingPlan {
                spared: vec![spared("i-1", "l9", SpareReason::OtherDeployment { deployment: None })],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "another deployment's instance survives",
            World {
                instances: vec![foreign("i-1", "l9", Some("carpool-staging"), Some(OLD))],
                ..World::default()
            },
            HousekeepingPlan {
                spared: vec![spared(
                    "i-1",
                    "l9",
                    SpareReason::OtherDeployment {
                        deployment: Some("carpool-staging".into()),
                    },
                )],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "an instance without Carpool's launch-id tag survives, even with this deployment's tag",
            World {
                instances: vec![foreign("i-1", "", Some(DEPLOYMENT), Some(OLD))],
                ..World::default()
            },
            HousekeepingPlan {
                spared: vec![spared("i-1", "", SpareReason::NoLaunchIdTag)],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "an instance without a launch time is never terminated",
            World {
                instances: vec![foreign("i-1", "l9", Some(DEPLOYMENT), None)],
                ..World::default()
            },
            HousekeepingPlan {
                spared: vec![spared("i-1", "l9", SpareReason::NoLaunchTime)],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch past the TTL whose instance is not this deployment's is failed, its instance spared",
            World {
                instances: vec![foreign("i-1", "l1", None, Some(OLD))],
                launches: vec![launch("l1", Some("i-1"), OLD, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                fail: vec![failed("l1", Some("i-1"), OLD)],
                spared: vec![Spared {
                    instance_id: "i-1".into(),
                    would_be: TerminationReason::NotRegistered { ttl_seconds: 900 },
                    reason: SpareReason::OtherDeployment { deployment: None },
                }],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "past the cap (3 of 5 instances), the other terminations are held back",
            World {
                instances: five_orphans.clone(),
                ..World::default()
            },
            HousekeepingPlan {
                terminate: (1..=3)
                    .map(|n| orphan(&format!("i-{n}"), &format!("lost-{n}")))
                    .collect(),
                held_back: (4..=5)
                    .map(|n| orphan(&format!("i-{n}"), &format!("lost-{n}")))
                    .collect(),
                ..HousekeepingPlan::default()
            },
        ),
        (
            "dry run plans the terminations and carries none out",
            World {
                instances: vec![instance("i-1", "lost", OLD)],
                dry_run: true,
                ..World::default()
            },
            HousekeepingPlan {
                would_terminate: vec![orphan("i-1", "lost")],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch in flight whose answer was lost is recorded with the instance its tag names",
            World {
                instances: vec![found_instance],
                launches: vec![launch("l1", None, JUST_NOW, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                reconcile: vec![found],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch in flight with no instance is left alone within the grace",
            World {
                launches: vec![launch("l1", None, JUST_NOW, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan::default(),
        ),
        (
            "a launch in flight with no instance and none carrying its tag after the grace is lost",
            World {
                launches: vec![no_instance.clone()],
                ..World::default()
            },
            HousekeepingPlan {
                lost: vec![lost(&no_instance, LostReason::NoInstance { grace_seconds: 120 })],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch whose instance is shutting down is lost at once, and the instance is not terminated again",
            World {
                instances: vec![shutting_down],
                launches: vec![launch("l1", Some("i-1"), JUST_NOW, in_flight.clone())],
                ..World::default()
            },
            HousekeepingPlan {
                lost: vec![gone(&launch("l1", Some("i-1"), JUST_NOW, in_flight.clone()))],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch whose instance, read by id, is terminated is lost at once",
            World {
                launches: vec![launch("l1", Some("i-1"), JUST_NOW, in_flight.clone())],
                looked_up: BTreeMap::from([("i-1".to_string(), Some(terminated))]),
                ..World::default()
            },
            HousekeepingPlan {
                lost: vec![gone(&launch("l1", Some("i-1"), JUST_NOW, in_flight.clone()))],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch whose instance EC2 does not know yet is left alone within the grace",
            World {
                launches: vec![launch("l1", Some("i-1"), JUST_NOW, in_flight.clone())],
                looked_up: BTreeMap::from([("i-1".to_string(), None)]),
                ..World::default()
            },
            HousekeepingPlan::default(),
        ),
        (
            "a launch whose instance EC2 still does not know after the grace is lost",
            World {
                launches: vec![with_instance.clone()],
                looked_up: BTreeMap::from([("i-1".to_string(), None)]),
                ..World::default()
            },
            HousekeepingPlan {
                lost: vec![lost(
                    &with_instance,
                    LostReason::InstanceGone {
                        instance_id: "i-1".into(),
                    },
                )],
                ..HousekeepingPlan::default()
            },
        ),
        (
            "a launch whose unlisted instance could not be read waits, even past the grace",
            World {
                launches: vec![with_instance.clone()],
                ..World::default()
            },
            HousekeepingPlan::default(),
        ),
    ];
    for (name, world, expected) in cases {
        let plan = world.plan(&region);
        assert_eq!(plan, expected, "{name}");
        assert_eq!(plan.is_empty(), expected == HousekeepingPlan::default(), "{name}");
    }
}

#[test]
fn the_cap_is_three_or_a_tenth_of_carpools_instances_rounded_up() {
    assert_eq!(termination_cap(0), 3);
    assert_eq!(termination_cap(30), 3);
    assert_eq!(termination_cap(31), 4);
    assert_eq!(termination_cap(100), 10);
    assert_eq!(termination_cap(1000), 100);
}

#[test]
fn only_the_unlisted_instances_of_launches_in_flight_are_read_one_by_one() {
    let launches = vec![
        launch("l1", Some("i-1"), RECENT, LaunchState::InFlight),
        launch("l2", Some("i-2"), RECENT, LaunchState::InFlight),
        launch("l3", None, RECENT, LaunchState::InFlight),
        launch("l4", Some("i-4"), RECENT, LaunchState::InFlight),
        launch("l5", Some("i-5"), RECENT, LaunchState::Registered { node: "n5".into() }),
    ];
    let nodes = vec![node("n4", "i-4", json!({}))];
    let instances = vec![instance("i-1", "l1", RECENT)];
    assert_eq!(to_look_up(&nodes, &instances, &launches), vec!["i-2".to_string()]);
}
