//! A provisioner's world over the in-memory ports, for the run-level tests of
//! [`ownership`](crate::ownership), [`launch_reconcile`](crate::launch_reconcile) and
//! [`provisioner_crash`](crate::provisioner_crash): one NodePool and its EC2NodeClass,
//! pending pods, a clock that starts at [`START`], and this deployment, [`DEPLOYMENT`].

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::model::CapacityType;
use carpool::model::pod::Pod;
use carpool::ports::{EpochMillis, Instance, InstanceState};
use carpool::run::provision::{Provisioner, RunReport, Settings};
use pollster::block_on;
use serde_json::json;

/// The clock's start, in seconds.
pub const START: u64 = 1_790_000_000;
/// This deployment.
pub const DEPLOYMENT: &str = "carpool-prod";

/// [`START`] in milliseconds.
pub fn start_ms() -> EpochMillis {
    START as i64 * 1000
}

/// The settings of a run: a 50-s watch, a 15-min registration TTL.
pub fn settings() -> Settings {
    Settings {
        deployment: DEPLOYMENT.into(),
        ..Settings::default()
    }
}

fn pending_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "web", "uid": name,
                     "creationTimestamp": "2026-09-21T12:00:00Z", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx",
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

/// An instance of the cluster, running, launched at `launched_at`, with these tags.
pub fn tagged(id: &str, launch_id: &str, deployment: Option<&str>, launched_at: Option<EpochMillis>) -> Instance {
    Instance {
        id: id.into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        nodepool: "general".into(),
        launch_id: launch_id.into(),
        deployment: deployment.map(str::to_string),
        state: InstanceState::Running,
        launched_at,
        network: Default::default(),
    }
}

/// The ports.
pub struct World {
    /// EC2.
    pub cloud: FakeCloud,
    /// The cluster.
    pub cluster: FakeCluster,
    /// DynamoDB.
    pub store: FakeStore,
    /// Time.
    pub clock: FakeClock,
}

impl World {
    /// A world with `pods` pending pods of half a CPU each.
    pub fn new(pods: usize) -> Self {
        let w = World {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
        };
        w.cloud.set_now(start_ms());
        w.cluster.add_nodepool(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                ]
            }}}
        }));
        w.cluster.add_ec2nodeclass(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "KarpenterNodeRole",
                     "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                     "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                     "amiSelectorTerms": [{"alias": "al2023@latest"}]}
        }));
        for i in 0..pods {
            w.cluster.add_pod(pending_pod(&format!("web-{i}")));
        }
        w
    }

    /// Moves the clock (and the cloud's launch times) on.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
        let now = self.clock_ms();
        self.cloud.set_now(now);
    }

    /// The clock, in milliseconds.
    pub fn clock_ms(&self) -> EpochMillis {
        use carpool::ports::Clock;
        carpool::ports::epoch_millis(self.clock.now())
    }

    /// One run by `owner` with `settings`.
    pub fn run_with(&self, owner: &str, settings: Settings) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, owner);
        block_on(p.run(&region)).unwrap()
    }

    /// One run by `owner`.
    pub fn run(&self, owner: &str) -> RunReport {
        self.run_with(owner, settings())
    }

    /// The state of an instance in the cloud.
    pub fn state(&self, id: &str) -> Option<InstanceState> {
        self.cloud.instances().into_iter().find(|i| i.id == id).map(|i| i.state)
    }
}
