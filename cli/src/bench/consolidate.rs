//! `carpool bench consolidate`: one consolidation decision over a generated cluster.
//!
//! The cluster: `nodes` on-demand nodes of a NodePool that allows spot and on-demand (m5,
//! c5 and r5 of sizes xlarge and 2xlarge, in three zones), each with a DaemonSet pod and its
//! share of `pods` running pods of twenty Deployments, most nodes three-quarters full and
//! one in eight a quarter full: the consolidation search has work to do.

use std::time::{Instant, SystemTime};

use anyhow::Result;
use carpool::catalog::RegionCatalog;
use carpool::decide::disruption::{DisruptionInput, DisruptionSettings, decide};
use carpool::snapshot::Snapshot;
use serde::Serialize;
use serde_json::{Value, json};

use super::scenarios::{Lcg, nodepool};

/// The figures `bench consolidate` reports.
#[derive(Serialize)]
pub struct ConsolidateResult {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Running pods (DaemonSet pods aside).
    pub pods: usize,
    /// Time to decide.
    pub elapsed_ms: f64,
    /// The method of the command chosen, if any.
    pub method: Option<String>,
    /// Nodes the command removes.
    pub removed: usize,
    /// USD per hour it saves.
    pub savings_per_hour: f64,
    /// Scheduling simulations run.
    pub simulations: usize,
    /// Peak RSS of the process.
    pub peak_rss_mib: Option<f64>,
}

const TYPES: [(&str, u32, u32); 6] = [
    ("m5.xlarge", 4, 16),
    ("m5.2xlarge", 8, 32),
    ("c5.xlarge", 4, 8),
    ("c5.2xlarge", 8, 16),
    ("r5.xlarge", 4, 32),
    ("r5.2xlarge", 8, 64),
];
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const LONG_AGO: &str = "2026-11-25T00:00:00Z";

/// The generated cluster.
pub fn cluster(region: &RegionCatalog<'_>, nodes: usize, pods: usize) -> Snapshot {
    let mut rng = Lcg::new(42);
    let mut pool = nodepool(
        "default",
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]),
    );
    pool["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": "10%"}]});
    let mut items: Vec<Value> = vec![pool, carpool::fixtures::EC2NodeClassBuilder::standard().build()];
    // One node in eight a quarter full, the others three quarters: pods shared in proportion.
    let fill = |n: usize| if n.is_multiple_of(8) { 0.25 } else { 0.75 };
    let total_fill: f64 = (0..nodes).map(fill).sum();
    let mut placed = 0;
    for n in 0..nodes {
        let &(it, _vcpu, _mem) = rng.pick(&TYPES);
        let zone = ZONES[n % ZONES.len()];
        let name = format!("node-{n}");
        let alloc = region
            .types()
            .iter()
            .find(|t| t.name == it)
            .map(|t| t.allocatable.clone())
            .unwrap_or_default();
        items.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "creationTimestamp": LONG_AGO, "labels": {
                "kubernetes.io/hostname": name, "karpenter.sh/nodepool": "default", "carpool.sh/managed": "true",
                "node.kubernetes.io/instance-type": it, "topology.kubernetes.io/zone": zone,
                "karpenter.sh/capacity-type": "on-demand", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}},
            "status": {"allocatable": {"cpu": format!("{}m", alloc.cpu_millis), "memory": alloc.memory.to_string(),
                "pods": alloc.get("pods").to_string()},
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": LONG_AGO}]}}));
        items.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("aws-node-{n}"), "namespace": "kube-system", "creationTimestamp": LONG_AGO,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "aws-node", "uid": "ds"}]},
            "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]},
            "status": {"phase": "Running"}}));
        let fill = fill(n);
        let count = if n + 1 == nodes {
            pods - placed
        } else {
            ((pods as f64) * fill / total_fill).floor() as usize
        };
        let cpu_each = (alloc.cpu_millis as f64 * fill / count.max(1) as f64).max(10.0) as i64;
        let mem_each = (alloc.memory as f64 * fill * 0.8 / count.max(1) as f64).max(1.0) as i64;
        for k in 0..count {
            if placed >= pods {
                break;
            }
            let app = format!("app-{}", (n + k) % 20);
            items.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{app}-{n}-{k}"), "namespace": "bench", "labels": {"app": app},
                    "creationTimestamp": LONG_AGO,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app, "uid": "rs"}]},
                "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"requests": {
                    "cpu": format!("{cpu_each}m"), "memory": mem_each.to_string()}}}]},
                "status": {"phase": "Running", "startTime": LONG_AGO}}));
            placed += 1;
        }
    }
    super::scenarios::snapshot(items)
}

/// Runs one decision.
pub fn run(region: &RegionCatalog<'_>, nodes: usize, pods: usize) -> Result<ConsolidateResult> {
    let snapshot = cluster(region, nodes, pods);
    let now = SystemTime::from("2026-12-02T12:00:00Z".parse::<jiff::Timestamp>()?);
    let start = Instant::now();
    let d = decide(&DisruptionInput {
        snapshot: &snapshot,
        region,
        now,
        in_progress: Default::default(),
        settings: DisruptionSettings::default(),
        images: Default::default(),
        networks: Default::default(),
        owned: None,
        held_back: Default::default(),
    });
    let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
    let running = snapshot
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some("bench"))
        .count();
    Ok(ConsolidateResult {
        nodes: snapshot.nodes.len(),
        pods: running,
        elapsed_ms,
        method: d.command.as_ref().map(|c| c.method.to_string()),
        removed: d.command.as_ref().map_or(0, |c| c.nodes.len()),
        savings_per_hour: d.command.as_ref().map_or(0.0, |c| c.savings_per_hour),
        simulations: d.simulations,
        peak_rss_mib: super::peak_rss_mib(),
    })
}
