//! What an EC2NodeClass's subnet and security group selector terms resolve to now, and
//! where an instance was launched in the network: the inputs of the subnet and security
//! group drift (Karpenter's `isSubnetDrifted`, `areSecurityGroupsDrifted`) and of the
//! class's `status.subnets` and `status.securityGroups`.

use serde::{Deserialize, Serialize};

/// One subnet a class's terms select.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResolvedSubnet {
    /// `subnet-…`.
    pub id: String,
    /// Its availability zone.
    pub zone: String,
}

/// The subnets and security groups a class's terms select, each sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedNetwork {
    /// The subnets, by id.
    pub subnets: Vec<ResolvedSubnet>,
    /// The security group ids.
    pub security_groups: Vec<String>,
}

impl ResolvedNetwork {
    /// The zones the subnets are in, sorted, without repeats: where the class can launch.
    pub fn zones(&self) -> Vec<String> {
        let zones: std::collections::BTreeSet<&str> = self
            .subnets
            .iter()
            .map(|s| s.zone.as_str())
            .filter(|z| !z.is_empty())
            .collect();
        zones.into_iter().map(str::to_string).collect()
    }
}

/// Where an instance sits in the network, as EC2 reports it; empty when not reported (an
/// instance described before this was read, or a fake's), which no drift is found from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceNetwork {
    /// The subnet of its primary network interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// Its security group ids, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
}
