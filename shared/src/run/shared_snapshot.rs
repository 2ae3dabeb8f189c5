//! One read of the cluster shared by the records of one invocation, and planning done
//! one record at a time.
//!
//! A mass spot reclaim sends the interruption function batches of ten warnings at once.
//! Each warning's replacement is planned from the whole cluster (the node's pods, and the
//! rest of the cluster for their spreads and affinities): read per record, that is ten
//! full reads of every pod, node and budget per batch, and about a hundred concurrent
//! LISTs when Lambda runs ten batches at once; and ten copies of the cluster, and ten
//! planning views of it, in memory at once.
//!
//! So an invocation reads the cluster once, on first need ([`SharedSnapshot::get`]), and
//! its records plan one at a time ([`SharedSnapshot::planning`]): a record clones what it
//! narrows and plans on, plans, and lets the copy go before the next record plans.
//! Launches, drains and terminations still run concurrently. The snapshot is as fresh as
//! the invocation: what a record's replacement launched is read from the state store
//! (launches in flight, reservations), never from the snapshot. `carpool bench
//! interruption` measures the requests and the memory either way.
//!
//! A batch of spot warnings is a **burst** ([`SharedSnapshot::with_burst`]): its records
//! record the burst's id, and the first to need a replacement plans it for all of them
//! together (the launch path's `replace_burst`), launched under the burst's
//! prefix; the others wait for that plan and adopt it ([`SharedSnapshot::burst_replacement`]).
//! A record resumed later (another invocation) adopts the burst's launches from the
//! store, or, when the burst launched nothing, plans its own node alone.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures_util::lock::{Mutex, MutexGuard};

use crate::ports::{Cluster, ClusterError};
use crate::run::observe::read_snapshot;
use crate::snapshot::Snapshot;

/// The cluster read once for an invocation, and the turn to plan.
#[derive(Default)]
pub struct SharedSnapshot {
    read: Mutex<Option<Arc<Snapshot>>>,
    planning: Mutex<()>,
    burst: Option<Burst>,
}

/// The spot warnings of one batch, replaced together.
struct Burst {
    id: String,
    instances: BTreeSet<String>,
    replacement: Mutex<Option<Arc<BurstLaunch>>>,
}

/// What a burst's replacement launched, as its records report it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BurstLaunch {
    /// The pods it was planned for.
    pub pods: usize,
    /// The launch ids.
    pub launch_ids: Vec<String>,
    /// The instances launched, `id (type, zone, capacity type)`.
    pub instances: Vec<String>,
    /// The pods no replacement could be planned for, with why.
    pub unschedulable: Vec<String>,
}

impl SharedSnapshot {
    /// A cell with nothing read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The snapshot, read from `cluster` by the first caller; the others wait for that
    /// read and share it. A failed read is not kept: the next caller reads again.
    pub async fn get<K: Cluster>(&self, cluster: &K) -> Result<Arc<Snapshot>, ClusterError> {
        let mut read = self.read.lock().await;
        if let Some(snapshot) = read.as_ref() {
            return Ok(Arc::clone(snapshot));
        }
        let snapshot = Arc::new(read_snapshot(cluster).await?);
        *read = Some(Arc::clone(&snapshot));
        Ok(snapshot)
    }

    /// The same, with the spot warnings of `instances` (at least two) as one burst; its id
    /// is named after them (`burst-<hash>`), the same for the same instances.
    #[must_use]
    pub fn with_burst(mut self, instances: BTreeSet<String>) -> Self {
        if instances.len() >= 2 {
            let id = format!("burst-{}", &crate::model::content_hash::content_hash(&instances)[..12]);
            self.burst = Some(Burst {
                id,
                instances,
                replacement: Mutex::new(None),
            });
        }
        self
    }

    /// The burst's id, when `instance` is one of its spot warnings.
    pub fn burst_of(&self, instance: &str) -> Option<&str> {
        self.burst
            .as_ref()
            .filter(|b| b.instances.contains(instance))
            .map(|b| b.id.as_str())
    }

