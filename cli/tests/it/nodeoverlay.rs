//! `carpool plan` and `carpool disrupt` on a cluster dump with a NodeOverlay that makes
//! `m6i` 30% cheaper (issue 30): the plan turns to `m6i` where list prices chose another
//! family, and consolidation's savings are at the adjusted prices.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::carpool;

/// The NodeOverlay of the issue, as `kubectl get nodeoverlays -o yaml` prints one.
const OVERLAY: &str = "apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: savings-plan-m6i}
spec:
  requirements:
  - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}
  priceAdjustment: \"-30%\"
";

/// An on-demand NodePool of three general-purpose families, its EC2NodeClass, and eight
/// pending pods of one CPU and 3 GiB.
fn pending_dump() -> String {
    let mut dump = String::from(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, m6a, m6i]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
",
    );
    for i in 0..8 {
        dump.push_str(&format!(
            "---
apiVersion: v1
kind: Pod
metadata: {{name: web-{i}, namespace: default, labels: {{app: web}}}}
spec:
  containers: [{{name: c, resources: {{requests: {{cpu: '1', memory: 3Gi}}}}}}]
"
        ));
    }
    dump
}

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("carpool-overlay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn json_of(args: &[&str]) -> Value {
    let out = carpool(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn families(plan: &Value) -> Vec<String> {
    let mut f: Vec<String> = plan["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            n["instance_type"]
                .as_str()
                .unwrap()
                .split('.')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    f.sort();
    f.dedup();
    f
}

#[test]
fn plan_chooses_m6i_when_a_nodeoverlay_makes_it_30_percent_cheaper() {
    let pending = write("pending.yaml", &pending_dump());
    let overlay = write("overlay.yaml", OVERLAY);

    let listed = json_of(&["plan", pending.to_str().unwrap(), "--json"]);
    assert_eq!(families(&listed), ["m6a"], "list prices choose m6a: {listed}");

    let adjusted = json_of(&["plan", pending.to_str().unwrap(), overlay.to_str().unwrap(), "--json"]);
    assert_eq!(families(&adjusted), ["m6i"], "{adjusted}");
    assert!(adjusted["unschedulable"].as_array().unwrap().is_empty(), "{adjusted}");
    assert!(adjusted["cost_per_hour"].as_f64().unwrap() < listed["cost_per_hour"].as_f64().unwrap());
    assert!(
        adjusted["cost_per_hour"].as_f64().unwrap() + 1e-9 >= adjusted["lower_bound_per_hour"].as_f64().unwrap(),
        "the lower bound is at the adjusted prices too: {adjusted}"
    );

    // The text output shows the same choice.
    let out = carpool(&["plan", pending.to_str().unwrap(), overlay.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("m6i."));
}

#[test]
fn plan_skips_an_invalid_nodeoverlay_with_its_reason_and_applies_the_valid_one() {
    let pending = write("pending-invalid.yaml", &pending_dump());
    let overlays = write(
        "overlays.yaml",
        &format!(
            "{OVERLAY}---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {{name: both}}
spec: {{price: '0.01', priceAdjustment: '-10%'}}
"
        ),
    );
    let plan = json_of(&["plan", pending.to_str().unwrap(), overlays.to_str().unwrap(), "--json"]);
    assert_eq!(families(&plan), ["m6i"], "{plan}");
    let skipped = plan["skipped"].to_string();
    assert!(
        skipped.contains("NodeOverlay/both") && skipped.contains("cannot set both"),
        "{skipped}"
    );
}

/// An m6i.2xlarge of the pool, running one small pod: consolidation replaces it by a
/// smaller m6i.
const RUNNING: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidateAfter: 0s, budgets: [{nodes: '100%'}]}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
---
apiVersion: v1
kind: Node
metadata:
  name: big
  creationTimestamp: '2026-12-01T00:00:00Z'
  labels:
    karpenter.sh/nodepool: general
    carpool.sh/managed: 'true'
    karpenter.sh/capacity-type: on-demand
    node.kubernetes.io/instance-type: m6i.2xlarge
    topology.kubernetes.io/zone: us-east-1a
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
spec: {providerID: 'aws:///us-east-1a/i-0big'}
status:
  allocatable: {cpu: 7910m, memory: 30Gi, pods: '58'}
  conditions: [{type: Ready, status: 'True', lastTransitionTime: '2026-12-01T00:05:00Z'}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: shop
  labels: {app: web}
  creationTimestamp: '2026-12-01T00:06:00Z'
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-7d9, uid: u1, controller: true}]
spec:
  nodeName: big
  containers: [{name: c, resources: {requests: {cpu: '1', memory: 2Gi}}}]
status: {phase: Running}
";

#[test]
fn disrupt_computes_savings_at_the_nodeoverlays_prices() {
    let running = write("running.yaml", RUNNING);
    let overlay = write("overlay-disrupt.yaml", OVERLAY);
    let at = "2026-12-02T12:00:00Z";
    let listed = json_of(&["disrupt", running.to_str().unwrap(), "--at", at, "--json"]);
    let adjusted = json_of(&[
        "disrupt",
        running.to_str().unwrap(),
        overlay.to_str().unwrap(),
        "--at",
        at,
        "--json",
    ]);
    let (l, a) = (&listed["command"], &adjusted["command"]);
    assert!(l.is_object() && a.is_object(), "{listed}\n{adjusted}");
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    assert!(
        (f(a, "removed_per_hour") - 0.7 * f(l, "removed_per_hour")).abs() < 1e-9,
        "{a}"
    );
    assert!(
        (f(a, "savings_per_hour") - 0.7 * f(l, "savings_per_hour")).abs() < 1e-9,
        "{a}"
    );
    let replacements: f64 = a["replacements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["price_per_hour"].as_f64().unwrap())
        .sum();
    assert!((f(a, "savings_per_hour") - (f(a, "removed_per_hour") - replacements)).abs() < 1e-9);
}
