//! The in-memory cloud keeps the Cloud contract, and injects the failures tests need.

use carpool::fakes::{CloudFault, FakeCloud};
use carpool::model::CapacityType;
use carpool::ports::{Cloud, CloudError, InstanceState, LaunchRequest, OfferingKey, OnDemandPrice, ZonalOffering};
use pollster::block_on;

fn request(types: &[&str]) -> LaunchRequest {
    LaunchRequest {
        launch_id: "launch-1".into(),
        deployment: "carpool-test".into(),
        nodepool: "default".into(),
        node_class: carpool::model::EC2NodeClass::named("default"),
        instance_types: types.iter().map(|t| t.to_string()).collect(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
    }
}

fn offering(t: &str) -> OfferingKey {
    OfferingKey {
        instance_type: t.into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
    }
}

#[test]
fn a_launch_takes_the_first_type_with_capacity() {
    let cloud = FakeCloud::new();
    cloud.exhaust(offering("m7g.large"));
    let i = block_on(cloud.launch(&request(&["m7g.large", "m6g.large"]))).unwrap();
    assert_eq!(i.instance_type, "m6g.large");
    assert_eq!(i.state, InstanceState::Running);
    assert!(i.provider_id().starts_with("aws:///us-east-1a/i-"));
}

#[test]
fn no_capacity_anywhere_is_insufficient_capacity_naming_every_offering() {
    let cloud = FakeCloud::new();
    cloud.exhaust(offering("m7g.large"));
    cloud.limit(offering("m6g.large"), 0);
    let err = block_on(cloud.launch(&request(&["m7g.large", "m6g.large"]))).unwrap_err();
    match err {
        CloudError::InsufficientCapacity { offerings } => {
            assert_eq!(offerings, vec![offering("m7g.large"), offering("m6g.large")])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn terminating_is_idempotent_and_terminated_instances_leave_the_list() {
    let cloud = FakeCloud::new();
    let i = block_on(cloud.launch(&request(&["m7g.large"]))).unwrap();
    block_on(cloud.terminate(&i.id)).unwrap();
    block_on(cloud.terminate(&i.id)).unwrap();
    block_on(cloud.terminate("i-unknown")).unwrap();
    assert!(block_on(cloud.list()).unwrap().is_empty());
    assert!(matches!(
        block_on(cloud.get("i-unknown")),
        Err(CloudError::NotFound { .. })
    ));
}

#[test]
fn injected_faults_fail_one_call_each_and_calls_are_recorded() {
    let cloud = FakeCloud::new();
    cloud.inject(CloudFault::Throttled);
    assert!(matches!(block_on(cloud.list()), Err(CloudError::Throttled { .. })));
    assert!(block_on(cloud.list()).is_ok());
    assert_eq!(cloud.calls(), vec!["list", "list"]);
}

#[test]
fn on_demand_prices_answer_for_the_asked_types_and_calls_are_recorded() {
    let cloud = FakeCloud::new();
    let price = |t: &str, p: f64| OnDemandPrice {
        instance_type: t.into(),
        price: p,
    };
    cloud.set_on_demand_prices(vec![price("m5.large", 0.096), price("c5.large", 0.085)]);
    let got = block_on(cloud.on_demand_prices(&["m5.large".to_string(), "r5.large".to_string()])).unwrap();
    assert_eq!(got, vec![price("m5.large", 0.096)]);
    cloud.inject(CloudFault::Throttled);
    assert!(matches!(
        block_on(cloud.on_demand_prices(&["m5.large".to_string()])),
        Err(CloudError::Throttled { .. })
    ));
    assert_eq!(
        cloud.calls(),
        vec!["on_demand_prices m5.large,r5.large", "on_demand_prices m5.large"]
    );
}

#[test]
fn offerings_answer_what_was_set() {
    let cloud = FakeCloud::new();
    assert!(block_on(cloud.offerings()).unwrap().is_empty());
    let offering = ZonalOffering {
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
    };
    cloud.set_offerings(vec![offering.clone()]);
    assert_eq!(block_on(cloud.offerings()).unwrap(), vec![offering]);
    cloud.inject(CloudFault::Api);
    assert!(matches!(block_on(cloud.offerings()), Err(CloudError::Api(_))));
    assert_eq!(cloud.calls(), vec!["offerings", "offerings", "offerings"]);
}

#[test]
fn the_fake_cloud_keeps_the_cloud_contract() {
    block_on(carpool::fakes::cloud_contract(
        &FakeCloud::new(),
        &request(&["m5.large", "c5.large"]),
    ));
}

#[test]
fn a_launch_that_times_out_after_launching_leaves_a_tagged_instance_and_other_calls_pass_it_by() {
    let cloud = FakeCloud::new();
    cloud.inject(CloudFault::LaunchedThenUnknown);
    assert!(block_on(cloud.list()).unwrap().is_empty(), "a list passes the fault by");
    let launched = block_on(cloud.launch(&request(&["m5.large"])));
    assert!(matches!(&launched, Err(e) if e.is_outcome_unknown()), "{launched:?}");
    let listed = block_on(cloud.list()).unwrap();
    assert_eq!(listed.len(), 1, "the instance exists all the same");
    assert_eq!(listed[0].launch_id, "launch-1");
    assert_eq!(listed[0].deployment.as_deref(), Some("carpool-test"));
    assert!(block_on(cloud.launch(&request(&["m5.large"]))).is_ok(), "one call only");
}
