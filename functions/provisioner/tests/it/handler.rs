//! The handler on the in-memory ports, invoked with the scheduled EventBridge event the
//! schedule sends.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore, StoreErrorKind};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::CapacityType;
use carpool::ports::{Cloud, SpotPrice};
use carpool::run::config::Config;
use carpool_adapters::edge::ErrorType;
use carpool_provisioner::handler::{App, invoke};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

const START: u64 = 1_796_000_000;

fn app() -> App<FakeCloud, FakeCluster, FakeStore, FakeClock> {
    let config = Config::from_vars(|k| match k {
        "CARPOOL_CLUSTER_NAME" => Some("prod".into()),
        "CARPOOL_TABLE_NAME" => Some("carpool".into()),
        "AWS_REGION" => Some("us-east-1".into()),
        _ => None,
    })
    .unwrap();
    let cluster = FakeCluster::new();
    cluster.add_nodepool(
        NodePoolBuilder::new("default")
            .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
            .build(),
    );
    cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
    for i in 0..8 {
        cluster.add_pod(
            PodBuilder::new(&format!("api-{i}"))
                .namespace("shop")
                .created("2026-11-30T11:59:58Z")
                .requests("1", "2Gi")
                .unschedulable()
                .pod()
                .unwrap(),
        );
    }
    let clock = FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START));
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    App::new(FakeCloud::new(), cluster, FakeStore::new(), clock, config, region)
}

fn event(payload: Value, request_id: &str) -> LambdaEvent<Value> {
    let mut context = Context::default();
    context.request_id = request_id.into();
    context.deadline = (START + 60) * 1000;
    LambdaEvent::new(payload, context)
}

fn scheduled_event() -> Value {
    serde_json::from_str(include_str!("../fixtures/scheduled-event.json")).unwrap()
}

#[tokio::test]
async fn a_scheduled_invocation_launches_for_the_pending_pods_and_returns_the_summary() {
    let app = app();
    let summary = invoke(&app, event(scheduled_event(), "req-1")).await.unwrap();
    assert_eq!(summary["pods_seen"], 8);
    assert!(summary["nodes_launched"].as_u64().unwrap() >= 1, "{summary}");
    assert!(summary["cost_per_hour_added"].as_f64().unwrap() > 0.0);
    assert!(summary["pending_to_fleet_p50_ms"].is_u64());
    assert_eq!(summary["unschedulable"], json!([]));
    let launched = summary["launched"].as_array().unwrap();
    assert!(launched.iter().all(|l| l["capacity_type"] == "on-demand"), "{summary}");
    assert_eq!(app.cloud.list().await.unwrap().len(), launched.len());
    // The run kept within the deadline less the margin: 60 s - 15 s.
    assert!(summary["watched_ms"].as_u64().unwrap() <= 46_000, "{summary}");
}

#[tokio::test]
async fn an_invocation_without_a_schedule_event_runs_the_same() {
    let app = app();
    let summary = invoke(&app, event(json!({}), "manual")).await.unwrap();
    assert_eq!(summary["pods_seen"], 8);
}

#[tokio::test]
async fn a_state_store_failure_fails_the_invocation_so_the_errors_alarm_sees_it() {
    let app = app();
    app.store.fail_next(StoreErrorKind::Api);
    let result = invoke(&app, event(scheduled_event(), "req-1")).await;
    assert!(result.is_err());
    assert!(app.cloud.list().await.unwrap().is_empty(), "nothing launched");
}

#[tokio::test]
async fn a_failed_run_says_whether_it_is_retryable_in_its_error_type() {
    let app = app();
    app.store.fail_next(StoreErrorKind::Throttled);
    let error = invoke(&app, event(scheduled_event(), "req-1")).await.unwrap_err();
    assert_eq!(error.error_type, "Retryable", "{error:?}");
    assert_eq!(error.error_type, ErrorType::Retryable.as_str());

    let app = self::app();
    app.store.fail_next(StoreErrorKind::Api);
    let error = invoke(&app, event(scheduled_event(), "req-2")).await.unwrap_err();
    assert_eq!(error.error_type, "NonRetryable", "{error:?}");
    assert!(error.error_message.contains("injected"), "{error:?}");
}

#[tokio::test]
async fn an_invocation_plans_on_live_spot_prices_read_once_an_hour() {
    let app = app();
    app.cloud.set_spot_prices(vec![SpotPrice {
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        price: 0.0123,
    }]);
    invoke(&app, event(scheduled_event(), "req-1")).await.unwrap();
    let region = app.catalog.region();
    let m5 = region.types().iter().find(|t| t.name == "m5.large").unwrap();
    assert_eq!(
        region.prices().price(m5, "us-east-1a", CapacityType::Spot),
        Some(0.0123)
    );
    invoke(&app, event(scheduled_event(), "req-2")).await.unwrap();
    let reads = app
        .cloud
        .calls()
        .iter()
        .filter(|c| c.starts_with("spot_prices"))
        .count();
    assert_eq!(reads, 1, "the second invocation, within the hour, does not read again");
}
