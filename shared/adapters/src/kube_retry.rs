//! Retries of the apiserver's reads: a 429, a 5xx or a lost connection is tried again
//! after a jittered, growing wait, so that one bad moment of the apiserver does not end a
//! run.
//!
//! Written here rather than through kube's own retry layer: `kube::Config::default_retry`
//! retries every 429 of every call, evictions included, where a 429 is a PDB's answer that
//! the caller must see at once (see [`crate::kube_cluster`]); and it backs off for up to
//! 1000 s, far past a run's minute. Writes are not retried here: each has its own answer
//! to a failure (a conflict is read again, an eviction blocked is a value).
//!
//! The waits are "full jitter" (a uniform draw below an exponential cap), the scheme the
//! AWS SDKs use (`aws-smithy-runtime`'s standard retry strategy) and client-go's
//! `wait.Backoff` approximates with its `Jitter` factor.

use std::future::Future;
use std::time::Duration;

/// How reads are retried.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadRetry {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The cap of the first wait; it doubles with each attempt.
    pub base: Duration,
    /// The largest cap.
    pub max: Duration,
}

impl Default for ReadRetry {
    /// 4 attempts, waits below 100 ms, 200 ms, 400 ms: at most 0.7 s of waiting, well
    /// inside a poll of a 50-s watch.
    fn default() -> Self {
        ReadRetry {
            attempts: 4,
            base: Duration::from_millis(100),
            max: Duration::from_secs(2),
        }
    }
}

impl ReadRetry {
    /// No retry: one attempt.
    pub fn none() -> Self {
        ReadRetry {
            attempts: 1,
            ..ReadRetry::default()
        }
    }

    /// The wait after failed attempt `attempt` (0 for the first), for a uniform draw
    /// `unit` in `[0, 1)`: `unit × min(max, base × 2^attempt)`.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let cap = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt.min(20)))
            .min(self.max);
        cap.mul_f64(unit.clamp(0.0, 1.0))
    }

    /// Runs `call` until it succeeds, fails with an error that is not
    /// [transient](is_transient), or has been tried [`ReadRetry::attempts`] times; each
    /// retry is logged with `what`.
    pub async fn run<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, kube::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut attempt = 0;
        loop {
            match call().await {
                Err(e) if is_transient(&e) && attempt + 1 < self.attempts => {
                    let wait = self.delay(attempt, fastrand::f64());
                    tracing::info!(what, attempt = attempt + 1, wait_ms = wait.as_millis() as u64, error = %e, "apiserver read failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// Whether a read that failed so may succeed if tried again: the apiserver throttled it
/// (429) or failed (5xx), or the connection failed or timed out.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_the_cap_and_stay_below_it() {
        let r = ReadRetry::default();
        assert_eq!(r.delay(0, 0.999_999), Duration::from_millis(100).mul_f64(0.999_999));
        assert_eq!(r.delay(2, 0.5), Duration::from_millis(200));
        assert_eq!(r.delay(10, 0.5), Duration::from_secs(1));
        assert_eq!(r.delay(40, 1.0), Duration::from_secs(2));
        assert_eq!(r.delay(3, 0.0), Duration::ZERO);
    }
}
