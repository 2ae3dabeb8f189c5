//! The clock of a running function: the system time, and sleeps on tokio.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use carpool::ports::{Clock, Timer};

/// The system clock, sleeping on the tokio runtime.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

impl Timer for TokioClock {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(duration))
    }
}
