//! `carpool catalog` as a user runs it.

use crate::support::carpool;

#[test]
fn catalog_json_lists_matching_types_cheapest_first_with_the_documented_fields() {
    let out = carpool(&[
        "catalog",
        "--region",
        "us-east-1",
        "--require",
        "karpenter.k8s.aws/instance-category In c,m,r",
        "--require",
        "kubernetes.io/arch In arm64",
        "--capacity-type",
        "on-demand",
        "--cpu",
        "4",
        "--memory",
        "16Gi",
        "--json",
        "--limit",
        "10",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 10);
    for key in [
        "name",
        "vcpu",
        "memory_mib",
        "arch",
        "max_pods",
        "allocatable_cpu_millicores",
        "allocatable_memory_mib",
        "price_per_hour",
        "capacity_type",
        "zones",
    ] {
        assert!(rows[0].get(key).is_some(), "missing {key}");
    }
    let prices: Vec<f64> = rows.iter().map(|r| r["price_per_hour"].as_f64().unwrap()).collect();
    assert!(prices.windows(2).all(|w| w[0] <= w[1]));
    for r in &rows {
        assert_eq!(r["arch"], "arm64");
        assert_eq!(r["capacity_type"], "on-demand");
        assert!(r["allocatable_cpu_millicores"].as_i64().unwrap() >= 4000);
        assert!(r["allocatable_memory_mib"].as_i64().unwrap() >= 16 * 1024);
    }
}

#[test]
fn catalog_table_has_a_header_and_one_row_per_type() {
    let out = carpool(&[
        "catalog",
        "--require",
        "node.kubernetes.io/instance-type In m5.large,c5.large",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("TYPE"));
    assert_eq!(lines.len(), 3, "{text}");
}

#[test]
fn bad_input_prints_one_line_and_exits_2() {
    for args in [
        &["catalog", "--require", "kubernetes.io/arch Has arm64"][..],
        &["catalog", "--require", "karpenter.k8s.aws/instance-cpu Gt four"],
        &["catalog", "--memory", "16GB"],
        &["catalog", "--capacity-type", "reserved-ish"],
        &["catalog", "--region", "mars-north-1"],
        &["catalog", "--no-such-flag"],
    ] {
        let out = carpool(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("carpool: "), "{err}");
        assert!(out.stdout.is_empty());
    }
}
