//! The interruption events, as the function receives them, read into typed actions.
//!
//! The samples in `tests/data/events` (see its SOURCES.md) are the bare events; the SQS
//! forms are built from them here, as EventBridge → SQS → Lambda delivers them.

use carpool::decide::interruption::{
    Action, Cause, EventError, EventKind, IgnoreReason, InputRecord, InstanceStateName, InterruptionEvent, parse_event,
    parse_input, parse_input_text,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const INSTANCE: &str = "i-0123456789abcdef0";

fn sample(name: &str) -> Value {
    let path = format!("{}/tests/data/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn event(json: &Value) -> InterruptionEvent {
    parse_event(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

fn sqs_message(id: &str, body: &Value) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a...",
        "body": body.to_string(),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1768471200000"},
        "messageAttributes": {},
        "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:carpool-interruption",
        "awsRegion": "us-east-1"
    })
}

fn millis(iso: &str) -> i64 {
    iso.parse::<k8s_openapi::jiff::Timestamp>().unwrap().as_millisecond()
}

#[test]
fn every_sample_reads_to_its_kind_action_and_instances() {
    let disrupt = |cause| Action::Disrupt { cause };
    let cases: Vec<(&str, EventKind, Action, Option<InstanceStateName>)> = vec![
        (
            "spot-interruption-warning.json",
            EventKind::SpotInterruption,
            disrupt(Cause::SpotInterruption),
            None,
        ),
        (
            "rebalance-recommendation.json",
            EventKind::RebalanceRecommendation,
            Action::Rebalance,
            None,
        ),
        (
            "instance-state-change-stopping.json",
            EventKind::StateChange,
            disrupt(Cause::StateChange(InstanceStateName::Stopping)),
            Some(InstanceStateName::Stopping),
        ),
        (
            "instance-state-change-shutting-down.json",
            EventKind::StateChange,
            disrupt(Cause::StateChange(InstanceStateName::ShuttingDown)),
            Some(InstanceStateName::ShuttingDown),
        ),
        (
            "instance-state-change-stopped.json",
            EventKind::StateChange,
            Action::Cleanup {
                state: InstanceStateName::Stopped,
            },
            Some(InstanceStateName::Stopped),
        ),
        (
            "instance-state-change-terminated.json",
            EventKind::StateChange,
            Action::Cleanup {
                state: InstanceStateName::Terminated,
            },
            Some(InstanceStateName::Terminated),
        ),
        (
            "health-event-ec2-scheduled-maintenance.json",
            EventKind::ScheduledChange,
            disrupt(Cause::ScheduledChange),
            None,
        ),
        ("scheduled-event.json", EventKind::Scheduled, Action::Sweep, None),
        (
            "eventbridge-scheduler-input.json",
            EventKind::Scheduled,
            Action::Sweep,
            None,
        ),
    ];
    for (file, kind, action, state) in cases {
        let json = sample(file);
        let got = event(&json);
        assert_eq!(got.kind, kind, "{file}");
        assert_eq!(got.action, action, "{file}");
        assert_eq!(got.state, state, "{file}");
        let expected_ids: Vec<&str> = if kind == EventKind::Scheduled {
            vec![]
        } else {
            vec![INSTANCE]
        };
        assert_eq!(
            got.instance_ids, expected_ids,
            "{file}: resources and detail name one instance"
        );
        let expected_id = json.get("id").or(json.get("execution-id")).unwrap().as_str().unwrap();
        assert_eq!(got.id, expected_id, "{file}: the idempotency key");
        let time = json
            .get("time")
            .or(json.get("scheduled-time"))
            .unwrap()
            .as_str()
            .unwrap();
        assert_eq!(got.time, Some(millis(time)), "{file}");
    }
}

#[test]
fn action_words_are_the_short_names_the_cli_prints() {
    let word = |file| event(&sample(file)).action_word();
    assert_eq!(word("spot-interruption-warning.json"), "disrupt");
    assert_eq!(word("rebalance-recommendation.json"), "rebalance");
    assert_eq!(word("instance-state-change-terminated.json"), "cleanup");
    assert_eq!(word("scheduled-event.json"), "sweep");
    let mut running = sample("instance-state-change-stopping.json");
    running["detail"]["state"] = json!("running");
    assert_eq!(event(&running).action_word(), "ignore");
}

#[test]
fn an_event_serializes_with_snake_case_kind_and_ec2_state_names() {
    let got = serde_json::to_value(event(&sample("instance-state-change-shutting-down.json"))).unwrap();
    assert_eq!(got["kind"], "state_change");
    assert_eq!(got["state"], "shutting-down");
    assert_eq!(got["action"]["action"], "disrupt");
    assert_eq!(got["action"]["cause"]["state_change"], "shutting-down");
}

#[test]
fn an_sqs_message_and_a_lambda_batch_read_like_the_bare_events() {
    let spot = sample("spot-interruption-warning.json");
    let one = parse_input(&sqs_message("m-1", &spot)).unwrap();
    assert_eq!(
        one,
        vec![InputRecord {
            message_id: Some("m-1".into()),
            event: Ok(event(&spot))
        }]
    );

    let files = [
        "spot-interruption-warning.json",
        "instance-state-change-terminated.json",
        "health-event-ec2-scheduled-maintenance.json",
    ];
    let batch = json!({
        "Records": files.iter().enumerate().map(|(i, f)| sqs_message(&format!("m-{i}"), &sample(f))).collect::<Vec<_>>()
    });
    let records = parse_input(&batch).unwrap();
    assert_eq!(records.len(), 3, "one record per message");
    for (i, (record, file)) in records.iter().zip(files).enumerate() {
        assert_eq!(record.message_id.as_deref(), Some(format!("m-{i}").as_str()));
        assert_eq!(record.event.as_ref().unwrap(), &event(&sample(file)), "{file}");
    }

    let bare = parse_input(&spot).unwrap();
    assert_eq!(
        bare,
        vec![InputRecord {
            message_id: None,
            event: Ok(event(&spot))
        }]
    );
    assert_eq!(
        parse_input(&json!({"Records": []})).unwrap(),
        vec![],
        "an empty batch has no records"
    );
}

#[test]
fn a_bad_message_in_a_batch_fails_that_record_alone() {
    let spot = sample("spot-interruption-warning.json");
    let batch = json!({"Records": [
        sqs_message("good-1", &spot),
        {"messageId": "bad-json", "body": "{\"version\": \"0\", \"id\": "},
        {"messageId": "no-body"},
        {"messageId": "body-not-a-string", "body": {"id": "x"}},
        {"messageId": "not-an-event", "body": "{\"hello\": \"world\"}"},
        sqs_message("good-2", &sample("rebalance-recommendation.json")),
    ]});
    let records = parse_input(&batch).unwrap();
    let ids: Vec<_> = records.iter().map(|r| r.message_id.as_deref().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "good-1",
            "bad-json",
            "no-body",
            "body-not-a-string",
            "not-an-event",
            "good-2"
        ]
    );
    assert!(records[0].event.is_ok() && records[5].event.is_ok());
    assert!(
        matches!(records[1].event, Err(EventError::NotJson { line: 1, .. })),
        "{:?}",
        records[1]
    );
    assert_eq!(records[2].event, Err(EventError::MissingBody));
    assert!(
        matches!(&records[3].event, Err(EventError::BadSqsMessage { path, .. }) if path == "body"),
        "{:?}",
        records[3]
    );
    assert_eq!(records[4].event, Err(EventError::NotAnEvent { missing: "id" }));
}

