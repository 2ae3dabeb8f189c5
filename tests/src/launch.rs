//! Launching and terminating instances in moto, tagged the way Carpool's launches are.

use anyhow::{Context, Result};
use aws_sdk_ec2::types::{InstanceMarketOptionsRequest, InstanceType, MarketType, ResourceType, Tag, TagSpecification};

use crate::instance::Instance;
use crate::stack::Stack;
use crate::tags::{self, TagTaint};

/// A `RunInstances` request for one instance.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// The AMI.
    pub image_id: String,
    /// The subnet, which decides the zone.
    pub subnet_id: String,
    /// Spot rather than on-demand.
    pub spot: bool,
    /// The instance tags.
    pub tags: Vec<(String, String)>,
}

impl Launch {
    /// One `instance_type` instance with the stack's AMI, in its first seeded subnet
    /// (us-east-1a), tagged `carpool.sh/cluster=<cluster>`.
    pub fn new(stack: &Stack, instance_type: &str) -> Result<Self> {
        let subnet_id = stack
            .subnet_ids()?
            .into_iter()
            .next()
            .context("the stack has no subnets")?;
        Ok(Launch {
            instance_type: instance_type.to_string(),
            image_id: stack.ami_id()?.to_string(),
            subnet_id,
            spot: false,
            tags: vec![(tags::CLUSTER.to_string(), stack.cluster()?.to_string())],
        })
    }

    /// Adds a tag.
    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.tags.push((key.to_string(), value.to_string()));
        self
    }

    /// Tags the NodePool as Carpool does (both `carpool.sh/` and `karpenter.sh/nodepool`).
    pub fn nodepool(self, nodepool: &str) -> Self {
        self.tag(tags::CARPOOL_NODEPOOL, nodepool)
            .tag(tags::KARPENTER_NODEPOOL, nodepool)
    }

    /// Asks for node taints (the `carpool.sh/taints` tag).
    pub fn taints(self, taints: &[TagTaint]) -> Result<Self> {
        Ok(self.tag(tags::TAINTS, &tags::encode_taints(taints)?))
    }

    /// Makes the instance never register a Node.
    pub fn never_register(self) -> Self {
        self.tag(tags::NEVER_REGISTER, "true")
    }

    /// Buys spot capacity.
    pub fn spot(mut self) -> Self {
        self.spot = true;
        self
    }

    /// Runs the instance and returns it as moto describes it.
    pub async fn run(&self, ec2: &aws_sdk_ec2::Client) -> Result<Instance> {
        let tags = self.tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build());
        let mut request = ec2
            .run_instances()
            .image_id(&self.image_id)
            .instance_type(InstanceType::from(self.instance_type.as_str()))
            .subnet_id(&self.subnet_id)
            .min_count(1)
            .max_count(1)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(tags.collect()))
                    .build(),
            );
        if self.spot {
            request = request.instance_market_options(
                InstanceMarketOptionsRequest::builder()
                    .market_type(MarketType::Spot)
                    .build(),
            );
        }
        let out = request.send().await.context("RunInstances")?;
        let sdk = out.instances().first().context("RunInstances returned no instance")?;
        Instance::from_sdk(sdk)
    }
}

/// Terminates instances (nothing to do for none).
pub async fn terminate(ec2: &aws_sdk_ec2::Client, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    ec2.terminate_instances()
        .set_instance_ids(Some(ids.to_vec()))
        .send()
        .await
        .with_context(|| format!("TerminateInstances {ids:?}"))?;
    Ok(())
}
