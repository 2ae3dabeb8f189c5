//! `carpool plan` and `carpool bench` as a user runs them.

use crate::support::carpool;

fn example(name: &str) -> String {
    format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn plan_json_prints_exactly_one_object_with_the_documented_fields() {
    let out = carpool(&["plan", &example("web-zone-spread.json"), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in [
        "nodes",
        "existing",
        "unschedulable",
        "cost_per_hour",
        "lower_bound_per_hour",
        "elapsed_ms",
    ] {
        assert!(plan.get(key).is_some(), "missing {key}");
    }
    let node = &plan["nodes"][0];
    for key in [
        "nodepool",
        "instance_type",
        "instance_types",
        "zone",
        "capacity_type",
        "price_per_hour",
        "pods",
    ] {
        assert!(node.get(key).is_some(), "node lacks {key}");
    }
    assert_eq!(node["instance_types"][0], node["instance_type"]);
    assert!(
        plan["existing"][0]["node"].is_string(),
        "the example has room on existing nodes"
    );
    assert!(plan["cost_per_hour"].as_f64().unwrap() >= plan["lower_bound_per_hour"].as_f64().unwrap());
}

#[test]
fn plan_text_shows_nodes_cost_and_bound() {
    let out = carpool(&["plan", &example("gpu-inference.json")]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("lower bound"), "{text}");
    assert!(text.contains("NODEPOOL") && text.contains("gpu"), "{text}");
}

#[test]
fn several_files_and_yaml_documents_make_one_snapshot() {
    let dir = std::env::temp_dir().join(format!("carpool-plan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = dir.join("pool.yaml");
    std::fs::write(
        &pool,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: arm}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      - {key: kubernetes.io/arch, operator: In, values: [arm64]}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec:\n  role: KarpenterNodeRole\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]\n  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: '1', memory: 1Gi}}}]\n",
    )
    .unwrap();
    let pods = dir.join("pods.json");
    std::fs::write(&pods, r#"{"kind":"List","items":[{"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"default"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}]}"#).unwrap();
    let out = carpool(&["plan", pool.to_str().unwrap(), pods.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let placed: usize = plan["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["pods"].as_array().unwrap().len())
        .sum();
    assert_eq!(placed, 2);
    assert!(plan["nodes"].as_array().unwrap().iter().all(|n| n["nodepool"] == "arm"));
}

#[test]
fn a_malformed_or_missing_file_is_one_line_naming_it_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("carpool-bad-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"n"},"spec":{"taints":"no"}}]}"#,
    )
    .unwrap();
    let out = carpool(&["plan", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.json") && err.contains("items[0].spec.taints"),
        "{err}"
    );

    let out = carpool(&["plan", "/no/such/dump.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("/no/such/dump.json"));
}

#[test]
fn bench_schedule_reports_the_documented_figures() {
    let out = carpool(&["bench", "schedule", "--pods", "100", "--runs", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "pods",
        "elapsed_ms",
        "pods_per_sec",
        "nodes",
        "cost_per_hour",
        "lower_bound_per_hour",
    ] {
        assert!(r.get(key).is_some(), "missing {key}");
    }
    assert_eq!(r["pods"], 100);
    assert_eq!(r["unschedulable"], 0);
}

#[test]
fn bench_provision_runs_the_provisioner_over_the_fakes_and_reports_it() {
    let out = carpool(&["bench", "provision", "--pods", "200", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["pods"], 200);
    assert_eq!(r["batches"], 1);
    assert_eq!(r["unschedulable"], 0);
    assert!(r["nodes"].as_u64().unwrap() > 0);
    assert!(r["cost_per_hour"].as_f64().unwrap() > 0.0);

    let bad = carpool(&["bench", "provision", "--pods", "0"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn plan_json_gives_each_unschedulable_pod_a_kind_next_to_its_reason() {
    let dir = std::env::temp_dir().join(format!("carpool-kind-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("tainted.yaml");
    std::fs::write(
        &dump,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n      taints: [{key: nvidia.com/gpu, value: 'true', effect: NoSchedule}]\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec:\n  role: KarpenterNodeRole\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]\n  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: '1', memory: 1Gi}}}]\n",
    )
    .unwrap();
    let out = carpool(&["plan", dump.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let u = &plan["unschedulable"][0];
    assert_eq!(u["pod"], "default/web", "{u}");
    assert_eq!(u["kind"], "taints", "{u}");
    assert!(
        u["reason"]
            .as_str()
            .unwrap()
            .starts_with("taints: NodePool gpu has taint nvidia.com/gpu=true:NoSchedule"),
        "{u}"
    );
    assert_eq!(u["reasons"][0]["kind"], "taints", "{u}");
    assert_eq!(u["reasons"][0]["nodepool"], "gpu", "{u}");
}

#[test]
fn plan_says_a_pod_needing_arm64_has_no_image_when_the_class_status_resolves_only_x86() {
    // A dump of a Karpenter cluster: the EC2NodeClass's status.amis (Karpenter's
    // EC2NodeClassStatus.AMIs) resolved al2023@latest to an x86-64 image only, so no
    // Graviton type can boot under it.
    let dir = std::env::temp_dir().join(format!("carpool-ami-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("arm.yaml");
    std::fs::write(
        &dump,
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec:\n  role: R\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {k: v}}]\n  securityGroupSelectorTerms: [{tags: {k: v}}]\nstatus:\n  amis:\n  - id: ami-x86\n    name: al2023-x86\n    requirements:\n    - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n    - {key: karpenter.k8s.aws/instance-gpu-count, operator: DoesNotExist}\n    - {key: karpenter.k8s.aws/instance-accelerator-count, operator: DoesNotExist}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: graviton, namespace: default}\nspec:\n  nodeSelector: {kubernetes.io/arch: arm64}\n  containers: [{name: c, resources: {requests: {cpu: '1', memory: 1Gi}}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: x86, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: '1', memory: 1Gi}}}]\n",
    )
    .unwrap();
    let out = carpool(&["plan", dump.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let u = &plan["unschedulable"];
    assert_eq!(u.as_array().unwrap().len(), 1, "{plan}");
    assert_eq!(u[0]["pod"], "default/graviton", "{u}");
    assert!(u[0]["reason"].as_str().unwrap().contains("kubernetes.io/arch"), "{u}");
    let placed: Vec<&str> = plan["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["pods"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()))
        .collect();
    assert_eq!(placed, vec!["default/x86"]);
}

/// As the provisioner's batch (`run/provision/batch.rs`, `nodepools::drop_without_node_class`
/// then `without_nodepool`): a NodePool whose EC2NodeClass is not in the dump is skipped
/// with the reason, and with no NodePool left nothing is planned.
#[test]
fn plan_skips_a_nodepool_whose_ec2nodeclass_is_missing_as_the_provisioner_does() {
    let dir = std::env::temp_dir().join(format!("carpool-noclass-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("noclass.yaml");
    std::fs::write(
        &dump,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing}\n      requirements: []\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: '1', memory: 1Gi}}}]\n",
    )
    .unwrap();
    let out = carpool(&["plan", dump.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["nodes"].as_array().unwrap().len(), 0, "{plan}");
    assert_eq!(plan["unschedulable"][0]["kind"], "no_valid_nodepool", "{plan}");
    let skipped = plan["skipped"].to_string();
    assert!(skipped.contains("general") && skipped.contains("missing"), "{skipped}");
}
