//! Issue 31, the fleet at a glance: the stack's CloudWatch dashboard (`template.yaml`,
//! resource `Dashboard`) plots only metrics some function emits, and the stack's alarms
//! watch only those too; `scripts/check-deploy cfn-lint` checks the template itself.
//!
//! The emitted names are read from the functions' own EMF objects (`_aws` ...
//! `Metrics[].Name`), made by the same code the handlers print them with.

use std::collections::BTreeSet;

use carpool::decide::interruption::EventKind;
use carpool::decide::status::fleet::FleetLine;
use carpool::run::consolidate::report::ConsolidationReport;
use carpool::run::disruption::Outcome;
use carpool::run::disruption::report::EventReport;
use carpool::run::interruption::metrics::event_metrics;
use carpool::run::provision::metrics::{
    batch_metrics, fleet_metrics, housekeeping_metrics, poison_item_metrics, run_metrics,
};
use carpool::run::provision::report::{BatchReport, RunReport};
use serde_json::Value;
use serde_yaml_ng::Value as Yaml;

/// Every metric name the functions emit in the `Carpool` namespace.
fn emitted() -> BTreeSet<String> {
    let fleet = [FleetLine {
        nodepool: "web".into(),
        capacity_type: "spot".into(),
        nodes: 3,
        cost_per_hour: 0.3,
    }];
    let handled = EventReport::new(
        "e",
        EventKind::SpotInterruption,
        "disrupt",
        Some("i-1"),
        Outcome::CleanedUp,
    );
    let mut objects = vec![
        batch_metrics(
            "c",
            1,
            &BatchReport {
                pending_to_fleet_ms: vec![1_000],
                ..BatchReport::default()
            },
        ),
        housekeeping_metrics("c", 1, &[]),
        run_metrics("c", 1, &RunReport::default()),
        poison_item_metrics("c", 1, 1),
        ConsolidationReport::default().metrics("c", 1),
        event_metrics("c", 1, &handled).expect("a handled event is counted"),
    ];
    objects.extend(fleet_metrics("c", 1, &fleet));
    let mut names = BTreeSet::new();
    for o in objects {
        for m in o["_aws"]["CloudWatchMetrics"].as_array().unwrap() {
            assert_eq!(m["Namespace"], "Carpool");
            for n in m["Metrics"].as_array().unwrap() {
                names.insert(n["Name"].as_str().unwrap().to_string());
            }
        }
    }
    names
}

fn template() -> Yaml {
    let path = format!("{}/../template.yaml", env!("CARGO_MANIFEST_DIR"));
    serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The dashboard's body: the `!Sub` string, parsed as JSON with its `${...}` left in.
fn dashboard(template: &Yaml) -> Value {
    let body = &template["Resources"]["Dashboard"]["Properties"]["DashboardBody"];
    let text = match body {
        Yaml::Tagged(t) if t.tag == "Sub" => t.value.as_str().unwrap().to_string(),
        other => panic!("DashboardBody is a !Sub string, not {other:?}"),
    };
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("DashboardBody is not JSON: {e}\n{text}"))
}

/// The (namespace, metric) pairs a dashboard widget plots: its metric arrays and the
/// metrics its SEARCH expressions name.
fn plotted(widget: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in widget["properties"]["metrics"].as_array().unwrap() {
        let first = &m[0];
        if let Some(ns) = first.as_str() {
            out.push((ns.to_string(), m[1].as_str().unwrap().to_string()));
        } else if let Some(expr) = first["expression"].as_str() {
            let ns = expr
                .split('{')
                .nth(1)
                .and_then(|s| s.split(',').next())
                .unwrap()
                .to_string();
            let name = expr
                .split("MetricName=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap()
                .to_string();
            out.push((ns, name));
        }
    }
    out
}

#[test]
fn every_metric_on_the_dashboard_is_one_a_function_emits() {
    let emitted = emitted();
    let template = template();
    let body = dashboard(&template);
    let widgets = body["widgets"].as_array().unwrap();
    assert!(widgets.len() >= 8, "{widgets:?}");
    let mut carpool = BTreeSet::new();
    for w in widgets {
        let metrics = plotted(w);
        assert!(!metrics.is_empty(), "a widget with nothing plotted: {w}");
        for (ns, name) in metrics {
            match ns.as_str() {
                "Carpool" => {
                    assert!(
                        emitted.contains(&name),
                        "{name} is plotted but no function emits it; emitted: {emitted:?}"
                    );
                    carpool.insert(name);
                }
                "AWS/Lambda" | "AWS/SQS" => {}
                other => panic!("{name} in namespace {other}"),
            }
        }
    }
    // What the issue asks the dashboard to show.
    for wanted in [
        "FleetCostPerHour",
        "Nodes",
        "NodesLaunched",
        "PendingToLaunchMillis",
        "InterruptionsHandled",
        "NodesConsolidated",
        "SavingsPerHour",
        "BlockedEvictions",
        "LaunchBackoffs",
        "TransientErrors",
    ] {
        assert!(carpool.contains(wanted), "the dashboard does not plot {wanted}");
    }
}

#[test]
fn every_alarm_on_a_carpool_metric_watches_one_a_function_emits() {
    let emitted = emitted();
    let template = template();
    let mut watched = 0;
    for (_, r) in template["Resources"].as_mapping().unwrap() {
        if r["Type"].as_str() == Some("AWS::CloudWatch::Alarm")
            && r["Properties"]["Namespace"].as_str() == Some("Carpool")
        {
            let name = r["Properties"]["MetricName"].as_str().unwrap();
            assert!(
                emitted.contains(name),
                "an alarm watches {name}, which no function emits"
            );
            watched += 1;
        }
    }
    assert!(watched > 0);
}

#[test]
fn the_fleet_gauges_are_per_nodepool_and_capacity_type_and_for_the_whole_fleet() {
    let fleet = [
        FleetLine {
            nodepool: "web".into(),
            capacity_type: "spot".into(),
            nodes: 3,
            cost_per_hour: 0.3,
        },
        FleetLine {
            nodepool: "web".into(),
            capacity_type: "on-demand".into(),
            nodes: 1,
            cost_per_hour: 0.2,
        },
    ];
    let objects = fleet_metrics("prod", 1, &fleet);
    assert_eq!(objects.len(), 3);
    assert_eq!(objects[0]["NodePool"], "web");
    assert_eq!(objects[0]["CapacityType"], "spot");
    assert_eq!(
        objects[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        serde_json::json!([["Cluster", "NodePool", "CapacityType"]]),
        "a NodePool's line is not summed into the cluster's"
    );
    assert_eq!(objects[2]["FleetNodes"], 4);
    assert!((objects[2]["FleetCostPerHour"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    assert!(
        fleet_metrics("prod", 1, &[]).is_empty(),
        "an unknown fleet is no data, not zero"
    );
}
