//! The provisioner's run over the in-memory ports: pending pods become launches, capacity
//! in flight is counted, the lease keeps runs apart, capacity errors are re-planned,
//! limits hold, unregistered instances are terminated after the TTL.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fakes::{ClusterErrorKind, FakeClock, FakeCloud, FakeCluster, FakeStore, StoreErrorKind};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::CapacityType;
use carpool::model::pod::Pod;
use carpool::ports::{Clock as _, Cloud, ClusterError, LaunchState, OfferingKey, StateStore};
use carpool::run::provision::{MAX_FAILED_POLLS, ProvisionError, Provisioner, RunReport, Settings};
use carpool::run::watch_mode::WatchMode;
use pollster::block_on;
use serde_json::json;

const START: u64 = 1_790_000_000;

fn start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(START)
}

fn settings() -> Settings {
    Settings {
        deployment: "carpool-test".into(),
        ..Settings::default()
    }
}

fn pending_pod(name: &str, cpu: &str, memory: &str) -> Pod {
    PodBuilder::pending_web(name, cpu, memory).pod().unwrap()
}

fn nodepool(name: &str, limits: Option<serde_json::Value>) -> serde_json::Value {
    let pool = NodePoolBuilder::new(name)
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
        .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
        .requirement("kubernetes.io/arch", "In", &["amd64"]);
    match limits {
        Some(l) => pool.limits(l),
        None => pool,
    }
    .build()
}

fn nodeclass() -> serde_json::Value {
    EC2NodeClassBuilder::standard().build()
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

impl World {
    fn new(pods: usize) -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(start()),
        };
        w.cloud.set_now(START as i64 * 1000);
        w.cluster.add_nodepool(nodepool("general", None));
        w.cluster.add_ec2nodeclass(nodeclass());
        for i in 0..pods {
            let (cpu, mem) = [("500m", "1Gi"), ("1", "2Gi"), ("250m", "512Mi")][i % 3];
            w.cluster.add_pod(pending_pod(&format!("web-{i}"), cpu, mem));
        }
        w
    }

    fn run_with(&self, owner: &str, settings: Settings) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, owner);
        block_on(p.run(&region)).unwrap()
    }

    fn run(&self, owner: &str) -> RunReport {
        self.run_with(owner, settings())
    }
}

#[test]
fn pending_pods_become_launched_instances_recorded_in_flight() {
    let w = World::new(30);
    let report = w.run("run-1");
    let batch = &report.batches[0];
    // The pods stay pending here (no kubelet), and their nodes never come up: their launch
    // wave is never released, so kube-scheduler never had its chance at them and the run
    // does not plan them again (waves.rs tests the re-check after a release).
    assert_eq!(report.batches.len(), 1);
    assert_eq!(batch.pods_seen, 30);
    assert_eq!(batch.pods_planned, 30, "unschedulable: {:?}", batch.unschedulable);
    assert!(!batch.launched.is_empty());
    assert_eq!(batch.launched.iter().map(|l| l.pods).sum::<usize>(), 30);
    assert_eq!(batch.pending_to_fleet_ms.len(), 30);
    assert!(batch.cost_per_hour_added > 0.0);
    let instances = block_on(w.cloud.list()).unwrap();
    assert_eq!(instances.len(), batch.launched.len());
    let launches = block_on(w.store.list_launches()).unwrap();
    assert_eq!(launches.len(), instances.len());
    for l in &launches {
        assert_eq!(l.state, LaunchState::InFlight);
        assert!(instances.iter().any(|i| Some(&i.id) == l.instance_id.as_ref()));
    }
    // The run watched its whole window, on the test clock, and went on releasing its wave
    // until its limit.
    assert!(report.watched_ms >= 60_000, "{}", report.watched_ms);
}

#[test]
fn a_second_run_launches_nothing_for_pods_already_provided_for() {
    let w = World::new(30);
    let first = w.run("run-1");
    let launched = first.launched().count();
    let second = w.run("run-2");
    assert_eq!(second.launched().count(), 0, "second run: {:?}", second.batches);
    assert_eq!(block_on(w.cloud.list()).unwrap().len(), launched);
    assert_eq!(
        second.batches[0].pods_planned, 30,
        "every pod counted on capacity in flight"
    );
}

