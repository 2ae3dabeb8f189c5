//! What the market says of an offering: spot and on-demand prices, and where a type is offered.

use serde::{Deserialize, Serialize};

/// A spot price in one zone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpotPrice {
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// USD per hour.
    pub price: f64,
}

/// An on-demand price (Linux, shared tenancy, no pre-installed software) in the cloud's
/// region.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OnDemandPrice {
    /// The instance type.
    pub instance_type: String,
    /// USD per hour.
    pub price: f64,
}

/// An instance type offered in a zone (either capacity type).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ZonalOffering {
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
}