#[test]
fn instance_ids_come_from_either_arn_form_when_detail_has_none() {
    // aws-node-termination-handler's example (pkg/monitor/sqsevent/spot-itn-event.go) puts
    // the zone in the ARN's region slot and leaves the account empty.
    for arn in [
        "arn:aws:ec2:us-east-1:123456789012:instance/i-0b662ef9931388ba0",
        "arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0",
    ] {
        let mut spot = sample("spot-interruption-warning.json");
        spot["detail"] = json!({"instance-action": "terminate"});
        spot["resources"] = json!([arn]);
        assert_eq!(event(&spot).instance_ids, ["i-0b662ef9931388ba0"], "{arn}");
    }
}

#[test]
fn detail_and_resources_are_merged_in_order_without_duplicates() {
    let mut spot = sample("spot-interruption-warning.json");
    spot["resources"] = json!([
        "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0",
        "i-0fedcba9876543210",
        "arn:aws:events:us-east-1:123456789012:rule/not-an-instance"
    ]);
    assert_eq!(event(&spot).instance_ids, [INSTANCE, "i-0fedcba9876543210"]);
}

#[test]
fn unknown_fields_are_ignored() {
    let mut spot = sample("spot-interruption-warning.json");
    spot["replay-name"] = json!("archive-replay");
    spot["detail"]["instance-action-time"] = json!("2026-01-15T10:02:00Z");
    spot["detail"]["nested"] = json!({"deep": [1, 2, 3]});
    let got = event(&spot);
    assert_eq!(
        got.action,
        Action::Disrupt {
            cause: Cause::SpotInterruption
        }
    );
    assert_eq!(got.instance_ids, [INSTANCE]);
}

