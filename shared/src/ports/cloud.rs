//! The Cloud port: Carpool's instances in EC2 (modelled on Karpenter's CloudProvider).

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

use super::clock::EpochMillis;
use crate::model::{Arch, CapacityType, EC2NodeClass, InstanceType};

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

/// Which instance types an image boots besides its architecture, as Karpenter's AMI
/// variants say (`pkg/providers/amifamily/types.go`, `Variant.Requirements`): a standard
/// image boots types with neither GPUs nor accelerators, an NVIDIA image types with GPUs,
/// a Neuron image types with Inferentia or Trainium devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageVariant {
    /// No GPU, no accelerator.
    Standard,
    /// NVIDIA GPUs (`karpenter.k8s.aws/instance-gpu-count` exists).
    Nvidia,
    /// AWS Neuron devices (`karpenter.k8s.aws/instance-accelerator-count` exists).
    Neuron,
}

impl ImageVariant {
    /// Whether an image of this variant boots `it` (its architecture aside).
    pub fn boots(self, it: &InstanceType) -> bool {
        match self {
            ImageVariant::Standard => it.gpu_count == 0 && it.neuron_devices == 0,
            ImageVariant::Nvidia => it.gpu_count > 0,
            ImageVariant::Neuron => it.neuron_devices > 0,
        }
    }
}

/// An AMI an EC2NodeClass resolves to, with the instance types it can boot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResolvedImage {
    /// `ami-…`.
    pub id: String,
    /// Its architecture; `None` when unknown (an AMI named by id or SSM parameter whose
    /// architecture was not read): it constrains no type.
    pub arch: Option<Arch>,
    /// Its variants; empty when unknown: it constrains no type by accelerator.
    pub variants: Vec<ImageVariant>,
}

impl ResolvedImage {
    /// An image of `arch` with these variants.
    pub fn new(id: impl Into<String>, arch: Arch, variants: &[ImageVariant]) -> Self {
        ResolvedImage {
            id: id.into(),
            arch: Some(arch),
            variants: variants.to_vec(),
        }
    }

    /// An image whose architecture and variants are unknown: it boots any type.
    pub fn unconstrained(id: impl Into<String>) -> Self {
        ResolvedImage {
            id: id.into(),
            arch: None,
            variants: Vec::new(),
        }
    }

    /// Whether this image boots `it`: its architecture, and one of its variants.
    pub fn boots(&self, it: &InstanceType) -> bool {
        self.arch.is_none_or(|a| a == it.arch)
            && (self.variants.is_empty() || self.variants.iter().any(|v| v.boots(it)))
    }
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

/// The error an implementation keeps as the source of a [`CloudError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The role a deployment made an instance profile for, as a [`NodeClassReason`] names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredNodeRole {
    /// The IAM role.
    pub role: String,
    /// Its instance profile.
    pub instance_profile: String,
}

/// What is wrong with an EC2NodeClass that keeps it from launching. The message follows
/// the class's name (`EC2NodeClass <name> <reason>`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeClassReason {
    /// Its subnet selector terms select no subnet in the zone asked for.
    #[error("selects no subnet in {zone}")]
    NoSubnetInZone {
        /// The zone.
        zone: String,
    },
    /// Its security group selector terms select no security group.
    #[error("selects no security group")]
    NoSecurityGroup,
    /// It sets a `spec.role` that is not the deployment's node role, and no
    /// `spec.instanceProfile`: Carpool does not create instance profiles.
    #[error(
        "sets spec.role {role:?}, but Carpool does not create instance profiles and was deployed {}; set \
         spec.instanceProfile, or deploy Carpool with node role {role:?}",
        match configured {
            Some(c) => format!("with node role {:?} (instance profile {:?})", c.role, c.instance_profile),
            None => "without a node role".to_string(),
        }
    )]
    RoleWithoutInstanceProfile {
        /// The class's `spec.role`.
        role: String,
        /// The deployment's node role, if it has one.
        configured: Option<ConfiguredNodeRole>,
    },
    /// The SSM parameter that names its AMI has no value.
    #[error("reads its AMI from SSM parameter {parameter}, which has no value")]
    EmptySsmParameter {
        /// The parameter's name.
        parameter: String,
    },
    /// Its AMI alias names a Windows family, which Carpool does not launch.
    #[error("selects AMI alias {alias:?}: Windows nodes are not supported")]
    WindowsAlias {
        /// The alias.
        alias: String,
    },
    /// Its AMI selector terms select no image (no public parameter for the cluster's
    /// Kubernetes version, or no image matching the terms).
    #[error("selects no AMI{}", if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
    NoImage {
        /// What was looked for.
        detail: String,
    },
    /// Its AMIs boot none of the request's instance types.
    #[error("has no AMI that boots any of {instance_types}")]
    NoImageForTypes {
        /// The request's types, comma-separated.
        instance_types: String,
    },
    /// Its `spec.userData` cannot be merged into the node's user data (the error's source
    /// says why).
    #[error("has a userData that cannot be used")]
    UserData,
}

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
    /// The AMIs an EC2NodeClass resolves to, each with the architecture and variants it
    /// boots: the planner chooses only instance types one of them boots. The answer may
    /// be cached for a few minutes.
    fn images(&self, node_class: &EC2NodeClass) -> impl Future<Output = Result<Vec<ResolvedImage>, CloudError>> + Send;
    /// Every instance type offered in each zone of the region.
    fn offerings(&self) -> impl Future<Output = Result<Vec<ZonalOffering>, CloudError>> + Send;
}
