//! The real ports, built once per cold start from the configuration
//! ([`carpool_adapters::real_ports`]).

use carpool::run::provision::ProvisionerConfig;
use carpool_adapters::clock::TokioClock;
use carpool_adapters::dynamodb::DynamoStore;
use carpool_adapters::ec2::Ec2Cloud;
use carpool_adapters::kube_cluster::KubeCluster;
pub use carpool_adapters::real_ports::InitError;
use carpool_adapters::real_ports::real_ports;

use crate::handler::App;

/// The function's app on EC2, DynamoDB and the cluster's API.
pub type RealApp = App<Ec2Cloud, KubeCluster, DynamoStore, TokioClock>;

/// Builds the ports and the app.
pub async fn app(config: ProvisionerConfig) -> Result<RealApp, InitError> {
    let ports = real_ports(&config).await?;
    Ok(App::new(
        ports.cloud,
        ports.cluster,
        ports.store,
        TokioClock,
        config,
        ports.region,
    ))
}
