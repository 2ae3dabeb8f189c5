//! Failures that repeat, over the in-memory ports: a NodePool whose EC2NodeClass cannot
//! launch (a bad security group) or whose nodes never join is backed off, across runs,
//! with its pods unschedulable as `backed_off` and the metrics the alarms watch raised;
//! once the window has passed it is tried again, and a node that registers resets it.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::pod::Pod;
use carpool::ports::{Backoff, Cloud, EventReason, FailureReason, NodeClassReason, StateStore, epoch_millis};
use carpool::run::provision::metrics::{batch_metrics, housekeeping_metrics};
use carpool::run::provision::{BatchReport, Provisioner, RunReport, Settings};
use pollster::block_on;

const START: u64 = 1_790_000_000;

fn settings(registration_ttl: Duration) -> Settings {
    Settings {
        registration_ttl,
        ..Settings::default()
    }
}

fn pending_pod(name: &str) -> Pod {
    PodBuilder::pending_web(name, "500m", "1Gi").pod().unwrap()
}

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
    settings: Settings,
}

impl World {
    fn new(registration_ttl: Duration) -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
            settings: settings(registration_ttl),
        };
        w.cloud.set_now(START as i64 * 1000);
        w.cluster.add_nodepool(
            NodePoolBuilder::new("general")
                .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
                .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
                .requirement("kubernetes.io/arch", "In", &["amd64"])
                .build(),
        );
        w.cluster.add_ec2nodeclass(
            EC2NodeClassBuilder::new("default")
                .role("KarpenterNodeRole")
                .discovery("prod")
                .al2023()
                .build(),
        );
        for i in 0..3 {
            w.cluster.add_pod(pending_pod(&format!("web-{i}")));
        }
        w
    }

    fn run(&self, owner: &str) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let mut p = Provisioner::new(
            &self.cloud,
            &self.cluster,
            &self.store,
            &self.clock,
            self.settings.clone(),
            owner,
        );
        block_on(p.run(&region)).unwrap()
    }

    fn launch_calls(&self) -> usize {
        self.cloud.calls().iter().filter(|c| c.starts_with("launch ")).count()
    }

    fn backoffs(&self) -> Vec<Backoff> {
        block_on(self.store.list_backoffs()).unwrap()
    }

    fn now_ms(&self) -> i64 {
        epoch_millis(carpool::ports::Clock::now(&self.clock))
    }
}

fn all_backed_off(batch: &BatchReport) {
    assert_eq!(batch.unschedulable.len(), 3, "{:?}", batch.unschedulable);
    for u in &batch.unschedulable {
        assert_eq!(u.kind(), Kind::BackedOff, "{u:?}");
        assert!(
            u.reason().contains("NodePool general is backed off until "),
            "{}",
            u.reason()
        );
    }
}

