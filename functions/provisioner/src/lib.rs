//! # The provisioner Lambda
//!
//! ## Layout
//!
//! - `main.rs`: names the app and its handler for [`carpool_adapters::edge::serve`], which
//!   starts tracing, reads the configuration, builds the real ports once and runs Lambda.
//! - [`handler`]: one invocation, generic over the ports, so tests run it on the fakes
//!   and on the local stack; a failed run is returned with its `error_type` set to
//!   `Retryable` or `NonRetryable`.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod handler;
