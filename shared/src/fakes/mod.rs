//! Stateful in-memory implementations of the ports (feature `test-util`), for tests and
//! the simulator, and the contract suites every implementation must pass.

mod clock;
mod cloud;
mod cloud_contract;
mod cluster;
mod cluster_contract;
mod crash_point;
mod crashing;
mod injected;
mod store;
mod store_contract;
mod yielding;

pub use clock::FakeClock;
pub use cloud::{CloudFault, DEFAULT_SECURITY_GROUP, FakeCloud, default_images};
pub use cloud_contract::{UNKNOWN_INSTANCE, cloud_contract};
pub use cluster::{ClusterErrorKind, FakeCluster, PDB_BLOCKS, SEVERAL_PDBS};
pub use cluster_contract::{ClusterScene, KEEP_LABEL, cluster_contract, disrupted_taint, keep_taint};
pub use crash_point::{CrashPoint, Crashable, run_until_crash};
pub use crashing::Crashing;
pub use injected::Injected;
pub use store::{FakeStore, StoreErrorKind};
pub use store_contract::store_contract;
pub use yielding::Yielding;
