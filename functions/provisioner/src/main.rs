//! The provisioner Lambda: pending pods become nodes. See the crate's `lib.rs`.

use carpool_adapters::clock::TokioClock;
use carpool_adapters::edge::serve;
use carpool_provisioner::handler::{App, invoke};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    serve(
        |p, config| App::new(p.cloud, p.cluster, p.store, TokioClock, config, p.region),
        invoke,
    )
    .await
}
