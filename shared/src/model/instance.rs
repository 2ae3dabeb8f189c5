//! An EC2 instance as the cloud reports it.

use serde::{Deserialize, Serialize};

use crate::model::CapacityType;
use crate::model::resolved_network::InstanceNetwork;
use crate::model::time::EpochMillis;

/// Where an instance stands, as EC2 says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    /// Booting.
    Pending,
    /// Running.
    Running,
    /// Terminating.
    ShuttingDown,
    /// Gone.
    Terminated,
    /// Stopping.
    Stopping,
    /// Stopped.
    Stopped,
}

/// An instance Carpool launched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// `i-…`.
    pub id: String,
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// The NodePool it was launched for.
    pub nodepool: String,
    /// The launch id it was launched for (its launch-id tag; empty without one).
    pub launch_id: String,
    /// The deployment that launched it (its deployment tag); `None` without one: an
    /// instance tagged for the cluster by someone else, or launched before the tag existed.
    pub deployment: Option<String>,
    /// Where it stands.
    pub state: InstanceState,
    /// When it was launched; `None` when EC2 did not say (such an instance is never
    /// terminated by housekeeping).
    pub launched_at: Option<EpochMillis>,
    /// Its subnet and security groups.
    #[serde(default)]
    pub network: InstanceNetwork,
}

impl Instance {
    /// Whether it is on its way out: shutting down or terminated.
    pub fn is_gone(&self) -> bool {
        matches!(self.state, InstanceState::ShuttingDown | InstanceState::Terminated)
    }

    /// `aws:///<zone>/<id>`, as the node's providerID.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }
}