#[test]
fn missing_optional_fields_are_tolerated() {
    // The EC2 state-change example in the AWS docs has no `version`; no `account`,
    // `region`, `time` or `resources` are needed either.
    let state = json!({
        "id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "detail": {"instance-id": INSTANCE, "state": "terminated"}
    });
    let got = event(&state);
    assert_eq!(
        got.action,
        Action::Cleanup {
            state: InstanceStateName::Terminated
        }
    );
    assert_eq!(got.time, None);

    // A spot warning without `instance-action`, its instance named only in `resources`.
    let mut spot = sample("spot-interruption-warning.json");
    spot["detail"] = json!({});
    assert_eq!(event(&spot).instance_ids, [INSTANCE]);
    assert_eq!(event(&spot).action_word(), "disrupt");

    // A Health event naming no instance: no `affectedEntities`, no `resources`.
    let mut health = sample("health-event-ec2-scheduled-maintenance.json");
    health["detail"].as_object_mut().unwrap().remove("affectedEntities");
    health.as_object_mut().unwrap().remove("resources");
    let got = event(&health);
    assert_eq!(
        got.action,
        Action::Ignore {
            reason: IgnoreReason::NoInstance
        }
    );
    assert!(got.instance_ids.is_empty());
}

#[test]
fn a_health_event_names_its_instances_by_id_or_arn_in_affected_entities() {
    // The current AWS doc example for AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED puts the
    // instance ARN in `entityValue` and has no `resources`.
    let mut health = sample("health-event-ec2-scheduled-maintenance.json");
    health.as_object_mut().unwrap().remove("resources");
    health["detail"]["affectedEntities"] = json!([
        {"entityValue": "arn:aws:ec2:us-east-1:123456789012:instance/i-0aaaaaaaaaaaaaaaa"},
        {"entityValue": "i-0bbbbbbbbbbbbbbbb", "status": "IMPAIRED"},
        {"entityValue": "vol-0123456789abcdef0"},
        {"status": "UNKNOWN"}
    ]);
    assert_eq!(
        event(&health).instance_ids,
        ["i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb"]
    );
}

// Karpenter's scheduledchange parser (aws/karpenter-provider-aws,
// pkg/controllers/interruption/messages/scheduledchange/parser.go) keeps only
// `service == "EC2"` and `eventTypeCategory == "scheduledChange"`.
#[test]
fn only_ec2_scheduled_changes_disrupt_other_health_events_are_ignored_with_the_reason() {
    let mut issue = sample("health-event-ec2-scheduled-maintenance.json");
    issue["detail"]["eventTypeCategory"] = json!("issue");
    assert_eq!(
        event(&issue).action,
        Action::Ignore {
            reason: IgnoreReason::HealthNotScheduledChange {
                category: "issue".into()
            }
        }
    );
    assert_eq!(event(&issue).kind, EventKind::ScheduledChange);

    let mut rds = sample("health-event-ec2-scheduled-maintenance.json");
    rds["detail"]["service"] = json!("RDS");
    let got = event(&rds);
    assert_eq!(
        got.action,
        Action::Ignore {
            reason: IgnoreReason::HealthNotEc2 { service: "RDS".into() }
        }
    );
    assert!(got.action.ignored().unwrap().to_string().contains("RDS"));
}

// Karpenter's statechange parser (aws/karpenter-provider-aws,
// pkg/controllers/interruption/messages/statechange/parser.go) accepts stopping, stopped,
// shutting-down and terminated, compared with strings.ToLower, and ignores the rest.
#[test]
fn state_changes_are_compared_lower_cased_and_pending_running_are_ignored() {
    let with_state = |state: &str| {
        let mut json = sample("instance-state-change-stopping.json");
        json["detail"]["state"] = json!(state);
        event(&json)
    };
    assert_eq!(
        with_state("STOPPING").action,
        Action::Disrupt {
            cause: Cause::StateChange(InstanceStateName::Stopping)
        }
    );
    assert_eq!(with_state("Shutting-Down").state, Some(InstanceStateName::ShuttingDown));
    assert_eq!(with_state("Terminated").action_word(), "cleanup");
    for state in [InstanceStateName::Pending, InstanceStateName::Running] {
        let got = with_state(state.as_str());
        assert_eq!(
            got.action,
            Action::Ignore {
                reason: IgnoreReason::UninterestingState(state)
            }
        );
        assert_eq!(got.state, Some(state));
    }
    let odd = with_state("rebooting");
    assert_eq!(odd.state, None);
    assert_eq!(
        odd.action,
        Action::Ignore {
            reason: IgnoreReason::UnknownState {
                state: "rebooting".into()
            }
        }
    );
}