#[test]
fn a_class_with_a_bad_security_group_backs_off_and_is_tried_again_after_the_window() {
    let w = World::new(Duration::from_secs(900));
    w.cloud.break_class("default", NodeClassReason::NoSecurityGroup);

    let run1 = w.run("run-1");
    let first = &run1.batches[0];
    assert!(first.launched.is_empty());
    assert!(!first.launch_errors.is_empty());
    assert!(
        first.launch_errors[0].error.contains("selects no security group"),
        "{:?}",
        first.launch_errors
    );
    assert_eq!(first.backoffs_set.len(), 1, "the launch error backs the pool off");
    let emf = batch_metrics("prod", 0, first);
    assert!(emf["LaunchErrors"].as_u64().unwrap() >= 1, "the alarm's metric: {emf}");
    assert_eq!(emf["LaunchBackoffs"], 1);
    let launches_after_first = w.launch_calls();
    assert!(launches_after_first >= 1);

    // The run keeps watching: the pods are still pending, but every later batch within
    // the window leaves the pool out and does not call CreateFleet.
    assert!(run1.batches.len() >= 2, "{}", run1.batches.len());
    for later in &run1.batches[1..] {
        assert!(later.launch_errors.is_empty() && later.launched.is_empty());
        assert_eq!(later.backed_off.len(), 1);
        assert_eq!(batch_metrics("prod", 0, later)["LaunchBackoffs"], 1);
        all_backed_off(later);
    }
    assert_eq!(w.launch_calls(), launches_after_first, "no launch while backed off");

    // The backoff is in the store, so the next invocation holds the pool back too.
    let stored = w.backoffs();
    assert_eq!(stored.len(), 1);
    let b = &stored[0];
    assert_eq!((b.nodepool.as_str(), b.node_class.as_str()), ("general", "default"));
    assert_eq!((b.failures, b.windows), (1, 1));
    assert!(matches!(&b.reason, FailureReason::Launch { error } if error.contains("security group")));
    let first_until = b.until;
    assert!(w.now_ms() < first_until, "the run ended within the 1-minute window");

    // The next invocation reads it: its first batch, still within the window, holds the
    // pool back; a later one, once `until` has passed, tries again, and the second
    // failure doubles the window.
    let run2 = w.run("run-2");
    let held = &run2.batches[0];
    assert!(held.launched.is_empty() && held.launch_errors.is_empty());
    assert_eq!(held.backed_off.len(), 1);
    all_backed_off(held);
    let retried = run2
        .batches
        .iter()
        .position(|b| !b.launch_errors.is_empty())
        .expect("tried again once the window passed");
    assert!(retried >= 1);
    assert!(w.launch_calls() > launches_after_first, "tried again after the window");
    let again = &w.backoffs()[0];
    assert_eq!((again.failures, again.windows), (2, 2));
    assert!(again.until - first_until >= 2 * 60_000, "a 2-minute window");
    for later in &run2.batches[retried + 1..] {
        assert!(later.launch_errors.is_empty(), "held back again");
    }

    // Fixed: after the window, it launches, and a node that registers resets the backoff.
    w.cloud.fix_class("default");
    w.clock.advance(Duration::from_secs(180));
    let before = w.launch_calls();
    let run3 = w.run("run-3");
    assert!(w.launch_calls() > before);
    let launched = run3.launched().next().expect("launched once fixed").clone();
    let instance = block_on(w.cloud.get(&launched.instance_id)).unwrap();
    w.cluster.add_node(
        NodeBuilder::new("ip-10-0-0-9")
            .provider_id(&instance.provider_id())
            .node()
            .unwrap(),
    );
    w.clock.advance(Duration::from_secs(30));
    let run4 = w.run("run-4");
    assert!(
        run4.housekeeping[0]
            .registered
            .iter()
            .any(|(id, _)| *id == launched.launch_id)
    );
    assert!(w.backoffs().is_empty(), "a registration resets the backoff");
}

#[test]
fn three_registration_failures_in_a_row_back_the_pool_off() {
    // Launches succeed, but no node ever joins (an access entry missing, say).
    let ttl = Duration::from_secs(60);
    let w = World::new(ttl);
    let mut launches = Vec::new();
    let mut failures = 0;
    for run in 1..=3 {
        let report = w.run(&format!("run-{run}"));
        launches.push(w.launch_calls());
        failures += report
            .housekeeping
            .iter()
            .map(|h| h.not_registered.len())
            .sum::<usize>();
        // The next invocation comes after the TTL has passed for this run's launch.
        w.clock.advance(Duration::from_secs(30));
    }
    assert_eq!(launches, [1, 2, 3], "one launch per run, each never registering");
    assert_eq!(failures, 2, "two registration failures so far");
    let stored = w.backoffs();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].registration_failures, 2);
    assert!(stored[0].until <= w.now_ms(), "two are not enough to back off");

    // The third: housekeeping at the start of the run terminates it and backs off.
    let run4 = w.run("run-4");
    let hk = &run4.housekeeping[0];
    assert_eq!(hk.not_registered.len(), 1);
    assert_eq!(hk.backoffs_set.len(), 1);
    let emf = housekeeping_metrics("prod", 0, std::slice::from_ref(hk));
    assert_eq!(emf["RegistrationFailures"], 1, "the alarm's metric: {emf}");
    assert_eq!(emf["LaunchBackoffs"], 1);
    assert_eq!(w.launch_calls(), 3, "no launch while backed off");
    all_backed_off(&run4.batches[0]);
    // `kubectl describe pod` says why nothing is launched for them.
    let told: Vec<_> = w
        .cluster
        .events()
        .into_iter()
        .filter(|e| e.reason == EventReason::LaunchFailed && e.message.contains("is backed off until "))
        .collect();
    assert_eq!(told.len(), 3, "one Event per held-back pod: {told:?}");
    let b = &w.backoffs()[0];
    assert_eq!((b.failures, b.registration_failures, b.windows), (3, 3, 1));
    assert!(matches!(
        &b.reason,
        FailureReason::NotRegistered {
            instance_id: Some(_),
            ..
        }
    ));
    let message = run4.batches[0].unschedulable[0].reason();
    assert!(
        message.contains("after 3 failed launches") && message.contains("did not register within 60s"),
        "{message}"
    );

    // After the window it is tried again.
    w.clock.advance(Duration::from_secs(60));
    w.run("run-5");
    assert_eq!(w.launch_calls(), 4);
}
