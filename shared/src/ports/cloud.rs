//! The Cloud port: Carpool's instances in EC2 (modelled on Karpenter's CloudProvider).

use std::future::Future;

use crate::model::EC2NodeClass;
pub use crate::model::capacity_reservation::{CapacityReservation, ReservationTarget, ReservationType};
pub use crate::model::image::{ImageVariant, ResolvedImage};
pub use crate::model::instance::{Instance, InstanceState};
pub use crate::model::launch_request::{LaunchRequest, OfferingKey};
pub use crate::model::market::{OnDemandPrice, SpotPrice, ZonalOffering};
pub use crate::model::node_class_reason::NodeClassReason;
pub use crate::model::resolved_network::{InstanceNetwork, ResolvedNetwork, ResolvedSubnet};

/// The error an implementation keeps as the source of a [`CloudError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A cloud that cannot do what was asked.
///
/// Only [`Throttled`](CloudError::Throttled) is worth a blind retry. A
/// [`NodeClass`](CloudError::NodeClass) error is the configuration's: it lasts until
/// someone fixes the EC2NodeClass (or the deployment), so it is not retryable; a launch
/// that fails with it is reported as a failed launch, as any other launch error.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// No capacity for any of the offerings tried.
    #[error("insufficient capacity for {}", offerings.iter().map(|o| format!("{} in {} ({})", o.instance_type, o.zone, o.capacity_type)).collect::<Vec<_>>().join(", "))]
    InsufficientCapacity {
        /// The offerings that failed.
        offerings: Vec<OfferingKey>,
    },
    /// The instance does not exist.
    #[error("{id} not found")]
    NotFound {
        /// The instance (or what was looked for).
        id: String,
        /// The cloud's answer, when it gave an error rather than no instance.
        #[source]
        source: Option<BoxError>,
    },
    /// Throttled, and retries ran out.
    #[error("throttled: {what}")]
    Throttled {
        /// The call and the cloud's error code.
        what: String,
        /// The cloud's error.
        #[source]
        source: BoxError,
    },
    /// The credentials may not do this.
    #[error("unauthorized: {what}")]
    Unauthorized {
        /// The call and the cloud's error code.
        what: String,
        /// The cloud's error.
        #[source]
        source: BoxError,
    },
    /// An EC2NodeClass whose configuration cannot launch.
    #[error("EC2NodeClass {node_class} {reason}")]
    NodeClass {
        /// The class's name.
        node_class: String,
        /// What is wrong with it.
        reason: NodeClassReason,
        /// The error behind the reason, when there is one (the userData's).
        #[source]
        source: Option<BoxError>,
    },
    /// Any other failure.
    #[error("cloud")]
    Api(#[source] BoxError),
    /// The request was sent and no answer says what it did: a timeout, a connection lost,
    /// a 5xx after retries. A launch may or may not have happened; it is resolved later
    /// through the launch-id tag.
    #[error("outcome unknown")]
    OutcomeUnknown(#[source] BoxError),
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
///   none has capacity it is `InsufficientCapacity` naming every offering that failed;
///   when the request's EC2NodeClass cannot launch (no subnet in the zone, no security
///   group, a role without an instance profile, an AMI parameter without a value) it is
///   `NodeClass` with the reason, before anything is launched. The instance carries the
///   request's launch id and deployment as tags, read back by `get` and `list`. When the
///   call was sent and its answer is lost, it is `OutcomeUnknown`: the instance may exist,
///   and `list` finds it by its launch-id tag.
/// - `images` gives at least one image for a class that can launch; a class whose AMIs
///   cannot be resolved (a Windows alias, no image for the terms or the cluster's version)
///   is `NodeClass` with the reason. `launch` uses the image that boots the request's
///   preferred type and launches only the alternatives that image boots.
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
    /// Deletes the launch templates this cluster's launches made that were created at
    /// least `idle` before `now` and that no live instance was launched from; returns
    /// their names. A cloud that makes no templates deletes none.
    fn collect_launch_templates(
        &self,
        now: std::time::SystemTime,
        idle: std::time::Duration,
    ) -> impl Future<Output = Result<Vec<String>, CloudError>> + Send {
        let _ = (now, idle);
        std::future::ready(Ok(Vec::new()))
    }
    /// The subnets and security groups an EC2NodeClass's selector terms select now (the
    /// class can launch in its subnets' zones). Selecting no subnet is
    /// [`NodeClassReason::NoSubnet`], no security group [`NodeClassReason::NoSecurityGroup`]:
    /// the class's own error. The answer may be cached for a few minutes.
    fn network(&self, node_class: &EC2NodeClass) -> impl Future<Output = Result<ResolvedNetwork, CloudError>> + Send;
    /// The instance profile the class's nodes launch with: its `instanceProfile`, else the
    /// one for its `role`, which the cloud may create the first time it is asked for (as
    /// Karpenter's EC2NodeClass controller does, before any launch), tagged as made for
    /// `deployment`; `None` when the class names neither. A role that does not exist is
    /// [`NodeClassReason::RoleNotFound`].
    fn instance_profile(
        &self,
        node_class: &EC2NodeClass,
        deployment: &str,
    ) -> impl Future<Output = Result<Option<String>, CloudError>> + Send;
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
    /// The AMIs an EC2NodeClass resolves to, each with the architecture and variants it
    /// boots: the planner chooses only instance types one of them boots. The answer may
    /// be cached for a few minutes.
    fn images(&self, node_class: &EC2NodeClass) -> impl Future<Output = Result<Vec<ResolvedImage>, CloudError>> + Send;
    /// Every instance type offered in each zone of the region.
    fn offerings(&self) -> impl Future<Output = Result<Vec<ZonalOffering>, CloudError>> + Send;
    /// The active capacity reservations an EC2NodeClass's `capacityReservationSelectorTerms`
    /// select (terms ORed; none for a class with no term), each with the instances it can
    /// still take and when it was asked (Karpenter's `capacityreservation.Provider.List`). A
    /// malformed term is [`NodeClassReason::CapacityReservationSelector`]. A `launch` into
    /// one (a `reserved` request naming it in its labels) targets it alone; when it is full
    /// the launch is `InsufficientCapacity` naming the reserved offering. A cloud that
    /// knows no reservation selects none.
    fn capacity_reservations(
        &self,
        node_class: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<CapacityReservation>, CloudError>> + Send {
        std::future::ready(
            node_class
                .capacity_reservation_terms()
                .map(|_| Vec::new())
                .map_err(|reason| CloudError::NodeClass {
                    node_class: node_class.name().to_string(),
                    reason,
                    source: None,
                }),
        )
    }
}
