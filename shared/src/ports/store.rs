//! The StateStore port: Carpool's state in one DynamoDB table.

use std::future::Future;
use std::time::{Duration, SystemTime};

pub use crate::model::records::{
    Backoff, DisruptionRecord, DisruptionStep, FailureReason, LaunchRecord, LaunchState, Lease, NodeRecord,
    Reservation, UnavailableOffering, sort_key,
};

/// A state store that cannot do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional write lost a race, or the item is held by someone else.
    #[error("conflict on {key}: {detail}")]
    Conflict {
        /// The item's sort key.
        key: String,
        /// What the condition found.
        detail: String,
    },
    /// The item does not exist.
    #[error("{key} not found")]
    NotFound {
        /// The item's sort key.
        key: String,
        /// The service's answer, when it gave one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The service throttled the call and retries ran out.
    #[error("throttled: {what}")]
    Throttled {
        /// The item (or the call) and the service's error code.
        what: String,
        /// The service's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Any other failure of the service.
    #[error("state store")]
    Api(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Carpool's state, in one DynamoDB table (see DESIGN.md): the partition key is the
/// cluster, sort-key prefixes name the kinds. Every write that could race is conditional.
///
/// Contract (checked by [`crate::fakes::store_contract`] against every implementation):
/// - `acquire_lease` succeeds when the lease is free, expired, or already the caller's;
///   otherwise it is a `Conflict` naming the holder.
/// - `renew_lease` and `release_lease` succeed only for the current holder.
/// - `create_*` is a `Conflict` when the item exists; `update_*` is a `Conflict` when the
///   stored version is not the one given, and stores the record with its version plus one.
/// - `delete_*` of a missing item succeeds (idempotent).
/// - `record_event` returns `true` the first time an id is seen, `false` after;
///   `event_recorded` says whether it was (and has not expired at `now`), writing nothing.
/// - `unavailable_offerings` returns only entries not yet expired at `now` (DynamoDB TTL
///   deletes lazily, so expiry is also checked on read).
pub trait StateStore: Send + Sync {
    /// Takes the lease of `job` for `owner` until `now + ttl`.
    fn acquire_lease(
        &self,
        job: &str,
        owner: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;
    /// Extends a held lease to `now + ttl`.
    fn renew_lease(
        &self,
        lease: &Lease,
        now: SystemTime,
        ttl: Duration,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;
    /// Gives a held lease up.
    fn release_lease(&self, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Records a new launch (version 1).
    fn create_launch(&self, record: &LaunchRecord) -> impl Future<Output = Result<LaunchRecord, StoreError>> + Send;
    /// Replaces a launch whose stored version is `record.version`.
    fn update_launch(&self, record: &LaunchRecord) -> impl Future<Output = Result<LaunchRecord, StoreError>> + Send;
    /// Every launch record.
    fn list_launches(&self) -> impl Future<Output = Result<Vec<LaunchRecord>, StoreError>> + Send;
    /// Deletes a launch record.
    fn delete_launch(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Records a node Carpool owns (version 1).
    fn create_node(&self, record: &NodeRecord) -> impl Future<Output = Result<NodeRecord, StoreError>> + Send;
    /// Every node record.
    fn list_nodes(&self) -> impl Future<Output = Result<Vec<NodeRecord>, StoreError>> + Send;
    /// Deletes a node record.
    fn delete_node(&self, instance_id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Starts a disruption (version 1); a `Conflict` if one is already recorded.
    fn create_disruption(
        &self,
        record: &DisruptionRecord,
    ) -> impl Future<Output = Result<DisruptionRecord, StoreError>> + Send;
    /// Advances a disruption whose stored version is `record.version`.
    fn update_disruption(
        &self,
        record: &DisruptionRecord,
    ) -> impl Future<Output = Result<DisruptionRecord, StoreError>> + Send;
    /// Every disruption in progress.
    fn list_disruptions(&self) -> impl Future<Output = Result<Vec<DisruptionRecord>, StoreError>> + Send;
    /// Deletes a disruption record.
    fn delete_disruption(&self, instance_id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Marks an offering unavailable until `offering.until` (TTL).
    fn mark_unavailable(&self, offering: &UnavailableOffering) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The offerings still unavailable at `now`.
    fn unavailable_offerings(
        &self,
        now: SystemTime,
    ) -> impl Future<Output = Result<Vec<UnavailableOffering>, StoreError>> + Send;

    /// Records the failures of a NodePool and EC2NodeClass (version 1).
    fn create_backoff(&self, backoff: &Backoff) -> impl Future<Output = Result<Backoff, StoreError>> + Send;
    /// Replaces a backoff whose stored version is `backoff.version`.
    fn update_backoff(&self, backoff: &Backoff) -> impl Future<Output = Result<Backoff, StoreError>> + Send;
    /// Every backoff record.
    fn list_backoffs(&self) -> impl Future<Output = Result<Vec<Backoff>, StoreError>> + Send;
    /// Forgets the failures of a NodePool and EC2NodeClass (a node of theirs registered).
    fn delete_backoff(&self, nodepool: &str, node_class: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether an event id was recorded and has not expired at `now`.
    fn event_recorded(&self, id: &str, now: SystemTime) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records an event id; `true` when it is new. The key expires after `ttl`.
    fn record_event(
        &self,
        id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}
