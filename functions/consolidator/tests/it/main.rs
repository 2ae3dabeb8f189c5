//! The consolidator's tests, in one test binary.
//!
//! - [`handler`]: the handler on the in-memory ports deletes an empty node and answers its
//!   report, does nothing while another run holds the lease, and makes a failing API a
//!   retryable error.
//! - [`e2e`]: on the local stack (`#[ignore]`d without it), a Deployment scaled down is
//!   consolidated with its PDB held, runs killed mid-way resume without launching twice,
//!   and a node on demand for want of spot returns to spot.
//! - [`surge`]: on the local stack, a single-replica Deployment that opted in to a surge
//!   before eviction keeps a ready replica while its node is consolidated.

mod e2e;
mod handler;
mod surge;