#[test]
fn a_kind_carpool_does_not_handle_is_acknowledged_not_an_error() {
    let other = json!({
        "version": "0", "id": "a1", "detail-type": "EC2 Instance Launch Successful",
        "source": "aws.autoscaling", "time": "2026-01-15T10:00:00Z",
        "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"],
        "detail": {"anything": true}
    });
    let got = event(&other);
    assert_eq!(got.kind, EventKind::Unknown);
    assert_eq!(
        got.action,
        Action::Ignore {
            reason: IgnoreReason::NotHandled {
                source: "aws.autoscaling".into(),
                detail_type: "EC2 Instance Launch Successful".into()
            }
        }
    );
    // The same detail-type from another source is not an EC2 event either.
    let mut spoofed = sample("spot-interruption-warning.json");
    spoofed["source"] = json!("my.app");
    assert_eq!(event(&spoofed).kind, EventKind::Unknown);
}

#[test]
fn malformed_events_are_errors_that_name_what_is_wrong() {
    assert!(matches!(
        parse_input_text("{not json"),
        Err(EventError::NotJson { line: 1, .. })
    ));
    assert_eq!(
        parse_input_text(""),
        Err(EventError::NotJson {
            line: 1,
            column: 0,
            message: "EOF while parsing a value".into()
        })
    );
    assert_eq!(
        parse_input(&json!([1, 2])),
        Err(EventError::NotAnObject { found: "an array" })
    );
    assert_eq!(
        parse_event(&json!("text")),
        Err(EventError::NotAnObject { found: "a string" })
    );
    assert_eq!(
        parse_input(&json!({"Records": {}})),
        Err(EventError::BadBatch { found: "an object" })
    );

    for missing in ["id", "detail-type", "source", "detail"] {
        let mut spot = sample("spot-interruption-warning.json");
        spot.as_object_mut().unwrap().remove(missing);
        assert_eq!(parse_event(&spot), Err(EventError::NotAnEvent { missing }), "{missing}");
    }

    let mut numeric = sample("spot-interruption-warning.json");
    numeric["detail"]["instance-id"] = json!(42);
    let err = parse_event(&numeric).unwrap_err();
    assert!(
        matches!(&err, EventError::BadDetail { detail_type, path, .. }
            if detail_type == "EC2 Spot Instance Interruption Warning" && path == "detail.instance-id"),
        "{err:?}"
    );
    assert!(err.to_string().contains("detail.instance-id"), "{err}");

    let mut no_state = sample("instance-state-change-stopped.json");
    no_state["detail"].as_object_mut().unwrap().remove("state");
    let err = parse_event(&no_state).unwrap_err();
    assert!(
        matches!(&err, EventError::BadDetail { message, .. } if message.contains("state")),
        "{err:?}"
    );

    let mut detail_list = sample("rebalance-recommendation.json");
    detail_list["detail"] = json!(["i-0123456789abcdef0"]);
    assert!(matches!(parse_event(&detail_list), Err(EventError::BadDetail { .. })));

    let mut entities = sample("health-event-ec2-scheduled-maintenance.json");
    entities["detail"]["affectedEntities"][0]["entityValue"] = json!(7);
    assert!(
        matches!(&parse_event(&entities), Err(EventError::BadDetail { path, .. })
            if path == "detail.affectedEntities[0].entityValue")
    );

    let mut nowhere = sample("spot-interruption-warning.json");
    nowhere["detail"] = json!({"instance-action": "terminate"});
    nowhere["resources"] = json!([]);
    assert_eq!(
        parse_event(&nowhere),
        Err(EventError::NoInstanceId {
            detail_type: "EC2 Spot Instance Interruption Warning".into()
        })
    );

    let mut bad_time = sample("spot-interruption-warning.json");
    bad_time["time"] = json!("yesterday");
    assert!(matches!(&parse_event(&bad_time), Err(EventError::BadEnvelope { path, .. }) if path == "time"));

    let mut numeric_id = sample("spot-interruption-warning.json");
    numeric_id["id"] = json!(12);
    assert!(matches!(&parse_event(&numeric_id), Err(EventError::BadEnvelope { path, .. }) if path == "id"));
}

