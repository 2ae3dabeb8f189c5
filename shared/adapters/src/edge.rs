//! The Lambda edge that every function shares: tracing, the configuration read once, the
//! real ports built once per cold start, `lambda_runtime::run`, and the one mapping of a
//! failure to the `errorType` Lambda reports (`Retryable` or `NonRetryable`).
//!
//! A function's `main.rs` names its app and its handler, and nothing else:
//!
//! ```ignore
//! serve(App::from_ports, handler::invoke).await
//! ```

use std::error::Error as StdError;

use carpool::error_chain::Chain;
use carpool::run::config::Config;
use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use serde_json::Value;

use crate::logging;
use crate::real_ports::{RealPorts, real_ports};

/// What kind of failure an invocation's error is, as its `errorType` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// Running again later may succeed (throttling, a lost race, a run that resumes).
    Retryable,
    /// It will fail again until something changes (permissions, configuration, a bug,
    /// a payload that cannot be read).
    NonRetryable,
}

impl ErrorType {
    /// `Retryable` or `NonRetryable`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Retryable => "Retryable",
            ErrorType::NonRetryable => "NonRetryable",
        }
    }

    /// The error Lambda reports for `error` (its whole chain, in one line), led by `what`
    /// when the error alone would not say which step failed.
    pub fn diagnostic(self, what: Option<&str>, error: &(dyn StdError + 'static)) -> Diagnostic {
        let message = Chain(error).to_string();
        Diagnostic {
            error_type: self.as_str().to_string(),
            error_message: match what {
                Some(w) => format!("{w}: {message}"),
                None => message,
            },
        }
    }
}

/// Runs a function: reads its configuration from the environment (a bad one is logged
/// and ends the cold start), starts JSON logging at its level, builds the real ports
/// once, makes the app with `make`, and serves each invocation with `handler`.
pub async fn serve<App, Make, Handler>(make: Make, handler: Handler) -> Result<(), lambda_runtime::Error>
where
    Make: FnOnce(RealPorts, Config) -> App,
    Handler: AsyncFn(&App, LambdaEvent<Value>) -> Result<Value, Diagnostic>,
{
    let read = Config::read(|k| std::env::var(k).ok());
    logging::init(&read.log_level);
    let config = read
        .config
        .inspect_err(|e| tracing::error!(error = %e, "configuration"))?;
    let ports = real_ports(&config)
        .await
        .inspect_err(|e| tracing::error!(error = %Chain(e), "cold start"))?;
    let app = make(ports, config);
    let app = &app;
    let handler = &handler;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| handler(app, event))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_diagnostic_carries_the_type_and_the_whole_chain() {
        let e = Outer(std::io::Error::other("inner"));
        let d = ErrorType::Retryable.diagnostic(None, &e);
        assert_eq!(d.error_type, "Retryable");
        assert_eq!(d.error_message, "outer: inner");
        let d = ErrorType::NonRetryable.diagnostic(Some("UnreadableEvent"), &e);
        assert_eq!(d.error_type, "NonRetryable");
        assert_eq!(d.error_message, "UnreadableEvent: outer: inner");
    }
}
