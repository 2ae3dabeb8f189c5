//! The drain over the in-memory cluster: tiers, PDBs that hold it and let it go, the
//! apiserver's throttling, the deadline and the waits before it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use carpool::decide::disruption::drain::StayReason;
use carpool::fakes::{ClusterErrorKind, FakeClock, FakeCluster, PDB_BLOCKS};
use carpool::fixtures::{PodBuilder, pdb};
use carpool::model::well_known::MIRROR_ANNOTATION;
use carpool::ports::{Clock, Cluster, PodRef, Timer};
use carpool::run::drain::{BlockReason, DrainError, DrainPass, DrainReport, DrainSettings, drain, drain_with};
use serde_json::json;

const NODE: &str = "spot-1";

fn start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A FakeClock that also records each wait.
struct Recording {
    clock: FakeClock,
    sleeps: Mutex<Vec<Duration>>,
}

impl Recording {
    fn new() -> Self {
        Recording {
            clock: FakeClock::at(start()),
            sleeps: Mutex::new(Vec::new()),
        }
    }

    fn sleeps(&self) -> Vec<Duration> {
        self.sleeps.lock().unwrap().clone()
    }

    fn settings(&self, seconds: u64) -> DrainSettings {
        DrainSettings::until(start() + Duration::from_secs(seconds))
    }
}

impl Clock for Recording {
    fn now(&self) -> SystemTime {
        self.clock.now()
    }
}

impl Timer for Recording {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.sleeps.lock().unwrap().push(duration);
        self.clock.sleep(duration)
    }
}

fn secs(list: &[u64]) -> Vec<Duration> {
    list.iter().map(|s| Duration::from_secs(*s)).collect()
}

/// A Running, Ready pod `shop/<name>` of a ReplicaSet (label `app=<app>`) on `node`.
fn pod_on(node: &str, name: &str, app: &str) -> PodBuilder {
    PodBuilder::new(name)
        .namespace("shop")
        .uid(name)
        .label("app", app)
        .owner("apps/v1", "ReplicaSet", &format!("{app}-rs"))
        .spec("nodeName", json!(node))
        .running()
}

fn add(cluster: &FakeCluster, pod: PodBuilder) {
    cluster.add_pod(pod.pod().unwrap());
}

fn web_pdb(budget: serde_json::Value) -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
    pdb("shop", "web", json!({"matchLabels": {"app": "web"}}), budget).unwrap()
}

fn evictions(cluster: &FakeCluster) -> Vec<String> {
    cluster
        .calls()
        .into_iter()
        .filter_map(|c| c.strip_prefix("evict shop/").map(str::to_string))
        .collect()
}

/// Drains [`NODE`] with a 90-second deadline.
fn drain90(cluster: &FakeCluster, clock: &Recording) -> Result<DrainReport, DrainError> {
    pollster::block_on(drain(cluster, clock, NODE, &clock.settings(90)))
}

/// [`drain90`], resuming after `before` and calling `on_pass` after each pass.
fn drain90_with(
    cluster: &FakeCluster,
    clock: &Recording,
    before: &[PodRef],
    on_pass: impl FnMut(&DrainPass),
) -> Result<DrainReport, DrainError> {
    pollster::block_on(drain_with(cluster, clock, NODE, &clock.settings(90), before, on_pass))
}

/// A cluster with the pod `shop/app-0` on [`NODE`].
fn one_pod() -> FakeCluster {
    let cluster = FakeCluster::new();
    add(&cluster, pod_on(NODE, "app-0", "app"));
    cluster
}

fn names(pods: &[PodRef]) -> Vec<&str> {
    pods.iter().map(|p| p.name.as_str()).collect()
}

/// Karpenter `pkg/controllers/node/termination/suite_test.go` "should evict non-critical
/// pods first" (and `Terminator.Evict`: only the first non-empty list is evicted per
/// call); kubectl `pkg/drain/filters.go` leaves DaemonSet and mirror pods.
#[test]
fn critical_pods_go_only_after_every_other_pod_and_daemonset_and_mirror_pods_stay() {
    let cluster = one_pod();
    add(
        &cluster,
        pod_on(NODE, "dns", "dns").spec("priorityClassName", json!("system-cluster-critical")),
    );
    add(
        &cluster,
        pod_on(NODE, "app-1", "app").spec("terminationGracePeriodSeconds", json!(60)),
    );
    add(
        &cluster,
        pod_on(NODE, "agent", "agent").owner("apps/v1", "DaemonSet", "agent"),
    );
    add(
        &cluster,
        pod_on(NODE, "static", "static").annotation(MIRROR_ANNOTATION, "x"),
    );
    add(&cluster, pod_on("elsewhere", "other", "app"));
    let clock = Recording::new();
    let report = drain90(&cluster, &clock).unwrap();
    assert!(report.drained);
    // The longer grace first within the tier; the critical tier in a pass of its own.
    assert_eq!(evictions(&cluster), ["app-1", "app-0", "dns"]);
    assert_eq!(names(&report.evicted), ["app-1", "app-0", "dns"]);
    assert_eq!(report.passes, 2);
    assert!(clock.sleeps().is_empty(), "nothing blocked, nothing to wait for");
    let stayed: Vec<(&str, StayReason)> = report.stayed.iter().map(|s| (s.pod.name.as_str(), s.reason)).collect();
    assert_eq!(
        stayed,
        [("agent", StayReason::DaemonSet), ("static", StayReason::Mirror)]
    );
    assert!(cluster.pod("shop", "agent").is_some() && cluster.pod("shop", "other").is_some());
}