#[test]
fn every_error_says_how_to_fix_it() {
    let errors = [
        parse_input_text("{").unwrap_err(),
        parse_event(&json!({"id": "x"})).unwrap_err(),
        parse_input(&json!({"Records": 1})).unwrap_err(),
    ];
    for e in errors {
        assert!(!e.how_to_fix().is_empty(), "{e}");
    }
}

#[test]
fn a_scheduler_input_is_a_sweep_keyed_by_its_execution() {
    let got = event(&sample("eventbridge-scheduler-input.json"));
    assert_eq!(got.id, "d32c5kddcf5bb8c3");
    assert_eq!(got.time, Some(millis("2026-01-15T10:05:00Z")));
    let without_execution = json!({
        "schedule-arn": "arn:aws:scheduler:us-east-1:123456789012:schedule/default/tick",
        "scheduled-time": "2026-01-15T10:05:00Z"
    });
    assert_eq!(
        event(&without_execution).id,
        "arn:aws:scheduler:us-east-1:123456789012:schedule/default/tick#2026-01-15T10:05:00Z"
    );
    assert_eq!(
        parse_event(&json!({"schedule-arn": "arn:aws:scheduler:us-east-1:1:schedule/default/tick"})),
        Err(EventError::NotAnEvent {
            missing: "execution-id"
        })
    );
}

const KEYS: &[&str] = &[
    "Records",
    "body",
    "messageId",
    "id",
    "version",
    "detail-type",
    "source",
    "time",
    "resources",
    "detail",
    "instance-id",
    "instance-action",
    "state",
    "service",
    "eventTypeCategory",
    "affectedEntities",
    "entityValue",
    "schedule-arn",
    "execution-id",
    "scheduled-time",
];

const STRINGS: &[&str] = &[
    "aws.ec2",
    "aws.health",
    "aws.events",
    "EC2 Spot Instance Interruption Warning",
    "EC2 Instance Rebalance Recommendation",
    "EC2 Instance State-change Notification",
    "AWS Health Event",
    "Scheduled Event",
    "EC2",
    "scheduledChange",
    "stopping",
    "TERMINATED",
    "i-0123",
    "arn:aws:ec2:us-east-1b:instance/i-0abc",
    "arn:aws:ec2:::instance/",
    "2026-01-15T10:00:00Z",
    "{\"id\":\"x\",\"detail-type\":\"AWS Health Event\",\"source\":\"aws.health\",\"detail\":{}}",
    "",
];

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        proptest::sample::select(STRINGS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(proptest::sample::select(KEYS).prop_map(String::from), inner, 0..7)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever the queue delivers, reading it returns a value or an error: no panic.
    #[test]
    fn arbitrary_json_never_panics(json in arbitrary_json()) {
        let _ = parse_input(&json);
        let _ = parse_event(&json);
        // The same JSON as an SQS body, and in a batch.
        let _ = parse_input(&json!({"Records": [{"messageId": "m", "body": json.to_string()}, json]}));
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        let _ = parse_input_text(&text);
        let _ = parse_input(&json!({"Records": [{"messageId": "m", "body": text}]}));
    }

    /// Mutating any one field of a real sample still never panics, and a record stays a record.
    #[test]
    fn a_sample_with_one_field_replaced_never_panics(
        file in proptest::sample::select(&[
            "spot-interruption-warning.json",
            "instance-state-change-stopping.json",
            "health-event-ec2-scheduled-maintenance.json",
            "eventbridge-scheduler-input.json",
        ][..]),
        key in proptest::sample::select(KEYS),
        value in arbitrary_json(),
        in_detail in any::<bool>(),
    ) {
        let mut json = sample(file);
        let target = if in_detail && json.get("detail").is_some_and(Value::is_object) { &mut json["detail"] } else { &mut json };
        target[key] = value;
        match parse_input(&json) {
            Ok(records) => match json.get("Records").and_then(Value::as_array) {
                Some(list) => prop_assert_eq!(records.len(), list.len(), "one record per message"),
                None => prop_assert_eq!(records.len(), 1, "a bare event is one record"),
            },
            Err(e) => prop_assert!(matches!(e, EventError::BadBatch { .. }), "{e:?}"),
        }
    }
}