// Karpenter: nodeclaimtemplate.go `ToNodeClaim` labels the NodeClaim with the values of the
// NodePool's custom keys; a NodeClaim in flight counts with those labels (its pods do not
// get a second node).
#[test]
fn pods_asking_a_custom_label_value_are_launched_for_once_and_their_node_carries_it() {
    let w = World::new(0);
    w.cluster.add_nodepool(
        NodePoolBuilder::new("teams")
            .requirement("kubernetes.io/arch", "In", &["amd64"])
            .requirement("company.com/team", "In", &["a", "b"])
            .build(),
    );
    for i in 0..3 {
        w.cluster.add_pod(
            PodBuilder::pending_web(&format!("team-b-{i}"), "500m", "1Gi")
                .node_selector("company.com/team", "b")
                .pod()
                .unwrap(),
        );
    }
    let first = w.run("run-1");
    assert!(first.launched().count() > 0, "{:?}", first.batches);
    let launches = block_on(w.store.list_launches()).unwrap();
    assert!(
        launches
            .iter()
            .all(|l| l.labels.get("company.com/team").map(String::as_str) == Some("b")),
        "{launches:?}"
    );
    let second = w.run("run-2");
    assert_eq!(second.launched().count(), 0, "second run: {:?}", second.batches);
}

#[test]
fn a_run_that_cannot_take_the_lease_exits_without_launching() {
    let w = World::new(5);
    block_on(
        w.store
            .acquire_lease("provisioner", "other-run", start(), Duration::from_secs(120)),
    )
    .unwrap();
    let report = w.run("run-1");
    assert!(report.lease_held_by.is_some());
    assert!(report.batches.is_empty());
    assert!(block_on(w.cloud.list()).unwrap().is_empty());
}

#[test]
fn insufficient_capacity_marks_the_offerings_and_launches_the_next_best_in_the_same_run() {
    let w = World::new(3);
    // What the planner would launch first.
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let snapshot = block_on(carpool::run::observe::read_snapshot(&w.cluster)).unwrap();
    let plan = carpool::decide::provisioning_plan(&snapshot, &region);
    assert_eq!(plan.nodes.len(), 1);
    let first = &plan.nodes[0];
    for t in &first.instance_types {
        w.cloud.exhaust(OfferingKey {
            instance_type: t.clone(),
            zone: first.zone.clone(),
            capacity_type: first.capacity_type,
        });
    }
    let report = w.run("run-1");
    let batch = &report.batches[0];
    assert_eq!(batch.rounds, 2, "{batch:?}");
    assert_eq!(batch.launch_errors.len(), 1, "{batch:?}");
    assert!(!batch.marked_unavailable.is_empty());
    assert!(!batch.launched.is_empty());
    for launched in &batch.launched {
        assert!(
            launched.zone != first.zone
                || launched.capacity_type != first.capacity_type
                || !first.instance_types.contains(&launched.instance_type),
            "the next-best offering is not one that failed: {launched:?}"
        );
    }
    assert_eq!(batch.pods_planned, 3);
    let unavailable = block_on(w.store.unavailable_offerings(carpool::ports::Clock::now(&w.clock))).unwrap();
    assert_eq!(unavailable.len(), first.instance_types.len());
}

#[test]
fn a_spot_outage_falls_back_to_on_demand_when_the_pool_allows_it() {
    let w = World::new(3);
    let mut pool = nodepool("general", None);
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
    ]);
    w.cluster.add_nodepool(pool);
    let catalog = Catalog::embedded().unwrap();
    for it in catalog.types().iter().filter(|t| t.name.starts_with("m5.")) {
        w.cloud.exhaust(OfferingKey {
            instance_type: it.name.clone(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
        });
    }
    let report = w.run("run-1");
    let batch = &report.batches[0];
    assert_eq!(batch.rounds, 2, "{batch:?}");
    assert_eq!(batch.launched.len(), 1, "{batch:?}");
    assert_eq!(batch.launched[0].capacity_type, CapacityType::OnDemand);
    assert!(batch.launched[0].instance_type.starts_with("m5."));
}

