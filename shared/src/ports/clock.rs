//! The clock port: handlers ask it for `now` and pass it to decisions.

use std::time::SystemTime;

/// Milliseconds since the Unix epoch: how records hold time.
pub type EpochMillis = i64;

/// Converts a time to [`EpochMillis`] (0 before the epoch).
pub fn epoch_millis(t: SystemTime) -> EpochMillis {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The source of the current time. Decisions never read the clock; handlers ask this port
/// and pass `now` in.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}
