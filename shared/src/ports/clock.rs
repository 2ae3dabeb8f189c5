//! The clock port: handlers ask it for `now` and pass it to decisions.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

/// Milliseconds since the Unix epoch: how records hold time.
pub type EpochMillis = i64;

/// Converts a time to [`EpochMillis`] (0 before the epoch).
pub fn epoch_millis(t: SystemTime) -> EpochMillis {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

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
