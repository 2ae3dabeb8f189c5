//! The `carpool` command as a user runs it: one test binary, one module per command.
//!
//! - [`catalog`]: `carpool catalog` lists the matching types, cheapest first, with the
//!   documented fields.
//! - [`event`]: `carpool event` reads the core crate's event samples and answers what it
//!   would do.
//! - [`nodeoverlay`]: `carpool plan` and `carpool disrupt` price a dump's offerings as its
//!   NodeOverlays say.
//! - [`plan`]: `carpool plan` and `carpool bench` print the documented plan and measures.
//! - [`simulate`]: `carpool simulate` keeps its invariants on every example scenario, the
//!   same seed gives the same report, and bad input is one line with exit code 2.
//! - [`support`]: the binary run with arguments.

mod catalog;
mod event;
mod nodeoverlay;
mod plan;
mod simulate;
mod support;
