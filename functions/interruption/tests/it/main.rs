//! The interruption function's tests, in one test binary.
//!
//! - [`handler`]: the handler on the in-memory ports answers `batchItemFailures` for the
//!   SQS records it could not read or handle and handles the rest; a bare EventBridge
//!   event works too.
//! - [`e2e`]: on the local stack (`#[ignore]`d without it), a spot interruption through
//!   EventBridge and SQS moves the pods to on-demand with the PDB held, a function
//!   killed mid-drain is resumed, and the sweep replaces and drains the node of a Capacity
//!   Block within 40 minutes of its end.
//! - [`template`]: template.yaml's queue policy denies every sender but the stack's four
//!   EventBridge rules, and nothing the function's role needs to consume.

mod e2e;
mod handler;
mod template;
