//! `carpool simulate` as a user runs it: every example scenario keeps the invariants (no
//! pod bound where the independent checker says its constraints fail, no PDB violated, no
//! instance left running without being a Node past the registration TTL), the same seed
//! gives the same report, and bad input is one line with exit code 2.
//!
//! Each run is a few simulated hours, to keep the suite's time modest.

use serde_json::Value;

use crate::support::carpool;

fn scenarios_dir() -> String {
    format!("{}/../examples/scenarios", env!("CARGO_MANIFEST_DIR"))
}

fn scenario(name: &str) -> String {
    format!("{}/{name}", scenarios_dir())
}

fn simulate(path: &str, extra: &[&str]) -> Value {
    let mut args = vec!["simulate", path, "--json"];
    args.extend_from_slice(extra);
    let out = carpool(&args);
    assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.stderr.is_empty(),
        "no progress bar with --json: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn assert_invariants(name: &str, strategy: &str, r: &Value) {
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{name} {strategy}: no {k}"));
    assert_eq!(
        n("constraint_violations"),
        0,
        "{name} {strategy}: {}",
        r["violation_examples"]
    );
    assert!(
        n("checked_bindings") > 0,
        "{name} {strategy}: the checker saw no binding"
    );
    assert_eq!(n("pdb_violations"), 0, "{name} {strategy}: PDB violated");
    assert_eq!(
        n("orphan_instances"),
        0,
        "{name} {strategy}: an instance was not a Node after the TTL"
    );
    assert!(
        r["total_cost"].as_f64().unwrap() > 0.0,
        "{name} {strategy}: nothing ran"
    );
}

#[test]
fn every_example_scenario_keeps_the_invariants_for_carpool_and_both_baselines() {
    let mut names: Vec<String> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "at least four example scenarios: {names:?}");
    for name in names {
        let r = simulate(&scenario(&name), &["--hours", "3"]);
        assert_invariants(&name, "carpool", &r);
        assert_eq!(r["run_errors"], 0, "{name}: a run of Carpool failed");
        assert_invariants(&name, "node groups", &r["baselines"]["node_groups"]);
        assert_invariants(&name, "karpenter", &r["baselines"]["karpenter_model"]);
        for key in [
            "pending_p50_s",
            "pending_p99_s",
            "savings_vs_node_groups_pct",
            "savings_vs_karpenter_model_pct",
        ] {
            assert!(r[key].is_number(), "{name}: {key}");
        }
        assert!(r["interruptions_handled"].as_u64().unwrap() <= r["interruptions"].as_u64().unwrap());
    }
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let path = scenario("web-diurnal.yaml");
    let a = simulate(&path, &["--hours", "1.5", "--seed", "7"]);
    let b = simulate(&path, &["--hours", "1.5", "--seed", "7"]);
    assert_eq!(a, b);
    for key in [
        "total_cost",
        "pdb_violations",
        "evictions",
        "pending_p50_s",
        "pending_p99_s",
        "interruptions_handled",
    ] {
        assert!(a.get(key).is_some(), "missing {key}");
    }
    assert!(a["baselines"]["node_groups"]["total_cost"].is_number());
    assert!(a["baselines"]["karpenter_model"]["total_cost"].is_number());
}

