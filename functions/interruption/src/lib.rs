//! # The interruption Lambda
//!
//! ## Layout
//!
//! - `main.rs`: names the app and its handler for [`carpool_adapters::edge::serve`], which
//!   starts tracing, reads the configuration, builds the real ports once and runs Lambda.
//! - [`handler`]: one invocation (an SQS batch with `ReportBatchItemFailures`, or one
//!   EventBridge event), generic over the ports, so tests run it on the fakes and on the
//!   local stack.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod handler;
