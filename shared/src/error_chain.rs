//! An error and its sources in one line, `outer: inner: innermost`.
//!
//! An error that keeps its cause as its `source()` does not repeat it in its message, so a
//! message meant for a person (a plan's reason, a report's error, a log line) is the whole
//! chain: `format!("{}", Chain(&e))`.

use std::error::Error;
use std::fmt;

/// Displays an error followed by each of its sources, separated by `": "`.
#[derive(Clone, Copy, Debug)]
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn prints_every_source_in_order() {
        assert_eq!(Chain(&Outer(Inner)).to_string(), "outer: inner");
        assert_eq!(Chain(&Inner).to_string(), "inner");
    }
}
