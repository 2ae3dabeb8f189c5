//! Ports: the effects Carpool has on the world, as small traits with documented contracts.
//!
//! The functions' handlers are generic over these traits. The real implementations live in
//! `carpool-adapters` (EC2, DynamoDB, the Kubernetes API); stateful in-memory fakes live in
//! [`crate::fakes`] (feature `test-util`), for tests and the simulator.
//!
//! The data the traits take and return are model types ([`crate::model`]); this module
//! re-exports those its traits name, so that an implementation needs one import.
//!
//! The traits are async without a runtime: methods return `impl Future + Send`, so this
//! crate needs no tokio.

mod clock;
mod cloud;
mod cluster;
mod store;

pub use crate::model::pod_event::{EventReason, EventType, MAX_MESSAGE_BYTES, PodEvent, PodRef};
pub use clock::{Clock, EpochMillis, Timer, epoch_millis};
pub use cloud::{BoxError, CapacityReservation, NodeClassReason, ReservationTarget, ReservationType};
pub use cloud::{
    Cloud, CloudError, ImageVariant, Instance, InstanceNetwork, InstanceState, LaunchRequest, OfferingKey,
    OnDemandPrice, ResolvedImage, ResolvedNetwork, ResolvedSubnet, SpotPrice, ZonalOffering,
};
pub use cluster::{Cluster, ClusterError, Eviction, InvalidObject, MetadataPatch, StatusOf, Validated};
pub use store::{
    Backoff, DisruptionRecord, DisruptionStep, FailureReason, LaunchRecord, LaunchState, Lease, NodeRecord,
    Reservation, StateStore, StoreError, UnavailableOffering, sort_key,
};
