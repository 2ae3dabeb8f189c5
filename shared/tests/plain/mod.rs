//! The world the heap-capped test binaries (`heap`, `hostile`) start from: the fakes at
//! one time, one plain on-demand m5 NodePool `general` and the standard EC2NodeClass;
//! each test adds its own objects, then runs the provisioner once.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder};
use carpool::model::well_known as wk;
use carpool::run::provision::{Provisioner, RunReport, Settings};

const START: u64 = 1_790_000_000;

/// The fakes of one run.
pub struct Plain {
    pub cloud: FakeCloud,
    pub cluster: FakeCluster,
    pub store: FakeStore,
    pub clock: FakeClock,
}

impl Plain {
    /// The fakes at `START`, with the pool `general` and its class.
    pub fn new() -> Self {
        let w = Plain {
            cloud: FakeCloud::new(),
            cluster: FakeCluster::new(),
            store: FakeStore::new(),
            clock: FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START)),
        };
        w.cloud.set_now(START as i64 * 1000);
        w.cluster.add_nodepool(
            NodePoolBuilder::new("general")
                .requirement(wk::CAPACITY_TYPE, "In", &["on-demand"])
                .requirement(wk::INSTANCE_FAMILY, "In", &["m5"])
                .build(),
        );
        w.cluster.add_ec2nodeclass(EC2NodeClassBuilder::standard().build());
        w
    }

    /// One provisioner run in us-east-1.
    pub fn run(&self) -> RunReport {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let settings = Settings {
            deployment: "carpool-test".into(),
            ..Settings::default()
        };
        let mut p = Provisioner::new(&self.cloud, &self.cluster, &self.store, &self.clock, settings, "run-1");
        pollster::block_on(p.run(&region)).unwrap()
    }
}
