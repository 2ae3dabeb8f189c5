//! The consolidator Lambda: fewer, cheaper nodes, PDBs holding. See the crate's `lib.rs`.

use carpool_adapters::clock::TokioClock;
use carpool_adapters::edge::serve;
use carpool_consolidator::handler::{App, invoke};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    serve(
        |p, config| App::new(p.cloud, p.cluster, p.store, TokioClock, config, p.region),
        invoke,
    )
    .await
}
