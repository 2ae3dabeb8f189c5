//! A StateStore that dies at a chosen call: from that call on, every call on it never
//! completes. A test drops the run's future there (a timeout), which is what a Lambda
//! timeout or a crash does to a run: it stops at that await point, with the state as far as
//! it got. It wraps any store, so the fault happens on the real DynamoDB too.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::ports::{
    Backoff, DisruptionRecord, LaunchRecord, Lease, NodeRecord, StateStore, StoreError, UnavailableOffering,
};

/// `inner`, until the first call named `at` (a method of [`StateStore`], e.g.
/// `"create_launch"`, after `skip` earlier such calls); then every call hangs.
pub struct DyingStore<'a, S> {
    inner: &'a S,
    at: String,
    skip: Mutex<usize>,
    dead: Mutex<bool>,
}

impl<'a, S> DyingStore<'a, S> {
    /// Dies at the first call of the method `at`.
    pub fn at(inner: &'a S, at: &str) -> Self {
        Self::after(inner, at, 0)
    }

    /// Dies at the call of the method `at` that follows `skip` of them.
    pub fn after(inner: &'a S, at: &str, skip: usize) -> Self {
        DyingStore {
            inner,
            at: at.to_string(),
            skip: Mutex::new(skip),
            dead: Mutex::new(false),
        }
    }

    /// Whether it has died.
    pub fn is_dead(&self) -> bool {
        *self.dead.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn gate(&self, call: &str) {
        let hang = {
            let mut dead = self.dead.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !*dead && call == self.at {
                let mut skip = self.skip.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if *skip == 0 {
                    *dead = true;
                } else {
                    *skip -= 1;
                }
            }
            *dead
        };
        if hang {
            std::future::pending::<()>().await;
        }
    }
}

impl<S: StateStore> StateStore for DyingStore<'_, S> {
    async fn acquire_lease(&self, job: &str, owner: &str, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError> {
        self.gate("acquire_lease").await;
        self.inner.acquire_lease(job, owner, now, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError> {
        self.gate("renew_lease").await;
        self.inner.renew_lease(lease, now, ttl).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.gate("release_lease").await;
        self.inner.release_lease(lease).await
    }
    async fn create_launch(&self, record: &LaunchRecord) -> Result<LaunchRecord, StoreError> {
        self.gate("create_launch").await;
        self.inner.create_launch(record).await
    }
    async fn update_launch(&self, record: &LaunchRecord) -> Result<LaunchRecord, StoreError> {
        self.gate("update_launch").await;
        self.inner.update_launch(record).await
    }
    async fn list_launches(&self) -> Result<Vec<LaunchRecord>, StoreError> {
        self.gate("list_launches").await;
        self.inner.list_launches().await
    }
    async fn delete_launch(&self, id: &str) -> Result<(), StoreError> {
        self.gate("delete_launch").await;
        self.inner.delete_launch(id).await
    }
    async fn create_node(&self, record: &NodeRecord) -> Result<NodeRecord, StoreError> {
        self.gate("create_node").await;
        self.inner.create_node(record).await
    }
    async fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.gate("list_nodes").await;
        self.inner.list_nodes().await
    }
    async fn delete_node(&self, instance_id: &str) -> Result<(), StoreError> {
        self.gate("delete_node").await;
        self.inner.delete_node(instance_id).await
    }
    async fn create_disruption(&self, record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError> {
        self.gate("create_disruption").await;
        self.inner.create_disruption(record).await
    }
    async fn update_disruption(&self, record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError> {
        self.gate("update_disruption").await;
        self.inner.update_disruption(record).await
    }
    async fn list_disruptions(&self) -> Result<Vec<DisruptionRecord>, StoreError> {
        self.gate("list_disruptions").await;
        self.inner.list_disruptions().await
    }
    async fn delete_disruption(&self, instance_id: &str) -> Result<(), StoreError> {
        self.gate("delete_disruption").await;
        self.inner.delete_disruption(instance_id).await
    }
    async fn mark_unavailable(&self, offering: &UnavailableOffering) -> Result<(), StoreError> {
        self.gate("mark_unavailable").await;
        self.inner.mark_unavailable(offering).await
    }
    async fn unavailable_offerings(&self, now: SystemTime) -> Result<Vec<UnavailableOffering>, StoreError> {
        self.gate("unavailable_offerings").await;
        self.inner.unavailable_offerings(now).await
    }
    async fn create_backoff(&self, backoff: &Backoff) -> Result<Backoff, StoreError> {
        self.gate("create_backoff").await;
        self.inner.create_backoff(backoff).await
    }
    async fn update_backoff(&self, backoff: &Backoff) -> Result<Backoff, StoreError> {
        self.gate("update_backoff").await;
        self.inner.update_backoff(backoff).await
    }
    async fn list_backoffs(&self) -> Result<Vec<Backoff>, StoreError> {
        self.gate("list_backoffs").await;
        self.inner.list_backoffs().await
    }
    async fn delete_backoff(&self, nodepool: &str, node_class: &str) -> Result<(), StoreError> {
        self.gate("delete_backoff").await;
        self.inner.delete_backoff(nodepool, node_class).await
    }
    async fn event_recorded(&self, id: &str, now: SystemTime) -> Result<bool, StoreError> {
        self.gate("event_recorded").await;
        self.inner.event_recorded(id, now).await
    }
    async fn record_event(&self, id: &str, now: SystemTime, ttl: Duration) -> Result<bool, StoreError> {
        self.gate("record_event").await;
        self.inner.record_event(id, now, ttl).await
    }
}