#[test]
fn a_nodepool_limit_stops_launches_and_reports_the_pods_left_over() {
    let w = World::new(0);
    w.cluster.add_nodepool(nodepool("general", Some(json!({"cpu": "4"}))));
    for i in 0..12 {
        w.cluster.add_pod(pending_pod(&format!("big-{i}"), "1", "1Gi"));
    }
    let report = w.run("run-1");
    let batch = &report.batches[0];
    let cpus: i64 = batch
        .launched
        .iter()
        .map(|l| {
            Catalog::embedded()
                .unwrap()
                .get(&l.instance_type)
                .unwrap()
                .capacity
                .cpu_millis
        })
        .sum();
    assert!(
        cpus > 0 && cpus <= 4000,
        "launched {cpus}m of CPU under a 4-CPU limit: {:?}",
        batch
    );
    assert!(!batch.unschedulable.is_empty());
    assert!(
        batch.unschedulable.iter().all(|u| u.has(Kind::Limits)),
        "{:?}",
        batch.unschedulable
    );
}

#[test]
fn an_instance_that_never_registers_is_terminated_after_the_ttl() {
    let w = World::new(3);
    let report = w.run("run-1");
    let id = report.launched().next().unwrap().instance_id.clone();
    // 15 minutes on, no Node: the next run's housekeeping terminates it.
    w.clock.advance(Duration::from_secs(900));
    w.cloud.set_now(START as i64 * 1000 + 900_000);
    let later = w.run("run-2");
    let terminated = &later.housekeeping[0].terminated;
    assert_eq!(terminated.len(), 1, "{:?}", later.housekeeping);
    assert_eq!(terminated[0].0, id);
    assert!(terminated[0].1.contains("did not register"));
    // Its record is gone with it, and the pods, still pending, got a new launch.
    let launches = block_on(w.store.list_launches()).unwrap();
    assert!(launches.iter().all(|l| l.instance_id.as_deref() != Some(&id)));
    assert_eq!(later.launched().count(), 1);
    assert_eq!(launches.len(), 1);
    assert_eq!(launches[0].state, LaunchState::InFlight);
}

#[test]
fn dry_run_plans_and_launches_nothing() {
    let w = World::new(10);
    let mut s = settings();
    s.dry_run = true;
    let report = w.run_with("run-1", s);
    assert!(report.batches[0].dry_run);
    assert!(report.batches[0].cost_per_hour_added > 0.0);
    assert!(block_on(w.cloud.list()).unwrap().is_empty());
    assert!(block_on(w.store.list_launches()).unwrap().is_empty());
}

#[test]
fn an_invalid_nodepool_is_skipped_with_its_reason_and_the_others_still_launch() {
    let w = World::new(3);
    let mut bad = nodepool("broken", None);
    bad["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Sometimes");
    w.cluster.add_nodepool(bad);
    let report = w.run("run-1");
    let batch = &report.batches[0];
    assert!(
        batch.skipped.iter().any(|s| s.object == "NodePool/broken"),
        "{:?}",
        batch.skipped
    );
    assert_eq!(batch.launched.len(), 1);
}

#[test]
fn nodes_are_planned_only_in_zones_where_the_nodeclass_has_subnets() {
    let w = World::new(30);
    w.cloud.set_zones("default", &["us-east-1b"]);
    let report = w.run("run-1");
    assert!(report.launched().count() > 0);
    assert!(
        report.launched().all(|l| l.zone == "us-east-1b"),
        "{:?}",
        report.batches
    );
}