    /// The burst's instances, when `id` is its id.
    pub fn burst_instances(&self, id: &str) -> Option<&BTreeSet<String>> {
        self.burst.as_ref().filter(|b| b.id == id).map(|b| &b.instances)
    }

    /// The replacement of the burst `id`: planned and launched by the first caller
    /// (`plan`), shared with the others, who wait for it. A plan that failed is not
    /// kept: the next caller plans again. `None` when `id` is not this invocation's burst.
    pub async fn burst_replacement<E, F, Fut>(&self, id: &str, plan: F) -> Option<Result<Arc<BurstLaunch>, E>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<BurstLaunch, E>>,
    {
        let burst = self.burst.as_ref().filter(|b| b.id == id)?;
        let mut cell = burst.replacement.lock().await;
        if let Some(done) = cell.as_ref() {
            return Some(Ok(Arc::clone(done)));
        }
        Some(plan().await.map(|r| {
            let r = Arc::new(r);
            *cell = Some(Arc::clone(&r));
            r
        }))
    }

    /// The turn to plan: held while a record copies, narrows and plans on the snapshot.
    pub async fn planning(&self) -> MutexGuard<'_, ()> {
        self.planning.lock().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::{ClusterErrorKind, FakeCluster, Yielding};
    use futures_util::future::join_all;

    fn lists_of_pods(cluster: &FakeCluster) -> usize {
        cluster.calls().iter().filter(|c| *c == "scheduled_pods").count()
    }

    #[test]
    fn ten_records_that_need_the_cluster_at_once_read_it_once() {
        let cluster = FakeCluster::new();
        // Each call takes a turn: the ten reads are in flight together, as over the network.
        let slow = Yielding::new(&cluster);
        let shared = SharedSnapshot::new();
        let reads = pollster::block_on(join_all((0..10).map(|_| shared.get(&slow))));
        assert!(reads.iter().all(Result::is_ok));
        assert_eq!(lists_of_pods(&cluster), 1, "{:?}", cluster.calls());
    }

    #[test]
    fn a_read_that_failed_is_not_kept_and_the_next_record_reads_again() {
        let cluster = FakeCluster::new();
        let shared = SharedSnapshot::new();
        cluster.fail_next(ClusterErrorKind::Throttled);
        assert!(pollster::block_on(shared.get(&cluster)).is_err());
        assert!(pollster::block_on(shared.get(&cluster)).is_ok());
        assert!(pollster::block_on(shared.get(&cluster)).is_ok());
        assert_eq!(lists_of_pods(&cluster), 1, "read again once, then shared");
    }

    #[test]
    fn a_burst_plan_that_failed_is_not_kept_and_the_next_record_plans_it_and_shares_it() {
        let ids: BTreeSet<String> = ["i-1", "i-2", "i-3"].map(String::from).into();
        let shared = SharedSnapshot::new().with_burst(ids);
        let id = shared.burst_of("i-1").expect("a member").to_string();
        assert_eq!(shared.burst_of("i-9"), None);
        let planned = |ok: bool| async move {
            if ok {
                Ok(BurstLaunch {
                    pods: 4,
                    launch_ids: vec![format!("disrupt-{id}-0", id = "b")],
                    ..BurstLaunch::default()
                })
            } else {
                Err("CreateFleet throttled")
            }
        };
        let first = pollster::block_on(shared.burst_replacement(&id, || planned(false)));
        assert!(matches!(first, Some(Err(_))));
        let second = pollster::block_on(shared.burst_replacement(&id, || planned(true)));
        assert_eq!(second.and_then(Result::ok).map(|b| b.pods), Some(4));
        // The third record adopts the plan: its own would have failed.
        let third = pollster::block_on(shared.burst_replacement(&id, || planned(false)));
        assert_eq!(third.and_then(Result::ok).map(|b| b.pods), Some(4));
        assert!(pollster::block_on(shared.burst_replacement("another", || planned(true))).is_none());
    }

    #[test]
    fn one_warning_is_no_burst() {
        let shared = SharedSnapshot::new().with_burst(["i-1".to_string()].into());
        assert_eq!(shared.burst_of("i-1"), None);
    }
}
