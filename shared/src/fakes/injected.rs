//! The error a fake keeps as the source of a failure a test injected, where a real
//! implementation keeps the SDK's error.

/// A failure injected by a test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, thiserror::Error)]
#[error("injected by the test")]
pub struct Injected;

impl Injected {
    /// Boxed, as the ports' errors keep their sources.
    pub fn boxed() -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(Injected)
    }
}
