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
    /// Its free IP addresses (EC2's `AvailableIpAddressCount`), when the cloud reported
    /// them: a zone whose subnets cannot hold a node's pods' addresses gets no node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_ips: Option<u32>,
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

    /// Per zone, the most free IP addresses one of its subnets has, for the zones whose
    /// subnets all reported theirs (a node's pods take their addresses from the subnet the
    /// node is in, so it is the fullest subnet's count that matters, as Karpenter's
    /// `ZonalSubnetsForLaunch` picks the subnet with the most).
    pub fn free_ips_by_zone(&self) -> std::collections::BTreeMap<String, u32> {
        let mut out: std::collections::BTreeMap<String, Option<u32>> = std::collections::BTreeMap::new();
        for s in self.subnets.iter().filter(|s| !s.zone.is_empty()) {
            let e = out.entry(s.zone.clone()).or_insert(Some(0));
            *e = match (*e, s.available_ips) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        out.into_iter().filter_map(|(z, n)| Some((z, n?))).collect()
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