#[test]
fn an_instance_of_a_launch_recorded_as_failed_is_terminated_if_it_never_registers() {
    let w = World::new(0);
    // CreateFleet timed out as far as the run knew, but EC2 did start the instance.
    let request = carpool::ports::LaunchRequest {
        launch_id: "lost-1".into(),
        deployment: "carpool-test".into(),
        nodepool: "general".into(),
        node_class: carpool::model::EC2NodeClass::named("default"),
        instance_types: vec!["m5.large".into()],
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
    };
    let instance = block_on(w.cloud.launch(&request)).unwrap();
    let record = carpool::ports::LaunchRecord {
        wave: None,
        release_by: None,
        id: "lost-1".into(),
        instance_id: None,
        nodepool: "general".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        pods: vec![],
        launched_at: START as i64 * 1000,
        state: LaunchState::Failed {
            reason: "CreateFleet: timed out".into(),
        },
        reserved_for: None,
        labels: Default::default(),
        version: 0,
    };
    block_on(w.store.create_launch(&record)).unwrap();
    let early = w.run("run-1");
    assert!(
        early.housekeeping.iter().all(|h| h.terminated.is_empty()),
        "not before the TTL"
    );
    w.clock.advance(Duration::from_secs(900));
    w.cloud.set_now(START as i64 * 1000 + 900_000);
    let later = w.run("run-2");
    let terminated: Vec<_> = later.housekeeping.iter().flat_map(|h| h.terminated.clone()).collect();
    assert_eq!(terminated.len(), 1, "{terminated:?}");
    assert_eq!(terminated[0].0, instance.id);
    assert!(block_on(w.cloud.list()).unwrap().is_empty());
}

