//! The Kubernetes Events the provisioner publishes on pending pods, over the in-memory
//! ports: a nominated pod gets one `Nominated` Event naming its instance type, zone and
//! capacity type; an unschedulable pod gets its reason; a pod that stays pending over many
//! batches (and runs) gets no second Event within the 5-minute window, and gets one again
//! after it; a failed launch is told to its pods; a failure to publish does not fail the
//! batch.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::pod_events::{DEDUPE_WINDOW, RecentEvents};
use carpool::fakes::{ClusterErrorKind, FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::EC2NodeClass;
use carpool::model::pod::Pod;
use carpool::ports::{
    Cloud, CloudError, EventReason, EventType, Instance, LaunchRequest, OnDemandPrice, PodEvent, SpotPrice,
    ZonalOffering,
};
use carpool::run::provision::{Provisioner, RunReport, Settings, SharedRecentEvents};
use pollster::block_on;

const START: u64 = 1_790_000_000;

/// Without launch waves: the pods here stay pending with nobody to bring their nodes up,
/// and the rate limit is about the batches that re-check them, which a held wave would
/// put off.
fn settings() -> Settings {
    Settings {
        wave_grace: std::time::Duration::ZERO,
        ..Settings::default()
    }
}

fn pending_pod(name: &str, cpu: &str, memory: &str) -> Pod {
    PodBuilder::pending_web(name, cpu, memory)
        .uid(&format!("{name}-uid"))
        .pod()
        .unwrap()
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
    recent: SharedRecentEvents,
}

impl World {
    /// A world with a NodePool and its EC2NodeClass.
    fn new() -> Self {
        let w = Self::bare();
        w.cluster.add_nodepool(
            NodePoolBuilder::new("general")
                .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
                .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
                .requirement("kubernetes.io/arch", "In", &["amd64"])
                .build(),
        );
        w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
        w
    }

    /// A world without NodePools.
    fn bare() -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
            recent: Arc::new(Mutex::new(RecentEvents::new())),
        };
        w.cloud.set_now(START as i64 * 1000);
        w
    }

    /// One run (50 s of watching: five batches, as the pods stay pending) that shares the
    /// world's rate-limit state, as the runs of a warm Lambda do.
    fn run(&self, owner: &str) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings(), owner)
            .with_recent_events(self.recent.clone());
        block_on(p.run(&region)).unwrap()
    }

    fn events_of(&self, pod: &str) -> Vec<PodEvent> {
        self.cluster
            .events()
            .into_iter()
            .filter(|e| e.pod.name == pod)
            .collect()
    }
}

#[test]
fn a_nominated_pod_gets_one_event_naming_its_type_zone_and_capacity_type() {
    let w = World::new();
    for i in 0..3 {
        w.cluster.add_pod(pending_pod(&format!("web-{i}"), "500m", "1Gi"));
    }
    let report = w.run("run-1");
    assert!(report.batches.len() > 1, "the pods stay pending over several batches");
    let instances = block_on(w.cloud.list()).unwrap();
    assert!(!instances.is_empty());
    for i in 0..3 {
        let name = format!("web-{i}");
        let events = w.events_of(&name);
        assert_eq!(
            events.len(),
            1,
            "one Event over {} batches: {events:?}",
            report.batches.len()
        );
        let e = &events[0];
        assert_eq!(e.reason, EventReason::Nominated);
        assert_eq!(e.event_type(), EventType::Normal);
        assert_eq!(e.pod.namespace, "web");
        assert_eq!(e.pod.uid.as_deref(), Some(format!("{name}-uid").as_str()));
        let launched = report
            .launched()
            .find(|l| e.message.contains(&l.instance_id))
            .unwrap_or_else(|| panic!("names a launched instance: {}", e.message));
        assert_eq!(
            e.message,
            format!(
                "Pod should schedule on: instance {} ({}, {}, {}) of NodePool general",
                launched.instance_id,
                launched.instance_type,
                launched.zone,
                launched.capacity_type.label()
            )
        );
    }
    // Another run of the same process, within the window: nothing new.
    w.run("run-2");
    assert_eq!(w.cluster.events().len(), 3, "{:?}", w.cluster.events());
}

#[test]
fn an_unschedulable_pod_gets_its_reason_once_per_window() {
    let w = World::new();
    // No instance type of the pool holds 4000 CPUs.
    w.cluster.add_pod(pending_pod("huge", "4000", "1Gi"));
    let first = w.run("run-1");
    assert!(first.batches.len() > 1);
    let unschedulable = &first.batches[0].unschedulable;
    assert_eq!(unschedulable.len(), 1, "{unschedulable:?}");
    let events = w.events_of("huge");
    assert_eq!(
        events.len(),
        1,
        "one Event over {} batches: {events:?}",
        first.batches.len()
    );
    let e = &events[0];
    assert_eq!(e.reason, EventReason::FailedScheduling);
    assert_eq!(e.event_type(), EventType::Warning);
    assert_eq!(
        e.message,
        format!("Failed to schedule pod, {}", unschedulable[0].reason())
    );
    assert!(e.message.contains("resources"), "{}", e.message);

    // The next run, a little later: still within the window.
    w.clock.advance(Duration::from_secs(10));
    w.run("run-2");
    assert_eq!(w.events_of("huge").len(), 1);

    // Once the window has passed, the pod is told again.
    w.clock.advance(DEDUPE_WINDOW);
    w.run("run-3");
    assert_eq!(w.events_of("huge").len(), 2);
}

