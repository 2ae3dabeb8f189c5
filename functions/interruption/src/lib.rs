//! # The interruption Lambda
//!
//! ## Layout
//!
//! - `main.rs`: the thin entry point: tracing, config, clients, `lambda_runtime::run`.
//! - [`handler`]: one invocation (an SQS batch with `ReportBatchItemFailures`, or one
//!   EventBridge event), generic over the ports, so tests run it on the fakes and on the
//!   local stack.
//! - [`init`]: the real ports from the configuration, built once per cold start.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod handler;
pub mod init;
