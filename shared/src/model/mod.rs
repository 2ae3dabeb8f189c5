//! Plain types: quantities, resources, pods' requests and node requirements, nodes,
//! instance types, offerings, and the NodePool and EC2NodeClass manifests.

pub mod content_hash;
pub mod duration;
pub mod ec2nodeclass;
pub mod instance_type;
pub mod kubelet;
pub mod manifest;
pub mod node;
pub mod nodepool;
pub mod offering;
pub mod pod;
pub mod pod_requests;
pub mod pod_requirements;
pub mod quantity;
pub mod requirements;
pub mod resources;
pub mod well_known;

pub use duration::NillableDuration;
pub use ec2nodeclass::EC2NodeClass;
pub use instance_type::{Arch, InstanceType};
pub use node::Node;
pub use nodepool::{Budget, BudgetNodes, ConsolidationPolicy, DisruptionReason, NodePool};
pub use offering::{CapacityType, Offering};
pub use quantity::Quantity;
pub use requirements::{NodeSelectorRequirement, Operator, Requirement, Requirements};
pub use resources::Resources;
