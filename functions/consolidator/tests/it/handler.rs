//! The consolidator's handler over the in-memory ports: a scheduled invocation deletes an
//! empty node and answers its report; an invocation while another run holds the lease
//! does nothing; a failing API is a retryable error.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore, StoreErrorKind};
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::CapacityType;
use carpool::ports::{Instance, InstanceState, StateStore};
use carpool::run::config::Config;
use carpool_consolidator::handler::App;
use k8s_openapi::api::core::v1::Node;
use pollster::block_on;
use serde_json::json;

const START: u64 = 1_790_000_000;

fn app() -> App<FakeCloud, FakeCluster, FakeStore, FakeClock> {
    let config = Config::from_vars(|k| match k {
        "CARPOOL_CLUSTER_NAME" => Some("prod".into()),
        "CARPOOL_TABLE_NAME" => Some("carpool".into()),
        "AWS_REGION" => Some("us-east-1".into()),
        "CARPOOL_DEPLOYMENT" => Some("carpool-test".into()),
        "CARPOOL_LIVE_PRICES" => Some("false".into()),
        _ => None,
    })
    .unwrap();
    let clock = FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START));
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let cloud = FakeCloud::new();
    cloud.set_now(START as i64 * 1000);
    cloud.add_instance(Instance {
        id: "i-empty".into(),
        instance_type: "m5.xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        nodepool: "general".into(),
        launch_id: "run-1".into(),
        deployment: Some("carpool-test".into()),
        state: InstanceState::Running,
        launched_at: Some(START as i64 * 1000 - 3_600_000),
        network: Default::default(),
    });
    let cluster = FakeCluster::new();
    cluster.add_nodepool(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
            "disruption": {"consolidateAfter": "0s"}}}));
    cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
    let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "empty", "creationTimestamp": "2026-09-21T00:00:00Z", "labels": {
            "kubernetes.io/hostname": "empty", "karpenter.sh/nodepool": "general", "carpool.sh/managed": "true",
            "node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": "us-east-1a",
            "karpenter.sh/capacity-type": "on-demand"}},
        "spec": {"providerID": "aws:///us-east-1a/i-empty"},
        "status": {"allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-09-21T00:00:00Z"}]}}))
    .unwrap();
    cluster.add_node(node);
    App::new(cloud, cluster, FakeStore::new(), clock, config, region)
}

fn deadline() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(START + 600)
}

#[test]
fn a_scheduled_invocation_deletes_an_empty_node_and_answers_its_report() {
    let app = app();
    let report = block_on(app.handle("req-1", deadline())).unwrap();
    assert_eq!(report.command.as_ref().unwrap().nodes, vec!["empty".to_string()]);
    assert_eq!(report.nodes_consolidated, 1);
    assert!(app.cluster.node("empty").is_none());
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["command"]["method"], "emptiness");
}

#[test]
fn an_invocation_while_another_run_holds_the_lease_does_nothing() {
    let app = app();
    block_on(app.store.acquire_lease(
        "consolidator",
        "other",
        SystemTime::UNIX_EPOCH + Duration::from_secs(START),
        Duration::from_secs(300),
    ))
    .unwrap();
    let report = block_on(app.handle("req-1", deadline())).unwrap();
    assert_eq!(report.lease_held_by.as_deref().map(|h| h.contains("other")), Some(true));
    assert!(app.cluster.node("empty").is_some());
}

#[test]
fn a_failing_store_is_a_retryable_error_and_the_next_invocation_goes_on() {
    let app = app();
    app.store.fail_next(StoreErrorKind::Api);
    let e = block_on(app.handle("req-1", deadline())).unwrap_err();
    assert_eq!(e.error_type, "Retryable");
    let report = block_on(app.handle("req-2", deadline())).unwrap();
    assert_eq!(report.nodes_consolidated, 1);
}
