//! `carpool event` as a user runs it, on the event samples of the core crate.

use std::path::PathBuf;
use std::process::Output;

use serde_json::{Value, json};

use crate::support::carpool;

fn sample(name: &str) -> String {
    format!("{}/../shared/tests/data/events/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("carpool-event-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const INSTANCE: &str = "i-0123456789abcdef0";

#[test]
fn every_sample_gives_its_json_line() {
    let cases = [
        (
            "spot-interruption-warning.json",
            "spot_interruption",
            Value::Null,
            "disrupt",
        ),
        (
            "rebalance-recommendation.json",
            "rebalance_recommendation",
            Value::Null,
            "rebalance",
        ),
        (
            "instance-state-change-stopping.json",
            "state_change",
            json!("stopping"),
            "disrupt",
        ),
        (
            "instance-state-change-shutting-down.json",
            "state_change",
            json!("shutting-down"),
            "disrupt",
        ),
        (
            "instance-state-change-stopped.json",
            "state_change",
            json!("stopped"),
            "cleanup",
        ),
        (
            "instance-state-change-terminated.json",
            "state_change",
            json!("terminated"),
            "cleanup",
        ),
        (
            "health-event-ec2-scheduled-maintenance.json",
            "scheduled_change",
            Value::Null,
            "disrupt",
        ),
        ("scheduled-event.json", "scheduled", Value::Null, "sweep"),
        ("eventbridge-scheduler-input.json", "scheduled", Value::Null, "sweep"),
    ];
    let files: Vec<String> = cases.iter().map(|c| sample(c.0)).collect();
    let mut args = vec!["event"];
    args.extend(files.iter().map(String::as_str));
    args.push("--json");
    let out = carpool(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), cases.len(), "one line per file");
    for ((file, kind, state, action), (line, path)) in cases.iter().zip(lines.iter().zip(&files)) {
        let source: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let id = source.get("id").or(source.get("execution-id")).unwrap();
        let instances = if *kind == "scheduled" {
            json!([])
        } else {
            json!([INSTANCE])
        };
        assert_eq!(
            line,
            &json!({
                "file": path, "event_id": id, "kind": kind, "instance_ids": instances,
                "state": state, "action": action, "ignored": false, "reason": null
            }),
            "{file}"
        );
    }
}

#[test]
fn a_batch_gives_one_line_per_record_and_ignored_ones_say_why() {
    let body = |name: &str| std::fs::read_to_string(sample(name)).unwrap();
    let mut running: Value = serde_json::from_str(&body("instance-state-change-stopping.json")).unwrap();
    running["detail"]["state"] = json!("running");
    let batch = json!({"Records": [
        {"messageId": "m-1", "body": body("spot-interruption-warning.json")},
        {"messageId": "m-2", "body": running.to_string()},
        {"messageId": "m-3", "body": body("instance-state-change-terminated.json")},
    ]});
    let path = scratch("batch.json", &batch.to_string());
    let out = carpool(&["event", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out);
    let actions: Vec<_> = lines.iter().map(|l| l["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["disrupt", "ignore", "cleanup"]);
    assert_eq!(lines[1]["ignored"], true);
    assert_eq!(lines[1]["state"], "running");
    assert!(lines[1]["reason"].as_str().unwrap().contains("running"), "{}", lines[1]);

    // The same batch in text: one line per record.
    let out = carpool(&["event", path.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.lines().all(|l| l.starts_with(path.to_str().unwrap())), "{text}");
    assert!(text.contains("ignore: state running"), "{text}");
}

#[test]
fn an_sqs_message_reads_like_its_event() {
    let body = std::fs::read_to_string(sample("spot-interruption-warning.json")).unwrap();
    let path = scratch("message.json", &json!({"messageId": "m-1", "body": body}).to_string());
    let out = carpool(&["event", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    assert_eq!(json_lines(&out)[0]["kind"], "spot_interruption");
}

#[test]
fn an_unparseable_file_exits_2_naming_the_file_on_one_line() {
    let bad = scratch("truncated.json", "{\"version\": \"0\", \"id\": ");
    let out = carpool(&["event", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("carpool: {}: not JSON", bad.display())),
        "{err}"
    );

    let numeric = scratch(
        "numeric.json",
        r#"{"id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{"instance-id":5}}"#,
    );
    let out = carpool(&["event", numeric.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("numeric.json") && err.contains("detail.instance-id"),
        "{err}"
    );

    let out = carpool(&["event", "/no/such/event.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .starts_with("carpool: /no/such/event.json: cannot read")
    );
}

#[test]
fn good_files_and_records_are_still_printed_before_a_bad_one_fails_the_command() {
    let batch = json!({"Records": [
        {"messageId": "good", "body": std::fs::read_to_string(sample("rebalance-recommendation.json")).unwrap()},
        {"messageId": "broken", "body": "not json"},
    ]});
    let path = scratch("mixed.json", &batch.to_string());
    let spot = sample("spot-interruption-warning.json");
    let out = carpool(&["event", path.to_str().unwrap(), &spot, "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let lines = json_lines(&out);
    let kinds: Vec<_> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["rebalance_recommendation", "spot_interruption"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("mixed.json: record 2 (messageId broken): not JSON"),
        "{err}"
    );
}
