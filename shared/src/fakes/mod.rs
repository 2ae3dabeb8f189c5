//! Stateful in-memory implementations of the ports (feature `test-util`), for tests and
//! the simulator, and the contract suites every implementation must pass.

mod clock;
mod cloud;
mod contract;
mod store;

pub use clock::FakeClock;
pub use cloud::{CloudFault, FakeCloud};
pub use contract::store_contract;
pub use store::{FakeStore, StoreErrorKind};
