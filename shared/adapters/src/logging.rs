//! Logs: one JSON object per line for CloudWatch Logs (Logs Insights reads the fields),
//! unless `AWS_LAMBDA_LOG_FORMAT=Text` asks for text.

use tracing_subscriber::EnvFilter;

/// Starts tracing at `level` (`RUST_LOG` syntax, as the configuration read it: see
/// `Config::log_level`); a level that does not parse logs at `info`.
pub fn init(level: &str) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let text = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("text"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(false)
        // Lambda stamps each line itself.
        .without_time();
    let result = if text {
        builder.try_init()
    } else {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init()
    };
    if let Err(e) = result {
        eprintln!("tracing was already set up: {e}");
    }
}
