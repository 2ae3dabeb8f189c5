//! The adapters' tests, in one test binary. Those against the local stack
//! (`infra/local/up`: moto and a real apiserver) are `#[ignore]`d without it; the others
//! need nothing.
//!
//! Without the stack:
//! - [`ec2_replayed`]: the EC2 adapter on replayed HTTP: DescribeInstances pages, on-demand
//!   prices from the Pricing API, a launch that DescribeInstances does not see yet.
//! - [`ami_replayed`]: AMI aliases on a replayed SSM: one GetParameters call, an image per
//!   architecture, the cache within the refresh interval.
//! - [`throttling`]: DynamoDB throttling retried with backoff, surfaced as `Throttled`
//!   when retries run out; a hanging call is cut by the SDK's timeouts.
//! - [`kube_read_retry`]: the apiserver's reads retried on 429 and 5xx, writes not.
//!
//! On the stack:
//! - [`dynamodb_contract`]: the StateStore contract on DynamoDB.
//! - [`dynamodb_poison`]: an item that does not read is skipped, and the rest listed.
//! - [`ec2`]: the Cloud port on moto's EC2: launch, list, get, terminate, the launch
//!   template's content, zonal offerings.
//! - [`ec2_amis`]: AMIs resolved as Karpenter resolves them, per architecture.
//! - [`ec2_capacity_reservations`]: reservations selected by a class's terms, a reserved
//!   launch that targets its reservation, a full one out of capacity.
//! - [`ec2_fleet_errors`]: fleet capacity errors become `InsufficientCapacity` naming
//!   the offerings.
//! - [`ec2_launch_templates`]: 200 batches make one template per NodePool and capacity
//!   type; idle ones are deleted, another tool's never; a launch from a deleted template
//!   makes it again.
//! - [`eks`]: `DescribeCluster`, an EKS-token client on the apiserver, and logs without
//!   credentials.
//! - [`kube_cluster`]: the Cluster port on the real apiserver: its contract, a PDB's 429,
//!   a stale taint update's 409.
//!
//! [`support`] holds the replayed HTTP client.

mod ami_replayed;
mod dynamodb_contract;
mod dynamodb_poison;
mod ec2;
mod ec2_amis;
mod ec2_capacity_reservations;
mod ec2_fleet_errors;
mod ec2_kubelet;
mod ec2_launch_fields;
mod ec2_launch_templates;
mod ec2_replayed;
mod eks;
mod kube_cluster;
mod kube_read_retry;
mod support;
mod throttling;