#[test]
fn the_plot_is_an_svg_with_one_line_per_strategy() {
    let dir = std::env::temp_dir().join(format!("carpool-sim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("plot.svg");
    let out = carpool(&[
        "simulate",
        &scenario("gpu-inference.yaml"),
        "--hours",
        "0.5",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    for name in ["carpool", "node groups", "model of Karpenter"] {
        assert!(text.contains(name), "legend lacks {name}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("saves"), "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

fn assert_usage_error(args: &[&str], mentions: &str) {
    let out = carpool(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(mentions), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = std::env::temp_dir().join(format!("carpool-sim-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_usage_error(&["simulate", "no-such-scenario.yaml"], "cannot read scenario");
    assert_usage_error(
        &["simulate", &scenario("web-diurnal.yaml"), "--hours", "0"],
        "--hours must be above 0",
    );
    assert_usage_error(&["simulate", &scenario("web-diurnal.yaml"), "--seed", "x"], "--seed");
    assert_usage_error(
        &[
            "simulate",
            &scenario("web-diurnal.yaml"),
            "--plot",
            "/no/such/dir/plot.svg",
        ],
        "does not exist",
    );
    let text = std::fs::read_to_string(scenario("web-diurnal.yaml")).unwrap();
    let unknown = dir.join("unknown-field.yaml");
    std::fs::write(&unknown, text.replace("  boot_seconds:", "  boot_secs:")).unwrap();
    assert_usage_error(&["simulate", unknown.to_str().unwrap()], "boot_secs");
    let bad_type = dir.join("bad-type.yaml");
    std::fs::write(
        &bad_type,
        text.replace("instance_type: m6i.2xlarge", "instance_type: m6i.huge"),
    )
    .unwrap();
    assert_usage_error(&["simulate", bad_type.to_str().unwrap()], "m6i.huge");
    let no_work = dir.join("no-work.yaml");
    std::fs::write(&no_work, "nodepools: []\nec2nodeclasses: []\nnode_groups: []\n").unwrap();
    assert_usage_error(&["simulate", no_work.to_str().unwrap()], "no deployments and no jobs");
    std::fs::remove_dir_all(&dir).ok();
}

/// `scenario` with `overlays` (YAML list items) appended as its `nodeoverlays`, written to
/// a temporary file.
fn with_overlays(name: &str, tag: &str, overlays: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(scenario(name)).unwrap();
    let dir = std::env::temp_dir().join(format!("carpool-sim-overlay-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{text}\nnodeoverlays:\n{overlays}")).unwrap();
    path
}

// Issue 30: a NodeOverlay applies everywhere a price is used, `carpool simulate` included
// (Karpenter's `InstanceTypeStore.ApplyAll` prices every offering it selects). A discount
// on every offering changes no decision, so each strategy's cost is halved.
#[test]
fn simulate_prices_every_strategy_at_the_nodeoverlays_prices() {
    let listed = simulate(&scenario("nightly-batch.yaml"), &["--hours", "2"]);
    let half = with_overlays(
        "nightly-batch.yaml",
        "half",
        "  - apiVersion: karpenter.sh/v1alpha1
    kind: NodeOverlay
    metadata: {name: enterprise-discount}
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}]
      priceAdjustment: \"-50%\"
",
    );
    let overlaid = simulate(half.to_str().unwrap(), &["--hours", "2"]);
    for (label, l, o) in [
        ("carpool", &listed["total_cost"], &overlaid["total_cost"]),
        (
            "model of Karpenter",
            &listed["baselines"]["karpenter_model"]["total_cost"],
            &overlaid["baselines"]["karpenter_model"]["total_cost"],
        ),
    ] {
        let ratio = o.as_f64().unwrap() / l.as_f64().unwrap();
        assert!(
            (ratio - 0.5).abs() < 0.02,
            "{label}: {o} at overlay prices vs {l} listed"
        );
    }
    std::fs::remove_dir_all(half.parent().unwrap()).ok();
}

#[test]
fn a_scenario_with_an_invalid_nodeoverlay_is_one_line_and_exit_code_2() {
    let bad = with_overlays(
        "nightly-batch.yaml",
        "bad",
        "  - apiVersion: karpenter.sh/v1alpha1
    kind: NodeOverlay
    metadata: {name: both}
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
      price: \"0.01\"
      priceAdjustment: \"-10%\"
",
    );
    assert_usage_error(&["simulate", bad.to_str().unwrap()], "NodeOverlay/both");
    std::fs::remove_dir_all(bad.parent().unwrap()).ok();
}
