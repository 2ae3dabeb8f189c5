//! The consolidator Lambda: fewer, cheaper nodes, PDBs holding. See the crate's `lib.rs`.

use carpool::run::provision::ProvisionerConfig;
use carpool_adapters::logging;
use carpool_consolidator::{handler, init};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let read = ProvisionerConfig::read(|k| std::env::var(k).ok());
    logging::init(&read.log_level);
    let config = read
        .config
        .inspect_err(|e| tracing::error!(error = %e, "configuration"))?;
    let app = init::app(config)
        .await
        .inspect_err(|e| tracing::error!(error = %carpool::error_chain::Chain(e), "cold start"))?;
    run(service_fn(|event: LambdaEvent<Value>| handler::invoke(&app, event))).await
}
