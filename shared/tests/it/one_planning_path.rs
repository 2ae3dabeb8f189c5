//! One planning path: `carpool plan` prints, for a cluster dump, the nodes the
//! provisioner's batch launches for the same objects (DESIGN.md: the CLI prints the plans
//! the Lambdas execute). Both go through `decide::provisioning::batch_plan`: the NodePools
//! the selector picks, narrowed to the zones of their class's subnets, planned, and fitted
//! to kube-scheduler's placement of a launch wave handed biggest pods first.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::batch_plan::{FitTo, plan_dump};
use carpool::decide::provisioning::selector::Selector;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::CapacityType;
use carpool::run::provision::{Provisioner, Settings};
use carpool::snapshot::Snapshot;
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;

/// The class, with the subnets Karpenter resolved in its status: two of the region's zones.
fn nodeclass() -> Value {
    let mut class = EC2NodeClassBuilder::standard().build();
    class["status"] = json!({ "subnets": [
        { "id": "subnet-a", "zone": "us-east-1a", "zoneID": "use1-az1" },
        { "id": "subnet-b", "zone": "us-east-1b", "zoneID": "use1-az2" },
    ]});
    class
}

fn nodepool() -> Value {
    NodePoolBuilder::new("general")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
        .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
        .requirement("kubernetes.io/arch", "In", &["amd64"])
        .build()
}

/// A mixed workload: a web tier spread across zones, memory-heavy workers, small pods.
fn pods() -> Vec<Value> {
    let spread = json!([{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": { "matchLabels": { "app": "web" } },
    }]);
    let mut pods = Vec::new();
    for i in 0..12 {
        pods.push(
            PodBuilder::pending_web(&format!("web-{i}"), "500m", "1Gi")
                .label("app", "web")
                .spec("topologySpreadConstraints", spread.clone())
                .build(),
        );
    }
    for i in 0..5 {
        pods.push(
            PodBuilder::pending_web(&format!("worker-{i}"), "1", "7Gi")
                .label("app", "worker")
                .build(),
        );
    }
    for i in 0..20 {
        pods.push(
            PodBuilder::pending_web(&format!("tiny-{i}"), "100m", "128Mi")
                .label("app", "tiny")
                .build(),
        );
    }
    pods
}

type Node = (String, String, String, CapacityType, usize);

#[test]
fn carpool_plan_prints_the_nodes_the_provisioners_batch_launches_for_the_same_dump() {
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let objects: Vec<Value> = [nodepool(), nodeclass()].into_iter().chain(pods()).collect();

    // `carpool plan` on the dump (plan_cmd.rs calls plan_dump with these defaults).
    let mut snapshot = Snapshot::default();
    let dump = json!({ "apiVersion": "v1", "kind": "List", "items": objects });
    snapshot.add_text("dump.json", &dump.to_string()).unwrap();
    let (plan, _) = plan_dump(snapshot, &region, &Selector::default(), FitTo::default());
    let mut planned: Vec<Node> = plan
        .nodes
        .iter()
        .map(|n| {
            (
                n.nodepool.clone(),
                n.instance_type.clone(),
                n.zone.clone(),
                n.capacity_type,
                n.pods.len(),
            )
        })
        .collect();

    // The provisioner's run on the same objects, the cloud's subnets in the same zones.
    let cloud = FakeCloud::new();
    cloud.set_now(START as i64 * 1000);
    cloud.set_zones("default", &["us-east-1a", "us-east-1b"]);
    let cluster = FakeCluster::new();
    cluster.add_nodepool(nodepool());
    cluster.add_ec2nodeclass(nodeclass());
    for p in pods() {
        cluster.add_pod(serde_json::from_value(p).unwrap());
    }
    let store = FakeStore::new();
    let clock = FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START));
    let settings = Settings {
        deployment: "carpool-test".into(),
        ..Settings::default()
    };
    let mut provisioner = Provisioner::new(&cloud, &cluster, &store, &clock, settings, "run-1");
    let report = block_on(provisioner.run(&region)).unwrap();
    let mut launched: Vec<Node> = report
        .launched()
        .map(|l| {
            (
                l.nodepool.clone(),
                l.instance_type.clone(),
                l.zone.clone(),
                l.capacity_type,
                l.pods,
            )
        })
        .collect();

    planned.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    launched.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert!(!planned.is_empty());
    assert!(
        planned.iter().all(|n| n.2 == "us-east-1a" || n.2 == "us-east-1b"),
        "{planned:?}"
    );
    assert_eq!(planned, launched);
    let launched_cost: f64 = report.launched().map(|l| l.price_per_hour).sum();
    assert!(
        (plan.cost_per_hour - launched_cost).abs() < 1e-9,
        "{} vs {launched_cost}",
        plan.cost_per_hour
    );
}