/// The main case: a PDB with `minAvailable: replicas - 1` over 3 pods lets one go
/// at a time; the ReplicaSet's replacement, Ready on another node, lets the next go.
#[test]
fn a_pdb_of_replicas_minus_one_lets_one_pod_go_per_pass_until_the_node_is_drained() {
    let cluster = FakeCluster::new();
    for i in 0..3 {
        add(&cluster, pod_on(NODE, &format!("web-{i}"), "web"));
    }
    cluster.add_pdb(web_pdb(json!({"minAvailable": 2})));
    let clock = Recording::new();
    let mut passes: Vec<DrainPass> = Vec::new();
    let mut healthy_seen = Vec::new();
    let report = drain90_with(&cluster, &clock, &[], |pass: &DrainPass| {
        let pdbs = pollster::block_on(cluster.pdbs()).unwrap();
        let status = pdbs[0].status.clone().unwrap();
        healthy_seen.push(status.current_healthy);
        // The ReplicaSet replaces each evicted pod on the new node.
        for evicted in &pass.evicted {
            let name = format!("{}-new", evicted.pod.name);
            cluster.add_pod(pod_on("on-demand-1", &name, "web").pod().unwrap());
        }
        passes.push(pass.clone());
    })
    .unwrap();
    assert!(report.drained);
    assert_eq!(report.passes, 3);
    let per_pass: Vec<(usize, usize)> = passes.iter().map(|p| (p.evicted.len(), p.blocked.len())).collect();
    assert_eq!(per_pass, [(1, 2), (1, 1), (1, 0)]);
    assert!(healthy_seen.iter().all(|h| *h >= 2), "the PDB held: {healthy_seen:?}");
    // Each blocked pass made progress, so the wait stays at its first step.
    assert_eq!(clock.sleeps(), secs(&[1, 1]));
    let blocked = &passes[0].blocked[0];
    assert_eq!(blocked.pdb_names(), "shop/web");
    assert_eq!(blocked.disruptions_allowed(), Some(0));
    assert_eq!(
        blocked.reason,
        BlockReason::Budget {
            message: PDB_BLOCKS.to_string()
        }
    );
}

/// aws-node-termination-handler #936: a drain that times out must say which pod held it.
#[test]
fn a_pdb_that_allows_nothing_holds_the_drain_to_the_deadline_and_is_named() {
    let cluster = FakeCluster::new();
    add(&cluster, pod_on(NODE, "web-0", "web"));
    add(&cluster, pod_on(NODE, "api-0", "api"));
    cluster.add_pdb(web_pdb(json!({"maxUnavailable": 0})));
    let clock = Recording::new();
    let settings = clock.settings(90);
    let report = pollster::block_on(drain(&cluster, &clock, NODE, &settings)).unwrap();
    assert!(!report.drained);
    assert_eq!(names(&report.evicted), ["api-0"]);
    assert_eq!(report.blocked.len(), 1);
    let blocked = &report.blocked[0];
    assert_eq!(blocked.pod.pod.key(), "shop/web-0");
    assert_eq!(blocked.pdb_names(), "shop/web");
    assert_eq!(blocked.disruptions_allowed(), Some(0));
    assert_eq!(
        blocked.to_string(),
        format!("shop/web-0: {PDB_BLOCKS} (PDB shop/web allows 0 disruption(s): 1 healthy, 1 desired, 1 expected)")
    );
    assert_eq!(clock.now(), settings.deadline);
    assert_eq!(report.elapsed, Duration::from_secs(90));
    assert!(cluster.pod("shop", "web-0").is_some());
}

