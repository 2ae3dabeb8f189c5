//! The handler on the in-memory ports: an SQS batch answers `batchItemFailures` for the
//! records it could not read or handle, and handles the rest; a bare EventBridge event
//! (the schedule's sweep, or a rule invoking the function directly) works too.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore, StoreErrorKind};
use carpool::model::CapacityType;
use carpool::ports::{Clock, Instance, InstanceState};
use carpool::run::config::Config;
use carpool_interruption::handler::{App, invoke};
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
    let clock = FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START));
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let cloud = FakeCloud::new();
    // A box tagged for the cluster by someone else: not Carpool's to drain.
    cloud.add_instance(Instance {
        id: "i-0123456789abcdef0".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
        nodepool: String::new(),
        launch_id: String::new(),
        deployment: None,
        state: InstanceState::Running,
        launched_at: None,
        network: Default::default(),
    });
    App::new(cloud, FakeCluster::new(), FakeStore::new(), clock, config, region)
}

fn sample(name: &str) -> Value {
    let path = format!("{}/../../shared/tests/data/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn message(id: &str, body: &str) -> Value {
    json!({
        "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
        "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
        "md5OfBody": "", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:carpool-interruption", "awsRegion": "us-east-1"
    })
}

fn invocation(payload: Value) -> LambdaEvent<Value> {
    let mut context = Context::default();
    context.request_id = "req-1".into();
    context.deadline = (START + 150) * 1000;
    LambdaEvent::new(payload, context)
}

#[tokio::test]
async fn a_malformed_message_in_a_batch_of_three_is_the_only_batch_item_failure() {
    let app = app();
    let batch = json!({"Records": [
        message("m-1", &sample("spot-interruption-warning.json").to_string()),
        message("m-2", "{\"version\": \"0\", \"id\": "),
        message("m-3", &sample("instance-state-change-terminated.json").to_string()),
    ]});
    let answer = invoke(&app, invocation(batch)).await.unwrap();
    assert_eq!(answer, json!({"batchItemFailures": [{"itemIdentifier": "m-2"}]}));
    // The other two were handled: their events are recorded, so a redelivery of the
    // batch does nothing twice (and still reports the bad one).
    let again = json!({"Records": [
        message("m-1", &sample("spot-interruption-warning.json").to_string()),
        message("m-2", "not json"),
    ]});
    let answer = invoke(&app, invocation(again)).await.unwrap();
    assert_eq!(answer, json!({"batchItemFailures": [{"itemIdentifier": "m-2"}]}));
}

#[tokio::test]
async fn a_kind_carpool_does_not_handle_is_acknowledged_not_failed() {
    let app = app();
    let mut other = sample("spot-interruption-warning.json");
    other["detail-type"] = json!("EC2 Fast Snapshot Restore State-change Notification");
    let batch = json!({"Records": [message("m-1", &other.to_string())]});
    let answer = invoke(&app, invocation(batch)).await.unwrap();
    assert_eq!(answer, json!({"batchItemFailures": []}));
}

#[tokio::test]
async fn a_handling_that_keeps_failing_is_a_batch_item_failure_to_be_delivered_again() {
    let app = app();
    for _ in 0..=carpool_interruption::handler::RETRIES {
        app.store.fail_next(StoreErrorKind::Throttled);
    }
    let batch = json!({"Records": [message("m-1", &sample("spot-interruption-warning.json").to_string())]});
    let answer = invoke(&app, invocation(batch)).await.unwrap();
    assert_eq!(answer, json!({"batchItemFailures": [{"itemIdentifier": "m-1"}]}));
}

#[tokio::test]
async fn a_transient_error_is_retried_within_the_invocation_not_after_the_visibility_timeout() {
    // Issue 26, item 5: handed back to SQS, the message would come again only after the
    // queue's visibility timeout (900 s), long after a spot warning's two minutes.
    let app = app();
    app.store.fail_next(StoreErrorKind::Throttled);
    app.store.fail_next(StoreErrorKind::Throttled);
    let before = app.clock.now();
    let batch = json!({"Records": [message("m-1", &sample("spot-interruption-warning.json").to_string())]});
    let answer = invoke(&app, invocation(batch)).await.unwrap();
    assert_eq!(answer, json!({"batchItemFailures": []}));
    let waited = app.clock.now().duration_since(before).unwrap();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}

#[tokio::test]
async fn an_event_invoked_directly_by_eventbridge_is_handled_without_the_queue() {
    let app = app();
    let answer = invoke(&app, invocation(sample("spot-interruption-warning.json")))
        .await
        .unwrap();
    assert_eq!(answer["reports"][0]["outcome"], "not_owned", "{answer}");
    // The schedule's sweep, with nothing in progress.
    let answer = invoke(&app, invocation(sample("scheduled-event.json"))).await.unwrap();
    assert_eq!(answer, json!({"reports": []}));
}

#[tokio::test]
async fn an_unreadable_direct_event_is_a_non_retryable_error() {
    let app = app();
    let e = invoke(&app, invocation(json!({"detail-type": "x"}))).await.unwrap_err();
    assert_eq!(e.error_type, "NonRetryable");
}
