//! The interruption Lambda: spot warnings, rebalance recommendations, Health scheduled
//! changes and state changes become drains with replacements. See the crate's `lib.rs`.

use carpool_adapters::clock::TokioClock;
use carpool_adapters::edge::serve;
use carpool_interruption::handler::{App, invoke};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    serve(
        |p, config| App::new(p.cloud, p.cluster, p.store, TokioClock, config, p.region),
        invoke,
    )
    .await
}
