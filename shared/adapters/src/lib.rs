//! # Carpool adapters
//!
//! The ports of the core crate (`carpool::ports`) implemented against the real services.
//! The AWS SDK crates are heavy to build (aws-sdk-ec2 alone takes minutes and gigabytes),
//! so they live in this crate alone and the core builds and tests without them.
//!
//! ## Layout
//!
//! - [`clock`]: the system clock, sleeping on tokio (the `Timer` port).
//! - [`cluster_info`]: what a node needs to join its cluster (name, endpoint, CA, service
//!   CIDR), written into its NodeConfig.
//! - [`dynamodb`]: the `StateStore` on one DynamoDB table (the schema in DESIGN.md), every
//!   racing write conditional.
//! - [`ec2`]: the `Cloud` port on EC2: EC2NodeClass resolution, launch templates reused by
//!   content hash, instant CreateFleet launches with fleet errors mapped to capacity errors.
//! - [`edge`]: the Lambda edge every function shares: `serve` and the one mapping of a
//!   failure to `Retryable` or `NonRetryable`.
//! - [`eks`]: access to an EKS cluster: its endpoint and CA from `DescribeCluster` (or an
//!   override), and a `kube::Client` carrying an EKS token it refreshes before expiry.
//! - [`eks_token`]: the bearer token EKS accepts, as `aws eks get-token` makes it.
//! - [`kube_cluster`]: the `Cluster` port on the Kubernetes API: reads, cordon and taint
//!   patches that keep other fields, evictions through the Eviction API.
//! - [`kube_retry`]: the apiserver's reads retried on 429, 5xx and lost connections, with
//!   jittered backoff.
//! - [`logging`]: JSON logs for CloudWatch (`AWS_LAMBDA_LOG_FORMAT` respected).
//! - [`real_ports`]: every real port and the region's catalog, from a function's
//!   configuration, built once per cold start.
//! - [`sdk_timeouts`]: the attempt and operation timeouts of every AWS call.
//! - [`slim`]: what the kube adapter keeps of the objects it lists (no managed fields,
//!   no container environments or statuses).
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod clock;
pub mod cluster_info;
pub mod dynamodb;
pub mod ec2;
pub mod edge;
pub mod eks;
pub mod eks_token;
pub mod kube_cluster;
pub mod kube_retry;
pub mod logging;
pub mod real_ports;
pub mod sdk_timeouts;
pub mod slim;
