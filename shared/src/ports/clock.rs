//! The clock port: handlers ask it for `now` and pass it to decisions.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

pub use crate::model::time::{EpochMillis, epoch_millis};

/// The source of the current time. Decisions never read the clock; handlers ask this port
/// and pass `now` in. The core has no implementation that reads the system time: the real
/// one is `carpool_adapters::clock::TokioClock`, the fake is `fakes::FakeClock` (feature `test-util`).
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// A clock that can also wait: what a run that watches for a while needs. The real one
/// sleeps on the async runtime (`carpool_adapters::clock::TokioClock`); the fake moves its
/// time forward at once, so a test of a 50-second watch runs in microseconds.
pub trait Timer: Clock {
    /// Waits for `duration`.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}
