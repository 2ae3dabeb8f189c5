//! One step of each job, over the ports: the handlers of the Lambda functions call these,
//! and tests run them against the fakes or the local stack.
//!
//! - [`provision`]: the provisioner's run: hold the lease, watch for unschedulable pods,
//!   batch them, plan with [`crate::decide`], launch, record; and housekeeping.
//! - [`interruption`]: the interruption function's run: an event about an instance
//!   becomes a durable disruption (taint, replacement, drain, terminate, clean up),
//!   resumed by the next invocation after a crash.
//! - [`drain`]: a node drained by eviction, tier by tier, until a deadline, with each
//!   blocked pod explained (its PDB and the disruptions it allows); the interruption
//!   function and the consolidator drain through it; [`surge`]: a workload that opted in
//!   restarted before its pod's eviction, when a PDB refuses it.
//! - [`launch`]: one planned node recorded and launched, and the replacement of a node
//!   that is going away, shared by the three jobs.
//! - [`config`]: the one configuration every function reads from its environment, once,
//!   with its defaults in one place; [`watch_mode`]: how long a provisioner run watches.
//! - [`disruption`]: the `DISRUPT#` state machine the interruption function and the
//!   consolidator both drive.
//! - [`consolidate`]: the consolidator's run.
//! - [`ports`]: the ports a runner works through, borrowed together.
//! - [`observe`]: the cluster read into a snapshot; [`shared_snapshot`]: one read shared
//!   by an invocation's records, which plan in turn; [`emf`]: metrics as CloudWatch reads
//!   them.
//! - [`price_refresh`]: a region's catalog with live prices and offerings, read again
//!   when stale; every function that plans keeps one across invocations.

pub mod config;
pub mod consolidate;
pub mod disruption;
pub mod drain;
pub mod emf;
pub mod interruption;
pub mod launch;
pub mod observe;
pub mod ports;
pub mod price_refresh;
pub mod provision;
pub mod shared_snapshot;
pub mod surge;
pub mod watch_mode;
