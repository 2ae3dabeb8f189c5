//! A crash at a chosen await point of a run: ports wrapped in [`Crashable`] share one
//! [`CrashPoint`], and from the moment it fires every call on any of them never
//! completes. The test then drops the run's future ([`run_until_crash`]), which is what a
//! Lambda timeout or a crash does: the run stops at that await point, with the state as
//! far as it got, in the store and in the cloud alike.
//!
//! A point fires *at* a call (it never happens) or *after* it returned, so that the call's
//! effect happened and nothing after it did: "after the launch record", "after
//! CreateFleet". It wraps any port, so the crash happens over the real DynamoDB too.

use std::future::Future;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use crate::model::EC2NodeClass;
use crate::ports::{
    Backoff, Cloud, CloudError, DisruptionRecord, Instance, LaunchRecord, LaunchRequest, Lease, NodeRecord,
    OnDemandPrice, ResolvedImage, SpotPrice, StateStore, StoreError, UnavailableOffering, ZonalOffering,
};

/// Where a crash happens.
#[derive(Debug)]
pub struct CrashPoint {
    /// The port method (e.g. `create_launch`, or the cloud's `launch`).
    call: String,
    /// Before the call, or once it returned.
    after: bool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    skip: usize,
    fired: bool,
}

impl CrashPoint {
    /// Fires once the call `call` that follows `skip` earlier ones has returned: its
    /// effect is kept, its answer never reaches the run.
    pub fn after(call: &str, skip: usize) -> Self {
        Self::new(call, true, skip)
    }

    /// Fires as the call `call` that follows `skip` earlier ones starts: it never happens.
    pub fn at(call: &str, skip: usize) -> Self {
        Self::new(call, false, skip)
    }

    fn new(call: &str, after: bool, skip: usize) -> Self {
        CrashPoint {
            call: call.to_string(),
            after,
            state: Mutex::new(State { skip, fired: false }),
        }
    }

    /// Whether the crash happened.
    pub fn fired(&self) -> bool {
        self.lock().fired
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `call`, at this side of it, is where the crash happens (or it happened).
    fn fires(&self, call: &str, after: bool) -> bool {
        let mut state = self.lock();
        if !state.fired && call == self.call && after == self.after {
            if state.skip == 0 {
                state.fired = true;
            } else {
                state.skip -= 1;
            }
        }
        state.fired
    }

    async fn gate(&self, call: &str, after: bool) {
        if self.fires(call, after) {
            std::future::pending::<()>().await;
        }
    }
}

/// A port of which every call passes the shared [`CrashPoint`].
#[derive(Debug)]
pub struct Crashable<'a, P> {
    inner: &'a P,
    point: &'a CrashPoint,
}

impl<'a, P> Crashable<'a, P> {
    /// `inner`, crashing at `point`.
    pub fn new(inner: &'a P, point: &'a CrashPoint) -> Self {
        Crashable { inner, point }
    }
}

/// Drives `run` to its end, or until the crash point fires and the run can go no
/// further; then drops it, as a crash would. Every fake answers at once, so a run that
/// stops making progress is a crashed one. `None` when it crashed.
pub fn run_until_crash<F: Future>(point: &CrashPoint, run: F) -> Option<F::Output> {
    let mut run = std::pin::pin!(run);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    // Far more polls than any run of the fakes needs; a run that never ends is a bug.
    for _ in 0..1_000_000 {
        match run.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return Some(out),
            Poll::Pending if point.fired() => return None,
            Poll::Pending => {}
        }
    }
    None
}

/// One delegating method: the gate before, the call, the gate after.
macro_rules! through {
    ($name:ident ( $($arg:ident : $ty:ty),* ) -> $out:ty) => {
        async fn $name(&self, $($arg: $ty),*) -> $out {
            self.point.gate(stringify!($name), false).await;
            let out = self.inner.$name($($arg),*).await;
            self.point.gate(stringify!($name), true).await;
            out
        }
    };
}

impl<S: StateStore> StateStore for Crashable<'_, S> {
    through!(acquire_lease(job: &str, owner: &str, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError>);
    through!(renew_lease(lease: &Lease, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError>);
    through!(release_lease(lease: &Lease) -> Result<(), StoreError>);
    through!(create_launch(record: &LaunchRecord) -> Result<LaunchRecord, StoreError>);
    through!(update_launch(record: &LaunchRecord) -> Result<LaunchRecord, StoreError>);
    through!(list_launches() -> Result<Vec<LaunchRecord>, StoreError>);
    through!(delete_launch(id: &str) -> Result<(), StoreError>);
    through!(create_node(record: &NodeRecord) -> Result<NodeRecord, StoreError>);
    through!(list_nodes() -> Result<Vec<NodeRecord>, StoreError>);
    through!(delete_node(instance_id: &str) -> Result<(), StoreError>);
    through!(create_disruption(record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError>);
    through!(update_disruption(record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError>);
    through!(list_disruptions() -> Result<Vec<DisruptionRecord>, StoreError>);
    through!(delete_disruption(instance_id: &str) -> Result<(), StoreError>);
    through!(mark_unavailable(offering: &UnavailableOffering) -> Result<(), StoreError>);
    through!(unavailable_offerings(now: SystemTime) -> Result<Vec<UnavailableOffering>, StoreError>);
    through!(create_backoff(backoff: &Backoff) -> Result<Backoff, StoreError>);
    through!(update_backoff(backoff: &Backoff) -> Result<Backoff, StoreError>);
    through!(list_backoffs() -> Result<Vec<Backoff>, StoreError>);
    through!(delete_backoff(nodepool: &str, node_class: &str) -> Result<(), StoreError>);
    through!(event_recorded(id: &str, now: SystemTime) -> Result<bool, StoreError>);
    through!(record_event(id: &str, now: SystemTime, ttl: Duration) -> Result<bool, StoreError>);
}

impl<C: Cloud> Cloud for Crashable<'_, C> {
    through!(launch(request: &LaunchRequest) -> Result<Instance, CloudError>);
    through!(network(node_class: &EC2NodeClass) -> Result<crate::ports::ResolvedNetwork, CloudError>);
    through!(instance_profile(node_class: &EC2NodeClass, deployment: &str) -> Result<Option<String>, CloudError>);
    through!(get(id: &str) -> Result<Instance, CloudError>);
    through!(list() -> Result<Vec<Instance>, CloudError>);
    through!(terminate(id: &str) -> Result<(), CloudError>);
    through!(spot_prices(instance_types: &[String]) -> Result<Vec<SpotPrice>, CloudError>);
    through!(on_demand_prices(instance_types: &[String]) -> Result<Vec<OnDemandPrice>, CloudError>);
    through!(images(node_class: &EC2NodeClass) -> Result<Vec<ResolvedImage>, CloudError>);
    through!(offerings() -> Result<Vec<ZonalOffering>, CloudError>);
    through!(capacity_reservations(node_class: &EC2NodeClass) -> Result<Vec<crate::ports::CapacityReservation>, CloudError>);
}
