//! Issue 11, "A launch is never lost, and never doubled": a CreateFleet whose outcome is
//! unknown keeps its record in flight until its instance is found by its launch-id tag,
//! and a launch whose instance is gone stops counting as capacity at once. Each fault is
//! reproduced over the in-memory ports.

use std::time::Duration;

use carpool::fakes::CloudFault;
use carpool::ports::{Cloud, LaunchState, StateStore};
use pollster::block_on;

use crate::run_world::World;

fn launch_calls(w: &World) -> usize {
    w.cloud.calls().iter().filter(|c| c.starts_with("launch ")).count()
}

#[test]
fn a_create_fleet_that_times_out_after_launching_is_found_by_its_tag_and_nothing_launches_twice() {
    let w = World::new(3);
    // EC2 starts the instance, and the answer is lost.
    w.cloud.inject(CloudFault::LaunchedThenUnknown);
    let first = w.run("run-1");
    assert_eq!(first.launched().count(), 0, "the run never saw the launch succeed");
    assert_eq!(first.batches[0].launch_errors.len(), 1, "{:?}", first.batches[0]);
    assert!(
        first.batches[0].unschedulable.is_empty(),
        "the pods are provided for by the record in flight: {:?}",
        first.batches[0].unschedulable
    );
    let instances = block_on(w.cloud.list()).unwrap();
    assert_eq!(instances.len(), 1);
    // The housekeeping after the batch found the instance by its launch-id tag and
    // recorded it; the record stayed in flight throughout.
    let launches = block_on(w.store.list_launches()).unwrap();
    assert_eq!(launches.len(), 1);
    assert_eq!(launches[0].state, LaunchState::InFlight);
    assert_eq!(launches[0].instance_id.as_deref(), Some(instances[0].id.as_str()));
    assert_eq!(launches[0].id, instances[0].launch_id);
    let reconciled: Vec<_> = first.housekeeping.iter().flat_map(|h| h.reconciled.clone()).collect();
    assert_eq!(reconciled, vec![(launches[0].id.clone(), instances[0].id.clone())]);

    // The next run launches nothing: the pods are on the instance in flight.
    w.advance(Duration::from_secs(10));
    let second = w.run("run-2");
    assert_eq!(second.launched().count(), 0, "{:?}", second.batches);
    assert_eq!(launch_calls(&w), 1, "one CreateFleet in all");
    assert_eq!(block_on(w.cloud.list()).unwrap().len(), 1);
}

#[test]
fn a_launch_whose_instance_is_gone_stops_counting_as_capacity_and_its_pods_are_planned_again() {
    let w = World::new(3);
    let first = w.run("run-1");
    assert_eq!(first.launched().count(), 1);
    let gone = first.launched().next().unwrap().instance_id.clone();
    // EC2 reclaims it while it boots (a spot interruption, a bad KMS key).
    w.cloud.reclaim(&gone);
    w.advance(Duration::from_secs(10));
    let second = w.run("run-2");
    let lost = &second.housekeeping[0].lost;
    assert_eq!(lost.len(), 1, "{:?}", second.housekeeping);
    assert!(lost[0].1.contains(&gone), "{lost:?}");
    assert_eq!(
        second.launched().count(),
        1,
        "the pods are planned again: {:?}",
        second.batches
    );
    assert_eq!(launch_calls(&w), 2);
    let launches = block_on(w.store.list_launches()).unwrap();
    let in_flight: Vec<_> = launches.iter().filter(|l| l.state == LaunchState::InFlight).collect();
    assert_eq!(in_flight.len(), 1);
    assert_ne!(in_flight[0].instance_id.as_deref(), Some(gone.as_str()));
}
