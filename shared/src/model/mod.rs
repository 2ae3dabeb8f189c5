//! Plain types: quantities, resources, pods' requests and node requirements, nodes,
//! instance types, offerings, and the NodePool, EC2NodeClass and NodeOverlay manifests; what the cloud
//! reports (instances, images, prices, why a class cannot launch) and what a launch asks
//! for; the records kept in DynamoDB and time as they hold it; Events on pods; the
//! well-known labels, annotations and taints. Everything else in the crate builds on
//! these, and they build on nothing else in it.

pub mod capacity_buffer;
pub mod capacity_reservation;
pub mod content_hash;
pub mod duration;
pub mod ec2nodeclass;
pub mod image;
pub mod instance;
pub mod instance_type;
pub mod kubelet;
pub mod label_syntax;
pub mod launch_request;
pub mod manifest;
pub mod market;
pub mod metadata_patch;
pub mod node;
pub mod node_class_reason;
pub mod nodeoverlay;
pub mod nodepool;
pub mod offering;
pub mod pod;
pub mod pod_event;
pub mod pod_requests;
pub mod pod_requirements;
pub mod quantity;
pub mod records;
pub mod requirements;
pub mod resolved_network;
pub mod resources;
pub mod rollout_restart;
pub mod time;
pub mod well_known;

pub use capacity_reservation::{
    CapacityReservation, CapacityReservationSelectorTerm, ReservationTarget, ReservationType,
};
pub use duration::NillableDuration;
pub use ec2nodeclass::EC2NodeClass;
pub use image::{ImageVariant, ResolvedImage};
pub use instance::{Instance, InstanceState};
pub use instance_type::{Arch, InstanceType};
pub use metadata_patch::MetadataPatch;
pub use node::Node;
pub use nodeoverlay::{NodeOverlay, PriceChange};
pub use nodepool::{Budget, BudgetNodes, ConsolidationPolicy, DisruptionReason, NodePool};
pub use offering::{CapacityType, Offering};
pub use pod_event::{EventReason, EventType, PodEvent, PodRef};
pub use quantity::Quantity;
pub use records::{
    Backoff, DisruptionRecord, DisruptionStep, FailureReason, LaunchRecord, LaunchState, NodeRecord, Reservation,
};
pub use requirements::{NodeSelectorRequirement, Operator, Requirement, Requirements};
pub use resolved_network::{InstanceNetwork, ResolvedNetwork, ResolvedSubnet};
pub use resources::Resources;
pub use time::EpochMillis;
