//! What the modules share: the `carpool` binary run with arguments.

use std::process::{Command, Output};

/// The `carpool` binary run with `args`, its output collected.
pub fn carpool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_carpool")).args(args).output().unwrap()
}
