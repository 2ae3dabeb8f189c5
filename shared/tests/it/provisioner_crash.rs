//! A provisioner run that crashes at each await point that changes state, and the runs
//! that follow: they converge. Nothing is launched twice, no instance is left without a
//! launch record that follows it up, and every pending pod ends with exactly one launch
//! providing for it.
//!
//! The crash is made to happen: the store and the cloud share a [`CrashPoint`], and from
//! the moment it fires no call on either completes; the run's future is then dropped,
//! as a Lambda timeout or a crash would stop it.

use std::collections::BTreeMap;
use std::time::Duration;

use carpool::catalog::Catalog;
use carpool::fakes::{CrashPoint, Crashable, run_until_crash};
use carpool::ports::{InstanceState, LaunchState, StateStore};
use carpool::run::provision::{Provisioner, Settings};
use k8s_openapi::api::core::v1::Node;
use pollster::block_on;
use serde_json::json;

use crate::run_world::{self, World};

/// Pending pods: enough for several nodes, so that a crash can fall between launches.
const PODS: usize = 40;

/// A short watch, one batch, no waves (nothing here releases them but the kubelet).
fn settings() -> Settings {
    Settings {
        watch: Duration::from_secs(5),
        release_limit: Duration::from_secs(5),
        wave_grace: Duration::ZERO,
        ..run_world::settings()
    }
}

/// The kubelets: every running instance that is not a Node yet registers, Ready, with
/// its type's labels and allocatable.
fn kubelet(w: &World) {
    let catalog = Catalog::embedded().unwrap();
    let now = k8s_openapi::jiff::Timestamp::from_millisecond(w.clock_ms())
        .unwrap()
        .to_string();
    for i in w.cloud.instances() {
        let name = format!("node-{}", i.id);
        if i.state != InstanceState::Running || w.cluster.node(&name).is_some() {
            continue;
        }
        let it = catalog.get(&i.instance_type).unwrap();
        let mut labels: BTreeMap<String, String> = it.labels();
        labels.insert("karpenter.sh/nodepool".into(), i.nodepool.clone());
        labels.insert("topology.kubernetes.io/zone".into(), i.zone.clone());
        labels.insert("karpenter.sh/capacity-type".into(), i.capacity_type.label().into());
        labels.insert("kubernetes.io/hostname".into(), name.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": format!("aws:///{}/{}", i.zone, i.id)},
            "status": {"allocatable": it.allocatable.to_k8s(),
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}
        }))
        .unwrap();
        w.cluster.add_node(node);
    }
}

/// One run by `owner` that crashes at `point`; panics if it did not.
fn crashed_run(w: &World, owner: &str, point: &CrashPoint) {
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let store = Crashable::new(&w.store, point);
    let cloud = Crashable::new(&w.cloud, point);
    let mut p = Provisioner::new(&cloud, &w.cluster, &store, &w.clock, settings(), owner);
    let outcome = run_until_crash(point, p.run(&region));
    assert!(outcome.is_none() && point.fired(), "the run did not crash at {point:?}");
}

/// Runs a minute apart, the kubelets registering what was launched, for 20 minutes:
/// past the crashed run's lease and the registration TTL (15 minutes).
fn converge(w: &World) {
    for round in 0..20 {
        kubelet(w);
        w.advance(Duration::from_secs(60));
        w.run_with(&format!("after-{round}"), settings());
    }
    kubelet(w);
}

/// The invariants once the runs have converged.
fn assert_converged(w: &World, step: &str) {
    let launches = block_on(w.store.list_launches()).unwrap();
    let instances = w.cloud.instances();
    let running = |id: &Option<String>| {
        id.as_ref().is_some_and(|id| {
            instances
                .iter()
                .any(|i| &i.id == id && i.state == InstanceState::Running)
        })
    };
    let live: Vec<_> = launches
        .iter()
        .filter(|l| !matches!(l.state, LaunchState::Failed { .. }) && running(&l.instance_id))
        .collect();
    // Nothing launched twice, and no pod left without capacity: exactly one live launch
    // provides for each pod.
    for i in 0..PODS {
        let pod = format!("web/web-{i}");
        let providers = live.iter().filter(|l| l.pods.contains(&pod)).count();
        assert_eq!(
            providers, 1,
            "{step}: {pod} is provided for by {providers} launches: {launches:#?}"
        );
    }
    // No instance orphaned: every instance still running is followed by one launch
    // record, and none was terminated (nothing unneeded was launched).
    for i in &instances {
        assert_eq!(i.state, InstanceState::Running, "{step}: {i:?} was terminated");
        let records = live.iter().filter(|l| l.instance_id.as_deref() == Some(&i.id)).count();
        assert_eq!(records, 1, "{step}: instance {} has {records} launch records", i.id);
        assert!(w.cluster.node(&format!("node-{}", i.id)).is_some());
    }
}

/// A crash-free run's launches, for comparison: the crashes below must fall between
/// launches of one batch.
fn launches_without_a_crash() -> usize {
    let w = World::new(PODS);
    let report = w.run_with("run-1", settings());
    report.launched().count()
}

fn crash_then_converge(point: CrashPoint, step: &str) {
    assert!(launches_without_a_crash() >= 2, "the batch must launch several nodes");
    let w = World::new(PODS);
    crashed_run(&w, "run-1", &point);
    converge(&w);
    assert_converged(&w, step);
}

#[test]
fn a_crash_after_taking_the_lease_is_followed_by_runs_that_converge() {
    // The lease is held until it lapses (the watch plus a minute); the run after that
    // provisions.
    crash_then_converge(CrashPoint::after("acquire_lease", 0), "after the lease");
}

#[test]
fn a_crash_after_the_launch_record_and_before_create_fleet_converges() {
    // The second node's record is written, its CreateFleet never sent: the record counts
    // in flight until housekeeping finds no instance for it, then its pods are planned
    // again.
    crash_then_converge(CrashPoint::after("create_launch", 1), "after the launch record");
}

#[test]
fn a_crash_after_create_fleet_and_before_the_instance_is_recorded_converges() {
    // The instance runs, its record has no instance id: housekeeping finds it by its
    // launch-id tag.
    crash_then_converge(CrashPoint::after("launch", 1), "after CreateFleet");
}

#[test]
fn a_crash_after_the_instance_record_converges() {
    crash_then_converge(CrashPoint::after("update_launch", 1), "after the instance record");
}

#[test]
fn a_crash_mid_housekeeping_converges() {
    // A first run launches; the nodes register; the second run's housekeeping crashes
    // once it has recorded one registration of several.
    let w = World::new(PODS);
    let first = w.run_with("run-1", settings());
    assert!(first.launched().count() >= 2);
    kubelet(&w);
    w.advance(Duration::from_secs(90));
    let point = CrashPoint::after("update_launch", 0);
    crashed_run(&w, "run-2", &point);
    let registered = block_on(w.store.list_launches())
        .unwrap()
        .iter()
        .filter(|l| matches!(l.state, LaunchState::Registered { .. }))
        .count();
    assert_eq!(registered, 1, "the crash fell mid-housekeeping");
    converge(&w);
    assert_converged(&w, "mid-housekeeping");
}