#[test]
fn the_wait_doubles_to_its_cap_and_never_runs_past_the_deadline() {
    let cluster = FakeCluster::new();
    add(&cluster, pod_on(NODE, "web-0", "web"));
    cluster.add_pdb(web_pdb(json!({"maxUnavailable": 0})));
    let clock = Recording::new();
    let settings = clock.settings(40);
    let report = pollster::block_on(drain(&cluster, &clock, NODE, &settings)).unwrap();
    assert_eq!(clock.sleeps(), secs(&[1, 2, 4, 8, 10, 10, 5]));
    assert_eq!(clock.now(), settings.deadline);
    // A pass after each wait, the last one at the deadline.
    assert_eq!(report.passes, 8);
}

/// A 429 that is not a PDB's (the apiserver's priority and fairness) fails one eviction,
/// which the next pass tries again; the drain goes on.
#[test]
fn a_throttled_eviction_is_tried_again_by_the_next_pass() {
    let cluster = FakeCluster::new();
    for i in 0..3 {
        add(&cluster, pod_on(NODE, &format!("app-{i}"), "app"));
    }
    cluster.fail_on("evict shop/app-1", ClusterErrorKind::Throttled);
    let clock = Recording::new();
    let mut first: Option<DrainPass> = None;
    let report = drain90_with(&cluster, &clock, &[], |p: &DrainPass| {
        first.get_or_insert_with(|| p.clone());
    })
    .unwrap();
    assert!(report.drained);
    assert_eq!(report.passes, 2);
    assert_eq!(names(&report.evicted), ["app-0", "app-2", "app-1"]);
    let first = first.unwrap();
    assert!(
        matches!(first.blocked[0].reason, BlockReason::Throttled { .. }),
        "{first:?}"
    );
    assert!(first.blocked[0].pdbs.is_empty());
    assert_eq!(clock.sleeps(), secs(&[1]));
}

#[test]
fn a_throttled_listing_is_tried_again() {
    let cluster = one_pod();
    cluster.fail_next(ClusterErrorKind::Throttled);
    let clock = Recording::new();
    let report = drain90(&cluster, &clock).unwrap();
    assert!(report.drained);
    assert_eq!(report.passes, 2);
}

#[test]
fn an_eviction_the_apiserver_refuses_otherwise_ends_the_drain_naming_the_pod() {
    let cluster = one_pod();
    cluster.fail_on("evict shop/app-0", ClusterErrorKind::Unauthorized);
    let clock = Recording::new();
    let err = drain90(&cluster, &clock).unwrap_err();
    assert!(
        matches!(&err, DrainError::Evict { pod, .. } if pod == "shop/app-0"),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}

/// On the apiserver an evicted pod lingers, terminating, for its grace period: the node
/// counts as drained, and the report lists the pods still terminating.
#[test]
fn terminating_pods_count_as_drained_and_are_reported() {
    let cluster = FakeCluster::new();
    add(
        &cluster,
        pod_on(NODE, "leaving", "app").deleting("2026-09-21T12:00:00Z"),
    );
    let clock = Recording::new();
    let report = drain90(&cluster, &clock).unwrap();
    assert!(report.drained);
    assert!(report.evicted.is_empty());
    assert_eq!(
        report.terminating().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["leaving"]
    );
}

/// A drain resumed after a crash does not evict again what was evicted before, even if a
/// listing still shows it running.
#[test]
fn a_resumed_drain_does_not_evict_again_what_it_evicted_before() {
    let cluster = one_pod();
    add(&cluster, pod_on(NODE, "app-1", "app"));
    let before = [PodRef {
        namespace: "shop".into(),
        name: "app-0".into(),
        uid: Some("app-0".into()),
    }];
    let clock = Recording::new();
    let report = drain90_with(&cluster, &clock, &before, |_| ()).unwrap();
    assert!(report.drained);
    assert_eq!(evictions(&cluster), ["app-1"]);
    assert_eq!(names(&report.evicted), ["app-1"]);
}

#[test]
fn a_drain_past_its_deadline_still_makes_one_pass() {
    let cluster = one_pod();
    let clock = Recording::new();
    clock.clock.advance(Duration::from_secs(100));
    let report = drain90(&cluster, &clock).unwrap();
    assert!(report.drained);
    assert_eq!(report.passes, 1);
    assert!(clock.sleeps().is_empty());
}

#[test]
fn pods_that_vanish_before_their_eviction_count_as_done() {
    let cluster = one_pod();
    cluster.fail_on("evict shop/app-0", ClusterErrorKind::NotFound);
    let clock = Recording::new();
    let report = drain90(&cluster, &clock).unwrap();
    assert!(report.drained);
    assert_eq!(names(&report.gone), ["app-0"]);
}
