//! Writing to stdout like a Unix tool: when the reader goes away (`carpool plan ... | head`),
//! exit quietly instead of panicking as `println!` does.

use std::io::{ErrorKind, Write};

/// Writes text to stdout; exits with status 0 if the pipe is closed.
pub fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("carpool: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// `println!` to stdout through [`write_stdout`].
macro_rules! say {
    () => { $crate::output::write_stdout("\n") };
    ($($arg:tt)*) => { $crate::output::write_stdout(&format!("{}\n", format_args!($($arg)*))) };
}

/// `print!` to stdout through [`write_stdout`].
macro_rules! say_raw {
    ($($arg:tt)*) => { $crate::output::write_stdout(&format!($($arg)*)) };
}

pub(crate) use {say, say_raw};
