//! One step of each job, over the ports: the handlers of the Lambda functions call these,
//! and tests run them against the fakes or the local stack.
//!
//! - [`provision`]: the provisioner's run: hold the lease, watch for unschedulable pods,
//!   batch them, plan with [`crate::decide`], launch, record; and housekeeping.
//! - [`price_refresh`]: a region's catalog with live prices and offerings, read again
//!   when stale; every function that plans keeps one across invocations.

pub mod price_refresh;
pub mod provision;
