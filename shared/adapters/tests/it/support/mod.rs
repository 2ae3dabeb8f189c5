//! What the modules share.
//!
//! - [`replay`]: a replayed HTTP client for the AWS SDK, with canned answers in order.

pub mod replay;
