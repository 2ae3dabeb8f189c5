//! The provisioner Lambda (skeleton; the handler lands next).
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

async fn handler(event: LambdaEvent<Value>) -> Result<Value, Error> {
    Ok(event.payload)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(service_fn(handler)).await
}
