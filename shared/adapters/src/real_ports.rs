//! The real ports (EC2, the cluster's API through EKS, DynamoDB) and the region's
//! catalog, built once per cold start from the configuration. Every function builds its
//! ports here.

use carpool::catalog::{Catalog, CatalogError, RegionCatalog};
use carpool::run::config::Config;

use crate::dynamodb::DynamoStore;
use crate::ec2::{Ec2Clients, Ec2Cloud};
use crate::eks::{EksAccess, EksError, Endpoint};
use crate::kube_cluster::KubeCluster;

/// A cold start that cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The region is not in the embedded catalog.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// EKS access failed (DescribeCluster, the token, the client).
    #[error(transparent)]
    Eks(#[from] EksError),
    /// The CA file of the endpoint override cannot be read.
    #[error("CARPOOL_CLUSTER_CA_FILE {path}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The real ports of a function, and its region's catalog.
pub struct RealPorts {
    /// EC2.
    pub cloud: Ec2Cloud,
    /// The cluster's API.
    pub cluster: KubeCluster,
    /// DynamoDB.
    pub store: DynamoStore,
    /// The region's embedded catalog.
    pub region: RegionCatalog<'static>,
}

/// Builds the SDK clients, the EKS client and the catalog.
pub async fn real_ports(config: &Config) -> Result<RealPorts, InitError> {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(config.region.clone()))
        .timeout_config(crate::sdk_timeouts::sdk_timeouts())
        .load()
        .await;
    let mut eks = EksAccess::new(&sdk, &config.cluster)?;
    if let (Some(url), Some(ca_file)) = (&config.cluster_endpoint, &config.cluster_ca_file) {
        let ca_pem = std::fs::read(ca_file).map_err(|source| InitError::CaFile {
            path: ca_file.clone(),
            source,
        })?;
        eks = eks.with_endpoint_override(Endpoint {
            url: url.clone(),
            ca_pem,
        });
    }
    if let Some(cidr) = &config.service_cidr {
        eks = eks.with_service_cidr(cidr);
    }
    let cluster = KubeCluster::new(eks.client().await?);
    let mut cloud = Ec2Cloud::new(
        Ec2Clients::new(&sdk),
        eks.cluster_info().await?,
        &config.ami_ssm_parameter,
    )
    .with_public_ssm_root(&config.public_ssm_root);
    if let (Some(role), Some(profile)) = (&config.node_role, &config.node_instance_profile) {
        cloud = cloud.with_node_role(role, profile);
    }
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config.table, &config.cluster);
    let region = Catalog::embedded()?.region(&config.region)?;
    Ok(RealPorts {
        cloud,
        cluster,
        store,
        region,
    })
}
