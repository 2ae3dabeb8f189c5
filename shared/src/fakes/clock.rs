//! A clock tests move by hand.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use std::future::Future;
use std::pin::Pin;

use crate::ports::{Clock, Timer};

/// A clock that stands still until told to move.
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<SystemTime>,
}

impl FakeClock {
    /// A clock showing `start`.
    pub fn at(start: SystemTime) -> Self {
        FakeClock { now: Mutex::new(start) }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Timer for FakeClock {
    /// Moves the clock forward by `duration` and returns at once.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.advance(duration);
        Box::pin(std::future::ready(()))
    }
}