#[test]
fn a_nodepool_whose_ec2nodeclass_is_missing_is_skipped_with_the_reason() {
    let w = World::new(3);
    let mut orphan = nodepool("orphan", None);
    orphan["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("gone");
    orphan["spec"]["weight"] = json!(100);
    w.cluster.add_nodepool(orphan);
    let report = w.run("run-1");
    let batch = &report.batches[0];
    let skipped = batch.skipped.iter().find(|s| s.object == "NodePool/orphan").unwrap();
    assert!(skipped.reason.contains("\"gone\" does not exist"), "{skipped:?}");
    assert!(batch.launched.iter().all(|l| l.nodepool == "general"));
    assert!(!batch.launched.is_empty());
}

#[test]
fn with_no_valid_nodepool_nothing_is_launched_and_every_pod_says_why() {
    let w = World::new(3);
    let mut broken = nodepool("general", None);
    broken["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Sometimes");
    w.cluster.add_nodepool(broken);
    let report = w.run("run-1");
    let batch = &report.batches[0];
    assert!(batch.launched.is_empty());
    assert_eq!(batch.unschedulable.len(), 3);
    assert_eq!(batch.unschedulable[0].kind(), Kind::NoValidNodePool);
    assert!(batch.skipped.iter().any(|s| s.object == "NodePool/general"));
    assert!(block_on(w.cloud.list()).unwrap().is_empty());
}

#[test]
fn the_default_settings_are_those_of_a_configuration_that_sets_nothing_optional() {
    let vars = |k: &str| {
        [
            ("CARPOOL_CLUSTER_NAME", "prod"),
            ("CARPOOL_TABLE_NAME", "carpool"),
            ("AWS_REGION", "us-east-1"),
        ]
        .iter()
        .find(|(name, _)| *name == k)
        .map(|(_, v)| v.to_string())
    };
    let config = carpool::run::config::Config::from_vars(vars).unwrap();
    assert_eq!(
        Settings::from_config(&config, Duration::from_secs(60)),
        Settings::default()
    );
}

// Transient faults. The apiserver's 429 and 5xx are retried inside the adapter first
// (carpool-adapters' tests/kube_read_retry.rs); what reaches the run is what is left when
// those retries ran out, and the watch must go on past it.

#[test]
fn a_poll_of_pending_pods_that_fails_mid_watch_does_not_end_the_watch() {
    let w = World::new(30);
    w.cluster.fail_on("pending_pods", ClusterErrorKind::Throttled);
    w.cluster.fail_on("pending_pods", ClusterErrorKind::Api);
    let report = w.run("run-1");
    assert_eq!(report.transient_errors.len(), 2, "{:?}", report.transient_errors);
    assert!(report.transient_errors[0].starts_with("poll of pending pods"));
    assert_eq!(report.launched().map(|l| l.pods).sum::<usize>(), 30);
}

#[test]
fn a_housekeeping_round_that_fails_is_logged_and_provisioning_goes_on() {
    let w = World::new(30);
    // Housekeeping's first read: the nodes.
    w.cluster.fail_on("nodes", ClusterErrorKind::Api);
    let report = w.run("run-1");
    assert!(
        report.transient_errors.iter().any(|e| e.starts_with("housekeeping")),
        "{:?}",
        report.transient_errors
    );
    assert_eq!(report.launched().map(|l| l.pods).sum::<usize>(), 30);
}

#[test]
fn a_batch_that_is_throttled_is_batched_again_and_launches_once() {
    let w = World::new(30);
    // Throttled at the batch's read of the offerings out of capacity (its first read of
    // the store; housekeeping does not read them).
    w.store.fail_on("list ICE#", StoreErrorKind::Throttled);
    let report = w.run("run-1");
    assert!(
        report.transient_errors.iter().any(|e| e.starts_with("batch")),
        "{:?}",
        report.transient_errors
    );
    assert_eq!(report.launched().map(|l| l.pods).sum::<usize>(), 30);
    let instances = block_on(w.cloud.list()).unwrap();
    assert_eq!(instances.len(), report.launched().count(), "nothing launched twice");
}

#[test]
fn an_apiserver_that_keeps_failing_ends_the_run_with_its_error_and_launches_nothing() {
    let w = World::new(30);
    for _ in 0..MAX_FAILED_POLLS + 5 {
        w.cluster.fail_on("pending_pods", ClusterErrorKind::Throttled);
    }
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let mut p = Provisioner::new(&w.cloud, &w.cluster, &w.store, &w.clock, settings(), "run-1");
    let outcome = block_on(p.run(&region));
    assert!(
        matches!(outcome, Err(ProvisionError::Cluster(ClusterError::Throttled { .. }))),
        "{outcome:?}"
    );
    assert!(block_on(w.cloud.list()).unwrap().is_empty());
    // The lease was released for the next run.
    assert!(
        block_on(
            w.store
                .acquire_lease("provisioner", "run-2", w.clock.now(), Duration::from_secs(60))
        )
        .is_ok()
    );
}

// The adaptive watch: an idle cluster costs one check a minute.

fn adaptive() -> Settings {
    Settings {
        watch_mode: WatchMode::Adaptive {
            quiet_after: Duration::from_secs(600),
        },
        ..settings()
    }
}

#[test]
fn an_adaptive_run_in_an_idle_cluster_checks_once_and_exits() {
    let w = World::new(0);
    let report = w.run_with("run-1", adaptive());
    assert!(report.exited_early);
    assert_eq!(report.watched_ms, 0, "no poll interval was slept");
    assert_eq!(report.housekeeping.len(), 1, "housekeeping still ran");
    let polls = w.cluster.calls().iter().filter(|c| *c == "pending_pods").count();
    assert_eq!(polls, 1);
}

#[test]
fn an_adaptive_run_that_finds_pods_watches_and_launches_as_a_continuous_one() {
    let w = World::new(30);
    let report = w.run_with("run-1", adaptive());
    assert!(!report.exited_early);
    assert_eq!(report.launched().map(|l| l.pods).sum::<usize>(), 30);
    assert!(report.watched_ms >= 50_000);
}

#[test]
fn after_a_recent_launch_an_adaptive_run_keeps_watching_for_the_rest_of_the_burst() {
    let w = World::new(30);
    w.run_with("run-1", adaptive());
    // The pods ran and finished; five minutes later nothing is pending, but the launch
    // five minutes ago keeps the run watching for the rest of the burst.
    w.cluster.clear_pods();
    w.clock.advance(Duration::from_secs(300));
    let second = w.run_with("run-2", adaptive());
    assert!(!second.exited_early);
    assert!(second.watched_ms >= 50_000);
    // Past the quiet period it exits after one check.
    w.clock.advance(Duration::from_secs(600));
    let third = w.run_with("run-3", adaptive());
    assert!(third.exited_early);
}
