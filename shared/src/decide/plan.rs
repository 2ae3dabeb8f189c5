//! The provisioning plan: a value, printed by the CLI and executed by the provisioner.

use serde::{Deserialize, Serialize};

use super::templates::Skipped;
use crate::model::{CapacityType, Resources};

/// Alternatives carried per node for CreateFleet flexibility.
pub const MAX_ALTERNATIVES: usize = 60;

/// A node to launch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedNode {
    /// The NodePool it belongs to.
    pub nodepool: String,
    /// The cheapest instance type that fits its pods.
    pub instance_type: String,
    /// Every instance type that fits its pods and constraints, cheapest first (at most 60),
    /// starting with `instance_type`.
    pub instance_types: Vec<String>,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour of `instance_type` in this zone and capacity type.
    pub price_per_hour: f64,
    /// The pods planned onto it, as `namespace/name`.
    pub pods: Vec<String>,
    /// The pods' total requests.
    pub requests: Resources,
    /// What the DaemonSets that land on it request.
    pub daemonset_overhead: Resources,
    /// Allocatable of `instance_type`.
    pub allocatable: Resources,
}

/// Pods planned onto a node that exists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExistingPlacement {
    /// The node name.
    pub node: String,
    /// The pods, as `namespace/name`.
    pub pods: Vec<String>,
}

/// A pod no node can take, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unschedulable {
    /// `namespace/name`.
    pub pod: String,
    /// The constraint that failed, then the details.
    pub reason: String,
}

/// What to launch for the pending pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvisioningPlan {
    /// New nodes.
    pub nodes: Vec<PlannedNode>,
    /// Pods placed on existing nodes.
    pub existing: Vec<ExistingPlacement>,
    /// Pods that cannot be placed.
    pub unschedulable: Vec<Unschedulable>,
    /// NodePools and EC2NodeClasses left out, and why.
    pub skipped: Vec<Skipped>,
    /// Total USD per hour of the new nodes.
    pub cost_per_hour: f64,
    /// A lower bound on the USD per hour of any valid plan placing the same pods on new
    /// nodes, when computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound_per_hour: Option<f64>,
}
