//! # The consolidator Lambda
//!
//! An EventBridge schedule invokes it (every 5 minutes by default). Each invocation runs
//! [`carpool::run::consolidate`]: it resumes the consolidation in progress, or decides
//! one ([`carpool::decide::disruption`]), re-checks it, and carries it out.
//!
//! ## Layout
//!
//! - `main.rs`: the thin entry point: tracing, config, clients, `lambda_runtime::run`.
//! - [`handler`]: one invocation, generic over the ports, so tests run it on the fakes.
//! - [`init`]: the real ports from the configuration, built once per cold start.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod handler;
pub mod init;
