//! One step of each job, over the ports: the handlers of the Lambda functions call these,
//! and tests run them against the fakes or the local stack.
//!
//! - [`provision`]: the provisioner's run: hold the lease, watch for unschedulable pods,
//!   batch them, plan with [`crate::decide`], launch, record; and housekeeping.

pub mod provision;
