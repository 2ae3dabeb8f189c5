//! The Cloud port: Carpool's instances in EC2 (modelled on Karpenter's CloudProvider).

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

use super::clock::EpochMillis;
use crate::model::{CapacityType, EC2NodeClass};

/// One instance type in one zone with one capacity type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OfferingKey {
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
}

/// What to launch for one planned node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchRequest {
    /// The launch id; the instance is tagged with it, so a retried launch can be found.
    pub launch_id: String,
    /// The deployment launching it (`CARPOOL_DEPLOYMENT`); the instance is tagged with it,
    /// and housekeeping terminates only instances that carry this deployment's tag.
    pub deployment: String,
    /// The NodePool.
    pub nodepool: String,
    /// The EC2NodeClass that says how to launch (read from the cluster by this run).
    pub node_class: EC2NodeClass,
    /// The instance types acceptable, cheapest first.
    pub instance_types: Vec<String>,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// Labels the node registers with.
    pub labels: BTreeMap<String, String>,
    /// Taints the node registers with.
    pub taints: Vec<Taint>,
    /// Taints the node starts with, removed by an agent.
    pub startup_taints: Vec<Taint>,
}

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

/// A cloud that cannot do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// No capacity for any of the offerings tried.
    #[error("insufficient capacity for {}", offerings.iter().map(|o| format!("{} in {} ({})", o.instance_type, o.zone, o.capacity_type)).collect::<Vec<_>>().join(", "))]
    InsufficientCapacity {
        /// The offerings that failed.
        offerings: Vec<OfferingKey>,
    },
    /// The instance does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// Throttled, and retries ran out.
    #[error("throttled: {0}")]
    Throttled(String),
    /// The credentials may not do this.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// Any other failure.
    #[error("cloud: {0}")]
    Api(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The request was sent and no answer says what it did: a timeout, a connection lost,
    /// a 5xx after retries. A launch may or may not have happened; it is resolved later
    /// through the launch-id tag.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl CloudError {
    /// Whether the request may have taken effect although it failed
    /// ([`CloudError::OutcomeUnknown`]): a launch that ends so keeps its record in flight.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, CloudError::OutcomeUnknown(..))
    }
}

/// Carpool's instances in one cluster.
///
/// Contract:
/// - `launch` launches exactly one instance (CreateFleet, target capacity 1) of one of the
///   request's types in its zone and capacity type, trying them in the order given; when
///   none has capacity it is `InsufficientCapacity` naming every offering that failed.
///   The instance carries the request's launch id and deployment as tags, read back by
///   `get` and `list`. When the call was sent and its answer is lost, it is
///   `OutcomeUnknown`: the instance may exist, and `list` finds it by its launch-id tag.
/// - `get` of an unknown instance is `NotFound`; `list` returns every instance of this
///   cluster that is not terminated.
/// - `terminate` is idempotent: terminating a terminated or unknown instance succeeds.
/// - `spot_prices`, `on_demand_prices` and `offerings` describe the region as it is now;
///   a type the cloud does not know is simply absent from the answer. On an error from
///   `spot_prices` or `on_demand_prices`, callers fall back to the embedded catalog's
///   prices (and on an error from `offerings`, to its zones): a failed refresh never
///   stops provisioning.
pub trait Cloud: Send + Sync {
    /// Launches one instance for a planned node.
    fn launch(&self, request: &LaunchRequest) -> impl Future<Output = Result<Instance, CloudError>> + Send;
    /// The zones an EC2NodeClass can launch in: those of the subnets it selects.
    fn zones(&self, node_class: &EC2NodeClass) -> impl Future<Output = Result<Vec<String>, CloudError>> + Send;
    /// One instance.
    fn get(&self, id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send;
    /// This cluster's instances that are not terminated.
    fn list(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send;
    /// Terminates an instance.
    fn terminate(&self, id: &str) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// Current spot prices of some types, per zone.
    fn spot_prices(&self, instance_types: &[String])
    -> impl Future<Output = Result<Vec<SpotPrice>, CloudError>> + Send;
    /// Current on-demand prices of some types (USD per hour, Linux, shared tenancy); at
    /// most one per type. Callers fall back to the embedded table on error.
    fn on_demand_prices(
        &self,
        instance_types: &[String],
    ) -> impl Future<Output = Result<Vec<OnDemandPrice>, CloudError>> + Send;
    /// Every instance type offered in each zone of the region.
    fn offerings(&self) -> impl Future<Output = Result<Vec<ZonalOffering>, CloudError>> + Send;
}
