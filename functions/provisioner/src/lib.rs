//! # The provisioner Lambda
//!
//! ## Layout
//!
//! - `main.rs`: the thin entry point: tracing, config, clients, `lambda_runtime::run`.
//! - [`handler`]: one invocation, generic over the ports, so tests run it on the fakes
//!   and on the local stack; a failed run is returned with its `error_type` set to
//!   `Retryable` or `NonRetryable`.
//! - [`init`]: the real ports from the configuration (EKS access, EC2, DynamoDB), built
//!   once per cold start.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod handler;
pub mod init;
