//! An offering: one instance type in one zone with one capacity type, at a price.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::instance_type::InstanceType;
use super::well_known as wk;

/// How an instance is bought.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    /// Spot: cheaper, can be interrupted with two minutes' notice.
    Spot,
    /// On-demand.
    OnDemand,
    /// A capacity reservation's (an ODCR or a Capacity Block for ML) that the node's
    /// EC2NodeClass selects (Karpenter v1.3+'s `reserved`): used first, never past the
    /// reservation's available count (see [`crate::model::capacity_reservation`]).
    Reserved,
}

impl CapacityType {
    /// The `karpenter.sh/capacity-type` value.
    pub fn label(self) -> &'static str {
        match self {
            CapacityType::Spot => "spot",
            CapacityType::OnDemand => "on-demand",
            CapacityType::Reserved => "reserved",
        }
    }

    /// The two the market sells at a listed price, spot first (the preferred one); a
    /// `reserved` offering exists only where a selected reservation has room.
    pub const ALL: [CapacityType; 2] = [CapacityType::Spot, CapacityType::OnDemand];
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for CapacityType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spot" => Ok(CapacityType::Spot),
            "on-demand" => Ok(CapacityType::OnDemand),
            "reserved" => Ok(CapacityType::Reserved),
            other => Err(format!(
                "unknown capacity type {other:?}; use spot, on-demand or reserved"
            )),
        }
    }
}

/// One instance type × zone × capacity type, with its hourly price.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offering {
    /// The instance type name.
    pub instance_type: String,
    /// The availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// False while the offering is known to be out of capacity.
    pub available: bool,
}

impl Offering {
    /// Every well-known label a node launched from this offering carries.
    pub fn labels(&self, it: &InstanceType, region: &str) -> BTreeMap<String, String> {
        let mut l = it.labels();
        l.insert(wk::ZONE.to_string(), self.zone.clone());
        l.insert(wk::REGION.to_string(), region.to_string());
        l.insert(wk::CAPACITY_TYPE.to_string(), self.capacity_type.label().to_string());
        l
    }
}
