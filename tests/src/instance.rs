//! An EC2 instance as the harness sees it: the facts a kubelet would know at boot.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use aws_sdk_ec2::types::{Filter, InstanceLifecycleType, InstanceStateName};
use carpool::model::CapacityType;

use crate::tags;

/// The facts of one instance that decide its Node.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// `i-...`.
    pub id: String,
    /// `running`, `terminated`...
    pub state: InstanceStateName,
    /// The instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// The availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// The private DNS name (`ip-10-20-0-5.ec2.internal`), if EC2 gave one.
    pub private_dns_name: Option<String>,
    /// The private IPv4 address, if any.
    pub private_ip: Option<String>,
    /// Spot when EC2 reports `InstanceLifecycle=spot`, else on-demand.
    pub capacity_type: CapacityType,
    /// Every tag.
    pub tags: BTreeMap<String, String>,
}

impl Instance {
    /// Reads the SDK's instance; an error names what is missing.
    pub fn from_sdk(i: &aws_sdk_ec2::types::Instance) -> Result<Self> {
        let id = i.instance_id().context("instance without an id")?.to_string();
        let non_empty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
        Ok(Instance {
            state: i
                .state()
                .and_then(|s| s.name())
                .cloned()
                .with_context(|| format!("{id}: no state"))?,
            instance_type: i
                .instance_type()
                .map(|t| t.as_str().to_string())
                .with_context(|| format!("{id}: no instance type"))?,
            zone: i
                .placement()
                .and_then(|p| p.availability_zone())
                .map(str::to_string)
                .with_context(|| format!("{id}: no availability zone"))?,
            private_dns_name: non_empty(i.private_dns_name()),
            private_ip: non_empty(i.private_ip_address()),
            // moto answers 500 to the `instance-lifecycle` filter, so read the field.
            capacity_type: match i.instance_lifecycle() {
                Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
                _ => CapacityType::OnDemand,
            },
            tags: i
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
                .collect(),
            id,
        })
    }

    /// The Node name a kubelet on EKS would register: the private DNS name, else the id.
    pub fn node_name(&self) -> String {
        self.private_dns_name.clone().unwrap_or_else(|| self.id.clone())
    }

    /// `aws:///<zone>/<instance-id>`, as the AWS cloud provider writes it.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }

    /// Whether the launch asked that this instance never register.
    pub fn never_registers(&self) -> bool {
        self.tags.get(tags::NEVER_REGISTER).is_some_and(|v| v == "true")
    }

    /// Whether the instance is gone or going (its Node must go too).
    pub fn is_terminating(&self) -> bool {
        matches!(
            self.state,
            InstanceStateName::ShuttingDown | InstanceStateName::Terminated
        )
    }
}

/// The instance id at the end of a provider id (`aws:///us-east-1a/i-0abc` -> `i-0abc`).
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix("aws:///")?
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
}

/// The instances tagged `carpool.sh/cluster=<cluster>` (and `tag`, if given) that are
/// running, shutting down or terminated. `DescribeInstances` pages are followed.
pub async fn list(ec2: &aws_sdk_ec2::Client, cluster: &str, tag: Option<&(String, String)>) -> Result<Vec<Instance>> {
    let mut filters = vec![
        Filter::builder()
            .name(format!("tag:{}", tags::CLUSTER))
            .values(cluster)
            .build(),
        Filter::builder()
            .name("instance-state-name")
            .values("running")
            .values("shutting-down")
            .values("terminated")
            .build(),
    ];
    if let Some((k, v)) = tag {
        filters.push(Filter::builder().name(format!("tag:{k}")).values(v).build());
    }
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = ec2
            .describe_instances()
            .set_filters(Some(filters.clone()))
            .set_next_token(token)
            .send()
            .await
            .context("DescribeInstances")?;
        for i in page.reservations().iter().flat_map(|r| r.instances()) {
            out.push(Instance::from_sdk(i)?);
        }
        token = page.next_token().filter(|t| !t.is_empty()).map(str::to_string);
        if token.is_none() {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_id_is_read_from_the_provider_id() {
        assert_eq!(instance_id_of("aws:///us-east-1a/i-0abc"), Some("i-0abc"));
        assert_eq!(instance_id_of("kwok://node-1"), None);
        assert_eq!(instance_id_of("aws:///us-east-1a/"), None);
    }
}
