//! # The consolidator Lambda
//!
//! An EventBridge schedule invokes it (every 5 minutes by default). Each invocation runs
//! [`carpool::run::consolidate`]: it resumes the consolidation in progress, or decides
//! one ([`carpool::decide::disruption`]), re-checks it, and carries it out.
//!
//! ## Layout
//!
//! - `main.rs`: names the app and its handler for [`carpool_adapters::edge::serve`], which
//!   starts tracing, reads the configuration, builds the real ports once and runs Lambda.
//! - [`handler`]: one invocation, generic over the ports, so tests run it on the fakes.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod handler;
