//! Issue 28, "What `kubectl get` shows": the provisioner writes the `status` of the
//! NodePools and EC2NodeClasses Carpool manages as Karpenter writes it (a NodePool's
//! resources, node count and conditions, kubernetes-sigs/karpenter
//! `pkg/controllers/nodepool/counter` and `nodepool/readiness`; a class's subnets, security
//! groups, AMIs and its Ready condition with the reason, aws/karpenter-provider-aws
//! `pkg/controllers/nodeclass`), through the status subresource only, only when it
//! changed, and never for a NodePool it does not manage or the class such a pool uses.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::selector::Selector;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder};
use carpool::model::{EC2NodeClass, NodePool};
use carpool::ports::Cluster;
use carpool::run::provision::{Provisioner, RunReport, Settings};
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

/// NodePool `web` (managed, class `default`) with two nodes, and NodePool `karpenter`
/// (not managed: the selector wants `carpool.sh/managed=true`) on class `theirs`.
fn world() -> World {
    let w = World {
        cloud: FakeCloud::new(),
        cluster: FakeCluster::new(),
        store: FakeStore::new(),
        clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
    };
    let mut web = NodePoolBuilder::new("web").build();
    web["metadata"]["labels"] = json!({"carpool.sh/managed": "true"});
    web["metadata"]["generation"] = json!(4);
    w.cluster.add_nodepool(web);
    w.cluster
        .add_nodepool(NodePoolBuilder::new("karpenter").node_class("theirs").build());
    w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
    w.cluster.add_ec2nodeclass(
        EC2NodeClassBuilder::new("theirs")
            .role("KarpenterNodeRole")
            .discovery("prod")
            .al2023()
            .build(),
    );
    for name in ["n1", "n2"] {
        let mut node = NodeBuilder::new(name).build();
        node["metadata"]["labels"]["karpenter.sh/nodepool"] = json!("web");
        node["status"]["capacity"] = json!({"cpu": "4", "memory": "16Gi", "pods": "58", "ephemeral-storage": "20Gi"});
        w.cluster.add_node(serde_json::from_value(node).unwrap());
    }
    w
}

impl World {
    fn run(&self, owner: &str) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let settings = Settings {
            watch: Duration::from_secs(0),
            nodepool_selector: Selector::parse("carpool.sh/managed=true").unwrap(),
            ..Settings::default()
        };
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, owner);
        block_on(p.run(&region)).unwrap()
    }

    fn pool(&self, name: &str) -> NodePool {
        let pools = block_on(self.cluster.nodepools()).unwrap().valid;
        pools.into_iter().find(|p| p.name() == name).unwrap()
    }

    fn class(&self, name: &str) -> EC2NodeClass {
        let classes = block_on(self.cluster.ec2nodeclasses()).unwrap().valid;
        classes.into_iter().find(|c| c.name() == name).unwrap()
    }
}

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} condition in {status}"))
}

#[test]
fn a_managed_nodepool_shows_its_nodes_resources_and_readiness() {
    let w = world();
    let r = w.run("run-1");
    assert!(r.statuses_written.contains(&"NodePool/web".to_string()), "{r:#?}");
    let status = w.pool("web").status.unwrap();
    assert_eq!(status["nodes"], 2);
    assert_eq!(status["resources"]["cpu"], "8");
    assert_eq!(status["resources"]["memory"], "32Gi");
    assert_eq!(status["resources"]["nodes"], "2");
    assert_eq!(condition(&status, "NodeClassReady")["status"], "True");
    assert_eq!(condition(&status, "Ready")["status"], "True");
    assert_eq!(condition(&status, "Ready")["observedGeneration"], 4);
}

#[test]
fn a_managed_class_shows_what_it_resolved_to() {
    let w = world();
    w.cloud.set_zones("default", &["us-east-1a", "us-east-1b"]);
    w.run("run-1");
    let status = w.class("default").status.unwrap();
    assert_eq!(
        status["subnets"],
        json!([{"id": "subnet-us-east-1a", "zone": "us-east-1a"}, {"id": "subnet-us-east-1b", "zone": "us-east-1b"}])
    );
    assert_eq!(status["securityGroups"], json!([{"id": "sg-fake"}]));
    let amis: Vec<&str> = status["amis"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(amis, vec!["ami-fake-amd64", "ami-fake-arm64"]);
    assert_eq!(status["instanceProfile"], "carpool-KarpenterNodeRole");
    assert_eq!(condition(&status, "Ready")["status"], "True");
}

#[test]
fn a_class_whose_role_does_not_exist_is_not_ready_and_launches_nothing() {
    let w = world();
    w.cloud.remove_role("KarpenterNodeRole");
    w.cluster.add_pod(
        carpool::fixtures::PodBuilder::pending_web("web-0", "500m", "1Gi")
            .pod()
            .unwrap(),
    );
    let r = w.run("run-1");
    assert_eq!(r.launched().count(), 0, "{r:#?}");
    let status = w.class("default").status.unwrap();
    let profile = condition(&status, "InstanceProfileReady");
    assert_eq!(profile["status"], "False");
    assert_eq!(profile["reason"], "InstanceProfileNotFound");
    assert!(
        condition(&status, "Ready")["message"]
            .as_str()
            .unwrap()
            .contains("KarpenterNodeRole"),
        "{status}"
    );
}

#[test]
fn a_class_whose_security_group_selector_selects_nothing_is_not_ready_and_says_why() {
    let w = world();
    w.run("run-1");
    w.cloud.set_security_groups("default", &[]);
    w.clock.advance(Duration::from_secs(60));
    w.run("run-2");
    let status = w.class("default").status.unwrap();
    let groups = condition(&status, "SecurityGroupsReady");
    assert_eq!(groups["status"], "False");
    assert_eq!(groups["reason"], "SecurityGroupsNotFound");
    let ready = condition(&status, "Ready");
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"].as_str().unwrap().contains("selects no security group"),
        "{ready}"
    );
    // Its NodePool says its class is not ready.
    let pool = w.pool("web").status.unwrap();
    assert_eq!(condition(&pool, "NodeClassReady")["reason"], "SecurityGroupsNotFound");
    assert_eq!(condition(&pool, "Ready")["status"], "False");
}

#[test]
fn an_unchanged_status_is_not_written_again() {
    let w = world();
    w.run("run-1");
    w.clock.advance(Duration::from_secs(60));
    let r = w.run("run-2");
    assert!(r.statuses_written.is_empty(), "{:?}", r.statuses_written);
    let writes = w
        .cluster
        .calls()
        .iter()
        .filter(|c| c.starts_with("write_status"))
        .count();
    assert_eq!(writes, 2, "one NodePool and one class, once");
}

#[test]
fn nothing_is_written_for_a_nodepool_carpool_does_not_manage_nor_for_its_class() {
    let w = world();
    w.run("run-1");
    assert!(w.pool("karpenter").status.is_none());
    assert!(w.class("theirs").status.is_none());
    assert!(
        !w.cluster
            .calls()
            .iter()
            .any(|c| c.contains("karpenter") || c.contains("theirs")),
        "{:?}",
        w.cluster.calls()
    );
}
