//! The timeouts of every AWS call, so that a call that hangs (a half-open connection, an
//! endpoint that accepts and never answers) cannot eat a run: the SDK's own defaults set
//! a connect timeout only.
//!
//! - **Attempt:** 10 s. Every call Carpool makes answers in well under a second, except
//!   an instant CreateFleet of many instances, which takes a few seconds.
//! - **Operation:** 30 s, the retries of throttling and 5xx included (the SDK's standard
//!   retry: 3 attempts, jittered backoff), so one run of the provisioner (a minute) or an
//!   interruption (two) still has time to act after a call gives up.
//! - **Connect:** 3 s.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;

/// The connect timeout.
pub const CONNECT: Duration = Duration::from_secs(3);
/// One attempt's timeout.
pub const ATTEMPT: Duration = Duration::from_secs(10);
/// A whole operation's timeout, its retries included.
pub const OPERATION: Duration = Duration::from_secs(30);

/// The timeouts of every AWS client Carpool builds.
pub fn sdk_timeouts() -> TimeoutConfig {
    timeouts(ATTEMPT, OPERATION)
}

/// Timeouts of `attempt` per attempt and `operation` in all, with [`CONNECT`] (tests cut
/// a hung call sooner with them).
pub fn timeouts(attempt: Duration, operation: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT)
        .operation_attempt_timeout(attempt)
        .operation_timeout(operation)
        .build()
}