/// EC2 that refuses every launch (as with a bad security group), the rest as the fake.
struct RefusingLaunches<'a>(&'a FakeCloud);

impl Cloud for RefusingLaunches<'_> {
    async fn launch(&self, _: &LaunchRequest) -> Result<Instance, CloudError> {
        Err(CloudError::Api("InvalidGroup.NotFound: sg-0bad does not exist".into()))
    }
    async fn network(&self, node_class: &EC2NodeClass) -> Result<carpool::ports::ResolvedNetwork, CloudError> {
        self.0.network(node_class).await
    }
    async fn instance_profile(
        &self,
        node_class: &EC2NodeClass,
        deployment: &str,
    ) -> Result<Option<String>, CloudError> {
        self.0.instance_profile(node_class, deployment).await
    }
    async fn images(&self, node_class: &EC2NodeClass) -> Result<Vec<carpool::ports::ResolvedImage>, CloudError> {
        self.0.images(node_class).await
    }
    async fn get(&self, id: &str) -> Result<Instance, CloudError> {
        self.0.get(id).await
    }
    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.0.list().await
    }
    async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        self.0.terminate(id).await
    }
    async fn spot_prices(&self, instance_types: &[String]) -> Result<Vec<SpotPrice>, CloudError> {
        self.0.spot_prices(instance_types).await
    }
    async fn on_demand_prices(&self, instance_types: &[String]) -> Result<Vec<OnDemandPrice>, CloudError> {
        self.0.on_demand_prices(instance_types).await
    }
    async fn offerings(&self) -> Result<Vec<ZonalOffering>, CloudError> {
        self.0.offerings().await
    }
}

#[test]
fn a_launch_that_fails_is_told_to_its_pods_once_per_window() {
    let w = World::new();
    w.cluster.add_pod(pending_pod("web-0", "500m", "1Gi"));
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let cloud = RefusingLaunches(&w.cloud);
    let mut p = Provisioner::new(&cloud, &w.cluster, &w.store, &w.clock, settings(), "run-1")
        .with_recent_events(w.recent.clone());
    let report = block_on(p.run(&region)).unwrap();
    assert!(report.batches.len() > 1);
    assert!(!report.batches[0].launch_errors.is_empty(), "{:?}", report.batches[0]);
    // Told twice over the run's batches, never once per batch: the launch failure, then,
    // once the failure backs the NodePool off (shared/tests/backoff.rs), that changed
    // outcome, which is told at once.
    let events = w.events_of("web-0");
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events.iter().all(|e| e.reason == EventReason::LaunchFailed));
    assert_eq!(events[0].event_type(), EventType::Warning);
    assert!(
        events[0]
            .message
            .starts_with("Failed to launch a node for the pod, launch: ")
            && events[0].message.contains("InvalidGroup.NotFound"),
        "{}",
        events[0].message
    );
    assert!(
        events[1].message.contains("NodePool general is backed off until "),
        "{}",
        events[1].message
    );
}

#[test]
fn without_a_nodepool_every_pod_is_told_why() {
    let w = World::bare();
    w.cluster.add_pod(pending_pod("web-0", "500m", "1Gi"));
    w.run("run-1");
    let events = w.events_of("web-0");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].reason, EventReason::FailedScheduling);
    assert!(
        events[0].message.starts_with("Failed to schedule pod, "),
        "{}",
        events[0].message
    );
}

#[test]
fn a_failure_to_publish_does_not_fail_the_run_and_is_tried_again() {
    let w = World::new();
    w.cluster.add_pod(pending_pod("huge", "4000", "1Gi"));
    w.cluster.add_pod(pending_pod("web-0", "500m", "1Gi"));
    w.cluster.fail_events(Some(ClusterErrorKind::Throttled));
    let report = w.run("run-1");
    assert!(report.launched().count() > 0, "the batch went on");
    assert!(w.cluster.events().is_empty());
    assert!(
        w.cluster
            .calls()
            .iter()
            .any(|c| c.starts_with("publish_event web/huge"))
    );
    w.cluster.fail_events(None);
    w.run("run-2");
    let events = w.events_of("huge");
    assert_eq!(
        events.len(),
        1,
        "not remembered as published, so published now: {events:?}"
    );
}

#[test]
fn dry_run_publishes_nothing() {
    let w = World::new();
    w.cluster.add_pod(pending_pod("web-0", "500m", "1Gi"));
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let settings = Settings {
        dry_run: true,
        ..settings()
    };
    let mut p = Provisioner::new(&w.cloud, &w.cluster, &w.store, &w.clock, settings, "dry");
    block_on(p.run(&region)).unwrap();
    assert!(w.cluster.events().is_empty());
}
