//! Issue 11, "Only what Carpool owns": housekeeping terminates only instances that carry
//! Carpool's launch-id tag and this deployment's tag, with a launch time; a few per run;
//! none in dry run. Each fault is reproduced over the in-memory ports.

use std::time::Duration;

use carpool::ports::InstanceState;
use carpool::run::provision::metrics::housekeeping_metrics;

use crate::run_world::{DEPLOYMENT, World, settings, start_ms, tagged};

/// Past the registration TTL (15 min) of an instance launched at the start.
const PAST_TTL: Duration = Duration::from_secs(901);

#[test]
fn an_instance_tagged_for_the_cluster_but_not_launched_by_this_deployment_survives_past_the_ttl() {
    let w = World::new(0);
    // A user's box tagged for the cluster (no deployment tag), another deployment's node,
    // and one without Carpool's launch-id tag: none has a launch record or a Node.
    w.cloud
        .add_instance(tagged("i-users-box", "l-1", None, Some(start_ms())));
    w.cloud
        .add_instance(tagged("i-staging", "l-2", Some("carpool-staging"), Some(start_ms())));
    w.cloud
        .add_instance(tagged("i-no-launch-id", "", Some(DEPLOYMENT), Some(start_ms())));
    // And one of this deployment's, to show housekeeping does run.
    w.cloud
        .add_instance(tagged("i-ours", "l-3", Some(DEPLOYMENT), Some(start_ms())));
    w.advance(PAST_TTL);
    let report = w.run("run-1");
    let housekeeping = &report.housekeeping[0];
    assert_eq!(
        housekeeping
            .terminated
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["i-ours"]
    );
    for id in ["i-users-box", "i-staging", "i-no-launch-id"] {
        assert_eq!(w.state(id), Some(InstanceState::Running), "{id}");
        assert!(
            housekeeping.spared.iter().any(|(s, _)| s == id),
            "{id}: {housekeeping:?}"
        );
    }
    assert!(!w.cloud.calls().iter().any(|c| c.starts_with("terminate i-users-box")));
    // Still so a day later.
    w.advance(Duration::from_secs(86_400));
    w.run("run-2");
    for id in ["i-users-box", "i-staging", "i-no-launch-id"] {
        assert_eq!(w.state(id), Some(InstanceState::Running), "{id}");
    }
}

#[test]
fn an_instance_without_a_launch_time_survives() {
    let w = World::new(0);
    w.cloud
        .add_instance(tagged("i-timeless", "l-1", Some(DEPLOYMENT), None));
    w.advance(PAST_TTL);
    let report = w.run("run-1");
    assert_eq!(w.state("i-timeless"), Some(InstanceState::Running));
    assert!(report.housekeeping[0].terminated.is_empty());
    assert_eq!(report.housekeeping[0].spared.len(), 1, "{:?}", report.housekeeping);
    assert!(report.housekeeping[0].spared[0].1.contains("no launch time"));
}

#[test]
fn past_the_cap_terminations_are_held_back_and_the_metric_says_how_many() {
    let w = World::new(0);
    let ids: Vec<String> = (0..7).map(|n| format!("i-orphan-{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        w.cloud
            .add_instance(tagged(id, &format!("lost-{n}"), Some(DEPLOYMENT), Some(start_ms())));
    }
    w.advance(PAST_TTL);
    let report = w.run("run-1");
    let housekeeping = &report.housekeeping[0];
    // 7 instances of Carpool's: the cap is max(3, 10% of 7) = 3.
    assert_eq!(housekeeping.terminated.len(), 3, "{housekeeping:?}");
    assert_eq!(housekeeping.held_back.len(), 4, "{housekeeping:?}");
    let terminated = w
        .cloud
        .instances()
        .iter()
        .filter(|i| i.state == InstanceState::Terminated)
        .count();
    assert_eq!(terminated, 3);
    let metrics = housekeeping_metrics("prod", 0, &report.housekeeping);
    assert_eq!(metrics["TerminationsHeldBack"], 4);
    assert_eq!(metrics["InstancesTerminated"], 3);
    // The next run goes on, a few at a time.
    let next = w.run("run-2");
    assert_eq!(next.housekeeping[0].terminated.len(), 3);
    assert_eq!(next.housekeeping[0].held_back.len(), 1);
}

#[test]
fn dry_run_terminates_nothing_and_reports_what_it_would_terminate() {
    let w = World::new(0);
    w.cloud
        .add_instance(tagged("i-orphan", "lost-1", Some(DEPLOYMENT), Some(start_ms())));
    w.advance(PAST_TTL);
    let mut dry = settings();
    dry.dry_run = true;
    let report = w.run_with("run-1", dry);
    let housekeeping = &report.housekeeping[0];
    assert!(housekeeping.terminated.is_empty());
    assert_eq!(housekeeping.would_terminate.len(), 1, "{housekeeping:?}");
    assert_eq!(housekeeping.would_terminate[0].0, "i-orphan");
    assert!(housekeeping.would_terminate[0].1.contains("no launch record"));
    assert_eq!(w.state("i-orphan"), Some(InstanceState::Running));
    assert!(!w.cloud.calls().iter().any(|c| c.starts_with("terminate")));
}
